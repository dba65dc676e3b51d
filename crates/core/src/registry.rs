//! The open client connections, their channels and consumers, as the management API lists
//! them (RabbitMQ's `rabbit_connection_tracking` and the management agent's tables).
//!
//! A connection registers once its handshake is done and unregisters when it is torn down;
//! channels and consumers are added and removed as they open and close. None of this is
//! touched per message: message counts live in queue stats, in [`GlobalCounters`], which
//! connections add to once per batch, and in each channel's and connection's own counters
//! (`stats.rs`).
//!
//! A stream-protocol connection also lists its publishers and subscriptions here
//! (RabbitMQ's `rabbit_stream_publisher_created` and `rabbit_stream_consumer_created`
//! tables): each is added when declared and removed when the guard its connection keeps
//! drops, whichever way it ends (deleted, unsubscribed, stream deleted, connection closed).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;
use tokio::sync::Notify;

pub use self::stream::{
    StreamConsumerCounters, StreamConsumerDetails, StreamConsumerGuard, StreamPublisherCounters,
    StreamPublisherDetails, StreamPublisherGuard,
};
use crate::consumer::ConnectionId;
use crate::stats::{ChannelStats, ConnectionStats};
use crate::value::Table;

mod stream;

/// What a connection tells the registry about itself when it opens.
#[derive(Debug, Clone)]
pub struct ConnectionDetails {
    pub id: ConnectionId,
    pub protocol: &'static str,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub user: String,
    pub vhost: Arc<str>,
    /// The client's properties in its protocol's encoding (AMQP 0.9.1: a field table body,
    /// without its length prefix), decoded only when the management API shows them: one
    /// allocation per connection rather than a tree of them.
    pub client_properties: bytes::Bytes,
    pub channel_max: u16,
    pub frame_max: u32,
    pub heartbeat: u16,
    /// Milliseconds since the epoch.
    pub connected_at_ms: u64,
    /// The SASL mechanism the client logged in with (`PLAIN`, `AMQPLAIN`, `EXTERNAL`).
    pub auth_mechanism: &'static str,
    /// The TLS session of a connection made to a TLS listener.
    pub tls: Option<Arc<TlsSession>>,
}

/// A TLS session as the management API shows it (RabbitMQ's `ssl_*` and `peer_cert_*`
/// connection fields), and the client certificate's names that SASL EXTERNAL logs in with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsSession {
    /// `tlsv1.3` or `tlsv1.2`, as RabbitMQ names them.
    pub protocol: &'static str,
    /// The cipher suite, as IANA names it.
    pub cipher: String,
    /// The client certificate's subject as RabbitMQ prints it (`O=org,CN=name`: RFC 4514,
    /// last RDN first); `None` without a client certificate.
    pub peer_cert_subject: Option<String>,
    pub peer_cert_issuer: Option<String>,
    /// RabbitMQ's `peer_cert_validity`: `{not_before,...},{not_after,...}`.
    pub peer_cert_validity: Option<String>,
    /// The subject's first common name.
    pub peer_cert_common_name: Option<String>,
}

impl ConnectionDetails {
    /// RabbitMQ's connection name: `"127.0.0.1:54321 -> 127.0.0.1:5672"`.
    pub fn name(&self) -> String {
        format!("{} -> {}", self.peer, self.local)
    }
}

/// A channel as listed by the management API.
#[derive(Debug, Clone, Default)]
pub struct ChannelDetails {
    pub number: u16,
    pub prefetch_count: u16,
    pub global_prefetch_count: u16,
    pub confirm: bool,
    pub transactional: bool,
    /// The channel's message counts, shared with the connection that adds to them.
    pub stats: Arc<ChannelStats>,
}

/// A consumer as listed by the management API.
#[derive(Debug, Clone)]
pub struct ConsumerDetails {
    pub channel: u16,
    pub consumer_tag: String,
    pub queue: String,
    pub ack_required: bool,
    pub exclusive: bool,
    pub prefetch_count: u16,
    pub arguments: Table,
}

/// One registered connection; the connection keeps it and updates it as channels and
/// consumers come and go.
pub struct ConnectionEntry {
    pub details: ConnectionDetails,
    /// Socket traffic, added to by the connection once per read and per flush.
    pub stats: ConnectionStats,
    registry: std::sync::Weak<Registry>,
    /// Sorted by number; a Vec because a connection has few channels and a map's node
    /// would cost more than all of them.
    channels: Mutex<Vec<ChannelDetails>>,
    consumers: Mutex<Vec<ConsumerDetails>>,
    stream_publishers: Mutex<Vec<StreamPublisherDetails>>,
    stream_consumers: Mutex<Vec<StreamConsumerDetails>>,
    close: Notify,
    close_reason: Mutex<Option<String>>,
}

