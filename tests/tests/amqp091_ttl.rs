//! Message TTL (`x-message-ttl`, the `expiration` property) and queue TTL (`x-expires`):
//! expired messages are never delivered, also when they are not at the head; the lower of the
//! two TTLs wins; a TTL of 0 still reaches a consumer that can take the message at once;
//! invalid values are refused with RabbitMQ's texts; unused queues delete themselves.

use std::time::Duration;

use lapin::options::{BasicNackOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel};
use warren_tests::{
    body, bounded, consume, eventually, expect_amqp_error, expect_no_delivery, get, get_all,
    message_count, next_delivery, publish, publish_with, queue_exists, table, unique, ChannelWatch,
    TestBroker,
};

const PRECONDITION_FAILED: u16 = 406;

async fn declare_with(channel: &Channel, name: &str, args: FieldTable) -> lapin::Result<()> {
    let declare = channel.queue_declare(name.into(), QueueDeclareOptions::default(), args);
    bounded!(declare).map(drop)
}

fn expiring(ms: &str) -> BasicProperties {
    BasicProperties::default().with_expiration(ShortString::from(ms))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_ttl_expires_messages_and_they_are_never_delivered() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("ttl-queue");
    let args = table(&[("x-message-ttl", AMQPValue::LongInt(200))]);
    declare_with(&channel, &queue, args).await.unwrap();
    for i in 0..3 {
        publish(&channel, "", &queue, format!("m{i}").as_bytes()).await;
    }
    assert_eq!(message_count(&connection, &queue).await, 3);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        get(&channel, &queue).await.is_none(),
        "expired: not delivered"
    );
    assert_eq!(message_count(&connection, &queue).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_expires_also_behind_messages_that_do_not() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("ttl-behind");
    declare_with(&channel, &queue, FieldTable::default())
        .await
        .unwrap();
    publish(&channel, "", &queue, b"first").await;
    publish_with(&channel, "", &queue, b"short", expiring("100")).await;
    publish(&channel, "", &queue, b"last").await;
    if broker.is_external() {
        // RabbitMQ's classic queues drop it only once it reaches the head.
        tokio::time::sleep(Duration::from_millis(200)).await;
    } else {
        let check = || async { message_count(&connection, &queue).await == 2 };
        let what = "the expired message leaves the count";
        eventually(what, Duration::from_secs(3), check).await;
    }
    assert_eq!(get_all(&channel, &queue).await, ["first", "last"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lower_of_queue_and_message_ttl_wins() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let long_queue = unique("ttl-long");
    let args = table(&[("x-message-ttl", AMQPValue::LongInt(60_000))]);
    declare_with(&channel, &long_queue, args).await.unwrap();
    publish_with(&channel, "", &long_queue, b"short", expiring("100")).await;
    publish_with(&channel, "", &long_queue, b"long", expiring("60000")).await;

    let short_queue = unique("ttl-short");
    let args = table(&[("x-message-ttl", AMQPValue::LongInt(100))]);
    declare_with(&channel, &short_queue, args).await.unwrap();
    publish_with(&channel, "", &short_queue, b"long", expiring("60000")).await;

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(get_all(&channel, &long_queue).await, ["long"]);
    assert!(get_all(&channel, &short_queue).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_zero_reaches_a_waiting_consumer_and_is_dropped_otherwise() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("ttl-zero");
    let args = table(&[("x-message-ttl", AMQPValue::LongInt(0))]);
    declare_with(&channel, &queue, args).await.unwrap();
    publish(&channel, "", &queue, b"nobody").await;
    assert_eq!(message_count(&connection, &queue).await, 0);

    let consumer_channel = bounded!(connection.create_channel()).unwrap();
    let mut consumer = consume(&consumer_channel, &queue, true).await;
    publish(&channel, "", &queue, b"taken").await;
    assert_eq!(body(&next_delivery(&mut consumer).await), "taken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_message_keeps_its_deadline() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("ttl-requeue");
    let args = table(&[("x-message-ttl", AMQPValue::LongInt(300))]);
    declare_with(&channel, &queue, args).await.unwrap();
    publish(&channel, "", &queue, b"m").await;
    let mut consumer = consume(&channel, &queue, false).await;
    let delivery = next_delivery(&mut consumer).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let nack = BasicNackOptions {
        requeue: true,
        ..Default::default()
    };
    bounded!(delivery.acker.nack(nack)).unwrap();
    expect_no_delivery(&mut consumer, Duration::from_millis(300)).await;
    assert_eq!(message_count(&connection, &queue).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_expiration_closes_the_channel_with_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let cases = [
        ("abc", "invalid expiration 'abc': no_integer"),
        ("-5", "invalid expiration '-5': {value_negative,-5}"),
    ];
    for (expiration, text) in cases {
        let channel = bounded!(_connection.create_channel()).unwrap();
        let watch = ChannelWatch::new(&channel).await;
        let publish = channel.basic_publish(
            "".into(),
            "anything".into(),
            Default::default(),
            b"x",
            expiring(expiration),
        );
        let _ = bounded!(publish);
        let got = watch.expect_close(PRECONDITION_FAILED).await;
        assert_eq!(got, format!("PRECONDITION_FAILED - {text}"));
    }
    drop(channel);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_ttl_arguments_are_refused_with_406() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let queue = unique("ttl-invalid");
    let cases = [
        (
            "x-message-ttl",
            AMQPValue::LongInt(-1),
            "{value_negative,-1}",
        ),
        (
            "x-message-ttl",
            AMQPValue::LongString("1".into()),
            "\"expected integer, got longstr\"",
        ),
        ("x-expires", AMQPValue::LongInt(0), "{value_zero,0}"),
        (
            "x-expires",
            AMQPValue::LongLongInt(1 << 40),
            "{value_too_large,1099511627776}",
        ),
    ];
    for (key, value, error) in cases {
        let channel = bounded!(connection.create_channel()).unwrap();
        let result = declare_with(&channel, &queue, table(&[(key, value)])).await;
        let text = expect_amqp_error(result, PRECONDITION_FAILED);
        assert_eq!(
            text,
            format!(
                "PRECONDITION_FAILED - invalid arg '{key}' for queue '{queue}' in vhost '/': \
                 {error}"
            )
        );
    }
    assert!(!queue_exists(&connection, &queue).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_queue_expires_and_use_renews_its_lease() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let (idle, used) = (unique("expires-idle"), unique("expires-used"));
    let args = || table(&[("x-expires", AMQPValue::LongInt(400))]);
    declare_with(&channel, &idle, args()).await.unwrap();
    declare_with(&channel, &used, args()).await.unwrap();
    publish(&channel, "", &idle, b"lost with the queue").await;
    let consumer = consume(&channel, &used, true).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!queue_exists(&connection, &idle).await, "unused: deleted");
    assert!(
        queue_exists(&connection, &used).await,
        "a consumer keeps it"
    );

    bounded!(channel.basic_cancel(consumer.tag().as_str().into(), Default::default())).unwrap();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        declare_with(&channel, &used, args()).await.unwrap(); // renews
    }
    assert!(
        queue_exists(&connection, &used).await,
        "redeclared: renewed"
    );
    // Not polled: a (passive) declaration renews the lease too.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !queue_exists(&connection, &used).await,
        "unused again: deleted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_survive_a_restart() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let queue = unique("ttl-restart");
    {
        let (connection, channel) = broker.channel().await;
        let args = table(&[("x-message-ttl", AMQPValue::LongInt(1500))]);
        let options = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        bounded!(channel.queue_declare(queue.as_str().into(), options, args)).unwrap();
        let persistent = BasicProperties::default().with_delivery_mode(2);
        publish_with(&channel, "", &queue, b"queue-ttl", persistent.clone()).await;
        let short = persistent.with_expiration(ShortString::from("200"));
        publish_with(&channel, "", &queue, b"short", short).await;
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
    let broker = broker.restart().await;
    let (connection, channel) = broker.channel().await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        message_count(&connection, &queue).await,
        1,
        "the short one expired"
    );
    let gone = || async { message_count(&connection, &queue).await == 0 };
    eventually(
        "the queue TTL runs out after restart",
        Duration::from_secs(4),
        gone,
    )
    .await;
    assert!(get_all(&channel, &queue).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_persistent_message_is_not_recovered() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let queue = unique("ttl-acked");
    {
        let (connection, channel) = broker.channel().await;
        let options = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        let declare = channel.queue_declare(queue.as_str().into(), options, FieldTable::default());
        bounded!(declare).unwrap();
        let persistent = BasicProperties::default().with_delivery_mode(2);
        publish_with(&channel, "", &queue, b"kept", persistent.clone()).await;
        let short = persistent.with_expiration(ShortString::from("50"));
        publish_with(&channel, "", &queue, b"short", short).await;
        let expired = || async { message_count(&connection, &queue).await == 1 };
        eventually("the short one expires", Duration::from_secs(3), expired).await;
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
    let broker = broker.restart().await;
    let (_connection, channel) = broker.channel().await;
    assert_eq!(get_all(&channel, &queue).await, ["kept"]);
}
