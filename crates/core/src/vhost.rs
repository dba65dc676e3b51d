//! A virtual host: its exchanges, queues and bindings, and the routing snapshot built from them.
//!
//! Declarations take `meta` (a short, synchronous lock never held across `.await`), change it,
//! swap in a routing snapshot updated by that change, and hand the durable part to the
//! metadata store (`crate::metadata`) before letting go of the lock, so the store sees the
//! changes in the order memory did. The caller then waits, without the lock, until the store
//! says the change is durable, and only then answers its client; a change the store could not
//! write is rolled back here and answered with an error. Publishers only read the snapshot.
//!
//! While a durable declaration or binding is on its way to disk it is listed in
//! `Meta::pending`: a second client declaring the same thing waits for the same completion,
//! so nobody gets declare-ok for something that is not on disk.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize};
use std::sync::{Arc, Weak};

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use crate::access::policy::PolicySet;
use crate::binding::{Binding, BindingKey, BindingSet, Destination};
use crate::consumer::ConnectionId;
use crate::definitions::{QueueRecord, VHostDefinitions};
use crate::error::{resource_name, BrokerError};
use crate::exchange::{ExchangeDef, ExchangeType};
use crate::limits::NAME_BYTES_MAX;
use crate::metadata::{Change, Completion, MetadataStore, VHostChange};
use crate::queue::classic::Storage;
use crate::queue::queue_type::QueueType;
use crate::queue::stream::StreamStorage;
use crate::queue::{QueueArgs, QueueCmd, QueueDef, QueueHandle};
use crate::routing::headers::MatchMode;
use crate::routing::RoutingSnapshot;
use crate::stats::ExchangeStatsTable;
use crate::value::{Table, Value};

/// The exchanges every vhost has, as RabbitMQ pre-declares them.
const PREDECLARED: [(&str, ExchangeType); 6] = [
    ("amq.direct", ExchangeType::Direct),
    ("amq.fanout", ExchangeType::Fanout),
    ("amq.topic", ExchangeType::Topic),
    ("amq.headers", ExchangeType::Headers),
    ("amq.match", ExchangeType::Headers),
    ("amq.rabbitmq.trace", ExchangeType::Topic),
];

/// A queue.declare request.
#[derive(Debug, Clone)]
pub struct QueueDeclare {
    pub name: String,
    pub passive: bool,
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
    pub arguments: Table,
}

/// An exchange.declare request.
#[derive(Debug, Clone)]
pub struct ExchangeDeclare {
    pub name: String,
    pub kind: String,
    pub passive: bool,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: Table,
}

#[derive(Default)]
struct Meta {
    exchanges: HashMap<Arc<str>, ExchangeDef>,
    queues: HashMap<Arc<str>, QueueHandle>,
    bindings: BindingSet,
    /// Durable declarations and bindings the store has not yet made durable.
    pending: HashMap<Pending, Completion>,
}

/// What a pending change declared.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Pending {
    Queue(Arc<str>),
    Exchange(Arc<str>),
    Binding(BindingKey),
}

/// What a removal took away besides itself: the snapshot and the store follow from it.
#[derive(Debug, Default)]
struct Removed {
    queues: Vec<QueueHandle>,
    exchanges: Vec<ExchangeDef>,
    /// Every binding that went with them (what a rollback puts back).
    bindings: Vec<Binding>,
    /// Exchanges that lost bindings and still exist.
    sources: BTreeSet<Arc<str>>,
}

pub struct VHost {
    name: Arc<str>,
    meta: Mutex<Meta>,
    snapshot: ArcSwap<RoutingSnapshot>,
    metadata: Arc<dyn MetadataStore>,
    storage: Option<Storage>,
    /// Where streams keep their logs; without it streams are refused.
    streams: Option<StreamStorage>,
    /// Credit of each queue's publishers (`StorageConfig::queue_credit`).
    queue_credit: u32,
    /// The vhost's policies and operator policies (see `set_policies`).
    policies: ArcSwap<PolicySet>,
    /// Limits (`max-connections`, `max-queues`), negative for none.
    max_connections: AtomicI64,
    max_queues: AtomicI64,
    /// The vhost's `default_queue_type` is stream (see `apply_default_queue_type`).
    default_stream: AtomicBool,
    /// Client connections open in this vhost now.
    connections: AtomicUsize,
    /// What was published to each exchange (management API).
    exchange_stats: ExchangeStatsTable,
    this: Weak<VHost>,
}

