//! Streams over AMQP 1.0, driven by fe2o3-amqp: publishing to `/queues/<stream>` (the
//! accepted outcome once the chunk is written), consuming with the
//! `rabbitmq:stream-offset-spec` source filter, and the `x-stream-offset` message annotation
//! on deliveries. Messages published over AMQP 0.9.1 are read over AMQP 1.0 too: a stream
//! stores AMQP 1.0.
//!
//! Current-thread runtime, as the other AMQP 1.0 tests (see amqp10_basic.rs).

use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{Body, Source};
use fe2o3_amqp::types::primitives::{Symbol, Value};
use fe2o3_amqp::{Delivery, Receiver, Sender};
use lapin::options::QueueDeclareOptions;
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;
use warren_tests::{bounded, confirm_channel, publish, table, text, unique, TestBroker};

const OFFSET_SPEC: &str = "rabbitmq:stream-offset-spec";

async fn declare_stream(broker: &TestBroker, name: &str) {
    let (_connection, channel) = broker.channel().await;
    let options = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let arguments = table(&[("x-queue-type", text("stream"))]);
    bounded!(channel.queue_declare(name.into(), options, arguments)).expect("declare stream");
}

/// A receiver from the stream starting at `spec`, with `credit` granted.
async fn receiver(
    session: &mut SessionHandle<()>,
    stream: &str,
    spec: Value,
    credit: u32,
) -> Receiver {
    let filter = Described {
        descriptor: Descriptor::Name(Symbol::from(OFFSET_SPEC)),
        value: spec,
    };
    let source = Source::builder()
        .address(format!("/queues/{stream}"))
        .add_to_filter(Symbol::from(OFFSET_SPEC), filter)
        .build();
    let mut receiver = bounded!(Receiver::builder()
        .name(unique("r"))
        .source(source)
        .credit_mode(CreditMode::Manual)
        .attach(session))
    .expect("receiver attaches");
    bounded!(receiver.set_credit(credit)).expect("credit");
    receiver
}

fn stream_offset(delivery: &Delivery<Body<Value>>) -> i64 {
    let annotations = delivery
        .message()
        .message_annotations
        .as_ref()
        .expect("message-annotations");
    let found = annotations
        .0
        .iter()
        .find(|(key, _)| format!("{key:?}").contains("x-stream-offset"));
    match found {
        Some((_, Value::Long(offset))) => *offset,
        other => panic!("x-stream-offset annotation: {other:?} in {annotations:?}"),
    }
}

fn body_text(delivery: &Delivery<Body<Value>>) -> String {
    match delivery.body() {
        Body::Value(value) => match &value.0 {
            Value::String(text) => text.clone(),
            other => panic!("expected a string, got {other:?}"),
        },
        Body::Data(batch) => {
            let data = batch.iter().next().expect("a data section");
            String::from_utf8(data.0.to_vec()).expect("utf-8")
        }
        other => panic!("unexpected body {other:?}"),
    }
}

/// Takes `count` deliveries, accepting each: (body, x-stream-offset) pairs.
async fn take(receiver: &mut Receiver, count: usize) -> Vec<(String, i64)> {
    let mut got = Vec::with_capacity(count);
    for _ in 0..count {
        let delivery = bounded!(receiver.recv::<Body<Value>>()).expect("a delivery");
        got.push((body_text(&delivery), stream_offset(&delivery)));
        bounded!(receiver.accept(&delivery)).expect("accept");
    }
    got
}

fn expected(range: std::ops::Range<u32>) -> Vec<(String, i64)> {
    range.map(|i| (format!("m{i}"), i64::from(i))).collect()
}

#[tokio::test]
async fn amqp10_publishes_and_reads_a_stream_from_every_offset_spec() {
    let broker = TestBroker::start().await;
    let stream = unique("stream");
    declare_stream(&broker, &stream).await;
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{stream}");
    let mut sender = bounded!(Sender::attach(&mut session, "s", address.as_str())).unwrap();
    for i in 0..10 {
        let outcome = bounded!(sender.send(format!("m{i}"))).unwrap();
        assert!(outcome.is_accepted(), "{outcome:?}");
    }
    let mut first = receiver(&mut session, &stream, Value::String("first".into()), 20).await;
    assert_eq!(take(&mut first, 10).await, expected(0..10));
    let mut at = receiver(&mut session, &stream, Value::Ulong(7), 20).await;
    assert_eq!(take(&mut at, 3).await, expected(7..10));
    let mut last = receiver(&mut session, &stream, Value::String("last".into()), 20).await;
    assert_eq!(take(&mut last, 1).await, expected(9..10));
    let mut next = receiver(&mut session, &stream, Value::String("next".into()), 20).await;
    for i in 10..12 {
        let outcome = bounded!(sender.send(format!("m{i}"))).unwrap();
        assert!(outcome.is_accepted(), "{outcome:?}");
    }
    assert_eq!(take(&mut next, 2).await, expected(10..12));
    assert_eq!(take(&mut first, 2).await, expected(10..12));
    bounded!(sender.close()).unwrap();
}

#[tokio::test]
async fn messages_published_over_amqp091_are_read_over_amqp10() {
    let broker = TestBroker::start().await;
    let stream = unique("stream");
    declare_stream(&broker, &stream).await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    for i in 0..5 {
        publish(&channel, "", &stream, format!("m{i}").as_bytes()).await;
    }
    let (_connection, mut session) = broker.amqp10().await;
    let mut reader = receiver(&mut session, &stream, Value::String("first".into()), 10).await;
    let delivery = bounded!(reader.recv::<Body<Value>>()).expect("a delivery");
    let annotations = format!("{:?}", delivery.message().message_annotations);
    assert!(
        annotations.contains("x-routing-key") && annotations.contains(&stream),
        "the routing key the message was published with: {annotations}"
    );
    assert_eq!(
        (body_text(&delivery), stream_offset(&delivery)),
        ("m0".into(), 0)
    );
    bounded!(reader.accept(&delivery)).unwrap();
    assert_eq!(take(&mut reader, 4).await, expected(1..5));
}
