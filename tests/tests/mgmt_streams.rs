//! Streams as the management API, Prometheus and the stream management plugin's routes show
//! them, against a broker driven by `rabbitmq-stream-client`: a stream's log figures, the
//! stream connections, publishers and consumers with their counters, who sees what, and a
//! connection closed through the API.

mod stream_support;

use std::time::Duration;

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::{Message, OffsetSpecification};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use stream_support::environment;
use warren_tests::http::Api;
use warren_tests::{bounded, unique, TestBroker};

/// Polls `path` until `done` holds for its JSON (counters settle as frames go out).
async fn eventually(api: &Api, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let body = api.get(path).await;
        if done(&body) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "GET {path} never matched: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn only(list: &Value) -> &Value {
    let items = list.as_array().expect("a JSON list");
    assert_eq!(items.len(), 1, "exactly one item: {list}");
    &items[0]
}

#[tokio::test]
async fn streams_publishers_and_consumers_are_listed_with_their_counters() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let api = Api::new(&broker);
    let stream = unique("mgmt-stream");
    tracing::info!("a stream, a deduplicating publisher sending 5 messages, a consumer of them");
    let env = environment(&broker).await;
    bounded!(env.stream_creator().create(&stream)).expect("stream created");
    let mut producer = bounded!(env.producer().name("app-ref").build(&stream)).expect("producer");
    let messages = (0..5)
        .map(|i| Message::builder().body(format!("m{i}")).build())
        .collect();
    let confirmed = bounded!(producer.batch_send_with_confirm(messages)).expect("sent");
    assert!(confirmed.iter().all(|c| c.confirmed()), "all confirmed");
    let mut consumer = bounded!(env
        .consumer()
        .offset(OffsetSpecification::First)
        .build(&stream))
    .expect("consumer");
    for _ in 0..5 {
        let delivery = bounded!(consumer.next())
            .expect("a delivery")
            .expect("no error");
        assert!(delivery.offset() < 5);
    }

    check_stream_figures(&api, &stream).await;

    tracing::info!("the publisher, everywhere it is listed");
    let publishers = api.get("/api/stream/publishers").await;
    let publisher = only(&publishers);
    assert_eq!(publisher["reference"], "app-ref");
    assert_eq!(publisher["queue"], json!({"name": stream, "vhost": "/"}));
    assert_eq!(
        (
            &publisher["published"],
            &publisher["confirmed"],
            &publisher["errored"]
        ),
        (&json!(5), &json!(5), &json!(0))
    );
    assert_eq!(publisher["connection_details"]["user"], "guest");
    let of_stream = api
        .get(&format!("/api/stream/publishers/%2F/{stream}"))
        .await;
    assert_eq!(only(&of_stream)["publisher_id"], publisher["publisher_id"]);
    assert_eq!(api.get("/api/stream/publishers/%2F").await, publishers);
    let (status, _) = api
        .send(Method::GET, "/api/stream/publishers/%2F/missing", None)
        .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "a stream that does not exist"
    );

    tracing::info!("the consumer: consumed, offset of the last record, no lag");
    let consumers = eventually(&api, "/api/stream/consumers", |c| c[0]["consumed"] == 5).await;
    let consumer_json = only(&consumers);
    assert_eq!(consumer_json["offset"], 4);
    assert_eq!(consumer_json["offset_lag"], 0);
    assert!(consumer_json["credits"].is_u64());
    assert_eq!(consumer_json["queue"]["name"], stream.as_str());

    check_connections(&api, publisher).await;
    check_prometheus(&broker).await;

    tracing::info!("a closed publisher and consumer leave the lists");
    bounded!(producer.close()).expect("producer closed");
    bounded!(consumer.handle().close()).expect("consumer closed");
    eventually(&api, "/api/stream/publishers", |p| p == &json!([])).await;
    eventually(&api, "/api/stream/consumers", |c| c == &json!([])).await;
}

/// A stream of 5 records in one chunk or more: its log figures in `/api/queues`.
async fn check_stream_figures(api: &Api, stream: &str) {
    tracing::info!("the stream's figures");
    let queue = api.get(&format!("/api/queues/%2F/{stream}")).await;
    assert_eq!(queue["type"], "stream", "{queue}");
    assert_eq!(queue["messages"], 5);
    assert_eq!(queue["messages_unacknowledged"], 0);
    assert_eq!(queue["first_offset"], 0);
    assert_eq!(queue["committed_offset"], 4);
    assert!(queue["committed_chunk_id"].as_i64().unwrap() >= 0);
    assert!(queue["segments"].as_u64().unwrap() >= 1);
    assert!(queue["message_bytes"].as_u64().unwrap() > 0);
}

