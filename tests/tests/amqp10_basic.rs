//! AMQP 1.0 with fe2o3-amqp: send and receive on every address form, settlement modes,
//! durable messages, link credit, every outcome, large multi-frame messages and errors.
//!
//! These tests run on tokio's current-thread runtime: fe2o3-amqp 0.14 registers a sent
//! delivery as unsettled only after handing its transfer to the session task, so on a
//! multi-threaded runtime a broker in the same process can settle it before the sender looks
//! for it, and the outcome is lost (the send never completes).

use std::time::Duration;

use fe2o3_amqp::link::{ReceiverAttachError, SenderAttachError};
use fe2o3_amqp::types::messaging::{Message, Modified, Outcome};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Delivery, Receiver, Sender};
use warren_tests::{bounded, declare_queue, get_all, publish, unique, TestBroker};

async fn recv(receiver: &mut Receiver) -> Delivery<Value> {
    bounded!(receiver.recv::<Value>()).expect("a delivery")
}

fn text(delivery: &Delivery<Value>) -> String {
    match delivery.body() {
        Value::String(s) => s.clone(),
        other => panic!("expected a string body, got {other:?}"),
    }
}

#[tokio::test]
async fn send_and_receive_through_a_queue_address() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    declare_queue(&channel, &queue).await;
    let (mut connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut sender = bounded!(Sender::attach(&mut session, "s", address.as_str())).unwrap();
    for i in 0..10 {
        let outcome = bounded!(sender.send(format!("m{i}"))).unwrap();
        assert!(outcome.is_accepted(), "{outcome:?}");
    }
    let mut receiver = bounded!(Receiver::attach(&mut session, "r", address.as_str())).unwrap();
    for i in 0..10 {
        let delivery = recv(&mut receiver).await;
        assert_eq!(text(&delivery), format!("m{i}"));
        bounded!(receiver.accept(&delivery)).unwrap();
    }
    bounded!(sender.close()).unwrap();
    bounded!(receiver.close()).unwrap();
    bounded!(session.end()).unwrap();
    bounded!(connection.close()).unwrap();
    assert!(
        get_all(&channel, &queue).await.is_empty(),
        "every message was accepted"
    );
}

#[tokio::test]
async fn exchange_addresses_and_the_null_target_route() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    declare_queue(&channel, &queue).await;
    bounded!(channel.queue_bind(
        queue.as_str().into(),
        "amq.fanout".into(),
        "".into(),
        Default::default(),
        Default::default()
    ))
    .unwrap();
    let (_connection, mut session) = broker.amqp10().await;
    // /exchanges/:exchange/:routing-key through the default-like direct exchange.
    let direct = format!("/exchanges/amq.direct/{queue}");
    bounded!(channel.queue_bind(
        queue.as_str().into(),
        "amq.direct".into(),
        queue.as_str().into(),
        Default::default(),
        Default::default()
    ))
    .unwrap();
    let mut sender = bounded!(Sender::attach(&mut session, "direct", direct.as_str())).unwrap();
    assert!(bounded!(sender.send("direct")).unwrap().is_accepted());
    // /exchanges/:exchange
    let mut fanout = bounded!(Sender::attach(
        &mut session,
        "fanout",
        "/exchanges/amq.fanout"
    ))
    .unwrap();
    assert!(bounded!(fanout.send("fanout")).unwrap().is_accepted());
    // Unroutable: released.
    let nowhere = "/exchanges/amq.direct/no-such-key";
    let mut lost = bounded!(Sender::attach(&mut session, "lost", nowhere)).unwrap();
    let outcome = bounded!(lost.send("lost")).unwrap();
    assert!(outcome.is_released(), "{outcome:?}");
    // The null target with `to` per message.
    let mut anonymous = bounded!(Sender::builder()
        .name("anonymous")
        .target(fe2o3_amqp::types::messaging::Target::default())
        .attach(&mut session))
    .unwrap();
    let message = Message::builder()
        .properties(
            fe2o3_amqp::types::messaging::Properties::builder()
                .to(format!("/queues/{queue}"))
                .build(),
        )
        .value("anonymous".to_string())
        .build();
    assert!(bounded!(anonymous.send(message)).unwrap().is_accepted());
    let bad = Message::builder()
        .properties(
            fe2o3_amqp::types::messaging::Properties::builder()
                .to("/exchanges/no-such-exchange".to_string())
                .build(),
        )
        .value("bad".to_string())
        .build();
    let outcome = bounded!(anonymous.send(bad)).unwrap();
    assert!(matches!(outcome, Outcome::Rejected(_)), "{outcome:?}");
    let mut receiver = bounded!(Receiver::attach(
        &mut session,
        "r",
        format!("/queues/{queue}").as_str()
    ))
    .unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let delivery = recv(&mut receiver).await;
        got.push(text(&delivery));
        bounded!(receiver.accept(&delivery)).unwrap();
    }
    assert_eq!(got, ["direct", "fanout", "anonymous"]);
}

