//! Reading the osiris chunk of a Deliver frame: the record count from its header, and each
//! record's latency stamp, without copying or allocating.
//!
//! ```text
//! header (48 bytes): MagicVersion:u8 ChunkType:u8 NumEntries:u16 NumRecords:u32
//!   Timestamp:i64 Epoch:u64 ChunkFirstOffset:u64 ChunkCrc:i32 DataLength:u32
//!   TrailerLength:u32 BloomSize:u8 Reserved:u24   (before 3.13: Reserved:u32, no Bloom)
//! then BloomSize bytes of Bloom filter, then DataLength bytes of entries:
//!   simple entry    => 0:1 Size:31 Record
//!   sub-entry batch => 1:1 Compression:3 Reserved:4 Records:u16 UncompressedLength:u32
//!                      Length:u32 (Size:u32 Record)*Records (when Compression is 0)
//! ```

use warren_proto::amqp10::message::{Body, Sections};

use crate::body::Stamp;
use crate::error::PerfError;

pub const HEADER_BYTES: usize = 48;
/// The high nibble of the first byte of every osiris chunk.
const MAGIC: u8 = 0x5;

/// Called with each record's bytes.
pub type OnRecord<'a> = dyn FnMut(&[u8]) + 'a;

/// What a chunk's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkInfo {
    pub chunk_type: u8,
    pub entries: u16,
    pub records: u32,
    pub first_offset: u64,
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn malformed(why: &str) -> PerfError {
    PerfError::Protocol(format!(
        "a Deliver frame's osiris chunk is malformed: {why}"
    ))
}

/// Reads the header; with `on_record`, calls it with each record's bytes (a compressed
/// sub-entry batch is skipped: its records are counted by the header only).
pub fn read_chunk(
    chunk: &[u8],
    mut on_record: Option<&mut OnRecord>,
) -> Result<ChunkInfo, PerfError> {
    let header = chunk
        .get(..HEADER_BYTES)
        .ok_or_else(|| malformed(&format!("{} bytes, less than a header", chunk.len())))?;
    if header[0] >> 4 != MAGIC {
        return Err(malformed(&format!(
            "magic/version byte 0x{:02x}",
            header[0]
        )));
    }
    let info = ChunkInfo {
        chunk_type: header[1],
        entries: u16_at(header, 2).unwrap_or(0),
        records: u32_at(header, 4).unwrap_or(0),
        first_offset: u64::from_be_bytes(header[24..32].try_into().unwrap_or_default()),
    };
    let data_len = u32_at(header, 36).unwrap_or(0) as usize;
    let data_at = HEADER_BYTES + usize::from(header[44]);
    let data = chunk
        .get(data_at..data_at + data_len)
        .ok_or_else(|| malformed(&format!("data of {data_len} bytes past the frame's end")))?;
    if let Some(on_record) = on_record.as_mut() {
        walk_entries(data, info.entries, *on_record)?;
    }
    Ok(info)
}

fn walk_entries(data: &[u8], entries: u16, on_record: &mut OnRecord) -> Result<(), PerfError> {
    let mut at = 0;
    for _ in 0..entries {
        let head = u32_at(data, at).ok_or_else(|| malformed("an entry past the data's end"))?;
        if head & 0x8000_0000 == 0 {
            let size = head as usize;
            let record = data
                .get(at + 4..at + 4 + size)
                .ok_or_else(|| malformed("a record past the data's end"))?;
            on_record(record);
            at += 4 + size;
            continue;
        }
        let compression = (head >> 28) & 0x7;
        let records = u16_at(data, at + 1).ok_or_else(|| malformed("a short sub-entry"))?;
        let length = u32_at(data, at + 7).ok_or_else(|| malformed("a short sub-entry"))?;
        let batch = data
            .get(at + 11..at + 11 + length as usize)
            .ok_or_else(|| malformed("a sub-entry past the data's end"))?;
        if compression == 0 {
            let mut inner = 0;
            for _ in 0..records {
                let size = u32_at(batch, inner).ok_or_else(|| malformed("a short sub-entry"))?;
                let record = batch
                    .get(inner + 4..inner + 4 + size as usize)
                    .ok_or_else(|| malformed("a record past its sub-entry's end"))?;
                on_record(record);
                inner += 4 + size as usize;
            }
        }
        at += 11 + length as usize;
    }
    Ok(())
}

