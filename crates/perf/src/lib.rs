//! `warren perf`: a load generator that takes RabbitMQ PerfTest's flags and prints PerfTest's
//! lines, so that the same workload can be run against Warren and RabbitMQ with either tool.
//!
//! Layout: `args` and `options` read the command line; `topology` works out queues and routing;
//! `driver` is the protocol abstraction and `amqp091` its first implementation (`amqp10` and
//! `stream` are runs of their own, with quiver's and stream-perf-test's flags); `producer` and
//! `consumer` are the protocol-independent tasks; `run` (load), `sweep` and `connections` are
//! the three kinds of run (`sources` and `open_files` serve the last); `report` holds the
//! figures and `chart` draws them.

pub mod amqp091;
pub mod amqp10;
pub mod args;
pub mod body;
pub mod chart;
pub mod clock;
pub mod confirm;
pub mod connections;
pub mod consumer;
pub mod control;
pub mod cpu;
pub mod driver;
pub mod error;
pub mod open_files;
pub mod options;
pub mod order;
pub mod producer;
pub mod rate;
pub mod report;
pub mod run;
pub mod sources;
pub mod stats;
pub mod stream;
pub mod sweep;
pub mod topology;
pub mod uri;

use std::io::Write;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::amqp091::Amqp091;
use crate::driver::Driver;
use crate::error::PerfError;
use crate::options::{Mode, RunOptions};
use crate::report::Report;

/// Entry point of `warren perf ARGS...` (the arguments after `perf`).
pub fn main(args: Vec<String>) -> ExitCode {
    match main_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("warren perf: {error}");
            error.exit_code()
        }
    }
}

fn main_inner(args: Vec<String>) -> Result<(), PerfError> {
    if args.first().map(String::as_str) == Some("amqp10") {
        return amqp10::command(args.get(1..).unwrap_or_default());
    }
    if args.first().map(String::as_str) == Some("stream") {
        return stream::command(args.get(1..).unwrap_or_default());
    }
    if args.first().map(String::as_str) == Some("chart") {
        return chart::command(args.get(1..).unwrap_or_default());
    }
    let Some(options) = parse(args)? else {
        print!("{}", args::help());
        return Ok(());
    };
    let threads = options.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .map_err(|error| PerfError::io("starting the async runtime", &error))?;
    let mut stdout = std::io::stdout();
    runtime.block_on(run(&options, &mut stdout))?;
    Ok(())
}

/// Reads `warren perf`'s arguments (PerfTest's flags); `None` for `--help`.
pub fn parse(args: Vec<String>) -> Result<Option<RunOptions>, PerfError> {
    let Some(given) = args::tokenize(&args)? else {
        return Ok(None);
    };
    RunOptions::from_given(&given, default_id(), args).map(Some)
}

/// Runs what the options say, printing lines to `out`; writes `--json` and `--chart` files.
pub async fn run(options: &RunOptions, out: &mut (dyn Write + Send)) -> Result<Report, PerfError> {
    for warning in options.warnings() {
        eprintln!("warren perf: {warning}");
    }
    let driver = Amqp091::new(options.endpoint.clone(), options.heartbeat);
    let mut report = new_report(options, driver.protocol());
    match &options.mode {
        Mode::Load => run::load(&driver, options, out, &mut report).await?,
        Mode::Sweep { step } => sweep::run(&driver, options, *step, out, &mut report).await?,
        Mode::Connections {
            count,
            source_addresses,
        } => {
            let (count, sources) = (*count, *source_addresses);
            connections::run(&driver, options, count, sources, out, &mut report).await?
        }
    }
    if let Some(path) = &options.json {
        report.write_json(path)?;
    }
    if let Some(path) = &options.chart {
        chart::draw_report(&report, path)?;
    }
    Ok(report)
}

fn new_report(options: &RunOptions, protocol: &str) -> Report {
    let mode = match options.mode {
        Mode::Load => "load",
        Mode::Sweep { .. } => "sweep",
        Mode::Connections { .. } => "connections",
    };
    Report {
        tool: "warren perf".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        id: options.id.clone(),
        label: options.label.clone(),
        protocol: protocol.into(),
        uri: options.endpoint.display(),
        mode: mode.into(),
        command_line: options.command_line.clone(),
        shape: run::shape(options),
        ..Default::default()
    }
}

/// PerfTest's default id: `test-HHMMSS-mmm` (UTC here).
pub fn default_id() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = now.as_secs() % 86_400;
    format!(
        "test-{:02}{:02}{:02}-{:03}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60,
        now.subsec_millis()
    )
}
