//! The on-disk record format, sans IO: encoding into a batch, decoding from a buffer.
//!
//! A segment file starts with [`SEGMENT_MAGIC`] and holds records back to back:
//!
//! ```text
//! record  := len:u32le  crc:u32le  payload[len]        crc = CRC-32C of payload
//! payload := kind:u8  queue:u64le  rest
//!   enqueue   (1): seq:u64le  flags:u8  message bytes (opaque to the store)
//!   ack       (2): count:u32le  (first:u64le  last:u64le){count}   inclusive seq ranges
//!   delivered (3): up_to:u64le    every seq <= up_to was handed to a consumer
//!   deleted   (4):                the queue was deleted; earlier records of it are void
//! ```
//!
//! A sealed segment gets an index file beside it (`<segment>.idx`, starting with
//! [`INDEX_MAGIC`]): the same records in the same framing, except that each enqueue becomes
//! an `indexed` record naming where the enqueue sits, and an `end` record closes it:
//!
//! ```text
//!   indexed   (5): seq:u64le  flags:u8  offset:u32le  len:u32le
//!   end       (6): records:u64le   how many records precede it (0 for the queue field)
//! ```
//!
//! Recovery reads the index instead of the segment, so a restart reads a few dozen bytes per
//! message instead of every message body; bodies are checked when they are read back.
//!
//! Every record is self-checking, so a torn tail or a flipped byte is found by its checksum
//! and the reader can resynchronise on the next record that checks.

use std::fmt;

use bytes::Bytes;

use crate::error::StoreError;
use crate::io::{write_all_vectored_at, LogFile};

/// First bytes of every segment file (format version 1).
pub const SEGMENT_MAGIC: &[u8; 8] = b"WRNSTOR1";
/// First bytes of every index file.
pub const INDEX_MAGIC: &[u8; 8] = b"WRNIDX01";
/// Bytes before a record's payload: its length and checksum.
pub const RECORD_HEADER_LEN: usize = 8;
/// Payload bytes of an enqueue record before the message: kind, queue, seq, flags.
pub const ENQUEUE_PREFIX_LEN: usize = 1 + 8 + 8 + 1;
/// A payload larger than this is taken for garbage when reading (messages are capped far
/// below it by `max_message_size`).
pub const RECORD_PAYLOAD_MAX: usize = 1 << 30;

/// Body slices at least this large are written from where they are instead of being copied
/// into the batch (smaller ones cost less copied than as one more `iovec`).
pub const SPLICE_BYTES_MIN: usize = 4096;

const KIND_ENQUEUE: u8 = 1;
const KIND_ACK: u8 = 2;
const KIND_DELIVERED: u8 = 3;
const KIND_DELETED: u8 = 4;
const KIND_INDEXED: u8 = 5;
const KIND_INDEX_END: u8 = 6;

/// Enqueue flag: the message must survive a restart (persistent message, durable queue).
/// Without it the record only pages a message out of memory and recovery ignores it.
pub const FLAG_DURABLE: u8 = 1;

/// Where a record is: segment number, byte offset of the record's header, total length.
/// Twelve bytes, and `Option<Location>` too (a record is never empty): queues keep one per
/// message beyond their memory budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Location {
    pub segment: u32,
    pub offset: u32,
    pub len: std::num::NonZeroU32,
}

impl Location {
    pub(crate) fn new(segment: u32, offset: usize, len: usize) -> Location {
        Location {
            segment,
            offset: offset as u32,
            len: std::num::NonZeroU32::new(len as u32).unwrap_or(std::num::NonZeroU32::MIN),
        }
    }
}

/// A decoded record; the message of an enqueue is a range of the buffer it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Enqueue {
        queue: u64,
        seq: u64,
        flags: u8,
        message: std::ops::Range<usize>,
    },
    Ack {
        queue: u64,
        ranges: Vec<(u64, u64)>,
    },
    Delivered {
        queue: u64,
        up_to: u64,
    },
    QueueDeleted {
        queue: u64,
    },
    /// An enqueue as an index file names it.
    Indexed {
        queue: u64,
        seq: u64,
        flags: u8,
        offset: u32,
        len: u32,
    },
    /// The last record of a complete index file.
    IndexEnd {
        records: u64,
    },
}

