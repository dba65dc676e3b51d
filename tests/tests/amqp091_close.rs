//! Closing as RabbitMQ closes: after its connection.close for a hard error the broker reads and
//! discards what the client still sends until close-ok (RabbitMQ's `closing` state), and a body
//! frame whose payload is exactly frame_max passes (RabbitMQ's `FRAME_SIZE_FUDGE`).

use warren_tests::raw::{Handshake, RawClient};
use warren_tests::wire::{self, method, reply, Args};
use warren_tests::{unique, TestBroker};

/// Handshaken raw connection with frame_max 4096 and channel 1 open.
async fn session(broker: &TestBroker) -> RawClient {
    RawClient::session(broker.addr(), 4096).await
}

fn publish_method(routing_key: &str) -> Vec<u8> {
    wire::basic_publish(1, "", routing_key, false)
}

/// A client that writes a frame of several MB in one write, far over frame_max, reads the
/// broker's connection.close (501 and its text) every time: the broker keeps reading and
/// discarding until close-ok, as RabbitMQ, instead of closing under the client's write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frame_written_whole_gets_the_close_not_a_reset() {
    let broker = TestBroker::start().await;
    let body = vec![b'x'; 4 * 1024 * 1024];
    for run in 0..20 {
        let mut client = session(&broker).await;
        let mut bytes = publish_method("nowhere");
        bytes.extend(wire::content_header_frame(1, body.len() as u64));
        bytes.extend(wire::frame(wire::FRAME_BODY, 1, &body));
        let written = client.send_lenient(&bytes).await;
        assert!(written.is_ok(), "run {run}: write failed: {written:?}");
        let close = client.expect_connection_close().await;
        assert_eq!(close.code, reply::FRAME_ERROR, "run {run}: {close:?}");
        // RabbitMQ: "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,4194304,4088}"
        assert!(close.text.starts_with("FRAME_ERROR"), "{close:?}");
        assert!(close.text.contains("frame_max 4096"), "{close:?}");
        client.send_connection_close_ok().await;
    }
}

/// A body frame whose payload is exactly frame_max is accepted (RabbitMQ allows 8 bytes over
/// the frame size, `FRAME_SIZE_FUDGE`, since clients that fill frames get it wrong by that);
/// one byte more is a 501.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_payload_of_frame_max_is_accepted() {
    let broker = TestBroker::start().await;
    let mut client = session(&broker).await;
    let queue = unique("fudge");
    let declare = Args::new()
        .short(0)
        .shortstr(&queue)
        .bits(&[false, false, false, true, false])
        .table(&[])
        .build();
    client.send_method(1, method::QUEUE_DECLARE, &declare).await;
    client.expect_method(1, method::QUEUE_DECLARE_OK).await;
    let body = vec![b'f'; 4096];
    let mut bytes = publish_method(&queue);
    bytes.extend(wire::content_header_frame(1, body.len() as u64));
    bytes.extend(wire::frame(wire::FRAME_BODY, 1, &body));
    client.send(&bytes).await;
    let get = Args::new().short(0).shortstr(&queue).bits(&[true]).build();
    client.send_method(1, method::BASIC_GET, &get).await;
    client.expect_method(1, method::BASIC_GET_OK).await;
    assert_eq!(client.read_content(1).await, body);

    let mut bytes = publish_method(&queue);
    bytes.extend(wire::content_header_frame(1, 4097));
    bytes.extend(wire::frame(wire::FRAME_BODY, 1, &[b'f'; 4097]));
    client.send(&bytes).await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::FRAME_ERROR, "{close:?}");
    client.send_connection_close_ok().await;
}

/// On the client's connection.close the broker shuts every channel down before close-ok, as
/// RabbitMQ: unacked messages are back in their queue and exclusive queues are gone by the
/// time close-ok arrives, so a client that reconnects at once finds them so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_are_shut_down_before_close_ok() {
    use lapin::options::{BasicQosOptions, QueueDeclareOptions};
    use lapin::types::FieldTable;
    use warren_tests::{bounded, consume, declare_queue, next_delivery, passive_declare, publish};

    let broker = TestBroker::start().await;
    let (owner, channel) = broker.channel().await;
    let shared = unique("q-shared");
    declare_queue(&channel, &shared).await;
    let exclusive = unique("q-exclusive");
    let options = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    bounded!(channel.queue_declare(exclusive.as_str().into(), options, FieldTable::default()))
        .expect("declare the exclusive queue");
    for i in 0..5 {
        publish(&channel, "", &shared, format!("m{i}").as_bytes()).await;
    }
    bounded!(channel.basic_qos(10, BasicQosOptions::default())).expect("qos");
    let mut consumer = consume(&channel, &shared, false).await;
    for _ in 0..5 {
        next_delivery(&mut consumer).await;
    }
    bounded!(owner.close(200, "bye".into())).expect("close-ok");
    // No waiting: close-ok came after the channels were shut down.
    let other = broker.connect().await;
    let queue = passive_declare(&other, &shared)
        .await
        .expect("the shared queue");
    assert_eq!(
        queue.message_count(),
        5,
        "unacked messages requeued before close-ok"
    );
    let gone = passive_declare(&other, &exclusive).await;
    assert!(
        gone.is_err(),
        "the exclusive queue is deleted before close-ok"
    );
}

/// The client's channel.close crosses the broker's own (a 404): the broker answers it with
/// close-ok, keeps the channel id until the client's close-ok, and the connection carries on;
/// the id can then be opened again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crossing_channel_close_is_answered_and_the_id_freed_at_close_ok() {
    let broker = TestBroker::start().await;
    let (mut client, _, _) = RawClient::handshake(broker.addr(), Handshake::default()).await;
    client.open_channel(1).await;
    let passive_missing = Args::new()
        .short(0)
        .shortstr(&unique("q-missing"))
        .bits(&[true, false, false, false, false])
        .table(&[])
        .build();
    let close = Args::new()
        .short(200)
        .shortstr("client closing")
        .short(0)
        .short(0)
        .build();
    // Both in one write: the broker's 404 channel.close and the client's close cross.
    let mut bytes = wire::method_frame(1, method::QUEUE_DECLARE, &passive_missing);
    bytes.extend(wire::method_frame(1, method::CHANNEL_CLOSE, &close));
    client.send(&bytes).await;
    let refused = client.expect_channel_close(1).await;
    assert_eq!(refused.code, reply::NOT_FOUND, "{refused:?}");
    client.expect_method(1, method::CHANNEL_CLOSE_OK).await;
    client
        .send_method(1, method::CHANNEL_CLOSE_OK, &Args::new().build())
        .await;
    // The id is free again and the connection is still open.
    client.open_channel(1).await;
}
