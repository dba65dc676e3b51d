//! Streams over AMQP 0.9.1, driven by lapin: publishing through any exchange with confirms,
//! consuming from every offset spec (`x-stream-offset`: first, last, next, an offset, a
//! timestamp, an interval), the `x-stream-offset` header on deliveries, the consumer rules
//! (qos required, manual acks, no global qos), recovery across a restart, and retention by
//! size with small segments.

use std::time::Duration;

use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, Consumer, ExchangeKind};
use warren_tests::{
    bind_queue, body, bounded, confirm_channel, expect_amqp_error, expect_no_delivery,
    next_delivery, publish_with, table, text, unique, TestBroker,
};

const PRECONDITION_FAILED: u16 = 406;

/// A reply text without the reply name in front (`PRECONDITION_FAILED - `).
fn reason(text: String) -> String {
    match text.split_once(" - ") {
        Some((_, reason)) => reason.to_string(),
        None => text,
    }
}
const NOT_IMPLEMENTED: u16 = 540;

async fn declare_stream(channel: &Channel, name: &str, extra: &[(&str, AMQPValue)]) {
    let mut entries = vec![("x-queue-type", text("stream"))];
    entries.extend_from_slice(extra);
    let options = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let declare = channel.queue_declare(name.into(), options, table(&entries));
    bounded!(declare).unwrap_or_else(|error| panic!("declare stream {name}: {error}"));
}

/// Publishes `m{from}`..`m{to - 1}`, each confirmed before the next (so each is a chunk).
async fn publish_range(channel: &Channel, exchange: &str, key: &str, range: std::ops::Range<u32>) {
    for i in range {
        let body = format!("m{i}");
        publish_with(
            channel,
            exchange,
            key,
            body.as_bytes(),
            BasicProperties::default(),
        )
        .await;
    }
}

async fn consumer_channel(connection: &Connection, prefetch: u16) -> Channel {
    let channel = bounded!(connection.create_channel()).expect("channel");
    bounded!(channel.basic_qos(prefetch, BasicQosOptions::default())).expect("qos");
    channel
}

async fn try_consume(
    channel: &Channel,
    stream: &str,
    offset: Option<AMQPValue>,
    no_ack: bool,
) -> lapin::Result<Consumer> {
    let arguments = match offset {
        Some(value) => table(&[("x-stream-offset", value)]),
        None => FieldTable::default(),
    };
    let options = BasicConsumeOptions {
        no_ack,
        ..Default::default()
    };
    bounded!(channel.basic_consume(stream.into(), "".into(), options, arguments))
}

async fn consume(channel: &Channel, stream: &str, offset: Option<AMQPValue>) -> Consumer {
    try_consume(channel, stream, offset, false)
        .await
        .expect("stream consumer starts")
}

fn offset_header(delivery: &lapin::message::Delivery) -> i64 {
    let headers = delivery.properties.headers().as_ref().expect("headers");
    match headers.inner().get("x-stream-offset") {
        Some(AMQPValue::LongLongInt(offset)) => *offset,
        other => panic!("x-stream-offset header: {other:?}"),
    }
}

/// Takes `count` deliveries, acknowledging each; returns (body, x-stream-offset) pairs.
async fn take(consumer: &mut Consumer, count: usize) -> Vec<(String, i64)> {
    let mut got = Vec::with_capacity(count);
    for _ in 0..count {
        let delivery = next_delivery(consumer).await;
        got.push((body(&delivery), offset_header(&delivery)));
        bounded!(delivery.ack(BasicAckOptions::default())).expect("ack");
    }
    got
}

