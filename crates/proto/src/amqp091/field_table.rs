//! Field tables and field values, with RabbitMQ's type tags (`rabbit_binary_parser`), which
//! differ from the 0.9.1 spec's table: RabbitMQ reads `I` as signed 32, `i` as unsigned 32 and
//! `l` as signed 64 bits, and has no `U`/`L`.
//!
//! Layout: a table is a `u32` byte length, then entries of shortstr key, one tag octet and the
//! value. An array is a `u32` byte length, then tagged values. Nesting is limited to
//! `FIELD_DEPTH_MAX` levels so that hostile input cannot overflow the stack.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::DecodeError;
use super::short_str::ShortStr;
use super::wire::{self, Cursor};

/// How deeply tables and arrays may nest (the outermost table counts as one level).
pub const FIELD_DEPTH_MAX: usize = 100;

/// A field table. Entry order is preserved as it was on the wire; keys may repeat on the wire, and
/// `get` then returns the first, as RabbitMQ's `table_lookup` does.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct FieldTable(pub Vec<(ShortStr, FieldValue)>);

/// A field value; the comment on each variant is its RabbitMQ type tag.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldValue {
    /// `t`; any non-zero octet decodes as true.
    Bool(bool),
    /// `b`
    I8(i8),
    /// `B`
    U8(u8),
    /// `s`
    I16(i16),
    /// `u`
    U16(u16),
    /// `I`
    I32(i32),
    /// `i`
    U32(u32),
    /// `l`
    I64(i64),
    /// `f`
    F32(f32),
    /// `d`
    F64(f64),
    /// `D`: value / 10^scale.
    Decimal { scale: u8, value: u32 },
    /// `S`: binary, often UTF-8.
    LongStr(Bytes),
    /// `A`
    Array(Vec<FieldValue>),
    /// `T`: seconds since the epoch.
    Timestamp(u64),
    /// `F`
    Table(FieldTable),
    /// `V`
    Void,
    /// `x`
    Bytes(Bytes),
}

impl FieldTable {
    /// The value of the first entry named `key`.
    pub fn get(&self, key: &str) -> Option<&FieldValue> {
        self.0
            .iter()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v)
    }

    /// Sets `key` to `value`, replacing the first entry of that name or appending.
    pub fn insert(&mut self, key: impl Into<ShortStr>, value: FieldValue) {
        let key = key.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key, value)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, (ShortStr, FieldValue)> {
        self.0.iter()
    }

    /// The size `encode` writes, length prefix included.
    pub fn encoded_len(&self) -> usize {
        4 + self
            .0
            .iter()
            .map(|(k, v)| 1 + k.len() + v.encoded_len())
            .sum::<usize>()
    }

    /// Writes the table as on the wire: `u32` byte length, then the entries.
    pub fn encode(&self, out: &mut BytesMut) {
        let at = wire::begin_len_u32(out);
        for (key, value) in &self.0 {
            wire::put_shortstr(out, key);
            value.encode(out);
        }
        wire::patch_len_u32(out, at);
    }
}

