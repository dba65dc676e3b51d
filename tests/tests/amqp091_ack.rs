//! Acknowledgements: ack (single, multiple, multiple with tag 0), nack and reject with and
//! without requeue, requeue position and the redelivered flag, precondition errors on bad tags,
//! requeue on channel/connection close, basic.recover, basic.get / get-empty.

use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicNackOptions, BasicQosOptions, BasicRecoverOptions,
    BasicRejectOptions,
};
use lapin::{Channel, Consumer};
use warren_tests::wire::reply;
use warren_tests::{
    body, bounded, consume, declare_queue, expect_no_delivery, get, get_all, next_delivery,
    publish, unique, wait_for_message_count, ChannelWatch, TestBroker,
};

const SILENCE: Duration = Duration::from_millis(400);

async fn publish_n(channel: &Channel, queue: &str, count: usize) {
    for i in 0..count {
        publish(channel, "", queue, format!("m{i}").as_bytes()).await;
    }
}

async fn take(consumer: &mut Consumer, count: usize) -> Vec<Delivery> {
    let mut deliveries = Vec::with_capacity(count);
    for _ in 0..count {
        deliveries.push(next_delivery(consumer).await);
    }
    deliveries
}

fn bodies(deliveries: &[Delivery]) -> Vec<String> {
    deliveries.iter().map(body).collect()
}

async fn ack(channel: &Channel, tag: u64, multiple: bool) {
    bounded!(channel.basic_ack(tag, BasicAckOptions { multiple })).expect("basic.ack sent");
}

async fn nack(channel: &Channel, tag: u64, multiple: bool, requeue: bool) {
    bounded!(channel.basic_nack(tag, BasicNackOptions { multiple, requeue }))
        .expect("basic.nack sent");
}

