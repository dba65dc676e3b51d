//! Opening a stream log: the segments from their index files, without reading the chunks
//! of sealed segments (a 10 GB stream opens in milliseconds), then the active segment's
//! tail checked chunk by chunk (header sanity and CRC) and cut at the first torn or corrupt
//! chunk, never served; then the tracking state from the active segment (its opening
//! snapshot, trailers and delta chunks).
//!
//! A sealed segment whose index does not end where the segment file does (a crash while it
//! was the active one, an index lost) has its index rebuilt by a scan of the segment.

use std::path::Path;
use std::sync::Arc;

use super::chunk::{self, Header, CHUNK_TRACKING_DELTA, CHUNK_TRACKING_SNAPSHOT, CHUNK_USER};
use super::segment::{
    file_path, IndexRecord, Segment, FILE_HEADER_BYTES, INDEX_MAGIC, RECORD_BYTES, SEGMENT_MAGIC,
};
use super::tracking::Tracking;
use crate::error::StoreError;
use crate::io::{read_exact_at, write_all_at, Io, LogFile};

/// The active segment's tail that open checks chunk by chunk: what a crash can have torn
/// (at least the last chunk is always checked). Tests pass a smaller one, so that they open
/// segments whose head is trusted and whose tail is checked.
pub(crate) const TAIL_CHECK_BYTES: u64 = 16 << 20;

/// What open found.
pub(crate) struct Recovered {
    /// Oldest first; the last is active (its records in memory).
    pub segments: Vec<Arc<Segment>>,
    pub next_offset: u64,
    pub last_chunk: Option<u64>,
    pub chunks: u64,
    pub tracking: Tracking,
}

pub(crate) fn recover(
    io: &dyn Io,
    dir: &Path,
    tail_check_bytes: u64,
) -> Result<Recovered, StoreError> {
    io.create_dir_all(dir)
        .map_err(|error| StoreError::io("create the stream directory", dir, error))?;
    let mut offsets = segment_offsets(io, dir)?;
    if offsets.is_empty() {
        let segment = create_segment(io, dir, 0)?;
        // A new stream: its directory and first files must survive a power loss before any
        // chunk in them is confirmed as durable.
        let parent = dir.parent().filter(|parent| !parent.as_os_str().is_empty());
        for synced in [Some(dir), parent].into_iter().flatten() {
            io.sync_dir(synced)
                .map_err(|error| StoreError::io("fsync", synced, error))?;
        }
        return Ok(Recovered {
            segments: vec![Arc::new(segment)],
            next_offset: 0,
            last_chunk: None,
            chunks: 0,
            tracking: Tracking::default(),
        });
    }
    let mut segments = Vec::with_capacity(offsets.len());
    let last = offsets.pop().expect("invariant: not empty");
    for first_offset in offsets {
        segments.push(open_sealed(io, dir, first_offset)?);
    }
    let active = open_active(io, dir, last, tail_check_bytes)?;
    // An active segment with no whole chunk (a crash right after a roll) goes: the tracking
    // snapshot it should start with is in the one before.
    let active = if active.count() == 0 && !segments.is_empty() {
        remove_segment(io, dir, &active)?;
        let previous = segments.pop().expect("invariant: not empty");
        open_active(io, dir, previous.first_offset, tail_check_bytes)?
    } else {
        active
    };
    segments.push(Arc::new(active));
    finish(segments)
}

/// Tracking, the end and the counts, once the segments are settled.
fn finish(segments: Vec<Arc<Segment>>) -> Result<Recovered, StoreError> {
    let active = segments.last().expect("invariant: a log has a segment");
    let tracking = recover_tracking(active)?;
    let mut last_chunk = None;
    for segment in segments.iter().rev() {
        last_chunk = last_user_chunk(segment)?;
        if last_chunk.is_some() {
            break;
        }
    }
    let next_offset = match active.record(active.count().saturating_sub(1))? {
        Some(record) if active.count() > 0 => record.next_offset(),
        _ => active.first_offset,
    };
    let chunks = segments.iter().map(|segment| segment.count() as u64).sum();
    Ok(Recovered {
        segments,
        next_offset,
        last_chunk,
        chunks,
        tracking,
    })
}

