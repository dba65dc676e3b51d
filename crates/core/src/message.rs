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
}
