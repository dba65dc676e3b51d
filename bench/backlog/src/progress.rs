//! Counters that the publisher and the consumer advance, and the once-a-second progress line
//! on stderr that shows them while a run is under way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

/// What has happened so far in a run; shared between tasks, read by the reporter.
#[derive(Debug, Default)]
pub struct Counters {
    /// Messages handed to the connection (`basic.publish` sent).
    pub sent: AtomicU64,
    /// Messages the broker confirmed (`basic.ack` from the broker).
    pub confirmed: AtomicU64,
    /// Messages delivered to the consumer, all in order.
    pub received: AtomicU64,
    /// Deliveries acknowledged to the broker (they leave the queue).
    pub acked: AtomicU64,
    /// The largest `sent - acked` seen by the churn publisher.
    pub max_backlog: AtomicU64,
}

impl Counters {
    fn load(&self) -> Snapshot {
        Snapshot {
            sent: self.sent.load(Ordering::Relaxed),
            confirmed: self.confirmed.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            acked: self.acked.load(Ordering::Relaxed),
        }
    }

    /// One line with the counts that matter to `command`, for error messages.
    pub fn describe(&self, command: Command) -> String {
        command.counts(&self.load())
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    sent: u64,
    confirmed: u64,
    received: u64,
    acked: u64,
}

/// The subcommand whose progress is shown, with its message count.
#[derive(Debug, Clone, Copy)]
pub enum Command {
    Publish { count: u64 },
    Consume { count: u64 },
    Churn { total: u64 },
}

impl Command {
    /// The counter whose rate the line shows: confirmed for publishing, received otherwise.
    fn done(self, now: &Snapshot) -> u64 {
        match self {
            Command::Publish { .. } => now.confirmed,
            Command::Consume { .. } | Command::Churn { .. } => now.received,
        }
    }

    fn counts(self, now: &Snapshot) -> String {
        match self {
            Command::Publish { count } => {
                format!("sent {} confirmed {} of {count}", now.sent, now.confirmed)
            }
            Command::Consume { count } => {
                format!("consumed {} of {count}, acked {}", now.received, now.acked)
            }
            Command::Churn { total } => format!(
                "published {} (confirmed {}) consumed {} of {total}, backlog {}",
                now.sent,
                now.confirmed,
                now.received,
                now.sent.saturating_sub(now.acked)
            ),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Command::Publish { .. } => "publish",
            Command::Consume { .. } => "consume",
            Command::Churn { .. } => "churn",
        }
    }
}

/// Starts the task that prints one progress line a second to stderr:
/// `publish: 12 s sent 1200000 confirmed 1199000 of 10000000, 98000 msg/s (average 99900)`.
/// Abort the returned handle to stop it.
pub fn report_every_second(
    command: Command,
    counters: Arc<Counters>,
    started: Instant,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        let mut last = (Instant::now(), 0);
        loop {
            ticks.tick().await;
            let now = counters.load();
            let at = Instant::now();
            let done = command.done(&now);
            let rate = (done - last.1) as f64 / at.duration_since(last.0).as_secs_f64();
            let elapsed = started.elapsed().as_secs_f64();
            eprintln!(
                "{}: {elapsed:.0} s {}, {rate:.0} msg/s (average {:.0})",
                command.name(),
                command.counts(&now),
                done as f64 / elapsed
            );
            last = (at, done);
        }
    })
}
