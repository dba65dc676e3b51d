//! Deletions the metadata store could not write: rolled back in memory and answered with an
//! error, as declarations are, so that what a client sees is what a restart brings back
//! (RabbitMQ answers an error and keeps the object).
//!
//! A deletion (of a queue, an exchange, a binding) takes its objects out of memory at once,
//! so routing stops using them, and keeps what it took in an `Undo` until the store answers.
//! Meanwhile each key it took is listed in `Meta::pending` under the deletion's completion:
//! a declaration or binding of the same name waits for the deletion's outcome before it
//! starts (`deleting`), so a rollback never meets a new object of the same name whose own
//! rollback could undo the store behind it. If the store fails, whatever is still free is put
//! back (a deleted queue comes back empty: its messages were erased, as after a restart);
//! a binding that cannot come back (an end of it is gone meanwhile) is deleted again in the
//! store, so that memory and disk converge.

use std::collections::HashMap;

use super::{Meta, Pending, Removed, VHost};
use crate::binding::{Binding, BindingKey, Destination};
use crate::error::BrokerError;
use crate::exchange::ExchangeDef;
use crate::metadata::{Completion, VHostChange};
use crate::queue::queue_type::QueueType;
use crate::queue::{QueueArgs, QueueDef};

/// What a deletion took out of memory, kept until the store says whether it is durable.
pub(super) struct Undo {
    queues: Vec<(QueueType, QueueDef, QueueArgs)>,
    exchanges: Vec<ExchangeDef>,
    bindings: Vec<Binding>,
    /// The keys listed in `Meta::pending` under this deletion.
    keys: Vec<Pending>,
    /// The completions those keys had before (a declaration or binding still on its way to
    /// disk when it was deleted): such an object comes back only if its own write succeeded.
    prior: HashMap<Pending, Completion>,
}

impl VHost {
    /// Hands a deletion's durable `changes` to the store (called with the lock held) and
    /// lists what `removed` took as pending under it; what to wait for and undo. `None` when
    /// nothing durable was deleted: there is nothing to write, so nothing can fail.
    pub(super) fn submit_deletion(
        &self,
        meta: &mut Meta,
        changes: Vec<VHostChange>,
        removed: Removed,
    ) -> Option<(Completion, Undo)> {
        if changes.is_empty() {
            return None;
        }
        let completion = self.submit(changes);
        let undo = Self::start_deletion(meta, removed, &completion);
        Some((completion, undo))
    }

    /// Lists what `removed` took under the deletion's `completion` and returns its undo.
    fn start_deletion(meta: &mut Meta, removed: Removed, completion: &Completion) -> Undo {
        let queues: Vec<_> = removed
            .queues
            .iter()
            .map(|q| (q.kind(), q.def().clone(), QueueArgs::clone(&q.args())))
            .collect();
        let keys: Vec<Pending> = queues
            .iter()
            .map(|(_, def, _)| Pending::Queue(def.name.clone()))
            .chain(
                removed
                    .exchanges
                    .iter()
                    .map(|def| Pending::Exchange(def.name.clone())),
            )
            .chain(
                removed
                    .bindings
                    .iter()
                    .map(|b| Pending::Binding(BindingKey::of(b))),
            )
            .collect();
        let mut prior = HashMap::new();
        for key in &keys {
            if let Some(before) = meta.pending.insert(key.clone(), completion.clone()) {
                prior.insert(key.clone(), before);
            }
        }
        Undo {
            queues,
            exchanges: removed.exchanges,
            bindings: removed.bindings,
            keys,
            prior,
        }
    }

    /// Waits for the deletion's `completion` (in a task of its own: it completes even when
    /// the client goes away); rolls `undo` back when the store could not write it.
    pub(super) async fn finish_deletion(
        &self,
        completion: Completion,
        undo: Undo,
    ) -> Result<(), BrokerError> {
        self.finish_detached(|this| async move {
            let result = completion.clone().wait().await;
            let mut meta = this.meta.lock();
            for key in &undo.keys {
                Self::settle(&mut meta, key, &completion);
            }
            if result.is_err() {
                this.restore(&mut meta, undo);
            }
            result
        })
        .await
    }

    /// Puts back what a failed deletion took, where nothing took its place meanwhile.
    fn restore(&self, meta: &mut Meta, undo: Undo) {
        let durable = |key: &Pending| undo.prior.get(key).is_none_or(Completion::succeeded);
        let mut restored = 0usize;
        for (kind, def, args) in undo.queues {
            let key = Pending::Queue(def.name.clone());
            // An exclusive queue is never on disk, and its owner may be gone by now.
            let exclusive = def.exclusive_owner.is_some();
            if exclusive || meta.queues.contains_key(&def.name) || !durable(&key) {
                continue;
            }
            // The policy may have changed meanwhile; the arguments it had are the fallback.
            let args = self.effective_args(&def).unwrap_or(args);
            let handle = self.spawn_queue(kind, def, args, None, false);
            meta.queues.insert(handle.name().clone(), handle);
            restored += 1;
        }
        for def in undo.exchanges {
            let key = Pending::Exchange(def.name.clone());
            if meta.exchanges.contains_key(&def.name) || !durable(&key) {
                continue;
            }
            meta.exchanges.insert(def.name.clone(), def);
            restored += 1;
        }
        let mut lost = Vec::new();
        for binding in undo.bindings {
            if meta.bindings.contains(&binding) {
                continue;
            }
            let key = Pending::Binding(BindingKey::of(&binding));
            if ends_exist(meta, &binding) && durable(&key) {
                meta.bindings.insert(binding);
                restored += 1;
            } else {
                lost.push(VHostChange::DeleteBinding { binding });
            }
        }
        // Rare (the disk failed): one full rebuild is simpler than a change per object.
        self.publish_full_snapshot(meta);
        if !lost.is_empty() {
            drop(self.submit(lost)); // the store logs a failure; nobody waits for it
        }
        tracing::warn!(
            vhost = %self.name,
            restored,
            "a deletion could not be written to the metadata store: rolled back"
        );
    }

    /// A pending deletion of `key` (the object is gone from memory and the deletion's end
    /// has not run yet): a declaration or binding of it waits for this, then starts again.
    pub(super) fn deleting(meta: &Meta, key: &Pending) -> Option<Completion> {
        let present = match key {
            Pending::Queue(name) => meta.queues.contains_key(name),
            Pending::Exchange(name) => meta.exchanges.contains_key(name),
            Pending::Binding(_) => false, // the caller looked the binding up
        };
        meta.pending.get(key).filter(|_| !present).cloned()
    }
}

fn ends_exist(meta: &Meta, binding: &Binding) -> bool {
    let destination = match &binding.destination {
        Destination::Queue(name) => meta.queues.contains_key(name),
        Destination::Exchange(name) => meta.exchanges.contains_key(name),
    };
    destination && meta.exchanges.contains_key(&binding.source)
}

/// Waits for a deletion of what a declaration or binding names (`what`), then lets the
/// deletion's end run (it takes the vhost's lock once the store answered) before the caller
/// starts again.
pub(super) async fn after_deletion(completion: Completion, what: &str) {
    if completion.wait().await.is_err() {
        tracing::debug!(what, "a deletion failed meanwhile; starting again");
    }
    tokio::task::yield_now().await;
}
