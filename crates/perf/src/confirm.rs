//! `ConfirmTracker`: a producer channel's unconfirmed messages, for `-c N` (at most N
//! outstanding) and for confirm latency (publish to confirm, per message).
//!
//! Publish sequence numbers start at 1 and grow by one per message, so the unconfirmed ones are
//! a window `[base, base + len)` kept as a ring of send times; a message confirmed out of order
//! leaves a hole (send time 0) until everything before it is confirmed too.

use std::collections::VecDeque;

/// One channel's unconfirmed messages.
#[derive(Debug, Default)]
pub struct ConfirmTracker {
    /// Sequence number of the ring's front.
    base: u64,
    /// Send time (ns) per sequence number from `base`; 0 once confirmed.
    sent_ns: VecDeque<u64>,
    outstanding: u64,
}

/// What a confirm settled.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    pub acked: u64,
    pub nacked: u64,
}

impl ConfirmTracker {
    pub fn new(window: u32) -> ConfirmTracker {
        ConfirmTracker {
            base: 1,
            sent_ns: VecDeque::with_capacity(window as usize),
            outstanding: 0,
        }
    }

    /// Messages published and not yet confirmed.
    pub fn outstanding(&self) -> u64 {
        self.outstanding
    }

    /// Notes a publish sent at `sent_ns` (which must be above 0).
    pub fn push(&mut self, sent_ns: u64) {
        debug_assert!(sent_ns > 0, "invariant: 0 marks a confirmed slot");
        self.sent_ns.push_back(sent_ns.max(1));
        self.outstanding += 1;
    }

    /// Settles `sequence` (and every earlier one when `multiple`), pushing the confirm latency
    /// (µs) of each acked message onto `latencies_us`.
    pub fn settle(
        &mut self,
        sequence: u64,
        multiple: bool,
        acked: bool,
        now_ns: u64,
        latencies_us: &mut Vec<u64>,
    ) -> Settled {
        let mut settled = Settled::default();
        let mut one = |sent: &mut u64| {
            if *sent == 0 {
                return;
            }
            if acked {
                settled.acked += 1;
                latencies_us.push(now_ns.saturating_sub(*sent) / 1000);
            } else {
                settled.nacked += 1;
            }
            *sent = 0;
        };
        let end = sequence.saturating_sub(self.base).saturating_add(1);
        let end = usize::try_from(end)
            .unwrap_or(usize::MAX)
            .min(self.sent_ns.len());
        if multiple {
            self.sent_ns.range_mut(..end).for_each(&mut one);
        } else if let Some(sent) = sequence
            .checked_sub(self.base)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| self.sent_ns.get_mut(i))
        {
            one(sent);
        }
        while self.sent_ns.front() == Some(&0) {
            self.sent_ns.pop_front();
            self.base += 1;
        }
        let count = settled.acked + settled.nacked;
        assert!(
            count <= self.outstanding,
            "invariant: only outstanding messages settle"
        );
        self.outstanding -= count;
        settled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiple_and_single_confirms_settle_each_message_once() {
        let mut tracker = ConfirmTracker::new(8);
        for t in [1_000, 2_000, 3_000, 4_000] {
            tracker.push(t);
        }
        let mut latencies = Vec::new();
        let s = tracker.settle(3, false, true, 10_000, &mut latencies);
        assert_eq!((s.acked, tracker.outstanding()), (1, 3));
        assert_eq!(latencies, vec![7]);
        let s = tracker.settle(3, true, true, 11_000, &mut latencies);
        assert_eq!((s.acked, tracker.outstanding()), (2, 1));
        assert_eq!(latencies, vec![7, 10, 9]);
        let s = tracker.settle(4, false, false, 12_000, &mut latencies);
        assert_eq!((s.acked, s.nacked, tracker.outstanding()), (0, 1, 0));
        // a repeated or unknown confirm settles nothing
        assert_eq!(
            tracker.settle(4, true, true, 13_000, &mut latencies),
            Settled::default()
        );
        assert_eq!(
            tracker.settle(99, false, true, 13_000, &mut latencies),
            Settled::default()
        );
        tracker.push(14_000);
        assert_eq!(
            tracker.settle(5, false, true, 15_000, &mut latencies).acked,
            1
        );
    }
}