/// First offsets of the segment files, in order; index files without a segment go.
fn segment_offsets(io: &dyn Io, dir: &Path) -> Result<Vec<u64>, StoreError> {
    let listing = io
        .list(dir)
        .map_err(|error| StoreError::io("list the stream directory", dir, error))?;
    let parse = |name: &str, ext: &str| {
        name.strip_suffix(ext)
            .filter(|digits| digits.len() == 20)
            .and_then(|digits| digits.parse::<u64>().ok())
    };
    let mut offsets: Vec<u64> = listing
        .iter()
        .filter_map(|entry| parse(&entry.name, ".segment"))
        .collect();
    offsets.sort_unstable();
    for entry in &listing {
        if let Some(offset) = parse(&entry.name, ".index") {
            if offsets.binary_search(&offset).is_err() {
                let path = dir.join(&entry.name);
                tracing::warn!(
                    "stream log: removing {}, an index without its segment",
                    path.display()
                );
                io.remove(&path)
                    .map_err(|error| StoreError::io("remove", &path, error))?;
            }
        }
    }
    Ok(offsets)
}

/// A new, empty segment (both files with their headers).
pub(crate) fn create_segment(
    io: &dyn Io,
    dir: &Path,
    first_offset: u64,
) -> Result<Segment, StoreError> {
    let path = file_path(dir, first_offset, "segment");
    let file = io
        .create(&path)
        .map_err(|error| StoreError::io("create", &path, error))?;
    write_all_at(file.as_ref(), SEGMENT_MAGIC, 0)?;
    let index_path = file_path(dir, first_offset, "index");
    let index = io
        .create(&index_path)
        .map_err(|error| StoreError::io("create", &index_path, error))?;
    write_all_at(index.as_ref(), INDEX_MAGIC, 0)?;
    Ok(Segment::new(
        first_offset,
        file,
        index,
        Some(Vec::new()),
        0,
        FILE_HEADER_BYTES,
    ))
}

fn open_file(io: &dyn Io, path: &Path) -> Result<(Arc<dyn LogFile>, u64), StoreError> {
    let file = io
        .open(path)
        .map_err(|error| StoreError::io("open", path, error))?;
    let len = file
        .len()
        .map_err(|error| StoreError::io("stat", path, error))?;
    Ok((file, len))
}

/// The index file (created when missing), with its header checked; returns the number of
/// whole records in it.
fn open_index(
    io: &dyn Io,
    dir: &Path,
    first_offset: u64,
) -> Result<(Arc<dyn LogFile>, usize), StoreError> {
    let path = file_path(dir, first_offset, "index");
    let (index, len) = match io.open(&path) {
        Ok(index) => {
            let len = index
                .len()
                .map_err(|error| StoreError::io("stat", &path, error))?;
            (index, len)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            tracing::warn!("stream log: {} is missing; rebuilding it", path.display());
            let index = io
                .create(&path)
                .map_err(|error| StoreError::io("create", &path, error))?;
            (index, 0)
        }
        Err(error) => return Err(StoreError::io("open", &path, error)),
    };
    let mut header = [0u8; FILE_HEADER_BYTES as usize];
    if len < FILE_HEADER_BYTES
        || read_exact_at(index.as_ref(), &mut header, 0).is_err()
        || &header != INDEX_MAGIC
    {
        index
            .truncate(0)
            .map_err(|error| StoreError::io("truncate", &path, error))?;
        write_all_at(index.as_ref(), INDEX_MAGIC, 0)?;
        return Ok((index, 0));
    }
    Ok((
        index,
        ((len - FILE_HEADER_BYTES) / RECORD_BYTES as u64) as usize,
    ))
}

/// A sealed segment: trusted when its last index record ends where the file ends.
fn open_sealed(io: &dyn Io, dir: &Path, first_offset: u64) -> Result<Arc<Segment>, StoreError> {
    let (file, len) = open_file(io, &file_path(dir, first_offset, "segment"))?;
    let (index, count) = open_index(io, dir, first_offset)?;
    let segment = Segment::new(first_offset, file, index, None, count, len);
    let last = segment.record(count.wrapping_sub(1))?;
    let consistent = matches!(last, Some(record) if record.end() == len);
    if consistent {
        return Ok(Arc::new(segment));
    }
    tracing::warn!(
        "stream log: the index of {} does not match the segment; rebuilding it",
        segment.path().display()
    );
    let segment = Segment::new(
        first_offset,
        segment.file,
        segment.index,
        Some(Vec::new()),
        0,
        len,
    );
    scan_tail(&segment, len, 0)?;
    segment.seal();
    Ok(Arc::new(segment))
}

