//! The metadata store: where durable definitions (exchanges, queues, bindings, and the
//! broker-wide users, vhosts, permissions, policies and limits) are made to last.
//!
//! A change is handed to the store with `submit`, which never waits for I/O and returns a
//! `Completion`; the caller applies the change in memory and answers its client (declare-ok,
//! bind-ok, 204) only once the completion says the change is durable. Changes are made
//! durable in the order they were submitted. A change that failed leaves the store as if it
//! was never submitted, so the caller rolls its in-memory state back and answers with an
//! error.
//!
//! Today's store is `file::FileStore`: the definitions files written by one writer thread in
//! batches (one fsync for every change waiting). A replicated store (Raft) implements the same
//! trait and completes a change once a majority committed it.

pub mod file;
mod image;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::access::format::Definitions;
use crate::binding::Binding;
use crate::definitions::{QueueRecord, VHostDefinitions};
use crate::error::BrokerError;
use crate::exchange::ExchangeDef;

pub use image::VHostImage;

/// One change to a vhost's durable exchanges, queues and bindings. Deleting a queue or an
/// exchange deletes the bindings that lead to or from it, as in memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum VHostChange {
    PutExchange { exchange: ExchangeDef },
    DeleteExchange { name: Arc<str> },
    PutQueue { queue: QueueRecord },
    DeleteQueue { name: Arc<str> },
    PutBinding { binding: Binding },
    DeleteBinding { binding: Binding },
}

/// A change the store makes durable.
#[derive(Debug, Clone)]
pub enum Change {
    VHost {
        vhost: Arc<str>,
        change: VHostChange,
    },
    /// Forgets everything durable of a vhost (it was deleted, or is created afresh).
    DropVHost { vhost: Arc<str> },
    /// The broker-wide definitions, whole (they are small and change rarely).
    Access { definitions: Arc<Definitions> },
}

/// The metadata store's interface. `submit` must not block on I/O: it is called with a
/// vhost's lock held, which is what keeps the store's order the order of the changes.
pub trait MetadataStore: Send + Sync {
    /// A vhost's durable definitions as last made durable; `None` when it has none.
    fn load_vhost(&self, vhost: &str) -> std::io::Result<Option<VHostDefinitions>>;

    /// The broker-wide definitions; `None` on first start.
    fn load_access(&self) -> std::io::Result<Option<Definitions>>;

    /// Writes the broker-wide definitions at once (first start only, before any `submit`).
    fn init_access(&self, definitions: &Definitions) -> std::io::Result<()>;

    /// Queues `changes` to be made durable after every change submitted before them.
    fn submit(&self, changes: Vec<Change>) -> Completion;
}

type Outcome = Option<Result<(), Arc<str>>>;

/// Resolves once a submitted change is durable, or failed. Cloneable: a client that finds an
/// entity whose declaration is still on its way to disk waits for the same completion.
#[derive(Debug, Clone)]
pub struct Completion(watch::Receiver<Outcome>);

/// The store's side of a `Completion`.
#[derive(Debug)]
pub struct Completer(watch::Sender<Outcome>);

/// A completion and the completer that resolves it.
pub fn completion() -> (Completer, Completion) {
    let (sender, receiver) = watch::channel(None);
    (Completer(sender), Completion(receiver))
}

impl Completer {
    /// Resolves the completion; `Err` carries the text the client is answered with.
    pub fn complete(self, result: Result<(), Arc<str>>) {
        // Nobody waiting (a change made without an answer, as an auto-delete) is fine.
        let _ = self.0.send(Some(result));
    }
}

impl Completion {
    /// Waits until the change is durable; an error names what could not be written.
    pub async fn wait(mut self) -> Result<(), BrokerError> {
        let outcome = match self.0.wait_for(Option::is_some).await {
            Ok(outcome) => outcome.clone(),
            Err(_) => Some(Err(Arc::from(
                "the metadata store stopped before the change was written; it is not durable",
            ))),
        };
        match outcome {
            Some(Ok(())) => Ok(()),
            Some(Err(text)) => Err(BrokerError::internal(text.to_string())),
            None => unreachable!("invariant: wait_for returns a resolved outcome"),
        }
    }

    /// Whether the store answered, and the change is durable: `false` while it has not
    /// answered or when it failed.
    pub fn succeeded(&self) -> bool {
        matches!(*self.0.borrow(), Some(Ok(())))
    }

    /// Whether both wait for the same change.
    pub fn same(&self, other: &Completion) -> bool {
        self.0.same_channel(&other.0)
    }
}