impl<'a> IntoIterator for &'a FieldTable {
    type Item = &'a (ShortStr, FieldValue);
    type IntoIter = std::slice::Iter<'a, (ShortStr, FieldValue)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<K: Into<ShortStr>> FromIterator<(K, FieldValue)> for FieldTable {
    fn from_iter<I: IntoIterator<Item = (K, FieldValue)>>(iter: I) -> FieldTable {
        FieldTable(iter.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
}

impl FieldValue {
    /// The string of a `LongStr` that is UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FieldValue::LongStr(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// Any integer variant (`I8` to `I64`, `U8` to `U32`) widened to `i64`; `None` for the other
    /// variants, timestamps included.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            FieldValue::I8(v) => Some(i64::from(v)),
            FieldValue::U8(v) => Some(i64::from(v)),
            FieldValue::I16(v) => Some(i64::from(v)),
            FieldValue::U16(v) => Some(i64::from(v)),
            FieldValue::I32(v) => Some(i64::from(v)),
            FieldValue::U32(v) => Some(i64::from(v)),
            FieldValue::I64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            FieldValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// RabbitMQ's type tag.
    pub fn tag(&self) -> u8 {
        match self {
            FieldValue::Bool(_) => b't',
            FieldValue::I8(_) => b'b',
            FieldValue::U8(_) => b'B',
            FieldValue::I16(_) => b's',
            FieldValue::U16(_) => b'u',
            FieldValue::I32(_) => b'I',
            FieldValue::U32(_) => b'i',
            FieldValue::I64(_) => b'l',
            FieldValue::F32(_) => b'f',
            FieldValue::F64(_) => b'd',
            FieldValue::Decimal { .. } => b'D',
            FieldValue::LongStr(_) => b'S',
            FieldValue::Array(_) => b'A',
            FieldValue::Timestamp(_) => b'T',
            FieldValue::Table(_) => b'F',
            FieldValue::Void => b'V',
            FieldValue::Bytes(_) => b'x',
        }
    }

    /// The size `encode` writes, tag included.
    pub fn encoded_len(&self) -> usize {
        1 + match self {
            FieldValue::Void => 0,
            FieldValue::Bool(_) | FieldValue::I8(_) | FieldValue::U8(_) => 1,
            FieldValue::I16(_) | FieldValue::U16(_) => 2,
            FieldValue::I32(_) | FieldValue::U32(_) | FieldValue::F32(_) => 4,
            FieldValue::Decimal { .. } => 5,
            FieldValue::I64(_) | FieldValue::F64(_) | FieldValue::Timestamp(_) => 8,
            FieldValue::LongStr(b) | FieldValue::Bytes(b) => 4 + b.len(),
            FieldValue::Array(values) => {
                4 + values.iter().map(FieldValue::encoded_len).sum::<usize>()
            }
            FieldValue::Table(t) => t.encoded_len(),
        }
    }

    /// Writes the tag octet and the value.
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u8(self.tag());
        match self {
            FieldValue::Bool(v) => out.put_u8(u8::from(*v)),
            FieldValue::I8(v) => out.put_i8(*v),
            FieldValue::U8(v) => out.put_u8(*v),
            FieldValue::I16(v) => out.put_i16(*v),
            FieldValue::U16(v) => out.put_u16(*v),
            FieldValue::I32(v) => out.put_i32(*v),
            FieldValue::U32(v) => out.put_u32(*v),
            FieldValue::I64(v) => out.put_i64(*v),
            FieldValue::F32(v) => out.put_f32(*v),
            FieldValue::F64(v) => out.put_f64(*v),
            FieldValue::Decimal { scale, value } => {
                out.put_u8(*scale);
                out.put_u32(*value);
            }
            FieldValue::LongStr(b) | FieldValue::Bytes(b) => wire::put_longstr(out, b),
            FieldValue::Array(values) => {
                let at = wire::begin_len_u32(out);
                values.iter().for_each(|v| v.encode(out));
                wire::patch_len_u32(out, at);
            }
            FieldValue::Timestamp(v) => out.put_u64(*v),
            FieldValue::Table(t) => t.encode(out),
            FieldValue::Void => {}
        }
    }
}

/// Decodes a length-prefixed table; `depth_left` is how many more levels may open.
pub(crate) fn decode_table(
    src: &Bytes,
    c: &mut Cursor<'_>,
    field: &'static str,
    depth_left: usize,
) -> Result<FieldTable, DecodeError> {
    let mut body = open_nested(c, field, depth_left)?;
    let mut entries = Vec::new();
    while !body.is_empty() {
        let key = body.shortstr_of(src, field)?;
        let value = decode_value(src, &mut body, field, depth_left.saturating_sub(1))?;
        entries.push((key, value));
    }
    Ok(FieldTable(entries))
}

/// Reads a `u32` length and returns a cursor over that many bytes, if one more level may open.
fn open_nested<'a>(
    c: &mut Cursor<'a>,
    field: &'static str,
    depth_left: usize,
) -> Result<Cursor<'a>, DecodeError> {
    if depth_left == 0 {
        return Err(DecodeError::NestingTooDeep {
            context: c.context(),
            field,
            limit: FIELD_DEPTH_MAX,
            offset: c.pos(),
        });
    }
    let len = c.long(field)?;
    let len = usize::try_from(len).map_err(|_| c.truncated(field, u64::from(len)))?;
    c.sub(len, field)
}

fn decode_array(
    src: &Bytes,
    c: &mut Cursor<'_>,
    field: &'static str,
    depth_left: usize,
) -> Result<Vec<FieldValue>, DecodeError> {
    let mut body = open_nested(c, field, depth_left)?;
    let mut values = Vec::new();
    while !body.is_empty() {
        values.push(decode_value(
            src,
            &mut body,
            field,
            depth_left.saturating_sub(1),
        )?);
    }
    Ok(values)
}

