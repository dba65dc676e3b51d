//! The message body's first bytes, which carry what latency is measured from.
//!
//! Layout (big-endian), PerfTest's order (an int sequence, then a long timestamp):
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | `u32` sequence number within its producer channel, 0 for the first (wrapping) |
//! | 4..12 | `u64` send time, `clock::now_ns()` of the sending process |
//! | 12..16 | `u32` producer id (only when the body has at least 16 bytes) |
//!
//! PerfTest numbers its bodies the same way (from 0, per producer); `--verify-order` checks the
//! numbers per producer id (`order`). The rest of the body is zeros. A body is never shorter
//! than `STAMP_BYTES` (PerfTest also sends at least 12 bytes whatever `-s` says).

/// The bytes every body starts with: sequence and send time.
pub const STAMP_BYTES: usize = 12;
/// With the producer id.
pub const STAMP_WITH_PRODUCER_BYTES: usize = 16;

/// What a producer writes into a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub sequence: u32,
    pub sent_ns: u64,
    pub producer: u32,
}

impl Stamp {
    /// Writes the stamp into the front of `body`, which is at least `STAMP_BYTES` long; the
    /// producer id only fits bodies of 16 bytes or more.
    pub fn write(&self, body: &mut [u8]) {
        debug_assert!(
            body.len() >= STAMP_BYTES,
            "invariant: bodies are at least 12 bytes"
        );
        if let Some(head) = body.get_mut(..STAMP_BYTES) {
            let (sequence, sent) = head.split_at_mut(4);
            sequence.copy_from_slice(&self.sequence.to_be_bytes());
            sent.copy_from_slice(&self.sent_ns.to_be_bytes());
        }
        if let Some(producer) = body.get_mut(STAMP_BYTES..STAMP_WITH_PRODUCER_BYTES) {
            producer.copy_from_slice(&self.producer.to_be_bytes());
        }
    }

    /// Reads the stamp from the front of a body; `None` when it is shorter than 12 bytes (not a
    /// message of ours). A body of 12 to 15 bytes has producer 0.
    pub fn read(body: &[u8]) -> Option<Stamp> {
        let sequence = u32::from_be_bytes(body.get(0..4)?.try_into().ok()?);
        let sent_ns = u64::from_be_bytes(body.get(4..12)?.try_into().ok()?);
        let producer = body
            .get(STAMP_BYTES..STAMP_WITH_PRODUCER_BYTES)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_be_bytes);
        Some(Stamp {
            sequence,
            sent_ns,
            producer,
        })
    }
}

/// The body size actually sent for `-s size`: at least `STAMP_BYTES`.
pub fn body_size(requested: usize) -> usize {
    requested.max(STAMP_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_round_trips_in_12_and_16_byte_bodies() {
        let stamp = Stamp {
            sequence: 7,
            sent_ns: 0x0102_0304_0506_0708,
            producer: 3,
        };
        let mut small = [0u8; 12];
        stamp.write(&mut small);
        assert_eq!(small, [0, 0, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            Stamp::read(&small),
            Some(Stamp {
                producer: 0,
                ..stamp
            })
        );
        let mut large = [0u8; 20];
        stamp.write(&mut large);
        assert_eq!(Stamp::read(&large), Some(stamp));
        assert_eq!(Stamp::read(&large[..11]), None);
        assert_eq!(body_size(0), 12);
        assert_eq!(body_size(1000), 1000);
    }
}
