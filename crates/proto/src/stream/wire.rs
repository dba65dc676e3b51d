//! Field readers and writers for the stream protocol's types: big-endian integers, strings
//! (int16 length, -1 = null, UTF-8), bytes (int32 length, -1 = null) and arrays (int32 count).
//!
//! `Reader` checks `remaining()` before every `Buf` getter (they panic when short) and slices
//! bytes fields off the frame body without copying. Array counts are checked against the bytes
//! left before anything is allocated, so a forged count cannot make the decoder reserve memory.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::error::{DecodeError, EncodeError};

/// A key/value list as the protocol sends it (peer properties, arguments, properties).
pub type Properties = Vec<(String, String)>;

/// Reads fields off a frame body, naming the command in its errors.
pub(crate) struct Reader {
    body: Bytes,
    body_len: usize,
    command: &'static str,
}

impl Reader {
    pub(crate) fn new(body: Bytes, command: &'static str) -> Self {
        let body_len = body.len();
        Self {
            body,
            body_len,
            command,
        }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.body.remaining()
    }

    fn offset(&self) -> usize {
        self.body_len - self.body.remaining()
    }

    fn need(&self, field: &'static str, needed: usize) -> Result<(), DecodeError> {
        if self.body.remaining() >= needed {
            return Ok(());
        }
        Err(DecodeError::Truncated {
            command: self.command,
            field,
            offset: self.offset(),
            needed: needed as u64,
            available: self.body.remaining(),
        })
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        self.need(field, 1)?;
        Ok(self.body.get_u8())
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        self.need(field, 2)?;
        Ok(self.body.get_u16())
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        self.need(field, 4)?;
        Ok(self.body.get_u32())
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        self.need(field, 8)?;
        Ok(self.body.get_u64())
    }

    pub(crate) fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        self.need(field, 8)?;
        Ok(self.body.get_i64())
    }

    /// A string that may be null (length -1).
    pub(crate) fn opt_string(
        &mut self,
        field: &'static str,
    ) -> Result<Option<String>, DecodeError> {
        self.need(field, 2)?;
        let offset = self.offset();
        let length = self.body.get_i16();
        let Ok(length) = usize::try_from(length) else {
            if length == -1 {
                return Ok(None);
            }
            return Err(self.negative(field, offset, i32::from(length)));
        };
        self.need(field, length)?;
        let raw = self.body.split_to(length);
        match String::from_utf8(raw.to_vec()) {
            Ok(text) => Ok(Some(text)),
            Err(_) => Err(DecodeError::InvalidUtf8 {
                command: self.command,
                field,
                offset,
            }),
        }
    }

    /// A string the command requires: null is an error.
    pub(crate) fn string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let offset = self.offset();
        self.opt_string(field)?.ok_or(DecodeError::NullField {
            command: self.command,
            field,
            offset,
        })
    }

    /// A bytes field that may be null (length -1); a slice of the frame, not a copy.
    pub(crate) fn opt_bytes(&mut self, field: &'static str) -> Result<Option<Bytes>, DecodeError> {
        self.need(field, 4)?;
        let offset = self.offset();
        let length = self.body.get_i32();
        let Ok(length) = usize::try_from(length) else {
            if length == -1 {
                return Ok(None);
            }
            return Err(self.negative(field, offset, length));
        };
        self.need(field, length)?;
        Ok(Some(self.body.split_to(length)))
    }

    /// A bytes field the command requires: null is an error.
    pub(crate) fn bytes(&mut self, field: &'static str) -> Result<Bytes, DecodeError> {
        let offset = self.offset();
        self.opt_bytes(field)?.ok_or(DecodeError::NullField {
            command: self.command,
            field,
            offset,
        })
    }

    /// The next byte without taking it.
    pub(crate) fn peek_u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        self.need(field, 1)?;
        Ok(self.body.chunk().first().copied().unwrap_or_default())
    }

    /// `len` bytes whose length was given by an earlier field.
    pub(crate) fn fixed_bytes(
        &mut self,
        field: &'static str,
        len: u32,
    ) -> Result<Bytes, DecodeError> {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        self.need(field, len)?;
        Ok(self.body.split_to(len))
    }

    /// Everything left in the body (a Deliver's osiris chunk).
    pub(crate) fn rest(&mut self) -> Bytes {
        self.body.split_to(self.body.remaining())
    }

    /// An array count, refused when `count * element_size_min` exceeds the bytes left.
    pub(crate) fn count(
        &mut self,
        field: &'static str,
        element_size_min: usize,
    ) -> Result<usize, DecodeError> {
        self.need(field, 4)?;
        let offset = self.offset();
        let count = self.body.get_i32();
        let Ok(count) = usize::try_from(count) else {
            return Err(self.negative(field, offset, count));
        };
        let needed = count.saturating_mul(element_size_min);
        self.need(field, needed)?;
        Ok(count)
    }

    /// A key/value array of strings.
    pub(crate) fn properties(&mut self, field: &'static str) -> Result<Properties, DecodeError> {
        let count = self.count(field, 4)?;
        let mut properties = Vec::with_capacity(count);
        for _ in 0..count {
            let key = self.string(field)?;
            let value = self.string(field)?;
            properties.push((key, value));
        }
        Ok(properties)
    }

    /// A trailing key/value array that clients may leave out: RabbitMQ reads a missing one as
    /// empty (`rabbit_stream_core:parse_properties(<<>>)`), and the Java and Go clients send
    /// Subscribe without it for a consumer that has no name.
    pub(crate) fn optional_properties(
        &mut self,
        field: &'static str,
    ) -> Result<Properties, DecodeError> {
        if self.remaining() == 0 {
            return Ok(Vec::new());
        }
        self.properties(field)
    }

    /// An array of strings.
    pub(crate) fn strings(&mut self, field: &'static str) -> Result<Vec<String>, DecodeError> {
        let count = self.count(field, 2)?;
        let mut strings = Vec::with_capacity(count);
        for _ in 0..count {
            strings.push(self.string(field)?);
        }
        Ok(strings)
    }

    /// Fails when bytes remain after the command's last field.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        match self.body.remaining() {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes {
                command: self.command,
                extra,
            }),
        }
    }

    fn negative(&self, field: &'static str, offset: usize, length: i32) -> DecodeError {
        DecodeError::NegativeLength {
            command: self.command,
            field,
            offset,
            length,
        }
    }
}