impl ConnectionEntry {
    pub fn name(&self) -> String {
        self.details.name()
    }

    pub fn channels(&self) -> Vec<ChannelDetails> {
        self.channels.lock().clone()
    }

    pub fn consumers(&self) -> Vec<ConsumerDetails> {
        self.consumers.lock().clone()
    }

    pub fn channel_count(&self) -> usize {
        self.channels.lock().len()
    }

    /// Records a channel (open) or replaces its details (qos, confirm.select, tx.select).
    pub fn set_channel(&self, channel: ChannelDetails) {
        let mut channels = self.channels.lock();
        match channels.binary_search_by_key(&channel.number, |c| c.number) {
            Ok(at) => channels[at] = channel,
            Err(at) => {
                channels.insert(at, channel);
                self.count(|c| &c.channels_opened);
            }
        }
    }

    /// Changes a channel's details in place, if it is registered.
    pub fn update_channel(&self, number: u16, change: impl FnOnce(&mut ChannelDetails)) {
        if let Some(channel) = self.channels.lock().iter_mut().find(|c| c.number == number) {
            change(channel);
        }
    }

    /// Forgets a closed channel and its consumers.
    pub fn remove_channel(&self, number: u16) {
        let mut channels = self.channels.lock();
        let before = channels.len();
        channels.retain(|c| c.number != number);
        if channels.len() < before {
            self.count(|c| &c.channels_closed);
        }
        drop(channels);
        self.consumers.lock().retain(|c| c.channel != number);
    }

    pub fn add_consumer(&self, consumer: ConsumerDetails) {
        self.consumers.lock().push(consumer);
    }

    pub fn remove_consumer(&self, channel: u16, consumer_tag: &str) {
        self.consumers
            .lock()
            .retain(|c| !(c.channel == channel && c.consumer_tag == consumer_tag));
    }

    fn count(&self, counter: impl FnOnce(&GlobalCounters) -> &AtomicU64) {
        if let Some(registry) = self.registry.upgrade() {
            GlobalCounters::add(counter(&registry.counters), 1);
        }
    }

    /// Asks the connection to close with 320 CONNECTION_FORCED (management API DELETE).
    pub fn request_close(&self, reason: String) {
        *self.close_reason.lock() = Some(reason);
        self.close.notify_one();
    }

    /// Resolves once `request_close` was called (cancel-safe; a request made while nobody
    /// waits is kept for the next wait).
    pub async fn close_requested(&self) -> String {
        self.close.notified().await;
        self.close_reason
            .lock()
            .clone()
            .unwrap_or_else(|| "Closed via management plugin".to_string())
    }
}

/// Keeps a connection registered for as long as it lives.
pub struct Registration {
    registry: Arc<Registry>,
    entry: Arc<ConnectionEntry>,
}

impl Registration {
    pub fn entry(&self) -> &Arc<ConnectionEntry> {
        &self.entry
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let removed = self
            .registry
            .connections
            .write()
            .remove(&self.entry.details.id);
        debug_assert!(
            removed.is_some(),
            "invariant: registered once, removed once"
        );
        let counters = &self.registry.counters;
        GlobalCounters::add(&counters.connections_closed, 1);
        let channels = self.entry.channel_count() as u64;
        GlobalCounters::add(&counters.channels_closed, channels);
    }
}

/// Every open client connection, by id.
#[derive(Default)]
pub struct Registry {
    connections: RwLock<FxHashMap<ConnectionId, Arc<ConnectionEntry>>>,
    counters: GlobalCounters,
}

impl Registry {
    /// Registers an open connection until the returned guard drops.
    pub fn register(self: &Arc<Self>, details: ConnectionDetails) -> Registration {
        let id = details.id;
        let entry = Arc::new(ConnectionEntry {
            details,
            stats: ConnectionStats::default(),
            registry: Arc::downgrade(self),
            channels: Mutex::new(Vec::new()),
            consumers: Mutex::new(Vec::new()),
            stream_publishers: Mutex::new(Vec::new()),
            stream_consumers: Mutex::new(Vec::new()),
            close: Notify::new(),
            close_reason: Mutex::new(None),
        });
        let previous = self.connections.write().insert(id, entry.clone());
        assert!(previous.is_none(), "invariant: connection ids are unique");
        GlobalCounters::add(&self.counters.connections_opened, 1);
        Registration {
            registry: self.clone(),
            entry,
        }
    }

