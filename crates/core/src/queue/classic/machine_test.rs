//! The classic queue's state machine driven directly: commands in, outbox events out.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::consumer::{Consumer, Event, Outbox};
use crate::message::Message;
use crate::queue::classic::ready::Ready;
use crate::queue::classic::spawn;
use crate::queue::{QueueArgs, QueueCmd, QueueDef, QueueHandle, QueueType, SettleOp, Setup};
use crate::value::Table;

fn queue() -> ClassicQueue {
    queue_with(QueueArgs::default())
}

fn queue_with(args: QueueArgs) -> ClassicQueue {
    let def = QueueDef {
        name: Arc::from("q"),
        vhost: Arc::from("/"),
        durable: false,
        exclusive_owner: None,
        auto_delete: false,
        arguments: Table::new(),
    };
    let (data_tx, _data_rx) = mpsc::channel(1);
    let (control_tx, _control_rx) = mpsc::channel(1);
    ClassicQueue::new(QueueHandle::new(
        QueueType::Classic,
        def,
        args,
        data_tx,
        control_tx,
        1_000,
    ))
}

/// Ends a turn as the driver does: dispatch, then carry out the actions.
fn dispatch(queue: &mut ClassicQueue) {
    queue.dispatch();
    crate::queue::classic::apply_actions(queue);
}

fn message(body: &'static str) -> Arc<Message> {
    Arc::new(Message::new(
        Bytes::new(),
        Bytes::from_static(b"q"),
        Bytes::from_static(&[0, 0]),
        Bytes::from_static(body.as_bytes()),
    ))
}

fn consumer(id: u64, credit: u32, priority: i64, outbox: &Arc<Outbox>) -> Consumer {
    Consumer {
        id,
        connection: 1,
        channel: 1,
        tag: Arc::from(format!("c{id}").as_str()),
        no_ack: false,
        exclusive: false,
        priority,
        credit,
        credit_on_write: false,
        start: None,
        outbox: outbox.clone(),
    }
}

fn consume(queue: &mut ClassicQueue, consumer: Consumer) {
    let (reply, mut rx) = oneshot::channel();
    queue.handle(QueueCmd::Consume { consumer, reply });
    assert!(rx.try_recv().unwrap().is_ok());
}

/// (consumer id, body, redelivered, seq) of every delivery waiting in `outbox`.
fn delivered(outbox: &Outbox) -> Vec<(u64, String, bool, u64)> {
    let mut events = Vec::new();
    outbox.take_all(&mut events);
    events
        .into_iter()
        .filter_map(|event| match event {
            Event::Deliver(d) => Some((
                d.consumer,
                String::from_utf8(d.message.body.to_vec()).unwrap(),
                d.redelivered,
                d.seq,
            )),
            Event::ConsumerCancelled { .. }
            | Event::Settled { .. }
            | Event::PublishRejected { .. } => None,
        })
        .collect()
}

