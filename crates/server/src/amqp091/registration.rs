//! What the management API and Prometheus see of a connection: its registry entry (made once
//! it is open), the turn's message counts added to the broker's totals, and each channel's
//! gauges.

use std::sync::Arc;

use warren_core::registry::{ConnectionDetails, ConnectionEntry, GlobalCounters};

use super::connection::Connection;

impl Connection {
    /// Adds this turn's message counts to the broker's totals (Prometheus' global counters).
    pub(super) fn add_counts(&mut self) {
        let counts = std::mem::take(&mut self.pending.counts);
        if counts.received + counts.confirmed == 0 {
            return;
        }
        let global = self.shared.broker.registry().counters();
        GlobalCounters::add(&global.received, counts.received);
        GlobalCounters::add(&global.routed, counts.routed);
        GlobalCounters::add(&global.unroutable_dropped, counts.unroutable_dropped);
        GlobalCounters::add(&global.unroutable_returned, counts.unroutable_returned);
        GlobalCounters::add(&global.confirmed, counts.confirmed);
        if let Some(vhost) = &self.vhost {
            for (exchange, published, routed) in self.pending.exchanges.drain(..) {
                vhost.exchange_stats().add(&exchange, published, routed);
            }
        }
    }

    /// Publishes each channel's unacked, unconfirmed and uncommitted counts for the management
    /// API: a store per channel and turn.
    pub(super) fn set_channel_gauges(&self) {
        for channel in self.channels.values() {
            let unconfirmed = channel
                .confirm
                .as_ref()
                .map_or(0, |c| c.published.saturating_sub(c.acked));
            let (messages, acks) = channel.tx.as_ref().map_or((0, 0), |tx| tx.uncommitted());
            channel.stats.set_gauges([
                channel.unacked.len() as u64,
                unconfirmed,
                messages as u64,
                acks as u64,
            ]);
        }
    }

    /// Lists the connection in the broker's registry (management API) once it is open.
    pub(super) fn register(&mut self) {
        let details = ConnectionDetails {
            id: self.id,
            protocol: "AMQP 0-9-1",
            peer: self.peer,
            // Where the client connected to: the connection's name is `peer -> local`.
            local: self.local,
            user: self.user.clone(),
            vhost: self
                .vhost
                .as_ref()
                .map_or_else(|| Arc::from(""), |v| v.name().clone()),
            client_properties: std::mem::take(&mut self.client_properties),
            channel_max: self.tuning.channel_max,
            frame_max: self.tuning.frame_max,
            heartbeat: self.tuning.heartbeat,
            auth_mechanism: self.auth_mechanism,
            tls: self.tls.clone(),
            connected_at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        };
        self.registration = Some(self.shared.broker.registry().register(details));
    }

    /// The registry's entry of this connection, to note channel and consumer changes.
    pub(super) fn registry_entry(&self) -> Option<&ConnectionEntry> {
        self.registration.as_ref().map(|r| &**r.entry())
    }
}

/// Resolves when the management API asks the connection to close (never without a
/// registration).
pub(super) async fn close_requested(entry: Option<&ConnectionEntry>) -> String {
    match entry {
        Some(entry) => entry.close_requested().await,
        None => std::future::pending().await,
    }
}
