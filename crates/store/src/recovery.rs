//! Reading the store back at startup: every segment in order, every record checked.
//!
//! A record that fails its checksum (a torn write at the tail of the last segment, or a
//! flipped byte anywhere) is logged with its file and offset and skipped: the reader looks for
//! the next offset where a whole record checks and goes on from there.

use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

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
}

impl Recovered {
    /// The messages of queue `id` (see [`crate::queue_id`]), once.
    pub fn take(&mut self, id: u64) -> Option<RecoveredQueue> {
        self.queues.remove(&id)
    }

    pub fn message_count(&self) -> usize {
        self.queues.values().map(|q| q.messages.len()).sum()
    }

    pub(crate) fn into_queues(self) -> impl Iterator<Item = RecoveredQueue> {
        self.queues.into_values()
    }
}

pub(crate) struct Scan {
    pub recovered: Recovered,
    pub live: BTreeMap<u32, u64>,
    pub files: BTreeMap<u32, Arc<File>>,
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

pub(crate) fn scan(dir: &Path) -> io::Result<Scan> {
    let segments = list_segments(dir)?;
    let started = Instant::now();
    let mut last_progress = started;
    let mut queues: FxHashMap<u64, QueueScan> = FxHashMap::default();
    let mut records = 0u64;
    let total_bytes: u64 = segments.iter().map(|(_, size)| size).sum();
    let mut read_bytes = 0u64;
    if !segments.is_empty() {
        tracing::info!(
            "message store: recovering {} segments ({:.1} MiB) from {}",
            segments.len(),
            total_bytes as f64 / (1024.0 * 1024.0),
            dir.display()
        );
    }
    // Two readers (segments alternate between them) check records while this thread applies
    // them in log order; a reader stays at most one segment ahead.
    let files = std::thread::scope(|scope| -> io::Result<BTreeMap<u32, Arc<File>>> {
        let readers: Vec<_> = (0..SCAN_THREADS)
            .map(|k| {
                let (tx, rx) = std::sync::mpsc::sync_channel::<io::Result<SegmentRecords>>(1);
                let mine: Vec<u32> = segments
                    .iter()
                    .skip(k)
                    .step_by(SCAN_THREADS)
                    .map(|&(s, _)| s)
                    .collect();
                scope.spawn(move || {
                    let mut buf = Vec::with_capacity(SCAN_CHUNK);
                    for segment in mine {
                        let result = read_segment(dir, segment, &mut buf);
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
                .map_err(|_| io::Error::other("a recovery reader stopped"))??;
            records += read.records.len() as u64;
            for (record, location) in read.records {
                apply(record, location, &mut queues);
            }
            files.insert(segment, Arc::new(read.file));
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
    })?;
    let mut live: BTreeMap<u32, u64> = segments.iter().map(|&(s, _)| (s, 0)).collect();
    let mut recovered = Recovered::default();
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
        if !messages.is_empty() || queue.max_seq > 0 {
            recovered.queues.insert(
                id,
                RecoveredQueue {
                    messages,
                    next_seq: queue.max_seq + 1,
                },
            );
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

/// Segment numbers and sizes, oldest first.
fn list_segments(dir: &Path) -> io::Result<Vec<(u32, u64)>> {
    let mut segments = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(number) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".seg"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        segments.push((number, entry.metadata()?.len()));
    }
    segments.sort_unstable();
    Ok(segments)
}

/// Threads reading segments at startup.
const SCAN_THREADS: usize = 2;
/// Bytes read at a time: small enough to stay in cache while checksums run.
const SCAN_CHUNK: usize = 4 << 20;

/// The checked records of one segment, with the open file for later reads.
struct SegmentRecords {
    file: File,
    records: Vec<(Record, Location)>,
}

/// Reads a segment in chunks through `buf`; a record that does not check sends the reader to
/// the whole-file path, which logs it and resynchronises.
fn read_segment(dir: &Path, segment: u32, buf: &mut Vec<u8>) -> io::Result<SegmentRecords> {
    let path = segment_path(dir, segment);
    let file = OpenOptions::new().read(true).open(&path).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("cannot read {}: {error}", path.display()),
        )
    })?;
    if let Some(records) = read_index(dir, segment) {
        return Ok(SegmentRecords { file, records });
    }
    let read = scan_segment(&path, segment, file, buf)?;
    write_index(dir, segment, &read.records);
    Ok(read)
}

/// The records of a segment from its index file, when it has a complete one.
fn read_index(dir: &Path, segment: u32) -> Option<Vec<(Record, Location)>> {
    let path = index_path(dir, segment);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return None,
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
fn write_index(dir: &Path, segment: u32, records: &[(Record, Location)]) {
    let mut bytes = INDEX_MAGIC.to_vec();
    for (record, location) in records {
        record::index_record(record, *location, &mut bytes);
    }
    record::index_end(records.len() as u64, &mut bytes);
    if let Err(error) = crate::store::write_index_file(dir, segment, &bytes) {
        tracing::warn!("message store: cannot write the index of segment {segment}: {error}");
    }
}

/// Reads a whole segment, checking every record.
fn scan_segment(
    path: &Path,
    segment: u32,
    file: File,
    buf: &mut Vec<u8>,
) -> io::Result<SegmentRecords> {
    let path = path.to_path_buf();
    let len = file.metadata()?.len() as usize;
    let mut records = Vec::new();
    let mut base = 0; // file offset of buf[0]
    buf.clear();
    let mut at = 0;
    loop {
        // Refill: keep the unread tail, read the next chunk after it.
        if at > 0 {
            buf.drain(..at);
            base += at;
            at = 0;
        }
        let filled = buf.len();
        let want = (len - base - filled).min(buf.capacity().max(SCAN_CHUNK) - filled);
        buf.resize(filled + want, 0);
        file.read_exact_at(&mut buf[filled..], (base + filled) as u64)?;
        if base == 0 {
            if buf.len() < SEGMENT_MAGIC.len() || &buf[..SEGMENT_MAGIC.len()] != SEGMENT_MAGIC {
                break; // the whole-file path reports it
            }
            at = SEGMENT_MAGIC.len();
        }
        let at_end = base + buf.len() == len;
        while at < buf.len() {
            match record::decode(buf, at) {
                Ok((record, record_len)) => {
                    records.push((record, Location::new(segment, base + at, record_len)));
                    at += record_len;
                }
                Err(record::RecordError::End) => {
                    // Zeros: the preallocated end of the segment, if they run to its end.
                    let mut rest = vec![0; len - (base + at)];
                    file.read_exact_at(&mut rest, (base + at) as u64)?;
                    if all_zero(&rest) {
                        return Ok(SegmentRecords { file, records });
                    }
                    let whole = fs::read(&path)?;
                    scan_from(&path, segment, &whole, base + at, &mut records);
                    return Ok(SegmentRecords { file, records });
                }
                Err(record::RecordError::Truncated) if !at_end => {
                    // The record continues in the next chunk; make room for all of it.
                    let need = record::RECORD_HEADER_LEN + announced_len(&buf[at..]);
                    if need > buf.capacity() {
                        buf.reserve(need);
                    }
                    break;
                }
                Err(_) => {
                    let whole = fs::read(&path)?;
                    scan_from(&path, segment, &whole, base + at, &mut records);
                    return Ok(SegmentRecords { file, records });
                }
            }
        }
        if at_end && at >= buf.len() {
            return Ok(SegmentRecords { file, records });
        }
        if at_end {
            break;
        }
    }
    let whole = fs::read(&path)?;
    scan_from(&path, segment, &whole, 0, &mut records);
    Ok(SegmentRecords { file, records })
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

/// Reads the records of a whole segment from `from` (0: check the header first), logging and
/// skipping every stretch that is not a valid record.
fn scan_from(
    path: &Path,
    segment: u32,
    buf: &[u8],
    from: usize,
    records: &mut Vec<(Record, Location)>,
) {
    let mut at = from;
    if from == 0 {
        if buf.len() < SEGMENT_MAGIC.len() || &buf[..SEGMENT_MAGIC.len()] != SEGMENT_MAGIC {
            tracing::warn!(
                "message store: {} at offset 0: not a segment file (bad header); skipped",
                path.display()
            );
            return;
        }
        at = SEGMENT_MAGIC.len();
    }
    while at < buf.len() {
        match record::decode(buf, at) {
            Ok((record, len)) => {
                records.push((record, Location::new(segment, at, len)));
                at += len;
            }
            Err(record::RecordError::End) if all_zero(&buf[at..]) => return,
            Err(error) => {
                let next = (at + 1..buf.len()).find(|&o| record::decode(buf, o).is_ok());
                match next {
                    Some(next) => tracing::warn!(
                        "message store: {} at offset {at}: {error}; skipped {} bytes to the next valid record",
                        path.display(),
                        next - at
                    ),
                    None => tracing::warn!(
                        "message store: {} at offset {at}: {error}; skipped the rest of the segment ({} bytes)",
                        path.display(),
                        buf.len() - at
                    ),
                }
                at = next.unwrap_or(buf.len());
            }
        }
    }
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
