//! Declaring streams (`x-queue-type=stream`) over AMQP 0.9.1: what RabbitMQ's
//! `rabbit_stream_queue` accepts, and its 406 texts for what it refuses; the management API
//! lists a stream as `type: "stream"`; purge and basic.get are refused, and a stream
//! redeclared after its deletion starts empty.

use lapin::options::{QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use warren_tests::http::Api;
use warren_tests::{
    bounded, confirm_channel, expect_amqp_error, passive_declare, publish_with, table, text,
    unique, TestBroker,
};

const PRECONDITION_FAILED: u16 = 406;

/// A reply text without the reply name in front (`PRECONDITION_FAILED - `).
fn reason(text: String) -> String {
    match text.split_once(" - ") {
        Some((_, reason)) => reason.to_string(),
        None => text,
    }
}
const NOT_IMPLEMENTED: u16 = 540;

fn stream_args(extra: &[(&str, AMQPValue)]) -> FieldTable {
    let mut entries = vec![("x-queue-type", text("stream"))];
    entries.extend_from_slice(extra);
    table(&entries)
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

async fn declare(
    broker: &TestBroker,
    name: &str,
    options: QueueDeclareOptions,
    arguments: FieldTable,
) -> lapin::Result<lapin::Queue> {
    let (connection, channel) = broker.channel().await;
    let result = bounded!(channel.queue_declare(name.into(), options, arguments));
    drop(connection);
    result
}

/// The 406 text of a refused declare.
async fn refused(
    broker: &TestBroker,
    name: &str,
    options: QueueDeclareOptions,
    arguments: FieldTable,
) -> String {
    let result = declare(broker, name, options, arguments).await;
    reason(expect_amqp_error(result, PRECONDITION_FAILED))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_takes_rabbitmqs_stream_arguments() {
    let broker = TestBroker::start().await;
    let name = unique("stream");
    let arguments = stream_args(&[
        ("x-max-length-bytes", AMQPValue::LongLongInt(10_000_000)),
        ("x-max-age", text("7D")),
        (
            "x-stream-max-segment-size-bytes",
            AMQPValue::LongLongInt(1_000_000),
        ),
        ("x-initial-cluster-size", AMQPValue::LongLongInt(1)),
        ("x-queue-leader-locator", text("balanced")),
    ]);
    let declared = declare(&broker, &name, durable(), arguments.clone()).await;
    let declared = declared.expect("a durable stream with stream arguments is declared");
    assert_eq!(declared.message_count(), 0);
    // Declaring it again with the same arguments is fine; a passive declare finds it.
    declare(&broker, &name, durable(), arguments)
        .await
        .expect("redeclare");
    let connection = broker.connect().await;
    passive_declare(&connection, &name).await.expect("passive");
    if broker.is_external() {
        return;
    }
    let api = Api::new(&broker);
    let listed = api.get(&format!("/api/queues/%2F/{name}")).await;
    assert_eq!(listed["type"], "stream", "{listed}");
    assert_eq!(listed["durable"], true, "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_refuses_transient_shapes_with_rabbitmqs_texts() {
    let broker = TestBroker::start().await;
    let name = unique("stream");
    let resource = format!("queue '{name}' in vhost '/'");
    let auto_delete = QueueDeclareOptions {
        auto_delete: true,
        ..durable()
    };
    let text = refused(&broker, &name, auto_delete, stream_args(&[])).await;
    assert_eq!(
        text,
        format!("invalid property 'auto-delete' for {resource}")
    );
    let exclusive = QueueDeclareOptions {
        exclusive: true,
        ..durable()
    };
    let text = refused(&broker, &name, exclusive, stream_args(&[])).await;
    assert_eq!(
        text,
        format!("invalid property 'exclusive-owner' for {resource}")
    );
    let transient = QueueDeclareOptions::default();
    let text = refused(&broker, &name, transient, stream_args(&[])).await;
    assert_eq!(
        text,
        format!("invalid property 'non-durable' for {resource}")
    );
    let text = refused(&broker, "", durable(), stream_args(&[])).await;
    assert_eq!(
        text,
        "Cannot declare a server-named queue for type rabbit_stream_queue"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_refuses_other_types_arguments_by_name() {
    let broker = TestBroker::start().await;
    let name = unique("stream");
    let resource = format!("queue '{name}' in vhost '/'");
    for (key, value) in [
        ("x-max-length", AMQPValue::LongLongInt(10)),
        ("x-message-ttl", AMQPValue::LongLongInt(1000)),
        ("x-dead-letter-exchange", text("dlx")),
        ("x-overflow", text("reject-publish")),
        ("x-expires", AMQPValue::LongLongInt(1000)),
        ("x-max-priority", AMQPValue::LongLongInt(5)),
        ("x-single-active-consumer", AMQPValue::Boolean(true)),
        ("x-delivery-limit", AMQPValue::LongLongInt(5)),
    ] {
        let text = refused(&broker, &name, durable(), stream_args(&[(key, value)])).await;
        assert_eq!(
            text,
            format!("invalid arg '{key}' for {resource} of queue type rabbit_stream_queue")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_stream_arguments_are_refused_with_rabbitmqs_texts() {
    let broker = TestBroker::start().await;
    let name = unique("stream");
    let resource = format!("queue '{name}' in vhost '/'");
    let cases = [
        (
            ("x-max-age", text("1w")),
            format!("invalid arg 'x-max-age' for {resource}: invalid_max_age"),
        ),
        (
            ("x-max-age", AMQPValue::LongLongInt(10)),
            format!("invalid arg 'x-max-age' for {resource}: {{unacceptable_type,long}}"),
        ),
        (
            ("x-max-length-bytes", AMQPValue::LongLongInt(-1)),
            format!("invalid arg 'x-max-length-bytes' for {resource}: {{value_negative,-1}}"),
        ),
        (
            ("x-initial-cluster-size", AMQPValue::LongLongInt(0)),
            format!("invalid arg 'x-initial-cluster-size' for {resource}: {{value_zero,0}}"),
        ),
        (
            ("x-queue-leader-locator", text("nearest")),
            format!(
                "invalid arg 'x-queue-leader-locator' for {resource}: invalid_queue_locator_arg"
            ),
        ),
        (
            (
                "x-stream-max-segment-size-bytes",
                AMQPValue::LongLongInt(3_000_000_001),
            ),
            "Exceeded max value for x-stream-max-segment-size-bytes".to_string(),
        ),
    ];
    for ((key, value), expected) in cases {
        let text = refused(&broker, &name, durable(), stream_args(&[(key, value)])).await;
        assert_eq!(text, expected);
    }
    // Filtering comes with the next stream issue: refused, saying so.
    let filter = ("x-stream-filter-size-bytes", AMQPValue::LongLongInt(32));
    let text = refused(&broker, &name, durable(), stream_args(&[filter])).await;
    assert!(text.contains("not supported by Warren yet"), "{text}");
    // Nothing of the refused declares was created.
    let connection = broker.connect().await;
    assert!(passive_declare(&connection, &name).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_and_get_are_refused_and_a_redeclared_stream_starts_empty() {
    let broker = TestBroker::start().await;
    let name = unique("stream");
    let resource = format!("queue '{name}' in vhost '/'");
    declare(&broker, &name, durable(), stream_args(&[]))
        .await
        .expect("declare");
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    for i in 0..3 {
        let body = format!("m{i}");
        publish_with(
            &channel,
            "",
            &name,
            body.as_bytes(),
            BasicProperties::default(),
        )
        .await;
    }
    let declared = declare(&broker, &name, durable(), stream_args(&[]))
        .await
        .unwrap();
    assert_eq!(
        declared.message_count(),
        3,
        "the stream counts its messages"
    );

    let (_c, channel) = broker.channel().await;
    let purge = bounded!(channel.queue_purge(name.as_str().into(), QueuePurgeOptions::default()));
    let text = reason(expect_amqp_error(purge, NOT_IMPLEMENTED));
    assert_eq!(
        text,
        format!("queue.purge not supported by stream queues {resource}")
    );
    let (_c, channel) = broker.channel().await;
    let get = bounded!(channel.basic_get(name.as_str().into(), Default::default()));
    let text = reason(expect_amqp_error(get, NOT_IMPLEMENTED));
    assert_eq!(
        text,
        format!("basic.get not supported by stream queues {resource}")
    );

    let (_c, channel) = broker.channel().await;
    let deleted =
        bounded!(channel.queue_delete(name.as_str().into(), QueueDeleteOptions::default()));
    assert_eq!(deleted.expect("delete"), 3);
    let again = declare(&broker, &name, durable(), stream_args(&[]))
        .await
        .unwrap();
    assert_eq!(
        again.message_count(),
        0,
        "a stream declared again starts empty"
    );
}

/// A vhost whose `default_queue_type` is stream makes a durable queue declared without
/// `x-queue-type` a stream; exclusive, auto-delete and transient ones stay classic, as
/// RabbitMQ's `augment_declare_args` decides; `quorum` as the default is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vhost_with_default_queue_type_stream_declares_streams() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("creates a vhost through the management API") {
        return;
    }
    let api = Api::new(&broker);
    let vhost = unique("dqt");
    let path = format!("/api/vhosts/{vhost}");
    let quorum = serde_json::json!({"default_queue_type": "quorum"});
    let (status, body) = api.send(reqwest::Method::PUT, &path, Some(quorum)).await;
    assert_eq!(
        status.as_u16(),
        400,
        "quorum as the default is refused: {body}"
    );
    let stream = serde_json::json!({"default_queue_type": "stream"});
    let (status, body) = api.send(reqwest::Method::PUT, &path, Some(stream)).await;
    assert!(status.is_success(), "{status}: {body}");
    let path = format!("/api/permissions/{vhost}/guest");
    let everything = serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"});
    let (status, body) = api
        .send(reqwest::Method::PUT, &path, Some(everything))
        .await;
    assert!(status.is_success(), "{status}: {body}");
    let connection = warren_tests::connect_url(&broker.url_as("guest", "guest", &vhost)).await;
    let channel = connection.create_channel().await.unwrap();
    let shapes = [
        ("durable", durable(), "stream"),
        (
            "exclusive",
            QueueDeclareOptions {
                exclusive: true,
                ..durable()
            },
            "classic",
        ),
        (
            "auto-delete",
            QueueDeclareOptions {
                auto_delete: true,
                ..durable()
            },
            "classic",
        ),
        ("transient", QueueDeclareOptions::default(), "classic"),
    ];
    for (shape, options, expected) in shapes {
        let name = unique(shape);
        bounded!(channel.queue_declare(name.as_str().into(), options, FieldTable::default()))
            .unwrap_or_else(|error| panic!("declaring a {shape} queue: {error}"));
        let listed = api.get(&format!("/api/queues/{vhost}/{name}")).await;
        assert_eq!(listed["type"], expected, "a {shape} queue: {listed}");
    }
    // An explicit type wins over the default.
    let classic = unique("explicit");
    let arguments = table(&[("x-queue-type", text("classic"))]);
    bounded!(channel.queue_declare(classic.as_str().into(), durable(), arguments)).unwrap();
    let listed = api.get(&format!("/api/queues/{vhost}/{classic}")).await;
    assert_eq!(listed["type"], "classic", "{listed}");
}
