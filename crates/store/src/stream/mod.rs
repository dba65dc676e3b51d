//! The stream log: one append-only log per stream queue, in osiris's on-disk chunk format,
//! so that a chunk read from disk goes to a stream-protocol consumer as it lies.
//!
//! (The byte layout is documented in full once the format is written.)

mod log;
mod sync;
mod view;

use std::path::PathBuf;

use bytes::Bytes;

pub use log::StreamLog;
pub use sync::StreamSync;
pub use view::{Chunk, LogReader, LogStats, LogView, ReadStart};

/// Where a stream's log lives and when its segments roll and are deleted.
#[derive(Debug, Clone)]
pub struct StreamLogConfig {
    /// One directory per stream.
    pub dir: PathBuf,
    /// `x-stream-max-segment-size-bytes` (default 500_000_000).
    pub segment_bytes_max: u64,
    /// osiris's `max_segment_size_chunks` (default 256_000).
    pub segment_chunks_max: u32,
    pub retention: Retention,
}

/// What the log keeps: whole segments beyond either limit are deleted (never the newest).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    pub max_bytes: Option<u64>,
    pub max_age_ms: Option<u64>,
}

/// One entry of a chunk: a simple entry (one record) or a sub-batch entry (as a client sent it).
#[derive(Debug, Clone)]
pub enum Entry {
    Simple(Bytes),
    SubBatch {
        compression: u8,
        records: u16,
        uncompressed_len: u32,
        data: Bytes,
    },
}

impl Entry {
    /// How many records (offsets) the entry takes.
    pub fn records(&self) -> u32 {
        match self {
            Entry::Simple(_) => 1,
            Entry::SubBatch { records, .. } => u32::from(*records),
        }
    }
}

/// What one append wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub first_offset: u64,
    pub records: u32,
    pub bytes: u64,
}

/// The refusal of a call not written yet (removed as the log is built).
fn not_yet(what: &str) -> crate::StoreError {
    crate::StoreError::Refused {
        what: format!("the stream log cannot {what} yet"),
    }
}
