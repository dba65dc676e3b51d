//! The stream log on the in-memory disk: append and read back, lookups, tracking across
//! reopen and segment rolls, retention, truncation, raw chunks.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::faulty::FaultyIo;

pub(crate) fn config(dir: &Path) -> StreamLogConfig {
    StreamLogConfig {
        dir: dir.to_path_buf(),
        segment_bytes_max: 1 << 20,
        segment_chunks_max: 1000,
        retention: Retention::default(),
    }
}

pub(crate) fn dir() -> PathBuf {
    PathBuf::from("/streams/s1")
}

/// Opens checking only the last 64 bytes of the active segment chunk by chunk (at least its
/// last chunk), so that tests open segments whose head is trusted and whose tail is checked.
pub(crate) fn open_with(io: &FaultyIo, config: StreamLogConfig, fsync: bool) -> StreamLog {
    let sync = StreamSync::start(fsync).unwrap();
    StreamLog::open_checking(Arc::new(io.clone()), config, sync, 64).unwrap()
}

pub(crate) fn open(io: &FaultyIo) -> StreamLog {
    open_with(io, config(&dir()), false)
}

pub(crate) fn simple(messages: &[&str]) -> Vec<Entry> {
    messages
        .iter()
        .map(|message| Entry::Simple(Bytes::copy_from_slice(message.as_bytes())))
        .collect()
}

/// Appends and counts the chunks told durable in `durable`.
pub(crate) fn append_counted(
    log: &mut StreamLog,
    entries: &[Entry],
    timestamp_ms: i64,
    writers: &[(Bytes, u64)],
    durable: &Arc<AtomicU32>,
) -> Result<Appended, crate::StoreError> {
    let durable = durable.clone();
    let on_durable = Box::new(move |ok: bool| {
        if ok {
            durable.fetch_add(1, Ordering::SeqCst);
        }
    });
    log.append(entries, timestamp_ms, writers, on_durable)
}

pub(crate) fn append(log: &mut StreamLog, messages: &[&str], timestamp_ms: i64) -> Appended {
    let durable = Arc::new(AtomicU32::new(0));
    let appended = append_counted(log, &simple(messages), timestamp_ms, &[], &durable).unwrap();
    assert_eq!(
        durable.load(Ordering::SeqCst),
        1,
        "without fsync, durable at once"
    );
    appended
}

/// Every record a reader from `start` reads, as text.
pub(crate) fn read_all(view: &LogView, start: ReadStart) -> Vec<(u64, String)> {
    let mut reader = view.reader(start).unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        assert_eq!(chunk.bytes[0], 0x50, "magic 5, version 0");
        for record in chunk.records() {
            let (offset, body) = record.unwrap();
            out.push((offset, String::from_utf8(body.to_vec()).unwrap()));
        }
    }
    assert_eq!(reader.position(), view.next_offset());
    out
}

fn texts(records: &[(u64, String)]) -> Vec<&str> {
    records.iter().map(|(_, text)| text.as_str()).collect()
}

#[test]
fn append_and_read_back_in_osiris_format() {
    tracing::info!("simple entries and an uncompressed sub-batch");
    let io = FaultyIo::new();
    let mut log = open(&io);
    let first = append(&mut log, &["a", "bb"], 1000);
    assert_eq!((first.first_offset, first.records), (0, 2));
    let mut batch = Vec::new();
    for record in ["x", "yz"] {
        batch.extend_from_slice(&(record.len() as u32).to_be_bytes());
        batch.extend_from_slice(record.as_bytes());
    }
    let entries = [
        Entry::SubBatch {
            compression: 0,
            records: 2,
            uncompressed_len: batch.len() as u32,
            data: Bytes::from(batch),
        },
        Entry::Simple(Bytes::from_static(b"c")),
    ];
    let durable = Arc::new(AtomicU32::new(0));
    let second = append_counted(&mut log, &entries, 2000, &[], &durable).unwrap();
    assert_eq!((second.first_offset, second.records), (2, 3));
    let view = log.view();
    assert_eq!((view.first_offset(), view.next_offset()), (0, 5));
    assert_eq!(view.last_chunk_offset(), Some(2));
    let all = read_all(&view, ReadStart::First);
    let expected = [(0, "a"), (1, "bb"), (2, "x"), (3, "yz"), (4, "c")];
    let expected: Vec<_> = expected.iter().map(|(o, t)| (*o, t.to_string())).collect();
    assert_eq!(all, expected);

    tracing::info!("the chunk is exactly header + entries, as a Deliver frame carries it");
    let mut reader = view.reader(ReadStart::First).unwrap();
    let chunk = reader.next_chunk().unwrap().unwrap();
    assert_eq!(chunk.bytes.len(), 48 + 4 + 1 + 4 + 2);
    assert_eq!(chunk.bytes[1], 0, "user chunk");
    assert_eq!(&chunk.bytes[2..4], &2u16.to_be_bytes());
    assert_eq!(&chunk.bytes[8..16], &1000i64.to_be_bytes());
    let crc = crc32fast::hash(&chunk.bytes[48..]);
    assert_eq!(&chunk.bytes[32..36], &crc.to_be_bytes());
    assert_eq!(
        (chunk.num_entries, chunk.num_records, chunk.timestamp_ms),
        (2, 2, 1000)
    );

    tracing::info!("the same after reopening");
    drop(reader);
    drop(log);
    let log = open(&io);
    assert_eq!(read_all(&log.view(), ReadStart::First), expected);
    let stats = log.view().stats();
    assert_eq!((stats.segments, stats.chunks, stats.next_offset), (1, 2, 5));
    assert_eq!(stats.first_timestamp_ms, Some(1000));
}