#[tokio::test]
async fn unknown_queue_and_exchange_are_not_found() {
    let broker = TestBroker::start().await;
    let (_connection, mut session) = broker.amqp10().await;
    let error = bounded!(Receiver::attach(&mut session, "r", "/queues/no-such-queue"))
        .err()
        .expect("attach to a missing queue fails");
    let text = format!("{error:?}");
    assert!(
        matches!(error, ReceiverAttachError::RemoteClosedWithError(_)) && text.contains("NotFound"),
        "{text}"
    );
    let error = bounded!(Sender::attach(
        &mut session,
        "s",
        "/exchanges/no-such-exchange"
    ))
    .err()
    .expect("attach to a missing exchange fails");
    let text = format!("{error:?}");
    assert!(
        matches!(error, SenderAttachError::RemoteClosedWithError(_)) && text.contains("NotFound"),
        "{text}"
    );
    // The session still works.
    let mut ok = bounded!(Sender::attach(&mut session, "ok", "/exchanges/amq.fanout")).unwrap();
    assert!(bounded!(ok.send("x")).unwrap().is_released());
}

#[tokio::test]
async fn released_modified_and_rejected_outcomes() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    declare_queue(&channel, &queue).await;
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut sender = bounded!(Sender::attach(&mut session, "s", address.as_str())).unwrap();
    for body in ["a", "b"] {
        assert!(bounded!(sender.send(body)).unwrap().is_accepted());
    }
    let mut receiver = bounded!(Receiver::attach(&mut session, "r", address.as_str())).unwrap();
    // released: requeued at its position, redelivered.
    let first = recv(&mut receiver).await;
    assert_eq!(text(&first), "a");
    bounded!(receiver.release(&first)).unwrap();
    let again = recv(&mut receiver).await;
    let again = if text(&again) == "b" {
        bounded!(receiver.accept(&again)).unwrap();
        recv(&mut receiver).await
    } else {
        again
    };
    assert_eq!(text(&again), "a");
    // modified, delivery-failed: requeued too.
    let modified = Modified {
        delivery_failed: Some(true),
        undeliverable_here: None,
        message_annotations: None,
    };
    bounded!(receiver.modify(&again, modified)).unwrap();
    let third = recv(&mut receiver).await;
    assert_eq!(text(&third), "a");
    // modified, undeliverable-here: dead-lettered or dropped (no DLX here: dropped).
    let gone = Modified {
        delivery_failed: Some(true),
        undeliverable_here: Some(true),
        message_annotations: None,
    };
    bounded!(receiver.modify(&third, gone)).unwrap();
    assert!(bounded!(sender.send("c")).unwrap().is_accepted());
    let fourth = recv(&mut receiver).await;
    assert_eq!(text(&fourth), "c");
    // rejected: dropped.
    bounded!(receiver.reject(&fourth, None)).unwrap();
    bounded!(receiver.close()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(get_all(&channel, &queue).await.is_empty());
}

#[tokio::test]
async fn link_credit_bounds_deliveries() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    declare_queue(&channel, &queue).await;
    for i in 0..10 {
        publish(&channel, "", &queue, format!("m{i}").as_bytes()).await;
    }
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut receiver = bounded!(Receiver::builder()
        .name("r")
        .source(address.as_str())
        .credit_mode(fe2o3_amqp::link::receiver::CreditMode::Manual)
        .attach(&mut session))
    .unwrap();
    bounded!(receiver.set_credit(3)).unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let delivery =
            bounded!(receiver.recv::<fe2o3_amqp::types::messaging::Body<Value>>()).unwrap();
        got.push(delivery);
    }
    // No more credit: nothing else arrives.
    let more = tokio::time::timeout(
        Duration::from_millis(300),
        receiver.recv::<fe2o3_amqp::types::messaging::Body<Value>>(),
    )
    .await;
    assert!(more.is_err(), "a delivery arrived without credit");
    for delivery in &got {
        bounded!(receiver.accept(delivery)).unwrap();
    }
    bounded!(receiver.set_credit(7)).unwrap();
    for _ in 0..7 {
        let delivery =
            bounded!(receiver.recv::<fe2o3_amqp::types::messaging::Body<Value>>()).unwrap();
        bounded!(receiver.accept(&delivery)).unwrap();
    }
    assert!(get_all(&channel, &queue).await.is_empty());
}

