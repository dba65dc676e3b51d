//! What an AMQP 1.0 consumer is sent before a message's body. An AMQP 1.0 message
//! (`Format::Amqp10`) goes out as it was received, its properties, application-properties and
//! body bytes unchanged, after a fresh header and the broker's message-annotations (merged with
//! the publisher's); an AMQP 0.9.1 message's properties are converted as RabbitMQ's
//! conversions page maps them (the mapping is `warren_proto::convert`). Both are memoized per
//! connection: a queue's consecutive messages mostly share exchange, routing key and flags.

use bytes::{Bytes, BytesMut};
use warren_core::message::{Body, Deaths, Format, Message};
use warren_proto::amqp091::BasicProperties;
use warren_proto::amqp10::message::{
    code as section, encode_data_head, encode_map_section, split_message_annotations, Header,
    Sections,
};
use warren_proto::amqp10::performative::FieldsMap;
use warren_proto::amqp10::Value;
use warren_proto::convert::{field_to_value, properties_to_amqp10, AMQP10_BODY_TYPE};

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
) -> Body {
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
    let mut annotations = broker_annotations(message);
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

/// A connection's last conversion to AMQP 1.0 of an AMQP 0.9.1 message. A queue's
/// consecutive messages mostly come from one publisher with the same properties, exchange and
/// routing key, so their sections before the body are the same bytes: they are copied from
/// here instead of being decoded and encoded again. The key is copied (never a slice that
/// would pin a read buffer); the data section's head, which holds the body's size, is written
/// afresh each time.
#[derive(Default)]
pub struct Amqp10Memo {
    valid: bool,
    properties: Vec<u8>,
    route: RouteKey,
    redelivered: bool,
    /// The body is AMQP 1.0 sections: no data section's head.
    amqp10_body: bool,
    /// What `write_sections` wrote for this key.
    sections: Vec<u8>,
    /// For AMQP 1.0 messages.
    kept: KeptMemo,
}

impl Amqp10Memo {
    /// Writes `message`'s sections before its body into `out` and returns the body, to be sent
    /// after them from its own buffer.
    pub fn write(&mut self, message: &Message, redelivered: bool, out: &mut BytesMut) -> Body {
        match message.format {
            Format::Amqp10 => self.kept.write(message, redelivered, out),
            Format::Amqp091 => {
                let properties = crate::amqp091::delivery_properties(message);
                self.write_converted(message, &properties, redelivered, out)
            }
        }
    }

    /// Writes what `to_amqp10` writes and returns the body, from the memo when the inputs are
    /// the last ones.
    fn write_converted(
        &mut self,
        message: &Message,
        properties: &Bytes,
        redelivered: bool,
        out: &mut BytesMut,
    ) -> Body {
        let hit = self.valid
            && self.redelivered == redelivered
            && self.properties == properties.as_ref()
            && self.route.matches(message);
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
        refill(&mut self.properties, properties);
        self.route.set(message);
        refill(&mut self.sections, sections);
        self.redelivered = redelivered;
        self.valid = true;
    }
}

/// What the broker keeps of a received AMQP 1.0 message `raw`, decoded as `sections`
/// (`Format::Amqp10`): the sections from the message-annotations up to the body, and the
/// body sections with any footer; slices of `raw`.
pub fn kept_sections(sections: &Sections, raw: &Bytes) -> (Bytes, Bytes) {
    debug_assert!(sections.annotations_at <= sections.body_at);
    debug_assert!(sections.body_at <= raw.len());
    let head = raw.slice(sections.annotations_at..sections.body_at);
    (head, raw.slice(sections.body_at..))
}

/// The message-annotations the broker adds to every delivery (RabbitMQ 4's `x-exchange` and
/// `x-routing-key`).
fn broker_annotations(message: &Message) -> FieldsMap {
    vec![
        (
            Value::symbol_static("x-exchange"),
            Value::String(message.exchange.clone()),
        ),
        (
            Value::symbol_static("x-routing-key"),
            Value::String(message.routing_key.clone()),
        ),
    ]
}

/// The dead-letter history for an AMQP 1.0 consumer: `x-first-death-*` and `x-last-death-*`
/// as strings, what the AMQP 0.9.1 headers of the same names become when an AMQP 0.9.1
/// message is converted. RabbitMQ 4 also writes `x-opt-deaths`, an array of maps; Warren does
/// not yet, because fe2o3-amqp (serde_amqp 0.14) fails to decode any message that carries an
/// array of maps, and `x-death` (tables) has never converted.
fn push_death_summary(deaths: &Deaths, annotations: &mut FieldsMap) {
    let mut put = |key: &'static str, value: Value| {
        annotations.push((Value::symbol_static(key), value));
    };
    if let Some((queue, reason, exchange)) = &deaths.first {
        put("x-first-death-queue", Value::string(queue));
        put("x-first-death-reason", Value::string(reason.as_str()));
        put("x-first-death-exchange", Value::String(exchange.clone()));
    }
    if let Some(last) = deaths.entries.first() {
        put("x-last-death-queue", Value::string(&last.queue));
        put("x-last-death-reason", Value::string(last.reason.as_str()));
        put(
            "x-last-death-exchange",
            Value::String(deaths.last_exchange.clone()),
        );
    }
}