/// The stream connections list, one connection by name, and its own publisher list.
async fn check_connections(api: &Api, publisher: &Value) {
    tracing::info!("the connections: protocol stream, and their own publisher lists");
    let connections = api.get("/api/stream/connections").await;
    let connections = connections.as_array().unwrap();
    assert!(!connections.is_empty());
    assert!(connections.iter().all(|c| c["protocol"] == "stream"));
    let name = publisher["connection_details"]["name"].as_str().unwrap();
    let encoded = name.replace(' ', "%20").replace('>', "%3E");
    let path = format!("/api/stream/connections/%2F/{encoded}");
    assert_eq!(api.get(&path).await["name"], name);
    let own = api.get(&format!("{path}/publishers")).await;
    assert_eq!(only(&own)["reference"], "app-ref");
    let (status, _) = api
        .send(
            Method::GET,
            &format!("/api/stream/connections/other/{encoded}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not in that vhost");
}

/// The stream families on `/metrics` after 5 messages in, confirmed and delivered.
async fn check_prometheus(broker: &TestBroker) {
    tracing::info!("Prometheus carries the stream families");
    let metrics = bounded!(reqwest::get(format!("{}/metrics", broker.prometheus_url())))
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "rabbitmq_global_publishers{protocol=\"stream\"} 1",
        "rabbitmq_global_consumers{protocol=\"stream\"} 1",
        "rabbitmq_global_messages_received_total{protocol=\"stream\"} 5",
        "rabbitmq_global_messages_confirmed_total{protocol=\"stream\"} 5",
        "rabbitmq_global_messages_delivered_total{protocol=\"stream\"} 5",
        "rabbitmq_stream_consumer_max_offset_lag 0",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
    assert!(metrics.contains("rabbitmq_stream_segments "));
}

#[tokio::test]
async fn users_see_their_own_stream_clients_and_deleting_a_connection_closes_it() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let api = Api::new(&broker);
    let stream = unique("mgmt-stream-perm");
    let env = environment(&broker).await;
    bounded!(env.stream_creator().create(&stream)).expect("stream created");
    let producer = bounded!(env.producer().build(&stream)).expect("producer");

    tracing::info!("a management user without the monitoring tag sees none of guest's");
    let user = json!({"password": "bob", "tags": "management"});
    let (status, _) = api.send(Method::PUT, "/api/users/bob", Some(user)).await;
    assert!(status.is_success());
    let grant = json!({"configure": ".*", "write": ".*", "read": ".*"});
    let (status, _) = api
        .send(Method::PUT, "/api/permissions/%2F/bob", Some(grant))
        .await;
    assert!(status.is_success());
    let bob = api.as_user("bob", "bob");
    assert_eq!(bob.get("/api/stream/publishers").await, json!([]));
    assert_eq!(bob.get("/api/stream/connections").await, json!([]));
    let publishers = api.get("/api/stream/publishers").await;
    assert_eq!(
        only(&publishers)["reference"],
        "",
        "no reference: RabbitMQ's empty string"
    );
    let (status, _) = api
        .send(Method::GET, "/api/stream/consumers/nope", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a vhost that does not exist");

    tracing::info!("DELETE closes the publisher's connection; it leaves the registry");
    let name = publishers[0]["connection_details"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let encoded = name.replace(' ', "%20").replace('>', "%3E");
    let path = format!("/api/stream/connections/%2F/{encoded}");
    let (status, _) = bob.send(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "not bob's to close");
    let (status, _) = api.send(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    eventually(&api, "/api/stream/connections", |list| {
        list.as_array()
            .unwrap()
            .iter()
            .all(|c| c["name"] != name.as_str())
    })
    .await;
    assert_eq!(api.get("/api/stream/publishers").await, json!([]));
    drop(producer);
}

/// The one item of `list` whose `key` is `value`.
fn item_with<'a>(list: &'a Value, key: &str, value: &str) -> &'a Value {
    let items = list.as_array().expect("a JSON list");
    let found: Vec<&Value> = items.iter().filter(|i| i[key] == value).collect();
    assert_eq!(found.len(), 1, "one item with {key} = {value} in {list}");
    found[0]
}

#[tokio::test]
async fn stream_subscriptions_are_listed_among_consumers() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let api = Api::new(&broker);
    let stream = unique("mgmt-sub");
    let queue = unique("mgmt-sub-classic");
    tracing::info!("an AMQP consumer on a classic queue, a subscription with a property");
    let (_amqp, channel) = broker.channel().await;
    bounded!(channel.queue_declare(
        queue.as_str().into(),
        Default::default(),
        Default::default()
    ))
    .expect("queue declared");
    let _amqp_consumer = bounded!(channel.basic_consume(
        queue.as_str().into(),
        "amqp-tag".into(),
        Default::default(),
        Default::default()
    ))
    .expect("AMQP consumer");
    let env = environment(&broker).await;
    bounded!(env.stream_creator().create(&stream)).expect("stream created");
    let properties = [("app".to_string(), "mgmt-test".to_string())].into();
    let consumer =
        bounded!(env.consumer().properties(properties).build(&stream)).expect("subscription");
    let subscription = api.get("/api/stream/consumers").await;
    let subscription = only(&subscription);
    let tag = format!("stream.subid-{}", subscription["subscription_id"]);
    let connection = &subscription["connection_details"]["name"];

    tracing::info!("/api/consumers lists both; the subscription as RabbitMQ's stream plugin");
    let consumers = api.get("/api/consumers").await;
    assert_eq!(consumers.as_array().unwrap().len(), 2, "{consumers}");
    item_with(&consumers, "consumer_tag", "amqp-tag");
    let listed = item_with(&consumers, "consumer_tag", &tag);
    check_subscription_fields(listed, connection, &stream);
    let in_vhost = api.get("/api/consumers/%2F").await;
    assert_eq!(item_with(&in_vhost, "consumer_tag", &tag), listed);

    tracing::info!("the stream counts it; the overview counts both");
    let of_stream = api.get(&format!("/api/queues/%2F/{stream}")).await;
    assert_eq!(of_stream["consumers"], 1, "{of_stream}");
    assert_eq!(only(&of_stream["consumer_details"])["consumer_tag"], tag);
    let overview = api.get("/api/overview").await;
    assert_eq!(overview["object_totals"]["consumers"], 2);

    tracing::info!("a closed subscription leaves the lists");
    bounded!(consumer.handle().close()).expect("subscription closed");
    let consumers = eventually(&api, "/api/consumers", |c| c.as_array().unwrap().len() == 1).await;
    assert_eq!(only(&consumers)["consumer_tag"], "amqp-tag");
    let of_stream = api.get(&format!("/api/queues/%2F/{stream}")).await;
    assert_eq!(of_stream["consumers"], 0);
}

