//! One chunk of a stream log: osiris's chunk format, byte for byte, so that a chunk read from
//! a segment file is the `OsirisChunk` of a stream-protocol Deliver frame as it lies.
//!
//! ```text
//! offset size  field (all integers big-endian)
//!  0      1    magic 5 (high 4 bits) | version 0 (low 4 bits) = 0x50
//!  1      1    chunk type: 0 user, 1 tracking delta, 2 tracking snapshot
//!  2      2    number of entries
//!  4      4    number of records (offsets the chunk takes)
//!  8      8    timestamp, ms since the Unix epoch (signed)
//! 16      8    epoch
//! 24      8    first offset (the chunk id)
//! 32      4    CRC-32 (IEEE, as erlang:crc32) of the entries (data) only
//! 36      4    data length
//! 40      4    trailer length
//! 44      1    Bloom filter size (0: Warren writes no filter yet)
//! 45      3    reserved, 0
//! 48      ..   Bloom bytes, then entries (data length), then trailer (trailer length)
//! ```
//!
//! An entry is simple, `0:1 Size:31 Data`, one record; or a sub-batch,
//! `1:1 Compression:3 Reserved:4 NumRecords:16 UncompressedLength:32 Length:32 Data`, whose
//! data (when not compressed) is `NumRecords` times `Size:32 Data`. The trailer of a user
//! chunk holds the writer tracking it advances (see `tracking.rs`).

use std::path::PathBuf;

use bytes::Bytes;

use crate::error::StoreError;

/// Bytes of a chunk header.
pub(crate) const HEADER_BYTES: usize = 48;
/// Magic 5 and version 0 in one byte.
pub(crate) const MAGIC_VERSION: u8 = 0x50;
pub(crate) const CHUNK_USER: u8 = 0;
pub(crate) const CHUNK_TRACKING_DELTA: u8 = 1;
pub(crate) const CHUNK_TRACKING_SNAPSHOT: u8 = 2;
/// Bytes of a simple entry's header.
pub(crate) const SIMPLE_HEADER_BYTES: usize = 4;
/// Bytes of a sub-batch entry's header.
pub(crate) const SUB_BATCH_HEADER_BYTES: usize = 11;
/// The largest simple entry: its size has 31 bits.
pub(crate) const SIMPLE_BYTES_MAX: usize = 0x7fff_ffff;

/// A chunk header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub chunk_type: u8,
    pub num_entries: u16,
    pub num_records: u32,
    pub timestamp_ms: i64,
    pub epoch: u64,
    pub first_offset: u64,
    pub crc: u32,
    pub data_len: u32,
    pub trailer_len: u32,
    pub bloom_len: u8,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[0] = MAGIC_VERSION;
        out[1] = self.chunk_type;
        out[2..4].copy_from_slice(&self.num_entries.to_be_bytes());
        out[4..8].copy_from_slice(&self.num_records.to_be_bytes());
        out[8..16].copy_from_slice(&self.timestamp_ms.to_be_bytes());
        out[16..24].copy_from_slice(&self.epoch.to_be_bytes());
        out[24..32].copy_from_slice(&self.first_offset.to_be_bytes());
        out[32..36].copy_from_slice(&self.crc.to_be_bytes());
        out[36..40].copy_from_slice(&self.data_len.to_be_bytes());
        out[40..44].copy_from_slice(&self.trailer_len.to_be_bytes());
        out[44] = self.bloom_len;
        out
    }

    /// Decodes and checks what a header alone can tell (magic, version, type, counts); the
    /// error says which field is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Header, String> {
        let Some(bytes) = bytes.get(..HEADER_BYTES) else {
            return Err(format!(
                "a chunk header needs {HEADER_BYTES} bytes, {} remain",
                bytes.len()
            ));
        };
        let header = Header {
            chunk_type: bytes[1],
            num_entries: u16::from_be_bytes([bytes[2], bytes[3]]),
            num_records: be_u32(bytes, 4),
            timestamp_ms: be_u64(bytes, 8) as i64,
            epoch: be_u64(bytes, 16),
            first_offset: be_u64(bytes, 24),
            crc: be_u32(bytes, 32),
            data_len: be_u32(bytes, 36),
            trailer_len: be_u32(bytes, 40),
            bloom_len: bytes[44],
        };
        if bytes[0] != MAGIC_VERSION {
            return Err(format!(
                "chunk magic/version byte is {:#04x}, not {MAGIC_VERSION:#04x}",
                bytes[0]
            ));
        }
        if header.chunk_type > CHUNK_TRACKING_SNAPSHOT {
            return Err(format!("unknown chunk type {}", header.chunk_type));
        }
        if header.num_records < u32::from(header.num_entries) {
            return Err(format!(
                "chunk claims {} records in {} entries",
                header.num_records, header.num_entries
            ));
        }
        if header.num_entries == 0 {
            return Err("chunk has no entries".to_owned());
        }
        Ok(header)
    }

    /// Header, Bloom bytes and data: what a Deliver frame carries.
    pub fn deliver_bytes(&self) -> u64 {
        HEADER_BYTES as u64 + u64::from(self.bloom_len) + u64::from(self.data_len)
    }

    /// The whole chunk on disk, trailer included.
    pub fn total_bytes(&self) -> u64 {
        self.deliver_bytes() + u64::from(self.trailer_len)
    }
}

