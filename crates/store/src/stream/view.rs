//! The readers' side of a stream log: what the writer publishes after each append (the
//! committed end, with release ordering, after the chunk and its index record are written)
//! and the lookups a reader starts from.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::reader::LogReader;
use super::segment::Segment;
use crate::error::StoreError;

/// "No chunk" in an atomic offset.
pub(crate) const NONE: u64 = u64::MAX;

/// What the writer shares with readers.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Oldest first; the last one is the active segment.
    pub segments: RwLock<Vec<Arc<Segment>>>,
    /// The committed end: every chunk below it is written and indexed.
    pub next_offset: AtomicU64,
    pub first_offset: AtomicU64,
    /// First offset of the last user chunk, or [`NONE`].
    pub last_chunk: AtomicU64,
    /// Chunks in the log (every type).
    pub chunks: AtomicU64,
    /// Bumped when chunks go away (retention, truncation): readers look themselves up again.
    pub generation: AtomicU64,
}

impl Shared {
    pub fn segments(&self) -> Vec<Arc<Segment>> {
        self.segments.read().clone()
    }

    /// The segment that holds `offset`'s chunk (the last one starting at or before it).
    pub fn segment_for(&self, offset: u64) -> Option<(usize, Arc<Segment>)> {
        let segments = self.segments.read();
        let at = segments
            .partition_point(|segment| segment.first_offset <= offset)
            .checked_sub(1)?;
        Some((at, segments[at].clone()))
    }
}

/// Readers' side, cheap to clone, Send + Sync: any task may read committed chunks.
#[derive(Clone, Debug)]
pub struct LogView {
    pub(crate) shared: Arc<Shared>,
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
        self.shared.first_offset.load(Ordering::Acquire)
    }

    /// Offset the next record will get (committed end).
    pub fn next_offset(&self) -> u64 {
        self.shared.next_offset.load(Ordering::Acquire)
    }

    /// First offset of the last committed user chunk.
    pub fn last_chunk_offset(&self) -> Option<u64> {
        Some(self.shared.last_chunk.load(Ordering::Acquire)).filter(|offset| *offset != NONE)
    }

    /// The chunk offset a reader from `start` begins at: `first`, the last user chunk (or the
    /// end when there is none), the end, the chunk holding an offset (clamped to the log), or
    /// the first chunk whose timestamp is at or after the given one (the end when none is).
    /// A lookup that fails on disk starts at the end, and is logged.
    pub fn resolve(&self, start: ReadStart) -> u64 {
        match self.try_resolve(start) {
            Ok(offset) => offset,
            Err(error) => {
                tracing::error!(
                    "stream log: cannot resolve {start:?}: {error}; reading from the end"
                );
                self.next_offset()
            }
        }
    }

    fn try_resolve(&self, start: ReadStart) -> Result<u64, StoreError> {
        let (first, next) = (self.first_offset(), self.next_offset());
        Ok(match start {
            ReadStart::First => first,
            ReadStart::Next => next,
            ReadStart::Last => self.last_chunk_offset().unwrap_or(next),
            ReadStart::Offset(offset) if offset <= first => first,
            ReadStart::Offset(offset) if offset >= next => next,
            ReadStart::Offset(offset) => self.chunk_holding(offset)?.unwrap_or(next),
            ReadStart::Timestamp(timestamp_ms) => self.chunk_at_time(timestamp_ms)?,
        })
    }

    /// First offset of the chunk that holds `offset`.
    fn chunk_holding(&self, offset: u64) -> Result<Option<u64>, StoreError> {
        let Some((_, segment)) = self.shared.segment_for(offset) else {
            return Ok(None);
        };
        let at = segment.partition_point(|record| record.first_offset <= offset)?;
        let Some(at) = at.checked_sub(1) else {
            return Ok(Some(segment.first_offset));
        };
        Ok(segment.record(at)?.map(|record| record.first_offset))
    }

    /// First offset of the first chunk stamped at or after `timestamp_ms`, or the end.
    fn chunk_at_time(&self, timestamp_ms: i64) -> Result<u64, StoreError> {
        let next = self.next_offset();
        let segments = self.shared.segments();
        // Skip the segments whose next segment starts at or before the time: timestamps grow
        // along the log (a writer stamps chunks with its clock).
        let mut at = 0;
        while at + 1 < segments.len() {
            let Some(first) = segments[at + 1].record(0)? else {
                break;
            };
            if first.timestamp_ms > timestamp_ms {
                break;
            }
            at += 1;
        }
        for segment in &segments[at..] {
            let found = segment.partition_point(|record| record.timestamp_ms < timestamp_ms)?;
            if let Some(record) = segment.record(found)? {
                return Ok(record.first_offset.min(next));
            }
        }
        Ok(next)
    }

    /// A reader whose first chunk is the one `start` resolves to.
    pub fn reader(&self, start: ReadStart) -> Result<LogReader, StoreError> {
        let position = self.try_resolve(start)?;
        Ok(LogReader::new(self.shared.clone(), position))
    }

    pub fn stats(&self) -> LogStats {
        let segments = self.shared.segments();
        let first_timestamp_ms = segments
            .first()
            .and_then(|segment| segment.record(0).ok().flatten())
            .map(|record| record.timestamp_ms);
        LogStats {
            segments: u32::try_from(segments.len()).unwrap_or(u32::MAX),
            bytes: segments
                .iter()
                .map(|segment| segment.bytes.load(Ordering::Acquire))
                .sum(),
            first_offset: self.first_offset(),
            next_offset: self.next_offset(),
            chunks: self.shared.chunks.load(Ordering::Acquire),
            first_timestamp_ms,
        }
    }
}
