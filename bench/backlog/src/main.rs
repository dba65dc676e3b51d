//! `warren-backlog`: drives Warren with large persistent backlogs and checks that every
//! message comes back exactly once and in publish order.
//!
//! ```text
//! warren-backlog publish --queue backlog --count 10000000 --size 1024
//! warren-backlog consume --queue backlog --count 10000000
//! warren-backlog churn   --queue churn --total 20000000 --max-backlog 100000 --size 1024
//! ```
//!
//! `publish` then `consume` prove that a backlog of N persistent messages is kept whole and in
//! order (across a broker restart, when one happens in between); `churn` proves that a
//! queue that is filled and drained at once keeps working while its backlog stays bounded.
//! Progress goes to stderr once a second; the last line on stdout is a JSON summary. Any
//! error, nack, message out of order or the `--timeout` ends the run with exit status 1.

mod amqp;
mod progress;
mod sequence;

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use tokio::sync::Notify;

use crate::amqp::{ConsumeSpec, Pace, Publisher};
use crate::progress::{Command as Progress, Counters};

/// Publishes, consumes or churns sequence-numbered persistent messages through one durable
/// queue of a broker and checks that they come back in order.
#[derive(Parser)]
#[command(name = "warren-backlog", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Publish COUNT persistent messages, numbered 0..COUNT, into an empty durable queue,
    /// with publisher confirms.
    Publish(PublishArgs),
    /// Consume COUNT messages with manual acks, checking they carry 0, 1, 2, ... in order.
    Consume(ConsumeArgs),
    /// Publish and consume TOTAL messages at once, the backlog held under MAX_BACKLOG.
    Churn(ChurnArgs),
}

/// Options every command has.
#[derive(Args)]
struct Common {
    /// Broker to use.
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    uri: String,
    /// The durable queue.
    #[arg(long, default_value = "backlog")]
    queue: String,
    /// Give up (exit 1) after this many seconds [default: 300 + 1 s per 2,000 messages].
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
}

#[derive(Args)]
struct PublishArgs {
    #[command(flatten)]
    common: Common,
    /// Messages to publish.
    #[arg(long)]
    count: u64,
    /// Body size in bytes (at least 8: the sequence number).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(8..))]
    size: u64,
    /// Unconfirmed messages allowed at once.
    #[arg(long, default_value_t = 1000)]
    confirm_window: usize,
    /// Declare the queue with x-queue-mode=lazy.
    #[arg(long)]
    lazy: bool,
}

#[derive(Args)]
struct ConsumeArgs {
    #[command(flatten)]
    common: Common,
    /// Messages to consume.
    #[arg(long)]
    count: u64,
    /// basic.qos prefetch count; deliveries are acknowledged every prefetch/2.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u16).range(1..))]
    prefetch: u16,
    /// Sequence number of the first message expected (to go on where an earlier consume
    /// stopped).
    #[arg(long, default_value_t = 0)]
    first: u64,
}

