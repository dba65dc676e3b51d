//! The routing snapshot. Publishers read it without a lock (`ArcSwap`); every declaration,
//! deletion or (un)binding builds a new one. Default and direct exchanges route through hash
//! maps, topic exchanges through a trie, headers exchanges by scanning their bindings.

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::binding::{Binding, Destination};
use crate::error::{resource_name, BrokerError};
use crate::exchange::{ExchangeDef, ExchangeType};
use crate::queue::QueueHandle;
use crate::routing::headers::{self, MatchMode};
use crate::routing::topic_trie::TopicTrie;
use crate::value::Table;

/// Where a binding leads, resolved to a running queue where it can be.
#[derive(Debug, Clone)]
enum Target {
    Queue(QueueHandle),
    Exchange(Arc<str>),
}

#[derive(Debug)]
enum Table_ {
    Direct(FxHashMap<Arc<str>, Vec<Target>>),
    Fanout(Vec<Target>),
    Topic(TopicTrie<Target>),
    Headers(Vec<(MatchMode, Table, Target)>),
}

#[derive(Debug)]
struct ExchangeRoute {
    def: ExchangeDef,
    table: Table_,
}

/// How far exchange-to-exchange bindings are followed (cycles are cut by a visited list too).
const EXCHANGE_HOPS_MAX: usize = 32;

#[derive(Debug, Default)]
pub struct RoutingSnapshot {
    vhost: Arc<str>,
    queues: FxHashMap<Arc<str>, QueueHandle>,
    exchanges: FxHashMap<Arc<str>, ExchangeRoute>,
}

impl RoutingSnapshot {
    pub fn build(
        vhost: &Arc<str>,
        exchanges: &HashMap<Arc<str>, ExchangeDef>,
        queues: &HashMap<Arc<str>, QueueHandle>,
        bindings: &[Binding],
    ) -> RoutingSnapshot {
        let mut routes: FxHashMap<Arc<str>, ExchangeRoute> = exchanges
            .iter()
            .map(|(name, def)| {
                let table = match def.kind {
                    ExchangeType::Direct => Table_::Direct(FxHashMap::default()),
                    ExchangeType::Fanout => Table_::Fanout(Vec::new()),
                    ExchangeType::Topic => Table_::Topic(TopicTrie::default()),
                    ExchangeType::Headers => Table_::Headers(Vec::new()),
                };
                let def = def.clone();
                (name.clone(), ExchangeRoute { def, table })
            })
            .collect();
        for binding in bindings {
            let target = match &binding.destination {
                Destination::Queue(name) => match queues.get(name) {
                    Some(queue) => Target::Queue(queue.clone()),
                    None => continue,
                },
                Destination::Exchange(name) => Target::Exchange(name.clone()),
            };
            let Some(route) = routes.get_mut(&binding.source) else {
                continue;
            };
            add_binding(&mut route.table, binding, target);
        }
        RoutingSnapshot {
            vhost: vhost.clone(),
            queues: queues.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            exchanges: routes,
        }
    }

    pub fn queue(&self, name: &str) -> Option<&QueueHandle> {
        self.queues.get(name)
    }

    pub fn exchange(&self, name: &str) -> Option<&ExchangeDef> {
        self.exchanges.get(name).map(|route| &route.def)
    }

    /// Appends to `out` every queue a message published to `exchange` with `routing_key`
    /// reaches, each once. `headers` is asked for the message headers only when a headers
    /// exchange is on the way. Fails for a missing or internal exchange.
    pub fn route(
        &self,
        exchange: &str,
        routing_key: &str,
        headers: &mut dyn FnMut() -> Option<Table>,
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
        if route.def.internal {
            return Err(BrokerError::access_refused(format!(
                "cannot publish to internal {}",
                route.def.resource()
            )));
        }
        let mut walk = Walk {
            snapshot: self,
            routing_key,
            headers,
            headers_cache: None,
            visited: Vec::new(),
            out,
        };
        walk.exchange(route);
        Ok(())
    }
}

impl RoutingSnapshot {
    /// Routes a dead-lettered message: like `route`, but the broker may publish to internal
    /// exchanges, and headers exchanges see no headers (core does not decode properties).
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
        let mut no_headers = || None;
        let mut walk = Walk {
            snapshot: self,
            routing_key,
            headers: &mut no_headers,
            headers_cache: None,
            visited: Vec::new(),
            out,
        };
        walk.exchange(route);
        Ok(())
    }
}

fn add_binding(table: &mut Table_, binding: &Binding, target: Target) {
    match table {
        Table_::Direct(map) => map
            .entry(binding.routing_key.clone())
            .or_default()
            .push(target),
        Table_::Fanout(targets) => targets.push(target),
        Table_::Topic(trie) => trie.insert(&binding.routing_key, target),
        Table_::Headers(list) => {
            // Validated when the binding was made; an invalid mode cannot reach here.
            let mode = MatchMode::from_arguments(&binding.arguments).unwrap_or(MatchMode::All);
            list.push((mode, binding.arguments.clone(), target));
        }
    }
}

struct Walk<'a, 'o> {
    snapshot: &'a RoutingSnapshot,
    routing_key: &'a str,
    headers: &'a mut dyn FnMut() -> Option<Table>,
    headers_cache: Option<Option<Table>>,
    visited: Vec<&'a str>,
    out: &'o mut Vec<QueueHandle>,
}

impl<'a> Walk<'a, '_> {
    fn exchange(&mut self, route: &'a ExchangeRoute) {
        if self.visited.contains(&&*route.def.name) || self.visited.len() >= EXCHANGE_HOPS_MAX {
            return;
        }
        self.visited.push(&route.def.name);
        let mut targets: Vec<Target> = Vec::new();
        match &route.table {
            Table_::Direct(map) => {
                targets.extend(map.get(self.routing_key).into_iter().flatten().cloned())
            }
            Table_::Fanout(list) => targets.extend(list.iter().cloned()),
            Table_::Topic(trie) => {
                trie.matches(self.routing_key, &mut |t: &Target| targets.push(t.clone()))
            }
            Table_::Headers(list) => {
                if !list.is_empty() {
                    let headers = self.headers_cache.get_or_insert_with(|| (self.headers)());
                    for (mode, arguments, target) in list {
                        if headers::matches(*mode, arguments, headers.as_ref()) {
                            targets.push(target.clone());
                        }
                    }
                }
            }
        }
        let before = self.out.len();
        for target in targets {
            match target {
                Target::Queue(queue) => {
                    if !self.out.iter().any(|q| q.same(&queue)) {
                        self.out.push(queue);
                    }
                }
                Target::Exchange(name) => {
                    if let Some(next) = self.snapshot.exchanges.get(&name) {
                        self.exchange(next);
                    }
                }
            }
        }
        if self.out.len() == before {
            self.alternate(route);
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
