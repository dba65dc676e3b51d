//! A consumer: one connection, one subscription with `--credit` chunks of credit, one more
//! granted per chunk received (as RabbitMQ's clients do), all of a read's grants in one
//! Credit frame. Each record's latency is read from its body's stamp.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use warren_proto::stream::{key, Command, ConnectionCommand, OffsetSpec, SubscribeCommand};

use super::chunk::{read_chunk, stamp_of_message};
use super::connection::{code_name, is_heartbeat, read_more, StreamConnection};
use crate::clock;
use crate::error::PerfError;
use crate::stats::AgentStats;

/// The longest a read waits before the stop flag is looked at again.
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// The chunk type of user data (1 and 2 are offset-tracking chunks).
const CHUNK_TYPE_USER: u8 = 0;
/// The one subscription of a consumer connection.
const SUBSCRIPTION_ID: u8 = 0;

pub struct ConsumerSpec {
    pub stream: String,
    pub offset: OffsetSpec,
    pub credit: u16,
    pub stats: Arc<AgentStats>,
    /// Chunks received by every consumer (the lines' "chunk size").
    pub chunks: Arc<AtomicU64>,
    pub stop: Arc<AtomicBool>,
    /// `--cmessages`: stop after this many messages.
    pub limit: Option<u64>,
}

/// What a consumer with a `--cmessages` limit read, and how long it took from its subscribe.
#[derive(Debug, Clone, Copy)]
pub struct Finished {
    pub messages: u64,
    pub seconds: f64,
}

/// What one read's frames added up to.
#[derive(Default)]
struct Batch {
    records: u64,
    chunks: u64,
    heartbeats: u32,
    latencies_us: Vec<u64>,
}

/// Subscribes and consumes until `stop`, or until `limit` messages came (then it says how
/// long they took).
pub async fn run(
    mut connection: StreamConnection,
    spec: ConsumerSpec,
) -> Result<Option<Finished>, PerfError> {
    let started = std::time::Instant::now();
    connection
        .subscribe(SUBSCRIPTION_ID, &spec.stream, spec.offset, spec.credit)
        .await?;
    let mut batch = Batch {
        latencies_us: Vec::with_capacity(64 * 1024),
        ..Batch::default()
    };
    let mut received = 0;
    while !spec.stop.load(Ordering::Relaxed) {
        take_frames(&mut connection, &mut batch)?;
        received += batch.records;
        let finished = spec
            .limit
            .is_some_and(|limit| received >= limit)
            .then(|| Finished {
                messages: received,
                seconds: started.elapsed().as_secs_f64(),
            });
        if batch.chunks > 0 || batch.heartbeats > 0 {
            if finished.is_none() {
                answer(&mut connection, &batch).await?;
            }
            spec.stats
                .received
                .fetch_add(batch.records, Ordering::Relaxed);
            spec.chunks.fetch_add(batch.chunks, Ordering::Relaxed);
            spec.stats.record_consumer_latencies(&batch.latencies_us);
            batch.latencies_us.clear();
            (batch.records, batch.chunks, batch.heartbeats) = (0, 0, 0);
        }
        if finished.is_some() {
            connection.close().await;
            return Ok(finished);
        }
        let what = connection.what.clone();
        let read = read_more(&mut connection.socket, &mut connection.read, &what);
        if let Ok(result) = tokio::time::timeout(IDLE_WAIT, read).await {
            result?;
        }
    }
    connection.close().await;
    Ok(None)
}

/// Takes every whole frame in the read buffer.
fn take_frames(connection: &mut StreamConnection, batch: &mut Batch) -> Result<(), PerfError> {
    while let Some(frame) = connection.buffered_frame()? {
        if is_heartbeat(&frame) {
            batch.heartbeats += 1;
            continue;
        }
        if !matches!(
            frame.key,
            key::DELIVER | key::CREDIT | key::CLOSE | key::METADATA_UPDATE
        ) {
            continue;
        }
        match connection.decode(&frame)? {
            Command::Subscribe(SubscribeCommand::Deliver { chunk, .. }) => {
                let now_ns = clock::now_ns();
                let latencies = &mut batch.latencies_us;
                let mut on_record = |record: &[u8]| {
                    if let Some(stamp) = stamp_of_message(record) {
                        latencies.push((now_ns.saturating_sub(stamp.sent_ns) / 1000).max(1));
                    }
                };
                let info = read_chunk(&chunk, Some(&mut on_record))?;
                if info.chunk_type == CHUNK_TYPE_USER {
                    batch.records += u64::from(info.records);
                }
                batch.chunks += 1;
            }
            command => return Err(refusal(connection, &command)),
        }
    }
    Ok(())
}

/// One Credit frame for the chunks received, and the heartbeats answered.
async fn answer(connection: &mut StreamConnection, batch: &Batch) -> Result<(), PerfError> {
    let mut chunks = batch.chunks;
    while chunks > 0 {
        let credit = u16::try_from(chunks).unwrap_or(u16::MAX);
        let grant = Command::Subscribe(SubscribeCommand::Credit {
            subscription_id: SUBSCRIPTION_ID,
            credit,
        });
        grant
            .encode(&mut connection.write)
            .map_err(|e| PerfError::Protocol(e.to_string()))?;
        chunks -= u64::from(credit);
    }
    for _ in 0..batch.heartbeats {
        Command::Connection(ConnectionCommand::Heartbeat)
            .encode(&mut connection.write)
            .map_err(|e| PerfError::Protocol(e.to_string()))?;
    }
    connection.flush().await
}

/// The error a Credit response, a Close or a MetadataUpdate means for this consumer.
fn refusal(connection: &StreamConnection, command: &Command) -> PerfError {
    let why = match command {
        Command::Subscribe(SubscribeCommand::CreditResponse { code, .. }) => {
            format!("the broker refused a Credit: {}", code_name(*code))
        }
        Command::Connection(ConnectionCommand::CloseRequest { code, reason, .. }) => format!(
            "the broker closed the connection: {} {}",
            code_name(*code),
            reason.as_deref().unwrap_or("")
        ),
        Command::Admin(warren_proto::stream::AdminCommand::MetadataUpdate { code, stream }) => {
            format!("stream '{stream}' changed: {} (deleted?)", code_name(*code))
        }
        other => format!("unexpected command {other:?}"),
    };
    PerfError::Broker(format!("{}: {why}", connection.what))
}
