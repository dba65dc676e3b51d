//! Back-pressure between publishers, queues and consumers: a publisher that outruns a
//! consumer is slowed down, never deadlocked, and no message is lost on the way.

use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicPublishOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use warren_tests::client::{declare_queue, publish, wait_for_message_count};
use warren_tests::raw::{Handshake, RawClient};
use warren_tests::wire::{method, Args};
use warren_tests::{bounded, unique, TestBroker};

/// Well above the queue flow backlog (8,192 ready messages), so that flow can engage.
const MESSAGES: usize = 60_000;

/// One connection publishes to and consumes (no-ack) from the same queue. When the queue
/// stops taking publishes to let the consumer catch up, the connection must keep taking its
/// deliveries while its publishes wait; every message arrives, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_publishing_to_and_consuming_from_a_busy_queue_keeps_moving() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let queue = unique("flow-shared");
    let consumer_channel = bounded!(connection.create_channel()).unwrap();
    declare_queue(&consumer_channel, &queue).await;
    let mut consumer = bounded!(consumer_channel.basic_consume(
        queue.as_str().into(),
        "flow-consumer".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .unwrap();
    let publisher = bounded!(connection.create_channel()).unwrap();
    let publishing = {
        let queue = queue.clone();
        tokio::spawn(async move {
            for i in 0..MESSAGES {
                let body = i.to_string();
                let publish = publisher.basic_publish(
                    "".into(),
                    queue.as_str().into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    BasicProperties::default(),
                );
                bounded!(publish, Duration::from_secs(30)).unwrap();
            }
        })
    };
    for expected in 0..MESSAGES {
        let delivery = bounded!(consumer.next(), Duration::from_secs(30))
            .expect("consumer stream ended")
            .expect("delivery");
        assert_eq!(
            String::from_utf8_lossy(&delivery.data),
            expected.to_string()
        );
    }
    bounded!(publishing, Duration::from_secs(30)).unwrap();
}

/// A consumer's connection goes away while thousands of deliveries are between the queue and
/// its socket (the client reads nothing, so the broker's writes stall and deliveries wait in
/// the connection's outbox): every message it had not acknowledged, written or not, goes back
/// to the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_in_flight_return_to_the_queue_when_the_consumer_connection_closes() {
    // 40 MB in all: more than the first credit window plus the socket buffers hold, so the
    // next window waits in the outbox while the broker's writes are stalled.
    const COUNT: u32 = 20_000;
    const BODY_BYTES: usize = 2 * 1024;
    let broker = TestBroker::start().await;
    let admin = broker.connect().await;
    let queue = unique("flow-inflight");
    let channel = bounded!(admin.create_channel()).unwrap();
    declare_queue(&channel, &queue).await;
    let publisher = bounded!(admin.create_channel()).unwrap();
    for i in 0..COUNT {
        let mut body = format!("{i:08}").into_bytes();
        body.resize(BODY_BYTES, b'.');
        publish(&publisher, "", &queue, &body).await;
    }
    wait_for_message_count(&admin, &queue, COUNT).await;

    let (mut doomed, _, _) = RawClient::handshake(broker.addr(), Handshake::default()).await;
    doomed.open_channel(1).await;
    let consume = Args::new()
        .short(0)
        .shortstr(&queue)
        .shortstr("never-reads")
        .bits(&[false; 4]) // no-local, no-ack = false, exclusive, nowait
        .table(&[])
        .build();
    doomed.send_method(1, method::BASIC_CONSUME, &consume).await;
    tokio::time::sleep(Duration::from_millis(500)).await; // the broker's writes stall
    drop(doomed);

    // Every message is ready again: none stayed unacked on the dead connection.
    wait_for_message_count(&admin, &queue, COUNT).await;
}