impl VHost {
    /// Creates the vhost, pre-declares `amq.*` and recovers durable definitions from disk,
    /// with the messages the store kept for its durable queues. Without `storage` messages
    /// live in memory only.
    pub fn open(
        name: &str,
        metadata: Arc<dyn MetadataStore>,
        storage: Option<Storage>,
        streams: Option<StreamStorage>,
        queue_credit: u32,
        policies: PolicySet,
        recovered: &mut warren_store::Recovered,
    ) -> std::io::Result<Arc<VHost>> {
        let vhost = Arc::new_cyclic(|this| VHost {
            name: Arc::from(name),
            meta: Mutex::new(Meta::default()),
            snapshot: ArcSwap::from_pointee(RoutingSnapshot::default()),
            metadata,
            storage,
            streams,
            queue_credit,
            policies: ArcSwap::from_pointee(policies),
            max_connections: AtomicI64::new(-1),
            max_queues: AtomicI64::new(-1),
            default_stream: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            exchange_stats: ExchangeStatsTable::default(),
            this: this.clone(),
        });
        {
            let mut meta = vhost.meta.lock();
            for (exchange, kind) in PREDECLARED {
                let def = vhost.exchange_def(exchange, kind, true, false, false, Table::new());
                meta.exchanges.insert(def.name.clone(), def);
            }
            if let Some(saved) = vhost.metadata.load_vhost(name)? {
                vhost.recover(&mut meta, saved, recovered);
            }
            vhost.publish_full_snapshot(&meta);
        }
        Ok(vhost)
    }

    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The counts of what was published to the vhost's exchanges.
    pub fn exchange_stats(&self) -> &ExchangeStatsTable {
        &self.exchange_stats
    }

    /// Every exchange of the vhost (management API), sorted by name.
    pub fn exchanges(&self) -> Vec<ExchangeDef> {
        let mut exchanges: Vec<ExchangeDef> =
            self.meta.lock().exchanges.values().cloned().collect();
        exchanges.sort_by(|a, b| a.name.cmp(&b.name));
        exchanges
    }

    /// Every binding of the vhost (management API), in the order they were made.
    pub fn bindings(&self) -> Vec<Binding> {
        self.meta.lock().bindings.iter().cloned().collect()
    }

    /// The current routing snapshot; cheap, lock-free.
    pub fn snapshot(&self) -> arc_swap::Guard<Arc<RoutingSnapshot>> {
        self.snapshot.load()
    }

    fn recover(
        &self,
        meta: &mut Meta,
        saved: VHostDefinitions,
        recovered: &mut warren_store::Recovered,
    ) {
        for def in saved.exchanges {
            meta.exchanges.insert(def.name.clone(), def);
        }
        for record in saved.queues {
            let def = QueueDef {
                name: record.name.clone(),
                vhost: self.name.clone(),
                durable: true,
                exclusive_owner: None,
                auto_delete: record.auto_delete,
                arguments: record.arguments,
            };
            let kind = QueueType::check_declare(&def).unwrap_or_else(|error| {
                // Declared by a Warren that took any type for classic and ignored other
                // types' arguments: its messages are kept, and it is served (and reported) as
                // the classic queue it always was.
                tracing::warn!(
                    "{} is served as a classic queue, though a declare would now be refused: \
                     {}; delete and redeclare it to remove this warning",
                    def.resource(),
                    error.text
                );
                QueueType::Classic
            });
            let messages = recovered.take(warren_store::queue_id(&self.name, &record.name));
            let args = self.effective_args(&def).unwrap_or_else(|error| {
                tracing::warn!(
                    "{}: {}; its arguments are ignored",
                    def.resource(),
                    error.text
                );
                QueueArgs::default()
            });
            let handle = self.spawn_queue(kind, def, args, messages, true);
            meta.queues.insert(record.name, handle);
        }
        meta.bindings = saved.bindings.into_iter().collect();
        tracing::info!(
            vhost = %self.name,
            exchanges = meta.exchanges.len(),
            queues = meta.queues.len(),
            bindings = meta.bindings.len(),
            "recovered definitions"
        );
    }

    fn exchange_def(
        &self,
        name: &str,
        kind: ExchangeType,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: Table,
    ) -> ExchangeDef {
        ExchangeDef {
            name: Arc::from(name),
            vhost: self.name.clone(),
            kind,
            durable,
            auto_delete,
            internal,
            arguments,
        }
    }

