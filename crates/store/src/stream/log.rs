//! The writer of one stream log: appends chunks to the active segment (one vectored write of
//! header, entry headers and the entries' own bytes, then one index record), rolls segments,
//! keeps the tracking state, applies retention and truncates. It publishes each chunk to
//! readers once both writes returned (see `view.rs`).

use std::io::IoSlice;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::chunk::{
    Header, CHUNK_TRACKING_DELTA, CHUNK_TRACKING_SNAPSHOT, CHUNK_USER, HEADER_BYTES,
    SIMPLE_BYTES_MAX,
};
use super::recovery::{self, index_position};
use super::segment::{IndexRecord, Segment};
use super::sync::Waiter;
use super::tracking::{Tracking, TrackingSnapshot, ID_BYTES_MAX};
use super::view::{Shared, NONE};
use super::{Appended, Entry, LogView, Retention, StreamLogConfig, StreamSync};
use crate::error::StoreError;
use crate::io::{write_all_at, write_all_vectored_at, Io};

/// The epoch of every chunk this writer writes (replication, a later issue, moves it).
const EPOCH: u64 = 1;

/// The one writer of a stream; Send, not Clone.
pub struct StreamLog {
    pub(crate) io: Arc<dyn Io>,
    pub(crate) config: StreamLogConfig,
    pub(crate) sync: StreamSync,
    pub(crate) shared: Arc<Shared>,
    pub(crate) active: Arc<Segment>,
    pub(crate) next_offset: u64,
    pub(crate) tracking: Tracking,
    /// Entry headers of the chunk being written (reused: no allocation per record).
    scratch: Vec<u8>,
    trailer: Vec<u8>,
    /// The first failed write: the segment may end in a partial chunk, so nothing more is
    /// written until the log is opened again (recovery cuts it).
    poisoned: Option<String>,
    /// Chunks written since the last tracking snapshot, and how many call for one
    /// ([`SNAPSHOT_INTERVAL_CHUNKS`]; tests set fewer).
    pub(crate) chunks_since_snapshot: u32,
    pub(crate) snapshot_interval_chunks: u32,
}

/// A tracking snapshot chunk follows every this many chunks (when there is tracking state),
/// besides the one each segment starts with: open then reads the trailers of at most this
/// many chunks after the last snapshot, not of a whole segment (256,000 chunks).
pub(crate) const SNAPSHOT_INTERVAL_CHUNKS: u32 = 4096;

impl StreamLog {
    /// Opens (creating when missing) and recovers: a torn or CRC-failing tail is cut, never
    /// served.
    pub fn open(
        io: Arc<dyn Io>,
        config: StreamLogConfig,
        sync: StreamSync,
    ) -> Result<StreamLog, StoreError> {
        StreamLog::open_checking(io, config, sync, recovery::TAIL_CHECK_BYTES)
    }

    /// [`StreamLog::open`], checking the last `tail_check_bytes` of the active segment.
    pub(crate) fn open_checking(
        io: Arc<dyn Io>,
        config: StreamLogConfig,
        sync: StreamSync,
        tail_check_bytes: u64,
    ) -> Result<StreamLog, StoreError> {
        let recovered = recovery::recover(io.as_ref(), &config.dir, tail_check_bytes)?;
        let first_offset = recovered.segments[0].first_offset;
        let active = recovered
            .segments
            .last()
            .cloned()
            .expect("invariant: recovery returns a segment");
        let shared = Arc::new(Shared {
            segments: parking_lot::RwLock::new(recovered.segments),
            next_offset: recovered.next_offset.into(),
            first_offset: first_offset.into(),
            last_chunk: recovered.last_chunk.unwrap_or(NONE).into(),
            chunks: recovered.chunks.into(),
            generation: 0.into(),
            truncations: parking_lot::Mutex::new(Vec::new()),
        });
        tracing::debug!(
            "stream log {}: open, offsets {first_offset}..{}",
            config.dir.display(),
            recovered.next_offset
        );
        Ok(StreamLog {
            io,
            config,
            sync,
            shared,
            active,
            next_offset: recovered.next_offset,
            tracking: recovered.tracking,
            scratch: Vec::new(),
            trailer: Vec::new(),
            poisoned: None,
            chunks_since_snapshot: 0,
            snapshot_interval_chunks: SNAPSHOT_INTERVAL_CHUNKS,
        })
    }

