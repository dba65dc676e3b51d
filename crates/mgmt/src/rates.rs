//! Message rates: a background task samples the counters of queues, channels, connections and
//! exchanges once a second and keeps the per-second rates since the previous sample
//! (RabbitMQ's `*_details.rate`).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use tokio::sync::watch;
use warren_core::consumer::ConnectionId;
use warren_core::queue::QueueStatsSnapshot;
use warren_core::registry::GlobalCounters;
use warren_core::Broker;

pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Rates of one queue (or of all of them), messages per second.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MessageRates {
    pub publish: f64,
    pub deliver_get: f64,
    pub ack: f64,
    pub redeliver: f64,
    pub messages: f64,
    pub messages_ready: f64,
    pub messages_unacknowledged: f64,
}

#[derive(Default)]
struct Samples {
    at: Option<Instant>,
    queues: HashMap<(String, String), QueueStatsSnapshot>,
    /// The broker's received and confirmed totals.
    received: u64,
    confirmed: u64,
    channels: HashMap<ChannelKey, [u64; 11]>,
    connections: HashMap<ConnectionId, [u64; 4]>,
    exchanges: HashMap<(String, String), [u64; 2]>,
}

/// A channel: its connection's id and its number.
pub type ChannelKey = (ConnectionId, u16);

/// Broker-wide rates of what publishers do, messages per second.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PublishRates {
    pub publish: f64,
    pub confirm: f64,
}

/// The latest rates, by `(vhost, queue)`, and their sum.
#[derive(Default)]
pub struct Rates {
    queues: RwLock<HashMap<(String, String), MessageRates>>,
    total: RwLock<MessageRates>,
    publishers: RwLock<PublishRates>,
    /// Rates of each channel's, connection's and exchange's counters, in the order of
    /// `warren_core::stats`' `CHANNEL_STATS`, `CONNECTION_STATS` and `EXCHANGE_STATS`.
    channels: RwLock<HashMap<ChannelKey, [f64; 11]>>,
    connections: RwLock<HashMap<ConnectionId, [f64; 4]>>,
    exchanges: RwLock<HashMap<(String, String), [f64; 2]>>,
}

impl Rates {
    pub fn queue(&self, vhost: &str, name: &str) -> MessageRates {
        self.queues
            .read()
            .get(&(vhost.to_string(), name.to_string()))
            .copied()
            .unwrap_or_default()
    }

    pub fn total(&self) -> MessageRates {
        *self.total.read()
    }

    pub fn publishers(&self) -> PublishRates {
        *self.publishers.read()
    }

    pub fn channel(&self, key: ChannelKey) -> [f64; 11] {
        self.channels.read().get(&key).copied().unwrap_or_default()
    }

    pub fn connection(&self, id: ConnectionId) -> [f64; 4] {
        self.connections
            .read()
            .get(&id)
            .copied()
            .unwrap_or_default()
    }

    pub fn exchange(&self, vhost: &str, name: &str) -> [f64; 2] {
        self.exchanges
            .read()
            .get(&(vhost.to_string(), name.to_string()))
            .copied()
            .unwrap_or_default()
    }

