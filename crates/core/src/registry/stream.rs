//! A stream-protocol connection's publishers and subscriptions, as the stream management
//! plugin's `/api/stream/publishers` and `/api/stream/consumers` list them and `warren ctl
//! list stream_publishers|stream_consumers` prints them. Subscriptions also count as
//! consumers (`/api/consumers`, a stream's `consumers`), as RabbitMQ's stream plugin reports
//! them to its core metrics.
//!
//! The connection adds one when DeclarePublisher or Subscribe succeeds and keeps the guard it
//! gets back beside its own publisher or subscription; dropping the guard removes it, so every
//! way a publisher or subscription ends is covered by one rule. Counters are atomics the
//! connection adds to once per frame or chunk, never per message.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Semaphore;

use super::{ConnectionEntry, GlobalCounters, Registry};

/// A declared stream publisher.
#[derive(Debug, Clone)]
pub struct StreamPublisherDetails {
    pub publisher_id: u8,
    pub stream: Arc<str>,
    /// The deduplication reference; `None` for a publisher without one.
    pub reference: Option<Arc<str>>,
    pub counters: Arc<StreamPublisherCounters>,
}

/// RabbitMQ's `published`, `confirmed` and `errored` of a publisher.
#[derive(Debug, Default)]
pub struct StreamPublisherCounters {
    pub published: AtomicU64,
    pub confirmed: AtomicU64,
    pub errored: AtomicU64,
}

impl StreamPublisherCounters {
    /// `[published, confirmed, errored]`.
    pub fn snapshot(&self) -> [u64; 3] {
        [&self.published, &self.confirmed, &self.errored].map(|c| c.load(Ordering::Relaxed))
    }
}

/// A subscription of a stream-protocol connection.
#[derive(Debug, Clone)]
pub struct StreamConsumerDetails {
    pub subscription_id: u8,
    pub stream: Arc<str>,
    /// Subscribe's properties, as the client sent them.
    pub properties: Vec<(String, String)>,
    /// The credit the client granted and the subscription has not used yet (in chunks).
    pub credit: Arc<Semaphore>,
    pub counters: Arc<StreamConsumerCounters>,
}

impl StreamConsumerDetails {
    /// The chunks the subscription may still send: RabbitMQ's `credits`.
    pub fn credits(&self) -> usize {
        self.credit.available_permits()
    }
}

/// RabbitMQ's `consumed` (records delivered) and `offset` (of the last record delivered).
#[derive(Debug, Default)]
pub struct StreamConsumerCounters {
    pub consumed: AtomicU64,
    pub offset: AtomicU64,
}

impl StreamConsumerCounters {
    /// `[consumed, offset]`.
    pub fn snapshot(&self) -> [u64; 2] {
        [&self.consumed, &self.offset].map(|c| c.load(Ordering::Relaxed))
    }
}

impl Registry {
    /// The subscriptions reading stream `stream` of vhost `vhost`, on every connection.
    pub fn stream_subscriptions(&self, vhost: &str, stream: &str) -> usize {
        self.connections()
            .iter()
            .filter(|c| &*c.details.vhost == vhost)
            .map(|c| {
                let consumers = c.stream_consumers.lock();
                consumers.iter().filter(|s| &*s.stream == stream).count()
            })
            .sum()
    }
}

impl ConnectionEntry {
    /// The connection's stream publishers, by publisher id.
    pub fn stream_publishers(&self) -> Vec<StreamPublisherDetails> {
        let mut publishers = self.stream_publishers.lock().clone();
        publishers.sort_by_key(|p| p.publisher_id);
        publishers
    }

    /// The connection's subscriptions, by subscription id.
    pub fn stream_consumers(&self) -> Vec<StreamConsumerDetails> {
        let mut consumers = self.stream_consumers.lock().clone();
        consumers.sort_by_key(|c| c.subscription_id);
        consumers
    }

    /// AMQP consumers and subscriptions together, as RabbitMQ's core metrics count consumers
    /// (its stream plugin reports every subscription as a consumer too).
    pub fn consumer_count(&self) -> usize {
        let subscriptions = self.stream_consumers.lock().len();
        self.consumers.lock().len() + subscriptions
    }

    /// Lists a publisher until the returned guard drops.
    pub fn add_stream_publisher(
        self: &Arc<Self>,
        publisher_id: u8,
        stream: Arc<str>,
        reference: Option<Arc<str>>,
    ) -> StreamPublisherGuard {
        let counters = Arc::new(StreamPublisherCounters::default());
        self.stream_publishers.lock().push(StreamPublisherDetails {
            publisher_id,
            stream,
            reference,
            counters: counters.clone(),
        });
        StreamPublisherGuard {
            entry: self.clone(),
            counters,
        }
    }

    /// Lists a subscription until the returned guard drops.
    pub fn add_stream_consumer(
        self: &Arc<Self>,
        subscription_id: u8,
        stream: Arc<str>,
        properties: Vec<(String, String)>,
        credit: Arc<Semaphore>,
    ) -> StreamConsumerGuard {
        let counters = Arc::new(StreamConsumerCounters::default());
        self.stream_consumers.lock().push(StreamConsumerDetails {
            subscription_id,
            stream,
            properties,
            credit,
            counters: counters.clone(),
        });
        StreamConsumerGuard {
            entry: self.clone(),
            counters,
        }
    }