/// A queue with `count` messages m0.. and a manual-ack consumer on a second channel.
async fn setup(
    broker: &TestBroker,
    count: usize,
) -> (lapin::Connection, Channel, Consumer, String) {
    let (connection, publisher) = broker.channel().await;
    let queue = unique("ack");
    declare_queue(&publisher, &queue).await;
    publish_n(&publisher, &queue, count).await;
    wait_for_message_count(&connection, &queue, u32::try_from(count).unwrap()).await;
    let channel = bounded!(connection.create_channel()).unwrap();
    let consumer = consume(&channel, &queue, false).await;
    (connection, channel, consumer, queue)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiple_ack_settles_everything_up_to_the_tag() {
    let broker = TestBroker::start().await;
    let (connection, channel, mut consumer, queue) = setup(&broker, 5).await;
    let deliveries = take(&mut consumer, 5).await;
    assert_eq!(
        deliveries
            .iter()
            .map(|d| d.delivery_tag)
            .collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    ack(&channel, 3, true).await;
    bounded!(channel.close(200, "OK".into())).unwrap();
    // Only m3 and m4 were unacked: they return to the queue.
    let observer = bounded!(connection.create_channel()).unwrap();
    wait_for_message_count(&connection, &queue, 2).await;
    assert_eq!(get_all(&observer, &queue).await, ["m3", "m4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiple_ack_with_tag_zero_settles_all_outstanding() {
    let broker = TestBroker::start().await;
    let (connection, channel, mut consumer, queue) = setup(&broker, 4).await;
    take(&mut consumer, 4).await;
    ack(&channel, 0, true).await;
    bounded!(channel.close(200, "OK".into())).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    wait_for_message_count(&connection, &queue, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_multiple_with_requeue_redelivers_in_original_order() {
    let broker = TestBroker::start().await;
    let (_connection, channel, mut consumer, _queue) = setup(&broker, 5).await;
    let first = take(&mut consumer, 5).await;
    assert!(first.iter().all(|d| !d.redelivered));
    nack(&channel, 5, true, true).await;
    let again = take(&mut consumer, 5).await;
    assert_eq!(bodies(&again), ["m0", "m1", "m2", "m3", "m4"]);
    assert!(
        again.iter().all(|d| d.redelivered),
        "requeued messages carry redelivered=true"
    );
    assert_eq!(
        again.iter().map(|d| d.delivery_tag).collect::<Vec<_>>(),
        [6, 7, 8, 9, 10]
    );
}

/// A requeued message goes back to its original position (ahead of messages published after
/// it), not to the tail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeued_message_returns_to_its_original_position() {
    let broker = TestBroker::start().await;
    let (connection, publisher) = broker.channel().await;
    let queue = unique("ack-position");
    declare_queue(&publisher, &queue).await;
    publish_n(&publisher, &queue, 5).await;
    wait_for_message_count(&connection, &queue, 5).await;
    let channel = bounded!(connection.create_channel()).unwrap();
    bounded!(channel.basic_qos(2, BasicQosOptions::default())).unwrap();
    let mut consumer = consume(&channel, &queue, false).await;
    let first = take(&mut consumer, 2).await;
    assert_eq!(bodies(&first), ["m0", "m1"]);

    nack(&channel, first[0].delivery_tag, false, true).await;
    let redelivered = next_delivery(&mut consumer).await;
    assert_eq!(body(&redelivered), "m0", "m0 comes back before m2");
    assert!(redelivered.redelivered);
    ack(&channel, redelivered.delivery_tag, false).await;
    ack(&channel, first[1].delivery_tag, false).await;
    let rest = take(&mut consumer, 2).await;
    assert_eq!(bodies(&rest), ["m2", "m3"]);
    assert!(rest.iter().all(|d| !d.redelivered));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_without_requeue_drops_and_with_requeue_redelivers() {
    let broker = TestBroker::start().await;
    let (connection, channel, mut consumer, queue) = setup(&broker, 2).await;
    let deliveries = take(&mut consumer, 2).await;
    let drop = BasicRejectOptions { requeue: false };
    bounded!(channel.basic_reject(deliveries[0].delivery_tag, drop)).unwrap();
    let requeue = BasicRejectOptions { requeue: true };
    bounded!(channel.basic_reject(deliveries[1].delivery_tag, requeue)).unwrap();
    let again = next_delivery(&mut consumer).await;
    assert_eq!(body(&again), "m1");
    assert!(again.redelivered);
    ack(&channel, again.delivery_tag, false).await;
    expect_no_delivery(&mut consumer, SILENCE).await;
    bounded!(channel.close(200, "OK".into())).unwrap();
    wait_for_message_count(&connection, &queue, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_multiple_without_requeue_drops_them_all() {
    let broker = TestBroker::start().await;
    let (connection, channel, mut consumer, queue) = setup(&broker, 3).await;
    take(&mut consumer, 3).await;
    nack(&channel, 3, true, false).await;
    expect_no_delivery(&mut consumer, SILENCE).await;
    bounded!(channel.close(200, "OK".into())).unwrap();
    wait_for_message_count(&connection, &queue, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_of_an_unknown_delivery_tag_is_406() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let watch = ChannelWatch::new(&channel).await;
    ack(&channel, 999, false).await;
    let text = watch.expect_close(reply::PRECONDITION_FAILED).await;
    assert_eq!(text, "PRECONDITION_FAILED - unknown delivery tag 999");
    assert!(connection.status().connected(), "406 is a channel error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_ack_is_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel, mut consumer, _queue) = setup(&broker, 1).await;
    let delivery = next_delivery(&mut consumer).await;
    let watch = ChannelWatch::new(&channel).await;
    ack(&channel, delivery.delivery_tag, false).await;
    ack(&channel, delivery.delivery_tag, false).await;
    let text = watch.expect_close(reply::PRECONDITION_FAILED).await;
    assert_eq!(
        text,
        format!(
            "PRECONDITION_FAILED - unknown delivery tag {}",
            delivery.delivery_tag
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_and_reject_of_unknown_tags_are_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let watch = ChannelWatch::new(&channel).await;
    nack(&channel, 42, false, true).await;
    let text = watch.expect_close(reply::PRECONDITION_FAILED).await;
    assert!(text.contains("unknown delivery tag 42"), "{text}");

    let (_c2, channel) = broker.channel().await;
    let watch = ChannelWatch::new(&channel).await;
    bounded!(channel.basic_reject(7, BasicRejectOptions { requeue: false })).unwrap();
    let text = watch.expect_close(reply::PRECONDITION_FAILED).await;
    assert!(text.contains("unknown delivery tag 7"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acking_a_no_ack_delivery_is_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("ack-noack");
    declare_queue(&channel, &queue).await;
    let mut consumer = consume(&channel, &queue, true).await;
    publish(&channel, "", &queue, b"auto-acked").await;
    let delivery = next_delivery(&mut consumer).await;
    let watch = ChannelWatch::new(&channel).await;
    ack(&channel, delivery.delivery_tag, false).await;
    let text = watch.expect_close(reply::PRECONDITION_FAILED).await;
    assert!(text.contains("unknown delivery tag"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_messages_are_requeued_when_the_channel_closes() {
    let broker = TestBroker::start().await;
    let (connection, channel, mut consumer, queue) = setup(&broker, 3).await;
    take(&mut consumer, 3).await;
    bounded!(channel.close(200, "OK".into())).unwrap();
    wait_for_message_count(&connection, &queue, 3).await;

    let channel = bounded!(connection.create_channel()).unwrap();
    let mut consumer = consume(&channel, &queue, false).await;
    let again = take(&mut consumer, 3).await;
    assert_eq!(bodies(&again), ["m0", "m1", "m2"]);
    assert!(again.iter().all(|d| d.redelivered));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_messages_are_requeued_when_the_connection_closes() {
    let broker = TestBroker::start().await;
    let (observer, publisher) = broker.channel().await;
    let queue = unique("ack-conn-close");
    declare_queue(&publisher, &queue).await;
    publish_n(&publisher, &queue, 2).await;
    let (consumer_connection, channel) = broker.channel().await;
    let mut consumer = consume(&channel, &queue, false).await;
    take(&mut consumer, 2).await;
    bounded!(consumer_connection.close(200, "OK".into())).unwrap();
    wait_for_message_count(&observer, &queue, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_recover_with_requeue_redelivers_unacked_messages() {
    let broker = TestBroker::start().await;
    let (_connection, channel, mut consumer, _queue) = setup(&broker, 2).await;
    let first = take(&mut consumer, 2).await;
    ack(&channel, first[0].delivery_tag, false).await;
    bounded!(channel.basic_recover(BasicRecoverOptions { requeue: true })).unwrap();
    let again = next_delivery(&mut consumer).await;
    assert_eq!(body(&again), "m1");
    assert!(again.redelivered);
    assert!(
        again.delivery_tag > 2,
        "a redelivery gets a fresh delivery tag"
    );
    expect_no_delivery(&mut consumer, SILENCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_get_reports_remaining_count_and_get_empty() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("ack-get");
    declare_queue(&channel, &queue).await;
    publish_n(&channel, &queue, 3).await;
    wait_for_message_count(&connection, &queue, 3).await;

    let first = get(&channel, &queue).await.expect("get-ok");
    assert_eq!(body(&first.delivery), "m0");
    assert_eq!(first.message_count, 2, "get-ok counts the messages left");
    assert_eq!(first.delivery.delivery_tag, 1);
    assert_eq!(first.delivery.routing_key.as_str(), queue);
    assert!(!first.delivery.redelivered);
    let second = get(&channel, &queue).await.expect("get-ok");
    assert_eq!(
        (body(&second.delivery).as_str(), second.message_count),
        ("m1", 1)
    );
    ack(&channel, second.delivery.delivery_tag, false).await;

    let no_ack =
        bounded!(channel.basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true }));
    let third = no_ack.unwrap().expect("get-ok");
    assert_eq!(
        (body(&third.delivery).as_str(), third.message_count),
        ("m2", 0)
    );
    assert!(
        get(&channel, &queue).await.is_none(),
        "empty queue answers get-empty"
    );

    // m0 was never acked: closing the channel requeues it.
    bounded!(channel.close(200, "OK".into())).unwrap();
    wait_for_message_count(&connection, &queue, 1).await;
    let channel = bounded!(connection.create_channel()).unwrap();
    let again = get(&channel, &queue).await.expect("m0 requeued");
    assert_eq!(body(&again.delivery), "m0");
    assert!(again.delivery.redelivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_get_from_a_missing_queue_is_404() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("ack-get-missing");
    let result = bounded!(channel.basic_get(queue.as_str().into(), BasicGetOptions::default()));
    let text = warren_tests::expect_amqp_error(result, reply::NOT_FOUND);
    assert_eq!(text, format!("NOT_FOUND - no queue '{queue}' in vhost '/'"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_consume_share_the_channel_delivery_tag_sequence() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let (a, b) = (unique("ack-seq-a"), unique("ack-seq-b"));
    declare_queue(&channel, &a).await;
    declare_queue(&channel, &b).await;
    publish_n(&channel, &a, 2).await;
    publish_n(&channel, &b, 1).await;
    wait_for_message_count(&connection, &a, 2).await;
    let got = get(&channel, &a).await.expect("get-ok");
    let mut consumer = consume(&channel, &b, false).await;
    let delivered = next_delivery(&mut consumer).await;
    let got_again = get(&channel, &a).await.expect("get-ok");
    assert_eq!(
        [
            got.delivery.delivery_tag,
            delivered.delivery_tag,
            got_again.delivery.delivery_tag
        ],
        [1, 2, 3]
    );
    ack(&channel, 0, true).await;
}
