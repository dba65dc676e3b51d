//! Core's message annotations in AMQP 0.9.1 terms: the fields queues act on, read from the
//! properties at publish (`priority`, `expiration`), and the dead-letter history written as
//! the `x-death` and `x-first-death-*` / `x-last-death-*` headers when a dead-lettered message
//! is sent to a client, in the shape RabbitMQ writes them (`rabbit_dead_letter`).

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use warren_core::message::{Body, Death, Deaths, Format, Message};
use warren_proto::amqp091::{BasicProperties, FieldTable, FieldValue};

/// RabbitMQ's `MAX_EXPIRY_TIMER`: the largest `expiration` accepted.
const EXPIRATION_MAX: i64 = 4_294_967_295;
/// The `expiration` flag bit (property 8 of 14) in the first byte of the flags word.
const EXPIRATION_FLAG_HIGH_BYTE: u8 = 0x01;

/// Headers the broker owns on dead-lettered messages.
const DEATH_HEADERS: [&str; 7] = [
    "x-death",
    "x-first-death-queue",
    "x-first-death-reason",
    "x-first-death-exchange",
    "x-last-death-queue",
    "x-last-death-reason",
    "x-last-death-exchange",
];

/// The `expiration` property of raw properties as milliseconds: `Ok(None)` when absent,
/// `Err(text)` with RabbitMQ's 406 text when it is not a TTL (`rabbit_basic:parse_expiration`).
pub fn expiration_ms(raw: &Bytes) -> Result<Option<u32>, String> {
    if raw
        .first()
        .is_none_or(|high| high & EXPIRATION_FLAG_HIGH_BYTE == 0)
    {
        return Ok(None); // the common case: no decode
    }
    let Ok(properties) = BasicProperties::decode(raw) else {
        return Ok(None); // validated when the frame was decoded
    };
    let Some(expiration) = properties.expiration else {
        return Ok(None);
    };
    let text = expiration.as_str();
    parse_expiration(text)
        .map(Some)
        .map_err(|error| format!("invalid expiration '{text}': {error}"))
}

/// Erlang's `string:to_integer` followed by `rabbit_misc:check_expiry`.
fn parse_expiration(text: &str) -> Result<u32, String> {
    let (sign, digits_at) = match text.as_bytes().first() {
        Some(b'-') => (-1i64, 1),
        Some(b'+') => (1, 1),
        _ => (1, 0),
    };
    let rest = &text[digits_at..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err("no_integer".into());
    }
    let (number, leftover) = rest.split_at(digits);
    if !leftover.is_empty() {
        return Err(format!("{{leftover_string,\"{leftover}\"}}"));
    }
    let value = number.parse::<i64>().map_or(i64::MAX, |v| v * sign);
    if value < 0 {
        return Err(format!("{{value_negative,{value}}}"));
    }
    if value > EXPIRATION_MAX {
        return Err(format!("{{value_too_large,{number}}}"));
    }
    u32::try_from(value).map_err(|_| format!("{{value_too_large,{number}}}"))
}

/// The properties and body to send with `message`: for an AMQP 0.9.1 message its properties
/// (see [`delivery_properties`]) and body; an AMQP 1.0 message is converted here, at delivery,
/// as RabbitMQ's conversions page maps it.
pub fn delivery_content(message: &Message) -> (Cow<'_, Bytes>, Cow<'_, Body>) {
    match message.format {
        Format::Amqp091 => (delivery_properties(message), Cow::Borrowed(&message.body)),
        Format::Amqp10 => {
            let (mut properties, body) = warren_proto::convert::kept_to_amqp091(
                message.persistent,
                message.priority,
                message.expiration_ms,
                &message.properties,
                &message.body.to_bytes(),
            );
            if let Some(deaths) = &message.deaths {
                set_death_headers(&mut properties, deaths);
            }
            let mut out = BytesMut::with_capacity(message.properties.len() + 64);
            properties.encode(&mut out);
            (Cow::Owned(out.freeze()), Cow::Owned(Body::from(body)))
        }
    }
}

