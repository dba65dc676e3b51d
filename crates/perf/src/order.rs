//! `OrderCheck`: `--verify-order`, one per consumer channel. Every body a producer channel sends
//! carries its sequence number (0 for the channel's first message, then 1, 2, ...) and, in bodies
//! of 16 bytes or more, the producer channel's id (see `body`). A queue keeps each publisher's
//! messages in order, so a consumer channel that reads a queue alone must see every producer's
//! numbers as 0, 1, 2, ... with no gap and no repeat; the first message that breaks this ends the
//! run, named with what was expected.

use std::collections::HashMap;

use crate::body::Stamp;

/// Most producer ids one check follows: a queue fed by more producers than this is refused
/// rather than growing the map without bound.
pub const PRODUCERS_MAX: usize = 65_536;

/// Where one consumer channel is in each producer's sequence.
#[derive(Debug, Default)]
pub struct OrderCheck {
    /// Per producer id, the sequence number its next message must carry.
    next: HashMap<u32, u32>,
    /// Deliveries checked on this channel.
    delivered: u64,
}

impl OrderCheck {
    /// Checks one delivery's stamp (`None`: a body too short to carry one). The error text names
    /// the delivery, its producer and what was expected.
    pub fn check(&mut self, stamp: Option<Stamp>) -> Result<(), String> {
        self.delivered += 1;
        let delivery = self.delivered;
        let Some(stamp) = stamp else {
            return Err(format!(
                "delivery #{delivery} has a body under 12 bytes: not a warren perf message, \
                 so its order cannot be checked"
            ));
        };
        if !self.next.contains_key(&stamp.producer) && self.next.len() >= PRODUCERS_MAX {
            return Err(format!(
                "delivery #{delivery} comes from a producer beyond the first {PRODUCERS_MAX}: \
                 --verify-order follows at most that many"
            ));
        }
        let expected = self.next.entry(stamp.producer).or_insert(0);
        if stamp.sequence != *expected {
            return Err(out_of_order(delivery, stamp, *expected));
        }
        *expected = expected.wrapping_add(1);
        debug_assert!(
            self.next.len() <= PRODUCERS_MAX,
            "invariant: the map holds at most PRODUCERS_MAX producers"
        );
        Ok(())
    }

    /// Deliveries checked so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }
}

fn out_of_order(delivery: u64, stamp: Stamp, expected: u32) -> String {
    let what = if stamp.sequence > expected {
        format!("{} messages missing before it", stamp.sequence - expected)
    } else {
        "a repeat or an older message".to_owned()
    };
    format!(
        "first out-of-order message: delivery #{delivery} from producer {} carries sequence {}, \
         expected {expected} ({what})",
        stamp.producer, stamp.sequence
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(producer: u32, sequence: u32) -> Option<Stamp> {
        Some(Stamp {
            sequence,
            sent_ns: 1,
            producer,
        })
    }

    #[test]
    fn each_producer_counts_from_zero_without_gaps() {
        let mut check = OrderCheck::default();
        for (producer, sequence) in [(0, 0), (1, 0), (0, 1), (1, 1), (1, 2), (0, 2)] {
            check.check(stamp(producer, sequence)).unwrap();
        }
        assert_eq!(check.delivered(), 6);
        let gap = check.check(stamp(0, 5)).unwrap_err();
        assert_eq!(
            gap,
            "first out-of-order message: delivery #7 from producer 0 carries sequence 5, \
             expected 3 (2 messages missing before it)"
        );
    }

    #[test]
    fn repeats_late_starts_and_short_bodies_fail() {
        let mut check = OrderCheck::default();
        check.check(stamp(3, 0)).unwrap();
        assert!(check
            .check(stamp(3, 0))
            .unwrap_err()
            .contains("carries sequence 0, expected 1 (a repeat or an older message)"));
        let mut late = OrderCheck::default();
        assert!(late
            .check(stamp(0, 4))
            .unwrap_err()
            .contains("expected 0 (4 messages missing before it)"));
        assert!(OrderCheck::default()
            .check(None)
            .unwrap_err()
            .contains("delivery #1 has a body under 12 bytes"));
    }

    #[test]
    fn sequences_wrap() {
        let mut check = OrderCheck::default();
        check.next.insert(0, u32::MAX);
        check.check(stamp(0, u32::MAX)).unwrap();
        check.check(stamp(0, 0)).unwrap();
    }
}