#[derive(Args)]
struct ChurnArgs {
    #[command(flatten)]
    common: Common,
    /// Messages to publish and consume.
    #[arg(long)]
    total: u64,
    /// Most messages published and not yet acknowledged; the publisher waits at this count.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    max_backlog: u64,
    /// Body size in bytes (at least 8: the sequence number).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(8..))]
    size: u64,
    /// Unconfirmed messages allowed at once.
    #[arg(long, default_value_t = 1000)]
    confirm_window: usize,
    /// basic.qos prefetch count of the consumer.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u16).range(1..))]
    prefetch: u16,
    /// Declare the queue with x-queue-mode=lazy.
    #[arg(long)]
    lazy: bool,
    /// Make the consumer trail the publisher by about MAX_BACKLOG messages, so that the queue
    /// holds a full backlog all along instead of staying near empty when the consumer is the
    /// faster of the two.
    #[arg(long)]
    keep_full: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("warren-backlog: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("warren-backlog: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one command under its timeout, with the progress reporter; returns the JSON summary.
async fn run(command: Command) -> anyhow::Result<serde_json::Value> {
    let (progress, common) = match &command {
        Command::Publish(args) => (Progress::Publish { count: args.count }, &args.common),
        Command::Consume(args) => (Progress::Consume { count: args.count }, &args.common),
        Command::Churn(args) => (Progress::Churn { total: args.total }, &args.common),
    };
    let count = match progress {
        Progress::Publish { count } | Progress::Consume { count } => count,
        Progress::Churn { total } => total,
    };
    let limit = Duration::from_secs(common.timeout.unwrap_or(300 + count / 2000));
    let counters = Arc::new(Counters::default());
    let started = Instant::now();
    let reporter = progress::report_every_second(progress, counters.clone(), started);
    let outcome = tokio::time::timeout(limit, execute(&command, counters.clone())).await;
    reporter.abort();
    let seconds = started.elapsed().as_secs_f64();
    match outcome {
        Err(_) => bail!(
            "timed out after {} s with {} (raise --timeout if the broker is just slow)",
            limit.as_secs(),
            counters.describe(progress)
        ),
        Ok(Err(error)) => bail!("{} (after {})", causes(&error), counters.describe(progress)),
        Ok(Ok(())) => Ok(summary(&command, count, seconds, &counters)),
    }
}

/// The error and its causes, `: ` between them, leaving out a cause that its parent's text
/// already ends with (lapin's errors repeat their source).
fn causes(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if text.ends_with(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

async fn execute(command: &Command, counters: Arc<Counters>) -> anyhow::Result<()> {
    match command {
        Command::Publish(args) => publish(args, counters).await,
        Command::Consume(args) => consume(args, &counters).await,
        Command::Churn(args) => churn(args, counters).await,
    }
}

/// The one-line JSON summary: what ran, how many messages, how long, how fast.
fn summary(command: &Command, count: u64, seconds: f64, counters: &Counters) -> serde_json::Value {
    let rate = (count as f64 / seconds.max(1e-9)).round();
    let seconds = (seconds * 1000.0).round() / 1000.0;
    match command {
        Command::Publish(args) => serde_json::json!({
            "command": "publish", "queue": args.common.queue, "count": count,
            "size": args.size, "seconds": seconds, "rate": rate,
        }),
        Command::Consume(args) => serde_json::json!({
            "command": "consume", "queue": args.common.queue, "count": count,
            "in_order": true, "seconds": seconds, "rate": rate,
        }),
        Command::Churn(args) => serde_json::json!({
            "command": "churn", "queue": args.common.queue, "count": count,
            "size": args.size, "max_backlog": args.max_backlog,
            "max_backlog_seen": counters.max_backlog.load(Ordering::Relaxed),
            "in_order": true, "seconds": seconds, "rate": rate,
        }),
    }
}

/// Publishes `count` messages and waits for all their confirms: once it returns, the broker
/// has promised to keep every one of them.
async fn publish(args: &PublishArgs, counters: Arc<Counters>) -> anyhow::Result<()> {
    let common = &args.common;
    let connection = amqp::connect(&common.uri, "publish").await?;
    let size = usize::try_from(args.size).context("--size is too large")?;
    let mut publisher = Publisher::open(
        &connection,
        &common.queue,
        size,
        args.confirm_window,
        counters,
    )
    .await?;
    amqp::declare_empty(publisher.channel(), &common.queue, args.lazy).await?;
    for seq in 0..args.count {
        publisher.send(seq).await?;
    }
    publisher.finish().await?;
    amqp::close(&connection).await
}

/// Consumes `count` messages from an existing queue that holds at least that many, in order.
async fn consume(args: &ConsumeArgs, counters: &Counters) -> anyhow::Result<()> {
    let common = &args.common;
    let connection = amqp::connect(&common.uri, "consume").await?;
    let probe = connection
        .create_channel()
        .await
        .context("cannot open a channel")?;
    let ready = amqp::ready_count(&probe, &common.queue).await?;
    if u64::from(ready) < args.count {
        bail!(
            "queue {} holds {ready} ready messages, fewer than --count {}",
            common.queue,
            args.count
        );
    }
    probe
        .close(200, "counted".into())
        .await
        .context("closing a channel")?;
    let spec = ConsumeSpec {
        count: args.count,
        prefetch: args.prefetch,
        ack_every: u64::from(args.prefetch / 2).max(1),
        first: args.first,
    };
    amqp::consume(&connection, &common.queue, spec, counters, None).await?;
    amqp::close(&connection).await
}

/// One publisher and one consumer on their own connections, at once, through one queue. The
/// publisher waits whenever `sent - acked` reaches `--max-backlog`, so the queue (ready plus
/// unacknowledged messages) never holds more than that; the consumer checks the order. With
/// `--keep-full` the consumer acknowledges message `s` only once `s + lag` are published, so
/// the backlog stays near `--max-backlog` from start to end: the store holds that many
/// messages while it turns over.
async fn churn(args: &ChurnArgs, counters: Arc<Counters>) -> anyhow::Result<()> {
    let common = &args.common;
    let size = usize::try_from(args.size).context("--size is too large")?;
    let publishing = amqp::connect(&common.uri, "churn publisher").await?;
    let consuming = amqp::connect(&common.uri, "churn consumer").await?;
    let mut publisher = Publisher::open(
        &publishing,
        &common.queue,
        size,
        args.confirm_window,
        counters.clone(),
    )
    .await?;
    amqp::declare_empty(publisher.channel(), &common.queue, args.lazy).await?;
    // Acks come at least this often, so a paused publisher always sees the backlog shrink.
    let ack_every = (u64::from(args.prefetch).min(args.max_backlog) / 2).max(1);
    let spec = ConsumeSpec {
        count: args.total,
        prefetch: args.prefetch,
        ack_every,
        first: 0,
    };
    let (acked, sent) = (Notify::new(), Notify::new());
    let pace = Pace {
        acked: &acked,
        sent: &sent,
        // The consumer waits with each ack for at most `max_backlog - ack_every` later
        // messages, which the publisher can always send: no deadlock.
        lag: if args.keep_full {
            args.max_backlog - ack_every
        } else {
            0
        },
    };
    let consumer = amqp::consume(&consuming, &common.queue, spec, &counters, Some(&pace));
    let producer = async {
        for seq in 0..args.total {
            wait_for_room(&counters, &acked, args.max_backlog).await;
            publisher.send(seq).await?;
            sent.notify_waiters();
        }
        publisher.finish().await
    };
    tokio::try_join!(producer, consumer)?;
    amqp::close(&publishing).await?;
    amqp::close(&consuming).await
}

/// Waits until fewer than `max_backlog` messages are published and not yet acknowledged,
/// then records the backlog that the next publish makes.
async fn wait_for_room(counters: &Counters, acked: &Notify, max_backlog: u64) {
    loop {
        // Created before the check, so an ack between the check and the await still wakes it.
        let notified = acked.notified();
        let backlog = counters
            .sent
            .load(Ordering::Relaxed)
            .saturating_sub(counters.acked.load(Ordering::Relaxed));
        if backlog < max_backlog {
            counters
                .max_backlog
                .fetch_max(backlog + 1, Ordering::Relaxed);
            return;
        }
        notified.await;
    }
}
