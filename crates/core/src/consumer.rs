//! What a queue knows of a consumer, and the outbox through which queues hand deliveries to a
//! connection.
//!
//! The outbox is the one place where several queue tasks meet one connection task. Queues never
//! wait on a connection: they append a batch under a short lock and wake the connection. It is
//! bounded by credit, not by capacity: a queue only delivers against credit the connection
//! granted (`limits::CONSUMER_FLOW_CREDIT_MAX` or the prefetch count), so its length never
//! exceeds the sum of the credit of the connection's consumers.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::message::Message;
use crate::queue::{ConsumeStart, QueueHandle};

/// Identifies a connection broker-wide (exclusive queue ownership, consumer bookkeeping).
pub type ConnectionId = u64;
/// Identifies a consumer broker-wide; unique across queues and connections.
pub type ConsumerId = u64;

/// A subscription as the queue sees it.
#[derive(Debug, Clone)]
pub struct Consumer {
    pub id: ConsumerId,
    pub connection: ConnectionId,
    /// The protocol's channel (0.9.1) or link handle the consumer lives on.
    pub channel: u16,
    pub tag: Arc<str>,
    /// Deliveries are settled when sent (no-ack / pre-settled).
    pub no_ack: bool,
    pub exclusive: bool,
    /// `x-priority`: consumers of higher priority get messages while they have credit.
    pub priority: i64,
    /// Deliveries the queue may send before the connection grants more.
    pub credit: u32,
    /// The connection returns credit as it writes deliveries (no-ack, or no prefetch limit):
    /// such a consumer takes messages as fast as the broker sends them, so a backlog in
    /// front of it means publishers outrun it (see `limits::QUEUE_FLOW_BACKLOG_MAX`).
    pub credit_on_write: bool,
    /// Where to start reading (`x-stream-offset`); `None` for the type's default. Only a
    /// type that lists `x-stream-offset` among its consumer arguments takes one.
    pub start: Option<ConsumeStart>,
    pub outbox: Arc<Outbox>,
}

/// One message handed to a consumer (or to a basic.get caller).
#[derive(Debug, Clone)]
pub struct Delivery {
    pub channel: u16,
    pub consumer: ConsumerId,
    pub consumer_tag: Arc<str>,
    pub queue: QueueHandle,
    /// The queue's sequence number of the message, used to settle it.
    pub seq: u64,
    pub message: Arc<Message>,
    pub redelivered: bool,
}

/// What a queue tells a connection.
#[derive(Debug)]
pub enum Event {
    Deliver(Delivery),
    /// The queue cancelled the consumer (queue deleted): the client is told with basic.cancel.
    ConsumerCancelled {
        channel: u16,
        consumer: ConsumerId,
        consumer_tag: Arc<str>,
    },
    /// One queue that took the publishes of confirm ticket `ticket` has them under its
    /// durability contract (`ok`), or can never have them (`!ok`: nack); see `confirm`.
    Settled {
        ticket: u64,
        ok: bool,
    },
    /// A queue refused these publishes (its length limit with `x-overflow=reject-publish`):
    /// the publisher nacks them. Sent before the ticket they belong to comes back.
    PublishRejected {
        tags: Vec<u64>,
    },
}

/// The connection's inbox for queue events; see the module doc for why it needs no capacity.
#[derive(Debug, Default)]
pub struct Outbox {
    inbox: Mutex<Inbox>,
    notify: Notify,
}

#[derive(Debug, Default)]
struct Inbox {
    events: Vec<Event>,
    quiet: Quiet,
}

/// Deliveries that may still be appended without waking the connection: it is holding
/// deliveries back (`delivery_hold_ms`) and its hold timer wakes it anyway. Anything that is
/// not a delivery, or more than this, wakes it at once.
#[derive(Debug, Default)]
struct Quiet {
    deliveries: u32,
    bytes: usize,
}

impl Quiet {
    /// Whether `events` fit in what is left (which they then use up); when they do not, the
    /// rest is given up, so the connection is woken from now on.
    fn absorb(&mut self, events: &[Event]) -> bool {
        if self.deliveries == 0 {
            return false;
        }
        let mut bytes = 0;
        for event in events {
            match event {
                Event::Deliver(delivery) => bytes += delivery.message.size_bytes(),
                _ => {
                    *self = Quiet::default();
                    return false;
                }
            }
        }
        let count = u32::try_from(events.len()).unwrap_or(u32::MAX);
        if count > self.deliveries || bytes > self.bytes {
            *self = Quiet::default();
            return false;
        }
        self.deliveries -= count;
        self.bytes -= bytes;
        true
    }
}

impl Outbox {
    pub fn new() -> Arc<Outbox> {
        Arc::new(Outbox::default())
    }

    /// Appends a batch and wakes the connection once (unless it is quiet, see `quiet_for`).
    pub fn push_batch(&self, batch: &mut Vec<Event>) {
        if batch.is_empty() {
            return;
        }
        let mut inbox = self.inbox.lock();
        let absorbed = inbox.quiet.absorb(batch);
        inbox.events.append(batch);
        drop(inbox);
        if !absorbed {
            self.notify.notify_one();
        }
    }

    pub fn push(&self, event: Event) {
        let mut inbox = self.inbox.lock();
        let absorbed = inbox.quiet.absorb(std::slice::from_ref(&event));
        inbox.events.push(event);
        drop(inbox);
        if !absorbed {
            self.notify.notify_one();
        }
    }

    /// Moves every pending event into `into` (which the caller keeps to reuse its allocation).
    /// Ends any quiet spell: the connection is woken for whatever comes next until it asks
    /// for quiet again.
    pub fn take_all(&self, into: &mut Vec<Event>) {
        let mut inbox = self.inbox.lock();
        inbox.quiet = Quiet::default();
        if into.is_empty() {
            std::mem::swap(&mut inbox.events, into);
        } else {
            into.append(&mut inbox.events);
        }
    }

    /// Lets up to `deliveries` deliveries of together up to `bytes` message bytes be appended
    /// without waking the connection, until its next `take_all`. Only for a connection that
    /// will wake by itself soon (its hold timer is armed): it finds them then.
    pub fn quiet_for(&self, deliveries: u32, bytes: usize) {
        self.inbox.lock().quiet = Quiet { deliveries, bytes };
    }

    /// Resolves once events were pushed since the last call (a push before the wait counts).
    pub async fn notified(&self) {
        self.notify.notified().await;
    }
}