/// Checks a whole chunk (header, then CRC of its data): what recovery and `append_raw` trust.
/// `bytes` may run past the chunk; returns the header.
pub(crate) fn validate(bytes: &[u8]) -> Result<Header, String> {
    let header = Header::decode(bytes)?;
    let total = usize::try_from(header.total_bytes()).unwrap_or(usize::MAX);
    if bytes.len() < total {
        return Err(format!(
            "chunk {} needs {total} bytes, {} remain (torn write)",
            header.first_offset,
            bytes.len()
        ));
    }
    let data_start = HEADER_BYTES + usize::from(header.bloom_len);
    let data_end = data_start + header.data_len as usize;
    let crc = crc32fast::hash(&bytes[data_start..data_end]);
    if crc != header.crc {
        return Err(format!(
            "chunk {} has CRC {crc:#010x} but its header says {:#010x}",
            header.first_offset, header.crc
        ));
    }
    Ok(header)
}

pub(crate) fn be_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_be_bytes(word)
}

pub(crate) fn be_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(word)
}

/// One chunk as it lies on disk (header, Bloom bytes, entries; no trailer).
#[derive(Debug, Clone)]
pub struct Chunk {
    pub first_offset: u64,
    pub num_entries: u16,
    pub num_records: u32,
    pub timestamp_ms: i64,
    pub epoch: u64,
    pub bytes: Bytes,
}

impl Chunk {
    /// Each record with its offset: simple entries and uncompressed sub-batch records;
    /// a compressed sub-batch is an Err naming the compression (consumers over AMQP).
    pub fn records(&self) -> impl Iterator<Item = Result<(u64, Bytes), StoreError>> + '_ {
        Records::new(self)
    }
}

/// Walks a chunk's entries, then each sub-batch's records; stops after the first error.
struct Records<'a> {
    bytes: &'a Bytes,
    /// Next entry byte; `end` is the end of the data.
    at: usize,
    end: usize,
    entries_left: u16,
    offset: u64,
    /// The sub-batch being walked: records left, and the end of its data.
    batch_left: u16,
    batch_end: usize,
    done: bool,
}

