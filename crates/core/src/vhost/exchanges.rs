//! Exchange declaration, deletion and bindings.

use std::sync::Arc;

use super::rollback::after_deletion;
use super::*;
use crate::routing::hash::{self, HashOn};

impl VHost {
    /// Declares (or passively checks) an exchange; returns once it is durable (when it is).
    pub async fn declare_exchange(&self, req: ExchangeDeclare) -> Result<(), BrokerError> {
        let (completion, ours) = loop {
            match self.start_declare_exchange(req.clone())? {
                Started::Done => return Ok(()),
                Started::Pending(completion, ours) => break (completion, ours),
                Started::AfterDeletion(deletion) => after_deletion(deletion, &req.name).await,
            }
        };
        match ours {
            Some(name) => {
                self.finish_detached(|this| async move {
                    this.finish_declare_exchange(name, completion).await
                })
                .await
            }
            None => completion.wait().await,
        }
    }

    async fn finish_declare_exchange(
        &self,
        name: Arc<str>,
        completion: Completion,
    ) -> Result<(), BrokerError> {
        let result = completion.clone().wait().await;
        let mut meta = self.meta.lock();
        let key = Pending::Exchange(name.clone());
        if Self::settle(&mut meta, &key, &completion) && result.is_err() {
            // Not on disk, so not here either; with what was bound to it meanwhile.
            let mut removed = Removed::default();
            self.remove_exchange(&mut meta, &name, &mut removed);
            let mut changes = self.apply_removed(&meta, &removed);
            changes.push(VHostChange::DeleteExchange { name });
            drop(self.submit(changes));
        }
        result
    }

    /// The completion to wait for, and the name when this declaration made the exchange
    /// (`None` when it exists and is not on its way to disk).
    fn start_declare_exchange(&self, req: ExchangeDeclare) -> Result<Started, BrokerError> {
        check_name("exchange", &req.name)?;
        // Before any lookup, passive too, as RabbitMQ's `check_not_default_exchange`.
        check_not_default_exchange(&req.name)?;
        let mut meta = self.meta.lock();
        if let Some(existing) = meta.exchanges.get(req.name.as_str()) {
            if !req.passive {
                check_equivalent_exchange(existing, &req)?;
            }
            let pending = meta.pending.get(&Pending::Exchange(existing.name.clone()));
            return Ok(match pending {
                Some(completion) => Started::Pending(completion.clone(), None),
                None => Started::Done,
            });
        }
        let key = Pending::Exchange(Arc::from(req.name.as_str()));
        if let Some(deletion) = Self::deleting(&meta, &key) {
            return Ok(Started::AfterDeletion(deletion));
        }
        if req.passive {
            return Err(self.no_exchange(&req.name));
        }
        let def = self.check_new_exchange(req)?;
        let name = def.name.clone();
        let durable = def.durable;
        self.update_snapshot(|current| {
            current.with_exchange(self.routed(&def), std::iter::empty::<&Binding>())
        });
        meta.exchanges.insert(name.clone(), def.clone());
        if !durable {
            return Ok(Started::Done);
        }
        let completion = self.submit(vec![VHostChange::PutExchange { exchange: def }]);
        meta.pending
            .insert(Pending::Exchange(name.clone()), completion.clone());
        Ok(Started::Pending(completion, Some(name)))
    }

    /// A new exchange's definition, once its name, type and arguments are valid.
    fn check_new_exchange(&self, req: ExchangeDeclare) -> Result<ExchangeDef, BrokerError> {
        if req.name.starts_with("amq.") {
            return Err(BrokerError::access_refused(format!(
                "exchange name '{}' contains reserved prefix 'amq.*'",
                req.name
            )));
        }
        let kind: ExchangeType = req.kind.parse()?;
        if let Some(value) = req.arguments.get("alternate-exchange") {
            if value.as_str().is_none() {
                return Err(BrokerError::precondition_failed(format!(
                    "invalid arg 'alternate-exchange' for {}: expected a string, got {value}",
                    resource_name("exchange", &req.name, &self.name)
                )));
            }
        }
        if kind == ExchangeType::ConsistentHash {
            HashOn::from_arguments(&req.arguments)?;
        }
        Ok(self.exchange_def(
            &req.name,
            kind,
            req.durable,
            req.auto_delete,
            req.internal,
            req.arguments,
        ))
    }