    /// The open connections, in no particular order.
    pub fn connections(&self) -> Vec<Arc<ConnectionEntry>> {
        self.connections.read().values().cloned().collect()
    }

    pub fn connection_by_name(&self, name: &str) -> Option<Arc<ConnectionEntry>> {
        self.connections
            .read()
            .values()
            .find(|c| c.name() == name)
            .cloned()
    }

    pub fn counters(&self) -> &GlobalCounters {
        &self.counters
    }
}

/// Broker-wide message totals (Prometheus' `rabbitmq_global_messages_*_total`), added to
/// once per batch by the connections.
#[derive(Debug, Default)]
pub struct GlobalCounters {
    pub received: AtomicU64,
    pub routed: AtomicU64,
    pub unroutable_dropped: AtomicU64,
    pub unroutable_returned: AtomicU64,
    pub confirmed: AtomicU64,
    /// The same totals for the stream protocol (Prometheus' `protocol="stream"` series).
    pub stream_received: AtomicU64,
    pub stream_confirmed: AtomicU64,
    pub stream_delivered: AtomicU64,
    pub connections_opened: AtomicU64,
    pub connections_closed: AtomicU64,
    pub channels_opened: AtomicU64,
    pub channels_closed: AtomicU64,
}

impl GlobalCounters {
    pub fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn details(id: ConnectionId, port: u16) -> ConnectionDetails {
        ConnectionDetails {
            id,
            protocol: "AMQP 0-9-1",
            peer: SocketAddr::from(([127, 0, 0, 1], port)),
            local: SocketAddr::from(([127, 0, 0, 1], 5672)),
            user: "guest".into(),
            vhost: Arc::from("/"),
            client_properties: bytes::Bytes::new(),
            channel_max: 2047,
            frame_max: 131_072,
            heartbeat: 60,
            connected_at_ms: 0,
            auth_mechanism: "PLAIN",
            tls: None,
        }
    }

    #[tokio::test]
    async fn registers_counts_and_closes_connections() {
        tracing::info!("register two connections; channels and consumers come and go");
        let registry = Arc::new(Registry::default());
        let first = registry.register(details(1, 40001));
        let second = registry.register(details(2, 40002));
        assert_eq!(registry.connections().len(), 2);
        let entry = first.entry();
        assert_eq!(entry.name(), "127.0.0.1:40001 -> 127.0.0.1:5672");
        for number in [2, 1] {
            entry.set_channel(ChannelDetails {
                number,
                ..ChannelDetails::default()
            });
        }
        entry.update_channel(1, |c| c.confirm = true);
        let numbers: Vec<u16> = entry.channels().iter().map(|c| c.number).collect();
        assert_eq!(numbers, [1, 2], "sorted by number");
        assert!(entry.channels()[0].confirm);
        entry.add_consumer(ConsumerDetails {
            channel: 2,
            consumer_tag: "ctag".into(),
            queue: "q".into(),
            ack_required: true,
            exclusive: false,
            prefetch_count: 0,
            arguments: Table::new(),
        });
        entry.remove_channel(2);
        assert!(
            entry.consumers().is_empty(),
            "a closed channel's consumers go with it"
        );

        tracing::info!("a close request made before anyone waits is kept");
        let by_name = registry
            .connection_by_name("127.0.0.1:40002 -> 127.0.0.1:5672")
            .expect("found by name");
        by_name.request_close("CONNECTION_FORCED - test".into());
        let reason = tokio::time::timeout(Duration::from_secs(1), by_name.close_requested())
            .await
            .expect("the request was kept");
        assert_eq!(reason, "CONNECTION_FORCED - test");

        tracing::info!("dropping a registration unregisters and counts the closes");
        drop(second);
        drop(first);
        assert!(registry.connections().is_empty());
        let counters = registry.counters();
        assert_eq!(GlobalCounters::get(&counters.connections_opened), 2);
        assert_eq!(GlobalCounters::get(&counters.connections_closed), 2);
        assert_eq!(GlobalCounters::get(&counters.channels_opened), 2);
        assert_eq!(
            GlobalCounters::get(&counters.channels_closed),
            2,
            "one closed, one with its connection"
        );
    }
}
