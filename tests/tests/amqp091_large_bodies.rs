//! Bodies that span many frames arrive byte for byte: sizes on both sides of frame_max
//! boundaries (one byte short of a full frame, exactly full, one over, several frames, a few
//! MiB), published by lapin with the default frame_max and consumed by lapin with the default
//! and with frame_max 4096 (body frames cut across the slices a body was received in), by
//! basic.get, by an AMQP 1.0 receiver (fe2o3-amqp), and, persistent in a durable queue, after
//! a restart. Each byte depends on its position and on the body's size, so a lost, repeated
//! or reordered slice shows.

use fe2o3_amqp::types::messaging::Body as Amqp10Body;
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::Receiver;
use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};
use warren_tests::{
    bounded, confirm_channel, consume, declare_queue, next_delivery, publish_with, unique,
    TestBroker,
};

/// The payload bytes of one body frame at lapin's default frame_max (131072) and Warren's.
const FRAME_PAYLOAD: usize = 131_072 - 8;

fn sizes() -> Vec<usize> {
    vec![
        1,
        4095,
        4096,
        16 * 1024 + 1,
        FRAME_PAYLOAD - 1,
        FRAME_PAYLOAD,
        FRAME_PAYLOAD + 1,
        2 * FRAME_PAYLOAD,
        2 * FRAME_PAYLOAD + 4096,
        1024 * 1024,
        1024 * 1024 + 1,
        3 * 1024 * 1024 + 7,
    ]
}

fn body_of(size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i.wrapping_mul(31) ^ (i >> 8) ^ size) as u8)
        .collect()
}

fn check(got: &[u8], size: usize, via: &str) {
    assert_eq!(
        got.len(),
        size,
        "{via}: body of {size} bytes came with {}",
        got.len()
    );
    let expected = body_of(size);
    if let Some(at) = got.iter().zip(&expected).position(|(a, b)| a != b) {
        panic!("{via}: body of {size} bytes differs first at byte {at}");
    }
}

async fn publish_all(channel: &Channel, queue: &str, persistent: bool) {
    let properties = if persistent {
        BasicProperties::default().with_delivery_mode(2)
    } else {
        BasicProperties::default()
    };
    for size in sizes() {
        publish_with(channel, "", queue, &body_of(size), properties.clone()).await;
    }
}

async fn declare_durable(channel: &Channel, queue: &str) {
    let options = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let declare = channel.queue_declare(queue.into(), options, FieldTable::default());
    bounded!(declare).unwrap_or_else(|error| panic!("declare {queue}: {error}"));
}

/// Consumes one message per size with lapin on a connection with `query` and checks them.
async fn consume_and_check(broker: &TestBroker, queue: &str, query: &str) {
    let connection = broker.connect_with(query).await;
    let channel = bounded!(connection.create_channel()).expect("open a channel");
    let mut consumer = consume(&channel, queue, true).await;
    for size in sizes() {
        let delivery = next_delivery(&mut consumer).await;
        check(&delivery.data, size, &format!("consumer with {query}"));
    }
}

async fn get_and_check(channel: &Channel, queue: &str, via: &str) {
    for size in sizes() {
        let get = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true });
        let message = bounded!(get)
            .unwrap_or_else(|error| panic!("basic.get {queue}: {error}"))
            .unwrap_or_else(|| panic!("{via}: the message of {size} bytes is missing"));
        check(&message.delivery.data, size, via);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_bodies_spanning_many_frames_arrive_intact() {
    let broker = TestBroker::start().await;
    let (connection, _) = broker.channel().await;
    let channel = confirm_channel(&connection).await;
    for query in ["frame_max=131072", "frame_max=4096"] {
        let queue = unique("large-transient");
        declare_queue(&channel, &queue).await;
        publish_all(&channel, &queue, false).await;
        consume_and_check(&broker, &queue, query).await;
    }
    let queue = unique("large-get");
    declare_queue(&channel, &queue).await;
    publish_all(&channel, &queue, false).await;
    get_and_check(&channel, &queue, "basic.get").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_from_a_small_frame_max_client_arrive_intact() {
    let broker = TestBroker::start().await;
    let connection = broker.connect_with("frame_max=4096").await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("large-small-frames");
    declare_queue(&channel, &queue).await;
    publish_all(&channel, &queue, true).await;
    consume_and_check(&broker, &queue, "frame_max=131072").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_bodies_spanning_many_frames_survive_a_restart() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let (queue, consumed) = (unique("large-durable"), unique("large-durable-consumed"));
    {
        let (connection, _) = broker.channel().await;
        let channel = confirm_channel(&connection).await;
        declare_durable(&channel, &queue).await;
        declare_durable(&channel, &consumed).await;
        publish_all(&channel, &queue, true).await;
        publish_all(&channel, &consumed, true).await;
        // Read back from memory before the restart: stored, not consumed.
        consume_and_check(&broker, &consumed, "frame_max=4096").await;
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
    let broker = broker.restart().await;
    let (_connection, channel) = broker.channel().await;
    get_and_check(&channel, &queue, "basic.get after a restart").await;
    let get = channel.basic_get(consumed.as_str().into(), BasicGetOptions { no_ack: true });
    let left = bounded!(get).unwrap_or_else(|error| panic!("basic.get {consumed}: {error}"));
    assert!(
        left.is_none(),
        "consumed messages stay gone after a restart"
    );
}

#[tokio::test]
async fn an_amqp10_receiver_gets_large_amqp091_bodies_intact() {
    let broker = TestBroker::start().await;
    let (connection, _) = broker.channel().await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("large-to-amqp10");
    declare_queue(&channel, &queue).await;
    publish_all(&channel, &queue, false).await;
    let (_amqp10, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut receiver = bounded!(Receiver::attach(&mut session, "r", address.as_str())).unwrap();
    for size in sizes() {
        let delivery = bounded!(receiver.recv::<Amqp10Body<Value>>()).unwrap();
        let Amqp10Body::Data(data) = delivery.body() else {
            panic!(
                "a 0.9.1 body arrives as data sections: {:?}",
                delivery.body()
            );
        };
        let got: Vec<u8> = data.iter().flat_map(|d| d.0.iter().copied()).collect();
        check(&got, size, "AMQP 1.0 receiver");
        bounded!(receiver.accept(&delivery)).unwrap();
    }
}
