//! The routing snapshot. Publishers read it without a lock (`ArcSwap`); every declaration,
//! deletion or (un)binding makes a new one from the previous one and what changed (`update`),
//! sharing every exchange it did not touch. Default and direct exchanges route through hash
//! maps, topic exchanges through a trie, headers exchanges by scanning their bindings, the
//! hash exchanges through a prebuilt ring or list (see `routing::hash`).
//!
//! A message may carry several routing keys (sender-selected distribution: the `CC` and `BCC`
//! headers); each exchange on the way routes on all of them. Routing a message allocates
//! nothing beyond the destinations it pushes to `out`, unless an exchange on the way needs the
//! message's headers or properties, which are then decoded once.

mod update;

use std::cell::OnceCell;
use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::binding::{Binding, Destination};
use crate::error::{resource_name, BrokerError};
use crate::exchange::{ExchangeDef, ExchangeType};
use crate::queue::QueueHandle;
use crate::routing::hash::{self, HashOn, HashProperty, HashRing};
use crate::routing::headers::{self, MatchMode};
use crate::routing::layered::LayeredMap;
use crate::routing::topic_trie::TopicTrie;
use crate::value::Table;

/// What routing may need of a message besides its routing keys. Asked for at most once per
/// message, and only when an exchange on the way needs it (a headers exchange, or a
/// consistent-hash exchange hashing a header or a property).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageFields {
    pub headers: Option<Table>,
    pub message_id: Option<String>,
    pub correlation_id: Option<String>,
    pub timestamp: Option<u64>,
}

/// Where a binding leads, resolved to a running queue where it can be.
#[derive(Debug, Clone)]
enum Target {
    Queue(QueueHandle),
    Exchange(Arc<str>),
}

/// The order modulus-hash destinations are numbered in: by destination, then binding key, so
/// that placement does not depend on the order bindings were made in (nor on a restart).
type DestinationOrder = (bool, Arc<str>, Arc<str>);

#[derive(Debug, Clone)]
enum Table_ {
    Direct(LayeredMap<Arc<str>, Vec<Target>>),
    Fanout(Vec<Target>),
    Topic(TopicTrie<Target>),
    Headers(Vec<(MatchMode, Table, Target)>),
    ConsistentHash { on: HashOn, ring: HashRing<Target> },
    ModulusHash(Vec<(DestinationOrder, Target)>),
    LocalRandom(Vec<Target>),
}

impl Table_ {
    fn new(def: &ExchangeDef) -> Table_ {
        match def.kind {
            ExchangeType::Direct => Table_::Direct(LayeredMap::default()),
            ExchangeType::Fanout => Table_::Fanout(Vec::new()),
            ExchangeType::Topic => Table_::Topic(TopicTrie::default()),
            ExchangeType::Headers => Table_::Headers(Vec::new()),
            ExchangeType::ConsistentHash => Table_::ConsistentHash {
                // Validated at declaration; a definition file is checked the same way.
                on: HashOn::from_arguments(&def.arguments).unwrap_or(HashOn::RoutingKey),
                ring: HashRing::default(),
            },
            ExchangeType::ModulusHash => Table_::ModulusHash(Vec::new()),
            ExchangeType::LocalRandom => Table_::LocalRandom(Vec::new()),
        }
    }
}

#[derive(Debug)]
struct ExchangeRoute {
    def: ExchangeDef,
    table: Table_,
}

/// How far exchange-to-exchange bindings are followed (cycles are cut by a visited list too).
const EXCHANGE_HOPS_MAX: usize = 32;

#[derive(Debug, Default, Clone)]
pub struct RoutingSnapshot {
    vhost: Arc<str>,
    queues: LayeredMap<Arc<str>, QueueHandle>,
    exchanges: LayeredMap<Arc<str>, Arc<ExchangeRoute>>,
}

