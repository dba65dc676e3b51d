//! Messages between AMQP 1.0 and core's AMQP 0.9.1 form, as RabbitMQ's conversions page maps
//! them. A single data section becomes the 0.9.1 body as is (a slice of the read buffer); any
//! other body (several data sections, amqp-value, amqp-sequence) is kept as its AMQP 1.0
//! encoding with `type` = `amqp-1.0`, and goes back out to AMQP 1.0 consumers unchanged.

use bytes::{Bytes, BytesMut};
use warren_core::message::Message;
use warren_proto::amqp091::{BasicProperties, FieldTable, FieldValue, ShortStr};
use warren_proto::amqp10::message::{
    code as section, encode_data_head, encode_map_section, Body, Header, Properties, Sections,
};
use warren_proto::amqp10::Value;

/// The 0.9.1 `type` of a message whose body is AMQP 1.0-encoded sections.
const AMQP10_BODY_TYPE: &str = "amqp-1.0";
const SHORTSTR_MAX: usize = 255;

/// The 0.9.1 properties and body of an AMQP 1.0 message.
pub fn to_amqp091(sections: &Sections, raw: &Bytes) -> (BasicProperties, Bytes) {
    let mut props = BasicProperties::default();
    let mut headers = FieldTable::default();
    if let Some(header) = &sections.header {
        props.delivery_mode = Some(if header.durable { 2 } else { 1 });
        props.priority = header.priority;
        props.expiration = header.ttl.map(|ttl| ShortStr::from(ttl.to_string()));
    } else {
        props.delivery_mode = Some(1);
    }
    if let Some(p) = &sections.properties {
        properties_to_amqp091(p, &mut props, &mut headers);
    }
    for (key, value) in sections.message_annotations.iter().flatten() {
        let Some(key) = key
            .as_str()
            .filter(|k| k.starts_with("x-") && k.len() <= SHORTSTR_MAX)
        else {
            continue;
        };
        if let Some(value) = value_to_field(value) {
            headers.insert(key, value);
        }
    }
    for (key, value) in sections.application_properties.iter().flatten() {
        let Some(key) = key.as_str().filter(|k| k.len() <= SHORTSTR_MAX) else {
            continue;
        };
        if let Some(value) = value_to_field(value) {
            headers.insert(key, value);
        }
    }
    if !headers.0.is_empty() {
        props.headers = Some(headers);
    }
    let body = match &sections.body {
        Body::Empty => Bytes::new(),
        Body::Data(chunks) if chunks.len() == 1 => chunks.first().cloned().unwrap_or_default(),
        _ => {
            props.kind = Some(ShortStr::from(AMQP10_BODY_TYPE));
            raw.slice(sections.body_at..sections.body_end)
        }
    };
    (props, body)
}

fn properties_to_amqp091(p: &Properties, props: &mut BasicProperties, headers: &mut FieldTable) {
    let id_field = |value: &Value, header: &str, headers: &mut FieldTable| -> Option<ShortStr> {
        match id_text(value) {
            Some(text) if text.len() <= SHORTSTR_MAX => Some(ShortStr::from(text)),
            Some(text) => {
                headers.insert(header, FieldValue::LongStr(Bytes::from(text)));
                None
            }
            None => {
                if let Value::Binary(b) = value {
                    headers.insert(header, FieldValue::Bytes(b.clone()));
                }
                None
            }
        }
    };
    props.message_id = p
        .message_id
        .as_ref()
        .and_then(|v| id_field(v, "x-message-id", headers));
    props.correlation_id = p
        .correlation_id
        .as_ref()
        .and_then(|v| id_field(v, "x-correlation-id", headers));
    props.user_id = p
        .user_id
        .as_ref()
        .and_then(|b| std::str::from_utf8(b).ok())
        .filter(|s| s.len() <= SHORTSTR_MAX)
        .map(ShortStr::from);
    props.reply_to = p.reply_to.as_deref().map(|to| {
        let queue = to.strip_prefix("/queues/").unwrap_or(to);
        ShortStr::from(short(queue))
    });
    props.content_type = p.content_type.as_deref().map(|s| ShortStr::from(short(s)));
    props.content_encoding = p
        .content_encoding
        .as_deref()
        .map(|s| ShortStr::from(short(s)));
    props.timestamp = p.creation_time.and_then(|ms| u64::try_from(ms / 1000).ok());
    props.app_id = p.group_id.as_deref().map(|s| ShortStr::from(short(s)));
}