    /// Samples every second until shutdown.
    pub async fn run(self: Arc<Self>, broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(SAMPLE_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut samples = Samples::default();
        loop {
            tokio::select! {
                _ = ticker.tick() => self.sample(&broker, &mut samples),
                _ = shutdown.changed() => return,
            }
        }
    }

    fn sample(&self, broker: &Broker, samples: &mut Samples) {
        let now = Instant::now();
        let elapsed = samples
            .at
            .map_or(0.0, |at| now.duration_since(at).as_secs_f64());
        let mut current = HashMap::new();
        let mut rates = HashMap::new();
        let mut total = MessageRates::default();
        for vhost_name in broker.vhost_names() {
            let Some(vhost) = broker.vhost(&vhost_name) else {
                continue;
            };
            for queue in vhost.queue_handles() {
                let key = (vhost_name.clone(), queue.name().to_string());
                let now_stats = queue.stats();
                // A queue new since the last sample started from zero.
                let before = samples.queues.get(&key).copied().unwrap_or_default();
                let rate = if elapsed > 0.0 {
                    rates_between(&before, &now_stats, elapsed)
                } else {
                    MessageRates::default()
                };
                add(&mut total, &rate);
                rates.insert(key.clone(), rate);
                current.insert(key, now_stats);
            }
        }
        let counters = broker.registry().counters();
        let received = GlobalCounters::get(&counters.received);
        let confirmed = GlobalCounters::get(&counters.confirmed);
        if elapsed > 0.0 {
            *self.publishers.write() = PublishRates {
                publish: received.saturating_sub(samples.received) as f64 / elapsed,
                confirm: confirmed.saturating_sub(samples.confirmed) as f64 / elapsed,
            };
        }
        samples.received = received;
        samples.confirmed = confirmed;
        self.sample_objects(broker, samples, elapsed);
        samples.at = Some(now);
        samples.queues = current;
        *self.queues.write() = rates;
        *self.total.write() = total;
    }
}

impl Rates {
    /// Samples the channels, connections and exchanges.
    fn sample_objects(&self, broker: &Broker, samples: &mut Samples, elapsed: f64) {
        let mut channels = HashMap::new();
        let mut connections = HashMap::new();
        for connection in broker.registry().connections() {
            let id = connection.details.id;
            connections.insert(id, connection.stats.snapshot());
            for channel in connection.channels() {
                let counts = channel.stats.snapshot();
                // A channel that never counted anything reads as zeros without an entry.
                if counts.iter().any(|&c| c > 0) {
                    channels.insert((id, channel.number), counts);
                }
            }
        }
        let mut exchanges = HashMap::new();
        for vhost_name in broker.vhost_names() {
            let Some(vhost) = broker.vhost(&vhost_name) else {
                continue;
            };
            // Only exchanges that were published to have counts (and rates).
            for (exchange, counts) in vhost.exchange_stats().all() {
                exchanges.insert((vhost_name.clone(), exchange), counts);
            }
        }
        *self.channels.write() = per_second(&samples.channels, &channels, elapsed);
        *self.connections.write() = per_second(&samples.connections, &connections, elapsed);
        *self.exchanges.write() = per_second(&samples.exchanges, &exchanges, elapsed);
        samples.channels = channels;
        samples.connections = connections;
        samples.exchanges = exchanges;
    }
}

/// Per-second rates of each key's counters since `before` (an object new since then started
/// from zero); none before the second sample. Only keys with a rate above zero are kept: an
/// idle object reads as zeros without an entry, so idle channels and exchanges cost nothing.
fn per_second<K: Eq + Hash + Clone, const N: usize>(
    before: &HashMap<K, [u64; N]>,
    now: &HashMap<K, [u64; N]>,
    seconds: f64,
) -> HashMap<K, [f64; N]> {
    if seconds <= 0.0 {
        return HashMap::new();
    }
    now.iter()
        .map(|(key, counts)| {
            let earlier = before.get(key).copied().unwrap_or([0; N]);
            let mut rates = [0.0; N];
            for ((rate, now), then) in rates.iter_mut().zip(counts).zip(earlier) {
                *rate = now.saturating_sub(then) as f64 / seconds;
            }
            (key.clone(), rates)
        })
        .filter(|(_, rates)| rates.iter().any(|&r| r > 0.0))
        .collect()
}

fn rates_between(a: &QueueStatsSnapshot, b: &QueueStatsSnapshot, seconds: f64) -> MessageRates {
    let counter = |x: u64, y: u64| y.saturating_sub(x) as f64 / seconds;
    let gauge = |x: u64, y: u64| (y as f64 - x as f64) / seconds;
    MessageRates {
        publish: counter(a.published_total, b.published_total),
        deliver_get: counter(a.delivered_total, b.delivered_total),
        ack: counter(a.acknowledged_total, b.acknowledged_total),
        redeliver: counter(a.redelivered_total, b.redelivered_total),
        messages: gauge(
            a.messages_ready + a.messages_unacknowledged,
            b.messages_ready + b.messages_unacknowledged,
        ),
        messages_ready: gauge(a.messages_ready, b.messages_ready),
        messages_unacknowledged: gauge(a.messages_unacknowledged, b.messages_unacknowledged),
    }
}

pub(crate) fn add(total: &mut MessageRates, rate: &MessageRates) {
    total.publish += rate.publish;
    total.deliver_get += rate.deliver_get;
    total.ack += rate.ack;
    total.redeliver += rate.redeliver;
    total.messages += rate.messages;
    total.messages_ready += rate.messages_ready;
    total.messages_unacknowledged += rate.messages_unacknowledged;
}
