//! Tracking kept in the stream log itself, as osiris keeps it, so that it survives restarts
//! and retention: writer sequences (publisher deduplication) and consumer offsets
//! (StoreOffset).
//!
//! ```text
//! trailer of a user chunk, and the one entry of a tracking delta chunk (type 1):
//!   repeated: type u8 (0 sequence, 1 offset) | id size u8 | id | value u64
//! the one entry of a tracking snapshot chunk (type 2), the first chunk of a segment:
//!   repeated: 0 | id size u8 | id | chunk id u64 | sequence u64
//!             1 | id size u8 | id | offset u64
//! ```
//!
//! A sequence in a trailer belongs to the chunk it trails (its chunk id). Ids are at most
//! 255 bytes (the size is one byte). Snapshots keep at most [`SEQUENCES_MAX`] writers, the
//! ones that wrote last, as osiris does, so the state a new segment carries is bounded.

use bytes::Bytes;
use rustc_hash::FxHashMap;

use super::chunk::be_u64;

const TYPE_SEQUENCE: u8 = 0;
const TYPE_OFFSET: u8 = 1;
/// Writers a snapshot keeps (osiris's `MAX_SEQUENCES`).
pub(crate) const SEQUENCES_MAX: usize = 255;
/// Longest writer or consumer reference: its size is one byte.
pub(crate) const ID_BYTES_MAX: usize = 255;

/// Writer sequences and consumer offsets, as of the end of the log.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tracking {
    /// Writer reference -> (chunk id of its last chunk, last publishing id).
    pub sequences: FxHashMap<Bytes, (u64, u64)>,
    /// Consumer reference -> stored offset.
    pub offsets: FxHashMap<Bytes, u64>,
}

/// What the management API shows of a stream's tracking (RabbitMQ's `osiris:read_tracking`
/// without timestamps): each reference with its value, sorted by reference. A reference that
/// is not UTF-8 is shown lossily (clients send strings).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TrackingSnapshot {
    /// Consumer reference -> stored offset.
    pub offsets: Vec<(String, u64)>,
    /// Writer (producer) reference -> last publishing id.
    pub writers: Vec<(String, u64)>,
}

impl Tracking {
    pub fn is_empty(&self) -> bool {
        self.sequences.is_empty() && self.offsets.is_empty()
    }

    /// Both maps, copied out for a reader on another task.
    pub fn snapshot(&self) -> TrackingSnapshot {
        fn sorted(pairs: impl Iterator<Item = (String, u64)>) -> Vec<(String, u64)> {
            let mut pairs: Vec<_> = pairs.collect();
            pairs.sort_unstable();
            pairs
        }
        let text = |id: &Bytes| String::from_utf8_lossy(id).into_owned();
        TrackingSnapshot {
            offsets: sorted(self.offsets.iter().map(|(id, offset)| (text(id), *offset))),
            writers: sorted(
                self.sequences
                    .iter()
                    .map(|(id, (_, sequence))| (text(id), *sequence)),
            ),
        }
    }

    /// Appends a user chunk's trailer for `writers` to `out`.
    pub fn encode_trailer(writers: &[(Bytes, u64)], out: &mut Vec<u8>) {
        for (id, sequence) in writers {
            encode_block(out, TYPE_SEQUENCE, id, &[*sequence]);
        }
    }

    /// A delta chunk's entry: one consumer offset.
    pub fn encode_offset(id: &[u8], offset: u64, out: &mut Vec<u8>) {
        encode_block(out, TYPE_OFFSET, id, &[offset]);
    }

    /// A snapshot chunk's entry; trims the writers to [`SEQUENCES_MAX`] first.
    pub fn encode_snapshot(&mut self, out: &mut Vec<u8>) {
        if self.sequences.len() > SEQUENCES_MAX {
            let mut chunks: Vec<u64> = self.sequences.values().map(|(chunk, _)| *chunk).collect();
            chunks.sort_unstable_by(|a, b| b.cmp(a));
            let oldest_kept = chunks[SEQUENCES_MAX - 1];
            self.sequences.retain(|_, (chunk, _)| *chunk >= oldest_kept);
        }
        for (id, (chunk, sequence)) in &self.sequences {
            encode_block(out, TYPE_SEQUENCE, id, &[*chunk, *sequence]);
        }
        for (id, offset) in &self.offsets {
            encode_block(out, TYPE_OFFSET, id, &[*offset]);
        }
    }

    /// Applies a user chunk's trailer (or a delta chunk's entry) of chunk `chunk_id`.
    pub fn apply_delta(&mut self, bytes: &[u8], chunk_id: u64) -> Result<(), String> {
        self.parse(bytes, 1, |tracking, kind, id, values| {
            match (kind, values) {
                (TYPE_SEQUENCE, [sequence]) => {
                    tracking.sequences.insert(id, (chunk_id, *sequence));
                }
                (TYPE_OFFSET, [offset]) => {
                    tracking.offsets.insert(id, *offset);
                }
                _ => unreachable!("invariant: parse checks the type and value count"),
            }
        })
    }

    /// Applies a snapshot chunk's entry.
    pub fn apply_snapshot(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.parse(bytes, 2, |tracking, kind, id, values| {
            match (kind, values) {
                (TYPE_SEQUENCE, [chunk, sequence]) => {
                    tracking.sequences.insert(id, (*chunk, *sequence));
                }
                (TYPE_OFFSET, [offset]) => {
                    tracking.offsets.insert(id, *offset);
                }
                _ => unreachable!("invariant: parse checks the type and value count"),
            }
        })
    }

    /// Walks blocks; a sequence carries `sequence_values` values (two in a snapshot: chunk id
    /// and sequence; one elsewhere).
    fn parse(
        &mut self,
        mut bytes: &[u8],
        sequence_values: usize,
        mut apply: impl FnMut(&mut Tracking, u8, Bytes, &[u64]),
    ) -> Result<(), String> {
        while !bytes.is_empty() {
            let (&kind, rest) = bytes.split_first().ok_or("empty tracking block")?;
            let (&size, rest) = rest
                .split_first()
                .ok_or("tracking block ends after its type")?;
            let values = match kind {
                TYPE_SEQUENCE => sequence_values,
                TYPE_OFFSET => 1,
                other => return Err(format!("unknown tracking type {other}")),
            };
            let need = usize::from(size) + 8 * values;
            if rest.len() < need {
                return Err(format!(
                    "tracking block needs {need} bytes after its type, {} remain",
                    rest.len()
                ));
            }
            let id = Bytes::copy_from_slice(&rest[..usize::from(size)]);
            let mut read = [0u64; 2];
            for (n, value) in read.iter_mut().take(values).enumerate() {
                *value = be_u64(rest, usize::from(size) + 8 * n);
            }
            apply(self, kind, id, &read[..values]);
            bytes = &rest[need..];
        }
        Ok(())
    }
}

fn encode_block(out: &mut Vec<u8>, kind: u8, id: &[u8], values: &[u64]) {
    debug_assert!(
        id.len() <= ID_BYTES_MAX,
        "invariant: ids are checked before encoding"
    );
    out.push(kind);
    out.push(id.len() as u8);
    out.extend_from_slice(id);
    for value in values {
        out.extend_from_slice(&value.to_be_bytes());
    }
}