    /// Deletes an exchange with its bindings. A deletion the store could not write is rolled
    /// back (`rollback.rs`) and answered with an error: the exchange would come back after a
    /// restart.
    pub async fn delete_exchange(&self, name: &str, if_unused: bool) -> Result<(), BrokerError> {
        check_exchange_deletion(name, &self.name)?;
        let pending = {
            let mut meta = self.meta.lock();
            let Some(def) = meta.exchanges.get(name) else {
                // RabbitMQ treats deleting a missing exchange as done.
                return Ok(());
            };
            if if_unused && meta.bindings.has_source(name) {
                return Err(BrokerError::precondition_failed(format!(
                    "{} in use",
                    def.resource()
                )));
            }
            self.exchange_stats.forget(name);
            let mut removed = Removed::default();
            self.remove_exchange(&mut meta, name, &mut removed);
            let changes = self.apply_removed(&meta, &removed);
            self.submit_deletion(&mut meta, changes, removed)
        };
        match pending {
            Some((completion, undo)) => self.finish_deletion(completion, undo).await,
            None => Ok(()),
        }
    }

    /// Takes an exchange and its bindings (from it and to it) out of `meta`, noting in
    /// `removed` what the snapshot and the store must drop.
    fn remove_exchange(&self, meta: &mut Meta, name: &str, removed: &mut Removed) {
        let Some(def) = meta.exchanges.remove(name) else {
            return;
        };
        removed.bindings.extend(meta.bindings.remove_source(name));
        let to_it = meta
            .bindings
            .remove_destination(&Destination::Exchange(def.name.clone()));
        let sources: Vec<Arc<str>> = to_it.iter().map(|b| b.source.clone()).collect();
        removed.bindings.extend(to_it);
        removed.sources.remove(&def.name);
        removed.exchanges.push(def);
        self.auto_delete_exchanges(meta, &sources, removed);
    }

    /// Adds a binding (idempotent). `destination` names a queue or an exchange. Returns once
    /// the binding is durable, when both its ends are.
    pub async fn bind(
        &self,
        source: &str,
        destination: Destination,
        routing_key: &str,
        arguments: Table,
        connection: ConnectionId,
    ) -> Result<(), BrokerError> {
        let binding = Binding {
            source: Arc::from(source),
            destination,
            routing_key: Arc::from(routing_key),
            arguments,
        };
        let (waits, ours) = loop {
            match self.start_bind(&binding, connection)? {
                Bound::Waits(waits, ours) => break (waits, ours),
                Bound::AfterDeletion(deletion) => after_deletion(deletion, source).await,
            }
        };
        match ours {
            Some(completion) => {
                self.finish_detached(|this| async move {
                    this.finish_bind(binding, waits, completion).await
                })
                .await
            }
            None => wait_all(waits).await,
        }
    }

    /// Waits for a new durable binding (and its ends); takes it away again if any of them
    /// could not be written.
    async fn finish_bind(
        &self,
        binding: Binding,
        waits: Vec<Completion>,
        completion: Completion,
    ) -> Result<(), BrokerError> {
        let result = wait_all(waits).await;
        let mut meta = self.meta.lock();
        let key = Pending::Binding(BindingKey::of(&binding));
        if Self::settle(&mut meta, &key, &completion)
            && result.is_err()
            && meta.bindings.remove(&binding)
        {
            self.update_snapshot(|current| {
                current.without_binding(&binding, meta.bindings.of_source(&binding.source))
            });
            // Written when only an end of it failed: not to be found after a restart.
            drop(self.submit(vec![VHostChange::DeleteBinding { binding }]));
        }
        result
    }

