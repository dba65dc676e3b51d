//! The ready messages of a classic queue: one FIFO per priority level (one level without
//! `x-max-priority`), delivered highest level first.
//!
//! Within a level, fresh messages sit in `fresh` in sequence order and requeued ones in
//! `returned`, keyed by sequence number and delivered first: every unacked sequence number is
//! lower than every fresh one (delivery always takes the lowest), so `returned` then `fresh`
//! is the original order and a requeued message goes back to its position within its level,
//! as in RabbitMQ. A message that leaves from the middle (it expired) becomes a tombstone
//! where it stood (no shifting of a long deque) and is skipped when reached; tombstones are
//! swept once they are half of a level.
//!
//! The queue also keeps here what its limits and memory budget read: how many messages are
//! ready, the bytes of those held in memory, and their body bytes (`x-max-length-bytes`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use warren_store::Location;

use crate::message::Message;

/// Record bytes around a stored message's body: the estimate of a paged-out message's body
/// size is its record length less this.
const STORED_OVERHEAD_BYTES: u64 = 34;
/// Tombstones in a level below which it is never swept.
const TOMBSTONES_SWEEP_MIN: usize = 1024;

/// A message as the queue holds it: in memory, on disk, or both.
#[derive(Debug, Clone)]
pub struct Stored {
    pub message: Option<Arc<Message>>,
    pub location: Option<Location>,
    /// Handed to a consumer before (or maybe, before a crash).
    pub redelivered: bool,
    /// A tombstone: the message left from the middle of its level.
    pub gone: bool,
}

/// 32 bytes: what a message beyond the memory budget costs.
#[derive(Debug)]
pub struct Ready {
    pub seq: u64,
    pub stored: Stored,
}

#[derive(Default)]
struct Level {
    fresh: VecDeque<Ready>,
    returned: BTreeMap<u64, Ready>,
    tombstones: usize,
}

pub struct ReadyQueue {
    /// Index = priority level; the last is the highest.
    levels: Vec<Level>,
    len: usize,
    memory: usize,
    body_bytes: u64,
}

