//! Small bounded helpers over lapin, so tests read as what they check.

use std::fmt::Debug;
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::message::{BasicGetMessage, Delivery};
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, Consumer, ErrorKind, Queue};

use crate::bounded;

/// The reply code and text of an AMQP error (a channel or connection close from the broker).
pub fn amqp_error(error: &lapin::Error) -> Option<(u16, String)> {
    match error.kind() {
        ErrorKind::ProtocolError(amqp) => Some((amqp.get_id(), amqp.get_message().to_string())),
        _ => None,
    }
}

/// Asserts that `result` failed with the broker's reply `code`; returns the reply text.
#[track_caller]
pub fn expect_amqp_error<T: Debug>(result: lapin::Result<T>, code: u16) -> String {
    match result {
        Ok(value) => panic!("expected AMQP error {code}, got success: {value:?}"),
        Err(error) => match amqp_error(&error) {
            Some((got, text)) if got == code => text,
            Some((got, text)) => panic!("expected AMQP error {code}, got {got} {text:?}"),
            None => panic!("expected AMQP error {code}, got a non-AMQP error: {error}"),
        },
    }
}

/// Builds a field table from (name, value) pairs.
pub fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut table = FieldTable::default();
    for (name, value) in entries {
        table.insert(ShortString::from(*name), value.clone());
    }
    table
}

/// A long-string field value.
pub fn text(value: &str) -> AMQPValue {
    AMQPValue::LongString(value.into())
}

/// Declares a transient queue (not durable, not exclusive, not auto-delete).
pub async fn declare_queue(channel: &Channel, name: &str) -> Queue {
    let declare = channel.queue_declare(
        name.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    );
    bounded!(declare).unwrap_or_else(|error| panic!("declare queue {name}: {error}"))
}

/// Binds a queue to an exchange with a binding key and no arguments.
pub async fn bind_queue(channel: &Channel, queue: &str, exchange: &str, key: &str) {
    try_bind_queue(channel, queue, exchange, key)
        .await
        .unwrap_or_else(|error| panic!("bind {queue} to {exchange}: {error}"));
}

/// `bind_queue` for a bind that may be refused.
pub async fn try_bind_queue(
    channel: &Channel,
    queue: &str,
    exchange: &str,
    key: &str,
) -> lapin::Result<()> {
    let bind = channel.queue_bind(
        queue.into(),
        exchange.into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    );
    bounded!(bind)
}

/// Publishes a body with default properties and waits for lapin to hand it to the socket
/// (and for the broker's confirm when the channel is in confirm mode).
pub async fn publish(channel: &Channel, exchange: &str, routing_key: &str, body: &[u8]) {
    publish_with(
        channel,
        exchange,
        routing_key,
        body,
        BasicProperties::default(),
    )
    .await;
}

/// Publishes with the given properties.
pub async fn publish_with(
    channel: &Channel,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    properties: BasicProperties,
) {
    let options = BasicPublishOptions::default();
    let publish = channel.basic_publish(
        exchange.into(),
        routing_key.into(),
        options,
        body,
        properties,
    );
    let confirm = bounded!(publish).unwrap_or_else(|error| panic!("publish: {error}"));
    bounded!(confirm).unwrap_or_else(|error| panic!("publish confirm: {error}"));
}

/// Starts a consumer with a server-generated tag.
pub async fn consume(channel: &Channel, queue: &str, no_ack: bool) -> Consumer {
    let options = BasicConsumeOptions {
        no_ack,
        ..Default::default()
    };
    let start = channel.basic_consume(queue.into(), "".into(), options, FieldTable::default());
    bounded!(start).unwrap_or_else(|error| panic!("consume from {queue}: {error}"))
}

/// The next delivery; panics when the consumer ends, errors or stays silent for a step.
pub async fn next_delivery(consumer: &mut Consumer) -> Delivery {
    match bounded!(consumer.next()) {
        Some(Ok(delivery)) => delivery,
        Some(Err(error)) => panic!("consumer failed: {error}"),
        None => panic!("consumer ended (cancelled) while a delivery was expected"),
    }
}

/// Asserts that nothing is delivered to `consumer` within `wait`.
pub async fn expect_no_delivery(consumer: &mut Consumer, wait: Duration) {
    if let Ok(item) = tokio::time::timeout(wait, consumer.next()).await {
        match item {
            Some(Ok(delivery)) => panic!(
                "unexpected delivery: tag {} body {:?}",
                delivery.delivery_tag,
                String::from_utf8_lossy(&delivery.data)
            ),
            Some(Err(error)) => panic!("consumer failed while expecting silence: {error}"),
            None => panic!("consumer ended while expecting silence"),
        }
    }
}