impl RoutingSnapshot {
    /// A snapshot of everything at once (start, policy changes); `routed` gives the definition
    /// an exchange routes by (its policy's alternate exchange added).
    pub fn build<'a>(
        vhost: &Arc<str>,
        exchanges: impl Iterator<Item = ExchangeDef>,
        queues: &HashMap<Arc<str>, QueueHandle>,
        bindings: impl Iterator<Item = &'a Binding>,
    ) -> RoutingSnapshot {
        let mut tables: FxHashMap<Arc<str>, ExchangeRoute> = exchanges
            .map(|def| {
                let table = Table_::new(&def);
                (def.name.clone(), ExchangeRoute { def, table })
            })
            .collect();
        let mut direct: FxHashMap<Arc<str>, FxHashMap<Arc<str>, Vec<Target>>> =
            FxHashMap::default();
        for binding in bindings {
            let target = match &binding.destination {
                Destination::Queue(name) => match queues.get(name) {
                    Some(queue) => Target::Queue(queue.clone()),
                    None => continue,
                },
                Destination::Exchange(name) => Target::Exchange(name.clone()),
            };
            let Some(route) = tables.get_mut(&binding.source) else {
                continue;
            };
            if let Table_::Direct(_) = route.table {
                // Collected into a plain map and turned into a layered one once, below.
                direct
                    .entry(binding.source.clone())
                    .or_default()
                    .entry(binding.routing_key.clone())
                    .or_default()
                    .push(target);
                continue;
            }
            add_binding(&mut route.table, binding, target);
        }
        for (name, map) in direct {
            if let Some(route) = tables.get_mut(&name) {
                route.table = Table_::Direct(LayeredMap::from_map(map));
            }
        }
        for route in tables.values_mut() {
            if let Table_::ModulusHash(list) = &mut route.table {
                list.sort_by(|a, b| a.0.cmp(&b.0));
            }
        }
        let routes = tables.into_iter().map(|(k, v)| (k, Arc::new(v))).collect();
        RoutingSnapshot {
            vhost: vhost.clone(),
            queues: LayeredMap::from_map(
                queues.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            ),
            exchanges: LayeredMap::from_map(routes),
        }
    }

    pub fn queue(&self, name: &str) -> Option<&QueueHandle> {
        self.queues.get(name)
    }

    pub fn exchange(&self, name: &str) -> Option<&ExchangeDef> {
        self.exchanges.get(name).map(|route| &route.def)
    }

    /// Appends to `out` every queue a message published to `exchange` with `routing_keys` (its
    /// routing key, then any sender-selected ones) reaches, each once. `fields` is asked for
    /// the message's headers and properties only when an exchange on the way needs them.
    /// Fails for a missing or internal exchange.
    pub fn route(
        &self,
        exchange: &str,
        routing_keys: &[&str],
        fields: &mut dyn FnMut() -> MessageFields,
        out: &mut Vec<QueueHandle>,
    ) -> Result<(), BrokerError> {
        if exchange.is_empty() {
            for key in routing_keys {
                if let Some(queue) = self.queues.get(*key) {
                    if !out.iter().any(|q| q.same(queue)) {
                        out.push(queue.clone());
                    }
                }
            }
            return Ok(());
        }
        let Some(route) = self.exchanges.get(exchange) else {
            return Err(BrokerError::not_found(format!(
                "no {}",
                resource_name("exchange", exchange, &self.vhost)
            )));
        };
        if route.def.internal {
            return Err(BrokerError::access_refused(format!(
                "cannot publish to internal {}",
                route.def.resource()
            )));
        }
        let cache = OnceCell::new();
        let mut walk = Walk {
            snapshot: self,
            routing_keys,
            fetch: fields,
            fields: &cache,
            visited: [""; EXCHANGE_HOPS_MAX],
            depth: 0,
            out,
        };
        walk.exchange(route);
        Ok(())
    }
}

