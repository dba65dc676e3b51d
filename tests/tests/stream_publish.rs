//! Publishing over the stream protocol with `rabbitmq-stream-client`: create and delete,
//! confirms for single and batched sends, deduplication by producer reference (across a
//! restart too), Metadata of an existing stream, and PublishError for an unknown publisher.

mod stream_support;

use futures_lite::StreamExt;
use rabbitmq_stream_client::error::{StreamCreateError, StreamDeleteError};
use rabbitmq_stream_client::types::{Message, OffsetSpecification, ResponseCode};
use rabbitmq_stream_client::Environment;
use stream_support::{client, environment, stream_addr};
use warren_tests::{bounded, unique, TestBroker};

/// Reads `count` message bodies from `stream`, from the first offset.
async fn read_bodies(environment: &Environment, stream: &str, count: usize) -> Vec<Vec<u8>> {
    let mut consumer = bounded!(environment
        .consumer()
        .offset(OffsetSpecification::First)
        .build(stream))
    .expect("consumer");
    let mut bodies = Vec::with_capacity(count);
    while bodies.len() < count {
        let delivery = bounded!(consumer.next())
            .expect("a delivery")
            .expect("no error");
        bodies.push(delivery.message().data().unwrap_or_default().to_vec());
    }
    let _ = bounded!(consumer.handle().close());
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_publish_with_confirms_read_back_and_delete() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let environment = environment(&broker).await;
    let stream = unique("stream-basic");
    bounded!(environment.stream_creator().create(&stream)).expect("create");
    let again = bounded!(environment.stream_creator().create(&stream));
    assert!(
        matches!(
            again,
            Err(StreamCreateError::Create {
                status: ResponseCode::StreamAlreadyExists,
                ..
            })
        ),
        "{again:?}"
    );
    let producer = bounded!(environment.producer().build(&stream)).expect("producer");
    for i in 0..10u32 {
        let message = Message::builder().body(format!("m{i}")).build();
        let status = bounded!(producer.send_with_confirm(message)).expect("send");
        assert!(status.confirmed(), "message {i} confirmed");
    }
    let batch: Vec<Message> = (10..110u32)
        .map(|i| Message::builder().body(format!("m{i}")).build())
        .collect();
    let statuses = bounded!(producer.batch_send_with_confirm(batch)).expect("batch send");
    assert_eq!(statuses.len(), 100);
    assert!(statuses.iter().all(|s| s.confirmed()));
    bounded!(producer.close()).expect("close producer");
    let bodies = read_bodies(&environment, &stream, 110).await;
    let expected: Vec<Vec<u8>> = (0..110u32).map(|i| format!("m{i}").into_bytes()).collect();
    assert_eq!(bodies, expected, "every message once, in order");
    bounded!(environment.delete_stream(&stream)).expect("delete");
    let gone = bounded!(environment.delete_stream(&stream));
    assert!(
        matches!(
            gone,
            Err(StreamDeleteError::Delete {
                status: ResponseCode::StreamDoesNotExist,
                ..
            })
        ),
        "{gone:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_names_this_node_as_leader_of_an_existing_stream() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let environment = environment(&broker).await;
    let stream = unique("stream-meta");
    bounded!(environment.stream_creator().create(&stream)).expect("create");
    let client = client(&broker).await;
    let metadata = bounded!(client.metadata(vec![stream.clone()])).unwrap();
    let found = metadata.get(&stream).expect("the stream");
    assert_eq!(found.response_code, ResponseCode::Ok);
    let addr = stream_addr(&broker);
    assert_eq!(found.leader.host, addr.ip().to_string());
    assert_eq!(found.leader.port, u32::from(addr.port()));
    assert!(found.replicas.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_producer_is_deduplicated_and_its_sequence_survives_a_restart() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restarts the in-process broker") {
        return;
    }
    let stream = unique("stream-dedup");
    {
        let environment = environment(&broker).await;
        bounded!(environment.stream_creator().create(&stream)).expect("create");
        let mut producer = bounded!(environment.producer().name("orders-app").build(&stream))
            .expect("named producer");
        for id in 1..=5u64 {
            let message = Message::builder()
                .publishing_id(id)
                .body(format!("d{id}"))
                .build();
            let status = bounded!(producer.send_with_confirm(message)).expect("send");
            assert!(status.confirmed());
        }
        // Publishing ids 3 to 5 again: confirmed, not stored.
        for id in 3..=5u64 {
            let message = Message::builder().publishing_id(id).body("dup").build();
            let status = bounded!(producer.send_with_confirm(message)).expect("send");
            assert!(status.confirmed(), "a duplicate is confirmed");
        }
        bounded!(producer.close()).unwrap();
        let client = client(&broker).await;
        let sequence = bounded!(client.query_publisher_sequence("orders-app", &stream));
        assert_eq!(sequence.unwrap(), 5);
    }
    let broker = broker.restart().await;
    let environment = environment(&broker).await;
    let client = client(&broker).await;
    let sequence = bounded!(client.query_publisher_sequence("orders-app", &stream));
    assert_eq!(
        sequence.unwrap(),
        5,
        "the last publishing id survives a restart"
    );
    let mut producer = bounded!(environment.producer().name("orders-app").build(&stream)).unwrap();
    // The client resumes at 6; a replayed 4 is dropped.
    let replay = Message::builder().publishing_id(4).body("dup").build();
    assert!(bounded!(producer.send_with_confirm(replay))
        .unwrap()
        .confirmed());
    let next = Message::builder().body("d6").build();
    let status = bounded!(producer.send_with_confirm(next)).unwrap();
    assert_eq!(status.publishing_id(), 6);
    // An unclosed producer's drop blocks on the client's close: close it first.
    bounded!(producer.close()).unwrap();
    let bodies = read_bodies(&environment, &stream, 6).await;
    let expected: Vec<Vec<u8>> = (1..=6u64).map(|i| format!("d{i}").into_bytes()).collect();
    assert_eq!(bodies, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_to_a_missing_stream_is_refused() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let environment = environment(&broker).await;
    let producer = bounded!(environment.producer().build("no-such-stream"));
    assert!(producer.is_err(), "no producer on a missing stream");
    let client = client(&broker).await;
    let declared = bounded!(client.declare_publisher(1, None, "no-such-stream")).unwrap();
    assert_eq!(declared.code(), &ResponseCode::StreamDoesNotExist);
}
