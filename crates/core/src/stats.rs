//! Message and byte counters of channels, connections and exchanges, as RabbitMQ's management
//! API shows them (`message_stats` of a channel or an exchange, `recv_oct`/`send_oct` of a
//! connection). Kept on the side of the message path and read by the management API's sampler.
//!
//! A channel's and a connection's counters have one writer, the connection task, so adding is a
//! relaxed load and store ([`add_owned`]): no read-modify-write, no lock, the cost of a plain
//! field. Readers see every count at most one turn late. An exchange's counters are shared by
//! every connection that publishes to it; connections add what a turn published once per turn.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use rustc_hash::FxHashMap;

/// Adds `n` to a counter that only the calling task writes (see the module doc).
#[inline]
pub fn add_owned(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// A counter's current value (relaxed: readers may be a turn late).
pub fn read(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// The names of [`ChannelStats::snapshot`]'s figures, RabbitMQ's `message_stats` keys.
pub const CHANNEL_STATS: [&str; 11] = [
    "publish",
    "confirm",
    "return_unroutable",
    "drop_unroutable",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "get_empty",
    "ack",
    "redeliver",
];

/// One channel's message counts; written by its connection's task only.
#[derive(Debug, Default)]
pub struct ChannelStats {
    pub publish: AtomicU64,
    pub confirm: AtomicU64,
    pub return_unroutable: AtomicU64,
    pub drop_unroutable: AtomicU64,
    pub deliver: AtomicU64,
    pub deliver_no_ack: AtomicU64,
    pub get: AtomicU64,
    pub get_no_ack: AtomicU64,
    pub get_empty: AtomicU64,
    pub ack: AtomicU64,
    pub redeliver: AtomicU64,
    /// Gauges, set once per turn: deliveries waiting for an ack, publishes waiting for a
    /// confirm, and publishes and acks waiting for tx.commit.
    pub unacked: AtomicU64,
    pub unconfirmed: AtomicU64,
    pub uncommitted_messages: AtomicU64,
    pub uncommitted_acks: AtomicU64,
}

impl ChannelStats {
    /// Sets the gauges (see `unacked`): `[unacked, unconfirmed, uncommitted messages,
    /// uncommitted acks]`.
    pub fn set_gauges(&self, gauges: [u64; 4]) {
        let fields = [
            &self.unacked,
            &self.unconfirmed,
            &self.uncommitted_messages,
            &self.uncommitted_acks,
        ];
        for (field, value) in fields.into_iter().zip(gauges) {
            field.store(value, Ordering::Relaxed);
        }
    }

    /// The gauges in `set_gauges`' order.
    pub fn gauges(&self) -> [u64; 4] {
        [
            read(&self.unacked),
            read(&self.unconfirmed),
            read(&self.uncommitted_messages),
            read(&self.uncommitted_acks),
        ]
    }

    /// The counts in [`CHANNEL_STATS`]'s order.
    pub fn snapshot(&self) -> [u64; 11] {
        [
            read(&self.publish),
            read(&self.confirm),
            read(&self.return_unroutable),
            read(&self.drop_unroutable),
            read(&self.deliver),
            read(&self.deliver_no_ack),
            read(&self.get),
            read(&self.get_no_ack),
            read(&self.get_empty),
            read(&self.ack),
            read(&self.redeliver),
        ]
    }
}

/// The names of [`ConnectionStats::snapshot`]'s figures.
pub const CONNECTION_STATS: [&str; 4] = ["recv_oct", "recv_cnt", "send_oct", "send_cnt"];

/// A connection's socket traffic: bytes and read or write calls; written by its task only.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    pub recv_oct: AtomicU64,
    pub recv_cnt: AtomicU64,
    pub send_oct: AtomicU64,
    pub send_cnt: AtomicU64,
}

impl ConnectionStats {
    /// One read of `bytes` from the socket.
    pub fn received(&self, bytes: u64) {
        add_owned(&self.recv_oct, bytes);
        add_owned(&self.recv_cnt, 1);
    }

    /// `writes` write calls that sent `bytes` in all.
    pub fn sent(&self, bytes: u64, writes: u64) {
        add_owned(&self.send_oct, bytes);
        add_owned(&self.send_cnt, writes);
    }

    /// The counts in [`CONNECTION_STATS`]'s order.
    pub fn snapshot(&self) -> [u64; 4] {
        [
            read(&self.recv_oct),
            read(&self.recv_cnt),
            read(&self.send_oct),
            read(&self.send_cnt),
        ]
    }
}

/// The names of an exchange's figures.
pub const EXCHANGE_STATS: [&str; 2] = ["publish_in", "publish_out"];

#[derive(Debug, Default)]
struct ExchangeCounts {
    publish_in: AtomicU64,
    publish_out: AtomicU64,
}

/// The vhost's exchanges' counts, by exchange name: `publish_in` counts the messages published
/// to an exchange, `publish_out` the copies it routed to queues (RabbitMQ's exchange
/// `message_stats`). An entry exists only for an exchange that was published to, so the table
/// is bounded by the vhost's exchanges; a deleted exchange's entry goes with it.
#[derive(Debug, Default)]
pub struct ExchangeStatsTable {
    exchanges: RwLock<FxHashMap<Box<[u8]>, ExchangeCounts>>,
}

impl ExchangeStatsTable {
    /// Adds one turn's publishes to `exchange` (its name's bytes; empty for the default).
    pub fn add(&self, exchange: &[u8], publish_in: u64, publish_out: u64) {
        if publish_in + publish_out == 0 {
            return;
        }
        {
            let exchanges = self.exchanges.read();
            if let Some(counts) = exchanges.get(exchange) {
                counts.publish_in.fetch_add(publish_in, Ordering::Relaxed);
                counts.publish_out.fetch_add(publish_out, Ordering::Relaxed);
                return;
            }
        }
        let mut exchanges = self.exchanges.write();
        let counts = exchanges.entry(Box::from(exchange)).or_default();
        counts.publish_in.fetch_add(publish_in, Ordering::Relaxed);
        counts.publish_out.fetch_add(publish_out, Ordering::Relaxed);
    }

    /// `[publish_in, publish_out]` of an exchange (zeros when nothing was published to it).
    pub fn get(&self, exchange: &str) -> [u64; 2] {
        self.exchanges
            .read()
            .get(exchange.as_bytes())
            .map_or([0, 0], |c| [read(&c.publish_in), read(&c.publish_out)])
    }

    /// Every exchange that was published to, with `[publish_in, publish_out]` (the rates
    /// sampler's one read of the table a second).
    pub fn all(&self) -> Vec<(String, [u64; 2])> {
        self.exchanges
            .read()
            .iter()
            .map(|(name, c)| {
                let name = String::from_utf8_lossy(name).into_owned();
                (name, [read(&c.publish_in), read(&c.publish_out)])
            })
            .collect()
    }

    /// Forgets a deleted exchange's counts: one declared again under its name starts at zero.
    pub fn forget(&self, exchange: &str) {
        self.exchanges.write().remove(exchange.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_and_a_deleted_exchange_starts_over() {
        tracing::info!("owned counters add like plain fields");
        let channel = ChannelStats::default();
        add_owned(&channel.publish, 3);
        add_owned(&channel.publish, 2);
        add_owned(&channel.ack, 1);
        assert_eq!(channel.snapshot()[0], 5);
        assert_eq!(channel.snapshot()[9], 1);
        let connection = ConnectionStats::default();
        connection.received(100);
        connection.sent(40, 2);
        assert_eq!(connection.snapshot(), [100, 1, 40, 2]);

        tracing::info!("exchanges count per name, and forget on delete");
        let table = ExchangeStatsTable::default();
        table.add(b"x", 2, 4);
        table.add(b"x", 1, 0);
        table.add(b"", 1, 1);
        assert_eq!(table.get("x"), [3, 4]);
        assert_eq!(table.get(""), [1, 1]);
        table.forget("x");
        assert_eq!(table.get("x"), [0, 0]);
    }
}