/// Why bytes at an offset are not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// Zeros where a record would start: the preallocated, never written end of a segment.
    End,
    /// The buffer ends inside the record (a torn write).
    Truncated,
    /// The checksum does not match the payload.
    Checksum,
    /// The checksum matched but the payload makes no sense (unknown kind, bad lengths).
    Malformed,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecordError::End => "end of the written data",
            RecordError::Truncated => "record cut short (torn write)",
            RecordError::Checksum => "checksum mismatch",
            RecordError::Malformed => "malformed record",
        })
    }
}

/// Decodes the record at `at`; returns it and its total length.
pub fn decode(buf: &[u8], at: usize) -> Result<(Record, usize), RecordError> {
    let header = buf
        .get(at..at + RECORD_HEADER_LEN)
        .ok_or(RecordError::Truncated)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if len == 0 && crc == 0 {
        return Err(RecordError::End); // no record is empty: this is unwritten space
    }
    if len > RECORD_PAYLOAD_MAX {
        return Err(RecordError::Malformed);
    }
    let start = at + RECORD_HEADER_LEN;
    let payload = buf.get(start..start + len).ok_or(RecordError::Truncated)?;
    if crc32c::crc32c(payload) != crc {
        return Err(RecordError::Checksum);
    }
    let record = decode_payload(payload, start).ok_or(RecordError::Malformed)?;
    Ok((record, RECORD_HEADER_LEN + len))
}

fn decode_payload(payload: &[u8], base: usize) -> Option<Record> {
    let (&kind, rest) = payload.split_first()?;
    let queue = u64_at(rest, 0)?;
    let rest = &rest[8..];
    match kind {
        KIND_ENQUEUE => {
            let seq = u64_at(rest, 0)?;
            let flags = *rest.get(8)?;
            Some(Record::Enqueue {
                queue,
                seq,
                flags,
                message: base + ENQUEUE_PREFIX_LEN..base + payload.len(),
            })
        }
        KIND_ACK => {
            let count = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            let ranges = rest.get(4..)?;
            if ranges.len() != count.checked_mul(16)? {
                return None;
            }
            let ranges = ranges
                .chunks_exact(16)
                .map(|c| (u64_at(c, 0).unwrap_or(0), u64_at(c, 8).unwrap_or(0)))
                .collect();
            Some(Record::Ack { queue, ranges })
        }
        KIND_DELIVERED if rest.len() == 8 => Some(Record::Delivered {
            queue,
            up_to: u64_at(rest, 0)?,
        }),
        KIND_DELETED if rest.is_empty() => Some(Record::QueueDeleted { queue }),
        KIND_INDEXED if rest.len() == 8 + 1 + 4 + 4 => Some(Record::Indexed {
            queue,
            seq: u64_at(rest, 0)?,
            flags: rest[8],
            offset: u32::from_le_bytes(rest[9..13].try_into().ok()?),
            len: u32::from_le_bytes(rest[13..17].try_into().ok()?),
        }),
        KIND_INDEX_END if rest.len() == 8 => Some(Record::IndexEnd {
            records: u64_at(rest, 0)?,
        }),
        _ => None,
    }
}

fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(buf.get(at..at + 8)?.try_into().ok()?))
}

/// Appends one framed record: header, `kind`, `queue`, then what `body` writes.
fn encode(out: &mut Vec<u8>, kind: u8, queue: u64, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; RECORD_HEADER_LEN]);
    out.push(kind);
    out.extend_from_slice(&queue.to_le_bytes());
    body(out);
    let payload = &out[start + RECORD_HEADER_LEN..];
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let crc = crc32c::crc32c(payload);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Appends the index form of an encoded record of `len` bytes, which sits at `offset` of its
/// segment: an enqueue becomes an `indexed` record, anything else is copied as it is.
/// `bytes` holds the record's start: all of it, or for an enqueue at least its prefix.
fn index_entry_of(bytes: &[u8], len: usize, offset: usize, out: &mut Vec<u8>) {
    let payload = bytes.get(RECORD_HEADER_LEN..).unwrap_or_default();
    if payload.first() != Some(&KIND_ENQUEUE) || payload.len() < ENQUEUE_PREFIX_LEN {
        debug_assert_eq!(bytes.len(), len, "invariant: only enqueues are spliced");
        out.extend_from_slice(bytes);
        return;
    }
    let queue = u64_at(payload, 1).unwrap_or(0);
    encode(out, KIND_INDEXED, queue, |b| {
        b.extend_from_slice(&payload[9..ENQUEUE_PREFIX_LEN]); // seq, flags
        b.extend_from_slice(&(offset as u32).to_le_bytes());
        b.extend_from_slice(&(len as u32).to_le_bytes());
    });
}

