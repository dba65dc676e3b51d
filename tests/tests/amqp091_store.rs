//! Messages in the message store: persistent messages to durable queues survive a restart in
//! order, transient ones and non-durable queues keep the in-memory contract, acked messages
//! stay gone, delivered-but-unacked ones come back redelivered, and queues beyond their memory
//! budget page bodies out and still deliver every message intact and in order. In-process
//! Warren only (restarts, budgets); the tests skip against an external broker.

use lapin::options::{BasicAckOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};
use warren_tests::{
    bounded, confirm_channel, consume, get, get_all, message_count, next_delivery, publish_with,
    queue_exists, unique, TestBroker,
};

async fn declare(channel: &Channel, name: &str, durable: bool) {
    let options = QueueDeclareOptions {
        durable,
        ..Default::default()
    };
    let declare = channel.queue_declare(name.into(), options, FieldTable::default());
    bounded!(declare).unwrap_or_else(|error| panic!("declare queue {name}: {error}"));
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_messages_in_durable_queues_survive_a_restart_in_order() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let (durable_q, transient_q) = (unique("store-dur"), unique("store-tmp"));
    {
        let connection = broker.connect().await;
        let channel = confirm_channel(&connection).await;
        declare(&channel, &durable_q, true).await;
        declare(&channel, &transient_q, false).await;
        for i in 0..50 {
            let body = format!("p{i}");
            publish_with(&channel, "", &durable_q, body.as_bytes(), persistent()).await;
            if i % 10 == 0 {
                let body = format!("t{i}"); // transient message to the durable queue
                let props = BasicProperties::default();
                publish_with(&channel, "", &durable_q, body.as_bytes(), props).await;
            }
            publish_with(&channel, "", &transient_q, body.as_bytes(), persistent()).await;
        }
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
    let broker = broker.restart().await;
    let (connection, channel) = broker.channel().await;
    let expected: Vec<String> = (0..50).map(|i| format!("p{i}")).collect();
    assert_eq!(get_all(&channel, &durable_q).await, expected);
    assert!(
        !queue_exists(&connection, &transient_q).await,
        "a non-durable queue does not come back, nor do its messages"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_messages_stay_gone_and_unacked_ones_come_back_redelivered() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let queue = unique("store-ack");
    {
        let connection = broker.connect().await;
        let channel = confirm_channel(&connection).await;
        declare(&channel, &queue, true).await;
        for i in 0..10 {
            let body = format!("m{i}");
            publish_with(&channel, "", &queue, body.as_bytes(), persistent()).await;
        }
        let consumer_channel = bounded!(connection.create_channel()).unwrap();
        bounded!(consumer_channel.basic_qos(6, BasicQosOptions::default())).unwrap();
        let mut consumer = consume(&consumer_channel, &queue, false).await;
        for i in 0..6 {
            let delivery = next_delivery(&mut consumer).await;
            assert_eq!(delivery.data, format!("m{i}").as_bytes());
            if i % 2 == 0 {
                bounded!(delivery.ack(BasicAckOptions::default())).unwrap();
            }
        }
        // A fence: once answered, the acks before it reached the queue (which then delivers
        // up to three more to the consumer: 6, 7 and 8).
        assert!(message_count(&connection, &queue).await <= 4);
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
    let broker = broker.restart().await;
    let (_connection, channel) = broker.channel().await;
    let mut seen = Vec::new();
    while let Some(message) = get(&channel, &queue).await {
        let body = String::from_utf8(message.delivery.data.clone()).unwrap();
        seen.push((body, message.delivery.redelivered));
    }
    let bodies: Vec<&str> = seen.iter().map(|(b, _)| b.as_str()).collect();
    assert_eq!(
        bodies,
        ["m1", "m3", "m5", "m6", "m7", "m8", "m9"],
        "acked messages stay gone, the rest keep their order"
    );
    for (body, redelivered) in &seen {
        match body.as_str() {
            "m1" | "m3" | "m5" => assert!(redelivered, "{body} was delivered, not acked"),
            "m9" => assert!(!redelivered, "{body} was never delivered"),
            _ => {} // 6, 7, 8 may have been delivered after the acks made room
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_over_their_memory_budget_page_out_and_deliver_everything_in_order() {
    let broker = TestBroker::start_with(|config| {
        config.queue_memory_budget = 4096;
        config.store_segment_size = 64 * 1024;
    })
    .await;
    if broker.skip_if_external("memory budgets are Warren's config") {
        return;
    }
    let (durable_q, transient_q) = (unique("page-dur"), unique("page-tmp"));
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    declare(&channel, &durable_q, true).await;
    declare(&channel, &transient_q, false).await;
    let body = |i: usize| format!("{i:05}-{}", "x".repeat(1000));
    for i in 0..300 {
        let b = body(i);
        publish_with(&channel, "", &durable_q, b.as_bytes(), persistent()).await;
        let props = BasicProperties::default();
        publish_with(&channel, "", &transient_q, b.as_bytes(), props).await;
    }
    let reader = bounded!(connection.create_channel()).unwrap();
    for queue in [&durable_q, &transient_q] {
        let mut consumer = consume(&reader, queue, true).await;
        for i in 0..300 {
            let delivery = next_delivery(&mut consumer).await;
            assert_eq!(
                String::from_utf8_lossy(&delivery.data),
                body(i),
                "message {i} of {queue}"
            );
        }
    }
    for queue in [&durable_q, &transient_q] {
        assert_eq!(message_count(&connection, queue).await, 0);
    }
}

/// Segment files in the broker's message store.
fn segment_count(broker: &TestBroker) -> usize {
    let dir = broker.data_dir().expect("in-process broker").join("store");
    std::fs::read_dir(dir)
        .expect("the store directory exists")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "seg"))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_or_deleting_a_durable_queue_reclaims_its_segments() {
    let broker = TestBroker::start_with(|config| config.store_segment_size = 16 * 1024).await;
    if broker.skip_if_external("segment files are Warren's") {
        return;
    }
    let (drained, deleted) = (unique("reclaim-drain"), unique("reclaim-delete"));
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    declare(&channel, &drained, true).await;
    declare(&channel, &deleted, true).await;
    let body = "y".repeat(1000);
    for queue in [&drained, &deleted] {
        for _ in 0..100 {
            publish_with(&channel, "", queue, body.as_bytes(), persistent()).await;
        }
    }
    let before = segment_count(&broker);
    assert!(
        before > 8,
        "200 KB of messages fill many 16 KiB segments: {before}"
    );

    let reader = bounded!(connection.create_channel()).unwrap();
    let mut consumer = consume(&reader, &drained, false).await;
    for _ in 0..100 {
        let delivery = next_delivery(&mut consumer).await;
        bounded!(delivery.ack(BasicAckOptions::default())).unwrap();
    }
    let delete = channel.queue_delete(deleted.as_str().into(), Default::default());
    assert_eq!(bounded!(delete).unwrap(), 100);
    assert_eq!(message_count(&connection, &drained).await, 0); // a fence for the acks
    warren_tests::eventually(
        "segments are reclaimed",
        std::time::Duration::from_secs(5),
        || {
            let now = segment_count(&broker);
            async move { now <= 2 }
        },
    )
    .await;
}
