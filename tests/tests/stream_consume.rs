//! Consuming over the stream protocol: every offset specification, server-side offset
//! tracking (across a restart too), credit counted in chunks, Deliver v1 and v2, and the
//! MetadataUpdate a client gets when a stream it uses is deleted.

mod stream_support;

use std::time::Duration;

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::{Message, OffsetSpecification};
use rabbitmq_stream_client::{Consumer, Environment};
use stream_support::{client, environment, stream_addr, RawStream};
use warren_proto::stream::{
    key, response_code, AdminCommand, Command, CommandVersion, ConnectionCommand, OffsetSpec,
    PublishCommand, SimpleResponse, SubscribeCommand,
};
use warren_tests::{bounded, unique, TestBroker};

/// Publishes `count` messages one confirm at a time (one chunk each); bodies `b0`, `b1`...
async fn publish_chunks(environment: &Environment, stream: &str, first: u32, count: u32) {
    let producer = bounded!(environment.producer().build(stream)).expect("producer");
    for i in first..first + count {
        let message = Message::builder().body(format!("b{i}")).build();
        let status = bounded!(producer.send_with_confirm(message)).expect("send");
        assert!(status.confirmed());
    }
    bounded!(producer.close()).unwrap();
}

async fn consumer(
    environment: &Environment,
    stream: &str,
    offset: OffsetSpecification,
) -> Consumer {
    bounded!(environment.consumer().offset(offset).build(stream)).expect("consumer")
}

/// The next delivery's offset and body.
async fn next(consumer: &mut Consumer) -> (u64, String) {
    let delivery = bounded!(consumer.next())
        .expect("a delivery")
        .expect("no error");
    let body = delivery.message().data().unwrap_or_default().to_vec();
    (delivery.offset(), String::from_utf8(body).unwrap())
}

/// Whether a delivery arrives within a short wait.
async fn nothing_within(consumer: &mut Consumer, wait: Duration) -> bool {
    tokio::time::timeout(wait, consumer.next()).await.is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_offset_specification_starts_where_it_says() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let environment = environment(&broker).await;
    let stream = unique("stream-offsets");
    bounded!(environment.stream_creator().create(&stream)).unwrap();
    publish_chunks(&environment, &stream, 0, 10).await;

    let mut first = consumer(&environment, &stream, OffsetSpecification::First).await;
    assert_eq!(next(&mut first).await, (0, "b0".into()));
    let mut at = consumer(&environment, &stream, OffsetSpecification::Offset(5)).await;
    assert_eq!(next(&mut at).await, (5, "b5".into()));
    let mut last = consumer(&environment, &stream, OffsetSpecification::Last).await;
    assert_eq!(next(&mut last).await, (9, "b9".into()));
    let past = chrono_ms() - 3_600_000;
    let mut since = consumer(&environment, &stream, OffsetSpecification::Timestamp(past)).await;
    assert_eq!(next(&mut since).await, (0, "b0".into()));
    let mut next_only = consumer(&environment, &stream, OffsetSpecification::Next).await;
    assert!(nothing_within(&mut next_only, Duration::from_millis(300)).await);
    publish_chunks(&environment, &stream, 10, 1).await;
    assert_eq!(next(&mut next_only).await, (10, "b10".into()));
    // The others follow the stream as it grows.
    assert_eq!(next(&mut last).await, (10, "b10".into()));
}