    /// Writes one user chunk of `entries` with `timestamp_ms`; `writers` are the
    /// (producer reference, last publishing id) pairs this chunk advances (dedup state, kept
    /// in the log so it survives restarts). `on_durable` runs once the chunk is durable:
    /// right after the write without fsync, after the group commit's fsync with it (false =
    /// failed). On `Err` it was told `false` already.
    pub fn append(
        &mut self,
        entries: &[Entry],
        timestamp_ms: i64,
        writers: &[(Bytes, u64)],
        on_durable: Box<dyn FnOnce(bool) + Send>,
    ) -> Result<Appended, StoreError> {
        match self.append_user(entries, timestamp_ms, writers) {
            Ok((appended, record)) => {
                self.durable(&record, on_durable);
                self.chunks_since_snapshot += 1;
                if self.chunks_since_snapshot >= self.snapshot_interval_chunks {
                    // The chunk is written and published: a failure here poisons the log for
                    // the next call, it does not undo this one.
                    if let Err(error) = self.write_snapshot(timestamp_ms) {
                        tracing::warn!("stream log: tracking snapshot: {error}");
                    }
                }
                Ok(appended)
            }
            Err(error) => {
                on_durable(false);
                Err(error)
            }
        }
    }

    fn append_user(
        &mut self,
        entries: &[Entry],
        timestamp_ms: i64,
        writers: &[(Bytes, u64)],
    ) -> Result<(Appended, IndexRecord), StoreError> {
        self.check()?;
        if let Some((id, _)) = writers.iter().find(|(id, _)| id.len() > ID_BYTES_MAX) {
            return Err(StoreError::Refused {
                what: format!(
                    "a publisher reference of {} bytes is too long for the stream log \
                     (at most {ID_BYTES_MAX}): use a shorter reference",
                    id.len()
                ),
            });
        }
        self.roll_if_full(timestamp_ms, true)?;
        let mut trailer = std::mem::take(&mut self.trailer);
        trailer.clear();
        Tracking::encode_trailer(writers, &mut trailer);
        let written = self.write_chunk(CHUNK_USER, entries, timestamp_ms, &trailer);
        self.trailer = trailer;
        let record = written?;
        for (id, sequence) in writers {
            let entry = self.tracking.sequences.entry(id.clone()).or_default();
            *entry = (record.first_offset, *sequence);
        }
        let appended = Appended {
            first_offset: record.first_offset,
            records: record.records,
            bytes: u64::from(record.size) + u64::from(record.trailer),
        };
        Ok((appended, record))
    }

    /// A chunk exactly as another log wrote it (replication, later issues): checked (header,
    /// CRC, its first offset is this log's end), written as it is, its trailer applied.
    pub fn append_raw(&mut self, chunk: &[u8]) -> Result<Appended, StoreError> {
        self.check()?;
        let header = super::chunk::validate(chunk).map_err(|what| StoreError::Refused {
            what: format!(
                "a raw chunk for {} is not valid: {what}",
                self.config.dir.display()
            ),
        })?;
        if header.first_offset != self.next_offset {
            return Err(StoreError::Refused {
                what: format!(
                    "a raw chunk starts at offset {} but the log {} ends at {}: append chunks \
                     in order",
                    header.first_offset,
                    self.config.dir.display(),
                    self.next_offset
                ),
            });
        }
        // No snapshot of our own: the other log's chunks carry its snapshots.
        self.roll_if_full(header.timestamp_ms, false)?;
        let total = header.total_bytes() as usize;
        let record = self.write_parts(&header, &mut [IoSlice::new(&chunk[..total])])?;
        let trailer = &chunk[header.deliver_bytes() as usize..total];
        self.apply_tracking(&header, chunk, trailer)?;
        self.publish(&record);
        self.mark_dirty(&record);
        Ok(Appended {
            first_offset: record.first_offset,
            records: record.records,
            bytes: total as u64,
        })
    }

    /// Server-side consumer offset tracking (StoreOffset), kept in the log as a tracking
    /// delta chunk.
    pub fn store_offset(&mut self, reference: &str, offset: u64) -> Result<(), StoreError> {
        self.check()?;
        if reference.len() > ID_BYTES_MAX || reference.is_empty() {
            return Err(StoreError::Refused {
                what: format!(
                    "a consumer reference must be 1 to {ID_BYTES_MAX} bytes, not {}",
                    reference.len()
                ),
            });
        }
        let now = now_ms();
        self.roll_if_full(now, true)?;
        let mut body = Vec::with_capacity(reference.len() + 10);
        Tracking::encode_offset(reference.as_bytes(), offset, &mut body);
        let entries = [Entry::Simple(body.into())];
        let record = self.write_chunk(CHUNK_TRACKING_DELTA, &entries, now, &[])?;
        self.tracking
            .offsets
            .insert(Bytes::copy_from_slice(reference.as_bytes()), offset);
        self.publish(&record);
        self.mark_dirty(&record);
        Ok(())
    }

