//! A producer: one connection, one publisher, as many unconfirmed messages as `--confirms`
//! allows. The socket is split: this task writes publish frames, a reader task counts the
//! PublishConfirm and PublishError frames and wakes it when room frees up.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::Notify;
use warren_proto::stream::{
    decode_command, decode_frame, key, Command, ConnectionCommand, PublishCommand,
};

use super::connection::{is_heartbeat, read_more, StreamConnection, READ_FRAME_MAX};
use super::publish::PublishPlan;
use crate::clock;
use crate::error::PerfError;
use crate::rate::RateLimiter;
use crate::stats::AgentStats;

/// Publish frames gathered before one socket write.
const WRITE_BATCH_BYTES: usize = 128 * 1024;
/// The longest the writer sleeps without looking at the stop flag.
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// The shortest sleep under `--rate`: the limiter lets what fell due meanwhile go in one burst,
/// so waking for every message's due time would only spend CPU on timers and tiny frames.
const RATE_WAIT_MIN: Duration = Duration::from_millis(1);

/// What the reader task tells the writer.
#[derive(Default)]
struct Shared {
    /// Messages confirmed or refused so far.
    settled: AtomicU64,
    heartbeat_due: AtomicBool,
    wake: Notify,
    failure: Mutex<Option<PerfError>>,
}

/// What a producer is told to do.
pub struct ProducerSpec {
    pub stream: String,
    pub plan: PublishPlan,
    /// Most unconfirmed messages.
    pub confirms: u32,
    pub rate: Option<f64>,
    pub stats: Arc<AgentStats>,
    pub stop: Arc<AtomicBool>,
}

/// Declares the publisher and publishes until `stop`.
pub async fn run(mut connection: StreamConnection, spec: ProducerSpec) -> Result<(), PerfError> {
    connection
        .declare_publisher(spec.plan.publisher_id, &spec.stream)
        .await?;
    let what = connection.what.clone();
    let read_buffer = std::mem::take(&mut connection.read);
    let (read_half, write_half) = connection.socket.into_split();
    let shared = Arc::new(Shared::default());
    let reader = tokio::spawn(read_confirms(
        read_half,
        read_buffer,
        what.clone(),
        shared.clone(),
        spec.stats.clone(),
        u64::from(spec.plan.messages_per_entry()),
    ));
    let result = write_publishes(write_half, &spec, &shared, &what).await;
    reader.abort();
    let failure = shared.failure.lock().take();
    match (result, failure) {
        (Err(error), _) | (Ok(()), Some(error)) => Err(error),
        (Ok(()), None) => Ok(()),
    }
}

