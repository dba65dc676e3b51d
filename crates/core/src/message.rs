//! A message as core holds it: the publisher's encoding kept as is (RabbitMQ's `mc`), shared by
//! every queue it was routed to (one `Arc`, never copied).
//!
//! Besides the raw properties, core keeps the few fields queues act on, read once by the
//! protocol at publish (`priority`, `expiration_ms`), and the broker's own annotations: the
//! dead-letter history (`deaths`). As in RabbitMQ's `mc`, annotations are not written into the
//! raw properties; each protocol renders them when it sends the message (AMQP 0.9.1: the
//! `x-death` and `x-first-death-*` headers), so dead-lettering never re-encodes a message.

use std::sync::Arc;

use bytes::Bytes;

pub use self::body::Body;
pub use crate::dead_letter::{Death, DeathReason, Deaths};

mod body;

/// The encoding `properties` and `body` are in; only the protocols decode them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// AMQP 0.9.1: `properties` is the content header's property flags and list, `body` the
    /// content body.
    Amqp091,
    /// AMQP 1.0, kept as received: `properties` holds the bare message's sections before the
    /// body with the message-annotations in front (message-annotations, properties,
    /// application-properties, each optional), `body` the body sections and any footer. The
    /// per-hop sections (header, delivery-annotations) are not kept: the header is written
    /// afresh at each delivery from `persistent`, `priority` and `expiration_ms`.
    Amqp10,
}

impl Format {
    /// The byte that names the format in a stored message.
    fn code(self) -> u8 {
        match self {
            Format::Amqp091 => 1,
            Format::Amqp10 => 2,
        }
    }

