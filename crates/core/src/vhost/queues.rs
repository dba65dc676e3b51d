//! Queue declaration, lookup, purge and deletion.

use std::sync::Arc;

use super::exchanges::{check_exclusive, exclusive_locked};
use super::*;
use crate::queue::queue_type::QueueType;
use crate::value::Table;

impl VHost {
    /// Declares (or passively checks) a queue; returns its handle. An empty name asks for a
    /// server-named queue (`amq.gen-…`).
    pub fn declare_queue(
        &self,
        mut req: QueueDeclare,
        connection: ConnectionId,
    ) -> Result<QueueHandle, BrokerError> {
        check_name("queue", &req.name)?;
        let mut meta = self.meta.lock();
        if let Some(existing) = meta.queues.get(req.name.as_str()) {
            if req.passive {
                check_exclusive(existing, connection)?;
            } else {
                // RabbitMQ's strict check: the declare's owner (this connection when it says
                // exclusive, none otherwise) must be the queue's, else 405 RESOURCE_LOCKED.
                let owner = req.exclusive.then_some(connection);
                if existing.def().exclusive_owner != owner {
                    return Err(exclusive_locked(existing.def()));
                }
                check_equivalent_queue(existing.def(), &req)?;
            }
            return Ok(existing.clone());
        }
        if req.passive {
            return Err(self.no_queue(&req.name));
        }
        if req.name.is_empty() {
            req.name = generate_name("amq.gen-");
        } else if req.name.starts_with("amq.") {
            return Err(BrokerError::access_refused(format!(
                "queue name '{}' contains reserved prefix 'amq.*'",
                req.name
            )));
        }
        let def = QueueDef {
            name: Arc::from(req.name.as_str()),
            vhost: self.name.clone(),
            durable: req.durable,
            exclusive_owner: req.exclusive.then_some(connection),
            auto_delete: req.auto_delete,
            arguments: req.arguments,
        };
        let kind = QueueType::check_declare(&def)?;
        self.check_queue_limit(&def.name, meta.queues.len())?;
        let args = self.effective_args(&def)?;
        let persistent = def.durable && def.exclusive_owner.is_none();
        let handle = self.spawn_queue(kind, def, args, None);
        meta.queues.insert(handle.name().clone(), handle.clone());
        self.publish_snapshot(&meta);
        if persistent {
            self.persist(&meta)?;
        }
        Ok(handle)
    }

    /// The private queue behind direct reply-to (`amq.rabbitmq.reply-to`): exclusive to the
    /// consuming connection, reachable through the default exchange by its generated name.
    pub fn declare_reply_to_queue(
        &self,
        connection: ConnectionId,
    ) -> Result<QueueHandle, BrokerError> {
        let def = QueueDef {
            name: Arc::from(generate_name("amq.rabbitmq.reply-to.").as_str()),
            vhost: self.name.clone(),
            durable: false,
            exclusive_owner: Some(connection),
            auto_delete: true,
            arguments: Table::new(),
        };
        let mut meta = self.meta.lock();
        let handle = self.spawn_queue(QueueType::Classic, def, QueueArgs::default(), None);
        meta.queues.insert(handle.name().clone(), handle.clone());
        self.publish_snapshot(&meta);
        Ok(handle)
    }

    /// Looks a queue up for use by `connection` (404 when missing, 405 when another
    /// connection's exclusive queue).
    pub fn queue(&self, name: &str, connection: ConnectionId) -> Result<QueueHandle, BrokerError> {
        let snapshot = self.snapshot();
        let queue = snapshot.queue(name).ok_or_else(|| self.no_queue(name))?;
        check_exclusive(queue, connection)?;
        Ok(queue.clone())
    }

    pub async fn purge_queue(
        &self,
        name: &str,
        connection: ConnectionId,
    ) -> Result<u32, BrokerError> {
        let queue = self.queue(name, connection)?;
        queue.request(|reply| QueueCmd::Purge { reply }).await
    }

    /// Deletes a queue once it agrees (`if_unused`, `if_empty`); returns the messages it held.
    pub async fn delete_queue(
        &self,
        name: &str,
        if_unused: bool,
        if_empty: bool,
        connection: ConnectionId,
    ) -> Result<u32, BrokerError> {
        let queue = self.queue(name, connection)?;
        let count = queue
            .request(|reply| QueueCmd::Delete {
                if_unused,
                if_empty,
                reply,
            })
            .await??;
        self.forget_queue(name);
        Ok(count)
    }

    /// Drops a stopped queue's record and bindings (deleted, auto-deleted, exclusive owner gone).
    pub fn forget_queue(&self, name: &str) {
        let mut meta = self.meta.lock();
        let Some(queue) = meta.queues.remove(name) else {
            return;
        };
        let gone = Destination::Queue(queue.name().clone());
        let sources: Vec<Arc<str>> = meta
            .bindings
            .iter()
            .filter(|b| b.destination == gone)
            .map(|b| b.source.clone())
            .collect();
        meta.bindings.retain(|b| b.destination != gone);
        self.auto_delete_exchanges(&mut meta, &sources);
        self.publish_snapshot(&meta);
        if queue.def().durable {
            // Logged inside; the queue is gone either way.
            let _ = self.persist(&meta);
        }
    }

    /// Exclusive queues of a closing connection.
    /// Every queue of the vhost.
    pub fn queue_handles(&self) -> Vec<QueueHandle> {
        self.meta.lock().queues.values().cloned().collect()
    }

    pub fn exclusive_queues_of(&self, connection: ConnectionId) -> Vec<QueueHandle> {
        self.meta
            .lock()
            .queues
            .values()
            .filter(|q| q.def().exclusive_owner == Some(connection))
            .cloned()
            .collect()
    }
}

fn check_equivalent_queue(existing: &QueueDef, req: &QueueDeclare) -> Result<(), BrokerError> {
    let resource = existing.resource();
    // `exclusive` is not compared here: a mismatch is 405 RESOURCE_LOCKED (see declare_queue).
    let flags = [
        ("durable", req.durable, existing.durable),
        ("auto_delete", req.auto_delete, existing.auto_delete),
    ];
    compare_flags(&resource, &flags)?;
    compare_arguments(
        &resource,
        &with_queue_type(&req.arguments),
        &with_queue_type(&existing.arguments),
    )
}

/// `arguments` with `x-queue-type=classic` when they name no type, which means the same (as
/// RabbitMQ 4 adds the default type to every declare, so that a redeclare asking for another
/// type reads `received 'quorum' but current is 'classic'`).
fn with_queue_type(arguments: &Table) -> std::borrow::Cow<'_, Table> {
    if arguments.contains_key("x-queue-type") {
        return std::borrow::Cow::Borrowed(arguments);
    }
    let mut arguments = arguments.clone();
    arguments.insert(
        "x-queue-type".into(),
        Value::Str(QueueType::Classic.name().into()),
    );
    std::borrow::Cow::Owned(arguments)
}

/// `prefix` followed by 22 url-safe base64 characters (128 random bits), as RabbitMQ.
pub fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut name = String::with_capacity(prefix.len() + 22);
    name.push_str(prefix);
    for _ in 0..22 {
        name.push(char::from(ALPHABET[fastrand::usize(..64)]));
    }
    name
}
