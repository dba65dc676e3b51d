//! The management API as RabbitMQ 4.x clients call it (issue 28, point 7 and the HTTP parts
//! of points 4 and 6), over real HTTP (reqwest) and AMQP (the raw frame client): trailing
//! slashes, the routes of `rabbit_mgmt_dispatcher` (served or refused with a reason), queue
//! types that are refused rather than faked, one identity, the close reason of a connection
//! closed through the API.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;
use warren_tests::http::Api;
use warren_tests::raw::{Handshake, RawClient};
use warren_tests::{bounded, eventually, unique, TestBroker};

const LIMIT: Duration = Duration::from_secs(5);

/// A path segment percent-encoded as clients do.
fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_also_answers_with_a_trailing_slash() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let connection = broker.connect().await;
    eventually("one connection listed", LIMIT, || async {
        api.get_any("/api/connections/")
            .await
            .as_array()
            .is_some_and(|l| l.len() == 1)
    })
    .await;
    let name = api.get_any("/api/connections/").await[0]["name"]
        .as_str()
        .expect("a connection name")
        .to_string();
    let one = api
        .get_any(&format!("/api/connections/{}/", encode(&name)))
        .await;
    assert_eq!(one["name"], name.as_str());
    assert!(api.get_any("/api/overview/").await["object_totals"].is_object());
    assert!(api.get_any("/api/queues/%2F/").await.is_array());
    let (status, body) = api
        .send_any(
            Method::PUT,
            &format!("/api/queues/%2F/{}/", unique("slash")),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "PUT with a slash: {body}");
    let (status, body) = api.send_any(Method::GET, "/api/no-such-route/", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"], "Object Not Found");
    let (status, _) = api.send_any(Method::GET, "/", None).await;
    assert_eq!(status, StatusCode::OK, "the UI still answers at /");
    let (status, _) = api.send_any(Method::GET, "/app.js", None).await;
    assert_eq!(status, StatusCode::OK);
    drop(connection);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_types_warren_lacks_are_refused_with_rabbitmq_text() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let refused = [
        (
            json!({"arguments": {"x-queue-type": "quorum"}}),
            "quorum",
            "is not supported by Warren yet",
        ),
        (
            json!({"arguments": {"x-queue-type": "fifo"}}),
            "fifo",
            "unsupported queue type 'fifo'",
        ),
    ];
    for (body, kind, text) in refused {
        let queue = unique("typed");
        let path = format!("/api/queues/%2F/{queue}");
        let (status, error) = api.send_any(Method::PUT, &path, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{kind}: {error}");
        assert_eq!(error["error"], "bad_request");
        let reason = error["reason"].as_str().expect("a reason");
        assert!(
            reason.starts_with(&format!(
                "invalid arg 'x-queue-type' for queue '{queue}' in vhost '/': "
            )),
            "{reason}"
        );
        assert!(reason.contains(text), "{reason}");
        let (status, _) = api.send_any(Method::GET, &path, None).await;
        assert_eq!(
            status,
            StatusCode::NOT_FOUND,
            "no {kind} queue pretends to exist"
        );
    }
    let classic = format!("/api/queues/%2F/{}", unique("classic"));
    let (status, _) = api
        .send_any(
            Method::PUT,
            &classic,
            Some(json!({"queue_type": "classic"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(api.get_any(&classic).await["type"], "classic");
    let stream = format!("/api/queues/%2F/{}", unique("stream"));
    let body = json!({"queue_type": "stream", "durable": true});
    let (status, _) = api.send_any(Method::PUT, &stream, Some(body)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(api.get_any(&stream).await["type"], "stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_identity_everywhere_and_the_cluster_name_can_be_changed() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the broker's identity in-process") {
        return;
    }
    let api = Api::new(&broker);
    let identity = broker.core().identity();
    let overview = api.get_any("/api/overview").await;
    assert_eq!(overview["product_name"], "RabbitMQ");
    assert_eq!(overview["rabbitmq_version"], identity.version());
    assert_eq!(overview["product_version"], identity.version());
    assert_eq!(overview["warren_product"], "Warren");
    assert_eq!(overview["warren_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(overview["node"], identity.node_name.as_str());
    assert_eq!(
        api.get_any("/api/nodes").await[0]["name"],
        identity.node_name.as_str()
    );
    assert_eq!(api.get_any("/api/version").await, identity.version());
    let definitions = api.get_any("/api/definitions").await;
    assert_eq!(definitions["rabbitmq_version"], identity.version());
    assert_eq!(definitions["product_name"], "RabbitMQ");

    let name = unique("cluster");
    let (status, _) = api
        .send_any(
            Method::PUT,
            "/api/cluster-name",
            Some(json!({"name": name})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        api.get_any("/api/cluster-name/").await,
        json!({"name": name})
    );
    assert_eq!(
        api.get_any("/api/overview").await["cluster_name"],
        name.as_str()
    );
    assert_eq!(identity.cluster_name(), name);
    let globals = api.get_any("/api/global-parameters").await;
    assert_eq!(globals[0], json!({"name": "cluster_name", "value": name}));
    let metrics = bounded!(reqwest::get(format!("{}/metrics", broker.prometheus_url())))
        .expect("GET /metrics");
    let metrics = bounded!(metrics.text()).expect("metrics body");
    assert!(
        metrics.contains(&format!("rabbitmq_cluster=\"{name}\"")),
        "identity_info keeps the new name"
    );
    let (status, _) = api
        .send_any(Method::PUT, "/api/cluster-name", Some(json!({"name": 3})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, _) = api
        .send_any(
            Method::PUT,
            "/api/users/watcher",
            Some(json!({"password": "w", "tags": "monitoring"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let watcher = api.as_user("watcher", "w");
    assert_eq!(
        watcher.get_any("/api/cluster-name").await["name"],
        name.as_str()
    );
    let (status, _) = watcher
        .send_any(Method::PUT, "/api/cluster-name", Some(json!({"name": "x"})))
        .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "only administrators rename"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_through_the_api_says_connection_forced_once() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let (mut client, _, _) = RawClient::handshake(broker.addr(), Handshake::default()).await;
    eventually("the raw connection is listed", LIMIT, || async {
        api.get_any("/api/connections")
            .await
            .as_array()
            .is_some_and(|l| l.len() == 1)
    })
    .await;
    let name = api.get_any("/api/connections").await[0]["name"]
        .as_str()
        .expect("a connection name")
        .to_string();
    let (status, _) = api
        .send_any(
            Method::DELETE,
            &format!("/api/connections/{}", encode(&name)),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let close = bounded!(client.expect_connection_close());
    assert_eq!(close.code, 320);
    assert_eq!(
        close.text,
        "CONNECTION_FORCED - Closed via management plugin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_contexts_and_user_routes_of_rabbitmq_4() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let overview = api.get_any("/api/overview").await;
    let node = overview["node"].as_str().expect("a node name").to_string();
    assert_eq!(
        api.get_any("/api/healthchecks/node").await,
        json!({"status": "ok"})
    );
    let own = api
        .get_any(&format!("/api/healthchecks/node/{}", encode(&node)))
        .await;
    assert_eq!(own, json!({"status": "ok"}));
    let (status, _) = api
        .send_any(Method::GET, "/api/healthchecks/node/rabbit@elsewhere", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let port = reqwest::Url::parse(&broker.http_url())
        .expect("the API's URL")
        .port()
        .expect("a port")
        .to_string();
    let contexts = overview["contexts"].as_array().expect("contexts");
    assert!(
        contexts
            .iter()
            .any(|c| c["port"] == port.as_str() && c["description"] == "RabbitMQ Management"),
        "{contexts:?}"
    );
    for check in [
        "metadata-store/initialized",
        "is-in-service",
        "ready-to-serve-clients",
        "protocol-listener/amqp091,http",
    ] {
        assert_eq!(
            api.get_any(&format!("/api/health/checks/{check}")).await["status"],
            "ok"
        );
    }
    let (status, _) = api
        .send_any(
            Method::GET,
            "/api/health/checks/protocol-listener/mqtt",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    for user in ["bulk-a", "bulk-b"] {
        let body = json!({"password": "p", "tags": ""});
        let (status, _) = api
            .send_any(Method::PUT, &format!("/api/users/{user}"), Some(body))
            .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let lonely = api.get_any("/api/users/without-permissions").await;
    assert!(lonely
        .as_array()
        .expect("a list")
        .iter()
        .any(|u| u["name"] == "bulk-a"));
    let (status, _) = api
        .send_any(
            Method::POST,
            "/api/users/bulk-delete",
            Some(json!({"users": ["bulk-a", "bulk-b", "never-was"]})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for user in ["bulk-a", "bulk-b"] {
        let (status, _) = api
            .send_any(Method::GET, &format!("/api/users/{user}"), None)
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_4_routes_are_served_or_refused_with_a_reason() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    assert_eq!(api.get_any("/api/extensions").await, json!([]));
    let queue = unique("per-vhost");
    api.send_any(Method::PUT, &format!("/api/queues/%2F/{queue}"), None)
        .await;
    let exported = api.get_any("/api/definitions/%2F").await;
    let queues = exported["queues"].as_array().expect("queues");
    let mine = queues
        .iter()
        .find(|q| q["name"] == queue.as_str())
        .expect("the queue");
    assert!(
        mine.get("vhost").is_none(),
        "a vhost's export leaves vhost out"
    );
    assert!(exported.get("users").is_none());
    let (status, _) = api
        .send_any(Method::DELETE, &format!("/api/queues/%2F/{queue}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = api
        .send_any(Method::POST, "/api/definitions/%2F", Some(exported))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    api.get_any(&format!("/api/queues/%2F/{queue}")).await;
    let (status, body) = api
        .send_any(
            Method::POST,
            &format!("/api/queues/%2F/{queue}/actions"),
            Some(json!({"action": "sync"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(api.get_any("/api/parameters").await.is_array());
    assert!(api.get_any("/api/auth/hash_password/secret").await["ok"].is_string());
    let node = api.get_any("/api/overview").await["node"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, _) = api
        .send_any(
            Method::POST,
            &format!("/api/vhosts/%2F/start/{}", encode(&node)),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    for (method, path, what) in [
        (Method::GET, "/api/feature-flags", "feature flags"),
        (
            Method::GET,
            "/api/queues/quorum/%2F/q/status",
            "quorum queues",
        ),
        (Method::POST, "/api/rebalance/queues", "rebalancing"),
        (
            Method::GET,
            "/api/deprecated-features/used",
            "deprecated features",
        ),
    ] {
        let (status, error) = api.send_any(method, path, None).await;
        assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{path}: {error}");
        assert_eq!(error["error"], "not_implemented");
        let reason = error["reason"].as_str().expect("a reason");
        assert!(
            reason.contains(what) && reason.contains("Warren does not support"),
            "{reason}"
        );
    }
}
