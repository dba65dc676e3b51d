//! One segment of a stream log: a segment file of chunks and its index file, named by the
//! first offset of their first chunk (20 digits, as osiris: `00000000000000000000.segment`,
//! `00000000000000000000.index`).
//!
//! ```text
//! segment file: "OSIL" | version u32 = 1 | chunks (see chunk.rs), back to back
//! index file:   "WIDX" | version u32 = 1 | one 48-byte record per chunk, in order:
//!   0  8  chunk first offset        24  8  position of the chunk in the segment file
//!   8  8  timestamp (ms, signed)    32  4  header + Bloom + data bytes (a Deliver's chunk)
//!  16  8  epoch                     36  4  trailer bytes
//!                                   40  4  records (offsets the chunk takes)
//!                                   44  1  chunk type; 45..48 zero
//! ```
//!
//! The index is Warren's own (osiris's has no sizes): with the size in the record a reader
//! reads a chunk with one `pread`, and offset and timestamp lookups are binary searches over
//! fixed-size records. The active (last) segment keeps its records in memory too; a sealed
//! segment is searched on disk.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::chunk::{be_u32, be_u64, Header};
use super::Chunk;
use crate::error::StoreError;
use crate::io::{read_exact_at, LogFile};

pub(crate) const SEGMENT_MAGIC: &[u8; 8] = b"OSIL\0\0\0\x01";
pub(crate) const INDEX_MAGIC: &[u8; 8] = b"WIDX\0\0\0\x01";
/// Bytes of a segment or index file's header.
pub(crate) const FILE_HEADER_BYTES: u64 = 8;
pub(crate) const RECORD_BYTES: usize = 48;

/// Where one chunk is, and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexRecord {
    pub first_offset: u64,
    pub timestamp_ms: i64,
    pub epoch: u64,
    pub position: u64,
    /// Header + Bloom + data.
    pub size: u32,
    pub trailer: u32,
    pub records: u32,
    pub chunk_type: u8,
}

impl IndexRecord {
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut out = [0u8; RECORD_BYTES];
        out[0..8].copy_from_slice(&self.first_offset.to_be_bytes());
        out[8..16].copy_from_slice(&self.timestamp_ms.to_be_bytes());
        out[16..24].copy_from_slice(&self.epoch.to_be_bytes());
        out[24..32].copy_from_slice(&self.position.to_be_bytes());
        out[32..36].copy_from_slice(&self.size.to_be_bytes());
        out[36..40].copy_from_slice(&self.trailer.to_be_bytes());
        out[40..44].copy_from_slice(&self.records.to_be_bytes());
        out[44] = self.chunk_type;
        out
    }

    /// `bytes` holds at least one record.
    pub fn decode(bytes: &[u8]) -> IndexRecord {
        IndexRecord {
            first_offset: be_u64(bytes, 0),
            timestamp_ms: be_u64(bytes, 8) as i64,
            epoch: be_u64(bytes, 16),
            position: be_u64(bytes, 24),
            size: be_u32(bytes, 32),
            trailer: be_u32(bytes, 36),
            records: be_u32(bytes, 40),
            chunk_type: bytes[44],
        }
    }

    /// The offset after the chunk.
    pub fn next_offset(&self) -> u64 {
        self.first_offset + u64::from(self.records)
    }

    /// The segment-file position after the chunk.
    pub fn end(&self) -> u64 {
        self.position + u64::from(self.size) + u64::from(self.trailer)
    }
}

/// `<dir>/<first offset, 20 digits>.<ext>`.
pub(crate) fn file_path(dir: &Path, first_offset: u64, ext: &str) -> PathBuf {
    dir.join(format!("{first_offset:020}.{ext}"))
}

/// A segment, shared by the writer and every reader (readers keep reading a segment that
/// retention deleted: they hold its open files).
#[derive(Debug)]
pub(crate) struct Segment {
    pub first_offset: u64,
    pub file: Arc<dyn LogFile>,
    pub index: Arc<dyn LogFile>,
    /// Key of the segment file in the group commit (unique in the process).
    pub file_key: u64,
    /// The active segment's records; `None` once sealed (then read from the index file).
    memory: RwLock<Option<Vec<IndexRecord>>>,
    /// Records written to the index (visible to readers: gate them by the committed end).
    count: AtomicUsize,
    /// Bytes of the segment file.
    pub bytes: AtomicU64,
}

/// Keys of files in the group commit, unique in the process (it is shared by every log).
static NEXT_FILE_KEY: AtomicU64 = AtomicU64::new(1 << 48);

pub(crate) fn file_key() -> u64 {
    NEXT_FILE_KEY.fetch_add(1, Ordering::Relaxed)
}