#[test]
fn compressed_sub_batches_are_refused_by_name() {
    let io = FaultyIo::new();
    let mut log = open(&io);
    let entries = [Entry::SubBatch {
        compression: 4,
        records: 3,
        uncompressed_len: 100,
        data: Bytes::from_static(b"zstd bytes"),
    }];
    let durable = Arc::new(AtomicU32::new(0));
    append_counted(&mut log, &entries, 1, &[], &durable).unwrap();
    assert_eq!(log.view().next_offset(), 3);
    let chunk = log
        .view()
        .reader(ReadStart::First)
        .unwrap()
        .next_chunk()
        .unwrap()
        .unwrap();
    let error = chunk.records().next().unwrap().unwrap_err().to_string();
    assert!(error.contains("zstd"), "{error}");
    assert_eq!(
        chunk.records().count(),
        1,
        "the iterator stops after its error"
    );
}

/// A log of 10 chunks of 3 records at timestamps 100, 200, ..., 1000, in segments of 2
/// chunks.
fn ten_chunks(io: &FaultyIo) -> StreamLog {
    let mut config = config(&dir());
    config.segment_chunks_max = 2;
    let mut log = open_with(io, config, false);
    for n in 0..10 {
        let a = format!("{n}a");
        let (b, c) = (format!("{n}b"), format!("{n}c"));
        append(&mut log, &[&a, &b, &c], (n + 1) * 100);
    }
    log
}

fn check_lookups(view: &LogView) {
    assert_eq!(view.resolve(ReadStart::First), 0);
    assert_eq!(view.resolve(ReadStart::Next), 30);
    assert_eq!(view.resolve(ReadStart::Last), 27);
    assert_eq!(view.resolve(ReadStart::Offset(0)), 0);
    assert_eq!(
        view.resolve(ReadStart::Offset(14)),
        12,
        "the chunk that holds 14"
    );
    assert_eq!(view.resolve(ReadStart::Offset(15)), 15);
    assert_eq!(view.resolve(ReadStart::Offset(29)), 27);
    assert_eq!(view.resolve(ReadStart::Offset(500)), 30);
    assert_eq!(view.resolve(ReadStart::Timestamp(0)), 0);
    assert_eq!(view.resolve(ReadStart::Timestamp(100)), 0);
    assert_eq!(view.resolve(ReadStart::Timestamp(101)), 3);
    assert_eq!(view.resolve(ReadStart::Timestamp(550)), 15);
    assert_eq!(view.resolve(ReadStart::Timestamp(1000)), 27);
    assert_eq!(view.resolve(ReadStart::Timestamp(1001)), 30);
    let from_14 = read_all(view, ReadStart::Offset(14));
    assert_eq!(from_14.first().unwrap(), &(12, "4a".to_owned()));
    assert_eq!(from_14.len(), 18);
    let last = read_all(view, ReadStart::Last);
    assert_eq!(texts(&last), ["9a", "9b", "9c"]);
    assert!(read_all(view, ReadStart::Next).is_empty());
}

#[test]
fn lookups_by_offset_and_timestamp_across_segments() {
    let io = FaultyIo::new();
    let log = ten_chunks(&io);
    assert_eq!(log.view().stats().segments, 5);
    tracing::info!("sealed segments from memory-then-disk, the active one in memory");
    check_lookups(&log.view());
    drop(log);
    tracing::info!("after reopening: sealed segments searched on disk");
    let log = ten_chunks_reopened(&io);
    check_lookups(&log.view());
    assert_eq!(read_all(&log.view(), ReadStart::First).len(), 30);
}

