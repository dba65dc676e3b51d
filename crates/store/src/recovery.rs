//! Reading the store back at startup: every segment in order, every record checked.
//!
//! A record that fails its checksum (a torn write at the tail of the last segment, or a
//! flipped byte anywhere) is reported ([`Recovered::damage`], and logged) as
//! [`StoreError::Corrupt`] with its file and offset, and skipped: the reader looks for the
//! next offset where a whole record checks and goes on from there. Bytes after the last
//! record that checks, which are not the zeros the writer preallocates, are a torn tail: the
//! segment is cut there, so the damage is reported once and the file ends in records.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::error::StoreError;
use crate::io::{read_exact_at, Io, LogFile};
use crate::record::{self, Location, Record, FLAG_DURABLE, INDEX_MAGIC, SEGMENT_MAGIC};
use crate::store::{index_path, segment_path};

const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// A recovered message: where it is, and whether a consumer may have seen it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveredMessage {
    pub seq: u64,
    pub location: Location,
    pub redelivered: bool,
}

/// What one durable queue had on disk: its messages in sequence order.
#[derive(Debug, Default)]
pub struct RecoveredQueue {
    pub messages: Vec<RecoveredMessage>,
    /// Higher than every sequence number the queue used.
    pub next_seq: u64,
}

/// Every queue's recovered messages, until the queues claim them.
#[derive(Debug, Default)]
pub struct Recovered {
    queues: FxHashMap<u64, RecoveredQueue>,
    pub(crate) damage: Vec<StoreError>,
}

impl Recovered {
    /// The messages of queue `id` (see [`crate::queue_id`]), once.
    pub fn take(&mut self, id: u64) -> Option<RecoveredQueue> {
        self.queues.remove(&id)
    }

    /// What recovery found damaged and skipped (corrupt records, torn tails it cut), each
    /// naming its file and offset.
    pub fn damage(&self) -> &[StoreError] {
        &self.damage
    }

    pub fn message_count(&self) -> usize {
        self.queues.values().map(|q| q.messages.len()).sum()
    }

    /// Every queue's messages (what a caller that knows no queue ids walks).
    pub fn into_queues(self) -> impl Iterator<Item = RecoveredQueue> {
        self.queues.into_values()
    }
}

pub(crate) struct Scan {
    pub recovered: Recovered,
    pub live: BTreeMap<u32, u64>,
    pub files: BTreeMap<u32, Arc<dyn LogFile>>,
    pub last_segment: u32,
}

/// One queue's messages while reading: in sequence order (a queue writes its enqueues in
/// that order), acked ones left as tombstones until they reach the front.
#[derive(Default)]
struct QueueScan {
    live: VecDeque<(u64, Option<Location>)>,
    delivered_up_to: u64,
    max_seq: u64,
}

impl QueueScan {
    fn enqueue(&mut self, seq: u64, location: Location) {
        self.max_seq = self.max_seq.max(seq);
        match self.live.back() {
            Some(&(last, _)) if last >= seq => {
                // Not in order (never written so, but read it right anyway).
                match self.live.binary_search_by_key(&seq, |&(s, _)| s) {
                    Ok(at) => self.live[at].1 = Some(location),
                    Err(at) => self.live.insert(at, (seq, Some(location))),
                }
            }
            _ => self.live.push_back((seq, Some(location))),
        }
    }

    fn ack(&mut self, first: u64, last: u64) {
        // Sequence numbers are never reused, also those whose enqueue was reclaimed.
        self.max_seq = self.max_seq.max(last);
        let start = self.live.partition_point(|&(s, _)| s < first);
        for entry in self.live.range_mut(start..) {
            if entry.0 > last {
                break;
            }
            entry.1 = None;
        }
        while matches!(self.live.front(), Some((_, None))) {
            self.live.pop_front();
        }
    }
}

