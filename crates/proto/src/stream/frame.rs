//! The frame layer: a uint32 size (the bytes after it), then key (uint16, top bit set for a
//! response), version (uint16) and the command's body.
//!
//! `decode_frame` reads the 4-byte size first and refuses a size above `frame_max` before the
//! rest arrives, so an oversize frame never makes it allocate; it splits a complete frame off
//! the read buffer, so the body is a `Bytes` slice of it and nothing is copied.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::codes::{key, name, RESPONSE_BIT};
use super::error::{DecodeError, EncodeError};
use super::wire::Writer;

/// The size prefix.
pub const SIZE_PREFIX_LEN: usize = 4;
/// Key and version: the smallest frame after the size prefix.
pub const FRAME_HEADER_LEN: usize = 4;

/// One complete frame, not yet decoded into a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The command key without the response bit.
    pub key: u16,
    /// Whether the key had the response bit (0x8000) set.
    pub response: bool,
    pub version: u16,
    /// Everything after the version.
    pub body: Bytes,
}

/// Splits one complete frame off the front of `buf`.
///
/// Returns `Ok(None)` and leaves `buf` untouched when the frame is not complete yet. A size
/// above `frame_max` (0 = no limit) is an error as soon as the size prefix is buffered.
pub fn decode_frame(buf: &mut BytesMut, frame_max: u32) -> Result<Option<Frame>, DecodeError> {
    let Some(Ok(prefix)) = buf.get(..SIZE_PREFIX_LEN).map(<[u8; 4]>::try_from) else {
        return Ok(None);
    };
    let size = u32::from_be_bytes(prefix);
    if frame_max != 0 && size > frame_max {
        return Err(DecodeError::FrameTooLarge { size, frame_max });
    }
    if (size as usize) < FRAME_HEADER_LEN {
        return Err(DecodeError::FrameTooSmall { size });
    }
    let frame_len = usize::try_from(size)
        .ok()
        .and_then(|size| size.checked_add(SIZE_PREFIX_LEN))
        .ok_or(DecodeError::FrameTooLarge { size, frame_max })?;
    if buf.len() < frame_len {
        return Ok(None);
    }
    let mut frame = buf.split_to(frame_len).freeze();
    debug_assert_eq!(
        frame.remaining(),
        frame_len,
        "split_to takes the whole frame"
    );
    frame.advance(SIZE_PREFIX_LEN);
    let raw_key = frame.get_u16();
    let version = frame.get_u16();
    Ok(Some(Frame {
        key: raw_key & !RESPONSE_BIT,
        response: raw_key & RESPONSE_BIT != 0,
        version,
        body: frame,
    }))
}

/// Appends one whole frame to `out`: key, version, what `body` writes, and the size in
/// front. When `body` fails, `out` is left as it was.
pub(crate) fn encode_frame(
    out: &mut BytesMut,
    command_key: u16,
    response: bool,
    version: u16,
    body: impl FnOnce(&mut Writer) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    let start = begin_frame(out, command_key, response, version);
    let command = name(command_key);
    let mut w = Writer { out, command };
    if let Err(e) = body(&mut w) {
        out.truncate(start);
        return Err(e);
    }
    end_frame(out, start, command)
}

/// Starts a frame in `out`: a size placeholder, the key and the version. Returns where the
/// frame starts, for `end_frame`.
fn begin_frame(out: &mut BytesMut, command_key: u16, response: bool, version: u16) -> usize {
    debug_assert_eq!(command_key & RESPONSE_BIT, 0, "command keys are 15 bits");
    let start = out.len();
    out.put_u32(0);
    out.put_u16(if response {
        command_key | RESPONSE_BIT
    } else {
        command_key
    });
    out.put_u16(version);
    start
}

/// Writes the size of the frame begun at `start` into its placeholder.
fn end_frame(out: &mut BytesMut, start: usize, command: &'static str) -> Result<(), EncodeError> {
    let length = out.len() - start - SIZE_PREFIX_LEN;
    let Ok(size) = u32::try_from(length) else {
        out.truncate(start);
        return Err(EncodeError::TooLong {
            command,
            field: "frame",
            length,
            max: u64::from(u32::MAX),
        });
    };
    if let Some(slot) = out.get_mut(start..start + SIZE_PREFIX_LEN) {
        slot.copy_from_slice(&size.to_be_bytes());
    }
    debug_assert!(
        length >= FRAME_HEADER_LEN,
        "a frame holds at least a key and a version"
    );
    Ok(())
}

/// Writes the header of a Deliver frame whose osiris chunk is `chunk`, without the chunk: the
/// connection then writes the chunk's slices as they lie on disk (one vectored write).
///
/// `committed_chunk_id` selects version 2 (`Some`) or version 1 (`None`).
pub fn encode_deliver_header(
    out: &mut BytesMut,
    subscription_id: u8,
    committed_chunk_id: Option<u64>,
    chunk: &[Bytes],
) -> Result<(), EncodeError> {
    let chunk_len: usize = chunk.iter().map(Bytes::len).sum();
    let header_len = FRAME_HEADER_LEN + 1 + if committed_chunk_id.is_some() { 8 } else { 0 };
    let length = chunk_len.saturating_add(header_len);
    let size = u32::try_from(length).map_err(|_| EncodeError::TooLong {
        command: "deliver",
        field: "osiris chunk",
        length,
        max: u64::from(u32::MAX),
    })?;
    let version = if committed_chunk_id.is_some() { 2 } else { 1 };
    out.put_u32(size);
    out.put_u16(key::DELIVER);
    out.put_u16(version);
    out.put_u8(subscription_id);
    if let Some(committed) = committed_chunk_id {
        out.put_u64(committed);
    }
    Ok(())
}