    fn global(&self, counter: impl FnOnce(&GlobalCounters) -> &AtomicU64, n: u64) {
        if let Some(registry) = self.registry.upgrade() {
            GlobalCounters::add(counter(&registry.counters), n);
        }
    }
}

/// Keeps a publisher listed; counts its messages.
pub struct StreamPublisherGuard {
    entry: Arc<ConnectionEntry>,
    counters: Arc<StreamPublisherCounters>,
}

impl StreamPublisherGuard {
    /// Messages received from the client for this publisher (one Publish frame's worth).
    pub fn published(&self, messages: u64) {
        GlobalCounters::add(&self.counters.published, messages);
        self.entry.global(|c| &c.stream_received, messages);
    }

    pub fn confirmed(&self, messages: u64) {
        GlobalCounters::add(&self.counters.confirmed, messages);
        self.entry.global(|c| &c.stream_confirmed, messages);
    }

    pub fn errored(&self, messages: u64) {
        GlobalCounters::add(&self.counters.errored, messages);
    }
}

impl Drop for StreamPublisherGuard {
    fn drop(&mut self) {
        // By identity, not id: a publisher id may be declared again before this one drops.
        let mut publishers = self.entry.stream_publishers.lock();
        let before = publishers.len();
        publishers.retain(|p| !Arc::ptr_eq(&p.counters, &self.counters));
        debug_assert_eq!(
            publishers.len() + 1,
            before,
            "invariant: listed once, removed once"
        );
    }
}

/// Keeps a subscription listed; counts what it delivers.
pub struct StreamConsumerGuard {
    entry: Arc<ConnectionEntry>,
    counters: Arc<StreamConsumerCounters>,
}

impl StreamConsumerGuard {
    /// Before its first delivery, the consumer's `offset` is where it starts reading.
    pub fn starts_at(&self, offset: u64) {
        self.counters.offset.store(offset, Ordering::Relaxed);
    }

    /// A chunk of `records` went out; `last_offset` is the offset of its last record.
    pub fn delivered(&self, records: u64, last_offset: u64) {
        GlobalCounters::add(&self.counters.consumed, records);
        self.counters.offset.store(last_offset, Ordering::Relaxed);
        self.entry.global(|c| &c.stream_delivered, records);
    }
}

impl Drop for StreamConsumerGuard {
    fn drop(&mut self) {
        let mut consumers = self.entry.stream_consumers.lock();
        let before = consumers.len();
        consumers.retain(|c| !Arc::ptr_eq(&c.counters, &self.counters));
        debug_assert_eq!(
            consumers.len() + 1,
            before,
            "invariant: listed once, removed once"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::super::{ConnectionDetails, Registry};
    use super::*;

    fn details() -> ConnectionDetails {
        ConnectionDetails {
            id: 7,
            protocol: "stream",
            peer: SocketAddr::from(([127, 0, 0, 1], 40007)),
            local: SocketAddr::from(([127, 0, 0, 1], 5552)),
            user: "guest".into(),
            vhost: Arc::from("/"),
            client_properties: bytes::Bytes::new(),
            channel_max: 0,
            frame_max: 1_048_576,
            heartbeat: 60,
            connected_at_ms: 0,
            auth_mechanism: "PLAIN",
            tls: None,
        }
    }

    #[test]
    fn publishers_and_consumers_are_listed_while_their_guards_live() {
        tracing::info!("a publisher and a subscription are listed and counted");
        let registry = Arc::new(Registry::default());
        let registration = registry.register(details());
        let entry = registration.entry();
        let publisher = entry.add_stream_publisher(3, Arc::from("s1"), Some(Arc::from("app")));
        publisher.published(10);
        publisher.confirmed(8);
        publisher.errored(2);
        let credit = Arc::new(Semaphore::new(5));
        let consumer = entry.add_stream_consumer(1, Arc::from("s1"), Vec::new(), credit.clone());
        consumer.delivered(4, 3);
        credit.forget_permits(1);
        let listed = entry.stream_publishers();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].counters.snapshot(), [10, 8, 2]);
        let consumers = entry.stream_consumers();
        assert_eq!(consumers[0].counters.snapshot(), [4, 3]);
        assert_eq!(
            entry.consumer_count(),
            1,
            "a subscription counts as a consumer"
        );
        assert_eq!(registry.stream_subscriptions("/", "s1"), 1);
        assert_eq!(registry.stream_subscriptions("/", "s2"), 0);
        assert_eq!(registry.stream_subscriptions("other", "s1"), 0);
        assert_eq!(consumers[0].credits(), 4);
        let counters = registry.counters();
        assert_eq!(GlobalCounters::get(&counters.stream_received), 10);
        assert_eq!(GlobalCounters::get(&counters.stream_confirmed), 8);
        assert_eq!(GlobalCounters::get(&counters.stream_delivered), 4);

        tracing::info!("an id declared again before the old guard drops keeps the new one");
        let again = entry.add_stream_publisher(3, Arc::from("s2"), None);
        drop(publisher);
        let listed = entry.stream_publishers();
        assert_eq!(listed.len(), 1);
        assert_eq!(&*listed[0].stream, "s2");
        drop(again);
        drop(consumer);
        assert!(entry.stream_publishers().is_empty());
        assert!(entry.stream_consumers().is_empty());
    }
}