/// The stamp in a message: the body of its data section (fast path for the one-section
/// messages this tool and RabbitMQ's clients send; any other message is decoded).
pub fn stamp_of_message(message: &[u8]) -> Option<Stamp> {
    match message.get(..4)? {
        [0x00, 0x53, 0x75, 0xa0] => return Stamp::read(message.get(5..)?),
        [0x00, 0x53, 0x75, 0xb0] => return Stamp::read(message.get(8..)?),
        _ => {}
    }
    let bytes = bytes::Bytes::copy_from_slice(message);
    match Sections::decode(&bytes).ok()?.body {
        Body::Data(chunks) => Stamp::read(chunks.first()?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk as osiris writes it, around `entries` (already encoded) of `records` records.
    pub fn chunk(entries: &[Vec<u8>], records: u32, first_offset: u64) -> Vec<u8> {
        let data: Vec<u8> = entries.concat();
        let mut out = vec![0x50, 0];
        out.extend_from_slice(&(entries.len() as u16).to_be_bytes());
        out.extend_from_slice(&records.to_be_bytes());
        out.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        out.extend_from_slice(&1u64.to_be_bytes());
        out.extend_from_slice(&first_offset.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0]);
        out.extend_from_slice(&data);
        out
    }

    fn message(sequence: u32, sent_ns: u64) -> Vec<u8> {
        let mut body = [0u8; 12];
        Stamp {
            sequence,
            sent_ns,
            producer: 0,
        }
        .write(&mut body);
        let mut m = vec![0x00, 0x53, 0x75, 0xa0, 12];
        m.extend_from_slice(&body);
        m
    }

    fn simple(record: &[u8]) -> Vec<u8> {
        let mut e = (record.len() as u32).to_be_bytes().to_vec();
        e.extend_from_slice(record);
        e
    }

    #[test]
    fn simple_and_sub_entries_give_every_record() {
        let mut batch = Vec::new();
        for i in 1..3 {
            batch.extend_from_slice(&simple(&message(i, 10 + u64::from(i))));
        }
        let mut sub = vec![0x80, 0, 2];
        sub.extend_from_slice(&(batch.len() as u32).to_be_bytes());
        sub.extend_from_slice(&(batch.len() as u32).to_be_bytes());
        sub.extend_from_slice(&batch);
        let bytes = chunk(&[simple(&message(0, 10)), sub], 3, 42);
        let mut seen = Vec::new();
        let info = read_chunk(
            &bytes,
            Some(&mut |record: &[u8]| seen.push(stamp_of_message(record).unwrap())),
        )
        .unwrap();
        assert_eq!((info.entries, info.records, info.first_offset), (2, 3, 42));
        let got: Vec<(u32, u64)> = seen.iter().map(|s| (s.sequence, s.sent_ns)).collect();
        assert_eq!(got, vec![(0, 10), (1, 11), (2, 12)]);
    }

    #[test]
    fn malformed_chunks_are_errors_not_panics() {
        let bytes = chunk(&[simple(&message(0, 1))], 1, 0);
        for cut in [0, 10, HEADER_BYTES, bytes.len() - 1] {
            let mut count = 0;
            let result = read_chunk(&bytes[..cut], Some(&mut |_: &[u8]| count += 1));
            assert!(result.is_err(), "cut at {cut}");
        }
        let mut bad = bytes.clone();
        bad[0] = 0x10;
        assert!(read_chunk(&bad, None)
            .unwrap_err()
            .to_string()
            .contains("magic"));
    }

    #[test]
    fn stamps_from_other_encodings() {
        assert_eq!(stamp_of_message(&message(5, 6)).unwrap().sequence, 5);
        let mut long = vec![0x00, 0x53, 0x75, 0xb0, 0, 0, 0, 12];
        long.extend_from_slice(&message(7, 8)[5..]);
        assert_eq!(stamp_of_message(&long).unwrap().sent_ns, 8);
        assert!(stamp_of_message(&[1, 2]).is_none());
    }
}
