//! A frame decoder that hands out a large body frame in parts as its bytes arrive, so that the
//! read buffer never has to hold (and, when full, copy into a larger one) a partial frame.
//!
//! `decode_frame` returns a frame only once all of it is buffered: a connection that reads
//! into a fixed-size buffer must then move a frame that straddles the buffer's end into a new
//! one, a copy of up to a whole frame per read. `FrameReader` instead splits what is buffered
//! of a body frame off as a `Frame::Body` of its own once at least `BODY_PART_BYTES_MIN` of it
//! is there, and takes the rest, up to the frame-end octet, from the next reads. The parts of
//! a body frame are consecutive pieces of its payload; a content body is the concatenation of
//! its body frames' payloads anyway, so the receiver treats parts exactly as frames.

use bytes::{Buf, BytesMut};

use super::error::DecodeError;
use super::frame::{decode_frame, Frame, FRAME_END, FRAME_HEADER_SIZE};

/// A body frame is handed out in parts only when at least this much of its payload is
/// buffered: fewer, larger parts keep the count of slices per body low, and a client that
/// trickles bytes cannot make the broker hold a slice per byte; what waits is copied at most
/// once when the buffer is renewed, a few KiB.
pub const BODY_PART_BYTES_MIN: usize = 16 * 1024;

const FRAME_BODY: u8 = 3;

/// Decoding state carried between reads: the body frame whose payload is being handed out in
/// parts, if any.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FrameReader {
    body: Option<BodyInProgress>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BodyInProgress {
    channel: u16,
    /// Payload bytes still to come (the frame-end octet follows them).
    remaining: usize,
    /// The frame's whole payload size, for errors.
    payload_size: u32,
}

