//! Figures on the real filesystem, `#[ignore]`d (they write hundreds of MB to `$TMPDIR`).
//! Run optimised, without a release build:
//!
//! ```sh
//! CARGO_PROFILE_TEST_OPT_LEVEL=3 CARGO_PROFILE_DEV_OPT_LEVEL=3 \
//!   cargo test -p warren-store stream::bench -- --ignored --nocapture --test-threads 1
//! ```
//!
//! `WARREN_STREAM_OPEN_BYTES` sets the size of the stream `open` is timed on (default 2 GB).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;
use crate::io::FsIo;

fn fs_config(dir: &std::path::Path) -> StreamLogConfig {
    StreamLogConfig {
        dir: dir.to_path_buf(),
        segment_bytes_max: 500_000_000,
        segment_chunks_max: 256_000,
        retention: Retention::default(),
    }
}

fn open_fs(dir: &std::path::Path) -> StreamLog {
    StreamLog::open(
        Arc::new(FsIo),
        fs_config(dir),
        StreamSync::start(false).unwrap(),
    )
    .unwrap()
}

/// Appends chunks of `per_chunk` copies of `message` until `messages` are written; returns
/// the time it took.
fn fill(log: &mut StreamLog, message: &'static [u8], per_chunk: usize, messages: u64) -> Duration {
    let entries: Vec<Entry> = (0..per_chunk)
        .map(|_| Entry::Simple(Bytes::from_static(message)))
        .collect();
    let started = Instant::now();
    let mut written = 0;
    while written < messages {
        log.append(&entries, 1, &[], Box::new(|_| {})).unwrap();
        written += per_chunk as u64;
    }
    started.elapsed()
}

#[test]
#[ignore = "a measurement: writes ~1 GB to $TMPDIR"]
fn append_and_read_throughput_of_12_byte_messages() {
    let dir = tempfile::tempdir().unwrap();
    for per_chunk in [100, 1000] {
        let path = dir.path().join(format!("chunks-{per_chunk}"));
        let mut log = open_fs(&path);
        let messages = 20_000_000;
        let took = fill(&mut log, b"hello world!", per_chunk, messages);
        println!(
            "append: {per_chunk} x 12 B per chunk: {:.2} M msg/s ({messages} in {took:.2?})",
            messages as f64 / took.as_secs_f64() / 1e6
        );
        let view = log.view();
        let started = Instant::now();
        let mut reader = view.reader(ReadStart::First).unwrap();
        let (mut chunks, mut records) = (0u64, 0u64);
        while let Some(chunk) = reader.next_chunk().unwrap() {
            chunks += 1;
            records += u64::from(chunk.num_records);
        }
        let took = started.elapsed();
        assert_eq!(records, messages);
        println!(
            "read chunks from first: {:.2} M msg/s ({chunks} chunks in {took:.2?})",
            records as f64 / took.as_secs_f64() / 1e6
        );
        let started = Instant::now();
        let mut reader = view.reader(ReadStart::First).unwrap();
        let mut bytes = 0u64;
        while let Some(chunk) = reader.next_chunk().unwrap() {
            for record in chunk.records() {
                bytes += record.unwrap().1.len() as u64;
            }
        }
        let took = started.elapsed();
        assert_eq!(bytes, messages * 12);
        println!(
            "read records from first: {:.2} M msg/s ({took:.2?})",
            messages as f64 / took.as_secs_f64() / 1e6
        );
        log.delete().unwrap();
    }
}

#[test]
#[ignore = "a measurement: writes WARREN_STREAM_OPEN_BYTES (2 GB) to $TMPDIR"]
fn open_time_of_a_large_stream() {
    let bytes: u64 = std::env::var("WARREN_STREAM_OPEN_BYTES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(2_000_000_000);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big");
    let mut log = open_fs(&path);
    // 100-byte messages, 100 per chunk: ~10 KB chunks, many index records per segment.
    static MESSAGE: [u8; 100] = [b'm'; 100];
    let took = fill(&mut log, &MESSAGE, 100, bytes / 104);
    let stats = log.view().stats();
    println!(
        "wrote {} MB in {} segments, {} chunks, in {took:.2?}",
        stats.bytes / 1_000_000,
        stats.segments,
        stats.chunks
    );
    drop(log);
    let started = Instant::now();
    let log = open_fs(&path);
    let took = started.elapsed();
    assert_eq!(log.view().stats(), stats);
    println!("open (page cache warm): {took:.2?}");
    assert!(took < Duration::from_secs(2), "open took {took:?}");
    log.delete().unwrap();
}
