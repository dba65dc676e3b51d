//! Warren's message store: everything on disk that is not a definition.
//!
//! One log of segment files per node ([`Store`]), shared by every classic queue, with group
//! commit: queue tasks append batches of records with one `write` each, and a sync thread
//! fsyncs once for every batch that arrived while the previous fsync ran, then tells the
//! waiters (publisher confirms). Records carry a CRC-32C, so recovery ([`Recovered`]) detects
//! torn or corrupt records, logs them and reads on. Quorum queues' WAL and the stream log
//! will live beside it in this crate.

mod record;
mod recovery;
mod store;

pub use record::{
    decode as decode_record, queue_id, Location, Record, RecordBatch, RecordError, Waiter,
    FLAG_DURABLE,
};
pub use recovery::{Recovered, RecoveredMessage, RecoveredQueue};
pub use store::{private_dir_all, Store, StoreConfig, StoreStats, DIR_MODE, FILE_MODE};
