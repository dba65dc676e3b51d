//! The AMQP 1.0 type system (types.xml): every primitive encoding, described types, lists,
//! maps and arrays. Decoding is zero-copy: binaries, strings and symbols are `Bytes` slices of
//! the input. Encoding picks the smallest encoding for each value, as the spec recommends.
//!
//! Format codes: the high nibble gives the width of what follows (0x4_ none, 0x5_ one byte,
//! 0x6_ two, 0x7_ four, 0x8_ eight, 0x9_ sixteen, 0xa_/0xb_ variable with a 1/4-byte size,
//! 0xc_/0xd_ compound with 1/4-byte size and count, 0xe_/0xf_ array); 0x00 starts a
//! described value (descriptor, then value).

use bytes::{BufMut, Bytes, BytesMut};

use super::error::DecodeError;

/// How deep compound and described values may nest (bounds the decoder's recursion).
pub const NESTING_MAX: usize = 32;
/// Elements reserved up front for a compound: its count is the peer's word, so beyond this
/// the vector grows only as elements really decode.
const CAPACITY_HINT_MAX: usize = 1024;

/// One AMQP 1.0 value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Ubyte(u8),
    Ushort(u16),
    Uint(u32),
    Ulong(u64),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Decimal32([u8; 4]),
    Decimal64([u8; 8]),
    Decimal128([u8; 16]),
    /// A UTF-32 code point.
    Char(char),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
    Uuid([u8; 16]),
    Binary(Bytes),
    /// UTF-8, checked when decoded.
    String(Bytes),
    /// ASCII, checked when decoded.
    Symbol(Bytes),
    Described(Box<Value>, Box<Value>),
    List(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Array(Vec<Value>),
}

impl Value {
    pub fn string(text: &str) -> Value {
        Value::String(Bytes::copy_from_slice(text.as_bytes()))
    }

    pub fn symbol(text: &str) -> Value {
        Value::Symbol(Bytes::copy_from_slice(text.as_bytes()))
    }

    pub fn symbol_static(text: &'static str) -> Value {
        Value::Symbol(Bytes::from_static(text.as_bytes()))
    }

