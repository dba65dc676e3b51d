//! A receiving link's source filters (AMQP 1.0 §3.5.8): Warren applies a filter or leaves it
//! out of the attach reply, never echoes one it does not apply. A classic queue takes no
//! `rabbitmq:stream-offset-spec` (it only hands out its head), so the reply's source has no
//! filter and the link reads from the head. Raw frames: the reply's source is what is checked.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use warren_tests::amqp10_raw::{
    composite, contains, frame, handshake_bytes_with, read_until, str8, uint,
};
use warren_tests::{bounded, declare_queue, publish, unique, TestBroker};

const LIMIT: Duration = Duration::from_secs(5);

/// A `sym8` symbol.
fn sym8(text: &str) -> Vec<u8> {
    let mut out = vec![0xa3, text.len() as u8];
    out.extend_from_slice(text.as_bytes());
    out
}

/// The filter set `{ "rabbitmq:stream-offset-spec": described("rabbitmq:stream-offset-spec",
/// "first") }` as a `map8`.
fn offset_filter() -> Vec<u8> {
    let name = "rabbitmq:stream-offset-spec";
    let mut pairs = sym8(name);
    pairs.push(0x00); // described
    pairs.extend(sym8(name));
    pairs.extend(str8("first"));
    let mut out = vec![0xc1, (pairs.len() + 1) as u8, 2];
    out.extend(pairs);
    out
}

/// SASL, open, begin, a receiving link on handle 0 from `address` with the offset filter, and
/// 10 credit.
fn receive_with_filter(address: &str) -> Vec<u8> {
    let mut out = handshake_bytes_with(&[&str8("filter-test")]);
    let begin = composite(0x11, &[&[0x40], &uint(0), &uint(1000), &uint(1000)]);
    out.extend(frame(0, &begin));
    let null = [0x40u8];
    // address, durable, expiry-policy, timeout, dynamic, dynamic-node-properties,
    // distribution-mode, filter
    let source = composite(
        0x28,
        &[
            &str8(address),
            &null,
            &null,
            &null,
            &null,
            &null,
            &null,
            &offset_filter(),
        ],
    );
    // name, handle 0, role receiver (true), snd-settle-mode settled, rcv-settle-mode first,
    // source, target null
    let attach = composite(
        0x12,
        &[
            &str8("filter-link"),
            &uint(0),
            &[0x41],
            &[0x50, 0x01],
            &[0x50, 0x00],
            &source,
            &null,
        ],
    );
    out.extend(frame(0, &attach));
    // next-incoming-id, incoming-window, next-outgoing-id, outgoing-window, handle,
    // delivery-count, link-credit
    let flow = composite(
        0x13,
        &[
            &uint(0),
            &uint(1000),
            &uint(0),
            &uint(1000),
            &uint(0),
            &uint(0),
            &uint(10),
        ],
    );
    out.extend(frame(0, &flow));
    out
}

#[tokio::test]
async fn a_classic_queue_leaves_the_offset_filter_out_of_the_attach_reply() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("q-filter");
    declare_queue(&channel, &queue).await;
    publish(&channel, "", &queue, b"from-the-head").await;
    let mut socket = bounded!(TcpStream::connect(broker.addr())).unwrap();
    let address = format!("/queues/{queue}");
    socket
        .write_all(&receive_with_filter(&address))
        .await
        .unwrap();
    let seen = read_until(&mut socket, b"from-the-head", LIMIT).await;
    assert!(
        contains(&seen, address.as_bytes()),
        "no attach reply: {seen:?}"
    );
    assert!(
        !contains(&seen, b"rabbitmq:stream-offset-spec"),
        "the reply claims a filter a classic queue does not apply: {seen:?}"
    );
    assert!(
        contains(&seen, b"from-the-head"),
        "the link reads the queue from its head: {seen:?}"
    );
}