impl<'a> Records<'a> {
    fn new(chunk: &'a Chunk) -> Records<'a> {
        let (at, end) = match Header::decode(&chunk.bytes) {
            Ok(header) => {
                let start = HEADER_BYTES + usize::from(header.bloom_len);
                let end = start.saturating_add(header.data_len as usize);
                (start, end.min(chunk.bytes.len()))
            }
            Err(_) => (0, 0), // reported by the first next()
        };
        Records {
            bytes: &chunk.bytes,
            at,
            end,
            entries_left: chunk.num_entries,
            offset: chunk.first_offset,
            batch_left: 0,
            batch_end: 0,
            done: false,
        }
    }

    fn corrupt(&mut self, what: String) -> Option<Result<(u64, Bytes), StoreError>> {
        self.done = true;
        Some(Err(StoreError::Corrupt {
            file: PathBuf::from("stream chunk"),
            offset: self.offset,
            what,
        }))
    }

    /// `len` bytes from `at`, if the range ends by `end`.
    fn take(&mut self, len: usize, end: usize) -> Option<Bytes> {
        let stop = self.at.checked_add(len).filter(|stop| *stop <= end)?;
        let slice = self.bytes.slice(self.at..stop);
        self.at = stop;
        Some(slice)
    }

    fn next_in_batch(&mut self) -> Option<Result<(u64, Bytes), StoreError>> {
        let Some(size) = self.bytes.get(self.at..self.at + 4) else {
            return self.corrupt("sub-batch record size runs past the chunk".to_owned());
        };
        let size = be_u32(size, 0) as usize;
        self.at += 4;
        if self.at > self.batch_end {
            return self.corrupt("sub-batch record size runs past its batch".to_owned());
        }
        let Some(record) = self.take(size, self.batch_end) else {
            return self.corrupt(format!(
                "sub-batch record of {size} bytes runs past its batch"
            ));
        };
        self.batch_left -= 1;
        if self.batch_left == 0 {
            self.at = self.batch_end;
        }
        let offset = self.offset;
        self.offset += 1;
        Some(Ok((offset, record)))
    }

    fn next_entry(&mut self) -> Option<Result<(u64, Bytes), StoreError>> {
        let Some(&kind) = self.bytes.get(self.at).filter(|_| self.at < self.end) else {
            return self.corrupt(format!("{} entries missing", self.entries_left));
        };
        self.entries_left -= 1;
        if kind & 0x80 == 0 {
            let Some(size) = self.bytes.get(self.at..self.at + SIMPLE_HEADER_BYTES) else {
                return self.corrupt("simple entry header runs past the chunk".to_owned());
            };
            let size = (be_u32(size, 0) & 0x7fff_ffff) as usize;
            self.at += SIMPLE_HEADER_BYTES;
            let Some(record) = self.take(size, self.end) else {
                return self.corrupt(format!("simple entry of {size} bytes runs past the data"));
            };
            let offset = self.offset;
            self.offset += 1;
            return Some(Ok((offset, record)));
        }
        let Some(header) = self.bytes.get(self.at..self.at + SUB_BATCH_HEADER_BYTES) else {
            return self.corrupt("sub-batch header runs past the chunk".to_owned());
        };
        let compression = (kind >> 4) & 0x07;
        let records = u16::from_be_bytes([header[1], header[2]]);
        let len = be_u32(header, 7) as usize;
        self.at += SUB_BATCH_HEADER_BYTES;
        let Some(batch_end) = self.at.checked_add(len).filter(|end| *end <= self.end) else {
            return self.corrupt(format!("sub-batch of {len} bytes runs past the data"));
        };
        if compression != 0 {
            self.done = true;
            return Some(Err(StoreError::Refused {
                what: format!(
                    "the records at offset {} are in a sub-batch compressed with {} \
                     (compression {compression}); Warren does not decompress sub-batches: \
                     read this stream over the stream protocol",
                    self.offset,
                    compression_name(compression)
                ),
            }));
        }
        self.batch_end = batch_end;
        self.batch_left = records;
        if records == 0 {
            self.at = batch_end;
            return self.next();
        }
        self.next_in_batch()
    }
}

/// The stream protocol's compression codes.
fn compression_name(code: u8) -> &'static str {
    match code {
        1 => "gzip",
        2 => "snappy",
        3 => "lz4",
        4 => "zstd",
        _ => "an unknown codec",
    }
}

impl Iterator for Records<'_> {
    type Item = Result<(u64, Bytes), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.end == 0 {
            let reason = Header::decode(self.bytes).err().unwrap_or_default();
            return self.corrupt(reason);
        }
        if self.batch_left > 0 {
            return self.next_in_batch();
        }
        if self.entries_left == 0 {
            self.done = true;
            return None;
        }
        self.next_entry()
    }
}