    pub fn tracked_offset(&self, reference: &str) -> Option<u64> {
        self.tracking.offsets.get(reference.as_bytes()).copied()
    }

    /// Last publishing id of a producer reference (dedup; QueryPublisherSequence).
    pub fn writer_sequence(&self, reference: &[u8]) -> Option<u64> {
        self.tracking
            .sequences
            .get(reference)
            .map(|(_, sequence)| *sequence)
    }

    /// Every consumer offset and writer sequence the log tracks now.
    pub fn tracking(&self) -> TrackingSnapshot {
        self.tracking.snapshot()
    }

    pub fn set_retention(&mut self, retention: Retention) {
        self.config.retention = retention;
    }

    pub fn view(&self) -> LogView {
        LogView {
            shared: self.shared.clone(),
        }
    }

    /// Removes every file of the stream (queue deleted); readers still holding a segment
    /// read it to its end.
    pub fn delete(self) -> Result<(), StoreError> {
        let segments = std::mem::take(&mut *self.shared.segments.write());
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        for segment in &segments {
            recovery::remove_segment(self.io.as_ref(), &self.config.dir, segment)?;
        }
        Ok(())
    }

    /// `Err` once a write failed here or the shared group commit failed.
    fn check(&self) -> Result<(), StoreError> {
        if let Some(cause) = &self.poisoned {
            return Err(StoreError::Poisoned {
                cause: cause.clone(),
            });
        }
        match &self.sync.commit {
            Some(commit) => commit.check(),
            None => Ok(()),
        }
    }

    /// Writes a chunk of `entries` to the active segment and indexes it (not yet published).
    pub(crate) fn write_chunk(
        &mut self,
        chunk_type: u8,
        entries: &[Entry],
        timestamp_ms: i64,
        trailer: &[u8],
    ) -> Result<IndexRecord, StoreError> {
        let (header, scratch) = self.encode_chunk(chunk_type, entries, timestamp_ms, trailer)?;
        let mut slices = Vec::with_capacity(2 + 2 * entries.len());
        let encoded = header.encode();
        slices.push(IoSlice::new(&encoded));
        let mut at = 0;
        for entry in entries {
            let (len, data) = match entry {
                Entry::Simple(data) => (4, data),
                Entry::SubBatch { data, .. } => (11, data),
            };
            slices.push(IoSlice::new(&scratch[at..at + len]));
            slices.push(IoSlice::new(data));
            at += len;
        }
        slices.push(IoSlice::new(trailer));
        let written = self.write_parts(&header, &mut slices);
        drop(slices);
        self.scratch = scratch;
        written
    }

    /// The header and the entry headers (in the returned scratch buffer) of a chunk; refuses
    /// chunks the format cannot hold.
    fn encode_chunk(
        &mut self,
        chunk_type: u8,
        entries: &[Entry],
        timestamp_ms: i64,
        trailer: &[u8],
    ) -> Result<(Header, Vec<u8>), StoreError> {
        let refused = |what: String| StoreError::Refused { what };
        let num_entries = u16::try_from(entries.len())
            .ok()
            .filter(|count| *count > 0)
            .ok_or_else(|| {
                refused(format!(
                    "a chunk holds 1 to 65535 entries, not {}: split the batch",
                    entries.len()
                ))
            })?;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let mut crc = crc32fast::Hasher::new();
        let (mut records, mut data_len) = (0u64, 0u64);
        for entry in entries {
            let start = scratch.len();
            match entry {
                Entry::Simple(data) => {
                    if data.len() > SIMPLE_BYTES_MAX {
                        self.scratch = scratch;
                        return Err(refused(format!(
                            "a message of {} bytes is larger than a stream entry can hold",
                            data.len()
                        )));
                    }
                    scratch.extend_from_slice(&(data.len() as u32).to_be_bytes());
                }
                Entry::SubBatch {
                    compression,
                    records,
                    uncompressed_len,
                    data,
                } => {
                    scratch.push(0x80 | ((compression & 0x07) << 4));
                    scratch.extend_from_slice(&records.to_be_bytes());
                    scratch.extend_from_slice(&uncompressed_len.to_be_bytes());
                    scratch.extend_from_slice(&(data.len() as u32).to_be_bytes());
                }
            }
            let data = match entry {
                Entry::Simple(data) | Entry::SubBatch { data, .. } => data,
            };
            crc.update(&scratch[start..]);
            crc.update(data);
            records += u64::from(entry.records());
            data_len += (scratch.len() - start + data.len()) as u64;
        }
        let (Ok(num_records), Ok(data_len), Ok(trailer_len)) = (
            u32::try_from(records),
            u32::try_from(data_len),
            u32::try_from(trailer.len()),
        ) else {
            self.scratch = scratch;
            return Err(refused(
                "a chunk larger than 4 GiB: split the batch".to_owned(),
            ));
        };
        let header = Header {
            chunk_type,
            num_entries,
            num_records,
            timestamp_ms,
            epoch: EPOCH,
            first_offset: self.next_offset,
            crc: crc.finalize(),
            data_len,
            trailer_len,
            bloom_len: 0,
        };
        Ok((header, scratch))
    }

