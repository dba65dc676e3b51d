//! Dead-lettering: rejected (requeue=false) and expired messages are republished to the
//! queue's dead-letter exchange with its routing key or their own, carrying the `x-death`
//! header exactly as RabbitMQ writes it (count, reason, queue, time, exchange, routing-keys,
//! original-expiration) and the `x-first-death-*` headers; `expiration` is removed; counts
//! grow per (queue, reason); automatic cycles are dropped, cycles with a rejection are not.

use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::{
    BasicRejectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, ExchangeKind};
use warren_tests::{
    body, bounded, consume, expect_amqp_error, get, message_count, next_delivery, publish,
    publish_with, table, text, unique, TestBroker,
};

const PRECONDITION_FAILED: u16 = 406;

async fn declare_with(channel: &Channel, name: &str, args: FieldTable) -> lapin::Result<()> {
    let declare = channel.queue_declare(name.into(), QueueDeclareOptions::default(), args);
    bounded!(declare).map(drop)
}

/// A fanout exchange `dlx` bound to queue `dlq`.
async fn dead_letter_target(channel: &Channel, dlx: &str, dlq: &str) {
    let declare = channel.exchange_declare(
        dlx.into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    );
    bounded!(declare).unwrap();
    declare_with(channel, dlq, FieldTable::default())
        .await
        .unwrap();
    let bind = channel.queue_bind(
        dlq.into(),
        dlx.into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    );
    bounded!(bind).unwrap();
}

fn header<'a>(table: &'a FieldTable, key: &str) -> Option<&'a AMQPValue> {
    table
        .inner()
        .iter()
        .find(|(k, _)| k.as_str() == key)
        .map(|(_, v)| v)
}

fn string(value: Option<&AMQPValue>) -> String {
    match value {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => panic!("expected a longstr, got {other:?}"),
    }
}

/// The `x-death` tables of a delivery, newest first.
fn x_death(delivery: &Delivery) -> Vec<FieldTable> {
    let headers = delivery.properties.headers().as_ref().expect("headers");
    match header(headers, "x-death") {
        Some(AMQPValue::FieldArray(array)) => array
            .as_slice()
            .iter()
            .map(|v| match v {
                AMQPValue::FieldTable(t) => t.clone(),
                other => panic!("x-death element is not a table: {other:?}"),
            })
            .collect(),
        other => panic!("x-death is not an array: {other:?}"),
    }
}

/// Asserts one x-death entry's fields and types.
fn assert_death(entry: &FieldTable, queue: &str, reason: &str, count: i64, exchange: &str) {
    assert_eq!(header(entry, "count"), Some(&AMQPValue::LongLongInt(count)));
    assert_eq!(string(header(entry, "reason")), reason);
    assert_eq!(string(header(entry, "queue")), queue);
    assert_eq!(string(header(entry, "exchange")), exchange);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    match header(entry, "time") {
        Some(AMQPValue::Timestamp(time)) => assert!(now.abs_diff(*time) < 60, "{time} vs {now}"),
        other => panic!("time is not a timestamp: {other:?}"),
    }
    assert!(
        matches!(
            header(entry, "routing-keys"),
            Some(AMQPValue::FieldArray(_))
        ),
        "{entry:?}"
    );
}