fn publish(queue: &mut ClassicQueue, bodies: &[&'static str]) {
    queue.handle(QueueCmd::Publish {
        messages: bodies.iter().map(|b| message(b)).collect(),
        confirm: None,
        tags: Vec::new(),
        credit: None,
    });
}

#[test]
fn a_message_beyond_the_memory_budget_costs_32_bytes() {
    assert!(
        std::mem::size_of::<Ready>() <= 32,
        "{}",
        std::mem::size_of::<Ready>()
    );
}

#[test]
fn requeued_messages_return_to_their_original_position() {
    tracing::info!("phase: three delivered, one left ready");
    let mut queue = queue();
    let outbox = Outbox::new();
    publish(&mut queue, &["a", "b", "c", "d"]);
    consume(&mut queue, consumer(7, 3, 0, &outbox));
    dispatch(&mut queue);
    let first = delivered(&outbox);
    assert_eq!(first.len(), 3);

    tracing::info!("phase: requeue b and a (out of order), then grant credit for all");
    let seqs = vec![first[1].3, first[0].3];
    queue.handle(QueueCmd::Settle {
        op: SettleOp::Requeue,
        seqs,
    });
    queue.handle(QueueCmd::Credit {
        consumer: 7,
        credit: 10,
    });
    dispatch(&mut queue);
    let again: Vec<(String, bool)> = delivered(&outbox)
        .into_iter()
        .map(|(_, body, r, _)| (body, r))
        .collect();
    let expected = [("a", true), ("b", true), ("d", false)];
    let expected: Vec<(String, bool)> = expected.iter().map(|(b, r)| (b.to_string(), *r)).collect();
    assert_eq!(again, expected);
}

#[test]
fn higher_priority_consumers_are_served_first_while_they_have_credit() {
    let mut queue = queue();
    let outbox = Outbox::new();
    consume(&mut queue, consumer(1, 10, 0, &outbox));
    consume(&mut queue, consumer(2, 2, 5, &outbox));
    publish(&mut queue, &["m1", "m2", "m3", "m4"]);
    dispatch(&mut queue);
    let order: Vec<u64> = delivered(&outbox).into_iter().map(|(c, ..)| c).collect();
    assert_eq!(
        order,
        [2, 2, 1, 1],
        "the priority-5 consumer takes its 2, then the other"
    );
}

#[test]
fn equal_consumers_are_served_round_robin() {
    let mut queue = queue();
    let outbox = Outbox::new();
    consume(&mut queue, consumer(1, 10, 0, &outbox));
    consume(&mut queue, consumer(2, 10, 0, &outbox));
    publish(&mut queue, &["m1", "m2", "m3", "m4"]);
    dispatch(&mut queue);
    let order: Vec<u64> = delivered(&outbox).into_iter().map(|(c, ..)| c).collect();
    assert_eq!(order, [1, 2, 1, 2]);
}

#[test]
fn no_delivery_without_credit_and_acked_messages_are_gone() {
    let mut queue = queue();
    let outbox = Outbox::new();
    consume(&mut queue, consumer(1, 1, 0, &outbox));
    publish(&mut queue, &["m1", "m2"]);
    dispatch(&mut queue);
    let first = delivered(&outbox);
    assert_eq!(first.len(), 1, "credit 1: one delivery");
    queue.handle(QueueCmd::Settle {
        op: SettleOp::Ack,
        seqs: vec![first[0].3],
    });
    assert_eq!(queue.info().messages, 1);
    queue.handle(QueueCmd::Settle {
        op: SettleOp::Requeue,
        seqs: vec![first[0].3],
    });
    assert_eq!(
        queue.info().messages,
        1,
        "an acked message cannot be requeued"
    );
}

#[tokio::test(start_paused = true)]
async fn flow_needs_a_backlog_in_front_of_fast_consumers_that_keep_taking() {
    let mut queue = queue();
    let outbox = Outbox::new();
    let backlog: Vec<&'static str> = vec!["m"; QUEUE_FLOW_BACKLOG_MAX + 10];
    publish(&mut queue, &backlog);
    assert!(
        !queue.in_flow(),
        "no consumers: messages are buffered, publishers never wait"
    );

    let mut fast = consumer(1, 5, 0, &outbox);
    fast.credit_on_write = true;
    consume(&mut queue, fast);
    dispatch(&mut queue);
    assert!(
        queue.in_flow(),
        "a consumer taking all it is sent is behind: flow"
    );

    tokio::time::advance(Duration::from_millis(QUEUE_FLOW_STALL_MS + 1)).await;
    assert!(
        !queue.in_flow(),
        "the consumer stopped taking deliveries: publishers resume"
    );
}

#[test]
fn prefetch_limited_consumers_never_put_the_queue_in_flow() {
    let mut queue = queue();
    let outbox = Outbox::new();
    let backlog: Vec<&'static str> = vec!["m"; QUEUE_FLOW_BACKLOG_MAX + 10];
    publish(&mut queue, &backlog);
    consume(&mut queue, consumer(1, 5, 0, &outbox));
    dispatch(&mut queue);
    assert!(
        !queue.in_flow(),
        "a slow acknowledging consumer must not block publishers"
    );
}

#[test]
fn single_active_consumer_fails_over_to_the_highest_priority() {
    let args = QueueArgs {
        single_active_consumer: true,
        ..Default::default()
    };
    let mut queue = queue_with(args);
    let outbox = Outbox::new();
    consume(&mut queue, consumer(1, 10, 0, &outbox));
    consume(&mut queue, consumer(2, 10, 0, &outbox));
    consume(&mut queue, consumer(3, 10, 7, &outbox));
    publish(&mut queue, &["m1", "m2"]);
    dispatch(&mut queue);
    let order: Vec<u64> = delivered(&outbox).into_iter().map(|(c, ..)| c).collect();
    assert_eq!(
        order,
        [1, 1],
        "the first registered is active, even below priority 7"
    );

    tracing::info!("phase: the active one leaves");
    queue.handle(QueueCmd::Cancel {
        consumer: 1,
        reply: None,
    });
    publish(&mut queue, &["m3"]);
    dispatch(&mut queue);
    let order: Vec<u64> = delivered(&outbox).into_iter().map(|(c, ..)| c).collect();
    assert_eq!(order, [3], "failover to the highest priority");
    assert_eq!(queue.info().consumers, 2);
}

#[test]
fn drop_head_keeps_the_newest_and_an_expired_message_is_never_delivered() {
    let args = QueueArgs {
        max_length: Some(2),
        ..Default::default()
    };
    let mut queue = queue_with(args);
    publish(&mut queue, &["m1", "m2", "m3"]);
    dispatch(&mut queue);
    assert_eq!(queue.info().messages, 2);

    tracing::info!("phase: a message whose deadline passed, behind one that has none");
    let mut expiring = Message::new(
        Bytes::new(),
        Bytes::from_static(b"q"),
        Bytes::from_static(&[0, 0]),
        Bytes::from_static(b"short"),
    );
    expiring.expiration_ms = Some(0);
    let mut queue = queue_with(QueueArgs::default());
    publish(&mut queue, &["first"]);
    queue.handle(QueueCmd::Publish {
        messages: vec![Arc::new(expiring)],
        confirm: None,
        tags: Vec::new(),
        credit: None,
    });
    queue.begin_turn(); // the next turn: its clock is at or past the deadline
    assert_eq!(queue.info().messages, 1, "expired where it stood");
    let outbox = Outbox::new();
    consume(&mut queue, consumer(1, 10, 0, &outbox));
    dispatch(&mut queue);
    let bodies: Vec<String> = delivered(&outbox).into_iter().map(|(_, b, ..)| b).collect();
    assert_eq!(bodies, ["first"]);
}

/// Credit flow from queue to publisher: a publisher that has taken all of a queue's credit
/// makes the next one wait until the queue has taken its batch; a batch larger than the
/// whole credit still goes.
fn spawn_queue(name: &str, credit: u32) -> QueueHandle {
    let def = QueueDef {
        name: Arc::from(name),
        vhost: Arc::from("/"),
        durable: false,
        exclusive_owner: None,
        auto_delete: false,
        arguments: Table::new(),
    };
    let setup = Setup {
        args: QueueArgs::default(),
        on_auto_delete: Box::new(|| {}),
        storage: None,
        recovered: None,
        vhost: Weak::new(),
        credit,
        streams: None,
        restart: false,
    };
    spawn(def, setup)
}

#[tokio::test]
async fn publishers_wait_for_credit_until_the_queue_takes_their_batch() {
    let handle = spawn_queue("credit", 4);
    let first = handle.acquire_credit(100).await; // more than the credit: takes all 4
    let waiting = handle.clone();
    let mut second = tokio::spawn(async move { waiting.acquire_credit(1).await });
    let blocked = tokio::time::timeout(std::time::Duration::from_millis(100), &mut second).await;
    assert!(
        blocked.is_err(),
        "credit was exhausted, yet a publisher got more"
    );
    handle
        .send(QueueCmd::Publish {
            messages: vec![message("a"), message("b")],
            confirm: None,
            tags: Vec::new(),
            credit: Some(first),
        })
        .await
        .unwrap();
    let granted = tokio::time::timeout(std::time::Duration::from_secs(5), second).await;
    assert!(
        granted.is_ok(),
        "the queue took the batch but gave no credit back"
    );
    assert_eq!(handle.info().await.unwrap().messages, 2);
}

/// What sends the queue a get right after (say) seeing a confirm.
async fn get_body(handle: &QueueHandle) -> Option<String> {
    let got = handle
        .request(|reply| QueueCmd::Get {
            channel: 1,
            no_ack: true,
            reply,
        })
        .await
        .unwrap();
    got.map(|ok| String::from_utf8(ok.delivery.message.body.to_vec()).unwrap())
}

/// A batch the queue accepted ahead of its turn (so that its publisher could confirm it
/// first) is in the queue's order at once: a command sent after it sees it, though no turn
/// ran it yet, and running it afterwards neither loses nor repeats it.
#[tokio::test]
async fn an_accepted_publish_is_seen_by_what_is_sent_after_it_before_it_runs() {
    let handle = spawn_queue("accepted", 100);
    // The task starts idle; wait until it takes inline publishes.
    let mut batch = (vec![message("a")], None, Vec::new());
    for _ in 0..100 {
        match handle.try_accept(batch) {
            Ok(()) => break,
            Err(back) => batch = back,
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        get_body(&handle).await.as_deref(),
        Some("a"),
        "the get was sent after the accept and must see its message"
    );
    handle.run_accepted(); // the task's turn already ran it
    assert_eq!(get_body(&handle).await, None, "the message was run twice");

    handle
        .try_accept((vec![message("b"), message("c")], None, Vec::new()))
        .expect("an idle queue accepts a small batch");
    handle.run_accepted();
    assert_eq!(handle.info().await.unwrap().messages, 2);
    assert_eq!(get_body(&handle).await.as_deref(), Some("b"));
    assert_eq!(get_body(&handle).await.as_deref(), Some("c"));

    let large = (0..=crate::limits::INLINE_PUBLISH_MAX)
        .map(|_| message("x"))
        .collect();
    assert!(
        handle.try_accept((large, None, Vec::new())).is_err(),
        "a large batch goes through the mailbox"
    );
}

/// A count or a get in the same turn as a TTL-0 publish sees what the end of that turn would:
/// the message went to a waiting consumer, or it is gone.
#[test]
fn a_count_after_a_ttl_zero_publish_in_the_same_turn_sees_it_gone_or_delivered() {
    let args = QueueArgs {
        message_ttl_ms: Some(0),
        ..Default::default()
    };
    let mut queue = queue_with(args.clone());
    queue.begin_turn();
    publish(&mut queue, &["nobody"]);
    let (reply, mut rx) = oneshot::channel();
    queue.handle(QueueCmd::Info { reply });
    assert_eq!(rx.try_recv().unwrap().messages, 0, "no consumer: expired");
    let (reply, mut rx) = oneshot::channel();
    publish(&mut queue, &["got"]);
    queue.handle(QueueCmd::Get {
        channel: 1,
        no_ack: true,
        reply,
    });
    assert!(
        rx.try_recv().unwrap().is_none(),
        "basic.get is no waiting consumer"
    );
    dispatch(&mut queue);

    let mut queue = queue_with(args);
    let outbox = Outbox::new();
    consume(&mut queue, consumer(1, 10, 0, &outbox));
    queue.begin_turn();
    publish(&mut queue, &["taken"]);
    let (reply, mut rx) = oneshot::channel();
    queue.handle(QueueCmd::Info { reply });
    assert_eq!(rx.try_recv().unwrap().messages, 0, "delivered, not counted");
    dispatch(&mut queue);
    let bodies: Vec<String> = delivered(&outbox).into_iter().map(|(_, b, ..)| b).collect();
    assert_eq!(bodies, ["taken"]);
}

/// A small publish to an idle queue runs on the publisher's task; one that would overtake a
/// command sent before it, a large one, or one to a stopped queue goes to the queue's task.
#[tokio::test]
async fn an_idle_queue_takes_small_publishes_inline_and_never_out_of_order() {
    let handle = spawn_queue("inline", 1_000);
    let batch =
        |bodies: &[&'static str]| (bodies.iter().map(|b| message(b)).collect(), None, vec![]);
    assert!(
        handle.try_publish_inline(batch(&["a"])).is_ok(),
        "idle queue"
    );
    assert_eq!(handle.info().await.unwrap().messages, 1);

    let (reply, purged) = oneshot::channel();
    handle.send(QueueCmd::Purge { reply }).await.unwrap(); // waits in the mailbox
    assert_eq!(handle.pending(), 1);
    let back = handle.try_publish_inline(batch(&["b"]));
    assert!(
        back.is_err(),
        "a publish must not overtake the purge sent before it"
    );
    assert_eq!(
        purged.await.unwrap(),
        1,
        "the purge saw only the first message"
    );
    assert_eq!(handle.pending(), 0);
    assert!(handle.try_publish_inline(batch(&["c"])).is_ok());

    let large: Vec<&'static str> = vec!["x"; crate::limits::INLINE_PUBLISH_MAX + 1];
    assert!(
        handle.try_publish_inline(batch(&large)).is_err(),
        "large batches go to the task"
    );
    assert_eq!(handle.info().await.unwrap().messages, 1);

    let (reply, deleted) = oneshot::channel();
    let delete = QueueCmd::Delete {
        if_unused: false,
        if_empty: false,
        reply,
    };
    handle.send(delete).await.unwrap();
    assert_eq!(deleted.await.unwrap().unwrap(), 1);
    tokio::task::yield_now().await; // the task ends after the turn
    assert!(
        handle.try_publish_inline(batch(&["d"])).is_err(),
        "a deleted queue"
    );
}

/// A publish turn: the messages are enqueued and dispatched to waiting consumers.
fn publish_and_dispatch(queue: &mut ClassicQueue, bodies: &[&'static str]) {
    queue.turn([QueueCmd::Publish {
        messages: bodies.iter().map(|b| message(b)).collect(),
        confirm: None,
        tags: Vec::new(),
        credit: None,
    }]);
    crate::queue::classic::apply_actions(queue);
}

/// Whether the connection behind `outbox` would wake now (a push since its last wait).
async fn wakes(outbox: &Outbox) -> bool {
    tokio::time::timeout(std::time::Duration::from_millis(1), outbox.notified())
        .await
        .is_ok()
}

#[tokio::test(start_paused = true)]
async fn a_quiet_outbox_takes_deliveries_without_waking_its_connection() {
    let outbox = Outbox::new();
    let mut queue = queue();
    consume(&mut queue, consumer(1, 100, 0, &outbox));
    let _ = wakes(&outbox).await;

    outbox.quiet_for(2, 1024);
    publish_and_dispatch(&mut queue, &["a"]);
    assert!(!wakes(&outbox).await, "one delivery fits the quiet spell");
    publish_and_dispatch(&mut queue, &["b", "c"]);
    assert!(
        wakes(&outbox).await,
        "two more do not: the connection is woken"
    );
    publish_and_dispatch(&mut queue, &["d"]);
    assert!(wakes(&outbox).await, "the spell ended when it overflowed");
    assert_eq!(delivered(&outbox).len(), 4, "nothing is lost either way");

    outbox.quiet_for(10, 1);
    publish_and_dispatch(&mut queue, &["ef"]);
    assert!(
        wakes(&outbox).await,
        "more bytes than the spell allows wake it"
    );

    outbox.quiet_for(10, 1024);
    let _ = delivered(&outbox);
    publish_and_dispatch(&mut queue, &["g"]);
    assert!(wakes(&outbox).await, "taking the events ends the spell");

    outbox.quiet_for(10, 1024);
    outbox.push(Event::Settled {
        ticket: 1,
        ok: true,
    });
    assert!(wakes(&outbox).await, "anything but a delivery wakes it");
}

/// The interface carries a consumer's start; a classic queue, which only hands out its head,
/// refuses one instead of starting at the head anyway.
#[test]
fn a_consumer_with_a_start_is_refused_by_a_classic_queue() {
    let mut queue = queue();
    let outbox = Outbox::new();
    let mut consumer = consumer(1, 10, 0, &outbox);
    consumer.start = Some(crate::queue::ConsumeStart::First);
    let (reply, mut rx) = oneshot::channel();
    queue.handle(QueueCmd::Consume { consumer, reply });
    let refused = rx.try_recv().unwrap().expect_err("refused");
    assert!(
        refused
            .to_string()
            .contains("cannot start a consumer at First"),
        "{refused}"
    );
    publish(&mut queue, &["a"]);
    dispatch(&mut queue);
    assert!(delivered(&outbox).is_empty(), "no consumer was added");
}
