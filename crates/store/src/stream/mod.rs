//! The stream log: one append-only log per stream queue, in osiris's on-disk chunk format,
//! so that a chunk read from disk goes to a stream-protocol consumer as it lies.
//!
//! A stream's directory holds segments, each a segment file of chunks and an index file,
//! named by the first offset of their first chunk:
//!
//! ```text
//! <dir>/00000000000000000000.segment   "OSIL" | 1u32 | chunk | chunk | ...
//! <dir>/00000000000000000000.index     "WIDX" | 1u32 | 48-byte record per chunk
//! <dir>/00000000000000004096.segment   (the next segment starts at offset 4096) ...
//! ```
//!
//! The chunk format (48-byte header, Bloom bytes, entries, trailer) is in `chunk.rs`, the
//! index record in `segment.rs`, the tracking encoding (writer sequences, consumer offsets,
//! in trailers and tracking chunks) in `tracking.rs`. Every chunk takes as many offsets as it
//! has records, tracking chunks included (one each), as in osiris: readers skip tracking
//! chunks, so consumers see gaps there, as with RabbitMQ.
//!
//! One writer ([`StreamLog`]) appends; readers ([`LogView`], [`LogReader`]) on any thread
//! read what the writer published, with no lock on the read path beyond a short read lock
//! of the active segment's in-memory index. Durability goes through [`StreamSync`].

mod chunk;
mod lifecycle;
mod log;
mod reader;
mod recovery;
mod segment;
mod sync;
mod tracking;
mod view;

use std::path::PathBuf;

use bytes::Bytes;

pub use chunk::Chunk;
pub use log::StreamLog;
pub use reader::LogReader;
pub use sync::StreamSync;
pub use tracking::TrackingSnapshot;
pub use view::{LogStats, LogView, ReadStart};

#[cfg(test)]
#[path = "bench_test.rs"]
mod bench_test;
#[cfg(test)]
#[path = "fault_test.rs"]
mod fault_test;
#[cfg(test)]
#[path = "log_test.rs"]
mod log_test;

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
