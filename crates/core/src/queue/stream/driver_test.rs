//! The writer task through its two front doors, on a real log in a temporary directory: the
//! stream protocol's `StreamHandle` (dedup, publisher sequence, tracked offsets, the committed
//! end, deletion) and the queue mailbox (AMQP publishes with confirm tickets, consumers).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use warren_store::Entry;

use super::test_support::{start_stream, BodyEncoding};
use super::*;
use crate::confirm::ConfirmWaits;
use crate::consumer::{Consumer, Event, Outbox};
use crate::message::Message;
use crate::queue::stream::{ConfirmInbox, StreamOutcome, StreamPublish};
use crate::queue::ConsumeStart;

fn storage(dir: &std::path::Path) -> StreamStorage {
    StreamStorage {
        root: dir.to_path_buf(),
        sync: warren_store::StreamSync::start(false).expect("sync"),
        io: Arc::new(warren_store::FsIo),
        encoding: Arc::new(BodyEncoding),
    }
}

fn start(dir: &std::path::Path, restart: bool) -> QueueHandle {
    start_stream("s", storage(dir), restart)
}

fn batch(reference: Option<&str>, ids: &[u64], inbox: &Arc<ConfirmInbox>) -> StreamPublish {
    StreamPublish {
        publisher_id: 1,
        reference: reference.map(Arc::from),
        messages: ids
            .iter()
            .map(|&id| (id, Entry::Simple(Bytes::from(format!("m{id}")))))
            .collect(),
        confirms: inbox.clone(),
    }
}

async fn outcome(inbox: &ConfirmInbox) -> StreamOutcome {
    let mut outcomes = Vec::new();
    loop {
        inbox.take_all(&mut outcomes);
        if let Some(first) = outcomes.first() {
            assert_eq!(outcomes.len(), 1, "one outcome per batch: {outcomes:?}");
            return first.clone();
        }
        let wait = tokio::time::timeout(Duration::from_secs(5), inbox.notified());
        wait.await.expect("an outcome within 5 s");
    }
}

#[tokio::test]
async fn duplicates_are_confirmed_not_stored_and_the_sequence_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let queue = start(dir.path(), false);
    let stream = queue
        .stream()
        .expect("a stream has a stream handle")
        .clone();
    let inbox = ConfirmInbox::new();
    stream
        .publish(batch(Some("p"), &[1, 2, 3], &inbox))
        .await
        .unwrap();
    let confirmed = StreamOutcome::Confirmed {
        publisher_id: 1,
        ids: vec![1, 2, 3],
    };
    assert_eq!(outcome(&inbox).await, confirmed);
    stream
        .publish(batch(Some("p"), &[2, 3, 4], &inbox))
        .await
        .unwrap();
    let confirmed = StreamOutcome::Confirmed {
        publisher_id: 1,
        ids: vec![2, 3, 4],
    };
    assert_eq!(outcome(&inbox).await, confirmed);
    assert_eq!(
        stream.view().next_offset(),
        4,
        "2 and 3 were not stored again"
    );
    assert_eq!(stream.query_publisher_sequence("p").await.unwrap(), 4);
    assert_eq!(stream.query_publisher_sequence("other").await.unwrap(), 0);
    stream.store_offset("reader", 2).await.unwrap();
    assert_eq!(stream.query_offset("reader").await.unwrap(), Some(2));
    assert_eq!(stream.query_offset("nobody").await.unwrap(), None);
    // Stopping the broker leaves the files; the stream opens as it was.
    drop((queue, stream));
    let queue = start(dir.path(), true);
    let stream = queue.stream().unwrap().clone();
    assert_eq!(stream.query_publisher_sequence("p").await.unwrap(), 4);
    assert_eq!(stream.query_offset("reader").await.unwrap(), Some(2));
    // The tracked offset took an offset of its own (a tracking chunk, as osiris writes).
    let before = stream.view().next_offset();
    stream
        .publish(batch(Some("p"), &[4, 5], &inbox))
        .await
        .unwrap();
    outcome(&inbox).await;
    assert_eq!(stream.view().next_offset(), before + 1, "only 5 is new");
}

