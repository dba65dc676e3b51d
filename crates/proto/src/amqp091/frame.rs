//! Frames: the protocol header, and the decoder and encoders for the four frame types.
//!
//! Layout of a frame: type (u8: 1 method, 2 header, 3 body, 8 heartbeat), channel (u16), payload
//! size (u32), the payload, then the frame-end octet 0xCE. A content-header payload is class-id
//! (u16), weight (u16, always 0), body-size (u64), then the raw properties.
//!
//! `decode_frame` checks the header (type, size against `frame_max`) as soon as its 7 bytes are
//! buffered, so an oversize frame is refused before its payload arrives; it allocates nothing
//! until the whole frame and its frame-end octet are there.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::error::DecodeError;
use super::method::{BasicDeliver, Method};
use super::properties::validate_properties;
use super::short_str::ShortStr;
use super::wire::Cursor;

/// The 8 bytes a client sends first: "AMQP", 0, then version 0-9-1.
pub const PROTOCOL_HEADER: [u8; 8] = *b"AMQP\x00\x00\x09\x01";
/// The octet that ends every frame.
pub const FRAME_END: u8 = 0xCE;
/// The smallest `frame_max` a peer may negotiate. The spec JSON says 8192; RabbitMQ uses 4096.
pub const FRAME_MIN_SIZE: u32 = 4096;
/// Type (1), channel (2) and payload size (4). A frame has this plus one frame-end octet around
/// its payload.
pub const FRAME_HEADER_SIZE: usize = 7;

const FRAME_METHOD: u8 = 1;
const FRAME_HEADER: u8 = 2;
const FRAME_BODY: u8 = 3;
const FRAME_HEARTBEAT: u8 = 8;
/// Header and frame-end: what a frame adds to its payload.
const FRAME_OVERHEAD: usize = FRAME_HEADER_SIZE + 1;
/// Class-id, weight and body-size, before the properties in a content-header payload.
const CONTENT_HEADER_FIXED: usize = 12;
/// The only class with content.
const CLASS_BASIC: u16 = 60;

/// What the first bytes from a client are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolHeader {
    /// Fewer than 8 bytes so far, and they match the header's start.
    Incomplete,
    /// `PROTOCOL_HEADER`.
    Valid,
    /// Anything else: reply with `PROTOCOL_HEADER` and close, as the spec says.
    Mismatch,
}

/// Checks the first 8 bytes of `buf` against `PROTOCOL_HEADER`.
pub fn check_protocol_header(buf: &[u8]) -> ProtocolHeader {
    let n = buf.len().min(PROTOCOL_HEADER.len());
    if buf.get(..n) != PROTOCOL_HEADER.get(..n) {
        ProtocolHeader::Mismatch
    } else if n < PROTOCOL_HEADER.len() {
        ProtocolHeader::Incomplete
    } else {
        ProtocolHeader::Valid
    }
}

/// The header of a content (the frame after a content-bearing method).
#[derive(Clone, Debug, PartialEq)]
pub struct ContentHeader {
    pub class_id: u16,
    pub body_size: u64,
    /// Raw property flags and list, already checked by `validate_properties`.
    pub properties: Bytes,
}

/// One decoded frame.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    Method { channel: u16, method: Method },
    Header { channel: u16, header: ContentHeader },
    Body { channel: u16, payload: Bytes },
    Heartbeat { channel: u16 },
}

