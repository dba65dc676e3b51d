//! A stream's one task: it owns the `StreamLog` (the only writer), takes its three mailboxes
//! (the queue's data and control mailboxes, which AMQP publishers and consumers use, and the
//! stream protocol's), and writes one chunk per turn for everything that arrived. Confirms go
//! out from the log's `on_durable`, so the task never waits for an fsync. After each append
//! it publishes the committed end, which stream-protocol readers wait on, and delivers to its
//! AMQP consumers. Retention runs after a segment rolls and on a timer.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use warren_store::{Retention, StreamLog, StreamLogConfig};

use super::batch::{Batch, Outcomes};
use super::handle::{StreamCmd, StreamHandle};
use super::readers::Readers;
use super::{StreamEncoding, StreamStorage};
use crate::error::BrokerError;
use crate::limits::{QUEUE_CONTROL_MAILBOX_MAX, QUEUE_MAILBOX_MAX};
use crate::queue::expiry::now_ms;
use crate::queue::queue_type::QueueType;
use crate::queue::stats::QueueStatsSnapshot;
use crate::queue::{QueueArgs, QueueCmd, QueueDef, QueueHandle, QueueInfo, Setup};

/// osiris's default segment size (`x-stream-max-segment-size-bytes`).
pub const SEGMENT_BYTES_MAX_DEFAULT: u64 = 500_000_000;
/// osiris's `max_segment_size_chunks`.
const SEGMENT_CHUNKS_MAX: u32 = 256_000;
/// Stream-protocol commands waiting for the writer before publishers wait (back-pressure).
const STREAM_MAILBOX_MAX: usize = 256;
/// How often retention by age is applied when nothing rolls a segment.
const RETENTION_INTERVAL: Duration = Duration::from_secs(60);

/// Starts a stream: opens (or, for a new stream, creates afresh) its log and spawns its task.
/// A log that cannot be opened leaves a stopped queue (every command finds it gone) and says
/// why in the broker log.
pub fn spawn(def: QueueDef, setup: Setup) -> QueueHandle {
    let (data_tx, data_rx) = mpsc::channel(QUEUE_MAILBOX_MAX);
    let (control_tx, control_rx) = mpsc::channel(QUEUE_CONTROL_MAILBOX_MAX);
    let args = setup.args.clone();
    let handle = QueueHandle::new(
        QueueType::Stream,
        def.clone(),
        args.clone(),
        data_tx,
        control_tx,
        setup.credit,
    );
    let Some(storage) = setup.streams else {
        tracing::error!("{}: this broker has no stream storage", def.resource());
        return handle;
    };
    let dir = storage.root.join(dir_name(&def.vhost, &def.name));
    let log = match open_log(&dir, &storage, &args, setup.restart) {
        Ok(log) => log,
        Err(error) => {
            tracing::error!("{} cannot be served: {error}", def.resource());
            return handle;
        }
    };
    let (stream_tx, stream_rx) = mpsc::channel(STREAM_MAILBOX_MAX);
    let (committed_tx, committed_rx) = watch::channel(log.view().next_offset());
    let resource = super::resource(&def);
    handle.offer_stream(StreamHandle::new(
        resource,
        log.view(),
        committed_rx,
        stream_tx,
    ));
    let writer = Writer {
        queue: handle.clone(),
        log,
        dir,
        encoding: storage.encoding.clone(),
        committed: committed_tx,
        readers: Readers::default(),
        batch: Batch::default(),
        published_total: 0,
        deleting: None,
    };
    let mailboxes = Mailboxes {
        data: data_rx,
        control: control_rx,
        stream: stream_rx,
    };
    tokio::spawn(run(writer, mailboxes));
    handle
}

/// The log's directory under the streams root: unique per vhost and name (a readable part
/// and a hash of both), the same at every start.
pub fn dir_name(vhost: &str, name: &str) -> String {
    let readable: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(64)
        .collect();
    format!("{readable}_{:016x}", warren_store::queue_id(vhost, name))
}

fn open_log(
    dir: &Path,
    storage: &StreamStorage,
    args: &QueueArgs,
    restart: bool,
) -> Result<StreamLog, String> {
    if !restart && dir.exists() {
        // A new stream starts empty: what a deletion interrupted by a crash left goes.
        std::fs::remove_dir_all(dir)
            .map_err(|error| format!("cannot clear {}: {error}", dir.display()))?;
    }
    let config = StreamLogConfig {
        dir: dir.to_path_buf(),
        segment_bytes_max: args.segment_bytes_max.unwrap_or(SEGMENT_BYTES_MAX_DEFAULT),
        segment_chunks_max: SEGMENT_CHUNKS_MAX,
        retention: retention(args),
    };
    StreamLog::open(storage.io.clone(), config, storage.sync.clone())
        .map_err(|error| error.to_string())
}

fn retention(args: &QueueArgs) -> Retention {
    Retention {
        max_bytes: args.max_length_bytes,
        max_age_ms: args.max_age_ms,
    }
}

struct Mailboxes {
    data: mpsc::Receiver<QueueCmd>,
    control: mpsc::Receiver<QueueCmd>,
    stream: mpsc::Receiver<StreamCmd>,
}