pub(crate) fn scan(io: &dyn Io, dir: &Path) -> Result<Scan, StoreError> {
    let segments = list_segments(io, dir)?;
    let started = Instant::now();
    let total_bytes: u64 = segments.iter().map(|(_, size)| size).sum();
    if !segments.is_empty() {
        tracing::info!(
            "message store: recovering {} segments ({:.1} MiB) from {}",
            segments.len(),
            total_bytes as f64 / (1024.0 * 1024.0),
            dir.display()
        );
    }
    let mut queues: FxHashMap<u64, QueueScan> = FxHashMap::default();
    let mut damage = Vec::new();
    let files = read_segments(io, dir, &segments, &mut queues, &mut damage)?;
    let mut live: BTreeMap<u32, u64> = segments.iter().map(|&(s, _)| (s, 0)).collect();
    let mut recovered = Recovered {
        damage,
        ..Recovered::default()
    };
    for (id, queue) in queues {
        let messages: Vec<RecoveredMessage> = queue
            .live
            .into_iter()
            .filter_map(|(seq, location)| {
                let location = location?;
                *live.entry(location.segment).or_default() += 1;
                Some(RecoveredMessage {
                    seq,
                    location,
                    redelivered: seq <= queue.delivered_up_to,
                })
            })
            .collect();
        debug_assert!(
            messages.windows(2).all(|w| w[0].seq < w[1].seq),
            "in seq order"
        );
        if !messages.is_empty() || queue.max_seq > 0 {
            let next_seq = queue.max_seq + 1;
            recovered
                .queues
                .insert(id, RecoveredQueue { messages, next_seq });
        }
    }
    if !segments.is_empty() {
        tracing::info!(
            "message store: recovered {} messages of {} queues in {:.2} s",
            recovered.message_count(),
            recovered.queues.len(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(Scan {
        recovered,
        live,
        files,
        last_segment: segments.last().map_or(0, |&(s, _)| s),
    })
}

/// Reads every segment and applies its records in log order. Two readers (segments
/// alternate between them) check records while this thread applies them; a reader stays at
/// most one segment ahead. Returns the open segments.
fn read_segments(
    io: &dyn Io,
    dir: &Path,
    segments: &[(u32, u64)],
    queues: &mut FxHashMap<u64, QueueScan>,
    damage: &mut Vec<StoreError>,
) -> Result<BTreeMap<u32, Arc<dyn LogFile>>, StoreError> {
    let total_bytes: u64 = segments.iter().map(|(_, size)| size).sum();
    let mut last_progress = Instant::now();
    let mut records = 0u64;
    let mut read_bytes = 0u64;
    std::thread::scope(|scope| {
        let readers: Vec<_> = (0..SCAN_THREADS)
            .map(|k| {
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                let mine: Vec<u32> = segments
                    .iter()
                    .skip(k)
                    .step_by(SCAN_THREADS)
                    .map(|&(s, _)| s)
                    .collect();
                scope.spawn(move || {
                    let mut buf = Vec::with_capacity(SCAN_CHUNK);
                    for segment in mine {
                        let result = read_segment(io, dir, segment, &mut buf);
                        let failed = result.is_err();
                        if tx.send(result).is_err() || failed {
                            return;
                        }
                    }
                });
                rx
            })
            .collect();
        let mut files = BTreeMap::new();
        for (i, &(segment, size)) in segments.iter().enumerate() {
            let read = readers[i % SCAN_THREADS]
                .recv()
                .map_err(|_| StoreError::Corrupt {
                    file: segment_path(dir, segment),
                    offset: 0,
                    what: "the recovery reader of this segment stopped".to_owned(),
                })??;
            records += read.records.len() as u64;
            for (record, location) in read.records {
                debug_assert_eq!(location.segment, segment, "records come in log order");
                apply(record, location, queues);
            }
            damage.extend(read.damage);
            files.insert(segment, read.file);
            read_bytes += size;
            if last_progress.elapsed() >= PROGRESS_INTERVAL {
                last_progress = Instant::now();
                tracing::info!(
                    "message store: recovery {:.0}% ({records} records read)",
                    read_bytes as f64 * 100.0 / total_bytes.max(1) as f64
                );
            }
        }
        Ok(files)
    })
}

/// Segment numbers and sizes, oldest first.
fn list_segments(io: &dyn Io, dir: &Path) -> Result<Vec<(u32, u64)>, StoreError> {
    let entries = io
        .list(dir)
        .map_err(|error| StoreError::io("list", dir, error))?;
    let mut segments: Vec<(u32, u64)> = entries
        .iter()
        .filter_map(|entry| {
            let number = entry.name.strip_suffix(".seg")?.parse::<u32>().ok()?;
            Some((number, entry.len))
        })
        .collect();
    segments.sort_unstable();
    Ok(segments)
}

/// Threads reading segments at startup.
const SCAN_THREADS: usize = 2;
/// Bytes read at a time: small enough to stay in cache while checksums run.
const SCAN_CHUNK: usize = 4 << 20;

/// The checked records of one segment, with the open file for later reads.
struct SegmentRecords {
    file: Arc<dyn LogFile>,
    records: Vec<(Record, Location)>,
    /// What was skipped, and the torn tail cut.
    damage: Vec<StoreError>,
}

/// Reads a segment from its index when it has a good one, else the segment itself (then
/// cuts a torn tail and writes the index for the next start).
fn read_segment(
    io: &dyn Io,
    dir: &Path,
    segment: u32,
    buf: &mut Vec<u8>,
) -> Result<SegmentRecords, StoreError> {
    let path = segment_path(dir, segment);
    let file = io
        .open(&path)
        .map_err(|error| StoreError::io("open", &path, error))?;
    if let Some(records) = read_index(io, dir, segment) {
        let damage = Vec::new();
        return Ok(SegmentRecords {
            file,
            records,
            damage,
        });
    }
    let mut read = SegmentRecords {
        file,
        records: Vec::new(),
        damage: Vec::new(),
    };
    if let Some(cut) = scan_segment(&path, segment, &mut read, buf)? {
        let len = read.file.len().unwrap_or(cut);
        if let Err(error) = read.file.truncate(cut) {
            tracing::warn!(
                "message store: cannot cut the torn tail of {}: {error}",
                path.display()
            );
        }
        read.damage.push(StoreError::Corrupt {
            file: path.clone(),
            offset: cut,
            what: format!("torn tail of {} bytes cut", len.saturating_sub(cut)),
        });
    }
    for damage in &read.damage {
        tracing::warn!("message store: {damage}");
    }
    write_index(io, dir, segment, &read.records);
    Ok(read)
}

/// The records of a segment from its index file, when it has a complete one.
fn read_index(io: &dyn Io, dir: &Path, segment: u32) -> Option<Vec<(Record, Location)>> {
    let path = index_path(dir, segment);
    let bytes = match io.read_whole(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return None,
        Err(error) => {
            tracing::warn!(
                "message store: cannot read {}: {error}; reading the segment",
                path.display()
            );
            return None;
        }
    };
    let unusable = |at: usize, why: &dyn std::fmt::Display| {
        tracing::warn!(
            "message store: {} at offset {at}: {why}; reading the segment instead",
            path.display()
        );
        None
    };
    if !bytes.starts_with(INDEX_MAGIC) {
        return unusable(0, &"not an index file");
    }
    let mut at = INDEX_MAGIC.len();
    let mut records = Vec::new();
    while at < bytes.len() {
        let (record, len) = match record::decode(&bytes, at) {
            Ok(decoded) => decoded,
            Err(error) => return unusable(at, &error),
        };
        at += len;
        match record {
            Record::IndexEnd { records: count } if at == bytes.len() => {
                if count != records.len() as u64 {
                    return unusable(at - len, &"record count does not match");
                }
                return Some(records);
            }
            Record::IndexEnd { .. } => return unusable(at - len, &"end record before the end"),
            Record::Indexed {
                queue,
                seq,
                flags,
                offset,
                len,
            } => {
                let location = Location::new(segment, offset as usize, len as usize);
                let enqueue = Record::Enqueue {
                    queue,
                    seq,
                    flags,
                    message: 0..0,
                };
                records.push((enqueue, location));
            }
            Record::Enqueue { .. } => return unusable(at - len, &"an enqueue with its message"),
            other => records.push((other, Location::new(segment, 0, 1))),
        }
    }
    unusable(at, &"no end record (cut short)")
}

/// Writes the index of a segment read in full, so the next start reads the index.
fn write_index(io: &dyn Io, dir: &Path, segment: u32, records: &[(Record, Location)]) {
    let mut bytes = INDEX_MAGIC.to_vec();
    for (record, location) in records {
        record::index_record(record, *location, &mut bytes);
    }
    record::index_end(records.len() as u64, &mut bytes);
    let path = index_path(dir, segment);
    if let Err(error) = io.replace_whole(&path, &bytes) {
        tracing::warn!(
            "message store: cannot write the index {}: {error}",
            path.display()
        );
    }
}

/// Reads a whole segment in chunks through `buf`, checking every record into `read`. A
/// record that does not check sends the reader to the whole-file path, which reports it
/// and resynchronises. Returns where to cut the segment when it ends in a torn tail.
fn scan_segment(
    path: &Path,
    segment: u32,
    read: &mut SegmentRecords,
    buf: &mut Vec<u8>,
) -> Result<Option<u64>, StoreError> {
    let file = read.file.clone();
    let len = file
        .len()
        .map_err(|error| StoreError::io("read the size of", path, error))? as usize;
    let mut base = 0; // file offset of buf[0]
    buf.clear();
    let mut at = 0;
    let from = loop {
        // Refill: keep the unread tail, read the next chunk after it.
        if at > 0 {
            buf.drain(..at);
            base += at;
            at = 0;
        }
        let filled = buf.len();
        let want = (len - base - filled).min(buf.capacity().max(SCAN_CHUNK) - filled);
        buf.resize(filled + want, 0);
        read_exact_at(&*file, &mut buf[filled..], (base + filled) as u64)?;
        if base == 0 {
            if buf.len() < SEGMENT_MAGIC.len() || &buf[..SEGMENT_MAGIC.len()] != SEGMENT_MAGIC {
                break 0; // the whole-file path reports it
            }
            at = SEGMENT_MAGIC.len();
        }
        let at_end = base + buf.len() == len;
        match scan_chunk(buf, &mut at, base, segment, at_end, &mut read.records) {
            Chunk::Done => return Ok(None),
            Chunk::More => {}
            Chunk::Zeros => {
                // Zeros: the preallocated end of the segment, if they run to its end.
                let mut rest = vec![0; len - (base + at)];
                read_exact_at(&*file, &mut rest, (base + at) as u64)?;
                if all_zero(&rest) {
                    return Ok(None);
                }
                break base + at;
            }
            Chunk::Bad => break base + at,
        }
        if at_end {
            break base + at;
        }
    };
    let mut whole = vec![0; len];
    read_exact_at(&*file, &mut whole, 0)?;
    Ok(scan_from(path, segment, &whole, from, read).map(|cut| cut as u64))
}

/// How a chunk of a segment ended.
enum Chunk {
    /// Every record of the segment was read.
    Done,
    /// A record continues in the next chunk.
    More,
    /// Zeros where a record would start.
    Zeros,
    /// Bytes that are not a record.
    Bad,
}

/// Decodes the records of `buf` from `at` (file offset `base + at`) into `records`.
fn scan_chunk(
    buf: &mut Vec<u8>,
    at: &mut usize,
    base: usize,
    segment: u32,
    at_end: bool,
    records: &mut Vec<(Record, Location)>,
) -> Chunk {
    while *at < buf.len() {
        match record::decode(buf, *at) {
            Ok((record, record_len)) => {
                records.push((record, Location::new(segment, base + *at, record_len)));
                *at += record_len;
            }
            Err(record::RecordError::End) => return Chunk::Zeros,
            Err(record::RecordError::Truncated) if !at_end => {
                // The record continues in the next chunk; make room for all of it.
                let need = record::RECORD_HEADER_LEN + announced_len(&buf[*at..]);
                if need > buf.capacity() {
                    buf.reserve(need);
                }
                return Chunk::More;
            }
            Err(_) => return Chunk::Bad,
        }
    }
    if at_end {
        Chunk::Done
    } else {
        Chunk::More
    }
}

fn all_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

/// The payload length a record header announces (0 when the header itself is cut).
fn announced_len(bytes: &[u8]) -> usize {
    bytes
        .get(..4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .min(record::RECORD_PAYLOAD_MAX)
}

/// Reads the records of a whole segment from `from` (0: check the header first), reporting
/// and skipping every stretch that is not a valid record. Returns the offset to cut the
/// segment at when it ends in such a stretch that is not all zeros (a torn tail).
fn scan_from(
    path: &Path,
    segment: u32,
    buf: &[u8],
    from: usize,
    read: &mut SegmentRecords,
) -> Option<usize> {
    let corrupt = |offset: usize, what: String| StoreError::Corrupt {
        file: path.to_path_buf(),
        offset: offset as u64,
        what,
    };
    let mut at = from;
    if from == 0 {
        if SEGMENT_MAGIC.starts_with(buf) || (buf.len() < SEGMENT_MAGIC.len() && all_zero(buf)) {
            return None; // created just before a crash: its header never reached the disk
        }
        if buf.len() < SEGMENT_MAGIC.len() || &buf[..SEGMENT_MAGIC.len()] != SEGMENT_MAGIC {
            let what = "not a segment file (bad header); skipped".to_owned();
            read.damage.push(corrupt(0, what));
            return None;
        }
        at = SEGMENT_MAGIC.len();
    }
    while at < buf.len() {
        match record::decode(buf, at) {
            Ok((record, len)) => {
                read.records.push((record, Location::new(segment, at, len)));
                at += len;
            }
            Err(record::RecordError::End) if all_zero(&buf[at..]) => return None,
            Err(error) => {
                let next = (at + 1..buf.len()).find(|&o| record::decode(buf, o).is_ok());
                let Some(next) = next else {
                    return Some(at); // the caller cuts and reports the torn tail
                };
                let what = format!(
                    "{error}; skipped {} bytes to the next valid record",
                    next - at
                );
                read.damage.push(corrupt(at, what));
                at = next;
            }
        }
    }
    debug_assert_eq!(at, buf.len(), "records end at the end of the segment");
    None
}

fn apply(record: Record, location: Location, queues: &mut FxHashMap<u64, QueueScan>) {
    match record {
        Record::Enqueue {
            queue, seq, flags, ..
        } => {
            if flags & FLAG_DURABLE == 0 {
                return; // paged out from memory only; gone with the process
            }
            queues.entry(queue).or_default().enqueue(seq, location);
        }
        Record::Ack { queue, ranges } => {
            let queue = queues.entry(queue).or_default();
            for (first, last) in ranges {
                queue.ack(first, last);
            }
        }
        Record::Delivered { queue, up_to } => {
            let queue = queues.entry(queue).or_default();
            queue.delivered_up_to = queue.delivered_up_to.max(up_to);
            queue.max_seq = queue.max_seq.max(up_to);
        }
        Record::QueueDeleted { queue } => {
            queues.remove(&queue);
        }
        Record::Indexed { .. } | Record::IndexEnd { .. } => {} // index files only
    }
}
