//! Queue declaration, lookup, purge and deletion.

use std::sync::Arc;

use super::exchanges::{check_exclusive, exclusive_locked};
use super::rollback::after_deletion;
use super::*;
use crate::error::ErrorKind;
use crate::queue::queue_type::QueueType;
use crate::value::Table;

/// Where a queue declaration stands once `meta` is let go.
enum Declared {
    /// Answered now (it existed, or is not durable).
    Done(QueueHandle),
    /// It exists, but its declaration is still on its way to disk: answer once it is there.
    Wait(QueueHandle, Completion),
    /// Declared here and on its way to disk: answer once it is there, or roll back.
    Writing(QueueHandle, Completion),
    /// The name is being deleted: start again once the deletion is durable or rolled back.
    AfterDeletion(Completion),
}

impl VHost {
    /// Declares (or passively checks) a queue; returns its handle once it is durable (when it
    /// is durable). An empty name asks for a server-named queue (`amq.gen-…`).
    pub async fn declare_queue(
        &self,
        req: QueueDeclare,
        connection: ConnectionId,
    ) -> Result<QueueHandle, BrokerError> {
        loop {
            match self.start_declare_queue(req.clone(), connection)? {
                Declared::Done(handle) => return Ok(handle),
                Declared::Wait(handle, completion) => {
                    completion.wait().await?;
                    return Ok(handle);
                }
                Declared::Writing(handle, completion) => {
                    let queue = handle.clone();
                    self.finish_detached(|this| async move {
                        this.finish_declare_queue(&queue, completion).await
                    })
                    .await?;
                    return Ok(handle);
                }
                Declared::AfterDeletion(deletion) => after_deletion(deletion, &req.name).await,
            }
        }
    }

    fn start_declare_queue(
        &self,
        mut req: QueueDeclare,
        connection: ConnectionId,
    ) -> Result<Declared, BrokerError> {
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
            let pending = meta.pending.get(&Pending::Queue(existing.name().clone()));
            return Ok(match pending {
                Some(completion) => Declared::Wait(existing.clone(), completion.clone()),
                None => Declared::Done(existing.clone()),
            });
        }
        let key = Pending::Queue(Arc::from(req.name.as_str()));
        if let Some(deletion) = Self::deleting(&meta, &key) {
            return Ok(Declared::AfterDeletion(deletion));
        }
        if req.passive {
            return Err(self.no_queue(&req.name));
        }
        self.apply_default_queue_type(&mut req);
        if req.name.is_empty() {
            let kind = QueueType::from_arguments("queue '' in vhost", &req.arguments)?;
            if !kind.capabilities().server_named {
                return Err(BrokerError::precondition_failed(format!(
                    "Cannot declare a server-named queue for type {}",
                    kind.behaviour().module()
                )));
            }
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
        if kind == QueueType::Stream && self.streams.is_none() {
            return Err(BrokerError::precondition_failed(format!(
                "{} cannot be declared: this broker has no storage for streams (it was \
                 opened without a stream encoding); declare a classic queue instead",
                def.resource()
            )));
        }
        self.check_queue_limit(&def.name, meta.queues.len())?;
        let args = self.effective_args(&def)?;
        let record = is_durable(&def).then(|| queue_record(&def));
        let handle = self.spawn_queue(kind, def, args, None, false);
        meta.queues.insert(handle.name().clone(), handle.clone());
        self.update_snapshot(|current| current.with_queue(&handle));
        let Some(queue) = record else {
            return Ok(Declared::Done(handle));
        };
        let completion = self.submit(vec![VHostChange::PutQueue { queue }]);
        let key = Pending::Queue(handle.name().clone());
        meta.pending.insert(key, completion.clone());
        Ok(Declared::Writing(handle, completion))
    }

