//! The readers' side of a stream log.

use std::sync::Arc;

use bytes::Bytes;

use super::not_yet;
use crate::error::StoreError;

/// Readers' side, cheap to clone, Send + Sync: any task may read committed chunks.
#[derive(Clone)]
pub struct LogView {
    _shared: Arc<()>,
}

/// Where a reader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadStart {
    First,
    Last,
    Next,
    Offset(u64),
    Timestamp(i64),
}

/// Figures of a stream log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStats {
    pub segments: u32,
    pub bytes: u64,
    pub first_offset: u64,
    pub next_offset: u64,
    pub chunks: u64,
    pub first_timestamp_ms: Option<i64>,
}

impl LogView {
    /// First offset still in the log.
    pub fn first_offset(&self) -> u64 {
        0
    }

    /// Offset the next record will get (committed end).
    pub fn next_offset(&self) -> u64 {
        0
    }

    /// First offset of the last committed chunk.
    pub fn last_chunk_offset(&self) -> Option<u64> {
        None
    }

    /// The chunk offset a reader from `start` begins at.
    pub fn resolve(&self, _start: ReadStart) -> u64 {
        0
    }

    pub fn reader(&self, _start: ReadStart) -> Result<LogReader, StoreError> {
        Err(not_yet("read"))
    }

    pub fn stats(&self) -> LogStats {
        LogStats {
            segments: 0,
            bytes: 0,
            first_offset: 0,
            next_offset: 0,
            chunks: 0,
            first_timestamp_ms: None,
        }
    }
}

/// One consumer's position in the log; Send.
pub struct LogReader {
    position: u64,
}

impl LogReader {
    /// The next committed user chunk at or after the reader's position, read with one pread:
    /// header + Bloom bytes + data, without the trailer: exactly the OsirisChunk of a stream
    /// protocol Deliver frame. `None` when caught up. A reader behind the log's first offset
    /// (retention) moves to the first chunk. Tracking chunks are skipped.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>, StoreError> {
        Err(not_yet("read a chunk"))
    }

    pub fn position(&self) -> u64 {
        self.position
    }
}

/// One chunk as it lies on disk (header, Bloom bytes, entries; no trailer).
#[derive(Debug, Clone)]
pub struct Chunk {
    pub first_offset: u64,
    pub num_entries: u16,
    pub num_records: u32,
    pub timestamp_ms: i64,
    pub epoch: u64,
    pub bytes: Bytes,
}

impl Chunk {
    /// Each record with its offset: simple entries and uncompressed sub-batch records;
    /// a compressed sub-batch is an Err naming the compression (consumers over AMQP).
    pub fn records(&self) -> impl Iterator<Item = Result<(u64, Bytes), StoreError>> + '_ {
        std::iter::once(Err(not_yet("decode records")))
    }
}