#[tokio::test]
async fn large_messages_span_many_frames_both_ways() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    declare_queue(&channel, &queue).await;
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut sender = bounded!(Sender::attach(&mut session, "s", address.as_str())).unwrap();
    // 1 MiB: eight frames of the broker's 128 KiB max-frame-size.
    let big: Vec<u8> = (0..1_048_576u32).map(|i| (i % 251) as u8).collect();
    let message = Message::builder()
        .data(fe2o3_amqp::types::primitives::Binary::from(big.clone()))
        .build();
    let outcome = bounded!(sender.send(message), Duration::from_secs(20)).unwrap();
    assert!(outcome.is_accepted());
    let mut receiver = bounded!(Receiver::attach(&mut session, "r", address.as_str())).unwrap();
    let delivery = bounded!(
        receiver.recv::<fe2o3_amqp::types::messaging::Body<Value>>(),
        Duration::from_secs(20)
    )
    .unwrap();
    let fe2o3_amqp::types::messaging::Body::Data(data) = delivery.body() else {
        panic!("expected a data body");
    };
    let bytes: Vec<u8> = data.iter().flat_map(|d| d.0.to_vec()).collect();
    assert_eq!(bytes.len(), big.len());
    assert!(bytes == big, "the body came back intact");
    bounded!(receiver.accept(&delivery)).unwrap();
}

#[tokio::test]
async fn presettled_sends_and_receives() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    declare_queue(&channel, &queue).await;
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut sender = bounded!(Sender::builder()
        .name("s")
        .target(address.as_str())
        .sender_settle_mode(fe2o3_amqp::types::definitions::SenderSettleMode::Settled)
        .attach(&mut session))
    .unwrap();
    for i in 0..5 {
        bounded!(sender.send(format!("p{i}"))).unwrap();
    }
    let mut receiver = bounded!(Receiver::builder()
        .name("r")
        .source(address.as_str())
        .sender_settle_mode(fe2o3_amqp::types::definitions::SenderSettleMode::Settled)
        .attach(&mut session))
    .unwrap();
    for i in 0..5 {
        let delivery = recv(&mut receiver).await;
        assert_eq!(text(&delivery), format!("p{i}"));
    }
    bounded!(receiver.close()).unwrap();
    assert!(
        get_all(&channel, &queue).await.is_empty(),
        "settled deliveries are gone"
    );
}

#[tokio::test]
async fn unsettled_deliveries_return_when_the_connection_closes() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    declare_queue(&channel, &queue).await;
    for i in 0..3 {
        publish(&channel, "", &queue, format!("m{i}").as_bytes()).await;
    }
    let (mut connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut receiver = bounded!(Receiver::attach(&mut session, "r", address.as_str())).unwrap();
    for _ in 0..3 {
        let _unsettled =
            bounded!(receiver.recv::<fe2o3_amqp::types::messaging::Body<Value>>()).unwrap();
    }
    drop(receiver);
    drop(session);
    let _ = bounded!(connection.close());
    warren_tests::wait_for_message_count(&broker.connect().await, &queue, 3).await;
    let got = bounded!(channel.basic_get(queue.as_str().into(), Default::default()))
        .unwrap()
        .expect("a message is back");
    assert!(
        got.delivery.redelivered,
        "a requeued delivery is marked redelivered"
    );
}

#[tokio::test]
async fn deleting_the_queue_detaches_its_receivers() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    declare_queue(&channel, &queue).await;
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut receiver = bounded!(Receiver::attach(&mut session, "r", address.as_str())).unwrap();
    bounded!(channel.queue_delete(queue.as_str().into(), Default::default())).unwrap();
    let error = bounded!(receiver.recv::<Value>())
        .err()
        .expect("the link is detached");
    assert!(
        format!("{error:?}").contains("ResourceDeleted"),
        "{error:?}"
    );
}

#[tokio::test]
async fn queue_credit_is_topped_up_within_max_queue_credit() {
    let broker = TestBroker::start_with(|c| c.max_queue_credit = 4).await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    declare_queue(&channel, &queue).await;
    for i in 0..50 {
        publish(&channel, "", &queue, format!("m{i}").as_bytes()).await;
    }
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut receiver = bounded!(Receiver::attach(&mut session, "r", address.as_str())).unwrap();
    for i in 0..50 {
        let delivery =
            bounded!(receiver.recv::<fe2o3_amqp::types::messaging::Body<Value>>()).unwrap();
        let fe2o3_amqp::types::messaging::Body::Data(data) = delivery.body() else {
            panic!("expected data");
        };
        assert_eq!(data[0].0.as_slice(), format!("m{i}").as_bytes());
        bounded!(receiver.accept(&delivery)).unwrap();
    }
    assert!(get_all(&channel, &queue).await.is_empty());
}
