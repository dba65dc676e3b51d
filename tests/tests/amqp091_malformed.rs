//! Malformed input on a raw socket: bad protocol headers, oversize frames, bad frame-end
//! octets, truncated method arguments, unknown frame types and methods. The broker answers with
//! the protocol's error and closes that connection, and keeps serving a healthy connection
//! opened before the bad one (checked after every case).

use std::time::Duration;

use lapin::{Channel, Connection};
use warren_tests::raw::{RawClient, RawError};
use warren_tests::wire::{self, method, reply, Args};
use warren_tests::{bounded, declare_queue, get_all, publish, unique, TestBroker};

/// A lapin connection that must keep working while another connection misbehaves.
struct Bystander {
    _connection: Connection,
    channel: Channel,
    queue: String,
}

impl Bystander {
    async fn new(broker: &TestBroker) -> Bystander {
        let (connection, channel) = broker.channel().await;
        let queue = unique("bystander");
        declare_queue(&channel, &queue).await;
        Bystander {
            _connection: connection,
            channel,
            queue,
        }
    }

    async fn still_works(&self) {
        publish(&self.channel, "", &self.queue, b"still here").await;
        assert_eq!(get_all(&self.channel, &self.queue).await, ["still here"]);
    }
}

/// Handshaken raw connection with frame_max 4096 and channel 1 open.
async fn session(broker: &TestBroker) -> RawClient {
    RawClient::session(broker.addr(), 4096).await
}

fn publish_method(routing_key: &str) -> Vec<u8> {
    wire::basic_publish(1, "", routing_key, false)
}