/// Writes the header and message-annotations of an AMQP 1.0 message (`Format::Amqp10`): the
/// header from the broker's fields and this delivery, the broker's annotations, then the
/// publisher's own (`publisher`) except those the broker set.
fn write_kept_head(
    message: &Message,
    redelivered: bool,
    publisher: Option<FieldsMap>,
    out: &mut BytesMut,
) {
    debug_assert_eq!(message.format, Format::Amqp10);
    let header = Header {
        durable: message.persistent,
        priority: (message.priority != 0).then_some(message.priority),
        ttl: message.expiration_ms,
        first_acquirer: !redelivered,
        delivery_count: u32::from(redelivered),
    };
    header.to_value().encode(out);
    let mut annotations = broker_annotations(message);
    if let Some(deaths) = &message.deaths {
        push_death_summary(deaths, &mut annotations);
    }
    let broker_keys = annotations.len();
    for (key, value) in publisher.into_iter().flatten() {
        let taken = annotations
            .get(..broker_keys)
            .is_some_and(|ours| ours.iter().any(|(k, _)| k.as_str() == key.as_str()));
        if !taken {
            annotations.push((key, value));
        }
    }
    encode_map_section(out, section::MESSAGE_ANNOTATIONS, &annotations);
}

/// The header and message-annotations last written for an AMQP 1.0 message without
/// message-annotations of its own and without deaths: they depend only on the key fields.
#[derive(Default)]
struct KeptMemo {
    valid: bool,
    route: RouteKey,
    /// persistent, priority, expiration, redelivered.
    flags: (bool, u8, Option<u32>, bool),
    sections: Vec<u8>,
}

impl KeptMemo {
    /// Writes an AMQP 1.0 message's sections before its body, which it returns: the header
    /// and annotations (from the memo when they are the last ones), then the publisher's
    /// properties and application-properties as received.
    fn write(&mut self, message: &Message, redelivered: bool, out: &mut BytesMut) -> Body {
        // Decoded at publish, so never an error; a message-annotations section is rare.
        let (publisher, rest) = split_message_annotations(&message.properties)
            .unwrap_or_else(|_| (None, message.properties.clone()));
        let plain = publisher.is_none() && message.deaths.is_none();
        let flags = (
            message.persistent,
            message.priority,
            message.expiration_ms,
            redelivered,
        );
        let hit = plain && self.valid && self.flags == flags && self.route.matches(message);
        if hit {
            out.extend_from_slice(&self.sections);
        } else {
            let start = out.len();
            write_kept_head(message, redelivered, publisher, out);
            let key_bytes = message.exchange.len() + message.routing_key.len();
            self.valid = plain && key_bytes <= MEMO_KEY_BYTES_MAX;
            if self.valid {
                self.route.set(message);
                refill(&mut self.sections, out.get(start..).unwrap_or_default());
                self.flags = flags;
            }
        }
        out.extend_from_slice(&rest);
        if !has_body_section(&message.body.contiguous()) {
            // The spec requires a body; a publisher's message without one gets an empty data
            // section, as a converted message always had.
            encode_data_head(out, 0);
        }
        message.body.clone()
    }
}