fn ten_chunks_reopened(io: &FaultyIo) -> StreamLog {
    let mut config = config(&dir());
    config.segment_chunks_max = 2;
    open_with(io, config, false)
}

#[test]
fn a_reader_follows_the_writer_across_segments() {
    let io = FaultyIo::new();
    let mut config = config(&dir());
    config.segment_chunks_max = 2;
    let mut log = open_with(&io, config, false);
    let view = log.view();
    let mut reader = view.reader(ReadStart::Next).unwrap();
    assert!(reader.next_chunk().unwrap().is_none());
    for n in 0..7u64 {
        append(&mut log, &[&n.to_string()], 1);
        let chunk = reader.next_chunk().unwrap().expect("the new chunk");
        assert_eq!(chunk.first_offset, n);
        assert!(reader.next_chunk().unwrap().is_none(), "caught up");
    }
    assert_eq!(reader.position(), 7);
}

#[test]
fn tracking_survives_reopen_rolls_and_retention() {
    let io = FaultyIo::new();
    let mut config = config(&dir());
    config.segment_chunks_max = 2;
    let mut log = open_with(&io, config.clone(), false);
    let durable = Arc::new(AtomicU32::new(0));
    let writer = Bytes::from_static(b"producer-1");
    append_counted(
        &mut log,
        &simple(&["m1"]),
        1,
        &[(writer.clone(), 7)],
        &durable,
    )
    .unwrap();
    log.store_offset("consumer-1", 0).unwrap();
    assert_eq!(log.writer_sequence(b"producer-1"), Some(7));
    assert_eq!(log.tracked_offset("consumer-1"), Some(0));
    assert_eq!(log.writer_sequence(b"other"), None);
    assert_eq!(
        log.view().next_offset(),
        2,
        "the tracking chunk takes an offset"
    );
    assert_eq!(log.view().last_chunk_offset(), Some(0));
    tracing::info!("many more chunks: segments roll, each starting with a snapshot");
    for n in 0..9 {
        append(&mut log, &[&format!("x{n}")], 2);
    }
    let writer2 = Bytes::from_static(b"producer-2");
    append_counted(&mut log, &simple(&["m2"]), 3, &[(writer2, 99)], &durable).unwrap();
    log.store_offset("consumer-1", 5).unwrap();
    log.set_retention(Retention {
        max_bytes: Some(1),
        max_age_ms: None,
    });
    let removed = log.apply_retention(10).unwrap();
    assert!(removed >= 5, "removed {removed}");
    assert_eq!(log.view().stats().segments, 1, "the newest stays");
    drop(log);
    let log = open_with(&io, config, false);
    assert_eq!(log.writer_sequence(b"producer-1"), Some(7));
    assert_eq!(log.writer_sequence(b"producer-2"), Some(99));
    assert_eq!(log.tracked_offset("consumer-1"), Some(5));
    let tracking = log.tracking();
    assert_eq!(tracking.offsets, [("consumer-1".to_string(), 5)]);
    assert_eq!(
        tracking.writers,
        [
            ("producer-1".to_string(), 7),
            ("producer-2".to_string(), 99)
        ],
        "sorted by reference"
    );
    let texts = read_all(&log.view(), ReadStart::First);
    assert!(
        texts.iter().all(|(_, text)| !text.is_empty()),
        "no tracking chunk served"
    );
}

#[test]
fn retention_by_size_and_age_keeps_the_newest_segment() {
    let io = FaultyIo::new();
    let mut log = ten_chunks(&io);
    let view = log.view();
    let mut behind = view.reader(ReadStart::First).unwrap();
    let before = view.stats().bytes;
    tracing::info!("age: the segments whose last chunk is older than 450 ms at t=1000");
    log.set_retention(Retention {
        max_bytes: None,
        max_age_ms: Some(450),
    });
    assert_eq!(log.apply_retention(1000).unwrap(), 2, "chunks at 100..400");
    assert_eq!(view.first_offset(), 12);
    assert_eq!(view.resolve(ReadStart::First), 12);
    assert_eq!(view.resolve(ReadStart::Offset(3)), 12);
    let chunk = behind.next_chunk().unwrap().unwrap();
    assert_eq!(
        chunk.first_offset, 12,
        "a reader behind the first offset jumps to it"
    );
    tracing::info!("size: at most two segments' worth");
    let per_segment = before / 5;
    log.set_retention(Retention {
        max_bytes: Some(per_segment * 2),
        max_age_ms: None,
    });
    assert_eq!(log.apply_retention(1000).unwrap(), 1);
    assert_eq!(view.stats().segments, 2);
    assert_eq!(view.first_offset(), 18);
    tracing::info!("everything too old: the newest segment stays anyway");
    log.set_retention(Retention {
        max_bytes: None,
        max_age_ms: Some(1),
    });
    assert_eq!(log.apply_retention(1_000_000).unwrap(), 1);
    assert_eq!(view.stats().segments, 1);
    assert_eq!(read_all(&view, ReadStart::First).len(), 6);
    assert_eq!(log.apply_retention(1_000_000).unwrap(), 0);
}

