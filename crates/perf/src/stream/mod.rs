//! `warren perf stream [flags]`: stream-perf-test's load over the RabbitMQ stream protocol
//! (port 5552), with its flags and its per-second and summary lines.
//!
//! Producers and consumers each have a connection of their own, spread round `--uris` and
//! `--streams`. Commands are encoded and decoded with warren-proto's `stream` codec, except
//! the publish frame, which `publish` writes in place with no allocation per message. Each
//! body starts with the latency stamp (`body::Stamp`, `clock::now_ns`), read back by the
//! consumers from every record of every chunk (`chunk`).

mod chunk;
mod connection;
mod consumer;
mod options;
mod producer;
mod publish;
mod report;
mod run;

pub use connection::{code_name, StreamConnection};
pub use options::{parse_byte_size, parse_offset, parse_stream_uri, StreamOptions, HELP};
pub use publish::{MessageTemplate, PublishPlan};
pub use report::{IntervalLine, StreamReport};
pub use run::run;

use std::io::Write;

use crate::error::PerfError;

/// Entry point for `warren perf stream ARGS...` (the arguments after `stream`).
pub fn command(args: &[String]) -> Result<(), PerfError> {
    let Some(options) = StreamOptions::parse(args)? else {
        print!("{HELP}");
        return Ok(());
    };
    let threads = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(2))
        .enable_all()
        .build()
        .map_err(|error| PerfError::io("starting the async runtime", &error))?;
    let mut stdout = std::io::stdout();
    runtime.block_on(run(&options, &mut stdout))?;
    stdout.flush().ok();
    Ok(())
}
