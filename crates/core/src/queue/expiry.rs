//! When each message of a classic queue expires (`x-message-ttl`, the `expiration` property).
//!
//! Only messages that have a deadline are here, so a queue without TTLs pays nothing. A map
//! gives a message's deadline (checked before every delivery: an expired message is never
//! delivered) and a min-heap the next one due (the queue task sleeps until then and expires
//! messages wherever they stand, not only at the head). Heap entries are not removed when a
//! message leaves; a stale entry is skipped when it comes up, and the heap is rebuilt from the
//! map once stale entries outnumber live ones, so its size stays within twice the map's.
//! Deadlines are milliseconds since the epoch, so they survive a restart in the store.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{SystemTime, UNIX_EPOCH};

use rustc_hash::FxHashMap;

/// Heap entries below which the heap is never rebuilt.
const HEAP_REBUILD_MIN: usize = 1024;

#[derive(Default)]
pub struct Expiry {
    /// Deadline of every message (ready or unacked) that has one, by sequence number.
    deadlines: FxHashMap<u64, u64>,
    /// (deadline, seq) of ready messages, soonest first; may hold stale entries.
    heap: BinaryHeap<Reverse<(u64, u64)>>,
}

impl Expiry {
    pub fn insert(&mut self, seq: u64, deadline_ms: u64) {
        self.deadlines.insert(seq, deadline_ms);
        self.heap.push(Reverse((deadline_ms, seq)));
        self.maybe_rebuild();
    }

    pub fn get(&self, seq: u64) -> Option<u64> {
        self.deadlines.get(&seq).copied()
    }

    /// The message left the queue for good.
    pub fn remove(&mut self, seq: u64) {
        self.deadlines.remove(&seq);
    }

    /// A requeued message is ready again: it keeps its deadline, as in RabbitMQ.
    pub fn requeued(&mut self, seq: u64) {
        if let Some(&deadline) = self.deadlines.get(&seq) {
            self.heap.push(Reverse((deadline, seq)));
        }
    }

    /// The soonest deadline that may still matter.
    pub fn next_deadline(&mut self) -> Option<u64> {
        while let Some(&Reverse((deadline, seq))) = self.heap.peek() {
            if self.deadlines.get(&seq) == Some(&deadline) {
                return Some(deadline);
            }
            self.heap.pop();
        }
        None
    }

    /// A message whose deadline is at or before `now_ms`; the caller expires it if it is
    /// ready (an unacked one keeps its deadline for when it is requeued).
    pub fn pop_due(&mut self, now_ms: u64) -> Option<u64> {
        while let Some(&Reverse((deadline, seq))) = self.heap.peek() {
            if deadline > now_ms {
                return None;
            }
            self.heap.pop();
            if self.deadlines.get(&seq) == Some(&deadline) {
                return Some(seq);
            }
        }
        None
    }

    pub fn is_empty(&self) -> bool {
        self.deadlines.is_empty()
    }

    fn maybe_rebuild(&mut self) {
        if self.heap.len() >= HEAP_REBUILD_MIN && self.heap.len() > 2 * self.deadlines.len() {
            self.heap = self
                .deadlines
                .iter()
                .map(|(&seq, &deadline)| Reverse((deadline, seq)))
                .collect();
        }
    }
}

/// The deadline of a message enqueued at `now_ms`: the lower of the queue's and the message's
/// TTL wins.
pub fn deadline(
    now_ms: u64,
    queue_ttl_ms: Option<u32>,
    message_ttl_ms: Option<u32>,
) -> Option<u64> {
    let ttl = match (queue_ttl_ms, message_ttl_ms) {
        (Some(q), Some(m)) => q.min(m),
        (Some(ttl), None) | (None, Some(ttl)) => ttl,
        (None, None) => return None,
    };
    Some(now_ms.saturating_add(u64::from(ttl)))
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_messages_come_out_soonest_first_and_left_ones_are_skipped() {
        let mut expiry = Expiry::default();
        expiry.insert(1, 300);
        expiry.insert(2, 100);
        expiry.insert(3, 200);
        expiry.remove(3);
        assert_eq!(expiry.next_deadline(), Some(100));
        assert_eq!(expiry.pop_due(250), Some(2));
        assert_eq!(expiry.pop_due(250), None, "3 left, 1 is not due");
        assert_eq!(expiry.next_deadline(), Some(300));
        assert_eq!(deadline(10, Some(5), Some(3)), Some(13));
        assert_eq!(deadline(10, None, None), None);
    }

    #[test]
    fn the_heap_stays_within_twice_the_live_deadlines() {
        let mut expiry = Expiry::default();
        for seq in 0..10_000 {
            expiry.insert(seq, 1_000_000 + seq);
            expiry.remove(seq);
        }
        assert!(
            expiry.heap.len() <= HEAP_REBUILD_MIN,
            "{}",
            expiry.heap.len()
        );
    }
}