impl Segment {
    /// A segment with `count` records in its index file and `bytes` in its segment file;
    /// `memory` is the records when it is the active one.
    pub fn new(
        first_offset: u64,
        file: Arc<dyn LogFile>,
        index: Arc<dyn LogFile>,
        memory: Option<Vec<IndexRecord>>,
        count: usize,
        bytes: u64,
    ) -> Segment {
        assert!(
            memory.as_ref().is_none_or(|records| records.len() == count),
            "invariant: an active segment's memory holds every record"
        );
        Segment {
            first_offset,
            file,
            index,
            file_key: file_key(),
            memory: RwLock::new(memory),
            count: AtomicUsize::new(count),
            bytes: AtomicU64::new(bytes),
        }
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Adds the record of a chunk just written (writer only).
    pub fn push(&self, record: IndexRecord, bytes: u64) {
        let mut memory = self.memory.write();
        let records = memory
            .as_mut()
            .expect("invariant: only the active segment is written");
        debug_assert!(records
            .last()
            .is_none_or(|last| last.next_offset() == record.first_offset));
        records.push(record);
        self.count.store(records.len(), Ordering::Release);
        self.bytes.store(bytes, Ordering::Release);
    }

    /// Drops every record from `count` on (truncation; writer only).
    pub fn cut(&self, count: usize, bytes: u64) {
        let mut memory = self.memory.write();
        if let Some(records) = memory.as_mut() {
            records.truncate(count);
        }
        self.count.store(count, Ordering::Release);
        self.bytes.store(bytes, Ordering::Release);
    }

    /// Frees the in-memory records once the segment is no longer written.
    pub fn seal(&self) {
        *self.memory.write() = None;
    }

    /// Loads every record into memory (the segment becomes the active one again).
    pub fn activate(&self) -> Result<(), StoreError> {
        let mut records = Vec::with_capacity(self.count());
        self.read_records(0, self.count(), &mut records)?;
        *self.memory.write() = Some(records);
        Ok(())
    }

    /// Appends records `from..from + max` (those that exist) to `out`.
    pub fn read_records(
        &self,
        from: usize,
        max: usize,
        out: &mut Vec<IndexRecord>,
    ) -> Result<(), StoreError> {
        let count = self.count();
        let until = count.min(from.saturating_add(max));
        if from >= until {
            return Ok(());
        }
        if let Some(records) = self.memory.read().as_ref() {
            // `count` was read before the lock: a truncation may have shortened the records.
            let until = until.min(records.len());
            out.extend_from_slice(records.get(from..until).unwrap_or_default());
            return Ok(());
        }
        let mut bytes = vec![0u8; (until - from) * RECORD_BYTES];
        let at = FILE_HEADER_BYTES + (from * RECORD_BYTES) as u64;
        read_exact_at(self.index.as_ref(), &mut bytes, at)?;
        out.extend(bytes.chunks_exact(RECORD_BYTES).map(IndexRecord::decode));
        Ok(())
    }

    pub fn record(&self, at: usize) -> Result<Option<IndexRecord>, StoreError> {
        let mut one = Vec::with_capacity(1);
        self.read_records(at, 1, &mut one)?;
        Ok(one.pop())
    }

    /// The first record index whose record fails `before` (records are in order, so
    /// `before` holds for a prefix): a binary search, in memory or with one `pread` a probe.
    pub fn partition_point(
        &self,
        before: impl Fn(&IndexRecord) -> bool,
    ) -> Result<usize, StoreError> {
        let (mut low, mut high) = (0, self.count());
        if let Some(records) = self.memory.read().as_ref() {
            return Ok(records[..high.min(records.len())].partition_point(before));
        }
        while low < high {
            let middle = low + (high - low) / 2;
            let record = self
                .record(middle)?
                .expect("invariant: a record below count exists");
            if before(&record) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        Ok(low)
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Reads the chunk `record` points at with one `pread` (header, Bloom bytes and data, as
    /// the index sizes it) and decodes its header; readers and recovery both read this way.
    pub fn read_chunk(&self, record: &IndexRecord) -> Result<(Header, Chunk), StoreError> {
        let mut bytes = vec![0u8; record.size as usize];
        read_exact_at(self.file.as_ref(), &mut bytes, record.position)?;
        let header = Header::decode(&bytes).map_err(|what| StoreError::Corrupt {
            file: self.path().to_path_buf(),
            offset: record.position,
            what,
        })?;
        let chunk = Chunk {
            first_offset: header.first_offset,
            num_entries: header.num_entries,
            num_records: header.num_records,
            timestamp_ms: header.timestamp_ms,
            epoch: header.epoch,
            bytes: bytes.into(),
        };
        Ok((header, chunk))
    }
}
