//! Publisher confirms: every publish is acked, in order (a multiple ack may cover several),
//! unroutable messages are acked too, returns precede acks, and confirm and tx modes exclude
//! each other.

use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation, ExchangeKind};
use warren_tests::raw::{Handshake, RawClient};
use warren_tests::wire::{self, method, reply, Args};
use warren_tests::{
    bind_queue, bounded, confirm_channel, declare_queue, expect_amqp_error, get_all, unique,
    wait_for_message_count, ChannelWatch, TestBroker,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_publish_in_confirm_mode_is_acked() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("confirm-acked");
    declare_queue(&channel, &queue).await;
    let mut pending = Vec::new();
    for i in 0..50 {
        let body = format!("m{i}");
        let publish = channel.basic_publish(
            "".into(),
            queue.as_str().into(),
            Default::default(),
            body.as_bytes(),
            BasicProperties::default(),
        );
        pending.push(bounded!(publish).expect("publish"));
    }
    for confirm in pending {
        let confirmation = bounded!(confirm).expect("confirm");
        assert!(
            matches!(confirmation, Confirmation::Ack(None)),
            "{confirmation:?}"
        );
    }
    wait_for_message_count(&connection, &queue, 50).await;
}

/// On the wire: delivery tags count from 1, acks arrive in order, and a `multiple` ack covers
/// every tag up to it. Each of the N publishes is confirmed exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_on_the_wire_are_ordered_and_cover_every_publish_once() {
    let broker = TestBroker::start().await;
    let (mut client, _, tune) = RawClient::handshake(broker.addr(), Handshake::default()).await;
    client.open_channel(1).await;
    client
        .send_method(
            1,
            method::CONFIRM_SELECT,
            &Args::new().bits(&[false]).build(),
        )
        .await;
    client.expect_method(1, method::CONFIRM_SELECT_OK).await;
    let queue = unique("confirm-wire");
    let declare = Args::new()
        .short(0)
        .shortstr(&queue)
        .bits(&[false, false, false, true, false])
        .table(&[])
        .build();
    client.send_method(1, method::QUEUE_DECLARE, &declare).await;
    client.expect_method(1, method::QUEUE_DECLARE_OK).await;

    const COUNT: u64 = 40;
    let mut batch = Vec::new();
    for i in 0..COUNT {
        batch.extend(wire::publish_frames(
            1,
            "",
            &queue,
            false,
            format!("m{i}").as_bytes(),
            tune.frame_max,
        ));
    }
    client.send(&batch).await;

    let mut confirmed = 0u64;
    while confirmed < COUNT {
        let frame = client.next_frame().await;
        assert_eq!(frame.method_id(), Some(method::BASIC_ACK), "{frame:?}");
        let mut args = frame.args();
        let (tag, multiple) = (args.longlong(), args.octet() & 1 == 1);
        assert!(
            tag > confirmed && tag <= COUNT,
            "ack {tag} after {confirmed}: out of order"
        );
        if !multiple {
            assert_eq!(tag, confirmed + 1, "a single ack must not skip tags");
        }
        confirmed = tag;
    }
    let extra = client.read_frame_within(Duration::from_millis(300)).await;
    assert!(
        extra.is_err(),
        "no confirm beyond the last publish: {extra:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_publishes_are_acked_too() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let publish = channel.basic_publish(
        "amq.direct".into(),
        unique("nobody").as_str().into(),
        Default::default(),
        b"lost",
        BasicProperties::default(),
    );
    let confirmation = bounded!(bounded!(publish).unwrap()).unwrap();
    assert!(
        matches!(confirmation, Confirmation::Ack(None)),
        "{confirmation:?}"
    );
}