/// The task's state (see the module doc).
struct Writer {
    queue: QueueHandle,
    log: StreamLog,
    /// The log's directory, removed with the stream.
    dir: PathBuf,
    encoding: Arc<dyn StreamEncoding>,
    committed: watch::Sender<u64>,
    readers: Readers,
    batch: Batch,
    published_total: u64,
    /// Set by a delete that passed its checks: the task ends after the turn.
    deleting: Option<oneshot::Sender<Result<u32, BrokerError>>>,
}

/// What woke the task.
enum Wake {
    Queue(QueueCmd),
    Stream(StreamCmd),
    Retention,
}

async fn run(mut writer: Writer, mut mailboxes: Mailboxes) {
    let mut retention = tokio::time::interval(RETENTION_INTERVAL);
    retention.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let wake = tokio::select! {
            biased;
            Some(cmd) = mailboxes.control.recv() => Wake::Queue(cmd),
            Some(cmd) = mailboxes.stream.recv() => Wake::Stream(cmd),
            Some(cmd) = mailboxes.data.recv() => Wake::Queue(cmd),
            _ = retention.tick() => Wake::Retention,
        };
        match wake {
            Wake::Queue(cmd) => writer.queue_cmd(cmd),
            Wake::Stream(cmd) => writer.stream_cmd(cmd),
            Wake::Retention => writer.apply_retention(),
        }
        writer.drain(&mut mailboxes);
        writer.flush();
        if writer.deleting.is_some() {
            break;
        }
        writer.readers.deliver(&writer.queue, &*writer.encoding);
        writer.store_stats();
    }
    writer.delete(mailboxes);
}

impl Writer {
    /// Takes what else is waiting, up to a chunk's worth of publishes per flush.
    fn drain(&mut self, mailboxes: &mut Mailboxes) {
        while self.deleting.is_none() {
            if let Ok(cmd) = mailboxes.control.try_recv() {
                self.queue_cmd(cmd);
            } else if let Ok(cmd) = mailboxes.stream.try_recv() {
                self.stream_cmd(cmd);
            } else if let Ok(cmd) = mailboxes.data.try_recv() {
                self.queue_cmd(cmd);
            } else {
                return;
            }
        }
    }

    fn queue_cmd(&mut self, cmd: QueueCmd) {
        self.queue.handled(1);
        match cmd {
            QueueCmd::Publish {
                messages, confirm, ..
            } => {
                if self.batch.would_overflow(messages.len()) {
                    self.flush();
                }
                let records = messages.iter().map(|m| self.encoding.encode(m)).collect();
                self.batch.add_records(records, confirm);
                self.flush_if_full();
            }
            QueueCmd::SetArgs { args } => self.log.set_retention(retention(&args)),
            QueueCmd::Consume { consumer, reply } => {
                let _ = reply.send(self.readers.add(consumer, &self.log.view()));
            }
            QueueCmd::Cancel { consumer, reply } => {
                self.readers.remove(consumer);
                if let Some(reply) = reply {
                    let _ = reply.send(());
                }
            }
            QueueCmd::Credit { consumer, credit } => self.readers.grant(consumer, credit),
            QueueCmd::Settle { seqs, .. } => {
                // Every settlement only returns credit (RabbitMQ's stream settle).
                self.readers.acknowledged_total += seqs.len() as u64;
            }
            // The connections refuse basic.get and queue.purge on a stream with RabbitMQ's
            // texts; what reaches the queue anyway finds nothing to get or purge.
            QueueCmd::Get { reply, .. } => drop(reply.send(None)),
            QueueCmd::Purge { reply } => drop(reply.send(0)),
            QueueCmd::Info { reply } => {
                self.flush();
                let _ = reply.send(self.info());
            }
            QueueCmd::Delete {
                if_unused,
                if_empty,
                reply,
            } => self.check_delete(if_unused, if_empty, reply),
        }
    }

    fn stream_cmd(&mut self, cmd: StreamCmd) {
        match cmd {
            StreamCmd::Publish(publish) => {
                if self.batch.would_overflow(publish.messages.len()) {
                    self.flush();
                }
                let log = &self.log;
                self.batch.add_stream(publish, |reference| {
                    log.writer_sequence(reference.as_bytes())
                });
                self.flush_if_full();
            }
            StreamCmd::PublisherSequence { reference, reply } => {
                // Ids still in the batch count: they are stored before any later reply.
                self.flush();
                let last = self.log.writer_sequence(reference.as_bytes());
                let _ = reply.send(last.unwrap_or(0));
            }
            StreamCmd::StoreOffset {
                reference,
                offset,
                reply,
            } => {
                self.flush();
                let stored = self.log.store_offset(&reference, offset).map_err(|error| {
                    BrokerError::internal(format!("cannot store the offset: {error}"))
                });
                if stored.is_ok() {
                    self.publish_committed();
                }
                let _ = reply.send(stored);
            }
            StreamCmd::QueryOffset { reference, reply } => {
                let _ = reply.send(self.log.tracked_offset(&reference));
            }
            StreamCmd::Tracking { reply } => drop(reply.send(self.log.tracking())),
        }
    }

