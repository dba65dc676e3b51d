//! Length limits: `x-max-length` and `x-max-length-bytes` with `x-overflow` drop-head (the
//! oldest ready messages are dropped or dead-lettered with reason `maxlen`), reject-publish
//! (the publisher gets basic.nack for exactly the refused messages, in order with the acks of
//! the others) and reject-publish-dlx (nack, and the refused message is dead-lettered).

use lapin::message::Delivery;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Confirmation};
use warren_tests::{
    body, bounded, confirm_channel, consume, expect_amqp_error, get_all, next_delivery, publish,
    table, text, unique, TestBroker,
};

const PRECONDITION_FAILED: u16 = 406;

async fn declare_with(channel: &Channel, name: &str, args: FieldTable) -> lapin::Result<()> {
    let declare = channel.queue_declare(name.into(), QueueDeclareOptions::default(), args);
    bounded!(declare).map(drop)
}

/// Publishes and returns the broker's answer (ack or nack).
async fn publish_confirmed(channel: &Channel, queue: &str, body: &str) -> bool {
    let publish = channel.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        BasicProperties::default(),
    );
    let confirm = bounded!(publish).expect("publish");
    match bounded!(confirm).expect("confirm") {
        Confirmation::Ack(_) => true,
        Confirmation::Nack(_) => false,
        Confirmation::NotRequested => panic!("the channel is in confirm mode"),
    }
}

fn death_reason(delivery: &Delivery) -> String {
    let headers = delivery.properties.headers().as_ref().expect("headers");
    let value = headers
        .inner()
        .iter()
        .find(|(k, _)| k.as_str() == "x-first-death-reason");
    match value.map(|(_, v)| v) {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => panic!("x-first-death-reason: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_head_keeps_the_newest_messages() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("maxlen-head");
    let args = table(&[("x-max-length", AMQPValue::LongInt(3))]);
    declare_with(&channel, &queue, args).await.unwrap();
    for i in 1..=5 {
        assert!(publish_confirmed(&channel, &queue, &format!("m{i}")).await);
    }
    assert_eq!(get_all(&channel, &queue).await, ["m3", "m4", "m5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_length_bytes_counts_body_bytes() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("maxlen-bytes");
    let args = table(&[("x-max-length-bytes", AMQPValue::LongInt(10))]);
    declare_with(&channel, &queue, args).await.unwrap();
    for body in ["aaaa", "bbbb", "cccc", "dd"] {
        assert!(publish_confirmed(&channel, &queue, body).await);
    }
    assert_eq!(get_all(&channel, &queue).await, ["bbbb", "cccc", "dd"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_head_dead_letters_with_reason_maxlen() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let (queue, dlq) = (unique("maxlen-dlx"), unique("maxlen-dlq"));
    declare_with(&channel, &dlq, FieldTable::default())
        .await
        .unwrap();
    let args = table(&[
        ("x-max-length", AMQPValue::LongInt(1)),
        ("x-dead-letter-exchange", text("")),
        ("x-dead-letter-routing-key", text(&dlq)),
    ]);
    declare_with(&channel, &queue, args).await.unwrap();
    let mut consumer = consume(&channel, &dlq, true).await;
    publish(&channel, "", &queue, b"old").await;
    publish(&channel, "", &queue, b"new").await;
    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(body(&delivery), "old");
    assert_eq!(death_reason(&delivery), "maxlen");
    assert_eq!(get_all(&channel, &queue).await, ["new"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_publish_nacks_the_refused_messages() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("maxlen-reject");
    let args = table(&[
        ("x-max-length", AMQPValue::LongInt(2)),
        ("x-overflow", text("reject-publish")),
    ]);
    declare_with(&channel, &queue, args).await.unwrap();
    let mut answers = Vec::new();
    for i in 1..=3 {
        answers.push(publish_confirmed(&channel, &queue, &format!("m{i}")).await);
    }
    assert_eq!(answers, [true, true, false]);
    assert_eq!(get_all(&channel, &queue).await, ["m1", "m2"]);
    assert!(publish_confirmed(&channel, &queue, "room again").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_publishes_get_acks_and_nacks_in_order() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("maxlen-pipeline");
    let args = table(&[
        ("x-max-length", AMQPValue::LongInt(2)),
        ("x-overflow", text("reject-publish")),
    ]);
    declare_with(&channel, &queue, args).await.unwrap();
    let mut confirms = Vec::new();
    for i in 1..=5 {
        let body = format!("m{i}");
        let publish = channel.basic_publish(
            "".into(),
            queue.as_str().into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            BasicProperties::default(),
        );
        confirms.push(bounded!(publish).expect("publish"));
    }
    let mut answers = Vec::new();
    for confirm in confirms {
        answers.push(matches!(bounded!(confirm).unwrap(), Confirmation::Ack(_)));
    }
    assert_eq!(answers, [true, true, false, false, false]);
    assert_eq!(get_all(&channel, &queue).await, ["m1", "m2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_publish_dlx_nacks_and_dead_letters() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let (queue, dlq) = (unique("maxlen-rdlx"), unique("maxlen-rdlq"));
    declare_with(&channel, &dlq, FieldTable::default())
        .await
        .unwrap();
    let args = table(&[
        ("x-max-length", AMQPValue::LongInt(1)),
        ("x-overflow", text("reject-publish-dlx")),
        ("x-dead-letter-exchange", text("")),
        ("x-dead-letter-routing-key", text(&dlq)),
    ]);
    declare_with(&channel, &queue, args).await.unwrap();
    assert!(publish_confirmed(&channel, &queue, "kept").await);
    assert!(!publish_confirmed(&channel, &queue, "refused").await);
    let mut consumer = consume(&channel, &dlq, true).await;
    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(body(&delivery), "refused");
    assert_eq!(death_reason(&delivery), "maxlen");
    assert_eq!(get_all(&channel, &queue).await, ["kept"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_length_arguments_are_refused_with_406() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let queue = unique("maxlen-invalid");
    let cases = [
        (
            "x-max-length",
            AMQPValue::LongInt(-1),
            "{value_negative,-1}",
        ),
        (
            "x-max-length-bytes",
            text("big"),
            "\"expected integer, got longstr\"",
        ),
        ("x-overflow", text("drop-tail"), "invalid_overflow"),
    ];
    for (key, value, error) in cases {
        let channel = bounded!(connection.create_channel()).unwrap();
        let result = declare_with(&channel, &queue, table(&[(key, value)])).await;
        let got = expect_amqp_error(result, PRECONDITION_FAILED);
        assert_eq!(
            got,
            format!(
                "PRECONDITION_FAILED - invalid arg '{key}' for queue '{queue}' in vhost '/': \
                 {error}"
            )
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_persistent_messages_are_not_recovered() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let queue = unique("maxlen-restart");
    {
        let connection = broker.connect().await;
        let channel = confirm_channel(&connection).await;
        let options = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        let args = table(&[("x-max-length", AMQPValue::LongInt(1))]);
        bounded!(channel.queue_declare(queue.as_str().into(), options, args)).unwrap();
        let persistent = BasicProperties::default().with_delivery_mode(2);
        for body in ["m1", "m2", "m3"] {
            let publish = channel.basic_publish(
                "".into(),
                queue.as_str().into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                persistent.clone(),
            );
            bounded!(bounded!(publish).unwrap()).unwrap();
        }
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
    let broker = broker.restart().await;
    let (_connection, channel) = broker.channel().await;
    assert_eq!(get_all(&channel, &queue).await, ["m3"]);
}
