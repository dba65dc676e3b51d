//! The stream log on a disk that fails on purpose: torn tails at every byte, a flipped
//! byte, failed fsyncs and writes. Every chunk told durable must survive; nothing torn or
//! corrupt may be served.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::log_test::{append, append_counted, config, dir, open, open_with, read_all, simple};
use super::*;
use crate::faulty::FaultyIo;
use crate::io::Io;

fn segment_path() -> std::path::PathBuf {
    dir().join("00000000000000000000.segment")
}

/// Makes everything written to the log's files so far durable (as an fsync of each would).
fn sync_all(io: &FaultyIo) {
    for entry in io.list(&dir()).unwrap() {
        io.open(&dir().join(&entry.name)).unwrap().sync().unwrap();
    }
}

/// Three durable chunks, then a fourth (unsynced) one; returns the fourth's bytes.
fn three_durable_then_one(io: &FaultyIo) -> (StreamLog, u64) {
    let mut log = open(io);
    let durable = Arc::new(AtomicU32::new(0));
    for n in 0..3 {
        let writer = [(Bytes::from_static(b"p"), n)];
        append_counted(&mut log, &simple(&["aa", "bbb"]), 1, &writer, &durable).unwrap();
    }
    sync_all(io);
    let before = log.view().stats().bytes;
    let writer = [(Bytes::from_static(b"p"), 3)];
    append_counted(&mut log, &simple(&["cccc", "d"]), 2, &writer, &durable).unwrap();
    let fourth_bytes = log.view().stats().bytes - before;
    (log, fourth_bytes)
}

#[test]
fn a_torn_last_chunk_is_cut_at_every_byte() {
    let (_, fourth_bytes) = three_durable_then_one(&FaultyIo::new());
    // Past the chunk's bytes too: the index record (48 bytes) tears on its own.
    for torn in 0..=fourth_bytes + 48 {
        let io = FaultyIo::new();
        let (log, _) = three_durable_then_one(&io);
        let after = io.crash(torn);
        drop(log);
        let mut log = open(&after);
        let records = read_all(&log.view(), ReadStart::First);
        let whole = torn >= fourth_bytes;
        assert_eq!(records.len(), if whole { 8 } else { 6 }, "torn at {torn}");
        assert_eq!(log.writer_sequence(b"p"), Some(if whole { 3 } else { 2 }));
        tracing::info!("the log goes on after the cut");
        append(&mut log, &["next"], 3);
        let next = read_all(&log.view(), ReadStart::Last);
        assert_eq!(next[0].1, "next", "torn at {torn}");
        drop(log);
        let log = open(&after);
        assert_eq!(
            read_all(&log.view(), ReadStart::First).len(),
            records.len() + 1
        );
    }
}

#[test]
fn a_flipped_byte_in_the_last_chunk_cuts_it() {
    let io = FaultyIo::new();
    let mut log = open(&io);
    append(&mut log, &["first"], 1);
    let second = append(&mut log, &["second"], 2);
    drop(log);
    let position_of_second_data = 8 + (48 + 4 + 5) + 48 + 4;
    let _ = second;
    io.flip_on_read(&segment_path(), position_of_second_data);
    let log = open(&io);
    let records = read_all(&log.view(), ReadStart::First);
    assert_eq!(records, vec![(0, "first".to_owned())]);
    assert_eq!(log.view().next_offset(), 1);
}

