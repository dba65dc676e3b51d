//! Priority queues (`x-max-priority`): higher priorities are delivered first, FIFO within a
//! level, priorities above the maximum count as the maximum, messages without one as 0, a
//! requeued message goes back to its place within its level, and the order survives a
//! restart. Invalid maxima are refused with RabbitMQ's text.

use lapin::options::{BasicNackOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};
use warren_tests::{
    body, bounded, confirm_channel, consume, expect_amqp_error, get, get_all, next_delivery,
    publish_with, table, unique, TestBroker,
};

const PRECONDITION_FAILED: u16 = 406;

async fn declare_priority(channel: &Channel, name: &str, max: i32, durable: bool) {
    let options = QueueDeclareOptions {
        durable,
        ..Default::default()
    };
    let args = table(&[("x-max-priority", AMQPValue::LongInt(max))]);
    bounded!(channel.queue_declare(name.into(), options, args)).unwrap();
}

fn with_priority(priority: Option<u8>) -> BasicProperties {
    let properties = BasicProperties::default().with_delivery_mode(2);
    match priority {
        Some(p) => properties.with_priority(p),
        None => properties,
    }
}

/// Publishes (body, priority) pairs in order.
async fn publish_all(channel: &Channel, queue: &str, messages: &[(&str, Option<u8>)]) {
    for (body, priority) in messages {
        let props = with_priority(*priority);
        publish_with(channel, "", queue, body.as_bytes(), props).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priorities_first_fifo_within_a_level() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("prio-order");
    declare_priority(&channel, &queue, 10, false).await;
    let messages = [
        ("p1", Some(1)),
        ("p5a", Some(5)),
        ("none", None),
        ("p9", Some(9)),
        ("p5b", Some(5)),
        ("p0", Some(0)),
    ];
    publish_all(&channel, &queue, &messages).await;
    let order = get_all(&channel, &queue).await;
    assert_eq!(order, ["p9", "p5a", "p5b", "p1", "none", "p0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priorities_above_the_maximum_count_as_the_maximum() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("prio-cap");
    declare_priority(&channel, &queue, 3, false).await;
    let messages = [("low", Some(1)), ("p200", Some(200)), ("p3", Some(3))];
    publish_all(&channel, &queue, &messages).await;
    assert_eq!(get_all(&channel, &queue).await, ["p200", "p3", "low"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_gets_the_highest_priority_first() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("prio-consume");
    declare_priority(&channel, &queue, 255, false).await;
    let messages = [("a", Some(2)), ("b", Some(250)), ("c", Some(100))];
    publish_all(&channel, &queue, &messages).await;
    let mut consumer = consume(&channel, &queue, true).await;
    let mut order = Vec::new();
    for _ in 0..3 {
        order.push(body(&next_delivery(&mut consumer).await));
    }
    assert_eq!(order, ["b", "c", "a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_message_keeps_its_place_within_its_level() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("prio-requeue");
    declare_priority(&channel, &queue, 5, false).await;
    let messages = [("low", Some(1)), ("high1", Some(5)), ("high2", Some(5))];
    publish_all(&channel, &queue, &messages).await;
    let first = get(&channel, &queue).await.expect("a message");
    assert_eq!(body(&first.delivery), "high1");
    let nack = BasicNackOptions {
        requeue: true,
        ..Default::default()
    };
    bounded!(first.delivery.acker.nack(nack)).unwrap();
    let again = get(&channel, &queue).await.expect("a message");
    assert_eq!(body(&again.delivery), "high1");
    assert!(again.delivery.redelivered);
    bounded!(again.delivery.acker.ack(Default::default())).unwrap();
    assert_eq!(get_all(&channel, &queue).await, ["high2", "low"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priorities_survive_a_restart() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let queue = unique("prio-restart");
    {
        let connection = broker.connect().await;
        let channel = confirm_channel(&connection).await;
        declare_priority(&channel, &queue, 9, true).await;
        let messages = [
            ("a1", Some(1)),
            ("b9", Some(9)),
            ("c5", Some(5)),
            ("d9", Some(9)),
        ];
        publish_all(&channel, &queue, &messages).await;
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
    let broker = broker.restart().await;
    let (_connection, channel) = broker.channel().await;
    assert_eq!(get_all(&channel, &queue).await, ["b9", "d9", "c5", "a1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_maximum_priorities_are_refused_with_406() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let queue = unique("prio-invalid");
    let cases = [
        (AMQPValue::LongInt(300), "{max_value_exceeded,300}"),
        (AMQPValue::LongInt(-1), "{value_negative,-1}"),
        (
            AMQPValue::LongString("5".into()),
            "\"expected integer, got longstr\"",
        ),
    ];
    for (value, error) in cases {
        let channel = bounded!(connection.create_channel()).unwrap();
        let args: FieldTable = table(&[("x-max-priority", value)]);
        let declare = channel.queue_declare(queue.as_str().into(), Default::default(), args);
        let got = expect_amqp_error(bounded!(declare), PRECONDITION_FAILED);
        assert_eq!(
            got,
            format!(
                "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue '{queue}' in \
                 vhost '/': {error}"
            )
        );
    }
}
