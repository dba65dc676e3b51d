//! One conformance suite for every queue type: the behaviour every type shares, driven through
//! a real broker with lapin, run once per entry of `FLAVOURS`. A new queue type (stream,
//! quorum) adds its entries there, with the capabilities it lacks switched off, and must pass
//! the rest as it stands.
//!
//! Covered: publish / consume / ack order, requeue order and the redelivered flag, publisher
//! confirms, basic.get, purge (which leaves unacked messages alone), prefetch as credit,
//! delete with a consumer attached (the consumer is cancelled), and a restart (what was
//! confirmed and not acked comes back, in order, redelivered if it had been delivered).

use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicNackOptions, BasicQosOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};
use warren_tests::{
    body, bounded, confirm_channel, consume, expect_no_delivery, get, message_count, next_delivery,
    publish_with, queue_exists, table, text, unique, TestBroker,
};

/// A queue type as the suite declares it, and what it supports.
struct Flavour {
    name: &'static str,
    /// `x-queue-type`, or none for the broker's default.
    queue_type: Option<&'static str>,
    durable: bool,
    /// Messages published persistent (delivery mode 2).
    persistent: bool,
    /// Its confirmed, unacked messages survive a broker restart.
    survives_restart: bool,
}

const FLAVOURS: [Flavour; 3] = [
    Flavour {
        name: "classic durable, persistent messages",
        queue_type: Some("classic"),
        durable: true,
        persistent: true,
        survives_restart: true,
    },
    Flavour {
        name: "classic durable, transient messages",
        queue_type: None,
        durable: true,
        persistent: false,
        survives_restart: false,
    },
    Flavour {
        name: "classic transient",
        queue_type: Some("classic"),
        durable: false,
        persistent: false,
        survives_restart: false,
    },
];

const QUIET: Duration = Duration::from_millis(300);

impl Flavour {
    async fn declare(&self, channel: &Channel) -> String {
        let name = unique("conformance");
        let options = lapin::options::QueueDeclareOptions {
            durable: self.durable,
            ..Default::default()
        };
        let arguments = match self.queue_type {
            Some(kind) => table(&[("x-queue-type", text(kind))]),
            None => FieldTable::default(),
        };
        let declare = channel.queue_declare(name.as_str().into(), options, arguments);
        bounded!(declare).unwrap_or_else(|error| panic!("{}: declare: {error}", self.name));
        name
    }

    /// Publishes `bodies` to `queue` through the default exchange and waits for every confirm.
    async fn publish(&self, channel: &Channel, queue: &str, bodies: &[String]) {
        let properties = if self.persistent {
            BasicProperties::default().with_delivery_mode(2)
        } else {
            BasicProperties::default()
        };
        for body in bodies {
            publish_with(channel, "", queue, body.as_bytes(), properties.clone()).await;
        }
    }
}

fn bodies(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}-{i}")).collect()
}