/// Decodes one frame from the front of `buf`. Complete frame: splits its bytes off `buf`
/// (`split_to(..).freeze()`, so bodies and strings are zero-copy slices of the read buffer) and
/// returns it. Incomplete: `Ok(None)`, `buf` untouched.
///
/// Checks, before parsing or allocating anything, that the declared size fits `frame_max` (the
/// negotiated maximum for the whole frame including its 8 bytes of overhead; as RabbitMQ, whose
/// `FRAME_SIZE_FUDGE` forgives those 8 bytes, a payload of up to `frame_max` bytes passes; 0 means
/// no limit; before connection.tune-ok a broker passes `FRAME_MIN_SIZE`, as the spec asks) and
/// that the frame-end octet is 0xCE. Those errors leave `buf` untouched; errors in the payload
/// consume the frame. Either way the connection must close with `reply_code()`.
///
/// A heartbeat on a non-zero channel is returned as is: whether that is an error is the
/// connection's call (RabbitMQ closes with 501).
pub fn decode_frame(buf: &mut BytesMut, frame_max: u32) -> Result<Option<Frame>, DecodeError> {
    let Some(Ok(header)) = buf
        .get(..FRAME_HEADER_SIZE)
        .map(<[u8; FRAME_HEADER_SIZE]>::try_from)
    else {
        return Ok(None);
    };
    let [frame_type, c0, c1, s0, s1, s2, s3] = header;
    let channel = u16::from_be_bytes([c0, c1]);
    let payload_size = u32::from_be_bytes([s0, s1, s2, s3]);
    if !matches!(
        frame_type,
        FRAME_METHOD | FRAME_HEADER | FRAME_BODY | FRAME_HEARTBEAT
    ) {
        return Err(DecodeError::UnknownFrameType {
            frame_type,
            channel,
        });
    }
    let too_large = DecodeError::FrameTooLarge {
        frame_type,
        channel,
        payload_size,
        frame_max,
    };
    // RabbitMQ's FRAME_SIZE_FUDGE: a payload of up to frame_max bytes is accepted, 8 more than
    // the limit on the whole frame allows, since clients that fill frames get it wrong by that.
    if frame_max != 0 && payload_size > frame_max {
        return Err(too_large);
    }
    let frame_size = u64::from(payload_size) + FRAME_OVERHEAD as u64;
    let frame_size = usize::try_from(frame_size).map_err(|_| too_large)?;
    let Some(&frame_end) = buf.get(frame_size - 1) else {
        return Ok(None);
    };
    if frame_end != FRAME_END {
        let found = frame_end;
        return Err(DecodeError::BadFrameEnd {
            frame_type,
            channel,
            payload_size,
            found,
        });
    }
    // Narrowed to the payload in place: a slice would count one more reference to the read
    // buffer (an atomic add and, later, an atomic sub) for every frame.
    let mut payload = buf.split_to(frame_size).freeze();
    payload.advance(FRAME_HEADER_SIZE);
    payload.truncate(frame_size - FRAME_OVERHEAD);
    decode_payload(frame_type, channel, payload).map(Some)
}

fn decode_payload(frame_type: u8, channel: u16, payload: Bytes) -> Result<Frame, DecodeError> {
    match frame_type {
        FRAME_METHOD => Ok(Frame::Method {
            channel,
            method: Method::decode(payload)?,
        }),
        FRAME_HEADER => Ok(Frame::Header {
            channel,
            header: decode_content_header(payload)?,
        }),
        FRAME_BODY => Ok(Frame::Body { channel, payload }),
        _ if payload.is_empty() => Ok(Frame::Heartbeat { channel }),
        _ => Err(DecodeError::BadHeartbeat {
            channel,
            payload_size: wire_len(payload.len()),
        }),
    }
}

fn decode_content_header(mut payload: Bytes) -> Result<ContentHeader, DecodeError> {
    let mut c = Cursor::new(&payload, "content header");
    let class_id = c.short("class-id")?;
    let weight = c.short("weight")?;
    let body_size = c.longlong("body-size")?;
    debug_assert_eq!(c.pos(), CONTENT_HEADER_FIXED);
    if class_id != CLASS_BASIC {
        return Err(DecodeError::UnknownContentClass { class_id });
    }
    if weight != 0 {
        return Err(DecodeError::BadHeaderWeight { class_id, weight });
    }
    payload.advance(CONTENT_HEADER_FIXED);
    let properties = payload;
    validate_properties(&properties)?;
    Ok(ContentHeader {
        class_id,
        body_size,
        properties,
    })
}

/// Writes a whole method frame, frame-end included.
pub fn encode_method_frame(channel: u16, method: &Method, out: &mut BytesMut) {
    let payload_size = method.encoded_len();
    out.reserve(FRAME_OVERHEAD + payload_size);
    let start = begin_frame(FRAME_METHOD, channel, out);
    method.encode(out);
    debug_assert_eq!(out.len() - start, FRAME_HEADER_SIZE + payload_size);
    end_frame(start, out);
}