    fn spawn_queue(
        &self,
        kind: QueueType,
        def: QueueDef,
        args: QueueArgs,
        recovered: Option<warren_store::RecoveredQueue>,
        restart: bool,
    ) -> QueueHandle {
        let vhost = self.this.clone();
        let name = def.name.clone();
        let on_auto_delete = Box::new(move || {
            if let Some(vhost) = vhost.upgrade() {
                drop(vhost.forget_queue(&name));
            }
        });
        let setup = crate::queue::Setup {
            args,
            on_auto_delete,
            storage: self.storage.clone(),
            recovered,
            vhost: self.this.clone(),
            credit: self.queue_credit,
            streams: self.streams.clone(),
            restart,
        };
        kind.behaviour().start(def, setup)
    }

    /// Swaps in a snapshot built from all of `meta` (at start, and when policies change).
    /// Called with the lock held, so snapshots are published in the order of the changes.
    fn publish_full_snapshot(&self, meta: &Meta) {
        let exchanges = meta.exchanges.values().map(|def| self.routed(def));
        let snapshot =
            RoutingSnapshot::build(&self.name, exchanges, &meta.queues, meta.bindings.iter());
        self.snapshot.store(Arc::new(snapshot));
    }

    /// Swaps in the snapshot `change` makes of the current one (called with the lock held).
    fn update_snapshot(&self, change: impl FnOnce(&RoutingSnapshot) -> RoutingSnapshot) {
        let next = change(&self.snapshot.load());
        self.snapshot.store(Arc::new(next));
    }

    /// The definition an exchange routes by: without its own `alternate-exchange`, it takes
    /// its policy's.
    fn routed(&self, def: &ExchangeDef) -> ExchangeDef {
        let mut def = def.clone();
        if def.alternate_exchange().is_none() {
            if let Some(ae) = self.policies.load().alternate_exchange(&def.name) {
                def.arguments
                    .insert("alternate-exchange".into(), Value::Str(ae));
            }
        }
        def
    }

    /// Publishes what a removal took away: queues, exchanges, and the tables of exchanges
    /// that lost bindings (each rebuilt once). Returns the store changes for what was durable.
    fn apply_removed(&self, meta: &Meta, removed: &Removed) -> Vec<VHostChange> {
        self.update_snapshot(|current| {
            let mut next = current.clone();
            for queue in &removed.queues {
                next = next.without_queue(queue.name());
            }
            for def in &removed.exchanges {
                next = next.without_exchange(&def.name);
            }
            for source in &removed.sources {
                if let Some(def) = meta.exchanges.get(source) {
                    next = next.with_exchange(self.routed(def), meta.bindings.of_source(source));
                }
            }
            next
        });
        removed
            .exchanges
            .iter()
            .filter(|def| def.durable && !is_predeclared(&def.name))
            .map(|def| VHostChange::DeleteExchange {
                name: def.name.clone(),
            })
            .collect()
    }

    /// Hands durable changes to the metadata store (called with the lock held: the store
    /// sees them in the order they were made here).
    fn submit(&self, changes: Vec<VHostChange>) -> Completion {
        let changes = changes
            .into_iter()
            .map(|change| Change::VHost {
                vhost: self.name.clone(),
                change,
            })
            .collect();
        self.metadata.submit(changes)
    }

    /// Runs the end of a change (waiting for the store, rolling back on failure) in a task of
    /// its own, so that it completes even when the client's future is dropped half-way (a
    /// connection closing, an HTTP client going away): a pending entry is never left behind.
    async fn finish_detached<F>(
        &self,
        finish: impl FnOnce(Arc<VHost>) -> F,
    ) -> Result<(), BrokerError>
    where
        F: std::future::Future<Output = Result<(), BrokerError>> + Send + 'static,
    {
        let this = self
            .this
            .upgrade()
            .expect("invariant: a vhost in use is held by an Arc");
        tokio::spawn(finish(this)).await.map_err(|error| {
            BrokerError::internal(format!("a definition change stopped half-way: {error}"))
        })?
    }

    /// Drops the pending entry for `key` if it is still `completion`'s; whether it was.
    fn settle(meta: &mut Meta, key: &Pending, completion: &Completion) -> bool {
        let ours = meta.pending.get(key).is_some_and(|c| c.same(completion));
        if ours {
            meta.pending.remove(key);
        }
        ours
    }

    /// The durable exchanges, queues and bindings (what survives a restart).
    pub fn durable_definitions(&self) -> VHostDefinitions {
        let meta = self.meta.lock();
        self.saved(&meta)
    }

