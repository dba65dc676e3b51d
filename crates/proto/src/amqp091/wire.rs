//! Primitive readers and writers shared by methods, properties and field tables.
//!
//! `Cursor` walks a `&[u8]` and never allocates (property validation and peeks use it alone);
//! `Decoder` adds the `Bytes` the slice came from, so that strings come out as zero-copy slices.
//! Every read checks its length against the bytes left before touching them. All integers are
//! big-endian.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::DecodeError;
use super::field_table::{self, FieldTable, FIELD_DEPTH_MAX};
use super::short_str::ShortStr;

/// A bounds-checked reader over `data[pos..end]`. Offsets in errors are indexes into `data`.
#[derive(Clone)]
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
    context: &'static str,
}

impl<'a> Cursor<'a> {
    /// A cursor over all of `data`; `context` names what is being decoded in errors.
    pub(crate) fn new(data: &'a [u8], context: &'static str) -> Cursor<'a> {
        Cursor {
            data,
            pos: 0,
            end: data.len(),
            context,
        }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn context(&self) -> &'static str {
        self.context
    }

    pub(crate) fn remaining(&self) -> usize {
        self.end.saturating_sub(self.pos)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Takes the next `n` bytes.
    pub(crate) fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.end);
        let slice = end.and_then(|end| self.data.get(self.pos..end));
        match (end, slice) {
            (Some(end), Some(slice)) => {
                self.pos = end;
                Ok(slice)
            }
            _ => Err(self.truncated(field, n as u64)),
        }
    }

    pub(crate) fn truncated(&self, field: &'static str, needed: u64) -> DecodeError {
        DecodeError::Truncated {
            context: self.context,
            field,
            offset: self.pos,
            needed,
            available: self.remaining(),
        }
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let slice = self.take(N, field)?;
        <[u8; N]>::try_from(slice).map_err(|_| self.truncated(field, N as u64))
    }

    pub(crate) fn octet(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        self.array::<1>(field).map(u8::from_be_bytes)
    }

    pub(crate) fn short(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        self.array::<2>(field).map(u16::from_be_bytes)
    }

    pub(crate) fn long(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        self.array::<4>(field).map(u32::from_be_bytes)
    }

    pub(crate) fn longlong(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        self.array::<8>(field).map(u64::from_be_bytes)
    }

    /// A length-prefixed byte string (`u8` length for shortstr, `u32` for longstr).
    pub(crate) fn long_prefixed(&mut self, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let len = self.long(field)?;
        let len = usize::try_from(len).map_err(|_| self.truncated(field, u64::from(len)))?;
        self.take(len, field)
    }

    /// A shortstr, checked to be UTF-8.
    pub(crate) fn shortstr(&mut self, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let (bytes, offset) = self.shortstr_unchecked(field)?;
        match std::str::from_utf8(bytes) {
            Ok(_) => Ok(bytes),
            Err(_) => Err(self.invalid_utf8(field, offset)),
        }
    }

    /// A shortstr's bytes and their offset, not yet checked for UTF-8 (the caller checks
    /// them once, where it keeps them).
    fn shortstr_unchecked(
        &mut self,
        field: &'static str,
    ) -> Result<(&'a [u8], usize), DecodeError> {
        let len = self.octet(field)?;
        let offset = self.pos;
        let bytes = self.take(usize::from(len), field)?;
        Ok((bytes, offset))
    }

    /// A shortstr kept as a slice of `src` (the buffer this cursor reads), checked for UTF-8
    /// once, as it is wrapped.
    pub(crate) fn shortstr_of(
        &mut self,
        src: &Bytes,
        field: &'static str,
    ) -> Result<ShortStr, DecodeError> {
        let (slice, offset) = self.shortstr_unchecked(field)?;
        ShortStr::from_utf8(src.slice_ref(slice)).map_err(|_| self.invalid_utf8(field, offset))
    }

    fn invalid_utf8(&self, field: &'static str, offset: usize) -> DecodeError {
        DecodeError::InvalidUtf8 {
            context: self.context,
            field,
            offset,
        }
    }

    /// A cursor over the next `len` bytes (a nested table or array); skips them here.
    pub(crate) fn sub(
        &mut self,
        len: usize,
        field: &'static str,
    ) -> Result<Cursor<'a>, DecodeError> {
        let start = self.pos;
        self.take(len, field)?;
        Ok(Cursor {
            data: self.data,
            pos: start,
            end: self.pos,
            context: self.context,
        })
    }

    /// Fails unless every byte has been read.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes {
                context: self.context,
                offset: self.pos,
                extra,
            }),
        }
    }
}

