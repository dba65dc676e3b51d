//! The stream log's chunk decoding on arbitrary bytes: `Chunk::records` on the input as a
//! chunk, then the input as the active segment (and, when the first byte says so, part of it
//! as its index) of a stream log opened on an in-memory disk. Open may refuse, never panic;
//! every chunk it then serves passes its CRC (a torn or corrupt tail is cut, never served),
//! its records decode or fail with an error, and the log takes a new chunk after them.
#![no_main]

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use warren_store::{
    write_all_at, Chunk, Entry, FaultyIo, Io, ReadStart, Retention, StreamLog, StreamLogConfig,
    StreamSync,
};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    records_of(rest);
    // The low bit asks for an index file; the other bits say where the segment ends.
    let split = if selector & 1 == 1 {
        (usize::from(selector >> 1) * rest.len() / 128).min(rest.len())
    } else {
        rest.len()
    };
    let (segment, index) = rest.split_at(split);
    open_and_read(segment, (selector & 1 == 1).then_some(index));
});

/// Decodes the input as one chunk, header fields from its first bytes.
fn records_of(bytes: &[u8]) {
    let field = |at: usize, len: usize| {
        bytes.get(at..at + len).map_or(0, |b| b.iter().fold(0u64, |n, x| n << 8 | u64::from(*x)))
    };
    let chunk = Chunk {
        first_offset: field(24, 8),
        num_entries: field(2, 2) as u16,
        num_records: field(4, 4) as u32,
        timestamp_ms: field(8, 8) as i64,
        epoch: field(16, 8),
        bytes: Bytes::copy_from_slice(bytes),
    };
    let mut expected = chunk.first_offset;
    for record in chunk.records() {
        match record {
            Ok((offset, body)) => {
                assert_eq!(offset, expected, "offsets follow on");
                assert!(body.len() <= bytes.len());
                expected += 1;
            }
            Err(_) => break,
        }
    }
}

fn open_and_read(segment: &[u8], index: Option<&[u8]>) {
    let io = FaultyIo::new();
    let dir = Path::new("/fuzz/stream");
    let mut files = vec![(dir.join("00000000000000000000.segment"), segment)];
    if let Some(index) = index {
        files.push((dir.join("00000000000000000000.index"), index));
    }
    io.create_dir_all(dir).expect("the in-memory disk creates directories");
    for (path, bytes) in files {
        let file = io.create(&path).expect("the in-memory disk creates files");
        write_all_at(&*file, b"OSIL\0\0\0\x01", 0).expect("the in-memory disk takes writes");
        write_all_at(&*file, bytes, 8).expect("the in-memory disk takes writes");
    }
    let config = StreamLogConfig {
        dir: dir.to_path_buf(),
        segment_bytes_max: 1 << 20,
        segment_chunks_max: 1000,
        retention: Retention::default(),
    };
    let sync = StreamSync::start(false).expect("no sync threads without fsync");
    let Ok(mut log) = StreamLog::open(Arc::new(io), config, sync) else {
        return;
    };
    let view = log.view();
    let mut reader = view.reader(ReadStart::First).expect("the in-memory disk reads");
    while let Ok(Some(chunk)) = reader.next_chunk() {
        let bloom = usize::from(chunk.bytes[44]);
        let crc = u32::from_be_bytes(chunk.bytes[32..36].try_into().expect("4 bytes"));
        assert_eq!(crc32(&chunk.bytes[48 + bloom..]), crc, "a served chunk passes its CRC");
        for record in chunk.records() {
            if record.is_err() {
                break;
            }
        }
    }
    let next = view.next_offset();
    let entries = [Entry::Simple(Bytes::from_static(b"after"))];
    let appended = log.append(&entries, 0, &[], Box::new(|_| {})).expect("the log goes on");
    assert_eq!(appended.first_offset, next);
}

/// CRC-32 (IEEE), bit by bit: an oracle independent of the log's own.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}