    /// Adds the binding in memory; returns what to wait for (the binding's own write, and
    /// those of its ends if they are on their way to disk) and the own write's completion.
    fn start_bind(
        &self,
        binding: &Binding,
        connection: ConnectionId,
    ) -> Result<Bound, BrokerError> {
        let mut meta = self.meta.lock();
        let source = &*binding.source;
        self.check_binding_ends(&meta, source, &binding.destination, connection)?;
        match meta.exchanges.get(source).map(|e| e.kind) {
            Some(ExchangeType::Headers) => {
                MatchMode::from_arguments(&binding.arguments)?;
            }
            Some(ExchangeType::ConsistentHash) => {
                hash::binding_weight(&binding.routing_key)?;
            }
            Some(ExchangeType::LocalRandom) => {
                check_local_random_binding(&binding.destination, &binding.routing_key)?
            }
            _ => {}
        }
        let destination = match &binding.destination {
            Destination::Queue(name) => Pending::Queue(name.clone()),
            Destination::Exchange(name) => Pending::Exchange(name.clone()),
        };
        let key = Pending::Binding(BindingKey::of(binding));
        let mut waits: Vec<Completion> = [Pending::Exchange(binding.source.clone()), destination]
            .iter()
            .filter_map(|end| meta.pending.get(end).cloned())
            .collect();
        if meta.bindings.contains(binding) {
            waits.extend(meta.pending.get(&key).cloned());
            return Ok(Bound::Waits(waits, None));
        }
        if let Some(deletion) = Self::deleting(&meta, &key) {
            return Ok(Bound::AfterDeletion(deletion));
        }
        meta.bindings.insert(binding.clone());
        self.update_snapshot(|current| {
            current.with_binding(binding, meta.bindings.of_source(source))
        });
        if !Self::durable_binding(&meta, binding) {
            return Ok(Bound::Waits(waits, None));
        }
        let binding = binding.clone();
        let completion = self.submit(vec![VHostChange::PutBinding { binding }]);
        meta.pending.insert(key, completion.clone());
        waits.push(completion.clone());
        Ok(Bound::Waits(waits, Some(completion)))
    }

    /// Removes a binding; removing one that does not exist succeeds, as in RabbitMQ, also when
    /// its source or destination no longer exists. Returns once the removal is durable.
    pub async fn unbind(
        &self,
        source: &str,
        destination: Destination,
        routing_key: &str,
        arguments: Table,
        connection: ConnectionId,
    ) -> Result<(), BrokerError> {
        check_not_default_exchange(source)?;
        if let Destination::Exchange(name) = &destination {
            check_not_default_exchange(name)?;
        }
        let binding = Binding {
            source: Arc::from(source),
            destination,
            routing_key: Arc::from(routing_key),
            arguments,
        };
        let pending = {
            let mut meta = self.meta.lock();
            // A binding whose source or destination is gone is gone too: unbinding it (or any
            // binding that does not exist) succeeds, as RabbitMQ's `rabbit_db_binding:delete`.
            if !meta.bindings.contains(&binding) {
                return Ok(());
            }
            if let Destination::Queue(name) = &binding.destination {
                if let Some(queue) = meta.queues.get(name) {
                    check_exclusive(queue, connection)?;
                }
            }
            let durable = Self::durable_binding(&meta, &binding);
            meta.bindings.remove(&binding);
            self.update_snapshot(|current| {
                current.without_binding(&binding, meta.bindings.of_source(source))
            });
            let mut removed = Removed {
                bindings: vec![binding.clone()],
                ..Removed::default()
            };
            self.auto_delete_exchanges(
                &mut meta,
                std::slice::from_ref(&binding.source),
                &mut removed,
            );
            let mut changes = self.apply_removed(&meta, &removed);
            if durable {
                changes.insert(0, VHostChange::DeleteBinding { binding });
            }
            self.submit_deletion(&mut meta, changes, removed)
        };
        match pending {
            Some((completion, undo)) => self.finish_deletion(completion, undo).await,
            None => Ok(()),
        }
    }

    fn check_binding_ends(
        &self,
        meta: &Meta,
        source: &str,
        destination: &Destination,
        connection: ConnectionId,
    ) -> Result<(), BrokerError> {
        check_not_default_exchange(source)?;
        if let Destination::Exchange(name) = destination {
            check_not_default_exchange(name)?;
        }
        match destination {
            Destination::Queue(name) => {
                let queue = meta.queues.get(name).ok_or_else(|| self.no_queue(name))?;
                check_exclusive(queue, connection)?;
            }
            Destination::Exchange(name) => {
                if !meta.exchanges.contains_key(name) {
                    return Err(self.no_exchange(name));
                }
            }
        }
        if !meta.exchanges.contains_key(source) {
            return Err(self.no_exchange(source));
        }
        Ok(())
    }

    /// Deletes auto-delete exchanges among `sources` that have no bindings left; every source
    /// that stays is noted in `removed.sources` (its table changed).
    pub(super) fn auto_delete_exchanges(
        &self,
        meta: &mut Meta,
        sources: &[Arc<str>],
        removed: &mut Removed,
    ) {
        for source in sources {
            let unused = !meta.bindings.has_source(source);
            let auto = meta.exchanges.get(source).is_some_and(|e| e.auto_delete);
            if unused && auto {
                self.remove_exchange(meta, source, removed);
            } else if meta.exchanges.contains_key(source) {
                removed.sources.insert(source.clone());
            }
        }
    }
}