    fn saved(&self, meta: &Meta) -> VHostDefinitions {
        let durable_queue = |name: &Arc<str>| {
            meta.queues
                .get(name)
                .is_some_and(|q| q.def().durable && q.def().exclusive_owner.is_none())
        };
        let durable_exchange =
            |name: &Arc<str>| meta.exchanges.get(name).is_some_and(|e| e.durable);
        let mut saved = VHostDefinitions {
            vhost: self.name.to_string(),
            ..Default::default()
        };
        saved.exchanges = meta
            .exchanges
            .values()
            .filter(|e| e.durable && !is_predeclared(&e.name))
            .cloned()
            .collect();
        saved.queues = meta
            .queues
            .values()
            .filter(|q| durable_queue(q.name()))
            .map(|q| queue_record(q.def()))
            .collect();
        saved.bindings = meta
            .bindings
            .iter()
            .filter(|b| durable_exchange(&b.source))
            .filter(|b| match &b.destination {
                Destination::Queue(name) => durable_queue(name),
                Destination::Exchange(name) => durable_exchange(name),
            })
            .cloned()
            .collect();
        saved.exchanges.sort_by(|a, b| a.name.cmp(&b.name));
        saved.queues.sort_by(|a, b| a.name.cmp(&b.name));
        saved
    }

    /// Whether a binding survives a restart: both its ends do.
    fn durable_binding(meta: &Meta, binding: &Binding) -> bool {
        let durable_exchange =
            |name: &Arc<str>| meta.exchanges.get(name).is_some_and(|e| e.durable);
        durable_exchange(&binding.source)
            && match &binding.destination {
                Destination::Queue(name) => {
                    meta.queues.get(name).is_some_and(|q| is_durable(q.def()))
                }
                Destination::Exchange(name) => durable_exchange(name),
            }
    }

    fn no_exchange(&self, name: &str) -> BrokerError {
        BrokerError::not_found(format!(
            "no {}",
            resource_name("exchange", name, &self.name)
        ))
    }

    fn no_queue(&self, name: &str) -> BrokerError {
        BrokerError::not_found(format!("no {}", resource_name("queue", name, &self.name)))
    }
}

/// A queue that survives a restart (an exclusive one never does, whatever it says).
fn is_durable(def: &QueueDef) -> bool {
    def.durable && def.exclusive_owner.is_none()
}

fn queue_record(def: &QueueDef) -> QueueRecord {
    QueueRecord {
        name: def.name.clone(),
        auto_delete: def.auto_delete,
        arguments: def.arguments.clone(),
    }
}

fn is_predeclared(name: &str) -> bool {
    PREDECLARED.iter().any(|(n, _)| *n == name)
}

fn check_name(kind: &str, name: &str) -> Result<(), BrokerError> {
    if name.len() > NAME_BYTES_MAX {
        return Err(BrokerError::precondition_failed(format!(
            "{kind} name is {} bytes, the limit is {NAME_BYTES_MAX}",
            name.len()
        )));
    }
    Ok(())
}

/// RabbitMQ's text for a redeclaration that does not match the existing entity.
fn inequivalent(arg: &str, resource: &str, received: &str, current: &str) -> BrokerError {
    BrokerError::precondition_failed(format!(
        "inequivalent arg '{arg}' for {resource}: received {received} but current is {current}"
    ))
}

/// Compares redeclared flags (`(name, received, current)`), naming the first that differs.
fn compare_flags(resource: &str, flags: &[(&str, bool, bool)]) -> Result<(), BrokerError> {
    match flags
        .iter()
        .find(|(_, received, current)| received != current)
    {
        Some((arg, received, current)) => Err(inequivalent(
            arg,
            resource,
            &format!("'{received}'"),
            &format!("'{current}'"),
        )),
        None => Ok(()),
    }
}

/// Compares declared arguments key by key, naming the first that differs.
fn compare_arguments(resource: &str, received: &Table, current: &Table) -> Result<(), BrokerError> {
    let mut keys: Vec<&String> = received.keys().chain(current.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let (new, old) = (received.get(key), current.get(key));
        if new != old {
            return Err(inequivalent(
                key,
                resource,
                &show_value(new),
                &show_value(old),
            ));
        }
    }
    Ok(())
}

/// An argument's value as RabbitMQ's `rabbit_misc:val` words it: `the value '10' of type
/// 'long'`, or `none` when absent.
fn show_value(value: Option<&Value>) -> String {
    match value {
        None => "none".to_string(),
        Some(value) => format!(
            "the value '{value}' of type '{}'",
            crate::queue::args::type_name(value)
        ),
    }
}

mod exchanges;
mod policies;
mod queues;
mod rollback;
pub use exchanges::{check_exchange_deletion, check_not_default_exchange};
pub use policies::VHostConnection;
pub use queues::generate_name;