/// The exchange and routing key a memo entry was written for, copied (never a slice that
/// would pin a read buffer).
#[derive(Default)]
struct RouteKey {
    exchange: Vec<u8>,
    routing_key: Vec<u8>,
}

impl RouteKey {
    fn matches(&self, message: &Message) -> bool {
        self.routing_key == message.routing_key.as_ref()
            && self.exchange == message.exchange.as_ref()
    }

    fn set(&mut self, message: &Message) {
        refill(&mut self.exchange, &message.exchange);
        refill(&mut self.routing_key, &message.routing_key);
    }
}

fn refill(to: &mut Vec<u8>, from: &[u8]) {
    to.clear();
    to.extend_from_slice(from);
}

/// Whether kept body bytes (body sections, then any footer) start with a body section rather
/// than being empty or only a footer.
fn has_body_section(body: &[u8]) -> bool {
    const FOOTER: [u8; 3] = [0x00, 0x53, section::FOOTER as u8];
    !body.is_empty() && !body.starts_with(&FOOTER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_proto::amqp091::ShortStr;
    use warren_proto::amqp10::message::{encode_simple, Body, Properties};
    use warren_proto::convert::to_amqp091;

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
        prefix.extend_from_slice(&body.to_vec());
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
            let body2 =
                memo.write_converted(message, &message.properties, *redelivered, &mut memoized);
            assert_eq!(body, body2);
            assert_eq!(&memoized[2..], &plain[..]);
        }
    }

    /// An AMQP 1.0 message goes out with its bare message's bytes as received, after a fresh
    /// header and the broker's annotations merged with the publisher's.
    #[test]
    fn kept_messages_go_out_as_received() {
        let mut raw = BytesMut::new();
        Header {
            durable: true,
            ..Default::default()
        }
        .to_value()
        .encode(&mut raw);
        let publisher = vec![(Value::symbol("x-opt-p"), Value::Ulong(u64::MAX))];
        encode_map_section(&mut raw, section::MESSAGE_ANNOTATIONS, &publisher);
        let properties = Properties {
            message_id: Some(Value::Uuid([9; 16])),
            ..Default::default()
        };
        properties.to_value().encode(&mut raw);
        let application = vec![(Value::string("k"), Value::Symbol(Bytes::from_static(b"s")))];
        encode_map_section(&mut raw, section::APPLICATION_PROPERTIES, &application);
        encode_data_head(&mut raw, 5);
        raw.extend_from_slice(b"hello");
        let raw = raw.freeze();
        let sections = Sections::decode(&raw).unwrap();
        let (head, body) = kept_sections(&sections, &raw);
        let mut message = Message::new(Bytes::new(), Bytes::from_static(b"q"), head, body);
        message.format = Format::Amqp10;
        message.persistent = true;
        let mut memo = Amqp10Memo::default();
        for redelivered in [false, true, true] {
            let mut out = BytesMut::new();
            let body = memo.write(&message, redelivered, &mut out);
            out.extend_from_slice(&body.to_vec());
            let back = Sections::decode(&out.freeze()).unwrap();
            assert_eq!(back.properties, sections.properties);
            assert_eq!(back.application_properties, sections.application_properties);
            assert_eq!(back.body, sections.body);
            let header = back.header.unwrap();
            assert!(header.durable && header.first_acquirer != redelivered);
            let annotations = back.message_annotations.unwrap();
            assert_eq!(annotations.len(), 3);
            assert_eq!(annotations.get(2), publisher.first());
        }
        tracing::info!("a message without a body gets an empty data section");
        let mut raw = BytesMut::new();
        properties.to_value().encode(&mut raw);
        let raw = raw.freeze();
        let sections = Sections::decode(&raw).unwrap();
        let (head, body) = kept_sections(&sections, &raw);
        let mut message = Message::new(Bytes::new(), Bytes::from_static(b"q"), head, body);
        message.format = Format::Amqp10;
        let mut out = BytesMut::new();
        let body = memo.write(&message, false, &mut out);
        out.extend_from_slice(&body.to_vec());
        let back = Sections::decode(&out.freeze()).unwrap();
        assert_eq!(back.body, Body::Data(vec![Bytes::new()]));
        assert_eq!(back.properties, sections.properties);
    }
}
