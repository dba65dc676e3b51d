//! Probes of the management API: what AMQP refuses, HTTP refuses too.

use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use warren_tests::{bounded, declare_queue, unique, TestBroker};

async fn post(broker: &TestBroker, path: &str, body: Value) -> (StatusCode, String) {
    let response = bounded!(Client::new()
        .post(format!("{}{path}", broker.http_url()))
        .basic_auth("guest", Some("guest"))
        .json(&body)
        .send())
    .expect("HTTP request");
    let status = response.status();
    (status, bounded!(response.text()).expect("HTTP body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_keys_over_255_bytes_are_refused() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("q-long-key");
    declare_queue(&channel, &queue).await;
    let long = "k".repeat(256);
    let (status, text) = post(
        &broker,
        "/api/exchanges/%2F/amq.direct/publish",
        json!({"routing_key": long, "payload": "x", "payload_encoding": "string",
               "properties": {}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("255"), "{text}");
    let (status, text) = post(
        &broker,
        &format!("/api/bindings/%2F/e/amq.direct/q/{queue}"),
        json!({"routing_key": long, "arguments": {}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    // 255 bytes are fine.
    let (status, text) = post(
        &broker,
        &format!("/api/bindings/%2F/e/amq.direct/q/{queue}"),
        json!({"routing_key": "k".repeat(255), "arguments": {}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
}
