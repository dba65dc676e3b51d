//! How streams store messages: as AMQP 1.0 messages, as RabbitMQ stores them
//! (conversions.md). Core defines the interface (`StreamEncoding`) and never sees a codec;
//! this is its implementation on Warren's AMQP 1.0 codec, passed to the broker at open.
//!
//! A record is a whole AMQP 1.0 message: a header, message-annotations with `x-exchange` and
//! `x-routing-key` (what the message was published to), properties, application-properties
//! (an AMQP 0.9.1 message's headers) and the body sections. It is what an AMQP 1.0 consumer
//! is sent, so the encoding is the one the AMQP 1.0 deliver path writes (`Amqp10Memo`).
//! Read back, a record becomes a `Format::Amqp10` message whose exchange and routing key come
//! from those annotations, with the `x-stream-offset` annotation (the record's offset) added:
//! AMQP 1.0 consumers see it as a message annotation, AMQP 0.9.1 consumers as a header.

use bytes::{Bytes, BytesMut};
use warren_core::message::{Format, Message};
use warren_core::queue::stream::StreamEncoding;
use warren_proto::amqp10::message::{
    code as section, encode_map_section, split_message_annotations, Sections,
};
use warren_proto::amqp10::Value;

use crate::amqp10::convert::{kept_sections, Amqp10Memo};

/// Streams' messages in AMQP 1.0 (see the module doc).
#[derive(Debug, Default)]
pub struct Amqp10StreamEncoding;

impl StreamEncoding for Amqp10StreamEncoding {
    fn encode(&self, message: &Message) -> Bytes {
        let mut out = BytesMut::with_capacity(message.size_bytes() + 128);
        let body = Amqp10Memo::default().write(message, false, &mut out);
        for chunk in body.chunks() {
            out.extend_from_slice(chunk);
        }
        out.freeze()
    }

    fn decode(&self, offset: u64, record: Bytes) -> Result<Message, String> {
        let sections = Sections::decode(&record)
            .map_err(|error| format!("not an AMQP 1.0 message: {error}"))?;
        let (head, body) = kept_sections(&sections, &record);
        let (annotations, rest) = split_message_annotations(&head)
            .map_err(|error| format!("bad message-annotations: {error}"))?;
        let mut exchange = Bytes::new();
        let mut routing_key = Bytes::new();
        let mut kept = Vec::new();
        for (key, value) in annotations.into_iter().flatten() {
            match (key.as_str(), value) {
                (Some("x-exchange"), Value::String(name)) => exchange = name,
                (Some("x-routing-key"), Value::String(name)) => routing_key = name,
                (Some("x-stream-offset"), _) => {}
                (_, value) => kept.push((key, value)),
            }
        }
        let offset = i64::try_from(offset).map_err(|_| format!("offset {offset} too large"))?;
        kept.push((Value::symbol_static("x-stream-offset"), Value::Long(offset)));
        let mut properties = BytesMut::with_capacity(rest.len() + 64);
        encode_map_section(&mut properties, section::MESSAGE_ANNOTATIONS, &kept);
        properties.extend_from_slice(&rest);
        let header = sections.header.as_ref();
        Ok(Message {
            format: Format::Amqp10,
            exchange,
            routing_key,
            properties: properties.freeze(),
            body: body.into(),
            persistent: header.is_some_and(|h| h.durable),
            priority: header.and_then(|h| h.priority).unwrap_or(0),
            expiration_ms: header.and_then(|h| h.ttl),
            deaths: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_proto::amqp091::{BasicProperties, FieldTable, FieldValue, ShortStr};

    fn amqp091_message() -> Message {
        let mut headers = FieldTable::default();
        headers.insert("colour", FieldValue::LongStr(Bytes::from_static(b"blue")));
        let props = BasicProperties {
            content_type: Some(ShortStr::from("text/plain")),
            delivery_mode: Some(2),
            headers: Some(headers),
            ..BasicProperties::default()
        };
        let mut encoded = BytesMut::new();
        props.encode(&mut encoded);
        let mut message = Message::new(
            Bytes::from_static(b"orders"),
            Bytes::from_static(b"eu.new"),
            encoded.freeze(),
            Bytes::from_static(b"hello"),
        );
        message.persistent = true;
        message
    }

    #[test]
    fn an_amqp091_message_is_stored_as_amqp10_and_read_back_with_its_offset() {
        let encoding = Amqp10StreamEncoding;
        let record = encoding.encode(&amqp091_message());
        let sections = Sections::decode(&record).expect("a whole AMQP 1.0 message");
        assert!(sections.header.as_ref().is_some_and(|h| h.durable));
        let properties = sections.properties.expect("properties");
        assert_eq!(properties.content_type.as_deref(), Some("text/plain"));
        let app = sections.application_properties.expect("headers");
        assert_eq!(app[0].0.as_str(), Some("colour"));
        let message = encoding.decode(42, record).expect("decodes");
        assert_eq!(message.format, Format::Amqp10);
        assert_eq!(&message.exchange[..], b"orders");
        assert_eq!(&message.routing_key[..], b"eu.new");
        assert!(message.persistent);
        assert_eq!(&message.body.to_bytes()[..], b"hello");
        let (annotations, _) = split_message_annotations(&message.properties).unwrap();
        let annotations = annotations.expect("annotations");
        assert_eq!(annotations.len(), 1, "{annotations:?}");
        assert_eq!(annotations[0].0.as_str(), Some("x-stream-offset"));
        assert_eq!(annotations[0].1, Value::Long(42));
    }

    #[test]
    fn what_is_not_amqp10_is_refused_with_a_reason() {
        let error = Amqp10StreamEncoding
            .decode(0, Bytes::from_static(b"\xffnot amqp"))
            .unwrap_err();
        assert!(error.starts_with("not an AMQP 1.0 message"), "{error}");
    }
}
