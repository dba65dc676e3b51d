//! AMQP 1.0 flow control is enforced, not advisory (transport §2.5.6 and §2.6.7): a sender
//! past its link credit is detached with `amqp:link:transfer-limit-exceeded`, past the
//! session's incoming window the session ends with `amqp:session:window-violation`, and a
//! transfer on a handle no link holds ends the session with `amqp:session:unattached-handle`.
//! The broker keeps serving other clients. Raw frames: client libraries never misbehave so.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use warren_tests::amqp10_raw::{
    composite, contains, frame, handshake_bytes_with, read_until, str8, uint,
};
use warren_tests::{bounded, declare_queue, message_count, unique, TestBroker};

const LIMIT: Duration = Duration::from_secs(5);

/// SASL PLAIN as guest, open, begin (incoming window 1000) and a sending link on handle 0 to
/// `address`.
fn handshake(address: &str) -> Vec<u8> {
    let mut out = handshake_bytes_with(&[&str8("flow-test")]);
    let begin = composite(0x11, &[&[0x40], &uint(0), &uint(1000), &uint(1000)]);
    out.extend(frame(0, &begin));
    let target = composite(0x29, &[&str8(address)]);
    // name, handle 0, role sender (false), snd-settle-mode settled, rcv-settle-mode first,
    // source null, target, unsettled null, incomplete-unsettled false, initial-delivery-count 0
    let attach = composite(
        0x12,
        &[
            &str8("sender"),
            &uint(0),
            &[0x42],
            &[0x50, 0x01],
            &[0x50, 0x00],
            &[0x40],
            &target,
            &[0x40],
            &[0x42],
            &uint(0),
        ],
    );
    out.extend(frame(0, &attach));
    out
}

/// A settled single-frame transfer of a one-data-section message on `handle`.
fn transfer(handle: u32, delivery_id: u32) -> Vec<u8> {
    let tag = delivery_id.to_be_bytes();
    let mut tag_field = vec![0xa0, 4];
    tag_field.extend_from_slice(&tag);
    let performative = composite(
        0x14,
        &[
            &uint(handle),
            &uint(delivery_id),
            &tag_field,
            &uint(0),
            &[0x41],
        ],
    );
    let message = [0x00, 0x53, 0x75, 0xa0, 2, b'h', b'i'];
    frame(0, &[performative.as_slice(), &message].concat())
}

async fn send_transfers(broker: &TestBroker, queue: &str, count: u32, handle: u32) -> TcpStream {
    let mut socket = bounded!(TcpStream::connect(broker.addr())).unwrap();
    let mut bytes = handshake(&format!("/queues/{queue}"));
    for id in 0..count {
        bytes.extend(transfer(handle, id));
    }
    socket.write_all(&bytes).await.unwrap();
    socket
}

#[tokio::test]
async fn transfers_past_link_credit_detach_the_link() {
    let broker = TestBroker::start_with(|c| c.max_link_credit = 4).await;
    if broker.skip_if_external("sets max_link_credit") {
        return;
    }
    let (connection, channel) = broker.channel().await;
    let queue = unique("q-credit");
    declare_queue(&channel, &queue).await;
    let mut socket = send_transfers(&broker, &queue, 40, 0).await;
    let seen = read_until(&mut socket, b"amqp:link:transfer-limit-exceeded", LIMIT).await;
    assert!(
        contains(&seen, b"amqp:link:transfer-limit-exceeded"),
        "{seen:?}"
    );
    // At most the credit granted (re-granted per read) got in: never all 40.
    let count = message_count(&connection, &queue).await;
    assert!(count < 40, "{count} of 40 transfers were enqueued");
}

#[tokio::test]
async fn transfers_during_an_alarm_are_refused_not_enqueued() {
    let broker = TestBroker::start_with(|c| c.vm_memory_high_watermark = 0.0).await;
    if broker.skip_if_external("sets the memory high watermark") {
        return;
    }
    let (connection, channel) = broker.channel().await;
    let queue = unique("q-alarm");
    declare_queue(&channel, &queue).await;
    let mut socket = send_transfers(&broker, &queue, 300, 0).await;
    let seen = read_until(&mut socket, b"amqp:link:transfer-limit-exceeded", LIMIT).await;
    assert!(
        contains(&seen, b"amqp:link:transfer-limit-exceeded"),
        "{seen:?}"
    );
    assert_eq!(message_count(&connection, &queue).await, 0);
}

#[tokio::test]
async fn transfers_past_the_session_window_end_the_session() {
    let broker = TestBroker::start_with(|c| c.max_incoming_window = 4).await;
    if broker.skip_if_external("sets max_incoming_window") {
        return;
    }
    let (_connection, channel) = broker.channel().await;
    let queue = unique("q-window");
    declare_queue(&channel, &queue).await;
    let mut socket = send_transfers(&broker, &queue, 40, 0).await;
    let seen = read_until(&mut socket, b"amqp:session:window-violation", LIMIT).await;
    assert!(
        contains(&seen, b"amqp:session:window-violation"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_transfer_on_an_unattached_handle_ends_the_session() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("q-handle");
    declare_queue(&channel, &queue).await;
    let mut socket = send_transfers(&broker, &queue, 1, 7).await;
    let seen = read_until(&mut socket, b"amqp:session:unattached-handle", LIMIT).await;
    assert!(
        contains(&seen, b"amqp:session:unattached-handle"),
        "{seen:?}"
    );
    assert_eq!(message_count(&connection, &queue).await, 0);
    // Others carry on.
    let (_c, other) = broker.channel().await;
    declare_queue(&other, &unique("q-after")).await;
}