async fn setup(broker: &TestBroker) -> (Connection, Channel) {
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    (connection, channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_in_order_with_prefetch_as_credit_and_requeue_to_the_head() {
    let broker = TestBroker::start().await;
    for flavour in &FLAVOURS {
        let (connection, channel) = setup(&broker).await;
        let queue = flavour.declare(&channel).await;
        let sent = bodies("m", 6);
        flavour.publish(&channel, &queue, &sent).await;

        let consumer_channel = bounded!(connection.create_channel()).unwrap();
        bounded!(consumer_channel.basic_qos(3, BasicQosOptions::default())).unwrap();
        let mut consumer = consume(&consumer_channel, &queue, false).await;
        let first: Vec<_> = [
            next_delivery(&mut consumer).await,
            next_delivery(&mut consumer).await,
            next_delivery(&mut consumer).await,
        ]
        .into();
        let got: Vec<String> = first.iter().map(body).collect();
        assert_eq!(got, sent[..3], "{}: first three in order", flavour.name);
        assert!(first.iter().all(|d| !d.redelivered), "{}", flavour.name);
        // Prefetch 3 is the consumer's credit: nothing more until something is settled.
        expect_no_delivery(&mut consumer, QUIET).await;

        // Requeue the second: it goes back to the head, flagged redelivered.
        let nack = BasicNackOptions {
            requeue: true,
            ..Default::default()
        };
        bounded!(first[1].acker.nack(nack)).unwrap();
        let again = next_delivery(&mut consumer).await;
        assert_eq!(
            body(&again),
            sent[1],
            "{}: requeued to the head",
            flavour.name
        );
        assert!(again.redelivered, "{}: redelivered flag", flavour.name);
        expect_no_delivery(&mut consumer, QUIET).await;

        // Acks give credit back: the rest follows in order, first delivery each.
        for delivery in [&first[0], &first[2], &again] {
            bounded!(delivery.acker.ack(BasicAckOptions::default())).unwrap();
        }
        let mut rest = Vec::new();
        for _ in 3..sent.len() {
            let delivery = next_delivery(&mut consumer).await;
            assert!(!delivery.redelivered, "{}", flavour.name);
            rest.push(body(&delivery));
            bounded!(delivery.acker.ack(BasicAckOptions::default())).unwrap();
        }
        assert_eq!(rest, sent[3..], "{}: the rest in order", flavour.name);
        expect_no_delivery(&mut consumer, QUIET).await;
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_purge_count_ready_messages_only() {
    let broker = TestBroker::start().await;
    for flavour in &FLAVOURS {
        let (connection, channel) = setup(&broker).await;
        let queue = flavour.declare(&channel).await;
        let sent = bodies("g", 5);
        flavour.publish(&channel, &queue, &sent).await;
        assert_eq!(
            message_count(&connection, &queue).await,
            5,
            "{}",
            flavour.name
        );

        // basic.get takes the head and reports what remains; unacked it stays out of the count.
        let got = get(&channel, &queue).await.expect("a message");
        assert_eq!(body(&got.delivery), sent[0], "{}", flavour.name);
        assert_eq!(
            got.message_count, 4,
            "{}: remaining after get",
            flavour.name
        );

        // Purge removes the ready messages, not the unacked one.
        let purged =
            bounded!(channel.queue_purge(queue.as_str().into(), QueuePurgeOptions::default()))
                .unwrap();
        assert_eq!(purged, 4, "{}: purge-ok count", flavour.name);
        assert_eq!(
            message_count(&connection, &queue).await,
            0,
            "{}",
            flavour.name
        );
        let requeue = BasicNackOptions {
            requeue: true,
            ..Default::default()
        };
        bounded!(got.delivery.acker.nack(requeue)).unwrap();
        let back = get(&channel, &queue).await.expect("the requeued message");
        assert_eq!(body(&back.delivery), sent[0], "{}", flavour.name);
        assert!(back.delivery.redelivered, "{}", flavour.name);
        bounded!(back.delivery.acker.ack(BasicAckOptions::default())).unwrap();
        assert!(
            get(&channel, &queue).await.is_none(),
            "{}: empty",
            flavour.name
        );
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_with_a_consumer_cancels_it_and_reports_the_ready_count() {
    let broker = TestBroker::start().await;
    for flavour in &FLAVOURS {
        let (connection, channel) = setup(&broker).await;
        let queue = flavour.declare(&channel).await;
        flavour.publish(&channel, &queue, &bodies("d", 3)).await;
        let consumer_channel = bounded!(connection.create_channel()).unwrap();
        bounded!(consumer_channel.basic_qos(1, BasicQosOptions::default())).unwrap();
        let mut consumer = consume(&consumer_channel, &queue, false).await;
        let _held = next_delivery(&mut consumer).await;

        let deleted =
            bounded!(channel.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()))
                .unwrap();
        assert_eq!(
            deleted, 2,
            "{}: delete-ok counts ready messages",
            flavour.name
        );
        // The broker's basic.cancel ends lapin's consumer stream.
        match bounded!(consumer.next()) {
            None => {}
            Some(item) => panic!(
                "{}: consumer should be cancelled, got {item:?}",
                flavour.name
            ),
        }
        assert!(!queue_exists(&connection, &queue).await, "{}", flavour.name);
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_what_survives_in_order_with_the_redelivered_flag() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let mut queues = Vec::new();
    {
        let (connection, channel) = setup(&broker).await;
        for flavour in &FLAVOURS {
            let queue = flavour.declare(&channel).await;
            flavour.publish(&channel, &queue, &bodies("r", 4)).await;
            // The first is acked, the second delivered and left unacked at the restart.
            let first = get(&channel, &queue).await.expect("first");
            bounded!(first.delivery.acker.ack(BasicAckOptions::default())).unwrap();
            let _second = get(&channel, &queue).await.expect("second");
            queues.push(queue);
        }
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
    let broker = broker.restart().await;
    let (connection, channel) = setup(&broker).await;
    for (flavour, queue) in FLAVOURS.iter().zip(&queues) {
        if !flavour.durable {
            assert!(
                !queue_exists(&connection, queue).await,
                "{}: gone",
                flavour.name
            );
            continue;
        }
        let mut back = Vec::new();
        while let Some(got) = get(&channel, queue).await {
            back.push((body(&got.delivery), got.delivery.redelivered));
            bounded!(got.delivery.acker.ack(BasicAckOptions::default())).unwrap();
        }
        let expected: Vec<(String, bool)> = if flavour.survives_restart {
            vec![
                ("r-1".into(), true),
                ("r-2".into(), false),
                ("r-3".into(), false),
            ]
        } else {
            Vec::new()
        };
        assert_eq!(back, expected, "{}: after the restart", flavour.name);
    }
    bounded!(connection.close(200, "OK".into())).unwrap();
}