    fn from_code(code: u8) -> Option<Format> {
        match code {
            1 => Some(Format::Amqp091),
            2 => Some(Format::Amqp10),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Message {
    pub format: Format,
    /// Exchange the message was published to (empty = default exchange).
    pub exchange: Bytes,
    pub routing_key: Bytes,
    /// Encoded properties, as received.
    pub properties: Bytes,
    /// The body as it arrived: one slice per frame, never joined on the message path.
    pub body: Body,
    /// delivery-mode 2: to be stored on disk by durable queues (the message store's job).
    pub persistent: bool,
    /// The `priority` property (0 when absent).
    pub priority: u8,
    /// The `expiration` property: milliseconds the message may wait in a queue.
    pub expiration_ms: Option<u32>,
    /// Dead-letter history, newest first; `None` for a message that never died.
    pub deaths: Option<Arc<Deaths>>,
}

impl Message {
    /// Bytes this message holds in memory, for queue statistics and budgets.
    pub fn size_bytes(&self) -> usize {
        self.body.len() + self.properties.len() + self.exchange.len() + self.routing_key.len()
    }

    /// Memory a queued message really costs, for memory budgets: its bytes, the `Message`
    /// and its `Arc`, and the frame bytes around the body in the read buffer it was sliced
    /// from (kept alive with it). Counting only the bytes would let a queue of small messages
    /// hold ten times its budget.
    pub fn resident_bytes(&self) -> usize {
        self.size_bytes() + MESSAGE_OVERHEAD_BYTES
    }
}

/// What a queued message costs beyond its bytes (see [`Message::resident_bytes`]): the
/// `Message` (4 `Bytes` handles), the `Arc` header and allocator slack, and about 60 bytes of
/// method and header frame around a body in the publisher's read buffer.
pub const MESSAGE_OVERHEAD_BYTES: usize = std::mem::size_of::<Message>() + 32 + 64;

/// Stored-message flag bits.
const STORED_PERSISTENT: u8 = 1;
/// An extension block follows the flags (records written before it have none).
const STORED_EXTENDED: u8 = 2;

impl Message {
    /// A plain message (no priority, no TTL, never dead-lettered).
    pub fn new(
        exchange: Bytes,
        routing_key: Bytes,
        properties: Bytes,
        body: impl Into<Body>,
    ) -> Message {
        let body = body.into();
        Message {
            format: Format::Amqp091,
            exchange,
            routing_key,
            properties,
            body,
            persistent: false,
            priority: 0,
            expiration_ms: None,
            deaths: None,
        }
    }

    /// Appends the message as the store keeps it (see [`Message::decode_stored`]):
    /// `format:u8 (1 = AMQP 0.9.1, 2 = AMQP 1.0) flags:u8 [extension] exchange_len:u8 exchange routing_key_len:u8 routing_key
    /// properties_len:u32le properties body`; flag bit 0 is `persistent`, bit 1 announces the
    /// extension: `priority:u8 expiration:u32le (u32::MAX = none) deadline_ms:u64le (0 = none)
    /// deaths_len:u32le deaths` (see `Deaths::encode`). `deadline_ms` is the queue's
    /// expiry time of this copy (milliseconds since the epoch), kept so TTLs survive restarts.
    pub fn encode_stored(&self, out: &mut Vec<u8>, deadline_ms: Option<u64>) {
        self.encode_stored_head(out, deadline_ms);
        self.body
            .chunks()
            .iter()
            .for_each(|c| out.extend_from_slice(c));
    }

    /// Appends what [`Message::encode_stored`] writes before the body: the body follows it
    /// in the store as the message's own slices (a vectored write, no copy).
    pub fn encode_stored_head(&self, out: &mut Vec<u8>, deadline_ms: Option<u64>) {
        out.push(self.format.code());
        let extended = self.priority != 0
            || self.expiration_ms.is_some()
            || deadline_ms.is_some()
            || self.deaths.is_some();
        let mut flags = u8::from(self.persistent) * STORED_PERSISTENT;
        if extended {
            flags |= STORED_EXTENDED;
        }
        out.push(flags);
        if extended {
            out.push(self.priority);
            out.extend_from_slice(&self.expiration_ms.unwrap_or(u32::MAX).to_le_bytes());
            out.extend_from_slice(&deadline_ms.unwrap_or(0).to_le_bytes());
            let len_at = out.len();
            out.extend_from_slice(&0u32.to_le_bytes());
            if let Some(deaths) = &self.deaths {
                deaths.encode(out);
            }
            let len = u32::try_from(out.len() - len_at - 4).unwrap_or(u32::MAX);
            out[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
        }
        // Exchange names and routing keys are short strings (at most 255 bytes) on the wire.
        out.push(self.exchange.len().min(255) as u8);
        out.extend_from_slice(&self.exchange[..self.exchange.len().min(255)]);
        out.push(self.routing_key.len().min(255) as u8);
        out.extend_from_slice(&self.routing_key[..self.routing_key.len().min(255)]);
        out.extend_from_slice(&(self.properties.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.properties);
    }

    /// A message read back from the store, with the deadline its queue gave it; its parts are
    /// slices of `bytes`. `None` when the bytes are not a stored message.
    pub fn decode_stored(bytes: Bytes) -> Option<(Message, Option<u64>)> {
        let format = Format::from_code(*bytes.first()?)?;
        let flags = *bytes.get(1)?;
        let persistent = flags & STORED_PERSISTENT != 0;
        let mut at = 2;
        let (mut priority, mut expiration_ms, mut deadline_ms, mut deaths) = (0, None, None, None);
        if flags & STORED_EXTENDED != 0 {
            priority = *bytes.get(at)?;
            let expiration = u32::from_le_bytes(bytes.get(at + 1..at + 5)?.try_into().ok()?);
            expiration_ms = (expiration != u32::MAX).then_some(expiration);
            let deadline = u64::from_le_bytes(bytes.get(at + 5..at + 13)?.try_into().ok()?);
            deadline_ms = (deadline != 0).then_some(deadline);
            let len = u32::from_le_bytes(bytes.get(at + 13..at + 17)?.try_into().ok()?) as usize;
            let start = at + 17;
            let block = bytes.get(start..start.checked_add(len)?)?;
            if len > 0 {
                deaths = Some(Arc::new(Deaths::decode(block)?));
            }
            at = start + len;
        }
        let short = |at: &mut usize| -> Option<Bytes> {
            let len = *bytes.get(*at)? as usize;
            let start = *at + 1;
            *at = start + len;
            (bytes.len() >= *at).then(|| bytes.slice(start..*at))
        };
        let exchange = short(&mut at)?;
        let routing_key = short(&mut at)?;
        let len = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize;
        let start = at + 4;
        let properties_end = start.checked_add(len)?;
        if properties_end > bytes.len() {
            return None;
        }
        let message = Message {
            format,
            exchange,
            routing_key,
            properties: bytes.slice(start..properties_end),
            body: Body::from(bytes.slice(properties_end..)),
            persistent,
            priority,
            expiration_ms,
            deaths,
        };
        Some((message, deadline_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_messages_round_trip() {
        let mut message = Message::new(
            Bytes::from_static(b"amq.direct"),
            Bytes::from_static(b"orders"),
            Bytes::from_static(&[0x10, 0, 2]),
            Bytes::from_static(b"body bytes"),
        );
        message.persistent = true;
        let mut buf = Vec::new();
        message.encode_stored(&mut buf, None);
        let (back, deadline) = Message::decode_stored(Bytes::from(buf.clone())).unwrap();
        assert!(back.persistent && deadline.is_none() && back.deaths.is_none());
        assert_eq!(back.format, Format::Amqp091);
        assert_eq!(back.exchange, message.exchange);
        assert_eq!(back.routing_key, message.routing_key);
        assert_eq!(back.properties, message.properties);
        assert_eq!(back.body, message.body);
        for cut in 0..buf.len() - message.body.len() {
            let _ = Message::decode_stored(Bytes::from(buf[..cut].to_vec()));
        }
        assert!(Message::decode_stored(Bytes::from_static(&[9, 0, 0])).is_none());
    }

    #[test]
    fn amqp10_messages_round_trip_as_format_2() {
        // message-annotations {}, properties [message-id "m"], then a data section.
        let head = Bytes::from_static(&[
            0, 0x53, 0x72, 0xc1, 1, 0, 0, 0x53, 0x73, 0xc0, 3, 1, 0xa1, 1, b'm',
        ]);
        let body = Bytes::from_static(&[0, 0x53, 0x75, 0xa0, 2, b'h', b'i']);
        let mut message = Message::new(Bytes::new(), Bytes::from_static(b"q"), head, body);
        message.format = Format::Amqp10;
        message.persistent = true;
        message.priority = 4;
        let mut buf = Vec::new();
        message.encode_stored(&mut buf, None);
        assert_eq!(buf[0], 2);
        let (back, _) = Message::decode_stored(Bytes::from(buf)).unwrap();
        assert_eq!(back.format, Format::Amqp10);
        assert!(back.persistent);
        assert_eq!(back.priority, 4);
        assert_eq!(back.properties, message.properties);
        assert_eq!(back.body, message.body);
    }

    #[test]
    fn priority_ttl_deadline_and_deaths_are_stored() {
        let mut message = Message::new(
            Bytes::new(),
            Bytes::from_static(b"q"),
            Bytes::from_static(&[0, 0]),
            Bytes::from_static(b"b"),
        );
        message.priority = 7;
        message.expiration_ms = Some(5000);
        let mut deaths = Deaths::default();
        deaths.record(Death {
            queue: Arc::from("q"),
            reason: DeathReason::Expired,
            count: 1,
            exchange: Bytes::from_static(b"x"),
            routing_keys: vec![Bytes::from_static(b"q")],
            time: 1_700_000_000,
            original_expiration: Some(5000),
        });
        message.deaths = Some(Arc::new(deaths));
        let mut buf = Vec::new();
        message.encode_stored(&mut buf, Some(123));
        let (back, deadline) = Message::decode_stored(Bytes::from(buf.clone())).unwrap();
        assert_eq!(deadline, Some(123));
        assert_eq!((back.priority, back.expiration_ms), (7, Some(5000)));
        assert_eq!(back.deaths, message.deaths);
        assert_eq!(back.body, message.body);
        for cut in 0..buf.len() - 1 {
            let _ = Message::decode_stored(Bytes::from(buf[..cut].to_vec()));
        }
    }
}