/// Decodes one tagged value; a nested table or array may open `depth_left` more levels.
fn decode_value(
    src: &Bytes,
    c: &mut Cursor<'_>,
    field: &'static str,
    depth_left: usize,
) -> Result<FieldValue, DecodeError> {
    let offset = c.pos();
    let value = match c.octet(field)? {
        b't' => FieldValue::Bool(c.octet(field)? != 0),
        b'b' => FieldValue::I8(i8::from_be_bytes([c.octet(field)?])),
        b'B' => FieldValue::U8(c.octet(field)?),
        b's' => FieldValue::I16(i16::from_be_bytes(c.short(field)?.to_be_bytes())),
        b'u' => FieldValue::U16(c.short(field)?),
        b'I' => FieldValue::I32(i32::from_be_bytes(c.long(field)?.to_be_bytes())),
        b'i' => FieldValue::U32(c.long(field)?),
        b'l' => FieldValue::I64(i64::from_be_bytes(c.longlong(field)?.to_be_bytes())),
        b'f' => FieldValue::F32(f32::from_bits(c.long(field)?)),
        b'd' => FieldValue::F64(f64::from_bits(c.longlong(field)?)),
        b'D' => FieldValue::Decimal {
            scale: c.octet(field)?,
            value: c.long(field)?,
        },
        b'S' => FieldValue::LongStr(src.slice_ref(c.long_prefixed(field)?)),
        b'x' => FieldValue::Bytes(src.slice_ref(c.long_prefixed(field)?)),
        b'A' => FieldValue::Array(decode_array(src, c, field, depth_left)?),
        b'T' => FieldValue::Timestamp(c.longlong(field)?),
        b'F' => FieldValue::Table(decode_table(src, c, field, depth_left)?),
        b'V' => FieldValue::Void,
        tag => {
            return Err(DecodeError::UnknownFieldType {
                context: c.context(),
                field,
                tag,
                offset,
            })
        }
    };
    Ok(value)
}

/// Checks a length-prefixed table as `decode_table` would, without allocating.
pub(crate) fn skip_table(
    c: &mut Cursor<'_>,
    field: &'static str,
    depth_left: usize,
) -> Result<(), DecodeError> {
    let mut body = open_nested(c, field, depth_left)?;
    while !body.is_empty() {
        body.shortstr(field)?;
        skip_value(&mut body, field, depth_left.saturating_sub(1))?;
    }
    Ok(())
}

fn skip_value(
    c: &mut Cursor<'_>,
    field: &'static str,
    depth_left: usize,
) -> Result<(), DecodeError> {
    let offset = c.pos();
    let fixed = match c.octet(field)? {
        b'V' => 0,
        b't' | b'b' | b'B' => 1,
        b's' | b'u' => 2,
        b'I' | b'i' | b'f' => 4,
        b'D' => 5,
        b'l' | b'd' | b'T' => 8,
        b'S' | b'x' => return c.long_prefixed(field).map(drop),
        b'F' => return skip_table(c, field, depth_left),
        b'A' => {
            let mut body = open_nested(c, field, depth_left)?;
            while !body.is_empty() {
                skip_value(&mut body, field, depth_left.saturating_sub(1))?;
            }
            return Ok(());
        }
        tag => {
            return Err(DecodeError::UnknownFieldType {
                context: c.context(),
                field,
                tag,
                offset,
            })
        }
    };
    c.take(fixed, field).map(drop)
}

#[cfg(test)]
#[path = "field_table_test.rs"]
mod tests;

/// Decodes a table body that has no length prefix (the AMQPLAIN SASL response).
pub fn decode_table_body(body: Bytes) -> Result<FieldTable, DecodeError> {
    let len = u32::try_from(body.len()).map_err(|_| DecodeError::InvalidUtf8 {
        context: "AMQPLAIN response",
        field: "table",
        offset: 0,
    })?;
    let mut framed = BytesMut::with_capacity(body.len() + 4);
    framed.put_u32(len);
    framed.extend_from_slice(&body);
    let framed = framed.freeze();
    let mut cursor = Cursor::new(&framed, "AMQPLAIN response");
    decode_table(&framed, &mut cursor, "table", FIELD_DEPTH_MAX)
}

#[cfg(test)]
mod table_body_tests {
    use super::*;

    #[test]
    fn table_body_round_trips_and_rejects_garbage() {
        let mut table = FieldTable::default();
        table.insert("LOGIN", FieldValue::LongStr(Bytes::from_static(b"guest")));
        let mut encoded = BytesMut::new();
        table.encode(&mut encoded);
        let body = encoded.freeze().slice(4..);
        assert_eq!(decode_table_body(body).unwrap(), table);
        assert!(decode_table_body(Bytes::from_static(b"\x05LOGINZ")).is_err());
    }
}