impl RoutingSnapshot {
    /// Routes a dead-lettered message: like `route`, but the broker may publish to internal
    /// exchanges, and exchanges that look at headers or properties (headers, consistent hash
    /// on a header or property) see none (core does not decode properties).
    pub fn route_dead_letter(
        &self,
        exchange: &str,
        routing_key: &str,
        out: &mut Vec<QueueHandle>,
    ) -> Result<(), BrokerError> {
        if exchange.is_empty() {
            out.extend(self.queues.get(routing_key).cloned());
            return Ok(());
        }
        let Some(route) = self.exchanges.get(exchange) else {
            return Err(BrokerError::not_found(format!(
                "no {}",
                resource_name("exchange", exchange, &self.vhost)
            )));
        };
        let mut no_fields = MessageFields::default;
        let cache = OnceCell::new();
        let routing_keys = [routing_key];
        let mut walk = Walk {
            snapshot: self,
            routing_keys: &routing_keys,
            fetch: &mut no_fields,
            fields: &cache,
            visited: [""; EXCHANGE_HOPS_MAX],
            depth: 0,
            out,
        };
        walk.exchange(route);
        Ok(())
    }
}

fn add_binding(table: &mut Table_, binding: &Binding, target: Target) {
    match table {
        Table_::Direct(map) => {
            let mut targets = map.get(&binding.routing_key).cloned().unwrap_or_default();
            targets.push(target);
            map.set(binding.routing_key.clone(), Some(targets));
        }
        Table_::Fanout(targets) | Table_::LocalRandom(targets) => targets.push(target),
        Table_::Topic(trie) => trie.insert(&binding.routing_key, target),
        Table_::Headers(list) => {
            // Validated when the binding was made; an invalid mode cannot reach here.
            let mode = MatchMode::from_arguments(&binding.arguments).unwrap_or(MatchMode::All);
            list.push((mode, binding.arguments.clone(), target));
        }
        Table_::ConsistentHash { ring, .. } => {
            // Validated when the binding was made, as for headers.
            let weight = hash::binding_weight(&binding.routing_key).unwrap_or(1);
            ring.push(weight, target);
        }
        Table_::ModulusHash(list) => {
            let (is_exchange, name) = match &binding.destination {
                Destination::Queue(name) => (false, name.clone()),
                Destination::Exchange(name) => (true, name.clone()),
            };
            list.push(((is_exchange, name, binding.routing_key.clone()), target));
        }
    }
}

struct Walk<'a, 'f, 'o> {
    snapshot: &'a RoutingSnapshot,
    routing_keys: &'a [&'a str],
    fetch: &'f mut dyn FnMut() -> MessageFields,
    fields: &'a OnceCell<MessageFields>,
    visited: [&'a str; EXCHANGE_HOPS_MAX],
    depth: usize,
    out: &'o mut Vec<QueueHandle>,
}

impl<'a> Walk<'a, '_, '_> {
    fn exchange(&mut self, route: &'a ExchangeRoute) {
        let name: &'a str = &route.def.name;
        if self.depth >= EXCHANGE_HOPS_MAX || self.visited[..self.depth].contains(&name) {
            return;
        }
        self.visited[self.depth] = name;
        self.depth += 1;
        // As RabbitMQ: the alternate exchange takes the message when this exchange's own
        // bindings match nothing (whatever the exchanges it leads to then do).
        if !self.table(&route.table) {
            self.alternate(route);
        }
    }