/// The writer's loop: frames while the window and the rate allow, then a wait.
async fn write_publishes(
    mut socket: OwnedWriteHalf,
    spec: &ProducerSpec,
    shared: &Shared,
    what: &str,
) -> Result<(), PerfError> {
    let plan = &spec.plan;
    let per_entry = u64::from(plan.messages_per_entry());
    let window = u64::from(spec.confirms).max(per_entry);
    let mut limiter = spec
        .rate
        .map(|rate| RateLimiter::new(rate, tokio::time::Instant::now()));
    let mut out = BytesMut::with_capacity(WRITE_BATCH_BYTES * 2);
    let (mut published, mut next_id, mut sequence) = (0u64, 1u64, 0u32);
    while !spec.stop.load(Ordering::Relaxed) && shared.failure.lock().is_none() {
        if shared.heartbeat_due.swap(false, Ordering::Relaxed) {
            let heartbeat = Command::Connection(ConnectionCommand::Heartbeat);
            heartbeat
                .encode(&mut out)
                .map_err(|e| PerfError::Protocol(e.to_string()))?;
        }
        let sent_ns = clock::now_ns();
        let mut batch = 0u64;
        while out.len() < WRITE_BATCH_BYTES {
            let room =
                window.saturating_sub(published + batch - shared.settled.load(Ordering::Relaxed));
            let allowed = limiter
                .as_mut()
                .map_or(u64::MAX, |l| l.allowance(tokio::time::Instant::now()));
            let entries = (room.min(allowed) / per_entry).min(u64::from(plan.entries_per_frame));
            if entries == 0 {
                break;
            }
            let messages =
                plan.write_frame(&mut out, entries as u32, next_id, sent_ns, &mut sequence);
            next_id += entries;
            batch += u64::from(messages);
            if let Some(limiter) = limiter.as_mut() {
                limiter.take(u64::from(messages));
            }
        }
        if !out.is_empty() {
            let full = out.len() >= WRITE_BATCH_BYTES;
            socket
                .write_all(&out)
                .await
                .map_err(|e| PerfError::io(what, &e))?;
            out.clear();
            published += batch;
            spec.stats.sent.fetch_add(batch, Ordering::Relaxed);
            // under --rate, what fell due while writing is a few messages: sleep first
            if limiter.is_none() || full {
                continue;
            }
        }
        match limiter.as_ref() {
            // the rate, not the window, holds the writer: confirms need not wake it
            Some(l) if window > published - shared.settled.load(Ordering::Relaxed) => {
                let due = l.next_due();
                let wait = due.saturating_duration_since(tokio::time::Instant::now());
                tokio::time::sleep(wait.clamp(RATE_WAIT_MIN, IDLE_WAIT)).await;
            }
            _ => {
                let _ = tokio::time::timeout(IDLE_WAIT, shared.wake.notified()).await;
            }
        }
    }
    debug_assert!(
        shared.settled.load(Ordering::Relaxed) <= published,
        "invariant: the broker settles only what was published"
    );
    let _ = socket.shutdown().await;
    Ok(())
}

/// The reader's loop: counts confirmed and refused messages; answers nothing itself (a
/// heartbeat is flagged for the writer).
async fn read_confirms(
    mut socket: OwnedReadHalf,
    mut buffer: BytesMut,
    what: String,
    shared: Arc<Shared>,
    stats: Arc<AgentStats>,
    per_entry: u64,
) {
    let result: Result<(), PerfError> = async {
        loop {
            while let Some(frame) = decode_frame(&mut buffer, READ_FRAME_MAX)
                .map_err(|e| PerfError::Protocol(format!("{what}: {e}")))?
            {
                if is_heartbeat(&frame) {
                    shared.heartbeat_due.store(true, Ordering::Relaxed);
                    shared.wake.notify_one();
                    continue;
                }
                if frame.key != key::PUBLISH_CONFIRM
                    && frame.key != key::PUBLISH_ERROR
                    && frame.key != key::CLOSE
                {
                    continue;
                }
                let command = decode_command(&frame)
                    .map_err(|e| PerfError::Protocol(format!("{what}: {e}")))?;
                settle(&command, &shared, &stats, per_entry, &what)?;
            }
            read_more(&mut socket, &mut buffer, &what).await?;
        }
    }
    .await;
    if let Err(error) = result {
        *shared.failure.lock() = Some(error);
        shared.wake.notify_one();
    }
}

fn settle(
    command: &Command,
    shared: &Shared,
    stats: &AgentStats,
    per_entry: u64,
    what: &str,
) -> Result<(), PerfError> {
    match command {
        Command::Publish(PublishCommand::PublishConfirm { publishing_ids, .. }) => {
            let messages = publishing_ids.len() as u64 * per_entry;
            stats.confirmed.fetch_add(messages, Ordering::Relaxed);
            shared.settled.fetch_add(messages, Ordering::Relaxed);
        }
        Command::Publish(PublishCommand::PublishError { errors, .. }) => {
            let messages = errors.len() as u64 * per_entry;
            stats.nacked.fetch_add(messages, Ordering::Relaxed);
            shared.settled.fetch_add(messages, Ordering::Relaxed);
        }
        Command::Connection(ConnectionCommand::CloseRequest { code, reason, .. }) => {
            return Err(PerfError::Broker(format!(
                "{what}: the broker closed the connection: {} ({code}) {}",
                super::connection::code_name(*code),
                reason.as_deref().unwrap_or("")
            )));
        }
        _ => return Ok(()),
    }
    shared.wake.notify_one();
    Ok(())
}
