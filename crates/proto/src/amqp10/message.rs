//! The sections of an AMQP 1.0 message (messaging.xml "message format"): header,
//! delivery-annotations, message-annotations, properties, application-properties, the body
//! (data, amqp-sequence or amqp-value) and footer. Data sections are slices of the input, and
//! `encode_data_head` writes a data section's constructor so that its bytes can follow from
//! their own buffer.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::DecodeError;
use super::fields::{composite, opt_string, opt_uint, Fields};
use super::performative::{descriptor_code, FieldsMap};
use super::types::{Reader, Value};

pub mod code {
    pub const HEADER: u64 = 0x70;
    pub const DELIVERY_ANNOTATIONS: u64 = 0x71;
    pub const MESSAGE_ANNOTATIONS: u64 = 0x72;
    pub const PROPERTIES: u64 = 0x73;
    pub const APPLICATION_PROPERTIES: u64 = 0x74;
    pub const DATA: u64 = 0x75;
    pub const AMQP_SEQUENCE: u64 = 0x76;
    pub const AMQP_VALUE: u64 = 0x77;
    pub const FOOTER: u64 = 0x78;
}

const NAMES: [(&str, u64); 9] = [
    ("amqp:header:list", code::HEADER),
    ("amqp:delivery-annotations:map", code::DELIVERY_ANNOTATIONS),
    ("amqp:message-annotations:map", code::MESSAGE_ANNOTATIONS),
    ("amqp:properties:list", code::PROPERTIES),
    (
        "amqp:application-properties:map",
        code::APPLICATION_PROPERTIES,
    ),
    ("amqp:data:binary", code::DATA),
    ("amqp:amqp-sequence:list", code::AMQP_SEQUENCE),
    ("amqp:amqp-value:*", code::AMQP_VALUE),
    ("amqp:footer:map", code::FOOTER),
];

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Header {
    pub durable: bool,
    /// Default 4.
    pub priority: Option<u8>,
    /// Milliseconds.
    pub ttl: Option<u32>,
    pub first_acquirer: bool,
    pub delivery_count: u32,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Properties {
    /// ulong, uuid, binary or string.
    pub message_id: Option<Value>,
    pub user_id: Option<Bytes>,
    pub to: Option<String>,
    pub subject: Option<String>,
    pub reply_to: Option<String>,
    pub correlation_id: Option<Value>,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    /// Milliseconds since the epoch.
    pub absolute_expiry_time: Option<i64>,
    pub creation_time: Option<i64>,
    pub group_id: Option<String>,
    pub group_sequence: Option<u32>,
    pub reply_to_group_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub enum Body {
    #[default]
    Empty,
    /// One or more data sections, each a slice of the input.
    Data(Vec<Bytes>),
    Sequence(Vec<Value>),
    /// An amqp-value section: the value and the section's bytes (descriptor included).
    Value(Value, Bytes),
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sections {
    pub header: Option<Header>,
    pub delivery_annotations: Option<FieldsMap>,
    pub message_annotations: Option<FieldsMap>,
    pub properties: Option<Properties>,
    pub application_properties: Option<FieldsMap>,
    pub body: Body,
    pub footer: Option<FieldsMap>,
    /// Offset where the bare message starts (after header and annotations).
    pub bare_at: usize,
    /// Offset of the message-annotations, or of the bare message when there are none: what
    /// follows the per-hop sections (header, delivery-annotations).
    pub annotations_at: usize,
    /// Where the body sections start and end in the message (before the footer); both at the
    /// footer (or the end) when there is no body.
    pub body_at: usize,
    pub body_end: usize,
}

impl Sections {
    /// Decodes every section of `message`. Sections must come in the spec's order (header,
    /// delivery-annotations, message-annotations, properties, application-properties, body,
    /// footer), each at most once, so that the offsets above delimit them.
    pub fn decode(message: &Bytes) -> Result<Sections, DecodeError> {
        Sections::read(message, true, true)
    }

    /// Like [`Sections::decode`], but takes the sections in any order (a repeated section
    /// replaces the earlier one); the offsets are then meaningless. For requests that are read, never forwarded:
    /// RabbitMQ's AMQP 1.0 client libraries send management requests with the body first.
    pub fn decode_any_order(message: &Bytes) -> Result<Sections, DecodeError> {
        Sections::read(message, true, false)
    }

    /// What a broker that forwards the message as received needs: the header and properties
    /// decoded, every other section checked as [`Sections::decode`] checks it and passed over
    /// without building its values (`delivery_annotations`, `message_annotations`,
    /// `application_properties` and `footer` stay `None`, `body` stays `Empty`); the offsets
    /// are set as by `decode`. A message one accepts, the other accepts.
    pub fn decode_kept(message: &Bytes) -> Result<Sections, DecodeError> {
        Sections::read(message, false, true)
    }

    fn read(message: &Bytes, full: bool, in_order: bool) -> Result<Sections, DecodeError> {
        let mut sections = Sections::default();
        let mut reader = Reader::new(message);
        let (mut bare_at, mut annotations_at, mut footer_at) = (None, None, None);
        let mut last_code = None;
        let mut body_code = None;
        while !reader.is_empty() {
            let start = reader.pos;
            if reader.peek() != Some(0x00) {
                // What `value` would give: a value that is not described.
                reader.skip(0)?;
                return Err(bad("(section)", "expected a described section"));
            }
            reader.pos += 1;
            let descriptor = reader.value(1)?;
            let code = descriptor_code(&descriptor, &NAMES)
                .map_err(|_| bad("(section)", "unknown section"))?;
            let is_body = (code::DATA..=code::AMQP_VALUE).contains(&code);
            let rank = if is_body { code::DATA } else { code };
            if in_order && last_code.is_some_and(|last| rank < last || (rank == last && !is_body)) {
                return Err(bad("(section)", "sections out of order or repeated"));
            }
            last_code = Some(rank);
            if code >= code::MESSAGE_ANNOTATIONS && annotations_at.is_none() {
                annotations_at = Some(start);
            }
            if code >= code::PROPERTIES && bare_at.is_none() {
                bare_at = Some(start);
            }
            if code == code::FOOTER {
                footer_at = Some(start);
            }
            if full || code == code::HEADER || code == code::PROPERTIES {
                let inner = reader.value(1)?;
                sections.section(code, inner, message.slice(start..reader.pos))?;
            } else {
                check_kept(code, &mut reader)?;
            }
            if is_body {
                match body_code {
                    None => sections.body_at = start,
                    Some(first) if first != code || code == code::AMQP_VALUE => {
                        return Err(bad("(body)", "a message has one kind of body"));
                    }
                    Some(_) => {}
                }
                body_code = Some(code);
                sections.body_end = reader.pos;
            }
        }
        sections.bare_at = bare_at.unwrap_or(message.len());
        sections.annotations_at = annotations_at.unwrap_or(message.len());
        if body_code.is_none() {
            sections.body_at = footer_at.unwrap_or(message.len());
            sections.body_end = sections.body_at;
        }
        debug_assert!(sections.annotations_at <= sections.bare_at);
        debug_assert!(sections.body_at <= sections.body_end);
        Ok(sections)
    }

    fn section(&mut self, code: u64, inner: Value, raw: Bytes) -> Result<(), DecodeError> {
        match code {
            code::HEADER => self.header = Some(Header::decode(inner)?),
            code::DELIVERY_ANNOTATIONS => self.delivery_annotations = Some(map(inner)?),
            code::MESSAGE_ANNOTATIONS => self.message_annotations = Some(map(inner)?),
            code::PROPERTIES => self.properties = Some(Properties::decode(inner)?),
            code::APPLICATION_PROPERTIES => self.application_properties = Some(map(inner)?),
            code::DATA => {
                let Value::Binary(bytes) = inner else {
                    return Err(bad("data", "expected a binary"));
                };
                match &mut self.body {
                    Body::Data(chunks) => chunks.push(bytes),
                    Body::Empty => self.body = Body::Data(vec![bytes]),
                    _ => return Err(bad("data", "a message has one kind of body")),
                }
            }
            code::AMQP_SEQUENCE => {
                let Value::List(items) = inner else {
                    return Err(bad("amqp-sequence", "expected a list"));
                };
                match &mut self.body {
                    Body::Sequence(all) => all.extend(items),
                    Body::Empty => self.body = Body::Sequence(items),
                    _ => return Err(bad("amqp-sequence", "a message has one kind of body")),
                }
            }
            code::AMQP_VALUE => {
                if !matches!(self.body, Body::Empty) {
                    return Err(bad("amqp-value", "a message has one kind of body"));
                }
                self.body = Body::Value(inner, raw);
            }
            code::FOOTER => self.footer = Some(map(inner)?),
            _ => return Err(bad("(section)", "unknown section")),
        }
        Ok(())
    }
}

fn bad(field: &'static str, problem: &'static str) -> DecodeError {
    DecodeError::BadField {
        context: "message",
        field,
        problem,
    }
}

/// Checks a section `decode_kept` passes over: the value `section` would take, without it.
fn check_kept(code: u64, reader: &mut Reader<'_>) -> Result<(), DecodeError> {
    let format = reader.peek();
    reader.skip(1)?;
    let fits = match code {
        code::DELIVERY_ANNOTATIONS
        | code::MESSAGE_ANNOTATIONS
        | code::APPLICATION_PROPERTIES
        | code::FOOTER => matches!(format, Some(0x40 | 0xc1 | 0xd1)),
        code::DATA => matches!(format, Some(0xa0 | 0xb0)),
        code::AMQP_SEQUENCE => matches!(format, Some(0x45 | 0xc0 | 0xd0)),
        code::AMQP_VALUE => true,
        _ => return Err(bad("(section)", "unknown section")),
    };
    match (fits, code) {
        (true, _) => Ok(()),
        (false, code::DATA) => Err(bad("data", "expected a binary")),
        (false, code::AMQP_SEQUENCE) => Err(bad("amqp-sequence", "expected a list")),
        (false, _) => Err(bad("(annotations)", "expected a map")),
    }
}

fn map(value: Value) -> Result<FieldsMap, DecodeError> {
    match value {
        Value::Map(pairs) => Ok(pairs),
        Value::Null => Ok(Vec::new()),
        _ => Err(bad("(annotations)", "expected a map")),
    }
}

impl Header {
    fn decode(value: Value) -> Result<Header, DecodeError> {
        let mut f = Fields::new("header", value)?;
        Ok(Header {
            durable: f.bool("durable")?.unwrap_or(false),
            priority: f.u8("priority")?,
            ttl: f.u32("ttl")?,
            first_acquirer: f.bool("first-acquirer")?.unwrap_or(false),
            delivery_count: f.u32("delivery-count")?.unwrap_or(0),
        })
    }

    pub fn to_value(&self) -> Value {
        composite(
            code::HEADER,
            vec![
                if self.durable {
                    Value::Bool(true)
                } else {
                    Value::Null
                },
                self.priority.map_or(Value::Null, Value::Ubyte),
                opt_uint(self.ttl),
                if self.first_acquirer {
                    Value::Bool(true)
                } else {
                    Value::Null
                },
                if self.delivery_count > 0 {
                    Value::Uint(self.delivery_count)
                } else {
                    Value::Null
                },
            ],
        )
    }
}

impl Properties {
    fn decode(value: Value) -> Result<Properties, DecodeError> {
        let mut f = Fields::new("properties", value)?;
        let timestamp = |v: Option<Value>| match v {
            None => Ok(None),
            Some(Value::Timestamp(t)) => Ok(Some(t)),
            Some(_) => Err(bad("properties", "expected a timestamp")),
        };
        Ok(Properties {
            message_id: f.value(),
            user_id: f.binary("user-id")?,
            to: f.string("to")?,
            subject: f.string("subject")?,
            reply_to: f.string("reply-to")?,
            correlation_id: f.value(),
            content_type: f.string("content-type")?,
            content_encoding: f.string("content-encoding")?,
            absolute_expiry_time: timestamp(f.value())?,
            creation_time: timestamp(f.value())?,
            group_id: f.string("group-id")?,
            group_sequence: f.u32("group-sequence")?,
            reply_to_group_id: f.string("reply-to-group-id")?,
        })
    }

    pub fn to_value(&self) -> Value {
        let symbol = |s: &Option<String>| s.as_deref().map_or(Value::Null, Value::symbol);
        let time = |t: Option<i64>| t.map_or(Value::Null, Value::Timestamp);
        composite(
            code::PROPERTIES,
            vec![
                self.message_id.clone().unwrap_or(Value::Null),
                self.user_id.clone().map_or(Value::Null, Value::Binary),
                opt_string(&self.to),
                opt_string(&self.subject),
                opt_string(&self.reply_to),
                self.correlation_id.clone().unwrap_or(Value::Null),
                symbol(&self.content_type),
                symbol(&self.content_encoding),
                time(self.absolute_expiry_time),
                time(self.creation_time),
                opt_string(&self.group_id),
                opt_uint(self.group_sequence),
                opt_string(&self.reply_to_group_id),
            ],
        )
    }
}

/// Writes a map section (annotations, application-properties, footer).
pub fn encode_map_section(out: &mut BytesMut, section_code: u64, pairs: &FieldsMap) {
    Value::described(section_code, Value::Map(pairs.clone())).encode(out);
}

/// Writes the constructor and size of a data section of `len` bytes; the bytes follow.
pub fn encode_data_head(out: &mut BytesMut, len: usize) {
    out.put_slice(&[0x00, 0x53, code::DATA as u8, 0xb0]);
    out.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
}

/// Size of what `encode_data_head` writes.
pub const DATA_HEAD_BYTES: usize = 8;

/// Splits the message-annotations section off the front of `sections` (the bare message's
/// sections before the body, as a broker keeps them): its map, and the bytes after it. Without
/// one, `None` and `sections` whole (the common case, decided from the first bytes).
pub fn split_message_annotations(
    sections: &Bytes,
) -> Result<(Option<FieldsMap>, Bytes), DecodeError> {
    const SMALL_DESCRIPTOR: [u8; 2] = [0x00, 0x53];
    match sections.get(..3) {
        None => return Ok((None, sections.clone())),
        Some([a, b, c])
            if [*a, *b] == SMALL_DESCRIPTOR && u64::from(*c) != code::MESSAGE_ANNOTATIONS =>
        {
            return Ok((None, sections.clone()));
        }
        Some(_) => {}
    }
    let (value, len) = Value::decode(sections)?;
    let Value::Described(descriptor, inner) = value else {
        return Err(bad("(section)", "expected a described section"));
    };
    if descriptor_code(&descriptor, &NAMES).ok() != Some(code::MESSAGE_ANNOTATIONS) {
        return Ok((None, sections.clone()));
    }
    Ok((Some(map(*inner)?), sections.slice(len..)))
}

/// Writes a whole message with one data section (tests and clients).
pub fn encode_simple(
    out: &mut BytesMut,
    header: Option<&Header>,
    properties: Option<&Properties>,
    body: &[u8],
) {
    if let Some(h) = header {
        h.to_value().encode(out);
    }
    if let Some(p) = properties {
        p.to_value().encode(out);
    }
    encode_data_head(out, body.len());
    out.put_slice(body);
}
