//! Deliveries held back to be written together (`delivery_hold_ms`): a streaming consumer gets
//! fewer, fuller writes and still every message, in order, including the last ones of a
//! stream; a connection that also publishes gets each delivery in its own write at once.
//!
//! The broker runs with a long hold (200 ms) so that the 10 ms spacing of these streams falls
//! well inside it in a debug build; the write counts come from the management API
//! (`send_cnt`, one per `send` the broker made on the connection).

use std::time::Duration;

use lapin::options::BasicConsumeOptions;
use lapin::types::FieldTable;
use lapin::ConnectionProperties;
use reqwest::Client;
use serde_json::Value;
use warren_tests::{body, bounded, declare_queue, next_delivery, publish, unique, TestBroker};

const HOLD_MS: u64 = 200;
const MESSAGES: usize = 40;
const SPACING: Duration = Duration::from_millis(10);

async fn broker() -> TestBroker {
    TestBroker::start_with(|config| config.delivery_hold_ms = HOLD_MS).await
}

async fn connect_named(broker: &TestBroker, name: &str) -> lapin::Connection {
    let properties = ConnectionProperties::default().with_connection_name(name.into());
    bounded!(lapin::Connection::connect(&broker.url(), properties)).expect("connect")
}

/// The `send_cnt` of the connection whose client named itself `name`.
async fn writes_to(broker: &TestBroker, name: &str) -> u64 {
    let list: Value = Client::new()
        .get(format!("{}/api/connections", broker.http_url()))
        .basic_auth("guest", Some("guest"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("GET /api/connections")
        .json()
        .await
        .expect("a JSON list");
    list.as_array()
        .expect("a JSON list")
        .iter()
        .find(|c| c["client_properties"]["connection_name"] == name)
        .and_then(|c| c["send_cnt"].as_u64())
        .unwrap_or_else(|| panic!("no connection named {name} with send_cnt in {list}"))
}

/// A connection named `name` consuming (no-ack) from a new queue: the connection (kept open
/// by the caller), the consumer and the queue's name.
async fn named_consumer(
    broker: &TestBroker,
    name: &str,
) -> (lapin::Connection, lapin::Consumer, String) {
    let queue = unique(name);
    let connection = connect_named(broker, name).await;
    let channel = bounded!(connection.create_channel()).unwrap();
    declare_queue(&channel, &queue).await;
    let consumer = consume_no_ack(&channel, &queue).await;
    (connection, consumer, queue)
}

/// Publishes `MESSAGES` messages one at a time, each received before the next is sent.
async fn publish_each_and_receive_it(
    channel: &lapin::Channel,
    consumer: &mut lapin::Consumer,
    queue: &str,
) {
    for i in 0..MESSAGES {
        publish(channel, "", queue, format!("m{i}").as_bytes()).await;
        let delivery = next_delivery(consumer).await;
        assert_eq!(body(&delivery), format!("m{i}"));
        tokio::time::sleep(SPACING).await;
    }
}

async fn consume_no_ack(channel: &lapin::Channel, queue: &str) -> lapin::Consumer {
    let options = BasicConsumeOptions {
        no_ack: true,
        ..Default::default()
    };
    bounded!(channel.basic_consume(queue.into(), "".into(), options, FieldTable::default()))
        .expect("basic.consume")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_consumer_gets_fewer_writes_and_every_message_in_order() {
    let broker = broker().await;
    if broker.skip_if_external("sets delivery_hold_ms") {
        return;
    }
    let (_connection, mut consumer, queue) = named_consumer(&broker, "hold-consumer").await;
    let (_publisher, channel) = broker.channel().await;
    let before = writes_to(&broker, "hold-consumer").await;

    for i in 0..MESSAGES {
        publish(&channel, "", &queue, format!("m{i}").as_bytes()).await;
        tokio::time::sleep(SPACING).await;
    }
    // The last ones wait for the hold's timer: they must still come.
    for i in 0..MESSAGES {
        let delivery = next_delivery(&mut consumer).await;
        assert_eq!(body(&delivery), format!("m{i}"), "in publish order");
    }

    let writes = writes_to(&broker, "hold-consumer").await - before;
    // 40 messages over about 400 ms, each hold lasting up to 200 ms: a handful of writes.
    assert!(
        writes <= (MESSAGES / 4) as u64,
        "{MESSAGES} deliveries took {writes} writes: they were not held and written together"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_publishes_gets_each_delivery_at_once() {
    let broker = broker().await;
    if broker.skip_if_external("sets delivery_hold_ms") {
        return;
    }
    // Request-reply shape: the same connection publishes and consumes, so it may be waiting
    // on each delivery.
    let queue = unique("hold-rpc");
    let connection = connect_named(&broker, "hold-rpc").await;
    let channel = bounded!(connection.create_channel()).unwrap();
    declare_queue(&channel, &queue).await;
    let mut consumer = consume_no_ack(&channel, &queue).await;
    let before = writes_to(&broker, "hold-rpc").await;

    publish_each_and_receive_it(&channel, &mut consumer, &queue).await;

    let writes = writes_to(&broker, "hold-rpc").await - before;
    assert!(
        writes >= MESSAGES as u64,
        "{MESSAGES} deliveries took {writes} writes: some were held for a client that publishes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_hold_when_delivery_hold_ms_is_zero() {
    let broker = TestBroker::start_with(|config| config.delivery_hold_ms = 0).await;
    if broker.skip_if_external("sets delivery_hold_ms") {
        return;
    }
    let (_connection, mut consumer, queue) = named_consumer(&broker, "hold-off").await;
    let (_publisher, channel) = broker.channel().await;
    let before = writes_to(&broker, "hold-off").await;

    publish_each_and_receive_it(&channel, &mut consumer, &queue).await;

    let writes = writes_to(&broker, "hold-off").await - before;
    assert!(
        writes >= MESSAGES as u64,
        "{MESSAGES} deliveries took {writes} writes with holding turned off"
    );
}
