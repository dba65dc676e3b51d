//! Message content: large bodies split across small frames, empty bodies, the broker honouring
//! the client's frame_max when delivering, and every basic property surviving a round trip.

use futures_lite::StreamExt;
use lapin::types::{AMQPValue, ShortString};
use lapin::BasicProperties;
use warren_tests::raw::{Handshake, RawClient};
use warren_tests::wire::{self, method, reply, Args};
use warren_tests::{
    bounded, consume, declare_queue, get, message_count, next_delivery, publish, publish_with,
    table, text, unique, ChannelWatch, TestBroker,
};

/// Deterministic pseudo-random bytes (xorshift), so a corrupted or reordered chunk shows.
fn pattern(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_megabyte_body_round_trips_with_frame_max_4096() {
    let broker = TestBroker::start().await;
    let connection = broker.connect_with("frame_max=4096").await;
    assert_eq!(connection.configuration().frame_max(), 4096);
    let channel = bounded!(connection.create_channel()).unwrap();
    let queue = unique("content-5mb");
    declare_queue(&channel, &queue).await;
    let body = pattern(5 * 1024 * 1024);
    publish(&channel, "", &queue, &body).await;
    let mut consumer = consume(&channel, &queue, true).await;
    let delivery = bounded!(consumer.next(), std::time::Duration::from_secs(8))
        .expect("a delivery")
        .expect("no error");
    assert_eq!(delivery.data.len(), body.len());
    assert!(delivery.data == body, "the body came back altered");
}

/// Delivering to a client that negotiated frame_max 4096, no frame exceeds 4096 bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_respect_the_client_frame_max() {
    let broker = TestBroker::start().await;
    let handshake = Handshake {
        frame_max: Some(4096),
        ..Default::default()
    };
    let (mut client, _, tune) = RawClient::handshake(broker.addr(), handshake).await;
    client.open_channel(1).await;
    let queue = unique("content-frames");
    let declare = Args::new()
        .short(0)
        .shortstr(&queue)
        .bits(&[false; 5])
        .table(&[])
        .build();
    client.send_method(1, method::QUEUE_DECLARE, &declare).await;
    client.expect_method(1, method::QUEUE_DECLARE_OK).await;
    let body = pattern(100_000);
    client
        .send(&wire::publish_frames(
            1,
            "",
            &queue,
            false,
            &body,
            tune.frame_max,
        ))
        .await;
    client
        .send_method(
            1,
            method::BASIC_GET,
            &Args::new().short(0).shortstr(&queue).bits(&[true]).build(),
        )
        .await;
    client.expect_method(1, method::BASIC_GET_OK).await;
    let header = client.next_frame().await;
    assert_eq!(header.kind, wire::FRAME_HEADER);
    let mut received = Vec::new();
    while received.len() < body.len() {
        let frame = client.next_frame().await;
        assert_eq!(frame.kind, wire::FRAME_BODY, "{frame:?}");
        assert!(
            frame.payload.len() + 8 <= 4096,
            "a {}-byte body frame",
            frame.payload.len()
        );
        received.extend_from_slice(&frame.payload);
    }
    assert!(received == body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_body_round_trips() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("content-empty");
    declare_queue(&channel, &queue).await;
    publish(&channel, "", &queue, b"").await;
    let message = get(&channel, &queue).await.expect("get-ok");
    assert!(message.delivery.data.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_basic_property_survives_the_round_trip() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("content-props");
    declare_queue(&channel, &queue).await;
    let headers = table(&[
        ("string", text("value")),
        ("int", AMQPValue::LongInt(-7)),
        ("long", AMQPValue::LongLongInt(1 << 40)),
        ("bool", AMQPValue::Boolean(true)),
        (
            "nested",
            AMQPValue::FieldTable(table(&[("inner", text("x"))])),
        ),
    ]);
    let properties = BasicProperties::default()
        .with_content_type(ShortString::from("application/json"))
        .with_content_encoding(ShortString::from("gzip"))
        .with_headers(headers.clone())
        .with_delivery_mode(2)
        .with_priority(5)
        .with_correlation_id(ShortString::from("corr-1"))
        .with_reply_to(ShortString::from("reply-queue"))
        .with_expiration(ShortString::from("60000"))
        .with_message_id(ShortString::from("msg-1"))
        .with_timestamp(1_700_000_000)
        .with_type(ShortString::from("order.created"))
        .with_user_id(ShortString::from("guest"))
        .with_app_id(ShortString::from("warren-tests"));
    publish_with(&channel, "", &queue, b"{}", properties.clone()).await;
    let mut consumer = consume(&channel, &queue, true).await;
    let delivery = next_delivery(&mut consumer).await;
    let got = &delivery.properties;
    assert_eq!(got.content_type(), properties.content_type());
    assert_eq!(got.content_encoding(), properties.content_encoding());
    assert_eq!(got.headers(), &Some(headers));
    assert_eq!(got.delivery_mode(), &Some(2));
    assert_eq!(got.priority(), &Some(5));
    assert_eq!(got.correlation_id(), properties.correlation_id());
    assert_eq!(got.reply_to(), properties.reply_to());
    assert_eq!(got.expiration(), properties.expiration());
    assert_eq!(got.message_id(), properties.message_id());
    assert_eq!(got.timestamp(), &Some(1_700_000_000));
    assert_eq!(got.kind(), properties.kind());
    assert_eq!(got.user_id(), properties.user_id());
    assert_eq!(got.app_id(), properties.app_id());
}

/// RabbitMQ validates user_id: 406 "PRECONDITION_FAILED - user_id property set to 'someone-else'
/// but authenticated user was 'guest'".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_id_other_than_the_authenticated_user_is_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let watch = ChannelWatch::new(&channel).await;
    let properties = BasicProperties::default().with_user_id(ShortString::from("someone-else"));
    let publish = channel.basic_publish(
        "".into(),
        "anything".into(),
        Default::default(),
        b"x",
        properties,
    );
    let _ = bounded!(publish);
    let text = watch.expect_close(reply::PRECONDITION_FAILED).await;
    assert_eq!(
        text,
        "PRECONDITION_FAILED - user_id property set to 'someone-else' but authenticated user was 'guest'"
    );
}

/// A user tagged `impersonator` may publish any user_id (RabbitMQ's `check_user_id`), as the
/// management API's publish allows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impersonator_may_publish_any_user_id() {
    let broker = TestBroker::start().await;
    let api = warren_tests::http::Api::new(&broker);
    for (path, body) in [
        (
            "/api/users/stand-in",
            serde_json::json!({"password": "pw", "tags": "impersonator"}),
        ),
        (
            "/api/permissions/%2F/stand-in",
            serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"}),
        ),
    ] {
        let (status, reply) = api.send(reqwest::Method::PUT, path, Some(body)).await;
        assert!(status.is_success(), "{path}: {status} {reply}");
    }
    let connection = warren_tests::connect_url(&broker.url_as("stand-in", "pw", "/")).await;
    let channel = bounded!(connection.create_channel()).unwrap();
    let queue = unique("impersonated");
    declare_queue(&channel, &queue).await;
    let properties = BasicProperties::default().with_user_id(ShortString::from("someone-else"));
    let confirm = bounded!(channel.basic_publish(
        "".into(),
        queue.as_str().into(),
        Default::default(),
        b"x",
        properties,
    ))
    .unwrap();
    let _ = bounded!(confirm);
    assert!(
        channel.status().connected(),
        "the impersonator's channel was closed"
    );
    assert_eq!(message_count(&connection, &queue).await, 1);
}

