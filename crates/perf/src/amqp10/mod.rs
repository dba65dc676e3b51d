//! `warren perf amqp10 URL [flags]`: quiver's AMQP 1.0 sender/receiver pair (same flags, same
//! RESULTS block). A sender connection sends COUNT messages (unsettled unless `--presettled`)
//! and counts the broker's dispositions; a receiver connection grants `--credit`, topped up,
//! and accepts every message. Latency is measured from the stamp the sender writes into each
//! body (`body::Stamp`, `clock::now_ns`), as the AMQP 0.9.1 mode does.

pub mod link;
mod options;
mod report;
mod run;

pub use options::Amqp10Options;
pub use report::{thousands, Amqp10Report};
pub use run::run;

use std::io::Write;

use crate::error::PerfError;

/// Entry point for `warren perf amqp10 ARGS...` (the arguments after `amqp10`).
pub fn command(args: &[String]) -> Result<(), PerfError> {
    let Some(options) = Amqp10Options::parse(args)? else {
        print!("{}", options::HELP);
        return Ok(());
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| PerfError::io("starting the async runtime", &error))?;
    let mut stdout = std::io::stdout();
    let report = runtime.block_on(run(&options, &mut stdout))?;
    stdout.flush().ok();
    if !report.complete {
        return Err(PerfError::Broker(format!(
            "the run timed out after {} s: sent {}, accepted {}, received {} of {}",
            options.timeout_s, report.sent, report.accepted, report.received, options.count
        )));
    }
    Ok(())
}