fn expected(range: std::ops::Range<u32>) -> Vec<(String, i64)> {
    range.map(|i| (format!("m{i}"), i64::from(i))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_published_through_any_exchange_are_read_from_first_with_their_offsets() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let publisher = confirm_channel(&connection).await;
    let stream = unique("stream");
    declare_stream(&publisher, &stream, &[]).await;
    let exchange = unique("ex");
    let declare = publisher.exchange_declare(
        exchange.as_str().into(),
        ExchangeKind::Direct,
        Default::default(),
        FieldTable::default(),
    );
    bounded!(declare).expect("exchange");
    bind_queue(&publisher, &stream, &exchange, "k").await;
    publish_range(&publisher, "", &stream, 0..5).await;
    publish_range(&publisher, &exchange, "k", 5..10).await;

    // A prefetch of 3 below the stream's 10 messages: acks return the credit.
    let channel = consumer_channel(&connection, 3).await;
    let mut consumer = consume(&channel, &stream, Some(text("first"))).await;
    let first = next_delivery(&mut consumer).await;
    assert_eq!(first.exchange.as_str(), "");
    assert_eq!(first.routing_key.as_str(), stream);
    assert!(!first.redelivered);
    assert_eq!((body(&first), offset_header(&first)), ("m0".to_string(), 0));
    bounded!(first.ack(BasicAckOptions::default())).unwrap();
    assert_eq!(take(&mut consumer, 4).await, expected(1..5));
    let sixth = next_delivery(&mut consumer).await;
    assert_eq!(sixth.exchange.as_str(), exchange);
    assert_eq!(sixth.routing_key.as_str(), "k");
    bounded!(sixth.ack(BasicAckOptions::default())).unwrap();
    assert_eq!(take(&mut consumer, 4).await, expected(6..10));
    // A stream keeps its messages: a second consumer reads them all again.
    let again = consumer_channel(&connection, 100).await;
    let mut second = consume(&again, &stream, Some(text("first"))).await;
    assert_eq!(take(&mut second, 10).await, expected(0..10));
    // And both follow what is published next.
    publish_range(&publisher, "", &stream, 10..12).await;
    assert_eq!(take(&mut consumer, 2).await, expected(10..12));
    assert_eq!(take(&mut second, 2).await, expected(10..12));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_offset_spec_starts_where_rabbitmq_starts() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let publisher = confirm_channel(&connection).await;
    let stream = unique("stream");
    declare_stream(&publisher, &stream, &[]).await;
    publish_range(&publisher, "", &stream, 0..10).await;
    let quiet = Duration::from_millis(300);

    let starts = [
        (Some(text("first")), 0),
        (Some(AMQPValue::LongLongInt(6)), 6),
        (Some(text("last")), 9), // each message was its own chunk: the last chunk is m9
        (Some(text("1h")), 0),
        (Some(AMQPValue::Timestamp(0)), 0),
    ];
    for (offset, from) in starts {
        let channel = consumer_channel(&connection, 50).await;
        let mut consumer = consume(&channel, &stream, offset.clone()).await;
        assert_eq!(
            take(&mut consumer, 10 - from).await,
            expected(from as u32..10),
            "{offset:?}"
        );
        expect_no_delivery(&mut consumer, quiet).await;
    }
    // `next` (and no offset at all, RabbitMQ's default; and a future timestamp) gets only what
    // is published after it started.
    let future = AMQPValue::Timestamp(4_000_000_000);
    let mut followers = Vec::new();
    for offset in [Some(text("next")), None, Some(future)] {
        let channel = consumer_channel(&connection, 50).await;
        let mut consumer = consume(&channel, &stream, offset).await;
        expect_no_delivery(&mut consumer, quiet).await;
        followers.push((channel, consumer));
    }
    publish_range(&publisher, "", &stream, 10..12).await;
    for (_channel, consumer) in &mut followers {
        assert_eq!(take(consumer, 2).await, expected(10..12));
    }
    // An offset past the end waits for it.
    let channel = consumer_channel(&connection, 50).await;
    let mut ahead = consume(&channel, &stream, Some(AMQPValue::LongLongInt(13))).await;
    publish_range(&publisher, "", &stream, 12..14).await;
    assert_eq!(take(&mut ahead, 1).await, expected(13..14));
}

/// The reply that refuses a consumer on a fresh connection (540 closes the connection)
/// whose channel has `qos` (prefetch, global) set.
async fn refused_consumer(
    broker: &TestBroker,
    stream: &str,
    qos: &[(u16, bool)],
    offset: Option<AMQPValue>,
    no_ack: bool,
    code: u16,
) -> String {
    let connection = broker.connect().await;
    let channel = bounded!(connection.create_channel()).unwrap();
    for &(prefetch, global) in qos {
        bounded!(channel.basic_qos(prefetch, BasicQosOptions { global })).unwrap();
    }
    let refused = try_consume(&channel, stream, offset, no_ack).await;
    reason(expect_amqp_error(refused, code))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_consumer_needs_a_prefetch_manual_acks_and_no_global_qos() {
    let broker = TestBroker::start().await;
    let (_c, setup) = broker.channel().await;
    let stream = unique("stream");
    declare_stream(&setup, &stream, &[]).await;
    let resource = format!("queue '{stream}' in vhost '/'");
    let b = &broker;

    let got = refused_consumer(b, &stream, &[], None, false, PRECONDITION_FAILED).await;
    assert_eq!(
        got,
        format!("consumer prefetch count is not set for stream {resource}")
    );
    let got = refused_consumer(b, &stream, &[(10, false)], None, true, NOT_IMPLEMENTED).await;
    assert_eq!(
        got,
        format!("automatic acknowledgement not supported by stream {resource}")
    );
    let qos = [(10, false), (10, true)];
    let got = refused_consumer(b, &stream, &qos, None, false, NOT_IMPLEMENTED).await;
    assert_eq!(got, format!("{resource} does not support global qos"));
    let bad = Some(text("middle"));
    let got = refused_consumer(b, &stream, &[(10, false)], bad, false, PRECONDITION_FAILED).await;
    assert!(
        got.starts_with(&format!("invalid arg 'x-stream-offset' for {resource}")),
        "{got}"
    );
    let filter = table(&[("x-stream-filter", text("eu"))]);
    let connection = broker.connect().await;
    let channel = consumer_channel(&connection, 10).await;
    let options = BasicConsumeOptions::default();
    let refused =
        bounded!(channel.basic_consume(stream.as_str().into(), "".into(), options, filter));
    let got = reason(expect_amqp_error(refused, PRECONDITION_FAILED));
    assert!(got.contains("not supported by Warren yet"), "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_and_offsets_survive_a_restart() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let stream = unique("stream");
    {
        let connection = broker.connect().await;
        let publisher = confirm_channel(&connection).await;
        declare_stream(&publisher, &stream, &[]).await;
        publish_range(&publisher, "", &stream, 0..20).await;
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
    let broker = broker.restart().await;
    let connection = broker.connect().await;
    let publisher = confirm_channel(&connection).await;
    declare_stream(&publisher, &stream, &[]).await; // still there, same arguments
    publish_range(&publisher, "", &stream, 20..25).await;
    let channel = consumer_channel(&connection, 100).await;
    let mut consumer = consume(&channel, &stream, Some(text("first"))).await;
    assert_eq!(take(&mut consumer, 25).await, expected(0..25));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_size_deletes_whole_old_segments() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let publisher = confirm_channel(&connection).await;
    let stream = unique("stream");
    // Segments of about 4 KB, at most about 12 KB kept: old segments go as new ones roll.
    declare_stream(
        &publisher,
        &stream,
        &[
            (
                "x-stream-max-segment-size-bytes",
                AMQPValue::LongLongInt(4_000),
            ),
            ("x-max-length-bytes", AMQPValue::LongLongInt(12_000)),
        ],
    )
    .await;
    let payload = vec![b'x'; 400];
    for _ in 0..200 {
        publish_with(
            &publisher,
            "",
            &stream,
            &payload,
            BasicProperties::default(),
        )
        .await;
    }
    let channel = consumer_channel(&connection, 500).await;
    let mut consumer = consume(&channel, &stream, Some(text("first"))).await;
    let first = next_delivery(&mut consumer).await;
    let first_offset = offset_header(&first);
    assert!(
        first_offset > 100,
        "the oldest segments were deleted; reading from first began at {first_offset}"
    );
    let mut last_offset = first_offset;
    while last_offset < 199 {
        let delivery = next_delivery(&mut consumer).await;
        let offset = offset_header(&delivery);
        assert_eq!(offset, last_offset + 1, "offsets follow each other");
        last_offset = offset;
    }
    let declared = {
        let (_c, channel) = broker.channel().await;
        let options = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        bounded!(channel.queue_declare(stream.as_str().into(), options, FieldTable::default()))
            .unwrap()
    };
    let kept = u64::from(declared.message_count());
    assert_eq!(
        kept,
        200 - first_offset as u64,
        "the count is what the log still holds"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policys_retention_wins_over_the_declared_argument() {
    let broker = TestBroker::start().await;
    if broker.is_external() {
        return; // the policy would apply to the external broker's other streams too
    }
    let stream = unique("stream-pol");
    let api = warren_tests::http::Api::new(&broker);
    let policy = serde_json::json!({
        "pattern": format!("^{stream}$"),
        "apply-to": "queues",
        "definition": {"max-length-bytes": 12_000, "stream-max-segment-size-bytes": 4_000},
    });
    let path = format!("/api/policies/%2F/{stream}");
    let (status, body) = api.send(reqwest::Method::PUT, &path, Some(policy)).await;
    assert!(status.is_success(), "policy: {status} {body}");
    let connection = broker.connect().await;
    let publisher = confirm_channel(&connection).await;
    // Declared to keep 10 MB in 500 MB segments: the policy's 12 KB in 4 KB segments win.
    let declared = [
        ("x-max-length-bytes", AMQPValue::LongLongInt(10_000_000)),
        (
            "x-stream-max-segment-size-bytes",
            AMQPValue::LongLongInt(500_000_000),
        ),
    ];
    declare_stream(&publisher, &stream, &declared).await;
    let payload = vec![b'x'; 400];
    for _ in 0..200 {
        publish_with(
            &publisher,
            "",
            &stream,
            &payload,
            BasicProperties::default(),
        )
        .await;
    }
    let channel = consumer_channel(&connection, 10).await;
    let mut consumer = consume(&channel, &stream, Some(text("first"))).await;
    let first = next_delivery(&mut consumer).await;
    let first_offset = offset_header(&first);
    assert!(
        first_offset > 100,
        "the policy's retention applied; reading from first began at {first_offset}"
    );
}