    /// A described value whose descriptor is a ulong code (as every spec-defined type).
    pub fn described(code: u64, value: Value) -> Value {
        Value::Described(Box::new(Value::Ulong(code)), Box::new(value))
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The text of a string or symbol.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(b) | Value::Symbol(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// Any unsigned or non-negative signed integer as u64.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Ubyte(v) => Some(u64::from(v)),
            Value::Ushort(v) => Some(u64::from(v)),
            Value::Uint(v) => Some(u64::from(v)),
            Value::Ulong(v) => Some(v),
            Value::Byte(v) => u64::try_from(v).ok(),
            Value::Short(v) => u64::try_from(v).ok(),
            Value::Int(v) => u64::try_from(v).ok(),
            Value::Long(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_u32(&self) -> Option<u32> {
        self.as_u64().and_then(|v| u32::try_from(v).ok())
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The ulong code of a described value's descriptor (symbolic descriptors give `None`).
    pub fn descriptor_code(&self) -> Option<u64> {
        match self {
            Value::Described(descriptor, _) => descriptor.as_u64(),
            _ => None,
        }
    }

    /// Encodes the value with its constructor.
    pub fn encode(&self, out: &mut BytesMut) {
        encode_value(self, out);
    }

    /// Decodes one value at the start of `buf`; returns it and the bytes it took.
    pub fn decode(buf: &Bytes) -> Result<(Value, usize), DecodeError> {
        let mut reader = Reader::new(buf);
        let value = reader.value(0)?;
        Ok((value, reader.pos))
    }

    /// Encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        let mut out = BytesMut::new();
        self.encode(&mut out);
        out.len()
    }
}

/// A cursor over a buffer being decoded.
pub struct Reader<'a> {
    buf: &'a Bytes,
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a Bytes) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    pub fn at(buf: &'a Bytes, pos: usize) -> Reader<'a> {
        Reader { buf, pos }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The byte at the cursor, if any.
    pub fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n);
        match end.and_then(|end| self.buf.get(self.pos..end)) {
            Some(slice) => {
                self.pos += n;
                Ok(slice)
            }
            None => Err(DecodeError::Truncated {
                what,
                offset: self.pos,
                needed: n,
                available: self.buf.len().saturating_sub(self.pos),
            }),
        }
    }

    fn take_bytes(&mut self, n: usize, what: &'static str) -> Result<Bytes, DecodeError> {
        let start = self.pos;
        self.take(n, what)?;
        Ok(self.buf.slice(start..self.pos))
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(what)?[0])
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let slice = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array::<4>(what)?))
    }

    /// Reads a constructor and its value.
    pub fn value(&mut self, depth: usize) -> Result<Value, DecodeError> {
        self.within_nesting(depth)?;
        let code = self.u8("format code")?;
        if code == 0x00 {
            let descriptor = self.value(depth + 1)?;
            let value = self.value(depth + 1)?;
            return Ok(Value::Described(Box::new(descriptor), Box::new(value)));
        }
        self.body(code, depth)
    }

    /// Reads the value that follows format code `code`: the variable-width and compound
    /// encodings here, the fixed-width ones in [`Reader::fixed`].
    fn body(&mut self, code: u8, depth: usize) -> Result<Value, DecodeError> {
        let offset = self.pos;
        Ok(match code {
            0xa0 | 0xb0 => Value::Binary(self.variable(code, "binary")?),
            0xa1 | 0xb1 => {
                let bytes = self.variable(code, "string")?;
                if std::str::from_utf8(&bytes).is_err() {
                    return Err(DecodeError::BadUtf8 {
                        what: "string",
                        offset,
                    });
                }
                Value::String(bytes)
            }
            0xa3 | 0xb3 => {
                let bytes = self.variable(code, "symbol")?;
                if !bytes.is_ascii() {
                    return Err(DecodeError::BadUtf8 {
                        what: "symbol",
                        offset,
                    });
                }
                Value::Symbol(bytes)
            }
            0x45 => Value::List(Vec::new()),
            0xc0 | 0xd0 => Value::List(self.compound(code, depth, "list")?),
            0xc1 | 0xd1 => self.map_body(code, depth)?,
            0xe0 | 0xf0 => Value::Array(self.array_body(code, depth)?),
            _ => self.fixed(code)?,
        })
    }

    /// Reads the value of a fixed-width format code (null, booleans, numbers, char, timestamp,
    /// uuid); any other code is not AMQP 1.0's.
    #[inline]
    fn fixed(&mut self, code: u8) -> Result<Value, DecodeError> {
        let offset = self.pos;
        Ok(match code {
            0x40 => Value::Null,
            0x41 => Value::Bool(true),
            0x42 => Value::Bool(false),
            0x56 => Value::Bool(self.u8("boolean")? != 0),
            0x50 => Value::Ubyte(self.u8("ubyte")?),
            0x60 => Value::Ushort(u16::from_be_bytes(self.array("ushort")?)),
            0x70 => Value::Uint(self.u32("uint")?),
            0x52 => Value::Uint(u32::from(self.u8("smalluint")?)),
            0x43 => Value::Uint(0),
            0x80 => Value::Ulong(u64::from_be_bytes(self.array("ulong")?)),
            0x53 => Value::Ulong(u64::from(self.u8("smallulong")?)),
            0x44 => Value::Ulong(0),
            0x51 => Value::Byte(i8::from_be_bytes(self.array("byte")?)),
            0x61 => Value::Short(i16::from_be_bytes(self.array("short")?)),
            0x71 => Value::Int(i32::from_be_bytes(self.array("int")?)),
            0x54 => Value::Int(i32::from(i8::from_be_bytes(self.array("smallint")?))),
            0x81 => Value::Long(i64::from_be_bytes(self.array("long")?)),
            0x55 => Value::Long(i64::from(i8::from_be_bytes(self.array("smalllong")?))),
            0x72 => Value::Float(f32::from_be_bytes(self.array("float")?)),
            0x82 => Value::Double(f64::from_be_bytes(self.array("double")?)),
            0x74 => Value::Decimal32(self.array("decimal32")?),
            0x84 => Value::Decimal64(self.array("decimal64")?),
            0x94 => Value::Decimal128(self.array("decimal128")?),
            0x73 => {
                let point = self.u32("char")?;
                Value::Char(char::from_u32(point).ok_or(DecodeError::BadUtf8 {
                    what: "char",
                    offset,
                })?)
            }
            0x83 => Value::Timestamp(i64::from_be_bytes(self.array("timestamp")?)),
            0x98 => Value::Uuid(self.array("uuid")?),
            _ => return Err(DecodeError::BadFormatCode { code, offset }),
        })
    }

    /// Reads a map8 or map32 body: its items, paired; an odd count is malformed.
    fn map_body(&mut self, code: u8, depth: usize) -> Result<Value, DecodeError> {
        let offset = self.pos;
        let items = self.compound(code, depth, "map")?;
        if items.len() % 2 != 0 {
            return Err(DecodeError::BadCount {
                what: "map",
                offset,
                count: u32::try_from(items.len()).unwrap_or(u32::MAX),
                size: 0,
            });
        }
        let mut pairs = Vec::with_capacity(items.len() / 2);
        let mut items = items.into_iter();
        while let (Some(k), Some(v)) = (items.next(), items.next()) {
            pairs.push((k, v));
        }
        Ok(Value::Map(pairs))
    }

    /// Refuses a value nested deeper than [`NESTING_MAX`] (`value` and `skip` alike).
    fn within_nesting(&self, depth: usize) -> Result<(), DecodeError> {
        if depth > NESTING_MAX {
            return Err(DecodeError::TooDeep {
                max: NESTING_MAX,
                offset: self.pos,
            });
        }
        Ok(())
    }

    /// Checks the value at the cursor exactly as [`Reader::value`] would and moves past it,
    /// building nothing: for sections that are forwarded as received.
    pub fn skip(&mut self, depth: usize) -> Result<(), DecodeError> {
        self.within_nesting(depth)?;
        let code = self.u8("format code")?;
        if code == 0x00 {
            self.skip(depth + 1)?;
            return self.skip(depth + 1);
        }
        self.skip_body(code, depth)
    }

    /// Checks and passes the value that follows format code `code` (see [`Reader::body`]).
    fn skip_body(&mut self, code: u8, depth: usize) -> Result<(), DecodeError> {
        let offset = self.pos;
        let fixed = match code {
            0x40..=0x45 => 0,
            0x50..=0x56 => 1,
            0x60 | 0x61 => 2,
            0x70 | 0x71 | 0x72 | 0x74 => 4,
            0x80..=0x84 => 8,
            0x94 | 0x98 => 16,
            0x73 => {
                let point = self.u32("char")?;
                return match char::from_u32(point) {
                    Some(_) => Ok(()),
                    None => Err(DecodeError::BadUtf8 {
                        what: "char",
                        offset,
                    }),
                };
            }
            0xa0 | 0xb0 => return self.variable_slice(code, "binary").map(drop),
            0xa1 | 0xb1 => {
                return match std::str::from_utf8(self.variable_slice(code, "string")?) {
                    Ok(_) => Ok(()),
                    Err(_) => Err(DecodeError::BadUtf8 {
                        what: "string",
                        offset,
                    }),
                };
            }
            0xa3 | 0xb3 => {
                return match self.variable_slice(code, "symbol")?.is_ascii() {
                    true => Ok(()),
                    false => Err(DecodeError::BadUtf8 {
                        what: "symbol",
                        offset,
                    }),
                };
            }
            0xc0 | 0xd0 => return self.skip_compound(code, depth, "list", false),
            0xc1 | 0xd1 => return self.skip_compound(code, depth, "map", true),
            0xe0 | 0xf0 => return self.skip_array(code, depth),
            _ => return Err(DecodeError::BadFormatCode { code, offset }),
        };
        self.take(fixed, "fixed-width value").map(drop)
    }

    fn variable_slice(&mut self, code: u8, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let size = if code & 0xf0 == 0xa0 {
            usize::from(self.u8(what)?)
        } else {
            self.u32(what)? as usize
        };
        self.take(size, what)
    }

    /// A list or map, as [`Reader::compound`] checks it (a map's count must be even).
    fn skip_compound(
        &mut self,
        code: u8,
        depth: usize,
        what: &'static str,
        map: bool,
    ) -> Result<(), DecodeError> {
        let offset = self.pos;
        let (size, count) = self.size_count(code & 0xf0 == 0xd0, what)?;
        self.bounded(size, what, |inner| {
            (0..count).try_for_each(|_| inner.skip(depth + 1))
        })?;
        if map && count % 2 != 0 {
            return Err(DecodeError::BadCount {
                what: "map",
                offset,
                count,
                size: 0,
            });
        }
        Ok(())
    }

    /// An array, as [`Reader::array_body`] checks it.
    fn skip_array(&mut self, code: u8, depth: usize) -> Result<(), DecodeError> {
        let (size, count) = self.size_count(code == 0xf0, "array")?;
        self.bounded(size, "array", |inner| {
            let (_, element_code) = inner.array_constructor(depth)?;
            (0..count).try_for_each(|_| inner.skip_body(element_code, depth + 1))
        })
    }

    fn variable(&mut self, code: u8, what: &'static str) -> Result<Bytes, DecodeError> {
        let size = if code & 0xf0 == 0xa0 {
            usize::from(self.u8(what)?)
        } else {
            self.u32(what)? as usize
        };
        self.take_bytes(size, what)
    }

    /// Size and count of a compound or array (after its format code).
    fn size_count(&mut self, wide: bool, what: &'static str) -> Result<(u32, u32), DecodeError> {
        let offset = self.pos;
        let (size, count) = if wide {
            (self.u32(what)?, self.u32(what)?)
        } else {
            (u32::from(self.u8(what)?), u32::from(self.u8(what)?))
        };
        let width = if wide { 4 } else { 1 };
        // The count is inside the size; each element takes at least one byte.
        if size < width || count > size {
            return Err(DecodeError::BadCount {
                what,
                offset,
                count,
                size,
            });
        }
        let available = self.buf.len().saturating_sub(self.pos);
        if (size - width) as usize > available {
            return Err(DecodeError::Truncated {
                what,
                offset: self.pos,
                needed: (size - width) as usize,
                available,
            });
        }
        Ok((size - width, count))
    }

    fn compound(
        &mut self,
        code: u8,
        depth: usize,
        what: &'static str,
    ) -> Result<Vec<Value>, DecodeError> {
        let (size, count) = self.size_count(code & 0xf0 == 0xd0, what)?;
        self.bounded(size, what, |inner| {
            let mut items = Vec::with_capacity((count as usize).min(CAPACITY_HINT_MAX));
            for _ in 0..count {
                items.push(inner.value(depth + 1)?);
            }
            Ok(items)
        })
    }

    /// Runs `read` on a reader limited to the next `size` bytes, which it must use exactly
    /// (the body of a compound or array), then moves past them.
    fn bounded<T>(
        &mut self,
        size: u32,
        what: &'static str,
        read: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
    ) -> Result<T, DecodeError> {
        let end = self.pos + size as usize;
        let limited = self.buf.slice(..end);
        let mut inner = Reader::at(&limited, self.pos);
        let value = read(&mut inner)?;
        if inner.pos != end {
            return Err(DecodeError::TrailingBytes {
                what,
                extra: end - inner.pos,
            });
        }
        self.pos = end;
        Ok(value)
    }

    /// The element constructor of an array (after its size and count): an optional descriptor
    /// and a format code that is not itself a descriptor's.
    fn array_constructor(&mut self, depth: usize) -> Result<(Option<Value>, u8), DecodeError> {
        let code = self.u8("array constructor")?;
        let descriptor = if code == 0x00 {
            Some(self.value(depth + 1)?)
        } else {
            None
        };
        let code = if descriptor.is_some() {
            self.u8("array constructor")?
        } else {
            code
        };
        if code == 0x00 {
            return Err(DecodeError::BadFormatCode {
                code,
                offset: self.pos,
            });
        }
        Ok((descriptor, code))
    }

    fn array_body(&mut self, code: u8, depth: usize) -> Result<Vec<Value>, DecodeError> {
        let (size, count) = self.size_count(code == 0xf0, "array")?;
        self.bounded(size, "array", |inner| {
            let (descriptor, element_code) = inner.array_constructor(depth)?;
            let mut items = Vec::with_capacity((count as usize).min(CAPACITY_HINT_MAX));
            for _ in 0..count {
                let value = inner.body(element_code, depth + 1)?;
                items.push(match &descriptor {
                    Some(d) => Value::Described(Box::new(d.clone()), Box::new(value)),
                    None => value,
                });
            }
            Ok(items)
        })
    }
}