/// Expects connection.close with `code`, answers close-ok, and expects the socket to close.
async fn expect_hard_close(client: &mut RawClient, code: u16) -> warren_tests::raw::Close {
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, code, "{close:?}");
    client.send_connection_close_ok().await;
    // RabbitMQ 3.10.8 stops reading after a frame error and closes the socket 3 s later.
    let closed = client.wait_for_close(Duration::from_secs(5)).await;
    assert!(closed.is_some(), "socket still open after the close");
    close
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_frame_above_frame_max_is_501_frame_error() {
    let broker = TestBroker::start().await;
    let bystander = Bystander::new(&broker).await;
    let mut client = session(&broker).await;
    let mut bytes = publish_method(&bystander.queue);
    bytes.extend(wire::content_header_frame(1, 5000));
    bytes.extend(wire::frame(wire::FRAME_BODY, 1, &[b'x'; 5000]));
    client.send(&bytes).await;
    let close = expect_hard_close(&mut client, reply::FRAME_ERROR).await;
    // RabbitMQ 3.10.8: "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,5000,4088}"
    assert!(close.text.starts_with("FRAME_ERROR"), "{close:?}");
    bystander.still_works().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_frame_above_frame_max_is_501_frame_error() {
    let broker = TestBroker::start().await;
    let bystander = Bystander::new(&broker).await;
    let mut client = session(&broker).await;
    let long_value = "v".repeat(200);
    let entries: Vec<u8> = (0..40)
        .flat_map(|i| wire::table_entry_str(&format!("k{i}"), &long_value))
        .collect();
    let args = Args::new()
        .short(0)
        .shortstr("q")
        .bits(&[false; 5])
        .table(&entries)
        .build();
    client
        .send(&wire::method_frame(1, method::QUEUE_DECLARE, &args))
        .await;
    let close = expect_hard_close(&mut client, reply::FRAME_ERROR).await;
    assert!(close.text.starts_with("FRAME_ERROR"), "{close:?}");
    bystander.still_works().await;
}

/// A frame header announcing 4 GiB must be refused from the header alone, before the broker
/// tries to buffer it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frame_size_of_4_gib_is_501_without_waiting_for_the_payload() {
    let broker = TestBroker::start().await;
    let bystander = Bystander::new(&broker).await;
    let mut client = session(&broker).await;
    client
        .send(&[wire::FRAME_METHOD, 0, 1, 0xff, 0xff, 0xff, 0xff])
        .await;
    expect_hard_close(&mut client, reply::FRAME_ERROR).await;
    bystander.still_works().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frame_end_octet_is_501() {
    let broker = TestBroker::start().await;
    let bystander = Bystander::new(&broker).await;
    let mut client = session(&broker).await;
    let args = Args::new().long(0).short(1).bits(&[false]).build();
    let mut frame = wire::method_frame(1, method::BASIC_QOS, &args);
    *frame.last_mut().unwrap() = 0x00;
    client.send(&frame).await;
    let close = expect_hard_close(&mut client, reply::FRAME_ERROR).await;
    // RabbitMQ 3.10.8: "FRAME_ERROR - type 1, all octets = <<...>>: {invalid_frame_end_marker,0}"
    assert!(
        close.text.contains("invalid_frame_end_marker") || close.text.contains("frame end"),
        "{close:?}"
    );
    bystander.still_works().await;
}

/// queue.declare whose arguments stop in the middle of the queue name.
/// RabbitMQ 3.10.8: 501 "FRAME_ERROR - cannot decode <<0,0,5,97>>" naming class 50 method 10;
/// the spec's 502 SYNTAX_ERROR is accepted too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_method_arguments_are_a_connection_error() {
    let broker = TestBroker::start().await;
    let bystander = Bystander::new(&broker).await;
    let mut client = session(&broker).await;
    client
        .send(&wire::method_frame(
            1,
            method::QUEUE_DECLARE,
            &[0, 0, 5, b'a'],
        ))
        .await;
    let close = client.expect_connection_close().await;
    assert!(
        close.code == reply::FRAME_ERROR || close.code == reply::SYNTAX_ERROR,
        "{close:?}"
    );
    assert_eq!(
        (close.class_id, close.method_id),
        method::QUEUE_DECLARE,
        "{close:?}"
    );
    client.send_connection_close_ok().await;
    assert!(client
        .wait_for_close(Duration::from_secs(5))
        .await
        .is_some());
    bystander.still_works().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_frame_then_disconnect_leaves_the_broker_healthy() {
    let broker = TestBroker::start().await;
    let bystander = Bystander::new(&broker).await;
    let mut client = session(&broker).await;
    // Announce 100 payload bytes, send 10, hang up.
    let mut partial = vec![wire::FRAME_METHOD, 0, 1, 0, 0, 0, 100];
    partial.extend_from_slice(&[0; 10]);
    client.send(&partial).await;
    drop(client);
    bystander.still_works().await;
    // And new connections are still accepted.
    let _fresh = session(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_frame_type_is_501() {
    let broker = TestBroker::start().await;
    let bystander = Bystander::new(&broker).await;
    let mut client = session(&broker).await;
    client.send(&wire::frame(9, 0, &[1, 2, 3])).await;
    let close = client.expect_connection_close().await;
    // RabbitMQ 3.10.8: "FRAME_ERROR - type 9, all octets = <<1,2,3>>: unknown_frame"
    assert_eq!(close.code, reply::FRAME_ERROR, "{close:?}");
    bystander.still_works().await;
}

/// Unknown class or method ids. RabbitMQ 3.10.8 drops the socket without a connection.close;
/// a broker that does send one must use 540 NOT_IMPLEMENTED or 503 COMMAND_INVALID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_method_or_class_closes_the_connection() {
    let broker = TestBroker::start().await;
    let bystander = Bystander::new(&broker).await;
    for id in [(60, 99), (99, 1)] {
        let mut client = session(&broker).await;
        client.send(&wire::method_frame(1, id, &[])).await;
        if let Some(close) = client.expect_close_or_eof(Duration::from_secs(5)).await {
            let allowed = [
                reply::NOT_IMPLEMENTED,
                reply::COMMAND_INVALID,
                reply::FRAME_ERROR,
            ];
            assert!(allowed.contains(&close.code), "{id:?}: {close:?}");
        }
    }
    bystander.still_works().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_request_instead_of_protocol_header_gets_the_amqp_header() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client
        .send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    let answer = client.read_frame().await;
    assert_eq!(
        answer,
        Err(RawError::ProtocolHeader(wire::PROTOCOL_HEADER.to_vec()))
    );
    assert!(
        client
            .wait_for_close(Duration::from_secs(5))
            .await
            .is_some(),
        "then the socket closes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_protocol_versions_get_the_0_9_1_header() {
    let broker = TestBroker::start().await;
    let headers: [&[u8]; 4] = [
        b"AMQP\x01\x01\x00\x0a", // 0-10
        b"AMQP\x00\x00\x09\x02", // 0-9-2
        b"AMQP\x02\x01\x00\x00", // protocol id 2 (TLS; id 3 is AMQP 1.0's SASL layer)
        b"AMQX\x00\x00\x09\x01", // not AMQP at all
    ];
    for header in headers {
        let mut client = RawClient::connect(broker.addr()).await;
        client.send(header).await;
        let answer = client.read_frame().await;
        let expected = Err(RawError::ProtocolHeader(wire::PROTOCOL_HEADER.to_vec()));
        assert_eq!(answer, expected, "for header {header:?}");
        assert!(
            client
                .wait_for_close(Duration::from_secs(5))
                .await
                .is_some(),
            "{header:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_before_the_protocol_header_is_refused() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client
        .send(&wire::method_frame(
            0,
            method::CONNECTION_START_OK,
            &[0; 16],
        ))
        .await;
    let answer = client.read_frame().await;
    assert_eq!(
        answer,
        Err(RawError::ProtocolHeader(wire::PROTOCOL_HEADER.to_vec()))
    );
    assert!(client
        .wait_for_close(Duration::from_secs(5))
        .await
        .is_some());
}

/// A client that sends part of a protocol header and then closes its side is let go at once, not
/// after the handshake timeout: its task holds no slot for 10 s, and a broker shutting down
/// does not wait for it (a shell's `echo > /dev/tcp/host/5672` port probe does this).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn part_of_a_header_then_close_is_let_go_at_once() {
    let broker = TestBroker::start().await;
    let bystander = Bystander::new(&broker).await;
    // Not a header at all; the first half of AMQP 1.0's; the first half of AMQP 0.9.1's.
    let starts: [&[u8]; 3] = [b"\n", b"AMQP", b"AMQP\x00"];
    for start in starts {
        let mut client = RawClient::connect(broker.addr()).await;
        client.send(start).await;
        client.finish().await;
        assert!(
            client
                .wait_for_close(Duration::from_secs(3))
                .await
                .is_some(),
            "the broker still holds a connection that sent {start:?} and closed"
        );
    }
    bystander.still_works().await;
}

/// A broker that stops does not wait for clients still in their handshake: one that said
/// nothing, one that sent half a header, one that sent the header and no start-ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_handshakes() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restarts the broker") {
        return;
    }
    let _silent = RawClient::connect(broker.addr()).await;
    let mut half = RawClient::connect(broker.addr()).await;
    half.send(b"AMQP").await;
    let mut started = RawClient::connect(broker.addr()).await;
    started.send(wire::PROTOCOL_HEADER).await;
    started.expect_start().await;
    let before = std::time::Instant::now();
    let broker = broker.restart().await;
    // The grace period for open connections is 5 s; none of these is open.
    let took = before.elapsed();
    assert!(took < Duration::from_secs(3), "the restart took {took:?}");
    Bystander::new(&broker).await.still_works().await;
}

/// A client that connects and says nothing is eventually dropped (RabbitMQ's handshake timeout
/// is 10 s; this only checks the broker keeps serving others meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_does_not_block_others() {
    let broker = TestBroker::start().await;
    let _silent = RawClient::connect(broker.addr()).await;
    let mut half = RawClient::connect(broker.addr()).await;
    half.send(b"AMQP").await;
    let bystander = Bystander::new(&broker).await;
    bystander.still_works().await;
    bounded!(bystander.channel.close(200, "OK".into())).unwrap();
}
