//! Protocol errors from well-formed but wrong frame sequences: methods on unopened channels,
//! double channel.open, content frames out of place, connection methods on a channel, channel
//! methods on channel 0; and channel-level errors that leave the connection usable.

use warren_tests::raw::{Handshake, RawClient};
use warren_tests::wire::{self, method, reply, Args};
use warren_tests::{bounded, declare_queue, unique, ChannelWatch, TestBroker};

async fn session(broker: &TestBroker) -> RawClient {
    let (mut client, _, _) = RawClient::handshake(broker.addr(), Handshake::default()).await;
    client.open_channel(1).await;
    client
}

fn qos_args() -> Vec<u8> {
    Args::new().long(0).short(1).bits(&[false]).build()
}

fn publish_args(exchange: &str, routing_key: &str) -> Vec<u8> {
    Args::new()
        .short(0)
        .shortstr(exchange)
        .shortstr(routing_key)
        .bits(&[false, false])
        .build()
}

/// basic.publish of a 1-byte message on channel 1, its three frames in one write.
async fn publish_one_byte(client: &mut RawClient, exchange: &str) {
    let mut bytes = wire::method_frame(1, method::BASIC_PUBLISH, &publish_args(exchange, "k"));
    bytes.extend(wire::content_header_frame(1, 1));
    bytes.extend(wire::frame(wire::FRAME_BODY, 1, b"x"));
    client.send(&bytes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_on_a_channel_that_is_not_open_is_504() {
    let broker = TestBroker::start().await;
    let mut client = session(&broker).await;
    client.send_method(5, method::BASIC_QOS, &qos_args()).await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::CHANNEL_ERROR, "{close:?}");
    assert_eq!(close.text, "CHANNEL_ERROR - expected 'channel.open'");
    assert_eq!((close.class_id, close.method_id), method::BASIC_QOS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_channel_open_on_an_open_channel_is_504() {
    let broker = TestBroker::start().await;
    let mut client = session(&broker).await;
    client
        .send_method(1, method::CHANNEL_OPEN, &Args::new().shortstr("").build())
        .await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::CHANNEL_ERROR, "{close:?}");
    assert_eq!(close.text, "CHANNEL_ERROR - second 'channel.open' seen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_frames_without_a_publish_are_505() {
    let broker = TestBroker::start().await;
    let mut client = session(&broker).await;
    client.send(&wire::frame(wire::FRAME_BODY, 1, b"abc")).await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::UNEXPECTED_FRAME, "{close:?}");

    let mut client = session(&broker).await;
    client.send(&wire::content_header_frame(1, 3)).await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::UNEXPECTED_FRAME, "{close:?}");
}

/// RabbitMQ's `rabbit_command_assembler` texts for content frames out of place or too long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_frame_errors_use_rabbitmqs_texts() {
    let broker = TestBroker::start().await;
    let mut client = session(&broker).await;
    client.send(&wire::frame(wire::FRAME_BODY, 1, b"abc")).await;
    let close = client.expect_connection_close().await;
    assert_eq!(
        close.text,
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead"
    );

    let mut client = session(&broker).await;
    let mut bytes = wire::method_frame(1, method::BASIC_PUBLISH, &publish_args("", "q"));
    bytes.extend(wire::content_header_frame(1, 3));
    bytes.extend(wire::frame(wire::FRAME_BODY, 1, b"abcde"));
    client.send(&bytes).await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::FRAME_ERROR, "{close:?}");
    assert_eq!(
        close.text,
        "FRAME_ERROR - content body frame exceeds remaining content size"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_where_a_content_header_is_due_is_505() {
    let broker = TestBroker::start().await;
    let mut client = session(&broker).await;
    let mut bytes = wire::method_frame(1, method::BASIC_PUBLISH, &publish_args("", "q"));
    bytes.extend(wire::method_frame(1, method::BASIC_QOS, &qos_args()));
    client.send(&bytes).await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::UNEXPECTED_FRAME, "{close:?}");
    assert_eq!(
        close.text,
        "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead"
    );
    assert_eq!((close.class_id, close.method_id), method::BASIC_PUBLISH);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_header_of_another_class_is_505() {
    let broker = TestBroker::start().await;
    let mut client = session(&broker).await;
    let mut bytes = wire::method_frame(1, method::BASIC_PUBLISH, &publish_args("", "q"));
    let header = Args::new().short(50).short(0).longlong(0).short(0).build();
    bytes.extend(wire::frame(wire::FRAME_HEADER, 1, &header));
    client.send(&bytes).await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::UNEXPECTED_FRAME, "{close:?}");
    assert!(close.text.contains("class 60"), "{close:?}");
}