/// A subscription in `/api/consumers`, as RabbitMQ's stream plugin reports it to core metrics.
fn check_subscription_fields(listed: &Value, connection: &Value, stream: &str) {
    let details = &listed["channel_details"];
    assert_eq!(
        (
            &details["connection_name"],
            &details["name"],
            &details["number"]
        ),
        (connection, &json!(""), &json!(0)),
        "the connection is the subscription's channel: {listed}"
    );
    assert_eq!(details["user"], "guest");
    assert!(details["peer_port"].as_u64().unwrap() > 0);
    assert_eq!(details["peer_host"], "127.0.0.1");
    for (key, value) in [
        ("queue", json!({"name": stream, "vhost": "/"})),
        ("ack_required", json!(false)),
        ("exclusive", json!(false)),
        ("prefetch_count", json!(0)),
        ("active", json!(true)),
        ("activity_status", json!("up")),
        ("arguments", json!({"app": "mgmt-test"})),
    ] {
        assert_eq!(listed[key], value, "{key} of {listed}");
    }
}

#[tokio::test]
async fn a_streams_tracking_lists_stored_offsets_and_writer_sequences() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let api = Api::new(&broker);
    let stream = unique("mgmt-tracking");
    let path = format!("/api/stream/%2F/{stream}/tracking");
    let env = environment(&broker).await;
    bounded!(env.stream_creator().create(&stream)).expect("stream created");
    tracing::info!("a fresh stream tracks nothing");
    assert_eq!(api.get(&path).await, json!({"offsets": {}, "writers": {}}));

    tracing::info!("a deduplicating producer's sequence and a consumer's stored offset");
    let mut producer = bounded!(env.producer().name("app-ref").build(&stream)).expect("producer");
    let messages = (0..3)
        .map(|i| Message::builder().body(format!("m{i}")).build())
        .collect();
    let confirmed = bounded!(producer.batch_send_with_confirm(messages)).expect("sent");
    assert!(confirmed.iter().all(|c| c.confirmed()), "all confirmed");
    let consumer = bounded!(env.consumer().name("reader").build(&stream)).expect("consumer");
    bounded!(consumer.store_offset(2)).expect("offset stored");
    let client = stream_support::client(&broker).await;
    let sequence = bounded!(client.query_publisher_sequence("app-ref", &stream)).expect("seq");
    assert!(sequence > 0, "the producer's last publishing id");
    let both = json!({"offsets": {"reader": 2}, "writers": {"app-ref": sequence}});
    assert_eq!(api.get(&path).await, both);
    assert_eq!(api.get(&format!("{path}?type=all")).await, both);
    assert_eq!(
        api.get(&format!("{path}?type=offset")).await,
        json!({"offsets": {"reader": 2}})
    );
    assert_eq!(
        api.get(&format!("{path}?type=writer")).await,
        json!({"writers": {"app-ref": sequence}})
    );
    assert_eq!(
        api.get(&format!("{path}?type=other")).await,
        both,
        "RabbitMQ answers both for a type it does not know"
    );

    check_tracking_refusals(&broker, &api, &stream).await;
    bounded!(producer.close()).expect("producer closed");
    bounded!(consumer.handle().close()).expect("consumer closed");
    bounded!(client.close()).expect("client closed");
}

