//! Exchange declaration, deletion and bindings.

use std::sync::Arc;

use super::*;
use crate::routing::hash::{self, HashOn};

impl VHost {
    pub fn declare_exchange(&self, req: ExchangeDeclare) -> Result<(), BrokerError> {
        check_name("exchange", &req.name)?;
        // Before any lookup, passive too, as RabbitMQ's `check_not_default_exchange`.
        check_not_default_exchange(&req.name)?;
        let mut meta = self.meta.lock();
        if let Some(existing) = meta.exchanges.get(req.name.as_str()) {
            if req.passive {
                return Ok(());
            }
            return check_equivalent_exchange(existing, &req);
        }
        if req.passive {
            return Err(self.no_exchange(&req.name));
        }
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
        let def = self.exchange_def(
            &req.name,
            kind,
            req.durable,
            req.auto_delete,
            req.internal,
            req.arguments,
        );
        let durable = def.durable;
        meta.exchanges.insert(def.name.clone(), def);
        self.publish_snapshot(&meta);
        if durable {
            self.persist(&meta)?;
        }
        Ok(())
    }

    pub fn delete_exchange(&self, name: &str, if_unused: bool) -> Result<(), BrokerError> {
        check_exchange_deletion(name, &self.name)?;
        let mut meta = self.meta.lock();
        let Some(def) = meta.exchanges.get(name) else {
            // RabbitMQ treats deleting a missing exchange as done.
            return Ok(());
        };
        if if_unused && meta.bindings.iter().any(|b| &*b.source == name) {
            return Err(BrokerError::precondition_failed(format!(
                "{} in use",
                def.resource()
            )));
        }
        let durable = def.durable;
        meta.exchanges.remove(name);
        self.exchange_stats.forget(name);
        meta.bindings.retain(|b| {
            &*b.source != name && b.destination != Destination::Exchange(Arc::from(name))
        });
        self.publish_snapshot(&meta);
        if durable {
            self.persist(&meta)?;
        }
        Ok(())
    }

    /// Adds a binding (idempotent). `destination` names a queue or an exchange.
    pub fn bind(
        &self,
        source: &str,
        destination: Destination,
        routing_key: &str,
        arguments: Table,
        connection: ConnectionId,
    ) -> Result<(), BrokerError> {
        let mut meta = self.meta.lock();
        self.check_binding_ends(&meta, source, &destination, connection)?;
        match meta.exchanges.get(source).map(|e| e.kind) {
            Some(ExchangeType::Headers) => {
                MatchMode::from_arguments(&arguments)?;
            }
            Some(ExchangeType::ConsistentHash) => {
                hash::binding_weight(routing_key)?;
            }
            Some(ExchangeType::LocalRandom) => {
                check_local_random_binding(&destination, routing_key)?
            }
            _ => {}
        }
        let binding = Binding {
            source: Arc::from(source),
            destination,
            routing_key: Arc::from(routing_key),
            arguments,
        };
        if meta.bindings.contains(&binding) {
            return Ok(());
        }
        meta.bindings.push(binding);
        self.publish_snapshot(&meta);
        self.persist(&meta)
    }

    /// Removes a binding; removing one that does not exist succeeds, as in RabbitMQ, also when
    /// its source or destination no longer exists.
    pub fn unbind(
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
        let mut meta = self.meta.lock();
        let matches = |b: &Binding| {
            &*b.source == source
                && b.destination == destination
                && &*b.routing_key == routing_key
                && b.arguments == arguments
        };
        // A binding whose source or destination is gone is gone too: unbinding it (or any
        // binding that does not exist) succeeds, as RabbitMQ's `rabbit_db_binding:delete`.
        if !meta.bindings.iter().any(matches) {
            return Ok(());
        }
        if let Destination::Queue(name) = &destination {
            if let Some(queue) = meta.queues.get(name) {
                check_exclusive(queue, connection)?;
            }
        }
        meta.bindings.retain(|b| !matches(b));
        self.auto_delete_exchanges(&mut meta, &[Arc::from(source)]);
        self.publish_snapshot(&meta);
        self.persist(&meta)
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

    /// Deletes auto-delete exchanges among `sources` that have no bindings left.
    pub(super) fn auto_delete_exchanges(&self, meta: &mut Meta, sources: &[Arc<str>]) {
        for source in sources {
            let unused = !meta.bindings.iter().any(|b| &b.source == source);
            let auto = meta.exchanges.get(source).is_some_and(|e| e.auto_delete);
            if unused && auto {
                meta.exchanges.remove(source);
                let gone = Destination::Exchange(source.clone());
                let orphaned: Vec<Arc<str>> = meta
                    .bindings
                    .iter()
                    .filter(|b| b.destination == gone)
                    .map(|b| b.source.clone())
                    .collect();
                meta.bindings.retain(|b| b.destination != gone);
                self.auto_delete_exchanges(meta, &orphaned);
            }
        }
    }
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