#[tokio::test]
async fn wait_beyond_wakes_on_appends_and_fails_once_the_stream_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let queue = start(dir.path(), false);
    let stream = queue.stream().unwrap().clone();
    stream.wait_beyond(0).now_or_never_pending();
    let waiter = tokio::spawn({
        let stream = stream.clone();
        async move { stream.wait_beyond(0).await }
    });
    let inbox = ConfirmInbox::new();
    stream.publish(batch(None, &[1], &inbox)).await.unwrap();
    let woke = tokio::time::timeout(Duration::from_secs(5), waiter).await;
    assert!(woke.expect("woken").unwrap().is_ok());
    let waiter = tokio::spawn({
        let stream = stream.clone();
        async move { stream.wait_beyond(10).await }
    });
    let deleted = queue
        .request(|reply| QueueCmd::Delete {
            if_unused: false,
            if_empty: false,
            reply,
        })
        .await
        .unwrap();
    assert_eq!(deleted, Ok(1));
    let woke = tokio::time::timeout(Duration::from_secs(5), waiter).await;
    assert!(
        woke.expect("woken").unwrap().is_err(),
        "a deleted stream fails its waiters"
    );
    assert!(stream.is_deleted());
    assert!(stream.publish(batch(None, &[2], &inbox)).await.is_err());
    let leftover = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(leftover, 0, "the stream's files are gone");
}

/// `wait_beyond` on an empty stream does not resolve by itself.
trait PendingCheck {
    fn now_or_never_pending(self);
}

impl<F: std::future::Future<Output = Result<(), BrokerError>>> PendingCheck for F {
    fn now_or_never_pending(self) {
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        let mut future = std::pin::pin!(self);
        assert!(future.as_mut().poll(&mut context).is_pending());
    }
}

#[tokio::test]
async fn amqp_publishes_are_confirmed_and_consumers_read_as_credit_allows() {
    let dir = tempfile::tempdir().unwrap();
    let queue = start(dir.path(), false);
    let publisher = Outbox::new();
    let mut waits = ConfirmWaits::default();
    let ticket = waits.open(&publisher, None);
    waits.hold(&ticket);
    let messages = (0..5)
        .map(|i| {
            let body = Bytes::from(format!("m{i}"));
            Arc::new(Message::new(Bytes::new(), Bytes::new(), Bytes::new(), body))
        })
        .collect();
    let publish = QueueCmd::Publish {
        messages,
        confirm: Some(ticket.clone()),
        tags: Vec::new(),
        credit: None,
    };
    queue.send(publish).await.unwrap();
    assert_eq!(waits.release(ticket), None, "the stream holds the ticket");
    let mut events = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), publisher.notified())
        .await
        .unwrap();
    publisher.take_all(&mut events);
    assert!(
        matches!(events[..], [Event::Settled { ok: true, .. }]),
        "{events:?}"
    );

    let outbox = Outbox::new();
    let consumer = Consumer {
        id: 9,
        connection: 1,
        channel: 1,
        tag: Arc::from("c"),
        no_ack: false,
        exclusive: false,
        priority: 0,
        credit: 2,
        credit_on_write: false,
        start: Some(ConsumeStart::Offset(1)),
        outbox: outbox.clone(),
    };
    let consumed = queue.request(|reply| QueueCmd::Consume { consumer, reply });
    consumed.await.unwrap().unwrap();
    let seqs = delivered(&outbox, 2).await;
    assert_eq!(seqs, [1, 2], "from offset 1, two on a credit of 2");
    queue
        .send(QueueCmd::Credit {
            consumer: 9,
            credit: 10,
        })
        .await
        .unwrap();
    assert_eq!(delivered(&outbox, 2).await, [3, 4]);
    let info = queue.info().await.unwrap();
    assert_eq!((info.messages, info.consumers), (5, 1));
}

/// The offsets of the next `count` deliveries in `outbox`.
async fn delivered(outbox: &Outbox, count: usize) -> Vec<u64> {
    let mut seqs = Vec::new();
    while seqs.len() < count {
        tokio::time::timeout(Duration::from_secs(5), outbox.notified())
            .await
            .unwrap();
        let mut events = Vec::new();
        outbox.take_all(&mut events);
        for event in events {
            match event {
                Event::Deliver(delivery) => seqs.push(delivery.seq),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert_eq!(seqs.len(), count, "no delivery beyond the credit");
    seqs
}