/// A `Cursor` over a `Bytes`, which hands out strings as slices of it (no copy).
pub(crate) struct Decoder<'a> {
    src: &'a Bytes,
    cursor: Cursor<'a>,
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(src: &'a Bytes, context: &'static str) -> Decoder<'a> {
        Decoder {
            src,
            cursor: Cursor::new(src, context),
        }
    }

    pub(crate) fn cursor(&mut self) -> &mut Cursor<'a> {
        &mut self.cursor
    }

    /// Names what is decoded from here on, in errors.
    pub(crate) fn set_context(&mut self, context: &'static str) {
        self.cursor.context = context;
    }

    pub(crate) fn octet(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        self.cursor.octet(field)
    }

    pub(crate) fn short(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        self.cursor.short(field)
    }

    pub(crate) fn long(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        self.cursor.long(field)
    }

    pub(crate) fn longlong(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        self.cursor.longlong(field)
    }

    pub(crate) fn shortstr(&mut self, field: &'static str) -> Result<ShortStr, DecodeError> {
        self.cursor.shortstr_of(self.src, field)
    }

    pub(crate) fn longstr(&mut self, field: &'static str) -> Result<Bytes, DecodeError> {
        let slice = self.cursor.long_prefixed(field)?;
        Ok(self.src.slice_ref(slice))
    }

    pub(crate) fn table(&mut self, field: &'static str) -> Result<FieldTable, DecodeError> {
        field_table::decode_table(self.src, &mut self.cursor, field, FIELD_DEPTH_MAX)
    }

    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        self.cursor.finish()
    }
}

pub(crate) fn put_octet(out: &mut BytesMut, v: u8) {
    out.put_u8(v);
}

pub(crate) fn put_short(out: &mut BytesMut, v: u16) {
    out.put_u16(v);
}

pub(crate) fn put_long(out: &mut BytesMut, v: u32) {
    out.put_u32(v);
}

pub(crate) fn put_longlong(out: &mut BytesMut, v: u64) {
    out.put_u64(v);
}

pub(crate) fn put_shortstr(out: &mut BytesMut, s: &ShortStr) {
    debug_assert!(s.len() <= ShortStr::MAX_LEN);
    out.put_u8(u8::try_from(s.len()).unwrap_or(u8::MAX));
    out.put_slice(s.as_bytes());
}

pub(crate) fn put_longstr(out: &mut BytesMut, s: &[u8]) {
    put_long(out, len_u32(s.len()));
    out.put_slice(s);
}

pub(crate) fn put_table(out: &mut BytesMut, t: &FieldTable) {
    t.encode(out);
}

/// A length that the wire holds in 32 bits. Longer values cannot be sent in a frame anyway
/// (frame sizes are 32-bit), so this is an invariant of the caller.
pub(crate) fn len_u32(len: usize) -> u32 {
    debug_assert!(
        u32::try_from(len).is_ok(),
        "invariant: wire lengths fit 32 bits"
    );
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// Reserves a 32-bit length prefix; returns its position for `patch_len_u32`.
pub(crate) fn begin_len_u32(out: &mut BytesMut) -> usize {
    let at = out.len();
    out.put_u32(0);
    at
}

/// Writes the number of bytes after the prefix at `at` into that prefix.
pub(crate) fn patch_len_u32(out: &mut BytesMut, at: usize) {
    let len = len_u32(out.len().saturating_sub(at + 4));
    let prefix = at.checked_add(4).and_then(|end| out.get_mut(at..end));
    debug_assert!(
        prefix.is_some(),
        "invariant: begin_len_u32 reserved the prefix"
    );
    if let Some(prefix) = prefix {
        prefix.copy_from_slice(&len.to_be_bytes());
    }
}