impl ReadyQueue {
    pub fn new(levels: usize) -> ReadyQueue {
        assert!((1..=256).contains(&levels), "1 to 256 priority levels");
        ReadyQueue {
            levels: (0..levels).map(|_| Level::default()).collect(),
            len: 0,
            memory: 0,
            body_bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the ready messages held in memory.
    pub fn memory(&self) -> usize {
        self.memory
    }

    /// Body bytes of the ready messages (estimated for paged-out ones).
    pub fn body_bytes(&self) -> u64 {
        self.body_bytes
    }

    /// Appends a newly published message (its `seq` is the highest so far).
    pub fn push(&mut self, level: usize, ready: Ready) {
        self.account_in(&ready.stored);
        let level = self.level_mut(level);
        debug_assert!(level.fresh.back().is_none_or(|r| r.seq < ready.seq));
        level.fresh.push_back(ready);
    }

    /// Puts a requeued message back at its position within its level.
    pub fn requeue(&mut self, level: usize, ready: Ready) {
        self.account_in(&ready.stored);
        let previous = self.level_mut(level).returned.insert(ready.seq, ready);
        debug_assert!(previous.is_none(), "a sequence number is requeued once");
    }

    /// Takes the next message to deliver: highest level, requeued before fresh.
    pub fn pop(&mut self) -> Option<Ready> {
        let ready = self.levels.iter_mut().rev().find_map(|level| {
            if let Some((_, ready)) = level.returned.pop_first() {
                return Some(ready);
            }
            while let Some(ready) = level.fresh.pop_front() {
                if !ready.stored.gone {
                    return Some(ready);
                }
                level.tombstones -= 1;
            }
            None
        })?;
        self.account_out(&ready.stored);
        Some(ready)
    }

    /// Seq and location of the paged-out messages among the next `count` that `pop` would
    /// take, in that order (for reading them back together).
    pub fn next_paged_out(&self, count: usize) -> Vec<(u64, Location)> {
        let next = self.levels.iter().rev().flat_map(|level| {
            level
                .returned
                .values()
                .chain(level.fresh.iter().filter(|r| !r.stored.gone))
        });
        let head_paged = next
            .clone()
            .next()
            .is_some_and(|r| r.stored.message.is_none());
        if !head_paged {
            return Vec::new(); // the usual case: the head is in memory
        }
        next.take(count)
            .filter(|r| r.stored.message.is_none())
            .filter_map(|r| r.stored.location.map(|at| (r.seq, at)))
            .collect()
    }

    /// Takes the message `seq` out wherever it stands (it expired); `None` when not ready.
    pub fn remove(&mut self, seq: u64) -> Option<Ready> {
        let ready = self.levels.iter_mut().find_map(|level| take(level, seq))?;
        self.account_out(&ready.stored);
        Some(ready)
    }

    /// Notes where the store wrote message `seq`; `page_out` drops its body from memory.
    /// Returns false when `seq` is not ready.
    pub fn set_location(&mut self, seq: u64, location: Location, page_out: bool) -> bool {
        let Some(at) = self.levels.iter().position(|l| find(l, seq).is_some()) else {
            return false;
        };
        let level = &mut self.levels[at];
        let index = find(level, seq).expect("invariant: just found");
        let stored = &mut level.fresh[index].stored;
        let before = (resident_bytes(stored), body_bytes(stored));
        stored.location = Some(location);
        if page_out {
            stored.message = None; // read back when delivered
        }
        let after = (resident_bytes(stored), body_bytes(stored));
        self.memory = self.memory - before.0 + after.0;
        self.body_bytes = self.body_bytes - before.1 + after.1;
        true
    }

    /// Takes every ready message (purge).
    pub fn drain(&mut self) -> Vec<Ready> {
        let mut out = Vec::with_capacity(self.len);
        for level in &mut self.levels {
            out.extend(std::mem::take(&mut level.returned).into_values());
            out.extend(level.fresh.drain(..).filter(|r| !r.stored.gone));
            level.tombstones = 0;
        }
        self.len = 0;
        self.memory = 0;
        self.body_bytes = 0;
        out
    }

    /// Every ready message, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Ready> {
        self.levels.iter().flat_map(|level| {
            let fresh = level.fresh.iter().filter(|r| !r.stored.gone);
            level.returned.values().chain(fresh)
        })
    }

    /// Gives memory back after a drained backlog and sweeps tombstones.
    pub fn shrink(&mut self) {
        for level in &mut self.levels {
            if level.tombstones >= TOMBSTONES_SWEEP_MIN && level.tombstones * 2 >= level.fresh.len()
            {
                level.fresh.retain(|r| !r.stored.gone);
                level.tombstones = 0;
            }
            let fresh = &mut level.fresh;
            if fresh.capacity() > 4096 && fresh.len() < fresh.capacity() / 4 {
                fresh.shrink_to(fresh.len() * 2);
            }
        }
    }

    /// Recounts what the running totals say (`len`, `memory`, `body_bytes`, each level's
    /// tombstones) and checks each level's order: fresh sequence numbers ascend, requeued
    /// ones are keyed by their own. O(n): the caller decides when it is worth it.
    pub fn check_counts(&self) {
        let (mut len, mut memory, mut body) = (0, 0, 0);
        for level in &self.levels {
            let mut tombstones = 0;
            let mut previous = None;
            for ready in &level.fresh {
                assert!(previous < Some(ready.seq), "invariant: fresh seqs ascend");
                previous = Some(ready.seq);
                if ready.stored.gone {
                    tombstones += 1;
                    continue;
                }
                len += 1;
                memory += resident_bytes(&ready.stored);
                body += body_bytes(&ready.stored);
            }
            for (seq, ready) in &level.returned {
                assert_eq!(
                    *seq, ready.seq,
                    "invariant: a requeued message under its seq"
                );
                assert!(!ready.stored.gone, "invariant: no tombstone is requeued");
                len += 1;
                memory += resident_bytes(&ready.stored);
                body += body_bytes(&ready.stored);
            }
            assert_eq!(
                level.tombstones, tombstones,
                "invariant: tombstones counted"
            );
        }
        assert_eq!(self.len, len, "invariant: ready count = ready messages");
        assert_eq!(
            self.memory, memory,
            "invariant: memory = resident bytes of ready ones"
        );
        assert_eq!(
            self.body_bytes, body,
            "invariant: body bytes = sum of ready bodies"
        );
    }

    fn level_mut(&mut self, level: usize) -> &mut Level {
        let last = self.levels.len() - 1;
        &mut self.levels[level.min(last)]
    }

    fn account_in(&mut self, stored: &Stored) {
        self.len += 1;
        self.memory += resident_bytes(stored);
        self.body_bytes += body_bytes(stored);
    }

    fn account_out(&mut self, stored: &Stored) {
        debug_assert!(self.len > 0, "a ready message leaves once");
        self.len -= 1;
        self.memory -= resident_bytes(stored);
        self.body_bytes -= body_bytes(stored);
    }
}

/// The index in `fresh` of live message `seq`.
fn find(level: &Level, seq: u64) -> Option<usize> {
    // Sequence numbers in `fresh` ascend without repeats, so `seq` stands at least
    // `back - seq` places before the back, and exactly there when no number between them is
    // missing: the common case of a message enqueued in this turn, found without a search.
    let back = level.fresh.back()?.seq;
    let from_back = usize::try_from(back.checked_sub(seq)?).ok()?;
    let guess = (level.fresh.len() - 1).saturating_sub(from_back);
    let at = if level.fresh.get(guess).is_some_and(|r| r.seq == seq) {
        guess
    } else {
        level.fresh.binary_search_by_key(&seq, |r| r.seq).ok()?
    };
    debug_assert_eq!(level.fresh[at].seq, seq);
    (!level.fresh[at].stored.gone).then_some(at)
}

fn take(level: &mut Level, seq: u64) -> Option<Ready> {
    if let Some(ready) = level.returned.remove(&seq) {
        return Some(ready);
    }
    let at = find(level, seq)?;
    if at == 0 {
        return level.fresh.pop_front();
    }
    let slot = &mut level.fresh[at];
    let tombstone = Stored {
        message: None,
        location: None,
        redelivered: false,
        gone: true,
    };
    let stored = std::mem::replace(&mut slot.stored, tombstone);
    level.tombstones += 1;
    Some(Ready { seq, stored })
}

/// Bytes a stored message occupies in memory.
fn resident_bytes(stored: &Stored) -> usize {
    stored.message.as_ref().map_or(0, |m| m.resident_bytes())
}

/// Body bytes of a stored message, estimated from its record when paged out.
fn body_bytes(stored: &Stored) -> u64 {
    match (&stored.message, stored.location) {
        (Some(message), _) => message.body.len() as u64,
        (None, Some(location)) => {
            u64::from(location.len.get()).saturating_sub(STORED_OVERHEAD_BYTES)
        }
        (None, None) => 0,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn ready(seq: u64) -> Ready {
        let message = Message::new(
            Bytes::new(),
            Bytes::new(),
            Bytes::new(),
            Bytes::from(seq.to_string()),
        );
        Ready {
            seq,
            stored: Stored {
                message: Some(Arc::new(message)),
                location: None,
                redelivered: false,
                gone: false,
            },
        }
    }

    fn order(queue: &mut ReadyQueue) -> Vec<u64> {
        std::iter::from_fn(|| queue.pop().map(|r| r.seq)).collect()
    }

    #[test]
    fn higher_levels_first_fifo_within_a_level_requeued_in_place() {
        let mut queue = ReadyQueue::new(3);
        for (seq, level) in [(1, 0), (2, 2), (3, 1), (4, 2), (5, 0)] {
            queue.push(level, ready(seq));
        }
        let first = queue.pop().unwrap();
        assert_eq!(first.seq, 2);
        queue.requeue(2, first);
        assert_eq!(order(&mut queue), [2, 4, 3, 1, 5]);
        assert_eq!((queue.len(), queue.memory(), queue.body_bytes()), (0, 0, 0));
    }

    #[test]
    fn a_message_taken_from_the_middle_leaves_a_tombstone_that_is_skipped() {
        let mut queue = ReadyQueue::new(1);
        for seq in 1..=4 {
            queue.push(0, ready(seq));
        }
        assert_eq!(queue.remove(3).map(|r| r.seq), Some(3));
        assert!(queue.remove(3).is_none());
        assert_eq!(queue.len(), 3);
        assert_eq!(queue.iter().count(), 3);
        assert_eq!(order(&mut queue), [1, 2, 4]);
    }
}