/// Truncates to a short string's limit at a character boundary.
fn short(text: &str) -> &str {
    let mut end = text.len().min(SHORTSTR_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

/// A message-id or correlation-id as text (strings, ulongs and uuids; binaries are not text).
fn id_text(value: &Value) -> Option<String> {
    match value {
        Value::String(_) | Value::Symbol(_) => value.as_str().map(str::to_owned),
        Value::Ulong(v) => Some(v.to_string()),
        Value::Uuid(u) => Some(format!("urn:uuid:{}", uuid_text(u))),
        _ => None,
    }
}

fn uuid_text(u: &[u8; 16]) -> String {
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let hex: String = text
        .strip_prefix("urn:uuid:")?
        .chars()
        .filter(|c| *c != '-')
        .collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

fn value_to_field(value: &Value) -> Option<FieldValue> {
    Some(match value {
        Value::Null => FieldValue::Void,
        Value::Bool(v) => FieldValue::Bool(*v),
        Value::Ubyte(v) => FieldValue::U8(*v),
        Value::Ushort(v) => FieldValue::U16(*v),
        Value::Uint(v) => FieldValue::I64(i64::from(*v)),
        Value::Ulong(v) => FieldValue::I64(i64::try_from(*v).ok()?),
        Value::Byte(v) => FieldValue::I8(*v),
        Value::Short(v) => FieldValue::I16(*v),
        Value::Int(v) => FieldValue::I32(*v),
        Value::Long(v) => FieldValue::I64(*v),
        Value::Float(v) => FieldValue::F32(*v),
        Value::Double(v) => FieldValue::F64(*v),
        Value::Timestamp(ms) => FieldValue::Timestamp(u64::try_from(ms / 1000).ok()?),
        Value::String(b) | Value::Symbol(b) => FieldValue::LongStr(b.clone()),
        Value::Binary(b) => FieldValue::Bytes(b.clone()),
        Value::Uuid(u) => FieldValue::LongStr(Bytes::from(format!("urn:uuid:{}", uuid_text(u)))),
        Value::Char(c) => FieldValue::LongStr(Bytes::from(c.to_string())),
        Value::List(items) | Value::Array(items) => {
            FieldValue::Array(items.iter().filter_map(value_to_field).collect())
        }
        Value::Map(pairs) => FieldValue::Table(
            pairs
                .iter()
                .filter_map(|(k, v)| Some((short(k.as_str()?).to_owned(), value_to_field(v)?)))
                .collect(),
        ),
        _ => return None,
    })
}

fn field_to_value(value: &FieldValue) -> Option<Value> {
    Some(match value {
        FieldValue::Bool(v) => Value::Bool(*v),
        FieldValue::I8(v) => Value::Byte(*v),
        FieldValue::U8(v) => Value::Ubyte(*v),
        FieldValue::I16(v) => Value::Short(*v),
        FieldValue::U16(v) => Value::Ushort(*v),
        FieldValue::I32(v) => Value::Int(*v),
        FieldValue::U32(v) => Value::Uint(*v),
        FieldValue::I64(v) => Value::Long(*v),
        FieldValue::F32(v) => Value::Float(*v),
        FieldValue::F64(v) => Value::Double(*v),
        FieldValue::LongStr(b) => match std::str::from_utf8(b) {
            Ok(_) => Value::String(b.clone()),
            Err(_) => Value::Binary(b.clone()),
        },
        FieldValue::Timestamp(s) => Value::Timestamp(i64::try_from(*s).ok()?.saturating_mul(1000)),
        FieldValue::Void => Value::Null,
        FieldValue::Bytes(b) => Value::Binary(b.clone()),
        _ => return None,
    })
}

/// Writes the sections of a 0.9.1 message (`properties`, with the broker's annotations already
/// rendered) up to its body's constructor into `out`; returns the body bytes, to be sent after
/// them from their own buffer. Connections go through their `Amqp10Memo`, which the tests
/// check against this.
#[cfg(test)]
pub fn to_amqp10(
    message: &Message,
    properties: &Bytes,
    redelivered: bool,
    out: &mut BytesMut,
) -> Bytes {
    if !write_sections(message, properties, redelivered, out) {
        encode_data_head(out, message.body.len());
    }
    message.body.clone()
}

/// The sections before the body, as `to_amqp10` writes them; `true` when the body is already
/// AMQP 1.0 sections (no data section's head to write before it).
fn write_sections(
    message: &Message,
    properties: &Bytes,
    redelivered: bool,
    out: &mut BytesMut,
) -> bool {
    let props = BasicProperties::decode(properties).unwrap_or_default();
    let header = Header {
        durable: props.delivery_mode == Some(2),
        priority: props.priority,
        ttl: props.expiration.as_deref().and_then(|e| e.parse().ok()),
        first_acquirer: !redelivered,
        delivery_count: u32::from(redelivered),
    };
    header.to_value().encode(out);
    let mut annotations = vec![
        (
            Value::symbol_static("x-exchange"),
            Value::String(message.exchange.clone()),
        ),
        (
            Value::symbol_static("x-routing-key"),
            Value::String(message.routing_key.clone()),
        ),
    ];
    let amqp10_body = props.kind.as_deref() == Some(AMQP10_BODY_TYPE);
    if let Some(kind) = props.kind.as_deref().filter(|_| !amqp10_body) {
        annotations.push((Value::symbol_static("x-basic-type"), Value::string(kind)));
    }
    let mut application = Vec::new();
    for (key, value) in props.headers.iter().flat_map(|h| h.iter()) {
        let key = key.as_str();
        if key.starts_with("x-") {
            if let Some(v) = field_to_value(value) {
                annotations.push((Value::symbol(key), v));
            }
        } else if let Some(v) = field_to_value(value) {
            application.push((Value::string(key), v));
        }
    }
    encode_map_section(out, section::MESSAGE_ANNOTATIONS, &annotations);
    properties_to_amqp10(&props).to_value().encode(out);
    if !application.is_empty() {
        encode_map_section(out, section::APPLICATION_PROPERTIES, &application);
    }
    amqp10_body
}

/// Largest conversion input (properties, exchange and routing key) a memo keeps.
const MEMO_KEY_BYTES_MAX: usize = 1024;
/// Largest message head (sections before the body) a memo keeps.
const MEMO_HEAD_BYTES_MAX: usize = 1024;

/// A connection's last conversion to AMQP 1.0. A queue's consecutive messages mostly come
/// from one publisher with the same properties, exchange and routing key, so their sections
/// before the body are the same bytes: they are copied from here instead of being decoded
/// and encoded again. The key is copied (never a slice that would pin a read buffer); the
/// data section's head, which holds the body's size, is written afresh each time.
#[derive(Default)]
pub struct Amqp10Memo {
    valid: bool,
    properties: Vec<u8>,
    exchange: Vec<u8>,
    routing_key: Vec<u8>,
    redelivered: bool,
    /// The body is AMQP 1.0 sections: no data section's head.
    amqp10_body: bool,
    /// What `write_sections` wrote for this key.
    sections: Vec<u8>,
}

impl Amqp10Memo {
    /// Writes what `to_amqp10` writes and returns the body, from the memo when the inputs are
    /// the last ones.
    pub fn write(
        &mut self,
        message: &Message,
        properties: &Bytes,
        redelivered: bool,
        out: &mut BytesMut,
    ) -> Bytes {
        let hit = self.valid
            && self.redelivered == redelivered
            && self.properties == properties.as_ref()
            && self.routing_key == message.routing_key.as_ref()
            && self.exchange == message.exchange.as_ref();
        if hit {
            out.extend_from_slice(&self.sections);
        } else {
            let start = out.len();
            let amqp10_body = write_sections(message, properties, redelivered, out);
            self.store(
                message,
                properties,
                redelivered,
                amqp10_body,
                out.get(start..),
            );
        }
        if !self.amqp10_body {
            encode_data_head(out, message.body.len());
        }
        message.body.clone()
    }

    fn store(
        &mut self,
        message: &Message,
        properties: &Bytes,
        redelivered: bool,
        amqp10_body: bool,
        sections: Option<&[u8]>,
    ) {
        let key_bytes = properties.len() + message.exchange.len() + message.routing_key.len();
        self.amqp10_body = amqp10_body;
        let Some(sections) = sections.filter(|_| key_bytes <= MEMO_KEY_BYTES_MAX) else {
            self.valid = false;
            return;
        };
        let copy = |to: &mut Vec<u8>, from: &[u8]| {
            to.clear();
            to.extend_from_slice(from);
        };
        copy(&mut self.properties, properties);
        copy(&mut self.exchange, &message.exchange);
        copy(&mut self.routing_key, &message.routing_key);
        copy(&mut self.sections, sections);
        self.redelivered = redelivered;
        self.valid = true;
    }
}

/// What publishing takes from an AMQP 1.0 message besides its body.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// The 0.9.1 properties, encoded.
    pub properties: Bytes,
    /// The header's durable flag.
    pub persistent: bool,
    pub priority: u8,
    pub expiration_ms: Option<u32>,
    /// The properties' user-id and to.
    pub user_id: Option<Bytes>,
    pub to: Option<String>,
}

/// The 0.9.1 form of a decoded AMQP 1.0 message: what publishing takes, and the body.
pub fn convert(sections: &Sections, raw: &Bytes) -> (Converted, Bytes) {
    let (props, body) = to_amqp091(sections, raw);
    let mut properties = BytesMut::new();
    props.encode(&mut properties);
    let header = sections.header.as_ref();
    let converted = Converted {
        properties: properties.freeze(),
        persistent: header.is_some_and(|h| h.durable),
        priority: header.and_then(|h| h.priority).unwrap_or(0),
        expiration_ms: header.and_then(|h| h.ttl),
        user_id: sections.properties.as_ref().and_then(|p| p.user_id.clone()),
        to: sections.properties.as_ref().and_then(|p| p.to.clone()),
    };
    (converted, body)
}

/// A connection's last conversion from AMQP 1.0. A publisher's messages mostly differ only in
/// their body: when a message is the last converted one's sections before the body (the same
/// bytes) followed by a single data section, its conversion is the same, and the message is
/// not decoded. The head is copied, never kept as a slice of a read buffer.
#[derive(Default)]
pub struct Amqp091Memo {
    head: Vec<u8>,
    converted: Option<Converted>,
}

impl Amqp091Memo {
    /// The conversion of `raw`, when the memo has it, and the body (a slice of `raw`).
    pub fn lookup(&self, raw: &Bytes) -> Option<(Converted, Bytes)> {
        let converted = self.converted.as_ref()?;
        let tail = raw.get(self.head.len()..)?;
        if raw.get(..self.head.len())? != self.head.as_slice() {
            return None;
        }
        let body_at = self.head.len() + data_section_head_len(tail)?;
        Some((converted.clone(), raw.slice(body_at..)))
    }

    /// Keeps the conversion of `raw` (decoded as `sections`) when `lookup` can find it again:
    /// its body is one data section at the end, in a form `lookup` reads.
    pub fn store(&mut self, raw: &Bytes, sections: &Sections, converted: &Converted) {
        let single_data = matches!(&sections.body, Body::Data(chunks) if chunks.len() == 1);
        let found = single_data
            && sections.body_at <= MEMO_HEAD_BYTES_MAX
            && sections.body_end == raw.len()
            && raw
                .get(sections.body_at..)
                .and_then(data_section_head_len)
                .is_some();
        if !found {
            return;
        }
        let Some(head) = raw.get(..sections.body_at) else {
            return;
        };
        debug_assert!(self.lookup(raw).is_none_or(|(c, _)| &c == converted));
        self.head.clear();
        self.head.extend_from_slice(head);
        self.converted = Some(converted.clone());
    }
}

/// The length of the head of `tail` when `tail` is exactly one data section with the small
/// descriptor (vbin8 or vbin32): its bytes follow the head to the end.
fn data_section_head_len(tail: &[u8]) -> Option<usize> {
    let (head_len, size) = match tail {
        [0x00, 0x53, 0x75, 0xa0, n, ..] => (5, usize::from(*n)),
        [0x00, 0x53, 0x75, 0xb0, a, b, c, d, ..] => (
            8,
            usize::try_from(u32::from_be_bytes([*a, *b, *c, *d])).ok()?,
        ),
        _ => return None,
    };
    (tail.len().checked_sub(head_len)? == size).then_some(head_len)
}

fn properties_to_amqp10(props: &BasicProperties) -> Properties {
    let id = |text: &ShortStr| match parse_uuid(text.as_str()) {
        Some(u) => Value::Uuid(u),
        None => Value::string(text.as_str()),
    };
    Properties {
        message_id: props.message_id.as_ref().map(id),
        user_id: props
            .user_id
            .as_ref()
            .map(|u| Bytes::copy_from_slice(u.as_bytes())),
        reply_to: props.reply_to.as_ref().map(|q| {
            if q.starts_with('/') {
                q.as_str().to_owned()
            } else {
                format!("/queues/{}", percent_encode(q.as_str()))
            }
        }),
        correlation_id: props.correlation_id.as_ref().map(id),
        content_type: props.content_type.as_ref().map(|s| s.as_str().to_owned()),
        content_encoding: props
            .content_encoding
            .as_ref()
            .map(|s| s.as_str().to_owned()),
        creation_time: props
            .timestamp
            .and_then(|s| i64::try_from(s).ok())
            .map(|s| s.saturating_mul(1000)),
        group_id: props.app_id.as_ref().map(|s| s.as_str().to_owned()),
        ..Properties::default()
    }
}

/// Percent-encodes what RFC 3986 does not leave unreserved.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_proto::amqp10::message::encode_simple;

    #[test]
    fn amqp10_to_amqp091_and_back() {
        let header = Header {
            durable: true,
            priority: Some(3),
            ttl: Some(5000),
            ..Default::default()
        };
        let properties = Properties {
            message_id: Some(Value::string("m-1")),
            correlation_id: Some(Value::Ulong(42)),
            reply_to: Some("/queues/replies".into()),
            content_type: Some("text/plain".into()),
            ..Default::default()
        };
        let mut out = BytesMut::new();
        encode_simple(&mut out, Some(&header), Some(&properties), b"hello");
        let raw = out.freeze();
        let sections = Sections::decode(&raw).unwrap();
        let (props, body) = to_amqp091(&sections, &raw);
        assert_eq!(&body[..], b"hello");
        assert_eq!(props.delivery_mode, Some(2));
        assert_eq!(props.priority, Some(3));
        assert_eq!(props.expiration.as_deref(), Some("5000"));
        assert_eq!(props.message_id.as_deref(), Some("m-1"));
        assert_eq!(props.correlation_id.as_deref(), Some("42"));
        assert_eq!(props.reply_to.as_deref(), Some("replies"));
        let mut encoded = BytesMut::new();
        props.encode(&mut encoded);
        let encoded = encoded.freeze();
        let message = Message::new(
            Bytes::new(),
            Bytes::from_static(b"q"),
            encoded.clone(),
            body,
        );
        let mut prefix = BytesMut::new();
        let body = to_amqp10(&message, &encoded, false, &mut prefix);
        prefix.extend_from_slice(&body);
        let back = Sections::decode(&prefix.freeze()).unwrap();
        assert_eq!(back.header.as_ref().map(|h| h.durable), Some(true));
        let p = back.properties.unwrap();
        assert_eq!(p.reply_to.as_deref(), Some("/queues/replies"));
        assert_eq!(p.content_type.as_deref(), Some("text/plain"));
        assert!(matches!(back.body, Body::Data(ref c) if &c[0][..] == b"hello"));
    }

    #[test]
    fn the_amqp10_memo_writes_what_a_conversion_writes() {
        let mut memo = Amqp10Memo::default();
        let props = |mode: u8| {
            let mut out = BytesMut::new();
            BasicProperties {
                delivery_mode: Some(mode),
                content_type: Some(ShortStr::from("text/plain")),
                ..Default::default()
            }
            .encode(&mut out);
            out.freeze()
        };
        let message = |rk: &'static [u8], properties: &Bytes, body: &'static [u8]| {
            Message::new(
                Bytes::from_static(b"x"),
                Bytes::from_static(rk),
                properties.clone(),
                Bytes::from_static(body),
            )
        };
        let (p1, p2) = (props(2), props(1));
        let cases = [
            (message(b"a", &p1, b"one"), false),
            (message(b"a", &p1, b"second"), false),
            (message(b"a", &p1, b"third"), true),
            (message(b"b", &p1, b"four"), true),
            (message(b"b", &p2, b"five"), true),
            (message(b"b", &p2, b""), true),
        ];
        for (message, redelivered) in &cases {
            let (mut plain, mut memoized) = (BytesMut::new(), BytesMut::from(&b"xy"[..]));
            let body = to_amqp10(message, &message.properties, *redelivered, &mut plain);
            let body2 = memo.write(message, &message.properties, *redelivered, &mut memoized);
            assert_eq!(body, body2);
            assert_eq!(&memoized[2..], &plain[..]);
        }
    }

    #[test]
    fn the_amqp091_memo_converts_as_a_decode() {
        let header = Header {
            durable: true,
            ..Default::default()
        };
        let properties = Properties {
            to: Some("/queues/q".into()),
            ..Default::default()
        };
        let encode = |header: Option<&Header>, body: &[u8]| {
            let mut out = BytesMut::new();
            encode_simple(&mut out, header, Some(&properties), body);
            out.freeze()
        };
        let mut memo = Amqp091Memo::default();
        let first = encode(Some(&header), b"one");
        assert!(memo.lookup(&first).is_none());
        let sections = Sections::decode(&first).unwrap();
        let (converted, body) = convert(&sections, &first);
        memo.store(&first, &sections, &converted);
        assert_eq!(&body[..], b"one");
        for message in [
            encode(Some(&header), b"two"),
            encode(Some(&header), &[7; 300]),
        ] {
            let (hit, body) = memo.lookup(&message).expect("same head");
            let sections = Sections::decode(&message).unwrap();
            assert_eq!((hit, body), convert(&sections, &message));
        }
        // Another head, or more than one data section after it: decoded.
        assert!(memo.lookup(&encode(None, b"two")).is_none());
        let mut two = BytesMut::from(&first[..]);
        encode_data_head(&mut two, 1);
        two.extend_from_slice(b"x");
        assert!(memo.lookup(&two.freeze()).is_none());
        assert!(memo.lookup(&first.slice(..first.len() - 1)).is_none());
    }

    #[test]
    fn uuids_convert_to_urns() {
        let u = [
            0x55, 0x0e, 0x84, 0, 0xe2, 0x9b, 0x41, 0xd4, 0xa7, 0x16, 0x44, 0x66, 0x55, 0x44, 0, 0,
        ];
        let text = id_text(&Value::Uuid(u)).unwrap();
        assert_eq!(text, "urn:uuid:550e8400-e29b-41d4-a716-446655440000");
        assert_eq!(parse_uuid(&text), Some(u));
    }
}
