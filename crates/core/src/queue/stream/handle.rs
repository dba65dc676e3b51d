//! What the stream protocol (port 5552) holds of a stream: its log's readers' side, the
//! committed end to wait on, and a mailbox to the stream's writer task for publishes, dedup
//! queries and server-side offset tracking.
//!
//! Publish outcomes come back through a `ConfirmInbox`, one per stream connection: the writer
//! pushes them under a short lock and wakes the connection, as queues do with a consumer's
//! `Outbox`. It needs no capacity: a connection has at most its publishers' in-flight
//! publishing ids outstanding, which the writer's mailbox (back-pressure) bounds.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, watch, Notify};
use warren_store::{Entry, LogView, TrackingSnapshot};

use crate::error::BrokerError;

/// A stream's handle for the stream protocol (`QueueHandle::stream`); cheap to clone.
#[derive(Clone)]
pub struct StreamHandle(Arc<HandleInner>);

struct HandleInner {
    /// `stream 'name' in vhost '/'`, for error texts.
    resource: String,
    view: LogView,
    /// The committed end (the offset the next record will get); the writer closes it when
    /// the stream is deleted.
    committed: watch::Receiver<u64>,
    mailbox: mpsc::Sender<StreamCmd>,
}

impl std::fmt::Debug for StreamHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StreamHandle({})", self.0.resource)
    }
}

/// A publisher's batch for the writer (see `StreamHandle::publish`).
pub struct StreamPublish {
    pub publisher_id: u8,
    /// The producer reference that deduplicates (`None`: no deduplication).
    pub reference: Option<Arc<str>>,
    /// (publishing id, entry), entries already AMQP 1.0 encoded by the client.
    pub messages: Vec<(u64, Entry)>,
    pub confirms: Arc<ConfirmInbox>,
}

/// The outcome of publishing ids of one publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamOutcome {
    Confirmed {
        publisher_id: u8,
        ids: Vec<u64>,
    },
    /// Never stored; `code` is the stream protocol's response code.
    Failed {
        publisher_id: u8,
        ids: Vec<u64>,
        code: u16,
    },
}

/// One per stream-protocol connection (see the module doc).
#[derive(Debug, Default)]
pub struct ConfirmInbox {
    outcomes: Mutex<Vec<StreamOutcome>>,
    notify: Notify,
}

impl ConfirmInbox {
    pub fn new() -> Arc<ConfirmInbox> {
        Arc::new(ConfirmInbox::default())
    }

    /// Adds an outcome and wakes the connection.
    pub fn push(&self, outcome: StreamOutcome) {
        self.outcomes.lock().push(outcome);
        self.notify.notify_one();
    }

    /// Moves every outcome into `into` (which the caller keeps to reuse its allocation).
    pub fn take_all(&self, into: &mut Vec<StreamOutcome>) {
        let mut outcomes = self.outcomes.lock();
        if into.is_empty() {
            std::mem::swap(&mut *outcomes, into);
        } else {
            into.append(&mut outcomes);
        }
    }

    /// Resolves once outcomes were pushed since the last call (a push before the wait
    /// counts).
    pub async fn notified(&self) {
        self.notify.notified().await;
    }
}

/// What the stream protocol asks of a stream's writer task.
pub(crate) enum StreamCmd {
    Publish(StreamPublish),
    PublisherSequence {
        reference: Arc<str>,
        reply: oneshot::Sender<u64>,
    },
    StoreOffset {
        reference: Arc<str>,
        offset: u64,
        reply: oneshot::Sender<Result<(), BrokerError>>,
    },
    QueryOffset {
        reference: Arc<str>,
        reply: oneshot::Sender<Option<u64>>,
    },
    Tracking {
        reply: oneshot::Sender<TrackingSnapshot>,
    },
}

impl StreamHandle {
    pub(crate) fn new(
        resource: String,
        view: LogView,
        committed: watch::Receiver<u64>,
        mailbox: mpsc::Sender<StreamCmd>,
    ) -> StreamHandle {
        StreamHandle(Arc::new(HandleInner {
            resource,
            view,
            committed,
            mailbox,
        }))
    }

    /// The log's readers' side: a Deliver path reads chunks directly from it.
    pub fn view(&self) -> &LogView {
        &self.0.view
    }

    /// The committed end now (the offset the next record will get).
    pub fn committed(&self) -> u64 {
        *self.0.committed.borrow()
    }

    /// Resolves when the committed end moves past `offset` (or at once if it already has);
    /// `Err` when the stream was deleted.
    pub async fn wait_beyond(&self, offset: u64) -> Result<(), BrokerError> {
        let mut committed = self.0.committed.clone();
        loop {
            if *committed.borrow_and_update() > offset {
                return Ok(());
            }
            if committed.changed().await.is_err() {
                return Err(self.gone());
            }
        }
    }

    /// Whether the stream was deleted (its writer has stopped).
    pub fn is_deleted(&self) -> bool {
        self.0.mailbox.is_closed()
    }

    /// Appends a publisher's messages, deduplicated by `reference` when given; waits for room
    /// in the writer's mailbox (back-pressure). The outcome of every publishing id arrives on
    /// `confirms` later.
    pub async fn publish(&self, batch: StreamPublish) -> Result<(), BrokerError> {
        self.send(StreamCmd::Publish(batch)).await
    }

    /// The last publishing id stored for a producer reference (0 when none).
    pub async fn query_publisher_sequence(&self, reference: &str) -> Result<u64, BrokerError> {
        let reference = Arc::from(reference);
        self.request(|reply| StreamCmd::PublisherSequence { reference, reply })
            .await
    }

    /// Tracks a consumer's offset in the stream itself (it survives restarts).
    pub async fn store_offset(&self, reference: &str, offset: u64) -> Result<(), BrokerError> {
        let reference = Arc::from(reference);
        self.request(|reply| StreamCmd::StoreOffset {
            reference,
            offset,
            reply,
        })
        .await?
    }

    /// The offset last stored for `reference`, if any.
    pub async fn query_offset(&self, reference: &str) -> Result<Option<u64>, BrokerError> {
        let reference = Arc::from(reference);
        self.request(|reply| StreamCmd::QueryOffset { reference, reply })
            .await
    }

    /// Every consumer offset and writer sequence the stream tracks, as its log holds them
    /// (for the management API); the writer answers between two flushes.
    pub async fn tracking(&self) -> Result<TrackingSnapshot, BrokerError> {
        self.request(|reply| StreamCmd::Tracking { reply }).await
    }

    async fn send(&self, cmd: StreamCmd) -> Result<(), BrokerError> {
        self.0.mailbox.send(cmd).await.map_err(|_| self.gone())
    }

    async fn request<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> StreamCmd,
    ) -> Result<T, BrokerError> {
        let (reply_tx, reply_rx) = oneshot::channel();
        self.send(make(reply_tx)).await?;
        reply_rx.await.map_err(|_| self.gone())
    }

    fn gone(&self) -> BrokerError {
        BrokerError::not_found(format!("no {}", self.0.resource))
    }
}
