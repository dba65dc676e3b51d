//! Routing through direct, fanout, topic and headers exchanges. Each test declares its own
//! exchange, binds fresh queues, publishes, then drains every queue with basic.get and compares
//! the bodies (so a message routed twice to one queue shows up as a duplicate).

use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};
use warren_tests::{
    bounded, declare_queue, get_all, publish, publish_with, table, text, unique, TestBroker,
};

async fn exchange(channel: &Channel, kind: ExchangeKind) -> String {
    let name = unique(&format!("route-{kind:?}"));
    let declare = channel.exchange_declare(
        name.as_str().into(),
        kind,
        Default::default(),
        FieldTable::default(),
    );
    bounded!(declare).expect("declare exchange");
    name
}

async fn queue(channel: &Channel) -> String {
    let name = unique("route-q");
    declare_queue(channel, &name).await;
    name
}

async fn bind(channel: &Channel, queue: &str, exchange: &str, key: &str, arguments: FieldTable) {
    let bind = channel.queue_bind(
        queue.into(),
        exchange.into(),
        key.into(),
        Default::default(),
        arguments,
    );
    bounded!(bind).unwrap_or_else(|error| panic!("bind {queue} {key:?}: {error}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_routes_on_exact_key() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let ex = exchange(&channel, ExchangeKind::Direct).await;
    let (red, red_and_blue) = (queue(&channel).await, queue(&channel).await);
    bind(&channel, &red, &ex, "red", FieldTable::default()).await;
    bind(&channel, &red_and_blue, &ex, "red", FieldTable::default()).await;
    bind(&channel, &red_and_blue, &ex, "blue", FieldTable::default()).await;

    for key in ["red", "blue", "green", "Red", "red.x", ""] {
        publish(&channel, &ex, key, key.as_bytes()).await;
    }
    assert_eq!(get_all(&channel, &red).await, vec!["red"]);
    assert_eq!(get_all(&channel, &red_and_blue).await, vec!["red", "blue"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanout_ignores_the_key_and_copies_to_every_queue() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let ex = exchange(&channel, ExchangeKind::Fanout).await;
    let queues = [
        queue(&channel).await,
        queue(&channel).await,
        queue(&channel).await,
    ];
    for (i, queue) in queues.iter().enumerate() {
        bind(
            &channel,
            queue,
            &ex,
            &format!("key-{i}"),
            FieldTable::default(),
        )
        .await;
    }
    // A second binding of the same queue must not duplicate the message.
    bind(
        &channel,
        &queues[0],
        &ex,
        "another-key",
        FieldTable::default(),
    )
    .await;
    publish(&channel, &ex, "whatever", b"m1").await;
    publish(&channel, &ex, "", b"m2").await;
    for queue in &queues {
        assert_eq!(
            get_all(&channel, queue).await,
            vec!["m1", "m2"],
            "queue {queue}"
        );
    }
}

/// Publishes each key (body = key) to a fresh topic exchange whose only queue is bound with
/// `pattern`, and returns the keys that arrived.
async fn topic_matches(channel: &Channel, pattern: &str, keys: &[&str]) -> Vec<String> {
    let ex = exchange(channel, ExchangeKind::Topic).await;
    let q = queue(channel).await;
    bind(channel, &q, &ex, pattern, FieldTable::default()).await;
    for key in keys {
        publish(channel, &ex, key, key.as_bytes()).await;
    }
    get_all(channel, &q).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_star_matches_exactly_one_word() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let keys = ["a", "a.b", "a.b.c", "b.a", "a.", "x.b"];
    assert_eq!(
        topic_matches(&channel, "a.*", &keys).await,
        vec!["a.b", "a."]
    );
    assert_eq!(
        topic_matches(&channel, "*.b", &keys).await,
        vec!["a.b", "x.b"]
    );
    assert_eq!(topic_matches(&channel, "*", &keys).await, vec!["a"]);
    assert_eq!(
        topic_matches(&channel, "a.*.c", &["a.b.c", "a.c", "a.b.b.c"]).await,
        vec!["a.b.c"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_hash_matches_zero_or_more_words() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let keys = ["a", "a.b", "a.b.c", "b", "b.a", "x.y.b", "b.c", ""];
    // `a.#` matches `a` itself: `#` may stand for zero words.
    assert_eq!(
        topic_matches(&channel, "a.#", &keys).await,
        vec!["a", "a.b", "a.b.c"]
    );
    assert_eq!(
        topic_matches(&channel, "#.b", &keys).await,
        vec!["a.b", "b", "x.y.b"]
    );
    assert_eq!(topic_matches(&channel, "#", &keys).await, keys.to_vec());
    assert_eq!(
        topic_matches(&channel, "a.#.c", &["a.c", "a.b.c", "a.b.b.c", "a.b", "c"]).await,
        vec!["a.c", "a.b.c", "a.b.b.c"]
    );
    assert_eq!(
        topic_matches(&channel, "#.*.#", &["a", "a.b", ""]).await,
        vec!["a", "a.b"],
        "#.*.# needs at least one word"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_exact_words_and_empty_key() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    assert_eq!(
        topic_matches(&channel, "a.b", &["a.b", "a.b.c", "a", "A.B"]).await,
        vec!["a.b"]
    );
    assert_eq!(topic_matches(&channel, "", &["", "a"]).await, vec![""]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_bindings_deliver_once_per_queue() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let ex = exchange(&channel, ExchangeKind::Topic).await;
    let (first, second) = (queue(&channel).await, queue(&channel).await);
    for pattern in ["a.*", "#", "a.b", "*.b", "a.#"] {
        bind(&channel, &first, &ex, pattern, FieldTable::default()).await;
    }
    bind(&channel, &second, &ex, "a.b", FieldTable::default()).await;
    publish(&channel, &ex, "a.b", b"once").await;
    assert_eq!(get_all(&channel, &first).await, vec!["once"]);
    assert_eq!(get_all(&channel, &second).await, vec!["once"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbinding_stops_routing() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let ex = exchange(&channel, ExchangeKind::Direct).await;
    let q = queue(&channel).await;
    bind(&channel, &q, &ex, "k", FieldTable::default()).await;
    publish(&channel, &ex, "k", b"before").await;
    let unbind = channel.queue_unbind(
        q.as_str().into(),
        ex.as_str().into(),
        "k".into(),
        FieldTable::default(),
    );
    bounded!(unbind).expect("unbind");
    publish(&channel, &ex, "k", b"after").await;
    assert_eq!(get_all(&channel, &q).await, vec!["before"]);
}

fn headers(entries: &[(&str, AMQPValue)]) -> BasicProperties {
    BasicProperties::default().with_headers(table(entries))
}

/// Publishes `messages` (body, headers) to a fresh headers exchange whose only queue is bound with
/// `arguments`; returns the bodies that arrived.
async fn headers_matches(
    channel: &Channel,
    arguments: FieldTable,
    messages: &[(&str, BasicProperties)],
) -> Vec<String> {
    let ex = exchange(channel, ExchangeKind::Headers).await;
    let q = queue(channel).await;
    bind(channel, &q, &ex, "", arguments).await;
    for (body, properties) in messages {
        publish_with(channel, &ex, "ignored", body.as_bytes(), properties.clone()).await;
    }
    get_all(channel, &q).await
}

fn int(value: i32) -> AMQPValue {
    AMQPValue::LongInt(value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_all_needs_every_header() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let binding = table(&[
        ("x-match", text("all")),
        ("format", text("pdf")),
        ("type", text("report")),
    ]);
    let messages = [
        (
            "both",
            headers(&[("format", text("pdf")), ("type", text("report"))]),
        ),
        (
            "both+extra",
            headers(&[
                ("format", text("pdf")),
                ("type", text("report")),
                ("z", int(1)),
            ]),
        ),
        ("one", headers(&[("format", text("pdf"))])),
        (
            "wrong value",
            headers(&[("format", text("pdf")), ("type", text("log"))]),
        ),
        ("none", BasicProperties::default()),
    ];
    assert_eq!(
        headers_matches(&channel, binding, &messages).await,
        vec!["both", "both+extra"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_without_x_match_defaults_to_all() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let binding = table(&[("format", text("pdf")), ("type", text("report"))]);
    let messages = [
        (
            "both",
            headers(&[("format", text("pdf")), ("type", text("report"))]),
        ),
        ("one", headers(&[("format", text("pdf"))])),
    ];
    assert_eq!(
        headers_matches(&channel, binding, &messages).await,
        vec!["both"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_any_needs_one_header() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let binding = table(&[
        ("x-match", text("any")),
        ("format", text("pdf")),
        ("type", text("report")),
    ]);
    let messages = [
        ("format", headers(&[("format", text("pdf"))])),
        (
            "type",
            headers(&[("type", text("report")), ("other", int(2))]),
        ),
        (
            "wrong values",
            headers(&[("format", text("zip")), ("type", text("log"))]),
        ),
        ("unrelated", headers(&[("other", text("pdf"))])),
        ("none", BasicProperties::default()),
    ];
    assert_eq!(
        headers_matches(&channel, binding, &messages).await,
        vec!["format", "type"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_value_types_must_match() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let binding = table(&[("x-match", text("all")), ("n", int(1))]);
    let messages = [
        ("int", headers(&[("n", int(1))])),
        ("string", headers(&[("n", text("1"))])),
        ("other int", headers(&[("n", int(2))])),
    ];
    assert_eq!(
        headers_matches(&channel, binding, &messages).await,
        vec!["int"]
    );
}

/// With plain `all` / `any`, binding arguments starting with `x-` are not matched against.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_all_and_any_ignore_x_prefixed_binding_arguments() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let binding = table(&[
        ("x-match", text("all")),
        ("x-tenant", text("acme")),
        ("kind", text("a")),
    ]);
    let messages = [
        ("no x header", headers(&[("kind", text("a"))])),
        (
            "other x header",
            headers(&[("kind", text("a")), ("x-tenant", text("other"))]),
        ),
    ];
    assert_eq!(
        headers_matches(&channel, binding, &messages).await,
        vec!["no x header", "other x header"]
    );

    let binding = table(&[("x-match", text("any")), ("x-tenant", text("acme"))]);
    let messages = [("only x header", headers(&[("x-tenant", text("acme"))]))];
    // The only binding argument is x-prefixed, so `any` has nothing to match: no delivery.
    assert!(headers_matches(&channel, binding, &messages)
        .await
        .is_empty());
}

/// `all-with-x` and `any-with-x` also match `x-` prefixed headers (RabbitMQ 3.10 has them; the
/// binding is accepted and honoured by 3.10.8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_all_with_x_and_any_with_x_match_x_prefixed_headers() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let binding = table(&[
        ("x-match", text("all-with-x")),
        ("x-tenant", text("acme")),
        ("kind", text("a")),
    ]);
    let messages = [
        (
            "both",
            headers(&[("kind", text("a")), ("x-tenant", text("acme"))]),
        ),
        ("no x header", headers(&[("kind", text("a"))])),
        (
            "wrong x header",
            headers(&[("kind", text("a")), ("x-tenant", text("other"))]),
        ),
    ];
    assert_eq!(
        headers_matches(&channel, binding, &messages).await,
        vec!["both"]
    );

    let binding = table(&[
        ("x-match", text("any-with-x")),
        ("x-tenant", text("acme")),
        ("kind", text("a")),
    ]);
    let messages = [
        ("x header only", headers(&[("x-tenant", text("acme"))])),
        ("kind only", headers(&[("kind", text("a"))])),
        ("neither", headers(&[("x-tenant", text("other"))])),
    ];
    assert_eq!(
        headers_matches(&channel, binding, &messages).await,
        vec!["x header only", "kind only"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_binding_with_an_invalid_x_match_is_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let ex = exchange(&channel, ExchangeKind::Headers).await;
    let q = queue(&channel).await;
    let arguments = table(&[("x-match", text("most"))]);
    let bind = channel.queue_bind(
        q.as_str().into(),
        ex.as_str().into(),
        "".into(),
        Default::default(),
        arguments,
    );
    let text = warren_tests::expect_amqp_error(
        bounded!(bind),
        warren_tests::wire::reply::PRECONDITION_FAILED,
    );
    assert!(text.contains("x-match"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_exchange_ignores_the_routing_key() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let binding = table(&[("x-match", text("all"))]);
    // An `all` binding with no headers to match matches every message.
    let messages = [
        ("a", headers(&[("k", int(1))])),
        ("b", BasicProperties::default()),
    ];
    assert_eq!(
        headers_matches(&channel, binding, &messages).await,
        vec!["a", "b"]
    );
}