/// The active segment, its tail checked and cut at the first bad chunk.
fn open_active(
    io: &dyn Io,
    dir: &Path,
    first_offset: u64,
    tail_check_bytes: u64,
) -> Result<Segment, StoreError> {
    let path = file_path(dir, first_offset, "segment");
    let (file, mut len) = open_file(io, &path)?;
    let mut header = [0u8; FILE_HEADER_BYTES as usize];
    if len < FILE_HEADER_BYTES || read_exact_at(file.as_ref(), &mut header, 0).is_err() {
        file.truncate(0)
            .map_err(|error| StoreError::io("truncate", &path, error))?;
        write_all_at(file.as_ref(), SEGMENT_MAGIC, 0)?;
        len = FILE_HEADER_BYTES;
    } else if &header != SEGMENT_MAGIC {
        return Err(StoreError::Corrupt {
            file: path,
            offset: 0,
            what: "not a stream segment file (its header is not OSIL version 1)".to_owned(),
        });
    }
    let (index, count) = open_index(io, dir, first_offset)?;
    let segment = Segment::new(first_offset, file, index, None, count, len);
    segment.activate()?;
    // Records that do not follow on from the one before (a torn or zeroed index tail) go
    // before the binary search below, which needs them in order.
    let count = chained_records(&segment, len)?;
    // The tail to check: the chunks in its last tail_check_bytes, and at least the last one.
    let from = segment.partition_point(|record| record.position + tail_check_bytes < len)?;
    let from = from.min(count.saturating_sub(1));
    scan_tail(&segment, len, from)?;
    Ok(segment)
}

/// How many of the active segment's index records chain from its start (each chunk starts
/// where the one before ended, at the offset after it, within the file); drops the rest.
fn chained_records(segment: &Segment, len: u64) -> Result<usize, StoreError> {
    let mut records = Vec::with_capacity(segment.count());
    segment.read_records(0, segment.count(), &mut records)?;
    let (mut position, mut offset) = (FILE_HEADER_BYTES, segment.first_offset);
    let chained = records
        .iter()
        .take_while(|record| {
            let follows =
                record.position == position && record.first_offset == offset && record.end() <= len;
            position = record.end();
            offset = record.next_offset();
            follows
        })
        .count();
    if chained < records.len() {
        tracing::warn!(
            "stream log: the index of {} holds {} records past the last whole chunk it \
             indexes; checking the segment from there",
            segment.path().display(),
            records.len() - chained
        );
        segment.cut(chained, len);
    }
    Ok(chained)
}

/// Checks the chunks from record `from` on (from the segment's start when it has none),
/// rebuilding the index records of those that are whole and cutting the segment and index
/// at the first that is not.
fn scan_tail(segment: &Segment, len: u64, from: usize) -> Result<(), StoreError> {
    let (mut position, mut offset) = match segment.record(from)? {
        Some(record) => (record.position, record.first_offset),
        None if from == 0 => (FILE_HEADER_BYTES, segment.first_offset),
        None => {
            let previous = segment
                .record(from - 1)?
                .expect("invariant: records before count exist");
            (previous.end(), previous.next_offset())
        }
    };
    let from = from.min(segment.count());
    segment.cut(from, position);
    truncate_index(segment, from)?;
    while position < len {
        match check_chunk(segment, position, offset, len)? {
            Ok(record) => {
                write_all_at(
                    segment.index.as_ref(),
                    &record.encode(),
                    index_position(segment.count()),
                )?;
                position = record.end();
                offset = record.next_offset();
                segment.push(record, position);
            }
            Err(what) => {
                tracing::warn!(
                    "stream log: cutting {} at byte {position} (offset {offset}): {what}",
                    segment.path().display()
                );
                break;
            }
        }
    }
    if position < len {
        segment
            .file
            .truncate(position)
            .map_err(|error| StoreError::io("truncate", segment.path(), error))?;
    }
    Ok(())
}

pub(crate) fn index_position(record: usize) -> u64 {
    FILE_HEADER_BYTES + (record * RECORD_BYTES) as u64
}

pub(crate) fn truncate_index(segment: &Segment, count: usize) -> Result<(), StoreError> {
    segment
        .index
        .truncate(index_position(count))
        .map_err(|error| StoreError::io("truncate", segment.index.path(), error))
}