/// Appends the index form of a decoded segment record at `location`.
pub(crate) fn index_record(record: &Record, location: Location, out: &mut Vec<u8>) {
    match record {
        Record::Enqueue {
            queue, seq, flags, ..
        } => encode(out, KIND_INDEXED, *queue, |b| {
            b.extend_from_slice(&seq.to_le_bytes());
            b.push(*flags);
            b.extend_from_slice(&location.offset.to_le_bytes());
            b.extend_from_slice(&location.len.get().to_le_bytes());
        }),
        Record::Ack { queue, ranges } => encode(out, KIND_ACK, *queue, |b| {
            b.extend_from_slice(&(ranges.len() as u32).to_le_bytes());
            for (first, last) in ranges {
                b.extend_from_slice(&first.to_le_bytes());
                b.extend_from_slice(&last.to_le_bytes());
            }
        }),
        Record::Delivered { queue, up_to } => encode(out, KIND_DELIVERED, *queue, |b| {
            b.extend_from_slice(&up_to.to_le_bytes())
        }),
        Record::QueueDeleted { queue } => encode(out, KIND_DELETED, *queue, |_| {}),
        Record::Indexed { .. } | Record::IndexEnd { .. } => {}
    }
}

/// Closes an index with the count of its records.
pub(crate) fn index_end(records: u64, out: &mut Vec<u8>) {
    encode(out, KIND_INDEX_END, 0, |b| {
        b.extend_from_slice(&records.to_le_bytes())
    });
}

/// A body slice of a [`RecordBatch`], inserted before `buf[at]`.
struct Splice {
    at: usize,
    bytes: Bytes,
}

/// Called once the records it was attached to are on disk (`true`) or can never be
/// (`false`: the store failed; the publisher must be told no).
pub type Waiter = Box<dyn FnOnce(bool) + Send>;

/// Records one queue task writes in one go, with what the store must account for them.
///
/// The batch's bytes are `buf` with the `spliced` slices inserted: a large message body is
/// not copied into `buf` but kept as the message's own slices and written after its record
/// head by the same vectored write. Offsets of records are in those whole bytes.
#[derive(Default)]
pub struct RecordBatch {
    pub(crate) buf: Vec<u8>,
    /// Body slices, in order, each inserted before `buf[at]` (after any earlier ones there).
    spliced: Vec<Splice>,
    spliced_bytes: usize,
    /// End offset of each record, and whether it is an enqueue.
    pub(crate) records: Vec<(usize, bool)>,
    /// Where each record starts in `buf` (its header and prefix are never spliced).
    heads: Vec<usize>,
    /// Stored messages that became dead (acked, dropped, deleted): their segments' live counts
    /// go down when the batch is written.
    pub(crate) dead: Vec<u32>,
    pub(crate) waiters: Vec<Waiter>,
    /// Enqueues with [`FLAG_DURABLE`], for the messages-per-fsync figure.
    pub(crate) durable_messages: u64,
}

impl fmt::Debug for RecordBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordBatch")
            .field("bytes", &self.len())
            .field("spliced", &self.spliced.len())
            .field("records", &self.records.len())
            .field("dead", &self.dead.len())
            .field("waiters", &self.waiters.len())
            .finish()
    }
}

impl RecordBatch {
    pub fn new() -> RecordBatch {
        RecordBatch::default()
    }