/// 404 for what is not a stream, 401 for a user who may not read it.
async fn check_tracking_refusals(broker: &TestBroker, api: &Api, stream: &str) {
    tracing::info!("no such stream, a classic queue, no such vhost: 404");
    let (_connection, channel) = broker.channel().await;
    let classic = unique("mgmt-tracking-classic");
    bounded!(channel.queue_declare(
        classic.as_str().into(),
        Default::default(),
        Default::default()
    ))
    .expect("queue declared");
    for path in [
        "/api/stream/%2F/missing/tracking".to_string(),
        format!("/api/stream/%2F/{classic}/tracking"),
        format!("/api/stream/nope/{stream}/tracking"),
    ] {
        let (status, _) = api.send(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }

    tracing::info!("no read permission on the stream, or none in the vhost: 401");
    let path = format!("/api/stream/%2F/{stream}/tracking");
    let user = json!({"password": "pw", "tags": "management"});
    for name in ["no-read", "no-perms"] {
        let (status, _) = api
            .send(
                Method::PUT,
                &format!("/api/users/{name}"),
                Some(user.clone()),
            )
            .await;
        assert!(status.is_success());
    }
    let grant = json!({"configure": ".*", "write": ".*", "read": "^$"});
    let (status, _) = api
        .send(Method::PUT, "/api/permissions/%2F/no-read", Some(grant))
        .await;
    assert!(status.is_success());
    let (status, body) = api
        .as_user("no-read", "pw")
        .send(Method::GET, &path, None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["reason"], "Access refused.");
    let (status, body) = api
        .as_user("no-perms", "pw")
        .send(Method::GET, &path, None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["reason"], "User not authorised to access virtual host");
}

#[tokio::test]
async fn the_overview_lists_the_stream_listener_while_it_is_on() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let api = Api::new(&broker);
    let port = broker.stream_addr().expect("a stream listener").port();
    let overview = api.get("/api/overview").await;
    let listener = item_with(&overview["listeners"], "protocol", "stream");
    assert_eq!(listener["port"], port);
    assert_eq!(listener["ip_address"], "127.0.0.1");
    assert_eq!(listener["node"], overview["node"]);
    item_with(&overview["listeners"], "protocol", "amqp");
    api.get("/api/health/checks/protocol-listener/stream").await;

    tracing::info!("with the stream port off, no stream listener is listed");
    let off = TestBroker::start_with(|config| config.stream_listeners = Some(Vec::new())).await;
    let api = Api::new(&off);
    let overview = api.get("/api/overview").await;
    let listeners = overview["listeners"].as_array().unwrap();
    assert!(
        listeners.iter().all(|l| l["protocol"] != "stream"),
        "{overview}"
    );
    assert!(listeners.iter().any(|l| l["protocol"] == "amqp"));
    let (status, _) = api
        .send(
            Method::GET,
            "/api/health/checks/protocol-listener/stream",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}
