//! Warren's storage: everything on disk that is not a definition.
//!
//! The pieces every log reuses: [`Io`] (the disk as a small trait, with [`FsIo`] for the
//! real filesystem and, for tests, [`FaultyIo`] that fails on purpose), [`GroupCommit`]
//! (many writers behind one fsync; a failed fsync poisons it) and [`StoreError`] (what
//! went wrong, naming file and offset).
//!
//! The classic message store is built on them: one log of segment files per node
//! ([`Store`]), shared by every classic queue. Queue tasks append batches of records with
//! one `write` each, and the group commit fsyncs once for every batch that arrived while
//! the previous fsync ran, then tells the waiters (publisher confirms). Records carry a
//! CRC-32C, so recovery ([`Recovered`]) detects torn or corrupt records, reports them and
//! reads on. Quorum queues' WAL and the stream log will live beside it in this crate.

mod error;
#[cfg(any(test, feature = "testkit"))]
mod faulty;
mod group_commit;
mod io;
mod record;
mod recovery;
mod store;
mod stream;

pub use error::StoreError;
#[cfg(any(test, feature = "testkit"))]
pub use faulty::FaultyIo;
pub use group_commit::{GroupCommit, GroupConfig, GroupStats, Notify};
pub use io::{
    private_dir_all, read_exact_at, write_all_at, DirEntry, FsIo, Io, LogFile, DIR_MODE, FILE_MODE,
};
pub use record::{
    decode as decode_record, queue_id, Location, Record, RecordBatch, RecordError, Waiter,
    FLAG_DURABLE,
};
pub use recovery::{Recovered, RecoveredMessage, RecoveredQueue};
pub use store::{Store, StoreConfig, StoreStats};
pub use stream::{
    Appended, Chunk, Entry, LogReader, LogStats, LogView, ReadStart, Retention, StreamLog,
    StreamLogConfig, StreamSync, TrackingSnapshot,
};