    /// Follows the bindings of one exchange that match; whether any did.
    fn table(&mut self, table: &'a Table_) -> bool {
        let keys = self.routing_keys;
        let mut matched = false;
        match table {
            Table_::Direct(map) => {
                for target in keys.iter().filter_map(|k| map.get(*k)).flatten() {
                    matched = true;
                    self.reach(target);
                }
            }
            Table_::Fanout(list) => {
                for target in list {
                    matched = true;
                    self.reach(target);
                }
            }
            Table_::Topic(trie) => {
                for key in keys {
                    trie.matches(key, &mut |target: &Target| {
                        matched = true;
                        self.reach(target);
                    });
                }
            }
            Table_::Headers(list) => {
                if !list.is_empty() {
                    let headers = self.fields().headers.as_ref();
                    for (mode, arguments, target) in list {
                        if headers::matches(*mode, arguments, headers) {
                            matched = true;
                            self.reach(target);
                        }
                    }
                }
            }
            Table_::ConsistentHash { on, ring } => {
                if !ring.is_empty() {
                    matched = self.consistent_hash(on, ring);
                }
            }
            Table_::ModulusHash(list) => {
                for key in keys {
                    if let Some((_, target)) = hash::modulus_index(key.as_bytes(), list.len())
                        .and_then(|index| list.get(index))
                    {
                        matched = true;
                        self.reach(target);
                    }
                }
            }
            Table_::LocalRandom(list) => {
                if !list.is_empty() {
                    if let Some(target) = list.get(fastrand::usize(..list.len())) {
                        matched = true;
                        self.reach(target);
                    }
                }
            }
        }
        matched
    }

    /// One destination per routing key, or one for the hashed header or property (none when
    /// the message lacks it: it is then unroutable here, as with the plugin).
    fn consistent_hash(&mut self, on: &'a HashOn, ring: &'a HashRing<Target>) -> bool {
        let hash = match on {
            HashOn::RoutingKey => {
                let mut matched = false;
                for key in self.routing_keys {
                    if let Some(target) = ring.pick(hash::key_hash(key.as_bytes())) {
                        matched = true;
                        self.reach(target);
                    }
                }
                return matched;
            }
            HashOn::Header(name) => {
                let headers = self.fields().headers.as_ref();
                headers.and_then(|h| h.get(&**name)).map(hash::value_hash)
            }
            HashOn::Property(property) => {
                let fields = self.fields();
                match property {
                    HashProperty::MessageId => fields.message_id.as_deref().map(str::as_bytes),
                    HashProperty::CorrelationId => {
                        fields.correlation_id.as_deref().map(str::as_bytes)
                    }
                    HashProperty::Timestamp => {
                        let stamp = fields.timestamp.map(u64::to_be_bytes);
                        return self.pick_one(ring, stamp.map(|t| hash::key_hash(&t)));
                    }
                }
                .map(hash::key_hash)
            }
        };
        self.pick_one(ring, hash)
    }

    fn pick_one(&mut self, ring: &'a HashRing<Target>, hash: Option<u64>) -> bool {
        match hash.and_then(|hash| ring.pick(hash)) {
            Some(target) => {
                self.reach(target);
                true
            }
            None => false,
        }
    }