/// Where an exchange declaration stands once `meta` is let go.
enum Started {
    /// Answered now (it existed, or is not durable).
    Done,
    /// A completion to wait for, and the exchange's name when this declaration made it.
    Pending(Completion, Option<Arc<str>>),
    /// The name is being deleted: start again once the deletion is durable or rolled back.
    AfterDeletion(Completion),
}

/// Where a binding stands once `meta` is let go.
enum Bound {
    /// What to wait for (its own write, and those of its ends on their way to disk), and
    /// the own write's completion when this bind made the binding.
    Waits(Vec<Completion>, Option<Completion>),
    /// The same binding is being deleted: start again once that is durable or rolled back.
    AfterDeletion(Completion),
}

/// Waits for every completion; the first error, if any.
async fn wait_all(completions: Vec<Completion>) -> Result<(), BrokerError> {
    let mut result = Ok(());
    for completion in completions {
        if let Err(error) = completion.wait().await {
            result = result.and(Err(error));
        }
    }
    result
}

/// As RabbitMQ 4.0: only queues may be bound to a local-random exchange, with an empty key
/// (the key would be ignored, so a non-empty one is taken for a mistake).
fn check_local_random_binding(
    destination: &Destination,
    routing_key: &str,
) -> Result<(), BrokerError> {
    if !routing_key.is_empty() {
        return Err(BrokerError::precondition_failed(format!(
            "x-local-random exchanges do not support routing keys, got '{routing_key}'"
        )));
    }
    if let Destination::Exchange(name) = destination {
        return Err(BrokerError::precondition_failed(format!(
            "cannot bind exchange '{name}' to an x-local-random exchange: only queues can be \
             bound to a local random exchange"
        )));
    }
    Ok(())
}

fn check_equivalent_exchange(
    existing: &ExchangeDef,
    req: &ExchangeDeclare,
) -> Result<(), BrokerError> {
    let resource = existing.resource();
    if existing.kind.as_str() != req.kind {
        return Err(inequivalent(
            "type",
            &resource,
            &format!("'{}'", req.kind),
            &format!("'{}'", existing.kind.as_str()),
        ));
    }
    let flags = [
        ("durable", req.durable, existing.durable),
        ("auto_delete", req.auto_delete, existing.auto_delete),
        ("internal", req.internal, existing.internal),
    ];
    compare_flags(&resource, &flags)?;
    compare_arguments(&resource, &req.arguments, &existing.arguments)
}

/// The default exchange (`""`) can be neither declared (passively either), deleted nor bound:
/// RabbitMQ's `check_not_default_exchange`, which runs before any lookup or permission check.
pub fn check_not_default_exchange(name: &str) -> Result<(), BrokerError> {
    if name.is_empty() {
        return Err(BrokerError::access_refused(
            "operation not permitted on the default exchange",
        ));
    }
    Ok(())
}

/// Neither the default exchange nor an `amq.*` one may be deleted (RabbitMQ's
/// `check_not_default_exchange` and `check_exchange_deletion`, before permissions).
pub fn check_exchange_deletion(name: &str, vhost: &str) -> Result<(), BrokerError> {
    check_not_default_exchange(name)?;
    if name.starts_with("amq.") {
        return Err(BrokerError::access_refused(format!(
            "deletion of system {} not allowed",
            resource_name("exchange", name, vhost)
        )));
    }
    Ok(())
}

/// An exclusive queue may only be used by the connection that declared it.
pub fn check_exclusive(queue: &QueueHandle, connection: ConnectionId) -> Result<(), BrokerError> {
    match queue.def().exclusive_owner {
        Some(owner) if owner != connection => Err(exclusive_locked(queue.def())),
        _ => Ok(()),
    }
}

/// RabbitMQ's `check_exclusive_access` refusal (405 RESOURCE_LOCKED).
pub fn exclusive_locked(queue: &QueueDef) -> BrokerError {
    BrokerError::resource_locked(format!(
        "cannot obtain exclusive access to locked {}. It could be originally declared on \
         another connection or the exclusive property value does not match that of the \
         original declaration.",
        queue.resource()
    ))
}