    /// Writes a chunk's bytes (`parts`, `header` first) at the active segment's end, then its
    /// index record; a failure poisons the log.
    fn write_parts(
        &mut self,
        header: &Header,
        parts: &mut [IoSlice<'_>],
    ) -> Result<IndexRecord, StoreError> {
        let segment = self.active.clone();
        let position = segment.bytes.load(Ordering::Acquire);
        let record = IndexRecord {
            first_offset: header.first_offset,
            timestamp_ms: header.timestamp_ms,
            epoch: header.epoch,
            position,
            size: (HEADER_BYTES + usize::from(header.bloom_len)) as u32 + header.data_len,
            trailer: header.trailer_len,
            records: header.num_records,
            chunk_type: header.chunk_type,
        };
        debug_assert_eq!(
            parts.iter().map(|part| part.len() as u64).sum::<u64>(),
            header.total_bytes()
        );
        let written =
            write_all_vectored_at(segment.file.as_ref(), parts, position).and_then(|()| {
                let at = index_position(segment.count());
                write_all_at(segment.index.as_ref(), &record.encode(), at)
            });
        if let Err(error) = written {
            self.poison(&error);
            return Err(error);
        }
        segment.push(record, record.end());
        self.next_offset = record.next_offset();
        Ok(record)
    }

    fn poison(&mut self, error: &StoreError) {
        tracing::error!(
            "stream log {}: {error}; the stream takes no more writes until it is opened again",
            self.config.dir.display()
        );
        self.poisoned.get_or_insert_with(|| error.to_string());
        if let Some(commit) = &self.sync.commit {
            commit.poison(error);
        }
    }

    /// Makes a written chunk visible to readers.
    pub(crate) fn publish(&self, record: &IndexRecord) {
        if record.chunk_type == CHUNK_USER {
            self.shared
                .last_chunk
                .store(record.first_offset, Ordering::Release);
        }
        self.shared.chunks.fetch_add(1, Ordering::AcqRel);
        self.shared
            .next_offset
            .store(record.next_offset(), Ordering::Release);
    }

    /// Publishes a user chunk and hands its waiter to the group commit (or tells it now).
    fn durable(&self, record: &IndexRecord, on_durable: Waiter) {
        self.publish(record);
        match &self.sync.commit {
            None => on_durable(true),
            Some(commit) => {
                let file = [(self.active.file_key, self.active.file.clone())];
                let bytes = u64::from(record.size) + u64::from(record.trailer);
                commit.submit(&file, &mut vec![on_durable], 1, bytes);
            }
        }
    }

    /// Tells the group commit the active segment was written (no waiter: tracking chunks are
    /// made durable by the next fsync).
    pub(crate) fn mark_dirty(&self, record: &IndexRecord) {
        if let Some(commit) = &self.sync.commit {
            let file = [(self.active.file_key, self.active.file.clone())];
            let bytes = u64::from(record.size) + u64::from(record.trailer);
            commit.submit(&file, &mut Vec::new(), 0, bytes);
        }
    }

    /// Applies a raw chunk's tracking: its trailer (user chunk) or its entry.
    fn apply_tracking(
        &mut self,
        header: &Header,
        chunk: &[u8],
        trailer: &[u8],
    ) -> Result<(), StoreError> {
        let body = || {
            let start = HEADER_BYTES + usize::from(header.bloom_len) + 4;
            let end = HEADER_BYTES + usize::from(header.bloom_len) + header.data_len as usize;
            chunk.get(start..end).unwrap_or_default()
        };
        let applied = match header.chunk_type {
            CHUNK_USER => self.tracking.apply_delta(trailer, header.first_offset),
            CHUNK_TRACKING_DELTA => self.tracking.apply_delta(body(), header.first_offset),
            CHUNK_TRACKING_SNAPSHOT => self.tracking.apply_snapshot(body()),
            _ => Ok(()),
        };
        applied.map_err(|what| StoreError::Refused {
            what: format!("a raw chunk's tracking is not valid: {what}"),
        })
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}
