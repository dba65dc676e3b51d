//! Single active consumer (`x-single-active-consumer`): only one consumer gets messages; when
//! it is cancelled or its channel closes, the next one takes over (the highest `x-priority`,
//! the earliest registered among equals), with the messages the first left unacked; an
//! exclusive consumer is refused; declare-ok counts every registered consumer.

use std::time::Duration;

use lapin::options::{BasicConsumeOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, Consumer};
use warren_tests::{
    body, bounded, expect_amqp_error, expect_no_delivery, next_delivery, publish, table, unique,
    TestBroker,
};

const ACCESS_REFUSED: u16 = 403;
const PRECONDITION_FAILED: u16 = 406;

async fn declare_sac(channel: &Channel, name: &str) -> lapin::Queue {
    let args = table(&[("x-single-active-consumer", AMQPValue::Boolean(true))]);
    let declare = channel.queue_declare(name.into(), QueueDeclareOptions::default(), args);
    bounded!(declare).unwrap()
}

async fn consumer_on(connection: &Connection, queue: &str, priority: Option<i32>) -> Consumer {
    let channel = bounded!(connection.create_channel()).unwrap();
    let args = match priority {
        Some(p) => table(&[("x-priority", AMQPValue::LongInt(p))]),
        None => FieldTable::default(),
    };
    let consume = channel.basic_consume(
        queue.into(),
        "".into(),
        BasicConsumeOptions::default(),
        args,
    );
    bounded!(consume).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_first_consumer_gets_messages_until_it_is_cancelled() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("sac-cancel");
    declare_sac(&channel, &queue).await;
    let first_channel = bounded!(connection.create_channel()).unwrap();
    let consume = first_channel.basic_consume(
        queue.as_str().into(),
        "".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    );
    let mut first = bounded!(consume).unwrap();
    let mut second = consumer_on(&connection, &queue, None).await;
    for i in 0..4 {
        publish(&channel, "", &queue, format!("m{i}").as_bytes()).await;
    }
    for i in 0..4 {
        let delivery = next_delivery(&mut first).await;
        assert_eq!(body(&delivery), format!("m{i}"));
        bounded!(delivery.acker.ack(Default::default())).unwrap();
    }
    expect_no_delivery(&mut second, Duration::from_millis(200)).await;
    let declared = declare_sac(&channel, &queue).await;
    assert_eq!(declared.consumer_count(), 2, "both are registered");

    let cancel = first_channel.basic_cancel(first.tag().as_str().into(), Default::default());
    bounded!(cancel).unwrap();
    publish(&channel, "", &queue, b"after").await;
    assert_eq!(body(&next_delivery(&mut second).await), "after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_channel_hands_over_with_its_unacked_messages() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("sac-close");
    declare_sac(&channel, &queue).await;
    let first_channel = bounded!(connection.create_channel()).unwrap();
    let consume = first_channel.basic_consume(
        queue.as_str().into(),
        "".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    );
    let mut first = bounded!(consume).unwrap();
    let mut second = consumer_on(&connection, &queue, None).await;
    publish(&channel, "", &queue, b"m1").await;
    publish(&channel, "", &queue, b"m2").await;
    assert_eq!(body(&next_delivery(&mut first).await), "m1");
    assert_eq!(body(&next_delivery(&mut first).await), "m2");
    bounded!(first_channel.close(200, "OK".into())).unwrap();

    let again = next_delivery(&mut second).await;
    assert_eq!(body(&again), "m1");
    assert!(again.redelivered, "requeued from the closed channel");
    assert_eq!(body(&next_delivery(&mut second).await), "m2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_picks_the_highest_priority_waiting_consumer() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("sac-priority");
    declare_sac(&channel, &queue).await;
    let active_channel = bounded!(connection.create_channel()).unwrap();
    let consume = active_channel.basic_consume(
        queue.as_str().into(),
        "".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    );
    let _active = bounded!(consume).unwrap();
    let mut low = consumer_on(&connection, &queue, Some(1)).await;
    let mut high = consumer_on(&connection, &queue, Some(10)).await;
    bounded!(active_channel.close(200, "OK".into())).unwrap();
    for i in 0..3 {
        publish(&channel, "", &queue, format!("m{i}").as_bytes()).await;
    }
    for i in 0..3 {
        assert_eq!(body(&next_delivery(&mut high).await), format!("m{i}"));
    }
    expect_no_delivery(&mut low, Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_consumer_is_refused() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("sac-exclusive");
    declare_sac(&channel, &queue).await;
    let options = BasicConsumeOptions {
        exclusive: true,
        ..Default::default()
    };
    let consume = channel.basic_consume(
        queue.as_str().into(),
        "".into(),
        options,
        FieldTable::default(),
    );
    let text = expect_amqp_error(bounded!(consume), ACCESS_REFUSED);
    assert_eq!(
        text,
        format!("ACCESS_REFUSED - queue '{queue}' in vhost '/' in exclusive use")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_priorities_still_work_without_single_active_consumer() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("sac-off");
    let declare = channel.queue_declare(
        queue.as_str().into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    );
    bounded!(declare).unwrap();
    let mut low = consumer_on(&connection, &queue, Some(1)).await;
    let mut high = consumer_on(&connection, &queue, Some(5)).await;
    publish(&channel, "", &queue, b"m").await;
    assert_eq!(body(&next_delivery(&mut high).await), "m");
    expect_no_delivery(&mut low, Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_boolean_argument_is_refused_with_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("sac-invalid");
    let args = table(&[(
        "x-single-active-consumer",
        AMQPValue::LongString("true".into()),
    )]);
    let declare = channel.queue_declare(queue.as_str().into(), Default::default(), args);
    let text = expect_amqp_error(bounded!(declare), PRECONDITION_FAILED);
    assert_eq!(
        text,
        format!(
            "PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue '{queue}' \
             in vhost '/': {{unacceptable_type,longstr}}"
        )
    );
}