    /// Waits until a new durable queue is on disk; when it could not be written, takes it
    /// away again (with any binding made to it meanwhile) and stops it.
    async fn finish_declare_queue(
        &self,
        handle: &QueueHandle,
        completion: Completion,
    ) -> Result<(), BrokerError> {
        let result = completion.clone().wait().await;
        let name = handle.name().clone();
        let rolled_back = {
            let mut meta = self.meta.lock();
            Self::settle(&mut meta, &Pending::Queue(name.clone()), &completion);
            let ours = meta.queues.get(&name).is_some_and(|q| q.same(handle));
            if result.is_err() && ours {
                let removed = self.remove_queue(&mut meta, &name);
                debug_assert!(removed.is_some(), "invariant: ours, so still there");
                let mut changes = removed.map(|(_, changes)| changes).unwrap_or_default();
                // Bindings to it that were written meanwhile go with it.
                changes.push(VHostChange::DeleteQueue { name: name.clone() });
                drop(self.submit(changes));
            }
            result.is_err() && ours
        };
        if rolled_back {
            tracing::warn!(
                "{} was not declared: its definition could not be written",
                handle.def().resource()
            );
            let _ = handle
                .request(|reply| QueueCmd::Delete {
                    if_unused: false,
                    if_empty: false,
                    reply,
                })
                .await;
        }
        result
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
        let handle = self.spawn_queue(QueueType::Classic, def, QueueArgs::default(), None, false);
        meta.queues.insert(handle.name().clone(), handle.clone());
        self.update_snapshot(|current| current.with_queue(&handle));
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
        if queue.kind() == QueueType::Stream {
            // RabbitMQ's `rabbit_channel` text: a stream keeps its messages.
            return Err(BrokerError::new(
                ErrorKind::NotImplemented,
                format!(
                    "queue.purge not supported by stream queues {}",
                    queue.def().resource()
                ),
            ));
        }
        queue.request(|reply| QueueCmd::Purge { reply }).await
    }

    /// Deletes a queue once it agrees (`if_unused`, `if_empty`); returns the messages it held.
    /// A deletion the store could not write is rolled back (`rollback.rs`: the queue comes
    /// back empty, with its bindings, as a restart would bring it back) and answered with an
    /// error.
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
        let pending = {
            let mut meta = self.meta.lock();
            // Ours only if it is still the queue that was asked to stop.
            let ours = meta.queues.get(name).is_some_and(|q| q.same(&queue));
            let removed = ours.then(|| self.remove_durable_queue(&mut meta, name));
            removed
                .flatten()
                .and_then(|(removed, changes)| self.submit_deletion(&mut meta, changes, removed))
        };
        if let Some((completion, undo)) = pending {
            self.finish_deletion(completion, undo).await?;
        }
        Ok(count)
    }

    /// Drops a stopped queue's record and bindings (deleted, auto-deleted, exclusive owner
    /// gone). Returns the store's completion when the queue was durable (nothing waits for
    /// it when the queue went by itself; the store logs a failure).
    /// A queue that went by itself (auto-delete, `x-expires`, its exclusive owner gone) is
    /// not rolled back when the store fails (nobody asked for it, and a restart brings a
    /// durable one back): the store logs the failure.
    pub fn forget_queue(&self, name: &str) -> Option<Completion> {
        let mut meta = self.meta.lock();
        let (_, changes) = self.remove_durable_queue(&mut meta, name)?;
        (!changes.is_empty()).then(|| self.submit(changes))
    }

    /// Takes a queue out as `remove_queue` does; the store changes include the queue's own
    /// record when it is durable.
    fn remove_durable_queue(
        &self,
        meta: &mut Meta,
        name: &str,
    ) -> Option<(Removed, Vec<VHostChange>)> {
        let durable = meta.queues.get(name).is_some_and(|q| is_durable(q.def()));
        let (removed, mut changes) = self.remove_queue(meta, name)?;
        if durable {
            changes.insert(
                0,
                VHostChange::DeleteQueue {
                    name: Arc::from(name),
                },
            );
        }
        Some((removed, changes))
    }

    /// Takes a queue and its bindings out of `meta` and the snapshot, with the auto-delete
    /// exchanges that are left unused; what went (`None` when it was not there), and the
    /// store changes for the exchanges that went with it.
    fn remove_queue(&self, meta: &mut Meta, name: &str) -> Option<(Removed, Vec<VHostChange>)> {
        let queue = meta.queues.remove(name)?;
        let gone = Destination::Queue(queue.name().clone());
        let mut removed = Removed {
            queues: vec![queue],
            ..Removed::default()
        };
        let to_it = meta.bindings.remove_destination(&gone);
        let sources: Vec<Arc<str>> = to_it.iter().map(|b| b.source.clone()).collect();
        removed.bindings = to_it;
        self.auto_delete_exchanges(meta, &sources, &mut removed);
        let changes = self.apply_removed(meta, &removed);
        Some((removed, changes))
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
