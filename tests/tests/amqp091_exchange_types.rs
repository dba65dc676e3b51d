//! The plugin and 4.x exchange types, and sender-selected distribution:
//! - `x-consistent-hash` (binding key = weight; hashes the routing key, a header or a property),
//! - `x-modulus-hash` (hash of the routing key modulo the number of bindings),
//! - `x-local-random` (one bound queue at random; queues only, empty binding keys),
//! - the `CC` and `BCC` headers (extra routing keys; `BCC` is stripped before delivery),
//! - durability of these exchange types across a restart.

use std::collections::{HashMap, HashSet};

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeBindOptions, ExchangeDeclareOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldArray, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};
use warren_tests::wire::reply;
use warren_tests::{
    bounded, declare_queue, expect_amqp_error, get, get_all, message_count, table, text,
    try_bind_queue, unique, ChannelWatch, TestBroker,
};

async fn declare_exchange(
    channel: &Channel,
    kind: &str,
    arguments: FieldTable,
    durable: bool,
) -> lapin::Result<String> {
    let name = unique(kind);
    let options = ExchangeDeclareOptions {
        durable,
        ..Default::default()
    };
    let declare = channel.exchange_declare(
        name.as_str().into(),
        ExchangeKind::Custom(kind.into()),
        options,
        arguments,
    );
    bounded!(declare).map(|()| name)
}

async fn exchange(channel: &Channel, kind: &str, arguments: FieldTable) -> String {
    declare_exchange(channel, kind, arguments, false)
        .await
        .unwrap_or_else(|error| panic!("declare {kind} exchange: {error}"))
}

/// Fresh queues bound to `exchange` with the given binding keys, in order.
async fn bound_queues(channel: &Channel, exchange: &str, keys: &[&str]) -> Vec<String> {
    let mut queues = Vec::new();
    for key in keys {
        let queue = unique("xt-q");
        declare_queue(channel, &queue).await;
        try_bind_queue(channel, &queue, exchange, key)
            .await
            .unwrap_or_else(|error| panic!("bind {queue} with '{key}': {error}"));
        queues.push(queue);
    }
    queues
}

/// Publishes every (routing key, properties, body) with publisher confirms on a fresh channel
/// and waits for all confirms; returns how many came back as unroutable (mandatory).
async fn publish_all(
    connection: &Connection,
    exchange: &str,
    messages: impl IntoIterator<Item = (String, BasicProperties, String)>,
) -> usize {
    let channel = bounded!(connection.create_channel()).expect("open a channel");
    bounded!(channel.confirm_select(ConfirmSelectOptions::default())).expect("confirm.select");
    let mut confirms = Vec::new();
    for (key, properties, body) in messages {
        let options = BasicPublishOptions {
            mandatory: true,
            ..Default::default()
        };
        let publish = channel.basic_publish(
            exchange.into(),
            key.as_str().into(),
            options,
            body.as_bytes(),
            properties,
        );
        confirms.push(bounded!(publish).unwrap_or_else(|error| panic!("publish: {error}")));
    }
    let mut returned = 0;
    for confirm in confirms {
        let confirmation = bounded!(confirm).unwrap_or_else(|error| panic!("confirm: {error}"));
        assert!(confirmation.is_ack(), "{confirmation:?}");
        returned += usize::from(confirmation.take_message().is_some());
    }
    returned
}

fn plain(key: String) -> (String, BasicProperties, String) {
    (key.clone(), BasicProperties::default(), key)
}

/// Drains every queue; maps each body to the queues it arrived in.
async fn placement(channel: &Channel, queues: &[String]) -> HashMap<String, Vec<usize>> {
    let mut placed: HashMap<String, Vec<usize>> = HashMap::new();
    for (index, queue) in queues.iter().enumerate() {
        for body in get_all(channel, queue).await {
            placed.entry(body).or_default().push(index);
        }
    }
    placed
}

