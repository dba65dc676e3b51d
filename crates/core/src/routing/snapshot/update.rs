//! A new snapshot from the previous one and one change: what a declaration, deletion or
//! (un)binding costs. Exchanges the change does not touch are shared with the previous
//! snapshot; a binding added to or removed from a direct exchange changes one key of its
//! layered map, and one of a topic exchange one path of its trie (both persistent: what
//! the previous snapshot holds is shared, not copied). Other exchange types rebuild their
//! own table (never the whole vhost's): their tables are lists, rebuilt in one pass.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::{add_binding, ExchangeRoute, RoutingSnapshot, Table_, Target};
use crate::binding::{Binding, Destination};
use crate::exchange::{ExchangeDef, ExchangeType};
use crate::queue::QueueHandle;
use crate::routing::layered::LayeredMap;

impl RoutingSnapshot {
    /// An empty snapshot of `vhost`.
    pub fn empty(vhost: &Arc<str>) -> RoutingSnapshot {
        RoutingSnapshot {
            vhost: vhost.clone(),
            ..RoutingSnapshot::default()
        }
    }

    /// With `queue` reachable by name (the default exchange).
    pub fn with_queue(&self, queue: &QueueHandle) -> RoutingSnapshot {
        let mut next = self.clone();
        next.queues.set(queue.name().clone(), Some(queue.clone()));
        next
    }

    /// Without the queue (its bindings are removed by the caller first).
    pub fn without_queue(&self, name: &Arc<str>) -> RoutingSnapshot {
        let mut next = self.clone();
        next.queues.set(name.clone(), None);
        next
    }

    /// With the exchange `def` (new, or changed by a policy) routing over `bindings`, its own.
    pub fn with_exchange<'a>(
        &self,
        def: ExchangeDef,
        bindings: impl Iterator<Item = &'a Binding>,
    ) -> RoutingSnapshot {
        let mut table = Table_::new(&def);
        // A direct table is filled as a plain map and layered once (not key by key).
        let mut direct: FxHashMap<Arc<str>, Vec<Target>> = FxHashMap::default();
        for binding in bindings {
            debug_assert_eq!(binding.source, def.name);
            let Some(target) = self.target(&binding.destination) else {
                continue;
            };
            match table {
                Table_::Direct(_) => direct
                    .entry(binding.routing_key.clone())
                    .or_default()
                    .push(target),
                _ => add_binding(&mut table, binding, target),
            }
        }
        match &mut table {
            Table_::Direct(map) => *map = LayeredMap::from_map(direct),
            Table_::ModulusHash(list) => list.sort_by(|a, b| a.0.cmp(&b.0)),
            _ => {}
        }
        let mut next = self.clone();
        let name = def.name.clone();
        next.exchanges
            .set(name, Some(Arc::new(ExchangeRoute { def, table })));
        next
    }

    pub fn without_exchange(&self, name: &Arc<str>) -> RoutingSnapshot {
        let mut next = self.clone();
        next.exchanges.set(name.clone(), None);
        next
    }

    /// With one more binding. `of_source` lists the source's bindings, this one included:
    /// exchange types without an incremental table rebuild theirs from it.
    pub fn with_binding<'a>(
        &self,
        binding: &Binding,
        of_source: impl Iterator<Item = &'a Binding>,
    ) -> RoutingSnapshot {
        let Some(route) = self.exchanges.get(&binding.source) else {
            return self.clone();
        };
        if !matches!(route.def.kind, ExchangeType::Direct | ExchangeType::Topic) {
            return self.with_exchange(route.def.clone(), of_source);
        }
        let Some(target) = self.target(&binding.destination) else {
            return self.clone();
        };
        let mut table = route.table.clone();
        add_binding(&mut table, binding, target);
        self.with_table(route, table)
    }

    /// Without one binding; `of_source` lists the source's remaining bindings.
    pub fn without_binding<'a>(
        &self,
        binding: &Binding,
        of_source: impl Iterator<Item = &'a Binding>,
    ) -> RoutingSnapshot {
        let Some(route) = self.exchanges.get(&binding.source) else {
            return self.clone();
        };
        let map = match &route.table {
            Table_::Direct(map) => map,
            Table_::Topic(trie) => {
                // Bindings differing only in their arguments each added the same target.
                let mut trie = trie.clone();
                let destination = &binding.destination;
                if !trie.remove(&binding.routing_key, &|t| leads_to(t, destination)) {
                    return self.clone();
                }
                return self.with_table(route, Table_::Topic(trie));
            }
            _ => return self.with_exchange(route.def.clone(), of_source),
        };
        let mut targets = map.get(&binding.routing_key).cloned().unwrap_or_default();
        // Bindings differing only in their arguments each added the same target once.
        let Some(position) = targets
            .iter()
            .position(|t| leads_to(t, &binding.destination))
        else {
            return self.clone();
        };
        targets.remove(position);
        let mut map = map.clone();
        map.set(
            binding.routing_key.clone(),
            (!targets.is_empty()).then_some(targets),
        );
        self.with_table(route, Table_::Direct(map))
    }

    fn with_table(&self, route: &ExchangeRoute, table: Table_) -> RoutingSnapshot {
        let def = route.def.clone();
        let mut next = self.clone();
        next.exchanges.set(
            def.name.clone(),
            Some(Arc::new(ExchangeRoute { def, table })),
        );
        next
    }

    /// A binding's destination as a target; `None` for a queue that is not (yet) here.
    fn target(&self, destination: &Destination) -> Option<Target> {
        match destination {
            Destination::Queue(name) => self.queues.get(name).cloned().map(Target::Queue),
            Destination::Exchange(name) => Some(Target::Exchange(name.clone())),
        }
    }
}

fn leads_to(target: &Target, destination: &Destination) -> bool {
    match (target, destination) {
        (Target::Queue(queue), Destination::Queue(name)) => queue.name() == name,
        (Target::Exchange(a), Destination::Exchange(b)) => a == b,
        _ => false,
    }
}