/// A mandatory unroutable publish in confirm mode: basic.return (312 NO_ROUTE) comes first,
/// then basic.ack. lapin attaches the return to the confirmation only when it came first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mandatory_return_arrives_before_the_ack() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let key = unique("nobody");
    let options = BasicPublishOptions {
        mandatory: true,
        ..Default::default()
    };
    let publish = channel.basic_publish(
        "amq.direct".into(),
        key.as_str().into(),
        options,
        b"returned",
        BasicProperties::default(),
    );
    let confirmation = bounded!(bounded!(publish).unwrap()).unwrap();
    let Confirmation::Ack(Some(returned)) = confirmation else {
        panic!("expected an ack carrying the returned message, got {confirmation:?}");
    };
    assert_eq!(returned.reply_code, reply::NO_ROUTE);
    assert_eq!(returned.reply_text.as_str(), "NO_ROUTE");
    assert_eq!(returned.delivery.exchange.as_str(), "amq.direct");
    assert_eq!(returned.delivery.routing_key.as_str(), key);
    assert_eq!(returned.delivery.data, b"returned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mandatory_return_precedes_ack_on_the_wire() {
    let broker = TestBroker::start().await;
    let (mut client, _, tune) = RawClient::handshake(broker.addr(), Handshake::default()).await;
    client.open_channel(1).await;
    client
        .send_method(
            1,
            method::CONFIRM_SELECT,
            &Args::new().bits(&[false]).build(),
        )
        .await;
    client.expect_method(1, method::CONFIRM_SELECT_OK).await;
    let key = unique("nobody");
    client
        .send(&wire::publish_frames(
            1,
            "amq.direct",
            &key,
            true,
            b"back",
            tune.frame_max,
        ))
        .await;

    let returned = client.expect_method(1, method::BASIC_RETURN).await;
    let mut args = returned.args();
    assert_eq!(args.short(), reply::NO_ROUTE);
    assert_eq!(args.shortstr(), "NO_ROUTE");
    assert_eq!(args.shortstr(), "amq.direct");
    assert_eq!(args.shortstr(), key);
    assert_eq!(client.read_content(1).await, b"back");
    let ack = client.expect_method(1, method::BASIC_ACK).await;
    assert_eq!(ack.args().longlong(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_select_is_idempotent() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    bounded!(channel.confirm_select(ConfirmSelectOptions::default()))
        .expect("second confirm.select");
    let queue = unique("confirm-twice");
    declare_queue(&channel, &queue).await;
    warren_tests::publish(&channel, "", &queue, b"x").await;
    assert_eq!(get_all(&channel, &queue).await, ["x"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_select_on_a_transactional_channel_is_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    bounded!(channel.tx_select()).unwrap();
    let result = bounded!(channel.confirm_select(ConfirmSelectOptions::default()));
    let text = expect_amqp_error(result, reply::PRECONDITION_FAILED);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - cannot switch from tx to confirm mode"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tx_select_on_a_confirm_channel_is_406() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let text = expect_amqp_error(bounded!(channel.tx_select()), reply::PRECONDITION_FAILED);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - cannot switch from confirm to tx mode"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_to_a_missing_exchange_in_confirm_mode_closes_the_channel() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let watch = ChannelWatch::new(&channel).await;
    let name = unique("confirm-nowhere");
    let publish = channel.basic_publish(
        name.as_str().into(),
        "k".into(),
        Default::default(),
        b"x",
        BasicProperties::default(),
    );
    let _ = bounded!(publish);
    let text = watch.expect_close(reply::NOT_FOUND).await;
    assert!(text.contains(&name), "{text}");
}

/// A confirm that waits for nothing goes out as soon as the queues have taken the publish in
/// their order, which may be before their turns deliver it: a get sent after the confirm
/// must still find the message in every queue it was routed to, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_message_is_in_every_queue_it_was_routed_to() {
    let broker = TestBroker::start().await;
    let publisher = broker.connect().await;
    let getter = broker.connect().await;
    let channel = confirm_channel(&publisher).await;
    let gets = bounded!(getter.create_channel()).expect("open a channel");
    let exchange = unique("confirm-fanout");
    let declare = channel.exchange_declare(
        exchange.as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    );
    bounded!(declare).expect("declare the fanout exchange");
    let mut queues = Vec::new();
    for i in 0..8 {
        let queue = unique(&format!("confirm-fanout-{i}"));
        declare_queue(&channel, &queue).await;
        bind_queue(&channel, &queue, &exchange, "").await;
        queues.push(queue);
    }
    for round in 0..100 {
        let body = format!("round {round}");
        let publish = channel.basic_publish(
            exchange.as_str().into(),
            "".into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            BasicProperties::default(),
        );
        let confirm = bounded!(publish).expect("publish");
        let confirmation = bounded!(confirm).expect("confirm");
        assert!(
            matches!(confirmation, Confirmation::Ack(None)),
            "{confirmation:?}"
        );
        for queue in &queues {
            let got = get_all(&gets, queue).await;
            assert_eq!(got, [body.as_str()], "{queue} after the confirm of {body}");
        }
    }
}
