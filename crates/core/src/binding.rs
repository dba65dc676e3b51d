//! Bindings: from a source exchange to a queue or to another exchange.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::value::Table;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(
    tag = "destination_type",
    content = "destination",
    rename_all = "lowercase"
)]
pub enum Destination {
    Queue(Arc<str>),
    Exchange(Arc<str>),
}

impl Destination {
    pub fn name(&self) -> &Arc<str> {
        match self {
            Destination::Queue(name) | Destination::Exchange(name) => name,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Binding {
    pub source: Arc<str>,
    #[serde(flatten)]
    pub destination: Destination,
    pub routing_key: Arc<str>,
    pub arguments: Table,
}

/// What makes a binding distinct: its ends, its key and its arguments (compared as their JSON
/// text, since argument values may be floats, which have no `Hash`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BindingKey {
    source: Arc<str>,
    destination: Destination,
    routing_key: Arc<str>,
    arguments: String,
}

impl BindingKey {
    pub fn of(binding: &Binding) -> BindingKey {
        BindingKey {
            source: binding.source.clone(),
            destination: binding.destination.clone(),
            routing_key: binding.routing_key.clone(),
            // A `BTreeMap` serialises in key order, so equal tables give equal text.
            arguments: serde_json::to_string(&binding.arguments).unwrap_or_default(),
        }
    }
}

/// A vhost's bindings, indexed so that a bind, an unbind or the removal of a queue or an
/// exchange costs what it touches, not what the vhost holds. Listed in the order they were
/// made (the management API shows them so).
#[derive(Debug, Clone, Default)]
pub struct BindingSet {
    next_seq: u64,
    ordered: BTreeMap<u64, Binding>,
    index: HashMap<BindingKey, u64>,
    by_source: HashMap<Arc<str>, BTreeSet<u64>>,
    by_destination: HashMap<Destination, BTreeSet<u64>>,
}

impl BindingSet {
    pub fn len(&self) -> usize {
        self.ordered.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ordered.is_empty()
    }

    pub fn contains(&self, binding: &Binding) -> bool {
        self.index.contains_key(&BindingKey::of(binding))
    }

    /// Adds `binding`; false when it was there already.
    pub fn insert(&mut self, binding: Binding) -> bool {
        let key = BindingKey::of(&binding);
        if self.index.contains_key(&key) {
            return false;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.index.insert(key, seq);
        self.by_source
            .entry(binding.source.clone())
            .or_default()
            .insert(seq);
        self.by_destination
            .entry(binding.destination.clone())
            .or_default()
            .insert(seq);
        self.ordered.insert(seq, binding);
        debug_assert_eq!(self.index.len(), self.ordered.len());
        true
    }

    /// Removes `binding`; false when it was not there.
    pub fn remove(&mut self, binding: &Binding) -> bool {
        match self.index.get(&BindingKey::of(binding)) {
            Some(&seq) => {
                self.remove_seq(seq);
                true
            }
            None => false,
        }
    }

    fn remove_seq(&mut self, seq: u64) -> Option<Binding> {
        let binding = self.ordered.remove(&seq)?;
        self.index.remove(&BindingKey::of(&binding));
        forget_seq(&mut self.by_source, &binding.source, seq);
        forget_seq(&mut self.by_destination, &binding.destination, seq);
        debug_assert_eq!(self.index.len(), self.ordered.len());
        Some(binding)
    }

    /// Every binding, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Binding> {
        self.ordered.values()
    }

    /// The bindings whose source is `exchange`, oldest first.
    pub fn of_source<'a>(&'a self, exchange: &str) -> impl Iterator<Item = &'a Binding> + 'a {
        self.by_source
            .get(exchange)
            .into_iter()
            .flatten()
            .filter_map(|seq| self.ordered.get(seq))
    }

    pub fn has_source(&self, exchange: &str) -> bool {
        self.by_source.get(exchange).is_some_and(|s| !s.is_empty())
    }

    /// Removes and returns every binding leading to `destination`.
    pub fn remove_destination(&mut self, destination: &Destination) -> Vec<Binding> {
        let seqs = self.by_destination.remove(destination).unwrap_or_default();
        seqs.into_iter()
            .filter_map(|s| self.remove_seq(s))
            .collect()
    }

    /// Removes and returns every binding from `exchange`.
    pub fn remove_source(&mut self, exchange: &str) -> Vec<Binding> {
        let seqs = self.by_source.remove(exchange).unwrap_or_default();
        seqs.into_iter()
            .filter_map(|s| self.remove_seq(s))
            .collect()
    }
}

impl FromIterator<Binding> for BindingSet {
    fn from_iter<I: IntoIterator<Item = Binding>>(bindings: I) -> BindingSet {
        let mut set = BindingSet::default();
        for binding in bindings {
            set.insert(binding);
        }
        set
    }
}

fn forget_seq<K, Q>(map: &mut HashMap<K, BTreeSet<u64>>, key: &Q, seq: u64)
where
    K: std::hash::Hash + Eq + std::borrow::Borrow<Q>,
    Q: std::hash::Hash + Eq + ?Sized,
{
    if let Some(seqs) = map.get_mut(key) {
        seqs.remove(&seq);
        if seqs.is_empty() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    fn binding(source: &str, queue: &str, key: &str, argument: Option<i64>) -> Binding {
        let mut arguments = Table::new();
        if let Some(value) = argument {
            arguments.insert("x".into(), Value::Int(value));
        }
        Binding {
            source: source.into(),
            destination: Destination::Queue(queue.into()),
            routing_key: key.into(),
            arguments,
        }
    }

    #[test]
    fn duplicates_are_found_by_key_and_arguments() {
        let mut set = BindingSet::default();
        assert!(set.insert(binding("e", "q", "k", None)));
        assert!(!set.insert(binding("e", "q", "k", None)));
        assert!(set.insert(binding("e", "q", "k", Some(1))));
        assert!(set.contains(&binding("e", "q", "k", Some(1))));
        assert!(!set.contains(&binding("e", "q", "k", Some(2))));
        assert_eq!(set.len(), 2);
        assert!(set.remove(&binding("e", "q", "k", None)));
        assert!(!set.remove(&binding("e", "q", "k", None)));
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn removing_an_end_removes_its_bindings_and_keeps_the_order() {
        let mut set: BindingSet = (0..5)
            .map(|i| binding(&format!("e{}", i % 2), &format!("q{}", i % 3), "k", None))
            .collect();
        let removed = set.remove_destination(&Destination::Queue("q0".into()));
        assert_eq!(removed.len(), 2);
        let sources: Vec<&str> = set.iter().map(|b| &*b.source).collect();
        assert_eq!(sources, ["e1", "e0", "e0"]);
        assert_eq!(set.remove_source("e1").len(), 1);
        assert!(!set.has_source("e1") && set.has_source("e0"));
        assert_eq!(set.of_source("e0").count(), 2);
    }
}
