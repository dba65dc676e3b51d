//! The classic queue's state machine driven directly: commands in, outbox events out.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::consumer::{Consumer, Event, Outbox};
use crate::message::{Format, Message};
use crate::queue::{QueueCmd, QueueDef, QueueHandle, SettleOp};
use crate::value::Table;

fn queue() -> ClassicQueue {
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
    ClassicQueue::new(QueueHandle::new(def, data_tx, control_tx, 1_000))
}

fn message(body: &'static str) -> Arc<Message> {
    Arc::new(Message {
        format: Format::Amqp091,
        exchange: Bytes::new(),
        routing_key: Bytes::from_static(b"q"),
        properties: Bytes::from_static(&[0, 0]),
        body: Bytes::from_static(body.as_bytes()),
        persistent: false,
    })
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
            Event::ConsumerCancelled { .. } | Event::Confirmed { .. } => None,
        })
        .collect()
}

fn publish(queue: &mut ClassicQueue, bodies: &[&'static str]) {
    queue.handle(QueueCmd::Publish {
        messages: bodies.iter().map(|b| message(b)).collect(),
        confirm: None,
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
    queue.dispatch();
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
    queue.dispatch();
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
    queue.dispatch();
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
    queue.dispatch();
    let order: Vec<u64> = delivered(&outbox).into_iter().map(|(c, ..)| c).collect();
    assert_eq!(order, [1, 2, 1, 2]);
}

#[test]
fn no_delivery_without_credit_and_acked_messages_are_gone() {
    let mut queue = queue();
    let outbox = Outbox::new();
    consume(&mut queue, consumer(1, 1, 0, &outbox));
    publish(&mut queue, &["m1", "m2"]);
    queue.dispatch();
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
    queue.dispatch();
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
    queue.dispatch();
    assert!(
        !queue.in_flow(),
        "a slow acknowledging consumer must not block publishers"
    );
}

/// Credit flow from queue to publisher: a publisher that has taken all of a queue's credit
/// makes the next one wait until the queue has taken its batch; a batch larger than the
/// whole credit still goes.
#[tokio::test]
async fn publishers_wait_for_credit_until_the_queue_takes_their_batch() {
    let def = QueueDef {
        name: Arc::from("credit"),
        vhost: Arc::from("/"),
        durable: false,
        exclusive_owner: None,
        auto_delete: false,
        arguments: Table::new(),
    };
    let handle = spawn(def, Box::new(|| {}), None, None, 4);
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