    fn flush_if_full(&mut self) {
        if self.batch.is_full() {
            self.flush();
        }
    }

    /// Writes the batch as one chunk; its publishers hear once it is durable.
    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        self.published_total += self.batch.published;
        if self.batch.entries.is_empty() {
            // Only duplicates: nothing to write, nothing to wait for.
            self.batch.take_outcomes().settle(true);
            return;
        }
        let writers = self.batch.writers();
        let entries = std::mem::take(&mut self.batch.entries);
        let outcomes: Outcomes = self.batch.take_outcomes();
        let segments_before = self.log.view().stats().segments;
        let on_durable = Box::new(move |ok: bool| outcomes.settle(ok));
        let timestamp_ms = i64::try_from(now_ms()).unwrap_or(i64::MAX);
        match self
            .log
            .append(&entries, timestamp_ms, &writers, on_durable)
        {
            Ok(_) => self.publish_committed(),
            Err(error) => {
                tracing::error!(
                    "{}: a chunk of {} messages could not be written, its publishers are \
                     told it failed: {error}",
                    self.queue.def().resource(),
                    entries.len()
                );
            }
        }
        if self.log.view().stats().segments > segments_before {
            self.apply_retention();
        }
    }

    fn publish_committed(&self) {
        self.committed.send_replace(self.log.view().next_offset());
    }

    fn apply_retention(&mut self) {
        let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);
        match self.log.apply_retention(now) {
            Ok(0) => {}
            Ok(deleted) => tracing::debug!(
                "{}: retention deleted {deleted} segments",
                self.queue.def().resource()
            ),
            Err(error) => tracing::warn!(
                "{}: retention could not delete segments: {error}",
                self.queue.def().resource()
            ),
        }
    }

    fn messages(&self) -> u64 {
        let view = self.log.view();
        view.next_offset().saturating_sub(view.first_offset())
    }

    fn info(&self) -> QueueInfo {
        QueueInfo {
            messages: u32::try_from(self.messages()).unwrap_or(u32::MAX),
            consumers: u32::try_from(self.readers.len()).unwrap_or(u32::MAX),
        }
    }

    fn check_delete(
        &mut self,
        if_unused: bool,
        if_empty: bool,
        reply: oneshot::Sender<Result<u32, BrokerError>>,
    ) {
        let resource = self.queue.def().resource();
        if if_unused && !self.readers.is_empty() {
            let _ = reply.send(Err(BrokerError::precondition_failed(format!(
                "{resource} in use"
            ))));
        } else if if_empty && self.messages() > 0 {
            let _ = reply.send(Err(BrokerError::precondition_failed(format!(
                "{resource} not empty"
            ))));
        } else {
            self.flush();
            self.deleting = Some(reply);
        }
    }

    /// Ends the stream: consumers are cancelled, the files removed, and every waiter and
    /// later caller finds it gone.
    fn delete(mut self, mut mailboxes: Mailboxes) {
        let count = u32::try_from(self.messages()).unwrap_or(u32::MAX);
        self.readers.cancel_all();
        mailboxes.data.close();
        mailboxes.control.close();
        mailboxes.stream.close();
        while let Ok(cmd) = mailboxes.data.try_recv() {
            self.queue.handled(1);
            cmd.abandon();
        }
        while let Ok(cmd) = mailboxes.control.try_recv() {
            self.queue.handled(1);
            cmd.abandon();
        }
        while let Ok(cmd) = mailboxes.stream.try_recv() {
            if let StreamCmd::Publish(publish) = cmd {
                super::batch::fail_deleted(publish);
            }
        }
        drop(mailboxes);
        let resource = self.queue.def().resource();
        let reply = self.deleting.take();
        let removed = self
            .log
            .delete()
            .map_err(|error| error.to_string())
            .and_then(|()| std::fs::remove_dir_all(&self.dir).map_err(|e| e.to_string()));
        if let Err(error) = removed {
            tracing::warn!(
                "{resource}: deleted, but its files in {} could not all be removed: {error}",
                self.dir.display()
            );
        }
        drop(self.committed);
        if let Some(reply) = reply {
            let _ = reply.send(Ok(count));
        }
    }

    fn store_stats(&self) {
        let stats = self.log.view().stats();
        let messages = self.messages();
        self.queue.stats_cell().store(&QueueStatsSnapshot {
            messages_ready: messages,
            messages_unacknowledged: 0,
            message_bytes_ready: stats.bytes,
            consumers: self.readers.len() as u64,
            published_total: self.published_total,
            delivered_total: self.readers.delivered_total,
            acknowledged_total: self.readers.acknowledged_total,
            redelivered_total: 0,
            memory_bytes: 0,
        });
    }
}

#[cfg(test)]
#[path = "driver_test.rs"]
mod tests;

#[cfg(test)]
#[path = "power_cut_test.rs"]
mod power_cut_tests;

#[cfg(test)]
#[path = "test_support.rs"]
mod test_support;
