//! A session's deliveries sent unsettled: a map by delivery-id (settlements name ranges of
//! ids) kept as a deque in id order. Ids are given out in order, so a delivery joins at the
//! back; clients mostly settle in order too, so a settlement finds its range with one binary
//! search near the front and takes it without moving the rest. A delivery settled out of
//! order leaves a hole, dropped when it reaches the front or when holes outnumber live
//! deliveries (so the deque stays within twice the live count).

use std::collections::VecDeque;

use warren_core::queue::QueueHandle;

/// Holes below which the deque is never compacted.
const HOLES_COMPACT_MIN: usize = 64;

/// A delivery sent on an unsettled link, until the client settles it.
pub struct Unsettled {
    pub queue: QueueHandle,
    pub seq: u64,
    pub handle: u32,
}

/// The deliveries by id (`T` is `Unsettled` but for the tests).
pub struct UnsettledDeliveries<T = Unsettled> {
    /// (delivery-id, the delivery or `None` once settled), ids ascending.
    entries: VecDeque<(u32, Option<T>)>,
    live: usize,
}

impl<T> Default for UnsettledDeliveries<T> {
    fn default() -> Self {
        UnsettledDeliveries {
            entries: VecDeque::new(),
            live: 0,
        }
    }
}

impl<T> UnsettledDeliveries<T> {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.live
    }

    /// Adds delivery `id` (replacing one with the same id, as a map would).
    pub fn insert(&mut self, id: u32, unsettled: T) {
        if self.entries.back().is_none_or(|&(back, _)| back < id) {
            self.entries.push_back((id, Some(unsettled)));
            self.live += 1;
            return;
        }
        // Only once the ids wrapped around (after 2^32 transfers): still kept in id order,
        // the order in which settlements name ranges.
        let at = self.entries.partition_point(|&(old, _)| old < id);
        match self.entries.get_mut(at) {
            Some((old, entry)) if *old == id => {
                if entry.replace(unsettled).is_none() {
                    self.live += 1;
                }
            }
            _ => {
                self.entries.insert(at, (id, Some(unsettled)));
                self.live += 1;
            }
        }
    }

    /// Takes the deliveries with ids from `first` to `last` (inclusive), in id order.
    pub fn take_range(&mut self, first: u32, last: u32, mut each: impl FnMut(T)) {
        if self.entries.back().is_some_and(|&(back, _)| back < first) {
            return;
        }
        let mut at = self.entries.partition_point(|&(id, _)| id < first);
        while let Some((id, entry)) = self.entries.get_mut(at) {
            if *id > last {
                break;
            }
            if let Some(unsettled) = entry.take() {
                self.live -= 1;
                each(unsettled);
            }
            at += 1;
        }
        self.tidy();
    }

    /// Takes the deliveries `which` picks, in id order.
    pub fn take_where(&mut self, which: impl Fn(&T) -> bool, mut each: impl FnMut(T)) {
        for (_, entry) in &mut self.entries {
            if entry.as_ref().is_some_and(&which) {
                if let Some(unsettled) = entry.take() {
                    self.live -= 1;
                    each(unsettled);
                }
            }
        }
        self.tidy();
    }

    /// Takes every delivery.
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.live = 0;
        self.entries.drain(..).filter_map(|(_, entry)| entry)
    }

    /// Drops the holes at the front, and all of them when they outnumber the live deliveries.
    fn tidy(&mut self) {
        while self
            .entries
            .front()
            .is_some_and(|(_, entry)| entry.is_none())
        {
            self.entries.pop_front();
        }
        let holes = self.entries.len() - self.live;
        if holes > HOLES_COMPACT_MIN && holes > self.live {
            self.compact();
        }
        debug_assert!(self.entries.len() >= self.live);
    }

    fn compact(&mut self) {
        self.entries.retain(|(_, entry)| entry.is_some());
        debug_assert_eq!(self.entries.len(), self.live);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(d: &mut UnsettledDeliveries<(u32, u32)>, first: u32, last: u32) -> Vec<u32> {
        let mut out = Vec::new();
        d.take_range(first, last, |(id, _)| out.push(id));
        out
    }

    #[test]
    fn settles_ranges_like_a_map_by_id() {
        let mut d = UnsettledDeliveries::default();
        for id in (10..20).chain([25, 30]) {
            d.insert(id, (id, id % 2));
        }
        assert_eq!(ids(&mut d, 0, 9), Vec::<u32>::new());
        assert_eq!(ids(&mut d, 12, 13), vec![12, 13]);
        assert_eq!(ids(&mut d, 12, 14), vec![14]);
        assert_eq!(d.len(), 9);
        let mut odd = Vec::new();
        d.take_where(|&(_, link)| link == 1, |(id, _)| odd.push(id));
        assert_eq!(odd, vec![11, 15, 17, 19, 25]);
        assert_eq!(ids(&mut d, 0, u32::MAX), vec![10, 16, 18, 30]);
        assert_eq!(d.len(), 0);
        assert!(d.entries.is_empty());
    }

    #[test]
    fn keeps_id_order_when_ids_wrap_and_compacts_holes() {
        let mut d = UnsettledDeliveries::default();
        d.insert(u32::MAX - 1, (u32::MAX - 1, 0));
        d.insert(u32::MAX, (u32::MAX, 0));
        d.insert(0, (0, 0));
        d.insert(1, (1, 0));
        assert_eq!(ids(&mut d, 0, 0), vec![0]);
        let all: Vec<u32> = d.drain().map(|(id, _)| id).collect();
        assert_eq!(all, vec![1, u32::MAX - 1, u32::MAX]);
        for id in 0..1000 {
            d.insert(id, (id, 0));
        }
        for id in 1..1000 {
            assert_eq!(ids(&mut d, id, id), vec![id]);
        }
        assert_eq!(d.len(), 1);
        assert!(d.entries.len() <= 2 * HOLES_COMPACT_MIN);
    }
}
