//! Messages between AMQP 1.0 sections and AMQP 0.9.1 properties, as RabbitMQ's conversions
//! page maps them. A single data section becomes the 0.9.1 body as is (a slice of the input);
//! any other body (several data sections, amqp-value, amqp-sequence) is kept as its AMQP 1.0
//! encoding with `type` = `amqp-1.0`, so that it goes back out to AMQP 1.0 consumers unchanged.
//!
//! Pure functions over both codecs' types, shared by every protocol connection and the
//! management API, so that the mapping is written once.

use bytes::Bytes;

use crate::amqp091::{BasicProperties, FieldTable, FieldValue, ShortStr};
use crate::amqp10::message::{Body, Header, Properties, Sections};
use crate::amqp10::Value;

/// The 0.9.1 `type` of a message whose body is AMQP 1.0-encoded sections.
pub const AMQP10_BODY_TYPE: &str = "amqp-1.0";
const SHORTSTR_MAX: usize = 255;

/// The 0.9.1 properties and body of a decoded AMQP 1.0 message `raw`.
pub fn to_amqp091(sections: &Sections, raw: &Bytes) -> (BasicProperties, Bytes) {
    let mut props = head_to_amqp091(sections);
    let body = raw
        .get(sections.body_at..sections.body_end)
        .map_or_else(Bytes::new, |_| {
            raw.slice(sections.body_at..sections.body_end)
        });
    let body = body_to_amqp091(&sections.body, body, &mut props);
    (props, body)
}

/// The 0.9.1 properties and body of an AMQP 1.0 message as a broker keeps it: the header's
/// fields (`durable`, `priority` with 0 for none, `ttl`), the sections from the
/// message-annotations up to the body (`head`), and the body sections with any footer
/// (`body`). Sections that do not decode (never: they were decoded at publish) map to nothing.
pub fn kept_to_amqp091(
    durable: bool,
    priority: u8,
    ttl: Option<u32>,
    head: &Bytes,
    body: &Bytes,
) -> (BasicProperties, Bytes) {
    let mut head_sections = Sections::decode(head).unwrap_or_default();
    head_sections.header = Some(Header {
        durable,
        priority: (priority != 0).then_some(priority),
        ttl,
        ..Header::default()
    });
    let mut props = head_to_amqp091(&head_sections);
    let body_sections = Sections::decode(body).unwrap_or_default();
    let (at, end) = (body_sections.body_at, body_sections.body_end);
    let raw_body = body
        .get(at..end)
        .map_or_else(Bytes::new, |_| body.slice(at..end));
    let body = body_to_amqp091(&body_sections.body, raw_body, &mut props);
    (props, body)
}

/// The properties and headers from the sections before the body.
fn head_to_amqp091(sections: &Sections) -> BasicProperties {
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
    props
}

/// The 0.9.1 body of `body`, whose sections are `raw`; sets `type` when it is not one data
/// section.
fn body_to_amqp091(body: &Body, raw: Bytes, props: &mut BasicProperties) -> Bytes {
    match body {
        Body::Empty => Bytes::new(),
        Body::Data(chunks) if chunks.len() == 1 => chunks.first().cloned().unwrap_or_default(),
        _ => {
            props.kind = Some(ShortStr::from(AMQP10_BODY_TYPE));
            raw
        }
    }
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

/// The AMQP 1.0 properties section of 0.9.1 properties.
pub fn properties_to_amqp10(props: &BasicProperties) -> Properties {
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
    let mut out = String::with_capacity(36);
    for (i, b) in u.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
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

/// An AMQP 1.0 value as a 0.9.1 field value; `None` for what a field table cannot hold.
pub fn value_to_field(value: &Value) -> Option<FieldValue> {
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

/// A 0.9.1 field value as an AMQP 1.0 value; `None` for arrays and tables.
pub fn field_to_value(value: &FieldValue) -> Option<Value> {
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
    use bytes::BytesMut;

    use super::*;
    use crate::amqp10::message::{encode_data_head, encode_simple};

    #[test]
    fn uuids_convert_to_urns() {
        let u = [
            0x55, 0x0e, 0x84, 0, 0xe2, 0x9b, 0x41, 0xd4, 0xa7, 0x16, 0x44, 0x66, 0x55, 0x44, 0, 0,
        ];
        let text = id_text(&Value::Uuid(u)).expect("a uuid is text");
        assert_eq!(text, "urn:uuid:550e8400-e29b-41d4-a716-446655440000");
        assert_eq!(parse_uuid(&text), Some(u));
    }

    /// A message kept as head and body converts as the whole message does.
    #[test]
    fn kept_messages_convert_as_whole_ones() {
        let header = Header {
            durable: true,
            priority: Some(3),
            ttl: Some(5000),
            ..Default::default()
        };
        let properties = Properties {
            message_id: Some(Value::Uuid([7; 16])),
            content_type: Some("text/plain".into()),
            ..Default::default()
        };
        for extra_data in [false, true] {
            let mut out = BytesMut::new();
            encode_simple(&mut out, Some(&header), Some(&properties), b"hello");
            if extra_data {
                encode_data_head(&mut out, 2);
                out.extend_from_slice(b"!!");
            }
            let raw = out.freeze();
            let sections = Sections::decode(&raw).expect("decodes");
            let whole = to_amqp091(&sections, &raw);
            let head = raw.slice(sections.annotations_at..sections.body_at);
            let body = raw.slice(sections.body_at..);
            let kept = kept_to_amqp091(true, 3, Some(5000), &head, &body);
            assert_eq!(kept, whole);
            assert_eq!(whole.0.kind.is_some(), extra_data);
        }
    }
}