    fn fields(&mut self) -> &'a MessageFields {
        let fetch = &mut *self.fetch;
        self.fields.get_or_init(fetch)
    }

    fn reach(&mut self, target: &Target) {
        match target {
            Target::Queue(queue) => {
                if !self.out.iter().any(|q| q.same(queue)) {
                    self.out.push(queue.clone());
                }
            }
            Target::Exchange(name) => {
                if let Some(next) = self.snapshot.exchanges.get(name) {
                    self.exchange(next);
                }
            }
        }
    }

    /// Unroutable through this exchange: try its alternate exchange, as RabbitMQ does.
    fn alternate(&mut self, route: &'a ExchangeRoute) {
        let Some(name) = route.def.alternate_exchange() else {
            return;
        };
        if let Some(next) = self.snapshot.exchanges.get(name) {
            self.exchange(next);
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;
    use crate::queue::args::QueueArgs;
    use crate::queue::QueueDef;
    use crate::value::Value;

    struct Fixture {
        exchanges: HashMap<Arc<str>, ExchangeDef>,
        queues: HashMap<Arc<str>, QueueHandle>,
        bindings: Vec<Binding>,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture {
                exchanges: HashMap::new(),
                queues: HashMap::new(),
                bindings: Vec::new(),
            }
        }

        fn exchange(&mut self, name: &str, kind: ExchangeType, arguments: &[(&str, &str)]) {
            let arguments = arguments
                .iter()
                .map(|(k, v)| (k.to_string(), Value::Str(v.to_string())))
                .collect();
            let def = ExchangeDef {
                name: name.into(),
                vhost: "/".into(),
                kind,
                durable: false,
                auto_delete: false,
                internal: false,
                arguments,
            };
            self.exchanges.insert(name.into(), def);
        }

        fn queue(&mut self, name: &str) {
            let def = QueueDef {
                name: name.into(),
                vhost: "/".into(),
                durable: false,
                exclusive_owner: None,
                auto_delete: false,
                arguments: Table::new(),
            };
            let (data, _) = mpsc::channel(1);
            let (control, _) = mpsc::channel(1);
            let handle = QueueHandle::new(
                crate::queue::QueueType::Classic,
                def,
                QueueArgs::default(),
                data,
                control,
                1,
            );
            self.queues.insert(name.into(), handle);
        }

        fn bind(&mut self, source: &str, destination: Destination, key: &str) {
            self.bindings.push(Binding {
                source: source.into(),
                destination,
                routing_key: key.into(),
                arguments: Table::new(),
            });
        }

        fn snapshot(&self) -> RoutingSnapshot {
            let vhost: Arc<str> = "/".into();
            RoutingSnapshot::build(
                &vhost,
                self.exchanges.values().cloned(),
                &self.queues,
                self.bindings.iter(),
            )
        }
    }

    fn queue(name: &str) -> Destination {
        Destination::Queue(name.into())
    }

    fn route(snapshot: &RoutingSnapshot, exchange: &str, keys: &[&str]) -> Vec<String> {
        route_with(snapshot, exchange, keys, MessageFields::default())
    }

    fn route_with(
        snapshot: &RoutingSnapshot,
        exchange: &str,
        keys: &[&str],
        fields: MessageFields,
    ) -> Vec<String> {
        let mut out = Vec::new();
        let mut fields = move || fields.clone();
        snapshot
            .route(exchange, keys, &mut fields, &mut out)
            .expect("exchange exists");
        out.iter().map(|q| q.name().to_string()).collect()
    }

    #[test]
    fn every_routing_key_routes_and_each_queue_is_reached_once() {
        let mut f = Fixture::new();
        f.exchange("d", ExchangeType::Direct, &[]);
        for name in ["qa", "qb"] {
            f.queue(name);
        }
        f.bind("d", queue("qa"), "a");
        f.bind("d", queue("qb"), "b");
        f.bind("d", queue("qa"), "c");
        let snapshot = f.snapshot();
        assert_eq!(route(&snapshot, "d", &["a", "b", "c"]), ["qa", "qb"]);
        assert_eq!(route(&snapshot, "", &["qb", "nope", "qb"]), ["qb"]);
    }

    /// Topic (un)binds change the snapshot's trie in place of a rebuild: the result routes
    /// as a snapshot built from the bindings that remain, including a binding made twice
    /// with different arguments and unbound once.
    #[test]
    fn topic_binds_and_unbinds_route_as_a_fresh_build() {
        let mut f = Fixture::new();
        f.exchange("t", ExchangeType::Topic, &[]);
        for name in ["q1", "q2", "q3"] {
            f.queue(name);
        }
        let mut snapshot = f.snapshot();
        let keys = ["a.b", "a.#", "*.b", "#", "a.b", "c"];
        for (i, key) in keys.iter().enumerate() {
            let name = format!("q{}", i % 3 + 1);
            let mut binding = Binding {
                source: "t".into(),
                destination: queue(&name),
                routing_key: (*key).into(),
                arguments: Table::new(),
            };
            if i == 4 {
                binding.arguments.insert("x".into(), Value::Str("1".into()));
            }
            f.bindings.push(binding.clone());
            snapshot = snapshot.with_binding(&binding, std::iter::empty());
        }
        let probes: [&[&str]; 5] = [&["a.b"], &["a"], &["x.b"], &["c"], &["a.b.c"]];
        let check = |snapshot: &RoutingSnapshot, f: &Fixture| {
            for probe in probes {
                assert_eq!(
                    route(snapshot, "t", probe),
                    route(&f.snapshot(), "t", probe)
                );
            }
        };
        check(&snapshot, &f);
        for at in [4, 0, 2] {
            let binding = f.bindings.remove(at);
            snapshot = snapshot.without_binding(&binding, std::iter::empty());
            check(&snapshot, &f);
        }
        let mut reached = route(&snapshot, "t", &["a.b"]);
        reached.sort();
        assert_eq!(reached, ["q2", "q3"], "a.# and *.b remain");
    }

    #[test]
    fn alternate_exchange_only_when_no_binding_matched() {
        let mut f = Fixture::new();
        f.exchange(
            "main",
            ExchangeType::Direct,
            &[("alternate-exchange", "ae")],
        );
        f.exchange("ae", ExchangeType::Fanout, &[]);
        f.exchange("empty", ExchangeType::Fanout, &[]);
        f.queue("q");
        f.bind("ae", queue("q"), "");
        f.bind("main", Destination::Exchange("empty".into()), "k");
        let snapshot = f.snapshot();
        assert!(route(&snapshot, "main", &["k"]).is_empty());
        assert_eq!(route(&snapshot, "main", &["other"]), ["q"]);
    }

    #[test]
    fn modulus_placement_does_not_depend_on_binding_order() {
        let placements: Vec<Vec<Vec<String>>> = [false, true]
            .into_iter()
            .map(|reversed| {
                let mut f = Fixture::new();
                f.exchange("m", ExchangeType::ModulusHash, &[]);
                let mut names = vec!["q1", "q2", "q3"];
                if reversed {
                    names.reverse();
                }
                for name in names {
                    f.queue(name);
                    f.bind("m", queue(name), "");
                }
                let snapshot = f.snapshot();
                (0..50)
                    .map(|i| route(&snapshot, "m", &[&format!("key-{i}")]))
                    .collect()
            })
            .collect();
        assert_eq!(placements[0], placements[1]);
        assert!(placements[0].iter().all(|p| p.len() == 1));
    }

    #[test]
    fn consistent_hash_on_a_header_needs_the_header() {
        let mut f = Fixture::new();
        f.exchange("c", ExchangeType::ConsistentHash, &[("hash-header", "h")]);
        for name in ["q1", "q2"] {
            f.queue(name);
            f.bind("c", queue(name), "5");
        }
        let snapshot = f.snapshot();
        assert!(route(&snapshot, "c", &["k"]).is_empty());
        let headers = [("h".to_string(), Value::Str("v".into()))].into();
        let fields = MessageFields {
            headers: Some(headers),
            ..MessageFields::default()
        };
        let first = route_with(&snapshot, "c", &["k1"], fields.clone());
        assert_eq!(first.len(), 1);
        assert_eq!(route_with(&snapshot, "c", &["k2"], fields), first);
    }

    #[test]
    fn local_random_picks_one_bound_queue() {
        let mut f = Fixture::new();
        f.exchange("r", ExchangeType::LocalRandom, &[]);
        for name in ["q1", "q2", "q3"] {
            f.queue(name);
            f.bind("r", queue(name), "");
        }
        let snapshot = f.snapshot();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let picked = route(&snapshot, "r", &["x", "y"]);
            assert_eq!(picked.len(), 1);
            seen.insert(picked[0].clone());
        }
        assert_eq!(seen.len(), 3);
    }
}