/// RabbitMQ 3.10.8 answers a heartbeat frame on a non-zero channel with
/// 505 "UNEXPECTED_FRAME - type 8, all octets = <<>>"; the spec calls it a 501 FRAME_ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_on_a_non_zero_channel_is_a_connection_error() {
    let broker = TestBroker::start().await;
    let mut client = session(&broker).await;
    client
        .send(&wire::frame(wire::FRAME_HEARTBEAT, 1, &[]))
        .await;
    let close = client.expect_connection_close().await;
    assert!(
        close.code == reply::UNEXPECTED_FRAME || close.code == reply::FRAME_ERROR,
        "{close:?}"
    );
}

/// RabbitMQ 3.10.8: 503 "COMMAND_INVALID - unimplemented method" for connection.open on channel 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_method_on_a_channel_is_503() {
    let broker = TestBroker::start().await;
    let mut client = session(&broker).await;
    let args = Args::new()
        .shortstr("/")
        .shortstr("")
        .bits(&[false])
        .build();
    client.send_method(1, method::CONNECTION_OPEN, &args).await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::COMMAND_INVALID, "{close:?}");
}

/// RabbitMQ 3.10.8: 504 "CHANNEL_ERROR - unexpected method in connection state running".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_method_on_channel_zero_is_a_connection_error() {
    let broker = TestBroker::start().await;
    let mut client = session(&broker).await;
    client.send_method(0, method::BASIC_QOS, &qos_args()).await;
    let close = client.expect_connection_close().await;
    assert!(
        close.code == reply::CHANNEL_ERROR || close.code == reply::COMMAND_INVALID,
        "{close:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_to_a_missing_exchange_is_a_404_channel_close_on_the_wire() {
    let broker = TestBroker::start().await;
    let mut client = session(&broker).await;
    let exchange = unique("missing-ex");
    publish_one_byte(&mut client, &exchange).await;
    let close = client.expect_channel_close(1).await;
    assert_eq!(close.code, reply::NOT_FOUND);
    assert_eq!(
        close.text,
        format!("NOT_FOUND - no exchange '{exchange}' in vhost '/'")
    );
    assert_eq!((close.class_id, close.method_id), method::BASIC_PUBLISH);
    client.send_method(1, method::CHANNEL_CLOSE_OK, &[]).await;
    // The channel number can be reused after close-ok; the connection is fine.
    client.open_channel(1).await;
    client.send_method(1, method::BASIC_QOS, &qos_args()).await;
    client.expect_method(1, (60, 11)).await;
}

/// A reply text over a shortstr's 255 bytes is cut to 252 and marked with `...`, as RabbitMQ
/// does, so that the client can tell it was cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reply_text_is_cut_with_an_ellipsis() {
    let broker = TestBroker::start().await;
    let mut client = session(&broker).await;
    let exchange = format!("{}-{}", unique("missing-ex"), "x".repeat(220));
    publish_one_byte(&mut client, &exchange).await;
    let close = client.expect_channel_close(1).await;
    assert_eq!(close.code, reply::NOT_FOUND);
    let full = format!("NOT_FOUND - no exchange '{exchange}' in vhost '/'");
    assert!(
        full.len() > 255,
        "the test needs a text longer than a shortstr"
    );
    assert_eq!(close.text, format!("{}...", &full[..252]));
}

/// After the broker closes a channel, it ignores everything on that channel except
/// channel.close / close-ok until the client answers close-ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_after_a_channel_close_are_ignored_until_close_ok() {
    let broker = TestBroker::start().await;
    let mut client = session(&broker).await;
    let missing = unique("missing-q");
    let passive = Args::new()
        .short(0)
        .shortstr(&missing)
        .bits(&[true, false, false, false, false])
        .table(&[])
        .build();
    client.send_method(1, method::QUEUE_DECLARE, &passive).await;
    let close = client.expect_channel_close(1).await;
    assert_eq!(close.code, reply::NOT_FOUND);
    // This qos gets no answer (neither qos-ok nor an error).
    client.send_method(1, method::BASIC_QOS, &qos_args()).await;
    client.send_method(1, method::CHANNEL_CLOSE_OK, &[]).await;
    client.open_channel(2).await;
    client.send_method(2, method::BASIC_QOS, &qos_args()).await;
    let reply = client.next_frame().await;
    assert_eq!(
        (reply.channel, reply.method_id()),
        (2, Some((60, 11))),
        "{reply:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_errors_leave_other_channels_working() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let healthy = bounded!(connection.create_channel()).unwrap();
    let doomed = bounded!(connection.create_channel()).unwrap();
    let watch = ChannelWatch::new(&doomed).await;
    let missing = unique("missing-ex");
    let publish = doomed.basic_publish(
        missing.as_str().into(),
        "".into(),
        Default::default(),
        b"x",
        Default::default(),
    );
    let _ = bounded!(publish);
    watch.expect_close(reply::NOT_FOUND).await;
    declare_queue(&healthy, &unique("still-fine")).await;
    assert!(connection.status().connected());
}