    /// Nothing to write and nothing to account for.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.dead.is_empty() && self.waiters.is_empty()
    }

    /// Appends an enqueue record; `write_message` appends the message's bytes.
    pub fn enqueue(
        &mut self,
        queue: u64,
        seq: u64,
        flags: u8,
        write_message: impl FnOnce(&mut Vec<u8>),
    ) {
        let start = self.begin(KIND_ENQUEUE, queue);
        self.buf.extend_from_slice(&seq.to_le_bytes());
        self.buf.push(flags);
        write_message(&mut self.buf);
        if flags & FLAG_DURABLE != 0 {
            self.durable_messages += 1;
        }
        self.finish(start, true);
    }

    /// Appends an enqueue record whose message is what `write_head` appends followed by
    /// `body`. Slices of at least [`SPLICE_BYTES_MIN`] are not copied: the write hands them
    /// to the kernel as they are (see [`RecordBatch`]).
    pub fn enqueue_with_body(
        &mut self,
        queue: u64,
        seq: u64,
        flags: u8,
        write_head: impl FnOnce(&mut Vec<u8>),
        body: &[Bytes],
    ) {
        let start = self.begin(KIND_ENQUEUE, queue);
        self.buf.extend_from_slice(&seq.to_le_bytes());
        self.buf.push(flags);
        write_head(&mut self.buf);
        let payload = self
            .buf
            .get(start + RECORD_HEADER_LEN..)
            .unwrap_or_default();
        let mut crc = crc32c::crc32c(payload);
        let mut len = payload.len();
        for chunk in body {
            crc = crc32c::crc32c_append(crc, chunk);
            len += chunk.len();
            if chunk.len() < SPLICE_BYTES_MIN {
                self.buf.extend_from_slice(chunk);
            } else {
                self.spliced_bytes += chunk.len();
                self.spliced.push(Splice {
                    at: self.buf.len(),
                    bytes: chunk.clone(),
                });
            }
        }
        if flags & FLAG_DURABLE != 0 {
            self.durable_messages += 1;
        }
        self.seal(start, len, crc, true);
    }

    /// Bytes in the batch, spliced bodies included.
    pub(crate) fn len(&self) -> usize {
        self.buf.len() + self.spliced_bytes
    }

    /// Writes bytes `range` of the batch (record boundaries) to `file` at `offset`, with as
    /// few vectored writes as the kernel allows.
    pub(crate) fn write_at(
        &self,
        file: &dyn LogFile,
        range: std::ops::Range<usize>,
        offset: u64,
    ) -> Result<(), StoreError> {
        let mut slices = Vec::new();
        self.for_each_piece(range, |piece| slices.push(std::io::IoSlice::new(piece)));
        write_all_vectored_at(file, &mut slices, offset)
    }

    /// Calls `each` with the pieces (parts of `buf`, spliced slices) covering `range`.
    fn for_each_piece<'a>(&'a self, range: std::ops::Range<usize>, mut each: impl FnMut(&'a [u8])) {
        let mut logical = 0;
        let mut buf_at = 0;
        let mut emit = |piece: &'a [u8], logical: &mut usize| {
            let (start, end) = (*logical, *logical + piece.len());
            *logical = end;
            if end > range.start && start < range.end {
                let from = range.start.saturating_sub(start);
                let to = range.end.min(end) - start;
                each(piece.get(from..to).unwrap_or_default());
            }
        };
        for splice in &self.spliced {
            if logical >= range.end {
                return;
            }
            emit(
                self.buf.get(buf_at..splice.at).unwrap_or_default(),
                &mut logical,
            );
            emit(&splice.bytes, &mut logical);
            buf_at = splice.at;
        }
        emit(self.buf.get(buf_at..).unwrap_or_default(), &mut logical);
    }

    /// Appends the index form of the record that spans `range` of the batch (see
    /// [`index_entry_of`]); it sits at `offset` of its segment.
    pub(crate) fn index_entry(
        &self,
        range: std::ops::Range<usize>,
        offset: usize,
        out: &mut Vec<u8>,
    ) {
        let record = self.records.partition_point(|&(end, _)| end <= range.start);
        let Some(&head) = self.heads.get(record) else {
            debug_assert!(false, "invariant: {range:?} is a record of this batch");
            return;
        };
        // The record's bytes in `buf` run to its first spliced slice, if it has one: an
        // enqueue's prefix always lies before it, and other records are never spliced.
        let first_splice = self.spliced.partition_point(|s| s.at <= head);
        let contiguous_end = self
            .spliced
            .get(first_splice)
            .map_or(self.buf.len(), |s| s.at);
        let end = contiguous_end.min(head + range.len());
        index_entry_of(
            self.buf.get(head..end).unwrap_or_default(),
            range.len(),
            offset,
            out,
        );
    }

    /// Appends an ack record for `seqs` (any order), as ranges of consecutive numbers.
    pub fn ack(&mut self, queue: u64, seqs: &mut [u64]) {
        if seqs.is_empty() {
            return;
        }
        seqs.sort_unstable();
        let start = self.begin(KIND_ACK, queue);
        let count_at = self.buf.len();
        self.buf.extend_from_slice(&0u32.to_le_bytes());
        let mut count: u32 = 0;
        let mut range = (seqs[0], seqs[0]);
        for &seq in &seqs[1..] {
            if seq == range.1 || seq == range.1 + 1 {
                range.1 = seq;
            } else {
                self.push_range(range);
                count += 1;
                range = (seq, seq);
            }
        }
        self.push_range(range);
        count += 1;
        self.buf[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
        self.finish(start, false);
    }

    fn push_range(&mut self, (first, last): (u64, u64)) {
        self.buf.extend_from_slice(&first.to_le_bytes());
        self.buf.extend_from_slice(&last.to_le_bytes());
    }

    /// Every message up to `up_to` was handed to a consumer: after a crash they come back
    /// marked redelivered.
    pub fn delivered(&mut self, queue: u64, up_to: u64) {
        let start = self.begin(KIND_DELIVERED, queue);
        self.buf.extend_from_slice(&up_to.to_le_bytes());
        self.finish(start, false);
    }

    pub fn queue_deleted(&mut self, queue: u64) {
        let start = self.begin(KIND_DELETED, queue);
        self.finish(start, false);
    }

    /// The message stored at `location` is no longer needed.
    pub fn forget(&mut self, location: Location) {
        self.dead.push(location.segment);
    }

    /// Runs `waiter` once this batch's records are fsynced (or the store failed).
    pub fn on_durable(&mut self, waiter: Waiter) {
        self.waiters.push(waiter);
    }

    /// The batch's framing, before it is written: record ends ascend, the last one is the
    /// batch's end, each record has its head, and spliced slices lie inside the buffer.
    pub(crate) fn check_framing(&self) {
        debug_assert_eq!(
            self.records.last().map_or(0, |&(end, _)| end),
            self.len(),
            "invariant: the records end where the batch does"
        );
        debug_assert!(
            self.records.windows(2).all(|w| w[0].0 < w[1].0),
            "invariant: record ends ascend (no record is empty)"
        );
        debug_assert_eq!(self.heads.len(), self.records.len(), "one head per record");
        debug_assert!(
            self.spliced.iter().all(|s| s.at <= self.buf.len()),
            "invariant: spliced slices are placed inside the buffer"
        );
    }

    pub(crate) fn clear(&mut self) {
        self.buf.clear();
        self.spliced.clear();
        self.spliced_bytes = 0;
        self.records.clear();
        self.heads.clear();
        self.dead.clear();
        self.waiters.clear();
        self.durable_messages = 0;
    }

    fn begin(&mut self, kind: u8, queue: u64) -> usize {
        let start = self.buf.len();
        self.heads.push(start);
        self.buf.extend_from_slice(&[0; RECORD_HEADER_LEN]);
        self.buf.push(kind);
        self.buf.extend_from_slice(&queue.to_le_bytes());
        start
    }

    fn finish(&mut self, start: usize, enqueue: bool) {
        let payload = &self.buf[start + RECORD_HEADER_LEN..];
        let (len, crc) = (payload.len(), crc32c::crc32c(payload));
        self.seal(start, len, crc, enqueue);
    }

    /// Writes the header of the record at `start` of `buf` and notes where the record ends.
    fn seal(&mut self, start: usize, payload_len: usize, crc: u32, enqueue: bool) {
        let len = u32::try_from(payload_len).unwrap_or(u32::MAX);
        self.buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
        self.buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        self.records.push((self.len(), enqueue));
    }
}

/// The store's identity for a queue: FNV-1a of vhost and name. Stable across builds, so
/// files written by one version are read by the next.
pub fn queue_id(vhost: &str, name: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for &b in vhost.as_bytes().iter().chain(&[0]).chain(name.as_bytes()) {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(PRIME);
    }
    hash
}

#[cfg(test)]
#[path = "record_test.rs"]
mod tests;