/// The fields of a `basic.deliver` as the writer has them: borrowed bytes, so a delivery is
/// encoded without building a `Method` (no reference counts taken on the message's strings).
/// `exchange` and `routing_key` must be short strings (UTF-8, at most 255 bytes).
#[derive(Debug, Clone, Copy)]
pub struct DeliverArgs<'a> {
    pub consumer_tag: &'a ShortStr,
    pub delivery_tag: u64,
    pub redelivered: bool,
    pub exchange: &'a [u8],
    pub routing_key: &'a [u8],
}

/// Writes a `basic.deliver` method frame, byte for byte what `encode_method_frame` writes for
/// the same `BasicDeliver`.
pub fn encode_deliver_frame(channel: u16, args: &DeliverArgs<'_>, out: &mut BytesMut) {
    let strings = [
        args.consumer_tag.as_bytes(),
        args.exchange,
        args.routing_key,
    ];
    // Class and method ids, delivery-tag, the redelivered octet and three length octets.
    let fixed = 2 + 2 + 8 + 1 + 3;
    out.reserve(FRAME_OVERHEAD + fixed + strings.iter().map(|s| s.len()).sum::<usize>());
    let start = begin_frame(FRAME_METHOD, channel, out);
    out.put_u16(BasicDeliver::CLASS_ID);
    out.put_u16(BasicDeliver::METHOD_ID);
    put_short_bytes(out, args.consumer_tag.as_bytes());
    out.put_u64(args.delivery_tag);
    out.put_u8(u8::from(args.redelivered));
    put_short_bytes(out, args.exchange);
    put_short_bytes(out, args.routing_key);
    end_frame(start, out);
}

fn put_short_bytes(out: &mut BytesMut, s: &[u8]) {
    debug_assert!(s.len() <= ShortStr::MAX_LEN);
    let len = s.len().min(ShortStr::MAX_LEN);
    out.put_u8(u8::try_from(len).unwrap_or(u8::MAX));
    out.put_slice(s.get(..len).unwrap_or_default());
}

/// Writes a content-header frame; `properties_raw` is a flags word and property list, as in
/// `ContentHeader::properties` or from `BasicProperties::encode`.
pub fn encode_content_header(
    channel: u16,
    class_id: u16,
    body_size: u64,
    properties_raw: &[u8],
    out: &mut BytesMut,
) {
    out.reserve(FRAME_OVERHEAD + CONTENT_HEADER_FIXED + properties_raw.len());
    let start = begin_frame(FRAME_HEADER, channel, out);
    out.put_u16(class_id);
    out.put_u16(0);
    out.put_u64(body_size);
    out.put_slice(properties_raw);
    end_frame(start, out);
}

/// Writes one body frame. The caller splits bodies so that each frame fits `frame_max`.
pub fn encode_body_frame(channel: u16, payload: &[u8], out: &mut BytesMut) {
    out.reserve(FRAME_OVERHEAD + payload.len());
    let start = begin_frame(FRAME_BODY, channel, out);
    out.put_slice(payload);
    end_frame(start, out);
}

/// Writes a heartbeat frame (channel 0, empty payload).
pub fn encode_heartbeat(out: &mut BytesMut) {
    out.reserve(FRAME_OVERHEAD);
    let start = begin_frame(FRAME_HEARTBEAT, 0, out);
    end_frame(start, out);
}

/// Writes a frame header with a zero size to patch in `end_frame`; returns where it starts.
fn begin_frame(frame_type: u8, channel: u16, out: &mut BytesMut) -> usize {
    let start = out.len();
    out.put_u8(frame_type);
    out.put_u16(channel);
    out.put_u32(0);
    start
}

/// Patches the payload size of the frame at `start` and writes the frame-end octet.
fn end_frame(start: usize, out: &mut BytesMut) {
    let payload_size = wire_len(out.len() - start - FRAME_HEADER_SIZE);
    let size_field = out.get_mut(start + 3..start + FRAME_HEADER_SIZE);
    debug_assert!(
        size_field.is_some(),
        "invariant: begin_frame wrote the header"
    );
    if let Some(size_field) = size_field {
        size_field.copy_from_slice(&payload_size.to_be_bytes());
    }
    out.put_u8(FRAME_END);
}

fn wire_len(len: usize) -> u32 {
    super::wire::len_u32(len)
}

#[cfg(test)]
#[path = "frame_test.rs"]
mod tests;