/// Writes `value` with the smallest constructor that holds it.
pub fn encode_value(value: &Value, out: &mut BytesMut) {
    match value {
        Value::Null => out.put_u8(0x40),
        Value::Bool(true) => out.put_u8(0x41),
        Value::Bool(false) => out.put_u8(0x42),
        Value::Ubyte(v) => {
            out.put_u8(0x50);
            out.put_u8(*v);
        }
        Value::Ushort(v) => {
            out.put_u8(0x60);
            out.put_u16(*v);
        }
        Value::Uint(0) => out.put_u8(0x43),
        Value::Uint(v @ 1..=255) => {
            out.put_u8(0x52);
            out.put_u8(*v as u8);
        }
        Value::Ulong(0) => out.put_u8(0x44),
        Value::Ulong(v @ 1..=255) => {
            out.put_u8(0x53);
            out.put_u8(*v as u8);
        }
        Value::Int(v @ -128..=127) => {
            out.put_u8(0x54);
            out.put_i8(*v as i8);
        }
        Value::Long(v @ -128..=127) => {
            out.put_u8(0x55);
            out.put_i8(*v as i8);
        }
        Value::Described(descriptor, inner) => {
            out.put_u8(0x00);
            encode_value(descriptor, out);
            encode_value(inner, out);
        }
        Value::List(items) if items.is_empty() => out.put_u8(0x45),
        Value::List(items) => encode_compound(0xc0, items.iter(), items.len(), out),
        Value::Map(pairs) => {
            let items = pairs.iter().flat_map(|(k, v)| [k, v]);
            encode_compound(0xc1, items, pairs.len() * 2, out);
        }
        Value::Array(items) => encode_array(items, out),
        Value::Binary(b) | Value::String(b) | Value::Symbol(b) => {
            let small = value_code(value);
            if b.len() <= 255 {
                out.put_u8(small);
                out.put_u8(b.len() as u8);
            } else {
                out.put_u8(small + 0x10);
                out.put_u32(len_u32(b.len()));
            }
            out.put_slice(b);
        }
        other => {
            out.put_u8(value_code(other));
            encode_fixed(other, out);
        }
    }
}