/// The properties to send with an AMQP 0.9.1 `message`: as published, or, for a
/// dead-lettered message, with its death headers and without `expiration` (decoded and
/// encoded again: rare path).
pub fn delivery_properties(message: &Message) -> Cow<'_, Bytes> {
    debug_assert_eq!(message.format, Format::Amqp091);
    let Some(deaths) = &message.deaths else {
        return Cow::Borrowed(&message.properties);
    };
    let Ok(mut properties) = BasicProperties::decode(&message.properties) else {
        return Cow::Borrowed(&message.properties);
    };
    set_death_headers(&mut properties, deaths);
    let mut out = BytesMut::with_capacity(message.properties.len() + 256);
    properties.encode(&mut out);
    Cow::Owned(out.freeze())
}

/// Drops `expiration` and replaces the death headers with `deaths`.
fn set_death_headers(properties: &mut BasicProperties, deaths: &Deaths) {
    properties.expiration = None;
    let mut headers = properties.headers.take().unwrap_or_default();
    headers
        .0
        .retain(|(key, _)| !DEATH_HEADERS.contains(&key.as_str()));
    add_death_headers(&mut headers, deaths);
    // As RabbitMQ, which sorts the table whenever it sets a header.
    headers.0.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    properties.headers = Some(headers);
}

fn add_death_headers(headers: &mut FieldTable, deaths: &Deaths) {
    let entries = deaths.entries.iter().map(death_table).collect();
    headers.insert("x-death", FieldValue::Array(entries));
    if let Some((queue, reason, exchange)) = &deaths.first {
        headers.insert("x-first-death-queue", long_str(queue.as_bytes()));
        headers.insert("x-first-death-reason", long_str(reason.as_str().as_bytes()));
        headers.insert(
            "x-first-death-exchange",
            FieldValue::LongStr(exchange.clone()),
        );
    }
    if let Some(last) = deaths.entries.first() {
        headers.insert("x-last-death-queue", long_str(last.queue.as_bytes()));
        headers.insert(
            "x-last-death-reason",
            long_str(last.reason.as_str().as_bytes()),
        );
        let exchange = FieldValue::LongStr(deaths.last_exchange.clone());
        headers.insert("x-last-death-exchange", exchange);
    }
}

/// One `x-death` element. RabbitMQ writes a new entry as `count, reason, queue, time,
/// exchange, routing-keys[, original-expiration]` and an updated one (count > 1) sorted by key.
fn death_table(death: &Death) -> FieldValue {
    let count = i64::try_from(death.count).unwrap_or(i64::MAX);
    let keys = death
        .routing_keys
        .iter()
        .map(|k| FieldValue::LongStr(k.clone()))
        .collect();
    let mut table = FieldTable::default();
    table.insert("count", FieldValue::I64(count));
    table.insert("reason", long_str(death.reason.as_str().as_bytes()));
    table.insert("queue", long_str(death.queue.as_bytes()));
    table.insert("time", FieldValue::Timestamp(death.time));
    table.insert("exchange", FieldValue::LongStr(death.exchange.clone()));
    table.insert("routing-keys", FieldValue::Array(keys));
    if let Some(expiration) = death.original_expiration {
        table.insert(
            "original-expiration",
            long_str(expiration.to_string().as_bytes()),
        );
    }
    if death.count > 1 {
        table.0.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    }
    FieldValue::Table(table)
}

fn long_str(bytes: &[u8]) -> FieldValue {
    FieldValue::LongStr(Bytes::copy_from_slice(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expirations_parse_as_rabbitmq_does() {
        assert_eq!(parse_expiration("60000"), Ok(60000));
        assert_eq!(parse_expiration("0"), Ok(0));
        assert_eq!(parse_expiration("abc"), Err("no_integer".into()));
        assert_eq!(
            parse_expiration("10x"),
            Err("{leftover_string,\"x\"}".into())
        );
        assert_eq!(parse_expiration("-5"), Err("{value_negative,-5}".into()));
        assert_eq!(
            parse_expiration("4294967296"),
            Err("{value_too_large,4294967296}".into())
        );
        assert_eq!(parse_expiration(""), Err("no_integer".into()));
    }
}
