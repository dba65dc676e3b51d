//! One consumer's walk along a stream log: index records in blocks (one `pread` of many
//! records from a sealed segment's index, or a copy from the active segment's memory), then
//! each user chunk with one `pread` of exactly header + Bloom + data.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::chunk::CHUNK_USER;
use super::segment::{IndexRecord, Segment};
use super::view::Shared;
use super::Chunk;
use crate::error::StoreError;

/// Index records a reader fetches at once (64 KiB of a sealed index).
const RECORDS_PER_READ: usize = 1365;

/// One consumer's position in the log; Send.
#[derive(Debug)]
pub struct LogReader {
    shared: Arc<Shared>,
    /// First offset of the next chunk to read (or the end the reader waits at).
    position: u64,
    /// Where the reader is: the segment, and the index of its next record there.
    segment: Option<Arc<Segment>>,
    next_record: usize,
    /// Records fetched ahead: `buffer[0]` is record `buffer_start` of `segment`.
    buffer: Vec<IndexRecord>,
    buffer_start: usize,
    generation: u64,
}

impl LogReader {
    pub(crate) fn new(shared: Arc<Shared>, position: u64) -> LogReader {
        LogReader {
            shared,
            position,
            segment: None,
            next_record: 0,
            buffer: Vec::new(),
            buffer_start: 0,
            generation: 0,
        }
    }

    /// The next committed user chunk at or after the reader's position, read with one pread:
    /// header + Bloom bytes + data, without the trailer: exactly the OsirisChunk of a stream
    /// protocol Deliver frame. `None` when caught up. A reader behind the log's first offset
    /// (retention) moves to the first chunk. Tracking chunks are skipped.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>, StoreError> {
        // Chunks went away (retention, truncation): find the position again first, it may be
        // behind the first offset or past a truncated end.
        let generation = self.shared.generation.load(Ordering::Acquire);
        if generation != self.generation {
            if let Some(end) = self.shared.cut_since(self.generation) {
                self.position = self.position.min(end);
            }
            self.generation = generation;
            self.locate()?;
        }
        loop {
            let committed = self.shared.next_offset.load(Ordering::Acquire);
            if self.position >= committed {
                return Ok(None);
            }
            let Some(record) = self.next_record()? else {
                return Ok(None);
            };
            if record.first_offset >= committed {
                return Ok(None); // written, not yet committed (cannot happen today)
            }
            self.next_record += 1;
            self.position = record.next_offset();
            if record.chunk_type == CHUNK_USER {
                return self.read_chunk(&record).map(Some);
            }
        }
    }

    /// First offset of the next chunk the reader reads (or the end it waits at).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The index record of the next chunk, moving to the next segment at the end of one.
    fn next_record(&mut self) -> Result<Option<IndexRecord>, StoreError> {
        if self.segment.is_none() {
            self.locate()?;
        }
        loop {
            let Some(segment) = self.segment.clone() else {
                return Ok(None);
            };
            let at = self.next_record;
            let buffered = at
                .checked_sub(self.buffer_start)
                .and_then(|index| self.buffer.get(index));
            if let Some(record) = buffered {
                return Ok(Some(*record));
            }
            self.buffer.clear();
            self.buffer_start = at;
            segment.read_records(at, RECORDS_PER_READ, &mut self.buffer)?;
            if let Some(record) = self.buffer.first() {
                return Ok(Some(*record));
            }
            // The end of this segment: on to the next one, if the writer started it.
            let next = self
                .shared
                .segments
                .read()
                .iter()
                .find(|later| later.first_offset > segment.first_offset)
                .cloned();
            match next {
                Some(next) => self.enter(next, 0),
                None => return Ok(None),
            }
        }
    }

    /// Finds the reader's chunk again (first read, or chunks went away under it); a reader
    /// behind the first offset moves to the first chunk.
    fn locate(&mut self) -> Result<(), StoreError> {
        let first = self.shared.first_offset.load(Ordering::Acquire);
        let next = self.shared.next_offset.load(Ordering::Acquire);
        self.position = self.position.max(first).min(next);
        let Some((_, segment)) = self.shared.segment_for(self.position) else {
            self.segment = None;
            return Ok(());
        };
        let position = self.position;
        let at = segment.partition_point(|record| record.next_offset() <= position)?;
        self.enter(segment, at);
        Ok(())
    }

    fn enter(&mut self, segment: Arc<Segment>, record: usize) {
        self.segment = Some(segment);
        self.next_record = record;
        self.buffer.clear();
        self.buffer_start = record;
    }

    /// Reads the chunk `record` points at, with one `pread`, and checks its header.
    fn read_chunk(&self, record: &IndexRecord) -> Result<Chunk, StoreError> {
        let segment = self
            .segment
            .as_ref()
            .expect("invariant: a record was read from the reader's segment");
        let (header, chunk) = segment.read_chunk(record)?;
        if header.first_offset != record.first_offset
            || header.deliver_bytes() != chunk.bytes.len() as u64
        {
            return Err(StoreError::Corrupt {
                file: segment.path().to_path_buf(),
                offset: record.position,
                what: format!(
                    "the chunk there is {} ({} bytes), the index says {} ({} bytes)",
                    header.first_offset,
                    header.deliver_bytes(),
                    record.first_offset,
                    record.size
                ),
            });
        }
        Ok(chunk)
    }
}