/// The format code a value takes as an array element (the widest of its type), or for
/// variable-width values the 1-byte-size code.
fn value_code(value: &Value) -> u8 {
    match value {
        Value::Null => 0x40,
        Value::Bool(_) => 0x56,
        Value::Ubyte(_) => 0x50,
        Value::Ushort(_) => 0x60,
        Value::Uint(_) => 0x70,
        Value::Ulong(_) => 0x80,
        Value::Byte(_) => 0x51,
        Value::Short(_) => 0x61,
        Value::Int(_) => 0x71,
        Value::Long(_) => 0x81,
        Value::Float(_) => 0x72,
        Value::Double(_) => 0x82,
        Value::Decimal32(_) => 0x74,
        Value::Decimal64(_) => 0x84,
        Value::Decimal128(_) => 0x94,
        Value::Char(_) => 0x73,
        Value::Timestamp(_) => 0x83,
        Value::Uuid(_) => 0x98,
        Value::Binary(_) => 0xa0,
        Value::String(_) => 0xa1,
        Value::Symbol(_) => 0xa3,
        Value::Described(..) => 0x00,
        Value::List(_) => 0xd0,
        Value::Map(_) => 0xd1,
        Value::Array(_) => 0xf0,
    }
}

/// The format code of an array's elements: the widest encoding of their type.
fn array_code(value: &Value) -> u8 {
    match value_code(value) {
        code @ (0xa0 | 0xa1 | 0xa3) => code + 0x10,
        code => code,
    }
}