/// With `frame_max = 0` (no limit) negotiated on both sides, a 100 KB body goes out in one
/// body frame, as it came in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_frame_limit_a_body_is_one_frame() {
    let broker = TestBroker::start_with(|config| config.frame_max = 0).await;
    if broker.skip_if_external("needs Warren configured with frame_max = 0") {
        return;
    }
    let handshake = Handshake {
        frame_max: Some(0),
        ..Default::default()
    };
    let (mut client, _, tune) = RawClient::handshake(broker.addr(), handshake).await;
    assert_eq!(tune.frame_max, 0);
    client.open_channel(1).await;
    let queue = unique("content-nolimit");
    let declare = Args::new()
        .short(0)
        .shortstr(&queue)
        .bits(&[false; 5])
        .table(&[])
        .build();
    client.send_method(1, method::QUEUE_DECLARE, &declare).await;
    client.expect_method(1, method::QUEUE_DECLARE_OK).await;
    let body = vec![7u8; 100_000];
    let publish = wire::publish_frames(1, "", &queue, false, &body, 200_000);
    client.send(&publish).await;
    let get = Args::new().short(0).shortstr(&queue).bits(&[true]).build();
    client.send_method(1, method::BASIC_GET, &get).await;
    client.expect_method(1, method::BASIC_GET_OK).await;
    let header = client.next_frame().await;
    assert_eq!(header.kind, wire::FRAME_HEADER, "{header:?}");
    let frame = client.next_frame().await;
    assert_eq!(frame.kind, wire::FRAME_BODY);
    assert_eq!(
        frame.payload.len(),
        body.len(),
        "the whole body in one frame"
    );
}
