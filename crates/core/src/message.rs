//! A message as core holds it: the publisher's encoding kept as is (RabbitMQ's `mc`), shared by
//! every queue it was routed to (one `Arc`, never copied).

use bytes::Bytes;

/// The encoding `properties` is in; only the owning protocol decodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// AMQP 0.9.1 content-header property flags and list.
    Amqp091,
}

#[derive(Debug, Clone)]
pub struct Message {
    pub format: Format,
    /// Exchange the message was published to (empty = default exchange).
    pub exchange: Bytes,
    pub routing_key: Bytes,
    /// Encoded properties, as received.
    pub properties: Bytes,
    pub body: Bytes,
    /// delivery-mode 2: to be stored on disk by durable queues (the message store's job).
    pub persistent: bool,
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

impl Message {
    /// Appends the message as the store keeps it (see [`Message::decode_stored`]):
    /// `format:u8 flags:u8 exchange_len:u8 exchange routing_key_len:u8 routing_key
    /// properties_len:u32le properties body`; flag bit 0 is `persistent`.
    pub fn encode_stored(&self, out: &mut Vec<u8>) {
        out.push(match self.format {
            Format::Amqp091 => 1,
        });
        out.push(u8::from(self.persistent));
        // Exchange names and routing keys are short strings (at most 255 bytes) on the wire.
        out.push(self.exchange.len().min(255) as u8);
        out.extend_from_slice(&self.exchange[..self.exchange.len().min(255)]);
        out.push(self.routing_key.len().min(255) as u8);
        out.extend_from_slice(&self.routing_key[..self.routing_key.len().min(255)]);
        out.extend_from_slice(&(self.properties.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.properties);
        out.extend_from_slice(&self.body);
    }

    /// A message read back from the store; its parts are slices of `bytes`. `None` when the
    /// bytes are not a stored message.
    pub fn decode_stored(bytes: Bytes) -> Option<Message> {
        let format = match *bytes.first()? {
            1 => Format::Amqp091,
            _ => return None,
        };
        let persistent = *bytes.get(1)? & 1 != 0;
        let mut at = 2;
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
        Some(Message {
            format,
            exchange,
            routing_key,
            properties: bytes.slice(start..properties_end),
            body: bytes.slice(properties_end..),
            persistent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_messages_round_trip() {
        let message = Message {
            format: Format::Amqp091,
            exchange: Bytes::from_static(b"amq.direct"),
            routing_key: Bytes::from_static(b"orders"),
            properties: Bytes::from_static(&[0x10, 0, 2]),
            body: Bytes::from_static(b"body bytes"),
            persistent: true,
        };
        let mut buf = Vec::new();
        message.encode_stored(&mut buf);
        let back = Message::decode_stored(Bytes::from(buf.clone())).unwrap();
        assert!(back.persistent);
        assert_eq!(back.exchange, message.exchange);
        assert_eq!(back.routing_key, message.routing_key);
        assert_eq!(back.properties, message.properties);
        assert_eq!(back.body, message.body);
        for cut in 0..buf.len() - message.body.len() {
            let _ = Message::decode_stored(Bytes::from(buf[..cut].to_vec()));
        }
        assert!(Message::decode_stored(Bytes::from_static(&[9, 0, 0])).is_none());
    }
}