/// Writes the bytes of a fixed-width value after its (widest) format code.
fn encode_fixed(value: &Value, out: &mut BytesMut) {
    match value {
        Value::Bool(v) => out.put_u8(u8::from(*v)),
        Value::Ubyte(v) => out.put_u8(*v),
        Value::Ushort(v) => out.put_u16(*v),
        Value::Uint(v) => out.put_u32(*v),
        Value::Ulong(v) => out.put_u64(*v),
        Value::Byte(v) => out.put_i8(*v),
        Value::Short(v) => out.put_i16(*v),
        Value::Int(v) => out.put_i32(*v),
        Value::Long(v) => out.put_i64(*v),
        Value::Float(v) => out.put_f32(*v),
        Value::Double(v) => out.put_f64(*v),
        Value::Decimal32(v) => out.put_slice(v),
        Value::Decimal64(v) => out.put_slice(v),
        Value::Decimal128(v) | Value::Uuid(v) => out.put_slice(v),
        Value::Char(v) => out.put_u32(u32::from(*v)),
        Value::Timestamp(v) => out.put_i64(*v),
        _ => {}
    }
}

fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn encode_compound<'a>(
    small_code: u8,
    items: impl Iterator<Item = &'a Value>,
    count: usize,
    out: &mut BytesMut,
) {
    let mut body = BytesMut::new();
    for item in items {
        encode_value(item, &mut body);
    }
    if body.len() < 255 && count < 256 {
        out.put_u8(small_code);
        out.put_u8((body.len() + 1) as u8);
        out.put_u8(count as u8);
    } else {
        out.put_u8(small_code + 0x10);
        out.put_u32(len_u32(body.len() + 4));
        out.put_u32(len_u32(count));
    }
    out.put_slice(&body);
}