/// Appends fields to an output buffer, naming the command in its errors.
pub(crate) struct Writer<'a> {
    pub(crate) out: &'a mut BytesMut,
    pub(crate) command: &'static str,
}

impl Writer<'_> {
    fn too_long(&self, field: &'static str, length: usize, max: u64) -> EncodeError {
        EncodeError::TooLong {
            command: self.command,
            field,
            length,
            max,
        }
    }

    pub(crate) fn opt_string(
        &mut self,
        field: &'static str,
        value: Option<&str>,
    ) -> Result<(), EncodeError> {
        let Some(value) = value else {
            self.out.put_i16(-1);
            return Ok(());
        };
        let length = i16::try_from(value.len())
            .map_err(|_| self.too_long(field, value.len(), i16::MAX as u64))?;
        self.out.put_i16(length);
        self.out.put_slice(value.as_bytes());
        Ok(())
    }

    pub(crate) fn string(&mut self, field: &'static str, value: &str) -> Result<(), EncodeError> {
        self.opt_string(field, Some(value))
    }

    pub(crate) fn opt_bytes(
        &mut self,
        field: &'static str,
        value: Option<&[u8]>,
    ) -> Result<(), EncodeError> {
        let Some(value) = value else {
            self.out.put_i32(-1);
            return Ok(());
        };
        let length = i32::try_from(value.len())
            .map_err(|_| self.too_long(field, value.len(), i32::MAX as u64))?;
        self.out.put_i32(length);
        self.out.put_slice(value);
        Ok(())
    }

    pub(crate) fn count(&mut self, field: &'static str, count: usize) -> Result<(), EncodeError> {
        let count =
            i32::try_from(count).map_err(|_| self.too_long(field, count, i32::MAX as u64))?;
        self.out.put_i32(count);
        Ok(())
    }

    pub(crate) fn properties(
        &mut self,
        field: &'static str,
        properties: &[(String, String)],
    ) -> Result<(), EncodeError> {
        self.count(field, properties.len())?;
        for (key, value) in properties {
            self.string(field, key)?;
            self.string(field, value)?;
        }
        Ok(())
    }

    pub(crate) fn strings(
        &mut self,
        field: &'static str,
        values: &[String],
    ) -> Result<(), EncodeError> {
        self.count(field, values.len())?;
        for value in values {
            self.string(field, value)?;
        }
        Ok(())
    }
}
