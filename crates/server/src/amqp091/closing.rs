//! The `closing` state after the broker sent connection.close for a hard error: as RabbitMQ's
//! reader, the connection keeps reading and discarding what the peer sends until its close-ok
//! (or a crossing connection.close), so that a client still writing (an oversized frame, a
//! pipeline of publishes) reads the reason instead of a reset. Payloads are skipped as they
//! arrive, never buffered whole, and not decoded.

use bytes::{Buf, BytesMut};
use warren_proto::amqp091::{FRAME_END, FRAME_HEADER_SIZE};

/// The method frame type.
const FRAME_METHOD: u8 = 1;
/// connection.close and connection.close-ok: (class, method) as the payload's first 4 bytes.
const CONNECTION_CLOSE_IDS: [[u8; 4]; 2] = [[0, 10, 0, 50], [0, 10, 0, 51]];
/// Method frames on channel 0 at most this large are looked at; anything larger is skipped
/// (connection.close carries at most a 255-byte text and 8 bytes of fields).
const CLOSE_PAYLOAD_MAX: u32 = 512;

/// Where discarding stands: bytes still to drop of a frame being skipped.
#[derive(Debug, Default)]
pub(super) struct Discard {
    skip: u64,
}

impl Discard {
    /// Discarding that starts `bytes` before the end of a frame.
    pub(super) fn skipping(bytes: usize) -> Discard {
        Discard { skip: bytes as u64 }
    }

    /// Drops what `buf` holds of frames other than connection.close/close-ok. Returns true
    /// once one of those arrived; false when more input is needed.
    pub(super) fn scan(&mut self, buf: &mut BytesMut) -> bool {
        loop {
            let dropped = usize::try_from(self.skip).map_or(buf.len(), |s| s.min(buf.len()));
            buf.advance(dropped);
            self.skip -= dropped as u64;
            if self.skip > 0 {
                return false;
            }
            let Some(&[frame_type, c0, c1, s0, s1, s2, s3]) = buf.get(..FRAME_HEADER_SIZE) else {
                return false;
            };
            let channel = u16::from_be_bytes([c0, c1]);
            let size = u32::from_be_bytes([s0, s1, s2, s3]);
            let whole = FRAME_HEADER_SIZE + size as usize + 1;
            if frame_type == FRAME_METHOD && channel == 0 && size <= CLOSE_PAYLOAD_MAX {
                let Some(frame) = buf.get(..whole) else {
                    return false;
                };
                let ids = frame.get(FRAME_HEADER_SIZE..FRAME_HEADER_SIZE + 4);
                if frame[whole - 1] == FRAME_END
                    && ids.is_some_and(|ids| CONNECTION_CLOSE_IDS.iter().any(|c| c == ids))
                {
                    return true;
                }
            }
            self.skip = u64::from(size) + FRAME_HEADER_SIZE as u64 + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![kind];
        out.extend_from_slice(&channel.to_be_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(payload);
        out.push(FRAME_END);
        out
    }

    #[test]
    fn skips_frames_in_pieces_until_close_ok() {
        let mut input = frame(3, 1, &vec![7; 10_000]);
        input.extend(frame(1, 0, &[0, 10, 0, 40, 0, 0]));
        input.extend(frame(1, 0, &[0, 10, 0, 51]));
        let mut discard = Discard::default();
        let mut buf = BytesMut::new();
        for (i, piece) in input.chunks(1000).enumerate() {
            buf.extend_from_slice(piece);
            let done = discard.scan(&mut buf);
            assert!(buf.len() <= 1000 + 16, "buffered {} bytes", buf.len());
            assert_eq!(done, i == input.len() / 1000, "piece {i}");
        }
    }

    #[test]
    fn an_oversized_header_alone_needs_more_input() {
        let mut buf = BytesMut::from(&[3, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF][..]);
        let mut discard = Discard::default();
        assert!(!discard.scan(&mut buf));
        assert!(buf.is_empty());
    }
}
