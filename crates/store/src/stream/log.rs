//! The writer of one stream log.

use std::sync::Arc;

use bytes::Bytes;

use super::{not_yet, Appended, Entry, LogView, Retention, StreamLogConfig, StreamSync};
use crate::error::StoreError;
use crate::io::Io;

/// The one writer of a stream; Send, not Clone.
pub struct StreamLog {
    view: LogView,
}

impl StreamLog {
    /// Opens (creating when missing) and recovers: a torn or CRC-failing tail is cut, never
    /// served.
    pub fn open(
        _io: Arc<dyn Io>,
        _config: StreamLogConfig,
        _sync: StreamSync,
    ) -> Result<StreamLog, StoreError> {
        Err(not_yet("open a log"))
    }

    /// Writes one user chunk of `entries` with `timestamp_ms`; `writers` are the
    /// (producer reference, last publishing id) pairs this chunk advances (dedup state, kept
    /// in the log so it survives restarts). `on_durable` runs once the chunk is durable:
    /// right after the write without fsync, after the group commit's fsync with it (false =
    /// failed).
    pub fn append(
        &mut self,
        _entries: &[Entry],
        _timestamp_ms: i64,
        _writers: &[(Bytes, u64)],
        _on_durable: Box<dyn FnOnce(bool) + Send>,
    ) -> Result<Appended, StoreError> {
        Err(not_yet("append"))
    }

    /// A chunk exactly as another log wrote it (replication, later issues).
    pub fn append_raw(&mut self, _chunk: &[u8]) -> Result<Appended, StoreError> {
        Err(not_yet("append a raw chunk"))
    }

    /// Server-side consumer offset tracking (StoreOffset), kept in the log.
    pub fn store_offset(&mut self, _reference: &str, _offset: u64) -> Result<(), StoreError> {
        Err(not_yet("store an offset"))
    }

    pub fn tracked_offset(&self, _reference: &str) -> Option<u64> {
        None
    }

    /// Last publishing id of a producer reference (dedup; QueryPublisherSequence).
    pub fn writer_sequence(&self, _reference: &[u8]) -> Option<u64> {
        None
    }

    pub fn truncate(&mut self, _next_offset: u64) -> Result<(), StoreError> {
        Err(not_yet("truncate"))
    }

    pub fn set_retention(&mut self, _retention: Retention) {}

    /// Deletes whole segments beyond retention (never the newest); returns how many.
    pub fn apply_retention(&mut self, _now_ms: i64) -> Result<u32, StoreError> {
        Err(not_yet("apply retention"))
    }

    pub fn view(&self) -> LogView {
        self.view.clone()
    }

    /// Removes every file of the stream (queue deleted).
    pub fn delete(self) -> Result<(), StoreError> {
        Err(not_yet("delete"))
    }
}
