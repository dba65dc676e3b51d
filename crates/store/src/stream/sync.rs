//! How a stream's writes are made durable: one group commit shared by every stream log of
//! the broker when fsync is on (many streams' chunks, one fsync per file per group); off, a
//! chunk counts as durable once written, as RabbitMQ's streams do.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::group_commit::{GroupCommit, GroupConfig};

/// The waiter a chunk append hands over: told `true` once durable, `false` when it never
/// will be.
pub(crate) type Waiter = Box<dyn FnOnce(bool) + Send>;

/// Shared by every stream of the broker.
#[derive(Clone, Debug)]
pub struct StreamSync {
    pub(crate) commit: Option<Arc<GroupCommit<Waiter>>>,
}

impl StreamSync {
    /// Starts the group commit's sync threads when `fsync` is on.
    pub fn start(fsync: bool) -> io::Result<StreamSync> {
        if !fsync {
            return Ok(StreamSync { commit: None });
        }
        let commit = GroupCommit::start(GroupConfig {
            name: "stream logs",
            items: "chunks",
            thread_name: "stream-sync",
            threads: 2,
            // A stream writes a chunk per batch of publishes: a few chunks already make a
            // second fsync worth starting beside a running one.
            overlap_min_items: 4,
            report_interval: Duration::from_secs(5),
        })?;
        Ok(StreamSync {
            commit: Some(Arc::new(commit)),
        })
    }

    /// Whether appends wait for an fsync before they count as durable.
    pub fn fsync(&self) -> bool {
        self.commit.is_some()
    }
}