impl FrameReader {
    /// Decodes the next frame, or the next part of a body frame, from the front of `buf`; as
    /// [`decode_frame`] otherwise (same checks, same errors, `Ok(None)` when more input is
    /// needed).
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        frame_max: u32,
    ) -> Result<Option<Frame>, DecodeError> {
        if let Some(body) = self.body {
            return self.continue_part(body, buf);
        }
        let frame = decode_frame(buf, frame_max)?;
        if frame.is_some() {
            return Ok(frame);
        }
        Ok(self.start_body(buf))
    }

    /// Whether a body frame is being handed out in parts: then the next bytes are its
    /// payload, for [`FrameReader::continue_body`], not a frame for [`decode_frame`].
    ///
    /// A hot decode loop calls `decode_frame` itself when this is false, and
    /// [`FrameReader::start_body`] when that needs more input, instead of [`FrameReader::decode`]:
    /// a `Frame` is 144 bytes, moved with a `memcpy`, and returned through one more function it
    /// is copied once more (3% of the broker's CPU per 12-byte message in a profile).
    #[inline]
    pub fn body_in_progress(&self) -> bool {
        self.body.is_some()
    }

    /// The next part of the body frame in progress (`Ok(None)`: more input needed, or no
    /// body frame is in progress).
    pub fn continue_body(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, DecodeError> {
        match self.body {
            Some(body) => self.continue_part(body, buf),
            None => Ok(None),
        }
    }

    /// Bytes of the frame in progress still to come, frame-end octet included (0 between
    /// frames): what a connection that stops decoding must skip to reach the next frame.
    pub fn bytes_to_frame_end(&self) -> usize {
        self.body.map_or(0, |body| body.remaining + 1)
    }

    /// After [`decode_frame`] answered `Ok(None)` (more input needed): splits off the buffered
    /// part of the body frame it found incomplete, when enough of it is there.
    pub fn start_body(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        let &[frame_type, c0, c1, s0, s1, s2, s3] = buf.get(..FRAME_HEADER_SIZE)? else {
            return None;
        };
        let payload_size = u32::from_be_bytes([s0, s1, s2, s3]);
        let payload_len = usize::try_from(payload_size).ok()?;
        let buffered = buf.len() - FRAME_HEADER_SIZE;
        // All of the payload buffered means only the frame-end octet is missing: the whole
        // frame comes with the next read.
        if frame_type != FRAME_BODY || buffered < BODY_PART_BYTES_MIN || buffered >= payload_len {
            return None;
        }
        let channel = u16::from_be_bytes([c0, c1]);
        buf.advance(FRAME_HEADER_SIZE);
        let payload = buf.split_to(buffered).freeze();
        self.body = Some(BodyInProgress {
            channel,
            remaining: payload_len - buffered,
            payload_size,
        });
        Some(Frame::Body { channel, payload })
    }

    fn continue_part(
        &mut self,
        mut body: BodyInProgress,
        buf: &mut BytesMut,
    ) -> Result<Option<Frame>, DecodeError> {
        let channel = body.channel;
        if let Some(&found) = buf.get(body.remaining) {
            if found != FRAME_END {
                return Err(DecodeError::BadFrameEnd {
                    frame_type: FRAME_BODY,
                    channel,
                    payload_size: body.payload_size,
                    found,
                });
            }
            let payload = buf.split_to(body.remaining).freeze();
            buf.advance(1);
            self.body = None;
            return Ok(Some(Frame::Body { channel, payload }));
        }
        // The rest is not all here: a part when enough is, else wait (only the frame-end
        // octet missing also waits, so the last part always checks it).
        let take = buf.len().min(body.remaining.saturating_sub(1));
        if take < BODY_PART_BYTES_MIN.min(body.remaining) || take == 0 {
            return Ok(None);
        }
        let payload = buf.split_to(take).freeze();
        body.remaining -= take;
        self.body = Some(body);
        Ok(Some(Frame::Body { channel, payload }))
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;
    use crate::amqp091::encode_body_frame;

    /// Feeds `input` in pieces of `step` bytes and collects the body bytes decoded.
    fn feed(input: &[u8], step: usize) -> (Vec<u8>, usize, BytesMut) {
        let mut reader = FrameReader::default();
        let mut buf = BytesMut::new();
        let (mut body, mut parts) = (Vec::new(), 0);
        for piece in input.chunks(step) {
            buf.extend_from_slice(piece);
            while let Some(frame) = reader.decode(&mut buf, 0).expect("valid input") {
                let Frame::Body { payload, .. } = frame else {
                    panic!("only body frames were sent: {frame:?}");
                };
                assert!(!payload.is_empty());
                body.extend_from_slice(&payload);
                parts += 1;
            }
        }
        assert_eq!(reader.bytes_to_frame_end(), 0);
        (body, parts, buf)
    }

    fn frames(payloads: &[Vec<u8>]) -> Vec<u8> {
        let mut out = BytesMut::new();
        payloads
            .iter()
            .for_each(|p| encode_body_frame(1, p, &mut out));
        out.to_vec()
    }

    #[test]
    fn a_body_frame_read_in_pieces_comes_out_in_parts_with_every_byte() {
        let payloads: Vec<Vec<u8>> = [131_064usize, 100_000, 5, 20_000]
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|b| (b * 7 + i) as u8).collect())
            .collect();
        let input = frames(&payloads);
        let expected: Vec<u8> = payloads.concat();
        for step in [1, 1000, 16 * 1024, 65_536, 100_001, input.len()] {
            let (body, parts, rest) = feed(&input, step);
            assert_eq!(body, expected, "step {step}");
            assert!(rest.is_empty(), "step {step}");
            if step == 65_536 {
                assert!(
                    parts > payloads.len(),
                    "large frames came in parts: {parts}"
                );
            }
        }
    }

    #[test]
    fn a_bad_frame_end_after_parts_is_an_error() {
        let mut input = frames(&[vec![9; 40_000]]);
        *input.last_mut().unwrap() = 0;
        let mut reader = FrameReader::default();
        let mut buf = BytesMut::from(&input[..30_000]);
        assert!(matches!(
            reader.decode(&mut buf, 0),
            Ok(Some(Frame::Body { .. }))
        ));
        assert_eq!(reader.bytes_to_frame_end(), 40_000 + 8 - 30_000);
        buf.extend_from_slice(&input[30_000..]);
        assert!(matches!(
            reader.decode(&mut buf, 0),
            Err(DecodeError::BadFrameEnd { found: 0, .. })
        ));
    }

    #[test]
    fn an_oversized_frame_is_refused_before_any_part() {
        let input = frames(&[vec![1; 40_000]]);
        let mut reader = FrameReader::default();
        let mut buf = BytesMut::from(&input[..30_000]);
        assert!(matches!(
            reader.decode(&mut buf, 4096),
            Err(DecodeError::FrameTooLarge { .. })
        ));
    }
}
