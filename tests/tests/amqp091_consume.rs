//! Consumers: consume/cancel, consumer tags, exclusive consumers, priorities, server-sent
//! cancel, no-ack delivery, prefetch (per consumer and global), round-robin, channel.flow.

use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, ChannelFlowOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Consumer};
use warren_tests::raw::{Handshake, RawClient};
use warren_tests::wire::{method, reply, Args};
use warren_tests::{
    body, bounded, consume, declare_queue, expect_amqp_error, expect_no_delivery, get_all,
    next_delivery, publish, table, unique, wait_for_message_count, TestBroker,
};

const SILENCE: Duration = Duration::from_millis(400);

async fn consume_with(
    channel: &Channel,
    queue: &str,
    tag: &str,
    options: BasicConsumeOptions,
    arguments: FieldTable,
) -> lapin::Result<Consumer> {
    bounded!(channel.basic_consume(queue.into(), tag.into(), options, arguments))
}

async fn publish_n(channel: &Channel, queue: &str, count: usize) {
    for i in 0..count {
        publish(channel, "", queue, format!("m{i}").as_bytes()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_delivers_with_fields_and_cancel_stops_delivery() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("c-basic");
    declare_queue(&channel, &queue).await;
    let mut consumer = consume_with(
        &channel,
        &queue,
        "my-tag",
        Default::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert_eq!(consumer.tag().as_str(), "my-tag");
    publish_n(&channel, &queue, 3).await;
    for i in 0..3u64 {
        let delivery = next_delivery(&mut consumer).await;
        assert_eq!(body(&delivery), format!("m{i}"));
        assert_eq!(
            delivery.delivery_tag,
            i + 1,
            "delivery tags count from 1 per channel"
        );
        assert_eq!(delivery.exchange.as_str(), "");
        assert_eq!(delivery.routing_key.as_str(), queue);
        assert!(!delivery.redelivered);
        bounded!(delivery.ack(BasicAckOptions::default())).unwrap();
    }
    bounded!(channel.basic_cancel("my-tag".into(), BasicCancelOptions::default())).unwrap();
    publish(&channel, "", &queue, b"after cancel").await;
    wait_for_message_count(&connection, &queue, 1).await;
    assert!(
        bounded!(consumer.next()).is_none(),
        "a cancelled consumer's stream ends"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_consumer_tag_gets_a_server_generated_amq_ctag() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("c-ctag");
    declare_queue(&channel, &queue).await;
    let first = consume(&channel, &queue, false).await;
    let second = consume(&channel, &queue, false).await;
    assert!(
        first.tag().as_str().starts_with("amq.ctag-"),
        "{}",
        first.tag()
    );
    assert_ne!(first.tag(), second.tag());
}

/// Reusing a consumer tag on the same channel is a connection error in RabbitMQ 3.10.8:
/// 530 "NOT_ALLOWED - attempt to reuse consumer tag '<tag>'". (On a raw socket: lapin's
/// bookkeeping of consumer tags makes the second consume racy to observe.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reusing_a_consumer_tag_on_a_channel_is_530() {
    let broker = TestBroker::start().await;
    let (mut client, _, _) = RawClient::handshake(broker.addr(), Handshake::default()).await;
    client.open_channel(1).await;
    let queue = unique("c-dup");
    let declare = Args::new()
        .short(0)
        .shortstr(&queue)
        .bits(&[false; 5])
        .table(&[])
        .build();
    client.send_method(1, method::QUEUE_DECLARE, &declare).await;
    client.expect_method(1, method::QUEUE_DECLARE_OK).await;
    let consume = Args::new()
        .short(0)
        .shortstr(&queue)
        .shortstr("dup")
        .bits(&[false; 4])
        .table(&[])
        .build();
    client.send_method(1, method::BASIC_CONSUME, &consume).await;
    client.expect_method(1, method::BASIC_CONSUME_OK).await;
    client.send_method(1, method::BASIC_CONSUME, &consume).await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::NOT_ALLOWED, "{close:?}");
    assert_eq!(
        close.text,
        "NOT_ALLOWED - attempt to reuse consumer tag 'dup'"
    );
    assert_eq!((close.class_id, close.method_id), method::BASIC_CONSUME);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_from_a_missing_queue_is_404() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("c-missing");
    let result = consume_with(
        &channel,
        &queue,
        "",
        Default::default(),
        FieldTable::default(),
    )
    .await;
    let text = expect_amqp_error(result, reply::NOT_FOUND);
    assert_eq!(text, format!("NOT_FOUND - no queue '{queue}' in vhost '/'"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_consumer_shuts_out_other_consumers_with_403() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("c-exclusive");
    declare_queue(&channel, &queue).await;
    let options = BasicConsumeOptions {
        exclusive: true,
        ..Default::default()
    };
    let _exclusive = consume_with(&channel, &queue, "", options, FieldTable::default())
        .await
        .unwrap();

    let other = bounded!(connection.create_channel()).unwrap();
    let result = consume_with(
        &other,
        &queue,
        "",
        Default::default(),
        FieldTable::default(),
    )
    .await;
    let text = expect_amqp_error(result, reply::ACCESS_REFUSED);
    assert_eq!(
        text,
        format!("ACCESS_REFUSED - queue '{queue}' in vhost '/' in exclusive use")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_consume_on_a_queue_with_consumers_is_403() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("c-exclusive-late");
    declare_queue(&channel, &queue).await;
    let _shared = consume(&channel, &queue, false).await;
    let other = bounded!(connection.create_channel()).unwrap();
    let options = BasicConsumeOptions {
        exclusive: true,
        ..Default::default()
    };
    let result = consume_with(&other, &queue, "", options, FieldTable::default()).await;
    let text = expect_amqp_error(result, reply::ACCESS_REFUSED);
    assert!(text.contains(&queue), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_consumers_are_served_round_robin() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("c-rr");
    declare_queue(&channel, &queue).await;
    let mut first = consume(&channel, &queue, true).await;
    let mut second = consume(&channel, &queue, true).await;
    publish_n(&channel, &queue, 4).await;
    let got_first = [
        body(&next_delivery(&mut first).await),
        body(&next_delivery(&mut first).await),
    ];
    let got_second = [
        body(&next_delivery(&mut second).await),
        body(&next_delivery(&mut second).await),
    ];
    assert_eq!(got_first, ["m0", "m2"]);
    assert_eq!(got_second, ["m1", "m3"]);
}

fn priority(value: i32) -> FieldTable {
    table(&[("x-priority", AMQPValue::LongInt(value))])
}

/// The higher-priority consumer gets every message while it has prefetch room; the lower one
/// gets only the overflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priority_consumer_gets_messages_while_it_has_room() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let high_channel = bounded!(connection.create_channel()).unwrap();
    let low_channel = bounded!(connection.create_channel()).unwrap();
    let queue = unique("c-priority");
    declare_queue(&high_channel, &queue).await;
    bounded!(high_channel.basic_qos(2, BasicQosOptions::default())).unwrap();
    let mut low = consume_with(&low_channel, &queue, "low", Default::default(), priority(1))
        .await
        .unwrap();
    let mut high = consume_with(
        &high_channel,
        &queue,
        "high",
        Default::default(),
        priority(10),
    )
    .await
    .unwrap();

    publish_n(&high_channel, &queue, 5).await;
    let high_first = next_delivery(&mut high).await;
    let high_second = next_delivery(&mut high).await;
    assert_eq!([body(&high_first), body(&high_second)], ["m0", "m1"]);
    for expected in ["m2", "m3", "m4"] {
        assert_eq!(
            body(&next_delivery(&mut low).await),
            expected,
            "overflow goes to the low consumer"
        );
    }
    expect_no_delivery(&mut high, SILENCE).await;

    // Room again at the high consumer: the next message goes there.
    bounded!(high_first.ack(BasicAckOptions::default())).unwrap();
    publish(&high_channel, "", &queue, b"m5").await;
    assert_eq!(body(&next_delivery(&mut high).await), "m5");
    expect_no_delivery(&mut low, SILENCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lower_priority_consumer_starves_while_the_higher_is_unlimited() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("c-priority-unlimited");
    declare_queue(&channel, &queue).await;
    let mut low = consume_with(&channel, &queue, "low", Default::default(), priority(-5))
        .await
        .unwrap();
    let mut high = consume_with(&channel, &queue, "high", Default::default(), priority(5))
        .await
        .unwrap();
    publish_n(&channel, &queue, 4).await;
    for i in 0..4 {
        assert_eq!(body(&next_delivery(&mut high).await), format!("m{i}"));
    }
    expect_no_delivery(&mut low, SILENCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_queue_sends_basic_cancel_to_its_consumers() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("c-server-cancel");
    declare_queue(&channel, &queue).await;
    let mut consumer = consume(&channel, &queue, false).await;
    let other = bounded!(connection.create_channel()).unwrap();
    bounded!(other.queue_delete(queue.as_str().into(), Default::default())).unwrap();
    // lapin ends the consumer's stream when it receives basic.cancel from the broker.
    assert!(
        bounded!(consumer.next()).is_none(),
        "consumer stream should end on basic.cancel"
    );
    assert!(
        channel.status().connected(),
        "a server cancel leaves the channel open"
    );
    declare_queue(&channel, &unique("c-after-cancel")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ack_consumer_takes_messages_off_the_queue() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("c-noack");
    declare_queue(&channel, &queue).await;
    let mut consumer = consume(&channel, &queue, true).await;
    publish_n(&channel, &queue, 3).await;
    for i in 0..3 {
        assert_eq!(body(&next_delivery(&mut consumer).await), format!("m{i}"));
    }
    // Nothing is unacked: closing the channel requeues nothing.
    bounded!(channel.close(200, "OK".into())).unwrap();
    let observer = bounded!(connection.create_channel()).unwrap();
    assert!(get_all(&observer, &queue).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_limits_unacked_deliveries_per_consumer() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("c-prefetch");
    declare_queue(&channel, &queue).await;
    bounded!(channel.basic_qos(2, BasicQosOptions::default())).unwrap();
    let mut consumer = consume(&channel, &queue, false).await;
    publish_n(&channel, &queue, 5).await;
    let first = next_delivery(&mut consumer).await;
    let second = next_delivery(&mut consumer).await;
    assert_eq!([body(&first), body(&second)], ["m0", "m1"]);
    expect_no_delivery(&mut consumer, SILENCE).await;

    bounded!(first.ack(BasicAckOptions::default())).unwrap();
    assert_eq!(body(&next_delivery(&mut consumer).await), "m2");
    expect_no_delivery(&mut consumer, SILENCE).await;

    // A multiple ack frees both slots.
    let third_tag = 3;
    bounded!(channel.basic_ack(third_tag, BasicAckOptions { multiple: true })).unwrap();
    assert_eq!(body(&next_delivery(&mut consumer).await), "m3");
    assert_eq!(body(&next_delivery(&mut consumer).await), "m4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_applies_to_consumers_created_after_basic_qos() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let (one, three) = (unique("c-qos-one"), unique("c-qos-three"));
    declare_queue(&channel, &one).await;
    declare_queue(&channel, &three).await;
    bounded!(channel.basic_qos(1, BasicQosOptions::default())).unwrap();
    let mut limited_to_one = consume(&channel, &one, false).await;
    bounded!(channel.basic_qos(3, BasicQosOptions::default())).unwrap();
    let mut limited_to_three = consume(&channel, &three, false).await;
    publish_n(&channel, &one, 5).await;
    publish_n(&channel, &three, 5).await;
    next_delivery(&mut limited_to_one).await;
    expect_no_delivery(&mut limited_to_one, SILENCE).await;
    for _ in 0..3 {
        next_delivery(&mut limited_to_three).await;
    }
    expect_no_delivery(&mut limited_to_three, SILENCE).await;
}

/// RabbitMQ 3.10 reinterprets `global`: global=true limits the whole channel (shared by all its
/// consumers), global=false limits each consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_prefetch_is_shared_by_all_consumers_on_the_channel() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let (a, b) = (unique("c-global-a"), unique("c-global-b"));
    declare_queue(&channel, &a).await;
    declare_queue(&channel, &b).await;
    let publisher = bounded!(connection.create_channel()).unwrap();
    publish_n(&publisher, &a, 3).await;
    publish_n(&publisher, &b, 3).await;
    wait_for_message_count(&connection, &b, 3).await;

    bounded!(channel.basic_qos(3, BasicQosOptions { global: true })).unwrap();
    let mut from_a = consume(&channel, &a, false).await;
    let mut from_b = consume(&channel, &b, false).await;
    let mut delivered = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while tokio::time::Instant::now() < deadline {
        tokio::select! {
            Some(Ok(delivery)) = from_a.next() => delivered.push(delivery),
            Some(Ok(delivery)) = from_b.next() => delivered.push(delivery),
            _ = tokio::time::sleep(SILENCE) => break,
        }
    }
    assert_eq!(
        delivered.len(),
        3,
        "a channel-wide limit of 3 across both consumers"
    );
    // Acking one frees one slot on the channel.
    bounded!(delivered[0].ack(BasicAckOptions::default())).unwrap();
    tokio::select! {
        Some(Ok(_)) = from_a.next() => {}
        Some(Ok(_)) = from_b.next() => {}
        _ = tokio::time::sleep(Duration::from_secs(3)) => panic!("no delivery after freeing a slot"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_zero_means_unlimited() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("c-prefetch-zero");
    declare_queue(&channel, &queue).await;
    bounded!(channel.basic_qos(0, BasicQosOptions::default())).unwrap();
    let mut consumer = consume(&channel, &queue, false).await;
    publish_n(&channel, &queue, 20).await;
    for i in 0..20 {
        assert_eq!(body(&next_delivery(&mut consumer).await), format!("m{i}"));
    }
}

/// channel.flow active=true is answered with flow-ok active=true. RabbitMQ 3.10.8 does not
/// implement flow from the client side: active=false is refused with 540 NOT_IMPLEMENTED
/// ("NOT_IMPLEMENTED - active=false"), which closes the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_flow_active_true_is_acknowledged() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let active = bounded!(channel.channel_flow(ChannelFlowOptions { active: true })).unwrap();
    assert!(active);
    let paused = bounded!(channel.channel_flow(ChannelFlowOptions { active: false }));
    let text = expect_amqp_error(paused, reply::NOT_IMPLEMENTED);
    assert!(text.contains("active=false"), "{text}");
}