fn chrono_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    i64::try_from(now.unwrap().as_millis()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_offsets_are_kept_in_the_stream_across_a_restart() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restarts the in-process broker") {
        return;
    }
    let stream = unique("stream-tracking");
    {
        let environment = environment(&broker).await;
        bounded!(environment.stream_creator().create(&stream)).unwrap();
        publish_chunks(&environment, &stream, 0, 3).await;
        let consumer = bounded!(environment
            .consumer()
            .name("billing")
            .offset(OffsetSpecification::First)
            .build(&stream))
        .unwrap();
        bounded!(consumer.store_offset(2)).unwrap();
        // StoreOffset has no response: poll until the query sees it.
        let mut stored = None;
        for _ in 0..50 {
            if let Ok(offset) = consumer.query_offset().await {
                stored = Some(offset);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(stored, Some(2));
        let client = client(&broker).await;
        let missing = bounded!(client.query_offset("nobody".into(), &stream));
        assert!(missing.is_err(), "no offset stored for 'nobody'");
    }
    let broker = broker.restart().await;
    let client = client(&broker).await;
    let offset = bounded!(client.query_offset("billing".into(), &stream)).unwrap();
    assert_eq!(offset, 2);
}

/// A raw Subscribe and its response code.
async fn subscribe_raw(raw: &mut RawStream, id: u8, stream: &str, credit: u16) -> u16 {
    raw.send(&Command::Subscribe(SubscribeCommand::Subscribe {
        correlation_id: 40 + u32::from(id),
        subscription_id: id,
        stream: stream.into(),
        offset: OffsetSpec::First,
        credit,
        properties: Vec::new(),
    }))
    .await;
    match raw.next(Duration::from_secs(5)).await {
        Some(Command::Response(SimpleResponse {
            key: key::SUBSCRIBE,
            code,
            ..
        })) => code,
        other => panic!("expected the Subscribe response, got {other:?}"),
    }
}

/// The next Deliver's subscription id, committed chunk id and first offset.
async fn deliver(raw: &mut RawStream) -> (u8, Option<u64>, u64) {
    match raw.next(Duration::from_secs(5)).await {
        Some(Command::Subscribe(SubscribeCommand::Deliver {
            subscription_id,
            committed_chunk_id,
            chunk,
        })) => {
            // The osiris chunk header: magic/version, type, entries, records, timestamp,
            // epoch, then the chunk's first offset at byte 24.
            let offset = u64::from_be_bytes(chunk[24..32].try_into().unwrap());
            (subscription_id, committed_chunk_id, offset)
        }
        other => panic!("expected a Deliver, got {other:?}"),
    }
}

async fn quiet(raw: &mut RawStream) -> bool {
    tokio::time::timeout(Duration::from_millis(300), raw.next(Duration::from_secs(1)))
        .await
        .is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credit_is_counted_in_chunks_and_deliver_v2_carries_the_committed_chunk() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let environment = environment(&broker).await;
    let stream = unique("stream-credit");
    bounded!(environment.stream_creator().create(&stream)).unwrap();
    publish_chunks(&environment, &stream, 0, 3).await;
    let mut raw = RawStream::open(stream_addr(&broker), None).await;
    assert_eq!(
        subscribe_raw(&mut raw, 1, &stream, 1).await,
        response_code::OK
    );
    assert_eq!(
        deliver(&mut raw).await,
        (1, None, 0),
        "version 1 without the exchange"
    );
    assert!(quiet(&mut raw).await, "one credit, one chunk");
    raw.send(&Command::Subscribe(SubscribeCommand::Credit {
        subscription_id: 1,
        credit: 2,
    }))
    .await;
    assert_eq!(deliver(&mut raw).await.2, 1);
    assert_eq!(deliver(&mut raw).await.2, 2);
    assert!(quiet(&mut raw).await, "caught up");
    raw.send(&Command::Subscribe(SubscribeCommand::Credit {
        subscription_id: 9,
        credit: 1,
    }))
    .await;
    let unknown = raw.next(Duration::from_secs(5)).await;
    assert_eq!(
        unknown,
        Some(Command::Subscribe(SubscribeCommand::CreditResponse {
            code: response_code::SUBSCRIPTION_ID_DOES_NOT_EXIST,
            subscription_id: 9,
        }))
    );
    // A client that reads Deliver v2 gets the committed chunk id.
    raw.send(&Command::Connection(
        ConnectionCommand::ExchangeCommandVersionsRequest {
            correlation_id: 5,
            versions: vec![CommandVersion {
                key: key::DELIVER,
                min_version: 1,
                max_version: 2,
            }],
        },
    ))
    .await;
    assert!(matches!(
        raw.next(Duration::from_secs(5)).await,
        Some(Command::Connection(
            ConnectionCommand::ExchangeCommandVersionsResponse { .. }
        ))
    ));
    assert_eq!(
        subscribe_raw(&mut raw, 2, &stream, 5).await,
        response_code::OK
    );
    assert_eq!(deliver(&mut raw).await, (2, Some(2), 0));
    assert_eq!(deliver(&mut raw).await, (2, Some(2), 1));
    assert_eq!(deliver(&mut raw).await, (2, Some(2), 2));
    assert_eq!(
        subscribe_raw(&mut raw, 2, &stream, 5).await,
        response_code::SUBSCRIPTION_ID_ALREADY_EXISTS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_stream_in_use_sends_metadata_update() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let environment = environment(&broker).await;
    let stream = unique("stream-deleted");
    bounded!(environment.stream_creator().create(&stream)).unwrap();
    let mut raw = RawStream::open(stream_addr(&broker), None).await;
    raw.send(&Command::Publish(PublishCommand::DeclarePublisher {
        correlation_id: 11,
        publisher_id: 1,
        reference: None,
        stream: stream.clone(),
    }))
    .await;
    assert!(matches!(
        raw.next(Duration::from_secs(5)).await,
        Some(Command::Response(SimpleResponse {
            code: response_code::OK,
            ..
        }))
    ));
    bounded!(environment.delete_stream(&stream)).unwrap();
    let update = raw.next(Duration::from_secs(5)).await;
    assert_eq!(
        update,
        Some(Command::Admin(AdminCommand::MetadataUpdate {
            code: response_code::STREAM_NOT_AVAILABLE,
            stream: stream.clone(),
        }))
    );
    // The publisher is gone with its stream.
    raw.send(&Command::Publish(PublishCommand::DeletePublisher {
        correlation_id: 12,
        publisher_id: 1,
    }))
    .await;
    assert!(matches!(
        raw.next(Duration::from_secs(5)).await,
        Some(Command::Response(SimpleResponse {
            code: response_code::PUBLISHER_DOES_NOT_EXIST,
            ..
        }))
    ));
}
