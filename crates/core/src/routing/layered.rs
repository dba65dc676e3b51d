//! A map that a routing snapshot can change cheaply: an immutable base and a small delta of
//! recent changes, both shared (`Arc`) between the snapshots that hold them. Changing one key
//! copies the delta, not the base; once the delta outgrows the square root of the base, both
//! merge into a new base. So a change costs O(√n) amortised instead of O(n), and 30,000 binds
//! to one direct exchange copy a few million entries in all rather than half a billion.
//!
//! Small maps (the usual case) merge at every change, so their delta stays empty and a lookup
//! is one hash-map probe plus one `is_empty` test.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

use rustc_hash::FxHashMap;

/// Below this many entries a change rebuilds the base (cheap) and the delta stays empty.
const SMALL_MAP_ENTRIES: usize = 1_024;
/// The delta merges once it holds this many entries, or √(base) if more.
const DELTA_ENTRIES_MIN: usize = 32;

#[derive(Debug)]
pub struct LayeredMap<K, V> {
    base: Arc<FxHashMap<K, V>>,
    /// Changes since the base: `None` for a removed key.
    delta: Arc<FxHashMap<K, Option<V>>>,
}

impl<K, V> Clone for LayeredMap<K, V> {
    fn clone(&self) -> Self {
        LayeredMap {
            base: self.base.clone(),
            delta: self.delta.clone(),
        }
    }
}

impl<K, V> Default for LayeredMap<K, V> {
    fn default() -> Self {
        LayeredMap {
            base: Arc::default(),
            delta: Arc::default(),
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone> LayeredMap<K, V> {
    pub fn from_map(map: FxHashMap<K, V>) -> Self {
        LayeredMap {
            base: Arc::new(map),
            delta: Arc::default(),
        }
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if !self.delta.is_empty() {
            if let Some(change) = self.delta.get(key) {
                return change.as_ref();
            }
        }
        self.base.get(key)
    }

    /// Sets (`Some`) or removes (`None`) one key.
    pub fn set(&mut self, key: K, value: Option<V>) {
        let base_len = self.base.len();
        let delta_max = DELTA_ENTRIES_MIN.max(base_len.isqrt());
        if base_len + self.delta.len() < SMALL_MAP_ENTRIES || self.delta.len() >= delta_max {
            let mut base = (*self.base).clone();
            for (k, v) in self.delta.iter() {
                apply(&mut base, k.clone(), v.clone());
            }
            apply(&mut base, key, value);
            self.base = Arc::new(base);
            self.delta = Arc::default();
        } else {
            Arc::make_mut(&mut self.delta).insert(key, value);
        }
        debug_assert!(self.delta.len() <= delta_max);
    }

    /// The value of `key` to change in place, made with `default` when absent. A base no
    /// other map shares (a table being built, or one just merged) is changed where it is;
    /// a shared one is left alone and the value copied into the delta, as `set` would, so
    /// older snapshots keep what they had and a build costs no copies at all.
    pub fn entry_mut(&mut self, key: K, default: impl FnOnce() -> V) -> &mut V {
        let base_len = self.base.len();
        let delta_max = DELTA_ENTRIES_MIN.max(base_len.isqrt());
        let unique = Arc::get_mut(&mut self.base).is_some();
        let small = base_len + self.delta.len() < SMALL_MAP_ENTRIES;
        if unique || small || self.delta.len() >= delta_max {
            self.merge();
            let base = Arc::make_mut(&mut self.base);
            debug_assert!(self.delta.is_empty(), "invariant: merged into the base");
            return base.entry(key).or_insert_with(default);
        }
        let current = match self.delta.get(&key) {
            Some(change) => change.clone(),
            None => self.base.get(&key).cloned(),
        };
        debug_assert!(
            self.delta.len() < delta_max,
            "invariant: the delta has room"
        );
        let delta = Arc::make_mut(&mut self.delta);
        let slot = delta.entry(key).or_insert(None);
        slot.insert(current.unwrap_or_else(default))
    }

    /// Folds the delta into a base of this map's own (copied when shared).
    fn merge(&mut self) {
        if self.delta.is_empty() {
            return;
        }
        let delta = std::mem::take(&mut self.delta);
        let base = Arc::make_mut(&mut self.base);
        for (k, v) in delta.iter() {
            apply(base, k.clone(), v.clone());
        }
    }

    /// Every entry, in no particular order.
    pub fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        for (k, v) in self.base.iter() {
            if self.delta.is_empty() || !self.delta.contains_key(k) {
                f(k, v);
            }
        }
        for (k, v) in self.delta.iter() {
            if let Some(v) = v {
                f(k, v);
            }
        }
    }
}

fn apply<K: Hash + Eq, V>(map: &mut FxHashMap<K, V>, key: K, value: Option<V>) {
    match value {
        Some(value) => {
            map.insert(key, value);
        }
        None => {
            map.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_map_changes_through_its_delta_and_reads_the_same() {
        let mut map: LayeredMap<u32, u32> = LayeredMap::default();
        let mut model = std::collections::HashMap::new();
        for i in 0..5_000u32 {
            let (key, value) = (i % 3_000, (i % 7 != 0).then_some(i));
            map.set(key, value);
            match value {
                Some(v) => model.insert(key, v),
                None => model.remove(&key),
            };
            if i % 97 == 0 {
                for probe in 0..3_000 {
                    assert_eq!(map.get(&probe), model.get(&probe), "key {probe} after {i}");
                }
            }
        }
        let mut seen = 0;
        map.for_each(|k, v| {
            assert_eq!(model.get(k), Some(v));
            seen += 1;
        });
        assert_eq!(seen, model.len());
        assert!(
            !map.delta.is_empty(),
            "a large map keeps recent changes in its delta"
        );
    }

    #[test]
    fn entry_mut_changes_only_this_copy_and_reads_like_set() {
        let mut map: LayeredMap<u32, u32> = LayeredMap::default();
        let mut model = std::collections::HashMap::new();
        let mut copies = Vec::new();
        for i in 0..6_000u32 {
            let key = i % 2_500;
            if i % 5 == 0 {
                map.set(key, None);
                model.remove(&key);
            } else {
                *map.entry_mut(key, || 0) += i;
                *model.entry(key).or_insert(0) += i;
            }
            if i % 400 == 0 {
                copies.push((map.clone(), model.clone()));
            }
        }
        copies.push((map, model));
        for (map, model) in &copies {
            for probe in 0..2_500 {
                assert_eq!(map.get(&probe), model.get(&probe), "key {probe}");
            }
        }
    }

    #[test]
    fn an_older_copy_is_not_changed() {
        let mut map: LayeredMap<u32, u32> = LayeredMap::default();
        for i in 0..2_000 {
            map.set(i, Some(i));
        }
        let before = map.clone();
        map.set(5, None);
        map.set(9_999, Some(1));
        assert_eq!(before.get(&5), Some(&5));
        assert_eq!(before.get(&9_999), None);
        assert_eq!(map.get(&5), None);
        assert_eq!(map.get(&9_999), Some(&1));
    }
}