#[test]
fn truncate_to_a_chunk_boundary() {
    let io = FaultyIo::new();
    let mut log = ten_chunks(&io);
    let view = log.view();
    let error = log.truncate(13).unwrap_err().to_string();
    assert!(error.contains("inside a chunk"), "{error}");
    assert!(log.truncate(31).is_err());
    tracing::info!("inside a segment");
    log.truncate(15).unwrap();
    assert_eq!(view.next_offset(), 15);
    assert_eq!(view.last_chunk_offset(), Some(12));
    assert_eq!(read_all(&view, ReadStart::First).len(), 15);
    tracing::info!("at a segment's start: that segment goes");
    log.truncate(12).unwrap();
    assert_eq!((view.next_offset(), view.stats().segments), (12, 2));
    append(&mut log, &["after"], 5000);
    let all = read_all(&view, ReadStart::First);
    assert_eq!(all.last().unwrap(), &(12, "after".to_owned()));
    drop(log);
    let log = ten_chunks_reopened(&io);
    assert_eq!(read_all(&log.view(), ReadStart::First), all);
    let mut log = log;
    log.truncate(0).unwrap();
    assert_eq!(
        (log.view().next_offset(), log.view().stats().chunks),
        (0, 0)
    );
}

#[test]
fn append_raw_round_trips_chunks_byte_for_byte() {
    let io = FaultyIo::new();
    let mut source = open(&io);
    append(&mut source, &["one", "two"], 10);
    let durable = Arc::new(AtomicU32::new(0));
    let writer = (Bytes::from_static(b"p"), 41);
    append_counted(&mut source, &simple(&["three"]), 20, &[writer], &durable).unwrap();
    source.store_offset("c", 1).unwrap();
    let segment = io
        .contents(&dir().join("00000000000000000000.segment"))
        .unwrap();
    let mut chunks = Vec::new();
    let mut at = 8;
    while at < segment.len() {
        let header = chunk::Header::decode(&segment[at..]).unwrap();
        let end = at + header.total_bytes() as usize;
        chunks.push(segment[at..end].to_vec());
        at = end;
    }
    assert_eq!(chunks.len(), 3);
    let mut copy = open_with(&io, config(Path::new("/streams/copy")), false);
    for chunk in &chunks {
        copy.append_raw(chunk).unwrap();
    }
    let copied = io.contents(Path::new("/streams/copy/00000000000000000000.segment"));
    assert_eq!(copied.unwrap(), segment, "byte for byte");
    assert_eq!(copy.writer_sequence(b"p"), Some(41));
    assert_eq!(copy.tracked_offset("c"), Some(1));
    let error = copy.append_raw(&chunks[0]).unwrap_err().to_string();
    assert!(error.contains("starts at offset 0"), "{error}");
    let mut bad = chunks[0].clone();
    *bad.last_mut().unwrap() ^= 1;
    assert!(copy
        .append_raw(&bad)
        .unwrap_err()
        .to_string()
        .contains("CRC"));
    assert_eq!(read_all(&copy.view(), ReadStart::First).len(), 3);
}

#[test]
fn bad_input_is_refused_not_written() {
    let io = FaultyIo::new();
    let mut log = open(&io);
    let durable = Arc::new(AtomicU32::new(0));
    assert!(append_counted(&mut log, &[], 1, &[], &durable).is_err());
    let long = (Bytes::from(vec![b'p'; 256]), 1);
    let error = append_counted(&mut log, &simple(&["m"]), 1, &[long], &durable).unwrap_err();
    assert!(error.to_string().contains("shorter reference"), "{error}");
    assert!(log.store_offset("", 1).is_err());
    assert_eq!(log.view().next_offset(), 0);
    append(&mut log, &["still fine"], 1);
}

#[test]
fn delete_removes_every_file() {
    let io = FaultyIo::new();
    let log = ten_chunks(&io);
    log.delete().unwrap();
    use crate::io::Io;
    assert!(io.list(&dir()).unwrap().is_empty());
}

