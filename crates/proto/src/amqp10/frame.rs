//! Frames (transport.xml "framing"): `size:u32 doff:u8 type:u8 channel:u16`, an extended
//! header up to `doff * 4` bytes, then the body. AMQP frames (type 0) carry a performative
//! and, for transfers, a payload that is a slice of the read buffer; SASL frames (type 1) a
//! SASL performative; an AMQP frame with no body is a heartbeat.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::DecodeError;
use super::fast::{decode_hot, encode_hot, encoded_len_hot};
use super::performative::Performative;
use super::sasl::SaslFrame;
use super::types::{Reader, Value};

/// `AMQP 0 1.0.0`: the AMQP protocol header.
pub const AMQP_HEADER: [u8; 8] = *b"AMQP\x00\x01\x00\x00";
/// `AMQP 3 1.0.0`: the SASL layer's protocol header.
pub const SASL_HEADER: [u8; 8] = *b"AMQP\x03\x01\x00\x00";
/// Every peer must accept frames this large (the spec's MIN-MAX-FRAME-SIZE).
pub const MIN_MAX_FRAME_SIZE: u32 = 512;
pub const FRAME_HEADER_BYTES: usize = 8;
pub const TYPE_AMQP: u8 = 0;
pub const TYPE_SASL: u8 = 1;

#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub channel: u16,
    pub body: FrameBody,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FrameBody {
    /// An AMQP frame without a body: keeps the connection alive.
    Empty,
    Amqp {
        performative: Performative,
        /// What follows the performative (a transfer's message bytes); a slice of the input.
        payload: Bytes,
    },
    Sasl(SaslFrame),
}

/// Decodes one frame from the front of `buf` (removing it); `Ok(None)` until it is whole.
/// The declared size is checked against `max_frame_size` before the frame is awaited.
pub fn decode_frame(buf: &mut BytesMut, max_frame_size: u32) -> Result<Option<Frame>, DecodeError> {
    let Some(&[s0, s1, s2, s3, doff, frame_type, c0, c1]) = buf.first_chunk::<8>() else {
        return Ok(None);
    };
    let size = u32::from_be_bytes([s0, s1, s2, s3]);
    let channel = u16::from_be_bytes([c0, c1]);
    let body_at = usize::from(doff) * 4;
    if size < FRAME_HEADER_BYTES as u32 || doff < 2 || body_at > size as usize {
        return Err(DecodeError::BadFrameHeader { size, doff });
    }
    if size > max_frame_size {
        return Err(DecodeError::FrameTooLarge {
            size,
            max_frame_size,
        });
    }
    if buf.len() < size as usize {
        return Ok(None);
    }
    let frame = buf.split_to(size as usize).freeze();
    let body = frame.slice(body_at..);
    let body = match frame_type {
        TYPE_AMQP if body.is_empty() => FrameBody::Empty,
        TYPE_AMQP => {
            if let Some((performative, used)) = decode_hot(&body) {
                return Ok(Some(Frame {
                    channel,
                    body: FrameBody::Amqp {
                        performative,
                        payload: body.slice(used..),
                    },
                }));
            }
            let mut reader = Reader::new(&body);
            let value = reader.value(0)?;
            let performative = Performative::from_value(value)?;
            FrameBody::Amqp {
                performative,
                payload: body.slice(reader.pos..),
            }
        }
        TYPE_SASL => {
            let (value, used) = Value::decode(&body)?;
            if used != body.len() {
                return Err(DecodeError::TrailingBytes {
                    what: "SASL frame",
                    extra: body.len() - used,
                });
            }
            FrameBody::Sasl(SaslFrame::from_value(value)?)
        }
        other => return Err(DecodeError::UnknownFrameType { frame_type: other }),
    };
    Ok(Some(Frame { channel, body }))
}

/// Writes an AMQP frame: the performative, then `payload` (copied; see `encode_frame_head`
/// for writing a large payload from its own buffer).
pub fn encode_frame(out: &mut BytesMut, channel: u16, performative: &Performative, payload: &[u8]) {
    encode_frame_head(out, channel, performative, payload.len());
    out.put_slice(payload);
}

/// Writes an AMQP frame's header and performative for a payload of `payload_len` bytes that
/// the caller writes next.
pub fn encode_frame_head(
    out: &mut BytesMut,
    channel: u16,
    performative: &Performative,
    payload_len: usize,
) {
    let start = out.len();
    out.put_u32(0);
    out.put_u8(2);
    out.put_u8(TYPE_AMQP);
    out.put_u16(channel);
    if !encode_hot(performative, out) {
        performative.to_value().encode(out);
    }
    let size = out.len() - start + payload_len;
    let size = u32::try_from(size).unwrap_or(u32::MAX).to_be_bytes();
    if let Some(slot) = out.get_mut(start..start + 4) {
        slot.copy_from_slice(&size);
    }
}

/// The size of the frame `encode_frame_head` writes, payload excluded.
pub fn frame_head_len(performative: &Performative) -> usize {
    FRAME_HEADER_BYTES
        + encoded_len_hot(performative).unwrap_or_else(|| performative.to_value().encoded_len())
}

pub fn encode_empty_frame(out: &mut BytesMut) {
    out.put_slice(&[0, 0, 0, 8, 2, TYPE_AMQP, 0, 0]);
}

pub fn encode_sasl_frame(out: &mut BytesMut, frame: &SaslFrame) {
    let mut body = BytesMut::new();
    frame.to_value().encode(&mut body);
    out.put_u32(u32::try_from(FRAME_HEADER_BYTES + body.len()).unwrap_or(u32::MAX));
    out.put_u8(2);
    out.put_u8(TYPE_SASL);
    out.put_u16(0);
    out.put_slice(&body);
}