/// Arrays take their element constructor from the first element (and its descriptor, for
/// described elements); elements of another type are left out (an array is homogeneous).
fn encode_array(items: &[Value], out: &mut BytesMut) {
    let mut body = BytesMut::new();
    let (descriptor, first) = match items.first() {
        Some(Value::Described(d, v)) => (Some(d.as_ref()), Some(v.as_ref())),
        other => (None, other),
    };
    let code = first.map_or(0x40, array_code);
    if let Some(d) = descriptor {
        body.put_u8(0x00);
        encode_value(d, &mut body);
    }
    body.put_u8(code);
    let mut count = 0usize;
    for item in items {
        let element = match (descriptor, item) {
            (Some(d), Value::Described(id, v)) if id.as_ref() == d => v.as_ref(),
            (Some(_), _) => continue,
            (None, v) => v,
        };
        if array_code(element) != code {
            continue;
        }
        count += 1;
        encode_element(element, &mut body);
    }
    if body.len() < 255 && count < 256 {
        out.put_u8(0xe0);
        out.put_u8((body.len() + 1) as u8);
        out.put_u8(count as u8);
    } else {
        out.put_u8(0xf0);
        out.put_u32(len_u32(body.len() + 4));
        out.put_u32(len_u32(count));
    }
    out.put_slice(&body);
}

/// An array element without its constructor, in the encoding `value_code` named.
fn encode_element(value: &Value, out: &mut BytesMut) {
    let mut full = BytesMut::new();
    match value {
        Value::Binary(b) | Value::String(b) | Value::Symbol(b) => {
            out.put_u32(len_u32(b.len()));
            out.put_slice(b);
        }
        Value::List(items) => {
            encode_compound(0xc0, items.iter(), items.len(), &mut full);
            widen_compound(&full, out);
        }
        Value::Map(pairs) => {
            let items = pairs.iter().flat_map(|(k, v)| [k, v]);
            encode_compound(0xc1, items, pairs.len() * 2, &mut full);
            widen_compound(&full, out);
        }
        Value::Array(items) => {
            encode_array(items, &mut full);
            widen_compound(&full, out);
        }
        Value::Null => {}
        other => encode_fixed(other, out),
    }
}

/// Rewrites an encoded compound (after its format code) with 4-byte size and count, as array
/// elements of the wide code need.
fn widen_compound(encoded: &[u8], out: &mut BytesMut) {
    let Some((&code, rest)) = encoded.split_first() else {
        return;
    };
    if code & 0xf0 == 0xd0 || code == 0xf0 {
        out.put_slice(rest);
        return;
    }
    let (Some(&size), Some(&count)) = (rest.first(), rest.get(1)) else {
        return;
    };
    out.put_u32(u32::from(size) + 3);
    out.put_u32(u32::from(count));
    out.put_slice(rest.get(2..).unwrap_or_default());
}