#[test]
fn the_writer_and_readers_cross_threads() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<StreamLog>();
    send::<LogReader>();
    send_sync::<LogView>();
    send_sync::<StreamSync>();
    tracing::info!("a reader on another thread sees every chunk the writer commits");
    let io = FaultyIo::new();
    let mut config = config(&dir());
    config.segment_chunks_max = 3;
    let mut log = open_with(&io, config, false);
    let view = log.view();
    let reader = std::thread::spawn(move || {
        let mut reader = view.reader(ReadStart::First).unwrap();
        let mut seen = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while seen < 200 && std::time::Instant::now() < deadline {
            match reader.next_chunk().unwrap() {
                Some(chunk) => {
                    assert_eq!(chunk.first_offset, seen);
                    seen += u64::from(chunk.num_records);
                }
                None => std::thread::yield_now(),
            }
        }
        seen
    });
    for n in 0..100 {
        append(&mut log, &[&format!("{n}"), "x"], n);
    }
    assert_eq!(reader.join().unwrap(), 200);
}

#[test]
fn with_fsync_a_chunk_is_durable_after_the_group_commit_synced_it() {
    let io = FaultyIo::new();
    let mut log = open_with(&io, config(&dir()), true);
    assert!(StreamSync::start(true).unwrap().fsync());
    let durable = Arc::new(AtomicU32::new(0));
    for _ in 0..5 {
        append_counted(&mut log, &simple(&["m"]), 1, &[], &durable).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while durable.load(Ordering::SeqCst) < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "the group commit stalled"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(io.syncs() >= 1);
    tracing::info!("what was told durable survives a crash that tears everything else");
    let after = io.crash(0);
    drop(log);
    let log = open(&after);
    assert_eq!(read_all(&log.view(), ReadStart::First).len(), 5);
}

#[test]
fn a_chunk_whose_offsets_pass_2_pow_64_is_corrupt_not_a_panic() {
    let io = FaultyIo::new();
    let mut log = open(&io);
    append(&mut log, &["a", "b"], 1);
    let mut chunk = log
        .view()
        .reader(ReadStart::First)
        .unwrap()
        .next_chunk()
        .unwrap()
        .unwrap();
    chunk.first_offset = u64::MAX - 1; // what the stream_chunk fuzz target first found
    let error = chunk.records().next().unwrap().unwrap_err().to_string();
    assert!(error.contains("2^64"), "{error}");
}

#[test]
fn periodic_snapshots_bound_what_open_reads_and_keep_the_state() {
    let io = FaultyIo::new();
    let mut log = open(&io);
    log.snapshot_interval_chunks = 8;
    let durable = Arc::new(AtomicU32::new(0));
    log.store_offset("consumer", 3).unwrap();
    for n in 0..20u64 {
        let writer = [(Bytes::from(format!("p{}", n % 3)), n)];
        append_counted(&mut log, &simple(&["m"]), 1, &writer, &durable).unwrap();
    }
    let view = log.view();
    let chunks = view.stats().chunks;
    assert_eq!(chunks, 1 + 20 + 2, "a snapshot after every 8 user chunks");
    assert_eq!(
        view.next_offset(),
        chunks,
        "each chunk takes one offset here"
    );
    let records = read_all(&view, ReadStart::First);
    assert_eq!(records.len(), 20, "snapshots are not served");
    assert_eq!(view.last_chunk_offset(), Some(view.next_offset() - 1));
    drop(log);
    let log = open(&io);
    assert_eq!(log.writer_sequence(b"p0"), Some(18));
    assert_eq!(log.writer_sequence(b"p1"), Some(19));
    assert_eq!(log.writer_sequence(b"p2"), Some(17));
    assert_eq!(log.tracked_offset("consumer"), Some(3));
}

#[test]
fn a_reader_past_a_truncation_reads_what_is_written_after_it() {
    let io = FaultyIo::new();
    let mut log = ten_chunks(&io);
    let view = log.view();
    let mut reader = view.reader(ReadStart::Next).unwrap();
    assert!(reader.next_chunk().unwrap().is_none());
    assert_eq!(reader.position(), 30);
    log.truncate(15).unwrap();
    append(&mut log, &["new"], 2000);
    let chunk = reader
        .next_chunk()
        .unwrap()
        .expect("the chunk written after the cut");
    assert_eq!(chunk.first_offset, 15);
    assert_eq!(chunk.records().next().unwrap().unwrap().1, "new");
}