/// The body as UTF-8 text (test bodies are text).
pub fn body(delivery: &Delivery) -> String {
    String::from_utf8_lossy(&delivery.data).into_owned()
}

/// basic.get with manual ack; `None` for get-empty.
pub async fn get(channel: &Channel, queue: &str) -> Option<BasicGetMessage> {
    let get = channel.basic_get(queue.into(), BasicGetOptions { no_ack: false });
    bounded!(get).unwrap_or_else(|error| panic!("basic.get {queue}: {error}"))
}

/// Drains a queue with basic.get (no-ack) and returns the bodies in order.
pub async fn get_all(channel: &Channel, queue: &str) -> Vec<String> {
    let mut bodies = Vec::new();
    loop {
        let get = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true });
        match bounded!(get).unwrap_or_else(|error| panic!("basic.get {queue}: {error}")) {
            Some(message) => bodies.push(body(&message.delivery)),
            None => return bodies,
        }
        assert!(
            bodies.len() <= 10_000,
            "invariant: test queues hold few messages"
        );
    }
}

/// The message count of a queue, via a passive declare on a short-lived channel.
pub async fn message_count(connection: &Connection, queue: &str) -> u32 {
    passive_declare(connection, queue)
        .await
        .unwrap_or_else(|error| panic!("queue {queue} should exist: {error}"))
        .message_count()
}

/// A passive queue.declare on a fresh channel, closed afterwards when it survived.
pub async fn passive_declare(connection: &Connection, queue: &str) -> lapin::Result<Queue> {
    let channel = bounded!(connection.create_channel()).expect("open a channel");
    let options = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let result = bounded!(channel.queue_declare(queue.into(), options, FieldTable::default()));
    if result.is_ok() {
        let _ = bounded!(channel.close(200, "OK".into()));
    }
    result
}

/// Whether a queue exists (passive declare succeeds).
pub async fn queue_exists(connection: &Connection, queue: &str) -> bool {
    match passive_declare(connection, queue).await {
        Ok(_) => true,
        Err(error) if amqp_error(&error).map(|(code, _)| code) == Some(404) => false,
        Err(error) => panic!("passive declare of {queue}: unexpected error {error}"),
    }
}

/// Polls `check` every 50 ms until it returns true; panics after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not true after {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Watches a channel for an asynchronous close by the broker (after a publish or an ack, which
/// get no reply). It consumes from a server-named exclusive queue on that channel: lapin hands
/// the broker's channel.close to every consumer on the channel as an error, deterministically,
/// where a follow-up synchronous method would race with the close.
pub struct ChannelWatch {
    consumer: Consumer,
}

impl ChannelWatch {
    pub async fn new(channel: &Channel) -> ChannelWatch {
        let options = QueueDeclareOptions {
            exclusive: true,
            auto_delete: true,
            ..Default::default()
        };
        let declare = channel.queue_declare("".into(), options, FieldTable::default());
        let queue = bounded!(declare).expect("declare the watch queue");
        let consumer = consume(channel, queue.name().as_str(), true).await;
        ChannelWatch { consumer }
    }

    /// Waits for the broker to close the channel with `code`; returns the reply text.
    pub async fn expect_close(mut self, code: u16) -> String {
        match bounded!(self.consumer.next()) {
            Some(Err(error)) => expect_amqp_error::<()>(Err(error), code),
            Some(Ok(delivery)) => panic!("watch queue got a delivery: {delivery:?}"),
            None => panic!("channel closed without an error (expected {code})"),
        }
    }

    /// Asserts the channel is still open after `wait` (no close arrived).
    pub async fn expect_open(&mut self, wait: Duration) {
        if let Ok(item) = tokio::time::timeout(wait, self.consumer.next()).await {
            panic!("channel should still be open, got {item:?}");
        }
    }
}

/// Waits until a passive declare reports `expected` ready messages. declare-ok counts are a
/// snapshot that RabbitMQ does not order after unconfirmed publishes, so tests poll.
pub async fn wait_for_message_count(connection: &Connection, queue: &str, expected: u32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let count = message_count(connection, queue).await;
        if count == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "queue {queue} has {count} ready messages, expected {expected}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A channel in publisher-confirm mode: [`publish`] on it returns once the broker confirmed.
pub async fn confirm_channel(connection: &Connection) -> Channel {
    let channel = bounded!(connection.create_channel()).expect("open a channel");
    let select = channel.confirm_select(lapin::options::ConfirmSelectOptions::default());
    bounded!(select).expect("confirm.select");
    channel
}
