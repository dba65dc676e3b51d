//! The `warren` command: `warren server` (the default) runs the broker; `warren perf` is the
//! load generator (PerfTest's flags, see crates/perf); `warren ctl` operates a broker through
//! the management HTTP API (see crates/ctl).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use warren_server::Config;

/// mimalloc rather than glibc malloc: messages are allocated on one thread and freed on
/// another, and glibc's arena locks showed in profiles of the AMQP 1.0 path.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "warren",
    version,
    about = "Warren: a RabbitMQ-compatible message broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker (the default when no command is given).
    Server(ServerArgs),
    /// Load a broker with PerfTest's flags and output (`warren perf --help` lists them).
    #[command(disable_help_flag = true)]
    Perf(PerfArgs),
    /// Operate a broker through its management HTTP API (`warren ctl --help` lists commands).
    #[command(disable_help_flag = true)]
    Ctl(PerfArgs),
}

/// Everything after `perf` goes to warren-perf untouched: PerfTest's flags include `-h`
/// (the URI) and multi-letter single-dash ones (`-qa`), which clap must not read. `ctl` passes
/// its arguments to warren-ctl the same way, which parses them with its own clap command.
#[derive(clap::Args)]
struct PerfArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<String>,
}

#[derive(clap::Args, Default)]
struct ServerArgs {
    /// TOML config file; keys are documented in README.md. Flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// AMQP port, 0.9.1 and 1.0 [default: 5672]; replaces the config file's plain AMQP
    /// listeners (`listeners.tcp.*`) with one on --bind-address.
    #[arg(long, value_name = "N")]
    amqp_port: Option<u16>,
    /// Stream protocol port [default: 5552]; 0 turns the stream listener off. Replaces the
    /// config file's stream listeners (`stream_listeners`) with one on --bind-address.
    #[arg(long, value_name = "N")]
    stream_port: Option<u16>,
    /// Management HTTP API port [default: 15672].
    #[arg(long, value_name = "N")]
    http_port: Option<u16>,
    /// Prometheus metrics port [default: 15692].
    #[arg(long, value_name = "N")]
    prometheus_port: Option<u16>,
    /// No management HTTP API (nor web UI), as with RabbitMQ's management plugin disabled.
    #[arg(long, conflicts_with = "http_port")]
    no_management: bool,
    /// No Prometheus listener.
    #[arg(long, conflicts_with = "prometheus_port")]
    no_prometheus: bool,
    /// Data directory [default: ./warren-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Address to bind the listeners whose address the config file does not give [default:
    /// ::, every interface, IPv4 and IPv6].
    #[arg(long, value_name = "ADDR")]
    bind_address: Option<std::net::IpAddr>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Perf(perf)) = cli.command {
        return warren_perf::main(perf.args);
    }
    if let Some(Command::Ctl(ctl)) = cli.command {
        return warren_ctl::main(ctl.args);
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("warren: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let args = match cli.command {
        Some(Command::Server(args)) => args,
        Some(Command::Perf(_) | Command::Ctl(_)) | None => ServerArgs::default(),
    };
    let mut config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    if let Some(port) = args.amqp_port {
        config.amqp_port = port;
        config.amqp_listeners = None;
    }
    match args.stream_port {
        Some(0) => config.stream_listeners = Some(Vec::new()),
        Some(port) => {
            config.stream_port = port;
            config.stream_listeners = None;
        }
        None => {}
    }
    if let Some(port) = args.http_port {
        config.management_port = Some(port);
    }
    if let Some(port) = args.prometheus_port {
        config.prometheus_port = Some(port);
    }
    if args.no_management {
        config.management_port = None;
    }
    if args.no_prometheus {
        config.prometheus_port = None;
    }
    if let Some(dir) = args.data_dir {
        config.data_dir = dir;
    }
    if let Some(address) = args.bind_address {
        config.bind_address = address;
    }
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(config.log_level.as_str()));
    let ansi = std::io::stdout().is_terminal();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(warren_server::log_writer::EscapingStdout { ansi })
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let broker = warren_server::start(config).await?;
    wait_for_signal().await?;
    tracing::info!("shutting down");
    broker.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("cannot watch SIGINT")?,
        _ = terminate.recv() => {}
    }
    Ok(())
}
