//! Transactions: publishes and acks inside tx.select take effect at tx.commit and are
//! discarded by tx.rollback; commit/rollback outside a transaction is 406.

use std::time::Duration;

use lapin::options::BasicAckOptions;
use warren_tests::wire::reply;
use warren_tests::{
    body, bounded, consume, declare_queue, expect_amqp_error, expect_no_delivery, get_all,
    message_count, next_delivery, publish, unique, wait_for_message_count, TestBroker,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_are_invisible_until_commit() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("tx-commit");
    declare_queue(&channel, &queue).await;
    bounded!(channel.tx_select()).unwrap();
    for i in 0..3 {
        publish(&channel, "", &queue, format!("m{i}").as_bytes()).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        message_count(&connection, &queue).await,
        0,
        "uncommitted publishes are not enqueued"
    );
    bounded!(channel.tx_commit()).unwrap();
    wait_for_message_count(&connection, &queue, 3).await;
    let observer = bounded!(connection.create_channel()).unwrap();
    assert_eq!(get_all(&observer, &queue).await, ["m0", "m1", "m2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_discards_publishes_and_the_channel_stays_transactional() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("tx-rollback");
    declare_queue(&channel, &queue).await;
    bounded!(channel.tx_select()).unwrap();
    publish(&channel, "", &queue, b"discarded").await;
    bounded!(channel.tx_rollback()).unwrap();
    // Still in tx mode: the next publish also waits for a commit.
    publish(&channel, "", &queue, b"kept").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(message_count(&connection, &queue).await, 0);
    bounded!(channel.tx_commit()).unwrap();
    wait_for_message_count(&connection, &queue, 1).await;
    let observer = bounded!(connection.create_channel()).unwrap();
    assert_eq!(get_all(&observer, &queue).await, ["kept"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_take_effect_at_commit() {
    let broker = TestBroker::start().await;
    let (connection, publisher) = broker.channel().await;
    let queue = unique("tx-ack-commit");
    declare_queue(&publisher, &queue).await;
    publish(&publisher, "", &queue, b"m0").await;
    let channel = bounded!(connection.create_channel()).unwrap();
    bounded!(channel.tx_select()).unwrap();
    let mut consumer = consume(&channel, &queue, false).await;
    let delivery = next_delivery(&mut consumer).await;
    bounded!(delivery.ack(BasicAckOptions::default())).unwrap();
    bounded!(channel.tx_commit()).unwrap();
    bounded!(channel.close(200, "OK".into())).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        message_count(&connection, &queue).await,
        0,
        "the committed ack removed it"
    );
}

/// A rolled-back ack is forgotten: the message stays unacked (not redelivered on this channel)
/// and returns to the queue when the channel closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_discards_acks() {
    let broker = TestBroker::start().await;
    let (connection, publisher) = broker.channel().await;
    let queue = unique("tx-ack-rollback");
    declare_queue(&publisher, &queue).await;
    publish(&publisher, "", &queue, b"m0").await;
    let channel = bounded!(connection.create_channel()).unwrap();
    bounded!(channel.tx_select()).unwrap();
    let mut consumer = consume(&channel, &queue, false).await;
    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(body(&delivery), "m0");
    bounded!(channel.basic_ack(delivery.delivery_tag, BasicAckOptions::default())).unwrap();
    bounded!(channel.tx_rollback()).unwrap();
    expect_no_delivery(&mut consumer, Duration::from_millis(300)).await;
    bounded!(channel.close(200, "OK".into())).unwrap();
    wait_for_message_count(&connection, &queue, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_without_select_is_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let text = expect_amqp_error(bounded!(channel.tx_commit()), reply::PRECONDITION_FAILED);
    assert_eq!(text, "PRECONDITION_FAILED - channel is not transactional");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_without_select_is_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let text = expect_amqp_error(bounded!(channel.tx_rollback()), reply::PRECONDITION_FAILED);
    assert_eq!(text, "PRECONDITION_FAILED - channel is not transactional");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tx_select_twice_and_empty_commit_are_fine() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    bounded!(channel.tx_select()).unwrap();
    bounded!(channel.tx_select()).expect("second tx.select");
    bounded!(channel.tx_commit()).expect("empty commit");
    bounded!(channel.tx_rollback()).expect("empty rollback");
}