fn routing_keys(entry: &FieldTable) -> Vec<String> {
    match header(entry, "routing-keys") {
        Some(AMQPValue::FieldArray(keys)) => {
            keys.as_slice().iter().map(|k| string(Some(k))).collect()
        }
        other => panic!("routing-keys: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_message_is_dead_lettered_with_x_death() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let (queue, dlx, dlq) = (unique("dlx-src"), unique("dlx-x"), unique("dlx-q"));
    dead_letter_target(&channel, &dlx, &dlq).await;
    let args = table(&[("x-dead-letter-exchange", text(&dlx))]);
    declare_with(&channel, &queue, args).await.unwrap();
    let props = BasicProperties::default().with_headers(table(&[("app", text("kept"))]));
    publish_with(&channel, "", &queue, b"payload", props).await;
    let got = get(&channel, &queue).await.expect("a message");
    let reject = BasicRejectOptions { requeue: false };
    bounded!(got.delivery.acker.reject(reject)).unwrap();

    let mut consumer = consume(&channel, &dlq, true).await;
    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(body(&delivery), "payload");
    assert_eq!(delivery.exchange.as_str(), dlx, "republished to the DLX");
    assert_eq!(
        delivery.routing_key.as_str(),
        queue,
        "with its own routing key"
    );
    let deaths = x_death(&delivery);
    assert_eq!(deaths.len(), 1);
    assert_death(&deaths[0], &queue, "rejected", 1, "");
    assert_eq!(routing_keys(&deaths[0]), [queue.as_str()]);
    assert!(header(&deaths[0], "original-expiration").is_none());
    let headers = delivery.properties.headers().as_ref().unwrap();
    assert_eq!(string(header(headers, "x-first-death-reason")), "rejected");
    assert_eq!(string(header(headers, "x-first-death-queue")), queue);
    assert_eq!(string(header(headers, "x-first-death-exchange")), "");
    assert_eq!(
        string(header(headers, "app")),
        "kept",
        "the publisher's headers stay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_message_is_dead_lettered_with_the_routing_key_and_original_expiration() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let (queue, dlq) = (unique("dlx-ttl"), unique("dlx-ttl-q"));
    declare_with(&channel, &dlq, FieldTable::default())
        .await
        .unwrap();
    let args = table(&[
        ("x-dead-letter-exchange", text("")),
        ("x-dead-letter-routing-key", text(&dlq)),
    ]);
    declare_with(&channel, &queue, args).await.unwrap();
    let mut consumer = consume(&channel, &dlq, true).await;
    let props = BasicProperties::default().with_expiration(ShortString::from("50"));
    publish_with(&channel, "", &queue, b"short-lived", props).await;

    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(body(&delivery), "short-lived");
    assert_eq!(delivery.exchange.as_str(), "");
    assert_eq!(
        delivery.routing_key.as_str(),
        dlq,
        "the dead-letter routing key"
    );
    assert!(
        delivery.properties.expiration().is_none(),
        "expiration removed"
    );
    let deaths = x_death(&delivery);
    assert_death(&deaths[0], &queue, "expired", 1, "");
    assert_eq!(
        routing_keys(&deaths[0]),
        [queue.as_str()],
        "the original routing key"
    );
    assert_eq!(string(header(&deaths[0], "original-expiration")), "50");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_loop_with_a_rejection_counts_deaths_per_queue_and_reason() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let (work, retry) = (unique("dlx-work"), unique("dlx-retry"));
    let work_args = table(&[
        ("x-dead-letter-exchange", text("")),
        ("x-dead-letter-routing-key", text(&retry)),
    ]);
    let retry_args = table(&[
        ("x-message-ttl", AMQPValue::LongInt(50)),
        ("x-dead-letter-exchange", text("")),
        ("x-dead-letter-routing-key", text(&work)),
    ]);
    declare_with(&channel, &work, work_args).await.unwrap();
    declare_with(&channel, &retry, retry_args).await.unwrap();
    publish(&channel, "", &work, b"job").await;

    let mut consumer = consume(&channel, &work, false).await;
    let reject = BasicRejectOptions { requeue: false };
    let first = next_delivery(&mut consumer).await;
    assert!(
        first.properties.headers().is_none(),
        "a fresh message has no x-death"
    );
    bounded!(first.acker.reject(reject)).unwrap();
    let second = next_delivery(&mut consumer).await;
    let deaths = x_death(&second);
    assert_eq!(deaths.len(), 2);
    assert_death(&deaths[0], &retry, "expired", 1, "");
    assert_death(&deaths[1], &work, "rejected", 1, "");
    bounded!(second.acker.reject(reject)).unwrap();
    let third = next_delivery(&mut consumer).await;
    let deaths = x_death(&third);
    assert_eq!(deaths.len(), 2, "one entry per (queue, reason)");
    assert_death(&deaths[0], &retry, "expired", 2, "");
    assert_death(&deaths[1], &work, "rejected", 2, "");
    let headers = third.properties.headers().as_ref().unwrap();
    assert_eq!(string(header(headers, "x-first-death-queue")), work);
    assert_eq!(string(header(headers, "x-first-death-reason")), "rejected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_automatic_cycle_is_dropped() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("dlx-cycle");
    let args = table(&[
        ("x-message-ttl", AMQPValue::LongInt(30)),
        ("x-dead-letter-exchange", text("")),
    ]);
    declare_with(&channel, &queue, args).await.unwrap();
    publish(&channel, "", &queue, b"loops").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(message_count(&connection, &queue).await, 0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        message_count(&connection, &queue).await,
        0,
        "expired into itself: dropped, not looping"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_dead_letter_exchange_drops_the_message() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("dlx-missing");
    let args = table(&[("x-dead-letter-exchange", text("no-such-exchange"))]);
    declare_with(&channel, &queue, args).await.unwrap();
    publish(&channel, "", &queue, b"m").await;
    let got = get(&channel, &queue).await.expect("a message");
    bounded!(got
        .delivery
        .acker
        .reject(BasicRejectOptions { requeue: false }))
    .unwrap();
    assert_eq!(message_count(&connection, &queue).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_dead_letter_arguments_are_refused_with_406() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let queue = unique("dlx-invalid");
    let resource = format!("queue '{queue}' in vhost '/'");
    let cases = [
        (
            table(&[("x-dead-letter-routing-key", text("k"))]),
            format!(
                "invalid arg 'x-dead-letter-routing-key' for {resource}: \
                 routing_key_but_no_dlx_defined"
            ),
        ),
        (
            table(&[("x-dead-letter-exchange", AMQPValue::Boolean(true))]),
            format!("invalid type 'bool' for arg 'x-dead-letter-exchange' in {resource}"),
        ),
    ];
    for (args, expected) in cases {
        let channel = bounded!(connection.create_channel()).unwrap();
        let result = declare_with(&channel, &queue, args).await;
        let got = expect_amqp_error(result, PRECONDITION_FAILED);
        assert_eq!(got, format!("PRECONDITION_FAILED - {expected}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_in_a_durable_queue_survives_a_restart_with_its_x_death() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let (queue, dlq) = (unique("dlx-durable"), unique("dlx-durable-q"));
    {
        let (connection, channel) = broker.channel().await;
        let options = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        let declare = channel.queue_declare(dlq.as_str().into(), options, FieldTable::default());
        bounded!(declare).unwrap();
        let args = table(&[
            ("x-dead-letter-exchange", text("")),
            ("x-dead-letter-routing-key", text(&dlq)),
        ]);
        bounded!(channel.queue_declare(queue.as_str().into(), options, args)).unwrap();
        let persistent = BasicProperties::default().with_delivery_mode(2);
        publish_with(&channel, "", &queue, b"dead", persistent).await;
        let got = get(&channel, &queue).await.expect("a message");
        bounded!(got
            .delivery
            .acker
            .reject(BasicRejectOptions { requeue: false }))
        .unwrap();
        let arrived = || async { message_count(&connection, &dlq).await == 1 };
        warren_tests::eventually("dead-lettered", Duration::from_secs(3), arrived).await;
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
    let broker = broker.restart().await;
    let (connection, channel) = broker.channel().await;
    assert_eq!(
        message_count(&connection, &queue).await,
        0,
        "acked in the source"
    );
    let mut consumer = consume(&channel, &dlq, true).await;
    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(body(&delivery), "dead");
    assert_death(&x_death(&delivery)[0], &queue, "rejected", 1, "");
}