/// The chunk at `position`, checked: `Ok(Err(why))` when it is torn or corrupt.
fn check_chunk(
    segment: &Segment,
    position: u64,
    offset: u64,
    len: u64,
) -> Result<Result<IndexRecord, String>, StoreError> {
    let room = len - position;
    if room < chunk::HEADER_BYTES as u64 {
        return Ok(Err(format!(
            "{room} bytes left, a chunk header needs 48 (torn write)"
        )));
    }
    let mut header = [0u8; chunk::HEADER_BYTES];
    read_exact_at(segment.file.as_ref(), &mut header, position)?;
    let header = match Header::decode(&header) {
        Ok(header) if header.first_offset != offset => {
            return Ok(Err(format!(
                "chunk says offset {}, expected {offset}",
                header.first_offset
            )))
        }
        Ok(header) if header.total_bytes() > room => {
            return Ok(Err(format!(
                "chunk needs {} bytes, {room} left (torn write)",
                header.total_bytes()
            )))
        }
        Ok(header) => header,
        Err(what) => return Ok(Err(what)),
    };
    let mut bytes = vec![0u8; header.total_bytes() as usize];
    read_exact_at(segment.file.as_ref(), &mut bytes, position)?;
    if let Err(what) = chunk::validate(&bytes) {
        return Ok(Err(what));
    }
    // The CRC covers the data only: a user chunk's trailer is checked by parsing it.
    let trailer = &bytes[header.deliver_bytes() as usize..];
    if header.chunk_type == CHUNK_USER {
        if let Err(what) = Tracking::default().apply_delta(trailer, header.first_offset) {
            return Ok(Err(format!(
                "chunk {}: its trailer: {what}",
                header.first_offset
            )));
        }
    }
    Ok(Ok(IndexRecord {
        first_offset: header.first_offset,
        timestamp_ms: header.timestamp_ms,
        epoch: header.epoch,
        position,
        size: header.deliver_bytes() as u32,
        trailer: header.trailer_len,
        records: header.num_records,
        chunk_type: header.chunk_type,
    }))
}

/// Removes a segment's two files.
pub(crate) fn remove_segment(io: &dyn Io, dir: &Path, segment: &Segment) -> Result<(), StoreError> {
    for ext in ["segment", "index"] {
        let path = file_path(dir, segment.first_offset, ext);
        io.remove(&path)
            .map_err(|error| StoreError::io("remove", &path, error))?;
    }
    Ok(())
}

/// The tracking state as of the end of `segment` (the active one): its last snapshot chunk,
/// then the trailers of the user chunks and the delta chunks after it, in order.
pub(crate) fn recover_tracking(segment: &Segment) -> Result<Tracking, StoreError> {
    let mut tracking = Tracking::default();
    let mut records = Vec::new();
    segment.read_records(0, segment.count(), &mut records)?;
    // A snapshot holds the whole state: start at the last one.
    let from = records
        .iter()
        .rposition(|record| record.chunk_type == CHUNK_TRACKING_SNAPSHOT)
        .unwrap_or(0);
    let mut trailer = Vec::new();
    for record in &records[from..] {
        let applied = match record.chunk_type {
            CHUNK_USER if record.trailer == 0 => Ok(()),
            CHUNK_USER => {
                trailer.resize(record.trailer as usize, 0);
                let at = record.position + u64::from(record.size);
                read_exact_at(segment.file.as_ref(), &mut trailer, at)?;
                tracking.apply_delta(&trailer, record.first_offset)
            }
            kind => {
                let body = tracking_entry(segment, record)?;
                if kind == CHUNK_TRACKING_SNAPSHOT {
                    tracking.apply_snapshot(&body)
                } else {
                    debug_assert_eq!(kind, CHUNK_TRACKING_DELTA);
                    tracking.apply_delta(&body, record.first_offset)
                }
            }
        };
        applied.map_err(|what| StoreError::Corrupt {
            file: segment.path().to_path_buf(),
            offset: record.position,
            what: format!("tracking of chunk {}: {what}", record.first_offset),
        })?;
    }
    Ok(tracking)
}

/// The one entry of a tracking chunk.
fn tracking_entry(segment: &Segment, record: &IndexRecord) -> Result<bytes::Bytes, StoreError> {
    let (_, chunk) = segment.read_chunk(record)?;
    let entry = chunk.records().next();
    entry
        .unwrap_or_else(|| Ok((0, bytes::Bytes::new())))
        .map(|(_, body)| body)
}

/// First offset of the last user chunk of `segment`, read backwards from its end.
fn last_user_chunk(segment: &Segment) -> Result<Option<u64>, StoreError> {
    for at in (0..segment.count()).rev() {
        if let Some(record) = segment.record(at)? {
            if record.chunk_type == CHUNK_USER {
                return Ok(Some(record.first_offset));
            }
        }
    }
    Ok(None)
}