/// Every body arrived in exactly one queue; the same `group(body)` always in the same queue.
fn assert_one_queue_per_group(placed: &HashMap<String, Vec<usize>>, group: impl Fn(&str) -> &str) {
    let mut queue_of: HashMap<&str, usize> = HashMap::new();
    for (body, queues) in placed {
        assert_eq!(queues.len(), 1, "{body} arrived in {queues:?}");
        let previous = *queue_of.entry(group(body)).or_insert(queues[0]);
        assert_eq!(previous, queues[0], "{body}: group placed in two queues");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_hash_distributes_in_proportion_to_weights() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let ex = exchange(&channel, "x-consistent-hash", FieldTable::default()).await;
    let weights = [1u32, 1, 2, 4];
    let keys: Vec<String> = weights.iter().map(u32::to_string).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let queues = bound_queues(&channel, &ex, &keys).await;
    let total = 10_000u32;
    let returned = publish_all(&connection, &ex, (0..total).map(|i| plain(format!("k{i}")))).await;
    assert_eq!(returned, 0);
    // Confirmed means in each queue's mailbox: poll until the queues have taken them all.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let (counts, sum) = loop {
        let mut counts = Vec::new();
        for queue in &queues {
            counts.push(message_count(&connection, queue).await);
        }
        let sum: u32 = counts.iter().sum();
        if sum >= total || tokio::time::Instant::now() > deadline {
            break (counts, sum);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    for (count, weight) in counts.into_iter().zip(weights) {
        let expected = f64::from(total) * f64::from(weight) / 8.0;
        let deviation = (f64::from(count) - expected).abs() / expected;
        assert!(
            deviation < 0.15,
            "weight {weight}: {count} messages, expected about {expected}"
        );
    }
    assert_eq!(sum, total, "each message goes to exactly one queue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_hash_is_stable_per_routing_key() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let ex = exchange(&channel, "x-consistent-hash", FieldTable::default()).await;
    let queues = bound_queues(&channel, &ex, &["1", "1", "1"]).await;
    // 40 keys, each published 5 times; body "key#n".
    let messages = (0..200).map(|i| plain(format!("key{}#{}", i % 40, i / 40)));
    let messages: Vec<_> = messages
        .map(|(body, props, _)| (body.split('#').next().unwrap_or("").to_owned(), props, body))
        .collect();
    assert_eq!(publish_all(&connection, &ex, messages).await, 0);
    let placed = placement(&channel, &queues).await;
    assert_eq!(placed.len(), 200);
    assert_one_queue_per_group(&placed, |body| body.split('#').next().unwrap_or(""));
    let used: HashSet<usize> = placed.values().map(|q| q[0]).collect();
    assert_eq!(used.len(), 3, "40 keys spread over all 3 queues");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_hash_on_a_header() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let args = table(&[("hash-header", text("shard"))]);
    let ex = exchange(&channel, "x-consistent-hash", args).await;
    let queues = bound_queues(&channel, &ex, &["1", "2", "1"]).await;
    // The routing key is the same for all: only the header decides.
    let messages = (0..120).map(|i| {
        let shard = format!("s{}", i % 30);
        let headers = table(&[("shard", text(&shard))]);
        let props = BasicProperties::default().with_headers(headers);
        ("same-key".to_owned(), props, format!("{shard}#{i}"))
    });
    assert_eq!(publish_all(&connection, &ex, messages).await, 0);
    let placed = placement(&channel, &queues).await;
    assert_eq!(placed.len(), 120);
    assert_one_queue_per_group(&placed, |body| body.split('#').next().unwrap_or(""));
    let used: HashSet<usize> = placed.values().map(|q| q[0]).collect();
    assert!(used.len() >= 2, "30 header values use several queues");

    // Without the header, the message goes nowhere: mandatory returns it.
    let missing = vec![plain("same-key".to_owned())];
    assert_eq!(publish_all(&connection, &ex, missing).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_hash_on_a_property() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    for property in ["message_id", "correlation_id", "timestamp"] {
        let args = table(&[("hash-property", text(property))]);
        let ex = exchange(&channel, "x-consistent-hash", args).await;
        let queues = bound_queues(&channel, &ex, &["1", "1", "1"]).await;
        let messages = (0..90u64).map(|i| {
            let value = i % 20;
            let props = BasicProperties::default();
            let props = match property {
                "message_id" => props.with_message_id(format!("m{value}").into()),
                "correlation_id" => props.with_correlation_id(format!("c{value}").into()),
                _ => props.with_timestamp(1_700_000_000 + value),
            };
            (format!("rk{i}"), props, format!("{value}#{i}"))
        });
        assert_eq!(publish_all(&connection, &ex, messages).await, 0);
        let placed = placement(&channel, &queues).await;
        assert_eq!(placed.len(), 90, "{property}");
        assert_one_queue_per_group(&placed, |body| body.split('#').next().unwrap_or(""));
        let used: HashSet<usize> = placed.values().map(|q| q[0]).collect();
        assert!(used.len() >= 2, "{property}: 20 values use several queues");
        let missing = vec![plain("rk".to_owned())];
        assert_eq!(
            publish_all(&connection, &ex, missing).await,
            1,
            "{property} absent: unroutable"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_hash_refuses_a_non_integer_binding_key_with_406() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let ex = exchange(&channel, "x-consistent-hash", FieldTable::default()).await;
    let queue = unique("xt-q");
    declare_queue(&channel, &queue).await;
    for key in ["heavy", "0", "-1"] {
        let channel = bounded!(connection.create_channel()).expect("open a channel");
        let text = expect_amqp_error(
            try_bind_queue(&channel, &queue, &ex, key).await,
            reply::PRECONDITION_FAILED,
        );
        assert!(text.contains("binding key must be"), "{key}: {text}");
    }
    // Bad exchange arguments are refused at declaration.
    for args in [
        table(&[("hash-property", text("app_id"))]),
        table(&[
            ("hash-header", text("h")),
            ("hash-property", text("message_id")),
        ]),
    ] {
        let channel = bounded!(connection.create_channel()).expect("open a channel");
        expect_amqp_error(
            declare_exchange(&channel, "x-consistent-hash", args, false).await,
            reply::PRECONDITION_FAILED,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modulus_hash_spreads_and_is_stable_per_key() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let ex = exchange(&channel, "x-modulus-hash", FieldTable::default()).await;
    // Binding keys are ignored.
    let queues = bound_queues(&channel, &ex, &["a", "b", "c", ""]).await;
    let messages = (0..2_000).map(|i| {
        let key = format!("order-{}", i % 500);
        (
            key.clone(),
            BasicProperties::default(),
            format!("{key}#{i}"),
        )
    });
    assert_eq!(publish_all(&connection, &ex, messages).await, 0);
    let placed = placement(&channel, &queues).await;
    assert_eq!(placed.len(), 2_000);
    assert_one_queue_per_group(&placed, |body| body.split('#').next().unwrap_or(""));
    let mut counts = [0usize; 4];
    for queues in placed.values() {
        counts[queues[0]] += 1;
    }
    for count in counts {
        assert!((300..700).contains(&count), "uneven spread: {counts:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_random_delivers_each_message_to_one_queue() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let ex = exchange(&channel, "x-local-random", FieldTable::default()).await;
    let queues = bound_queues(&channel, &ex, &["", "", ""]).await;
    let messages = (0..300).map(|i| plain(format!("m{i}")));
    assert_eq!(publish_all(&connection, &ex, messages).await, 0);
    let placed = placement(&channel, &queues).await;
    assert_eq!(placed.len(), 300);
    let mut counts = [0usize; 3];
    for (body, queues) in &placed {
        assert_eq!(queues.len(), 1, "{body} arrived in {queues:?}");
        counts[queues[0]] += 1;
    }
    assert!(
        counts.iter().all(|c| *c > 0),
        "every queue gets some: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_random_takes_only_queues_with_empty_binding_keys() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let ex = exchange(&channel, "x-local-random", FieldTable::default()).await;
    let queue = unique("xt-q");
    declare_queue(&channel, &queue).await;
    let text = expect_amqp_error(
        try_bind_queue(&channel, &queue, &ex, "a-key").await,
        reply::PRECONDITION_FAILED,
    );
    assert!(text.contains("routing keys"), "{text}");

    let channel = bounded!(connection.create_channel()).expect("open a channel");
    let source = exchange(&channel, "fanout", FieldTable::default()).await;
    let bind = channel.exchange_bind(
        ex.as_str().into(),
        source.as_str().into(),
        "".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    );
    // Binding the local-random exchange as a destination is fine ...
    bounded!(bind).expect("bind x-local-random to a fanout");
    // ... but an exchange cannot be bound to it.
    let bind = channel.exchange_bind(
        source.as_str().into(),
        ex.as_str().into(),
        "".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    );
    let text = expect_amqp_error(bounded!(bind), reply::PRECONDITION_FAILED);
    assert!(text.contains("only queues"), "{text}");
    // Nothing bound: unroutable.
    let channel = bounded!(connection.create_channel()).expect("open a channel");
    let lonely = exchange(&channel, "x-local-random", FieldTable::default()).await;
    assert_eq!(
        publish_all(&connection, &lonely, vec![plain("x".into())]).await,
        1
    );
}

fn routing_keys(keys: &[&str]) -> AMQPValue {
    let values: Vec<AMQPValue> = keys.iter().map(|k| text(k)).collect();
    AMQPValue::FieldArray(FieldArray::from(values))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cc_and_bcc_headers_add_routing_keys_and_bcc_is_stripped() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let ex = exchange(&channel, "direct", FieldTable::default()).await;
    let queues = bound_queues(&channel, &ex, &["to", "cc", "bcc", "other"]).await;
    let headers = table(&[
        ("CC", routing_keys(&["cc"])),
        ("BCC", routing_keys(&["bcc"])),
        ("keep", text("me")),
    ]);
    let props = BasicProperties::default().with_headers(headers);
    let messages = vec![("to".to_owned(), props, "hello".to_owned())];
    assert_eq!(publish_all(&connection, &ex, messages).await, 0);
    for queue in &queues[..3] {
        let message = get(&channel, queue).await.expect("one message");
        assert_eq!(message.delivery.data, b"hello", "{queue}");
        let headers = message
            .delivery
            .properties
            .headers()
            .clone()
            .expect("headers kept");
        let headers = headers.inner();
        assert!(!headers.contains_key("BCC"), "BCC stripped: {headers:?}");
        assert_eq!(headers.get("CC"), Some(&routing_keys(&["cc"])));
        assert_eq!(headers.get("keep"), Some(&text("me")));
    }
    assert!(get_all(&channel, &queues[3]).await.is_empty());

    // Through the default exchange each key names a queue; a key reaching a queue already
    // reached does not duplicate the message.
    let headers = table(&[("CC", routing_keys(&[&queues[1], &queues[0]]))]);
    let props = BasicProperties::default().with_headers(headers);
    let messages = vec![(queues[0].clone(), props, "direct".to_owned())];
    assert_eq!(publish_all(&connection, "", messages).await, 0);
    assert_eq!(get_all(&channel, &queues[0]).await, ["direct"]);
    assert_eq!(get_all(&channel, &queues[1]).await, ["direct"]);

    // A CC header that is not an array is refused with 406.
    let headers = table(&[("CC", text("cc"))]);
    let props = BasicProperties::default().with_headers(headers);
    let watch = ChannelWatch::new(&channel).await;
    let bad = channel.basic_publish(
        ex.as_str().into(),
        "to".into(),
        BasicPublishOptions::default(),
        b"bad",
        props,
    );
    let _ = bounded!(bad);
    let text = watch.expect_close(reply::PRECONDITION_FAILED).await;
    assert!(text.contains("header CC"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bcc_only_routes_through_a_topic_exchange() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let ex = exchange(&channel, "topic", FieldTable::default()).await;
    let queues = bound_queues(&channel, &ex, &["audit.#", "orders.*"]).await;
    let headers = table(&[("BCC", routing_keys(&["audit.orders"]))]);
    let props = BasicProperties::default().with_headers(headers);
    let messages = vec![("orders.created".to_owned(), props, "o1".to_owned())];
    assert_eq!(publish_all(&connection, &ex, messages).await, 0);
    for queue in &queues {
        let message = get(&channel, queue).await.expect("one message");
        let headers = message.delivery.properties.headers().clone();
        assert!(
            headers.is_none_or(|h| !h.inner().contains_key("BCC")),
            "BCC stripped"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_exchange_type_names_it() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let text = expect_amqp_error(
        declare_exchange(&channel, "x-no-such-type", FieldTable::default(), false).await,
        reply::PRECONDITION_FAILED,
    );
    assert!(
        text.contains("unknown exchange type 'x-no-such-type'"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_exchange_types_survive_a_restart() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let kinds = [
        ("x-consistent-hash", table(&[("hash-header", text("h"))])),
        ("x-modulus-hash", FieldTable::default()),
        ("x-local-random", FieldTable::default()),
    ];
    let mut declared = Vec::new();
    {
        let (connection, channel) = broker.channel().await;
        for (kind, args) in &kinds {
            let ex = declare_exchange(&channel, kind, args.clone(), true)
                .await
                .expect("declare durable exchange");
            let queue = unique("xt-durable");
            let declare = channel.queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            );
            bounded!(declare).expect("declare durable queue");
            let key = if *kind == "x-consistent-hash" {
                "3"
            } else {
                ""
            };
            try_bind_queue(&channel, &queue, &ex, key)
                .await
                .expect("bind");
            declared.push((*kind, args.clone(), ex, queue));
        }
        bounded!(connection.close(200, "OK".into())).expect("close");
    }
    let broker = broker.restart().await;
    let (connection, channel) = broker.channel().await;
    for (kind, args, ex, queue) in &declared {
        // Same type and arguments: an equivalent redeclaration succeeds.
        let declare = channel.exchange_declare(
            ex.as_str().into(),
            ExchangeKind::Custom((*kind).into()),
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            args.clone(),
        );
        bounded!(declare).unwrap_or_else(|error| panic!("{kind} is back: {error}"));
        let headers = table(&[("h", text("v"))]);
        let props = BasicProperties::default().with_headers(headers);
        let messages = vec![("k".to_owned(), props, format!("after restart {kind}"))];
        assert_eq!(publish_all(&connection, ex, messages).await, 0, "{kind}");
        assert_eq!(
            get_all(&channel, queue).await,
            [format!("after restart {kind}")],
            "{kind} still routes"
        );
    }
}
