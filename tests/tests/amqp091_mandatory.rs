//! The mandatory flag: unroutable mandatory messages come back as basic.return 312 NO_ROUTE;
//! routable or non-mandatory ones do not. The immediate flag is not implemented (as RabbitMQ).

use std::time::Duration;

use lapin::options::BasicPublishOptions;
use lapin::BasicProperties;
use warren_tests::raw::{Handshake, RawClient, RawError};
use warren_tests::wire::{self, method, reply, Args};
use warren_tests::{bounded, declare_queue, get_all, unique, TestBroker};

async fn open(broker: &TestBroker) -> (RawClient, u32) {
    let (mut client, _, tune) = RawClient::handshake(broker.addr(), Handshake::default()).await;
    client.open_channel(1).await;
    (client, tune.frame_max)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_mandatory_publish_is_returned_with_312() {
    let broker = TestBroker::start().await;
    let (mut client, frame_max) = open(&broker).await;
    let key = unique("nobody");
    let properties_free_body = b"please return me";
    client
        .send(&wire::publish_frames(
            1,
            "amq.topic",
            &key,
            true,
            properties_free_body,
            frame_max,
        ))
        .await;
    let returned = client.expect_method(1, method::BASIC_RETURN).await;
    let mut args = returned.args();
    assert_eq!(args.short(), reply::NO_ROUTE);
    assert_eq!(args.shortstr(), "NO_ROUTE");
    assert_eq!(args.shortstr(), "amq.topic");
    assert_eq!(args.shortstr(), key);
    assert_eq!(client.read_content(1).await, properties_free_body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_mandatory_publish_via_default_exchange_is_returned() {
    let broker = TestBroker::start().await;
    let (mut client, frame_max) = open(&broker).await;
    let key = unique("no-such-queue");
    client
        .send(&wire::publish_frames(1, "", &key, true, b"x", frame_max))
        .await;
    let returned = client.expect_method(1, method::BASIC_RETURN).await;
    let mut args = returned.args();
    assert_eq!(
        (args.short(), args.shortstr()),
        (reply::NO_ROUTE, "NO_ROUTE".to_string())
    );
    assert_eq!((args.shortstr(), args.shortstr()), (String::new(), key));
    assert_eq!(client.read_content(1).await, b"x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routable_mandatory_and_unroutable_plain_publishes_are_not_returned() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let queue = unique("mandatory-routed");
    declare_queue(&channel, &queue).await;
    drop(channel);
    let (mut client, frame_max) = open(&broker).await;
    client
        .send(&wire::publish_frames(
            1, "", &queue, true, b"routed", frame_max,
        ))
        .await;
    client
        .send(&wire::publish_frames(
            1,
            "amq.direct",
            &unique("nobody"),
            false,
            b"dropped",
            frame_max,
        ))
        .await;
    let silence = client.read_frame_within(Duration::from_millis(500)).await;
    assert_eq!(
        silence.err(),
        Some(RawError::TimedOut),
        "nothing comes back"
    );
    let observer = bounded!(connection.create_channel()).unwrap();
    assert_eq!(get_all(&observer, &queue).await, ["routed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapin_collects_returned_messages() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let options = BasicPublishOptions {
        mandatory: true,
        ..Default::default()
    };
    let publish = channel.basic_publish(
        "amq.direct".into(),
        unique("nobody").as_str().into(),
        options,
        b"r",
        BasicProperties::default(),
    );
    bounded!(bounded!(publish).unwrap()).unwrap();
    let mut returned = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while returned.is_empty() && tokio::time::Instant::now() < deadline {
        returned = bounded!(channel.wait_for_confirms()).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(returned.len(), 1, "one basic.return");
    assert_eq!(returned[0].reply_code, reply::NO_ROUTE);
    assert_eq!(returned[0].delivery.data, b"r");
}

/// RabbitMQ 3.x does not implement `immediate`: 540 NOT_IMPLEMENTED "immediate=true", a
/// connection error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immediate_publish_is_540_not_implemented() {
    let broker = TestBroker::start().await;
    let (mut client, _) = open(&broker).await;
    let args = Args::new()
        .short(0)
        .shortstr("amq.direct")
        .shortstr("k")
        .bits(&[false, true])
        .build();
    client.send_method(1, method::BASIC_PUBLISH, &args).await;
    client.send(&wire::content_header_frame(1, 0)).await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::NOT_IMPLEMENTED, "{close:?}");
    assert_eq!(close.text, "NOT_IMPLEMENTED - immediate=true");
    assert_eq!((close.class_id, close.method_id), method::BASIC_PUBLISH);
}
