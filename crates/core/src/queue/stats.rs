//! A queue's figures for the management API and Prometheus, read without asking the queue.
//!
//! The queue task counts in plain integers and copies them here once per turn (a handful of
//! relaxed stores per batch of commands), so nothing is added per message on the hot path.

use std::sync::atomic::{AtomicU64, Ordering};

/// Gauges and running totals of one queue, as of the end of its last turn.
#[derive(Debug, Default)]
pub struct QueueStats {
    messages_ready: AtomicU64,
    messages_unacknowledged: AtomicU64,
    message_bytes_ready: AtomicU64,
    consumers: AtomicU64,
    published_total: AtomicU64,
    delivered_total: AtomicU64,
    acknowledged_total: AtomicU64,
    redelivered_total: AtomicU64,
    memory_bytes: AtomicU64,
}

/// A copy of [`QueueStats`] at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStatsSnapshot {
    pub messages_ready: u64,
    pub messages_unacknowledged: u64,
    pub message_bytes_ready: u64,
    pub consumers: u64,
    /// Messages the queue took (publishes routed to it).
    pub published_total: u64,
    /// Messages handed to consumers and basic.get callers.
    pub delivered_total: u64,
    pub acknowledged_total: u64,
    pub redelivered_total: u64,
    /// An estimate of the bytes the queue holds in memory: its resident messages and an
    /// index entry per message (RabbitMQ's queue `memory`).
    pub memory_bytes: u64,
}

impl QueueStats {
    /// Called by the queue task at the end of a turn.
    pub fn store(&self, figures: &QueueStatsSnapshot) {
        let relaxed = Ordering::Relaxed;
        self.messages_ready.store(figures.messages_ready, relaxed);
        self.messages_unacknowledged
            .store(figures.messages_unacknowledged, relaxed);
        self.message_bytes_ready
            .store(figures.message_bytes_ready, relaxed);
        self.consumers.store(figures.consumers, relaxed);
        self.published_total.store(figures.published_total, relaxed);
        self.delivered_total.store(figures.delivered_total, relaxed);
        self.acknowledged_total
            .store(figures.acknowledged_total, relaxed);
        self.redelivered_total
            .store(figures.redelivered_total, relaxed);
        self.memory_bytes.store(figures.memory_bytes, relaxed);
    }

    pub fn snapshot(&self) -> QueueStatsSnapshot {
        let relaxed = Ordering::Relaxed;
        QueueStatsSnapshot {
            messages_ready: self.messages_ready.load(relaxed),
            messages_unacknowledged: self.messages_unacknowledged.load(relaxed),
            message_bytes_ready: self.message_bytes_ready.load(relaxed),
            consumers: self.consumers.load(relaxed),
            published_total: self.published_total.load(relaxed),
            delivered_total: self.delivered_total.load(relaxed),
            acknowledged_total: self.acknowledged_total.load(relaxed),
            redelivered_total: self.redelivered_total.load(relaxed),
            memory_bytes: self.memory_bytes.load(relaxed),
        }
    }
}