#[test]
fn a_failed_fsync_tells_false_and_stops_the_log() {
    let io = FaultyIo::new();
    let mut log = open_with(&io, config(&dir()), true);
    io.fail_next_syncs(1);
    let told = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let record = told.clone();
    let on_durable = Box::new(move |ok: bool| record.lock().push(ok));
    log.append(&simple(&["m"]), 1, &[], on_durable).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while told.lock().is_empty() {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(*told.lock(), vec![false]);
    let durable = Arc::new(AtomicU32::new(0));
    let error = append_counted(&mut log, &simple(&["n"]), 1, &[], &durable).unwrap_err();
    assert!(
        matches!(error, crate::StoreError::Poisoned { .. }),
        "{error}"
    );
}

#[test]
fn a_failed_write_poisons_the_log_and_names_the_file() {
    let io = FaultyIo::new();
    let mut log = open(&io);
    append(&mut log, &["fits"], 1);
    io.fill_disk_after(10);
    let durable = Arc::new(AtomicU32::new(0));
    let error = append_counted(&mut log, &simple(&["too big"]), 1, &[], &durable).unwrap_err();
    assert!(
        error.to_string().contains("00000000000000000000.segment"),
        "{error}"
    );
    assert_eq!(durable.load(Ordering::SeqCst), 0);
    assert_eq!(log.view().next_offset(), 1, "nothing published");
    let error = append_counted(&mut log, &simple(&["x"]), 1, &[], &durable).unwrap_err();
    assert!(
        matches!(error, crate::StoreError::Poisoned { .. }),
        "{error}"
    );
}

#[test]
fn a_crash_right_after_a_roll_keeps_the_tracking() {
    let io = FaultyIo::new();
    let mut cfg = config(&dir());
    cfg.segment_chunks_max = 1;
    let mut log = open_with(&io, cfg.clone(), false);
    let durable = Arc::new(AtomicU32::new(0));
    let writer = [(Bytes::from_static(b"p"), 5)];
    append_counted(&mut log, &simple(&["m"]), 1, &writer, &durable).unwrap();
    drop(log);
    tracing::info!("an empty newest segment, as if the broker died while rolling");
    for ext in ["segment", "index"] {
        let path = dir().join(format!("00000000000000000001.{ext}"));
        let file = io.create(&path).unwrap();
        file.write_at(&b"OSIL\0\0\0\x01"[..3], 0).unwrap();
    }
    let log = open_with(&io, cfg, false);
    assert_eq!(log.writer_sequence(b"p"), Some(5));
    assert_eq!(log.view().stats().segments, 1);
    assert_eq!(read_all(&log.view(), ReadStart::First).len(), 1);
}

#[test]
fn a_lost_sealed_index_is_rebuilt() {
    let io = FaultyIo::new();
    let mut cfg = config(&dir());
    cfg.segment_chunks_max = 2;
    let mut log = open_with(&io, cfg.clone(), false);
    for n in 0..5 {
        append(&mut log, &[&format!("m{n}")], n);
    }
    drop(log);
    io.remove(&dir().join("00000000000000000000.index"))
        .unwrap();
    let log = open_with(&io, cfg, false);
    assert_eq!(read_all(&log.view(), ReadStart::First).len(), 5);
    assert_eq!(log.view().resolve(ReadStart::Offset(1)), 1);
}

#[test]
fn a_zeroed_index_tail_does_not_cut_the_segment() {
    let io = FaultyIo::new();
    let mut log = open(&io);
    for n in 0..3 {
        append(&mut log, &[&format!("m{n}")], n);
    }
    append(&mut log, &[&"x".repeat(100)], 4); // ends more than the test tail window past its start
    drop(log);
    tracing::info!("the index grew by a record of zeros (a crash on a real filesystem)");
    let index = io.open(&dir().join("00000000000000000000.index")).unwrap();
    let len = index.len().unwrap();
    index.write_at(&[0u8; 48], len).unwrap();
    let log = open(&io);
    assert_eq!(read_all(&log.view(), ReadStart::First).len(), 4);
    assert_eq!(index.len().unwrap(), len, "the bad record was cut");
}

/// A segment of a few chunks of every kind, and where each chunk starts.
fn sample_segment(io: &FaultyIo) -> Vec<u8> {
    let mut log = open(io);
    let durable = Arc::new(AtomicU32::new(0));
    let mut batch = Vec::new();
    for record in ["sub", "batch"] {
        batch.extend_from_slice(&(record.len() as u32).to_be_bytes());
        batch.extend_from_slice(record.as_bytes());
    }
    let sub_batch = Entry::SubBatch {
        compression: 0,
        records: 2,
        uncompressed_len: batch.len() as u32,
        data: Bytes::from(batch),
    };
    let writer = [(Bytes::from_static(b"producer"), 9)];
    append_counted(&mut log, &simple(&["a", "bb", "ccc"]), 1, &writer, &durable).unwrap();
    log.store_offset("consumer", 2).unwrap();
    append_counted(&mut log, &[sub_batch], 2, &[], &durable).unwrap();
    append(&mut log, &["last one"], 3);
    io.contents(&segment_path()).unwrap()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Damage anywhere (a cut, a flipped byte, garbage appended), and the index lost: open
    /// never panics, serves only chunks that pass their CRC, and the log goes on.
    #[test]
    fn damaged_segments_open_and_serve_only_whole_chunks(
        cut in 0usize..400,
        flip in proptest::option::of((0usize..400, 0u8..8)),
        garbage in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
    ) {
        let mut segment = sample_segment(&FaultyIo::new());
        segment.truncate(segment.len().min(cut.max(8)));
        if let Some((at, bit)) = flip {
            if let Some(byte) = segment.get_mut(at) {
                *byte ^= 1 << bit;
            }
        }
        segment.extend_from_slice(&garbage);
        let io = FaultyIo::new();
        io.create_dir_all(&dir()).unwrap();
        let file = io.create(&segment_path()).unwrap();
        file.write_at(&segment, 0).unwrap();
        let Ok(mut log) = StreamLog::open(
            Arc::new(io.clone()),
            config(&dir()),
            StreamSync::start(false).unwrap(),
        ) else {
            return Ok(()); // a broken file header is refused, by name
        };
        let mut reader = log.view().reader(ReadStart::First).unwrap();
        let mut offset = 0;
        while let Some(chunk) = reader.next_chunk().unwrap() {
            let crc = u32::from_be_bytes(chunk.bytes[32..36].try_into().unwrap());
            proptest::prop_assert_eq!(crc32fast::hash(&chunk.bytes[48..]), crc);
            proptest::prop_assert!(chunk.first_offset >= offset);
            offset = chunk.first_offset + u64::from(chunk.num_records);
            for record in chunk.records() {
                record.unwrap();
            }
        }
        let next = log.view().next_offset();
        proptest::prop_assert_eq!(append(&mut log, &["after"], 4).first_offset, next);
    }
}
