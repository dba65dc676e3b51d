//! The management HTTP API and Prometheus endpoint, driven over real HTTP (reqwest) next to
//! AMQP clients (lapin): what one side declares or publishes the other sees.

use std::time::Duration;

use lapin::options::{BasicAckOptions, BasicConsumeOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};
use warren_tests::http::Api;
use warren_tests::{
    bounded, confirm_channel, connect_url, consume, eventually, get_all, message_count,
    next_delivery, publish, unique, TestBroker,
};

const LIMIT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_declared_over_http_is_seen_over_amqp_with_counts() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let queue = unique("mgmt-q");
    tracing::info!("declare with PUT, as rabbitmqadmin does");
    let body = json!({"durable": "true", "auto_delete": false,
                      "arguments": {"x-queue-type": "classic"}});
    let (status, _) = api
        .send(
            Method::PUT,
            &format!("/api/queues/%2F/{queue}"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = api
        .send(Method::PUT, &format!("/api/queues/%2F/{queue}"), Some(body))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "redeclaring is idempotent");
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    bounded!(channel.queue_declare(queue.as_str().into(), passive, FieldTable::default()))
        .expect("the queue exists over AMQP");
    for i in 0..3 {
        publish(&channel, "", &queue, format!("m{i}").as_bytes()).await;
    }
    let path = format!("/api/queues/%2F/{queue}");
    eventually("three messages ready", LIMIT, || async {
        api.get(&path).await["messages_ready"] == 3
    })
    .await;
    let info = api.get(&path).await;
    assert_eq!(info["name"], queue.as_str());
    assert_eq!(info["vhost"], "/");
    assert_eq!(info["durable"], true);
    assert_eq!(info["type"], "classic");
    assert_eq!(info["messages"], 3);
    assert_eq!(info["messages_unacknowledged"], 0);
    assert_eq!(info["message_bytes_ready"], 6, "three 2-byte bodies");
    assert_eq!(info["consumers"], 0);
    assert_eq!(info["message_stats"]["publish"], 3);
    assert!(info["message_stats"]["publish_details"]["rate"].is_number());
    // The sampler runs once a second: the burst shows as a rate for one sample.
    eventually("a publish rate", Duration::from_secs(4), || async {
        let rate = |v: &Value| v["message_stats"]["publish_details"]["rate"].as_f64();
        rate(&api.get(&path).await).is_some_and(|r| r > 0.0)
            && rate(&api.get("/api/overview").await).is_some_and(|r| r > 0.0)
    })
    .await;

    tracing::info!("a consumer without acks shows unacked messages and a consumer");
    let consumer_channel = bounded!(connection.create_channel()).unwrap();
    let _consumer = bounded!(consumer_channel.basic_consume(
        queue.as_str().into(),
        "mgmt-ctag".into(),
        BasicConsumeOptions::default(),
        FieldTable::default()
    ))
    .unwrap();
    eventually("three unacked, one consumer", LIMIT, || async {
        let info = api.get(&path).await;
        info["messages_unacknowledged"] == 3 && info["consumers"] == 1
    })
    .await;
    let details = &api.get(&path).await["consumer_details"];
    assert_eq!(details[0]["consumer_tag"], "mgmt-ctag", "{details}");
    let consumers = api.get("/api/consumers").await;
    let mine = consumers
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["consumer_tag"] == "mgmt-ctag")
        .expect("the consumer is listed");
    assert_eq!(mine["queue"]["name"], queue.as_str());
    assert_eq!(mine["ack_required"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_get_and_purge_over_http() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let queue = unique("mgmt-get");
    let queue_path = format!("/api/queues/%2F/{queue}");
    api.send(Method::PUT, &queue_path, Some(json!({"durable": false})))
        .await;
    for i in 0..4 {
        let body = json!({"routing_key": queue, "payload": format!("hello {i}"),
                          "payload_encoding": "string",
                          "properties": {"delivery_mode": 2, "headers": {"h": "v"}}});
        let (status, reply) = api
            .send(
                Method::POST,
                "/api/exchanges/%2F/amq.default/publish",
                Some(body),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(reply, json!({"routed": true}));
    }
    let (_, reply) = api
        .send(
            Method::POST,
            "/api/exchanges/%2F/amq.default/publish",
            Some(
                json!({"routing_key": "nowhere", "payload": "x", "payload_encoding": "string",
                          "properties": {}}),
            ),
        )
        .await;
    assert_eq!(reply, json!({"routed": false}));

    tracing::info!("get with requeue leaves the messages; ack_requeue_false takes them");
    let get = |ackmode: &str, count: u32| json!({"count": count, "ackmode": ackmode, "encoding": "auto", "truncate": 50000});
    let get_path = format!("{queue_path}/get");
    let (status, got) = api
        .send(Method::POST, &get_path, Some(get("ack_requeue_true", 2)))
        .await;
    assert_eq!(status, StatusCode::OK, "{got}");
    let got = got.as_array().unwrap().clone();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0]["payload"], "hello 0");
    assert_eq!(got[1]["payload"], "hello 1");
    assert_eq!(got[0]["payload_encoding"], "string");
    assert_eq!(got[0]["properties"]["delivery_mode"], 2);
    assert_eq!(got[0]["properties"]["headers"]["h"], "v");
    assert_eq!(got[0]["routing_key"], queue.as_str());
    let (_, got) = api
        .send(Method::POST, &get_path, Some(get("ack_requeue_false", 1)))
        .await;
    assert_eq!(got[0]["payload"], "hello 0");
    assert_eq!(got[0]["redelivered"], true);
    assert_eq!(got[0]["message_count"], 3);
    let connection = broker.connect().await;
    assert_eq!(message_count(&connection, &queue).await, 3);

    tracing::info!("DELETE contents purges");
    let (status, _) = api
        .send(Method::DELETE, &format!("{queue_path}/contents"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(message_count(&connection, &queue).await, 0);

    tracing::info!("delete with if-empty, then unknown queues are 404");
    let (status, _) = api
        .send(Method::DELETE, &format!("{queue_path}?if-empty=true"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, error) = api.send(Method::GET, &queue_path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        error,
        json!({"error": "Object Not Found", "reason": "Not Found"})
    );
    let (status, _) = api
        .send(Method::GET, "/api/queues/no-such-vhost", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchanges_and_bindings_over_http_route_amqp_publishes() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let exchange = unique("mgmt-x");
    let queue = unique("mgmt-bq");
    let (status, _) = api
        .send(
            Method::PUT,
            &format!("/api/exchanges/%2F/{exchange}"),
            Some(json!({"type": "topic", "durable": true})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, error) = api
        .send(
            Method::PUT,
            &format!("/api/exchanges/%2F/{exchange}"),
            Some(json!({"type": "fanout", "durable": true})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error["reason"]
            .as_str()
            .unwrap()
            .contains("inequivalent arg 'type'"),
        "{error}"
    );
    let info = api.get(&format!("/api/exchanges/%2F/{exchange}")).await;
    assert_eq!(info["type"], "topic");
    let names: Vec<String> = api
        .get("/api/exchanges/%2F")
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.contains(&String::new()) && names.contains(&"amq.topic".to_string()));
    api.send(Method::PUT, &format!("/api/queues/%2F/{queue}"), None)
        .await;

    tracing::info!("bind with POST, publish over AMQP, the message arrives");
    let bind_path = format!("/api/bindings/%2F/e/{exchange}/q/{queue}");
    let (status, _) = api
        .send(
            Method::POST,
            &bind_path,
            Some(json!({"routing_key": "a.*", "arguments": {}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let bindings = api.get(&bind_path).await;
    assert_eq!(bindings.as_array().unwrap().len(), 1);
    assert_eq!(bindings[0]["properties_key"], "a.%2A");
    let queue_bindings = api.get(&format!("/api/queues/%2F/{queue}/bindings")).await;
    assert_eq!(
        queue_bindings.as_array().unwrap().len(),
        2,
        "default + topic: {queue_bindings}"
    );
    let source = api
        .get(&format!("/api/exchanges/%2F/{exchange}/bindings/source"))
        .await;
    assert_eq!(source[0]["destination"], queue.as_str());
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    publish(&channel, &exchange, "a.b", b"routed").await;
    assert_eq!(get_all(&channel, &queue).await, vec!["routed".to_string()]);

    tracing::info!("delete the binding by its properties key");
    let (status, _) = api
        .send(Method::DELETE, &format!("{bind_path}/a.%252A"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(api.get(&bind_path).await.as_array().unwrap().is_empty());
    let (status, _) = api
        .send(
            Method::DELETE,
            &format!("/api/exchanges/%2F/{exchange}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = api
        .send(Method::GET, &format!("/api/exchanges/%2F/{exchange}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_to_exchange_bindings_and_refused_queue_types() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let (upstream, downstream, queue) = (unique("up"), unique("down"), unique("e2e-q"));
    for (name, kind) in [(&upstream, "fanout"), (&downstream, "direct")] {
        let path = format!("/api/exchanges/%2F/{name}");
        let (status, _) = api
            .send(Method::PUT, &path, Some(json!({"type": kind})))
            .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    api.send(Method::PUT, &format!("/api/queues/%2F/{queue}"), None)
        .await;
    let e2e = format!("/api/bindings/%2F/e/{upstream}/e/{downstream}");
    let (status, _) = api
        .send(Method::POST, &e2e, Some(json!({"routing_key": "k"})))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let to_queue = format!("/api/bindings/%2F/e/{downstream}/q/{queue}");
    api.send(Method::POST, &to_queue, Some(json!({"routing_key": "k"})))
        .await;
    let destination = api
        .get(&format!(
            "/api/exchanges/%2F/{downstream}/bindings/destination"
        ))
        .await;
    assert_eq!(destination[0]["source"], upstream.as_str());
    assert_eq!(destination[0]["destination_type"], "exchange");
    let publish = json!({"routing_key": "k", "payload": "hop", "payload_encoding": "string",
                         "properties": {}});
    let (_, routed) = api
        .send(
            Method::POST,
            &format!("/api/exchanges/%2F/{upstream}/publish"),
            Some(publish),
        )
        .await;
    assert_eq!(routed, json!({"routed": true}));
    let (status, _) = api.send(Method::DELETE, &format!("{e2e}/k"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = api.send(Method::DELETE, &format!("{e2e}/k"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let quorum = json!({"durable": true, "arguments": {"x-queue-type": "quorum"}});
    let (status, error) = api
        .send(
            Method::PUT,
            &format!("/api/queues/%2F/{}", unique("s")),
            Some(quorum),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["error"], "bad_request");
    let (status, _) = api
        .send(
            Method::PUT,
            &format!("/api/exchanges/%2F/{}", unique("t")),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "an exchange needs a type");
    let (status, _) = api
        .send(
            Method::PUT,
            &format!("/api/queues/%2F/{}", unique("j")),
            Some(json!([1])),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "the body must be an object"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_listed_and_closed_by_delete() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let connection = broker.connect().await;
    let _channel = confirm_channel(&connection).await;
    eventually("one connection with a channel", LIMIT, || async {
        let list = api.get("/api/connections").await;
        list.as_array()
            .is_some_and(|l| l.len() == 1 && l[0]["channels"] == 1)
    })
    .await;
    let list = api.get("/api/connections").await;
    let entry = &list[0];
    let name = entry["name"].as_str().unwrap().to_string();
    assert!(name.contains(" -> "), "{name}");
    assert_eq!(entry["user"], "guest");
    assert_eq!(entry["vhost"], "/");
    assert_eq!(entry["protocol"], "AMQP 0-9-1");
    assert!(entry["client_properties"]["product"].is_string(), "{entry}");
    let channels = api.get("/api/channels").await;
    assert_eq!(channels[0]["confirm"], true);
    assert_eq!(channels[0]["connection_details"]["name"], name.as_str());
    let overview = api.get("/api/overview").await;
    assert_eq!(overview["object_totals"]["connections"], 1);
    assert_eq!(overview["object_totals"]["channels"], 1);

    tracing::info!("DELETE closes it with 320 CONNECTION_FORCED");
    let encoded: String = name
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect();
    let (status, _) = api
        .send(Method::DELETE, &format!("/api/connections/{encoded}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    eventually("the lapin connection is closed", LIMIT, || async {
        !connection.status().connected()
    })
    .await;
    eventually("no connection listed", LIMIT, || async {
        api.get("/api/connections")
            .await
            .as_array()
            .is_some_and(Vec::is_empty)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_are_401_and_whoami_names_the_user() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let response = bounded!(api
        .http
        .get(format!("{}/api/overview", api.base))
        .basic_auth("guest", Some("wrong"))
        .send())
    .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.headers().contains_key("www-authenticate"));
    let body: Value = bounded!(response.json()).unwrap();
    assert_eq!(body["error"], "not_authorized");
    let response = bounded!(api.http.get(format!("{}/api/queues", api.base)).send()).unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let me = api.get("/api/whoami").await;
    assert_eq!(me["name"], "guest");
    assert_eq!(me["tags"], json!(["administrator"]));

    tracing::info!("a user needs a management tag, as in RabbitMQ");
    let access = broker.core().access();
    access
        .put_user("mgmt-plain", Some("pw"), None, vec![])
        .await
        .unwrap();
    access
        .put_user("mgmt-monitor", Some("pw"), None, vec!["monitoring".into()])
        .await
        .unwrap();
    let as_user = |user: &'static str| {
        api.http
            .get(format!("{}/api/whoami", api.base))
            .basic_auth(user, Some("pw"))
            .send()
    };
    let refused = bounded!(as_user("mgmt-plain")).unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let body: Value = bounded!(refused.json()).unwrap();
    assert_eq!(body["reason"], "Not management user");
    let monitor = bounded!(as_user("mgmt-monitor")).unwrap();
    assert_eq!(monitor.status(), StatusCode::OK);
    assert_eq!(api.get("/api/health/checks/alarms").await["status"], "ok");
    assert_eq!(
        api.get("/api/health/checks/virtual-hosts").await["status"],
        "ok"
    );
    assert_eq!(api.get("/api/aliveness-test/%2F").await["status"], "ok");
    let amqp_port = broker.addr().port();
    let path = format!("/api/health/checks/port-listener/{amqp_port}");
    assert_eq!(api.get(&path).await["status"], "ok");
    let (status, _) = api
        .send(Method::GET, "/api/health/checks/port-listener/1", None)
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let nodes = api.get("/api/nodes").await;
    assert!(nodes[0]["name"].as_str().unwrap().starts_with("rabbit@"));
    assert_eq!(nodes[0]["running"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_sort_filter_and_project() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let prefix = unique("page");
    for i in 0..5 {
        api.send(Method::PUT, &format!("/api/queues/%2F/{prefix}-{i}"), None)
            .await;
    }
    let page = api
        .get(&format!("/api/queues/%2F?page=2&page_size=2&name={prefix}&columns=name,vhost&sort=name&sort_reverse=true"))
        .await;
    assert_eq!(page["total_count"], 5);
    assert_eq!(page["filtered_count"], 5);
    assert_eq!(page["page_count"], 3);
    assert_eq!(page["page"], 2);
    assert_eq!(page["item_count"], 2);
    assert_eq!(
        page["items"],
        json!([
            {"name": format!("{prefix}-2"), "vhost": "/"},
            {"name": format!("{prefix}-1"), "vhost": "/"},
        ])
    );
    let regex = api
        .get(&format!(
            "/api/queues?page=1&name=^{prefix}-[34]$&use_regex=true&columns=name"
        ))
        .await;
    assert_eq!(regex["filtered_count"], 2);
    let (status, error) = api.send(Method::GET, "/api/queues?page=9", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
}

/// The value of an unlabelled or labelled sample in Prometheus text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_metrics_have_rabbitmq_names_and_move() {
    let broker = TestBroker::start().await;
    let http = Client::builder().timeout(LIMIT).build().unwrap();
    let url = broker.prometheus_url();
    let scrape = |path: &'static str| {
        let http = http.clone();
        let url = format!("{url}{path}");
        async move {
            let response = bounded!(http.get(url).send()).unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            bounded!(response.text()).unwrap()
        }
    };
    let before = scrape("/metrics").await;
    for name in [
        "rabbitmq_connections",
        "rabbitmq_channels",
        "rabbitmq_consumers",
        "rabbitmq_queues",
        "rabbitmq_queue_messages_ready",
        "rabbitmq_queue_messages_unacked",
        "rabbitmq_queue_messages",
        "rabbitmq_process_resident_memory_bytes",
        "rabbitmq_resident_memory_limit_bytes",
        "rabbitmq_alarms_memory_used_watermark",
        "rabbitmq_alarms_free_disk_space_watermark",
        "rabbitmq_disk_space_available_bytes",
    ] {
        assert!(sample(&before, name).is_some(), "{name} missing:\n{before}");
    }
    for name in [
        "rabbitmq_global_messages_received_total",
        "rabbitmq_global_messages_confirmed_total",
        "rabbitmq_global_messages_routed_total",
        "rabbitmq_global_messages_delivered_total",
        "rabbitmq_build_info",
        "rabbitmq_identity_info",
    ] {
        assert!(
            before.contains(&format!("\n{name}{{")),
            "{name} missing:\n{before}"
        );
    }
    assert_eq!(sample(&before, "rabbitmq_connections"), Some(0.0));
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("prom");
    bounded!(channel.queue_declare(
        queue.as_str().into(),
        QueueDeclareOptions::default(),
        FieldTable::default()
    ))
    .unwrap();
    publish(&channel, "", &queue, b"one").await;
    publish(&channel, "", &queue, b"two").await;
    let series = format!("rabbitmq_queue_messages_ready{{vhost=\"/\",queue=\"{queue}\"}}");
    eventually("per-object series shows two ready", LIMIT, || async {
        sample(&scrape("/metrics/per-object").await, &series) == Some(2.0)
    })
    .await;
    let after = scrape("/metrics").await;
    assert_eq!(sample(&after, "rabbitmq_connections"), Some(1.0));
    assert_eq!(sample(&after, "rabbitmq_channels"), Some(1.0));
    assert_eq!(
        sample(&after, "rabbitmq_connections_opened_total"),
        Some(1.0)
    );
    assert!(sample(&after, "rabbitmq_process_open_fds").is_some_and(|n| n > 0.0));
    assert_eq!(sample(&after, "rabbitmq_queue_messages_ready"), Some(2.0));
    let received = "rabbitmq_global_messages_received_total{protocol=\"amqp091\"}";
    assert_eq!(sample(&after, received), Some(2.0), "{after}");
    let confirmed = "rabbitmq_global_messages_confirmed_total{protocol=\"amqp091\"}";
    assert_eq!(sample(&after, confirmed), Some(2.0));
}

/// The values of `key` in a JSON list of objects.
fn field_of(list: &Value, key: &str) -> Vec<String> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|item| item[key].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Creates (as guest) a user with `tags` and full permissions in each of `vhosts`.
async fn add_user(api: &Api, user: &str, tags: &str, vhosts: &[&str]) {
    let body = json!({"password": "pw", "tags": tags});
    let (status, _) = api
        .send(Method::PUT, &format!("/api/users/{user}"), Some(body))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    for vhost in vhosts {
        let vhost = vhost.replace('/', "%2F");
        let perms = json!({"configure": ".*", "write": ".*", "read": ".*"});
        let path = format!("/api/permissions/{vhost}/{user}");
        let (status, _) = api.send(Method::PUT, &path, Some(perms)).await;
        assert_eq!(status, StatusCode::CREATED);
    }
}

/// Declares (as guest) a queue and a policy in `vhost` (already encoded).
async fn add_queue_and_policy(api: &Api, vhost: &str, queue: &str, policy: &str) {
    let (status, _) = api
        .send(Method::PUT, &format!("/api/queues/{vhost}/{queue}"), None)
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let body = json!({"pattern": "^none$", "definition": {"max-length": 5}});
    let path = format!("/api/policies/{vhost}/{policy}");
    let (status, _) = api.send(Method::PUT, &path, Some(body)).await;
    assert_eq!(status, StatusCode::CREATED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_users_see_only_the_vhosts_they_may_use() {
    let broker = TestBroker::start().await;
    let admin = Api::new(&broker);
    let own = unique("own-vhost");
    let (status, _) = admin
        .send(Method::PUT, &format!("/api/vhosts/{own}"), None)
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (own_queue, other_queue) = (unique("own-q"), unique("other-q"));
    add_queue_and_policy(&admin, &own, &own_queue, "own-policy").await;
    add_queue_and_policy(&admin, "%2F", &other_queue, "other-policy").await;
    let (user, monitor, policymaker) = (unique("mgmt"), unique("mon"), unique("pol"));
    add_user(&admin, &user, "management", &[&own]).await;
    add_user(&admin, &monitor, "monitoring", &[&own]).await;
    add_user(&admin, &policymaker, "policymaker", &[&own]).await;
    let guest_connection = broker.connect().await;
    let _guest_channel = confirm_channel(&guest_connection).await;
    let user_connection = connect_url(&broker.url_as(&user, "pw", &own)).await;
    let _user_channel = confirm_channel(&user_connection).await;
    eventually("both connections registered", LIMIT, || async {
        admin.get("/api/connections").await.as_array().map(Vec::len) == Some(2)
    })
    .await;

    tracing::info!("a management user's lists hold only their vhost and connections");
    let api = admin.as_user(&user, "pw");
    assert_eq!(
        field_of(&api.get("/api/vhosts").await, "name"),
        [own.as_str()]
    );
    assert_eq!(
        field_of(&api.get("/api/queues").await, "name"),
        [own_queue.as_str()]
    );
    for path in ["/api/exchanges", "/api/bindings", "/api/policies"] {
        let vhosts = field_of(&api.get(path).await, "vhost");
        assert!(
            !vhosts.is_empty() && vhosts.iter().all(|v| *v == own),
            "{path}: {vhosts:?}"
        );
    }
    assert_eq!(
        field_of(&api.get("/api/connections").await, "user"),
        [user.as_str()]
    );
    assert_eq!(
        field_of(&api.get("/api/channels").await, "user"),
        [user.as_str()]
    );
    let overview = api.get("/api/overview").await;
    assert_eq!(overview["object_totals"]["queues"], 1, "{overview}");
    assert_eq!(overview["object_totals"]["connections"], 1, "{overview}");
    assert!(
        overview["object_totals"].get("consumers").is_none(),
        "RabbitMQ does not filter consumers by user, so leaves them out: {overview}"
    );
    assert!(
        overview.get("listeners").is_none(),
        "node-wide parts are the monitors'"
    );

    tracing::info!("another vhost's objects are refused with 401, a missing vhost is 404");
    let refused = json!({"error": "not_authorised",
                         "reason": "User not authorised to access virtual host"});
    for path in [
        "/api/queues/%2F".to_string(),
        format!("/api/queues/%2F/{other_queue}"),
        "/api/exchanges/%2F".to_string(),
        "/api/bindings/%2F".to_string(),
        "/api/vhosts/%2F/connections".to_string(),
        "/api/policies/%2F".to_string(),
    ] {
        assert_eq!(
            api.send(Method::GET, &path, None).await,
            (StatusCode::UNAUTHORIZED, refused.clone()),
            "{path}"
        );
    }
    let (status, _) = api
        .send(
            Method::DELETE,
            &format!("/api/queues/%2F/{other_queue}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = api
        .send(Method::GET, "/api/queues/no-such-vhost", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = api
        .send(Method::GET, &format!("/api/vhosts/{own}"), None)
        .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "one vhost's record is the administrators'"
    );
    let guest_name = admin
        .get("/api/connections")
        .await
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["user"] == "guest")
        .map(|c| c["name"].as_str().unwrap().to_string())
        .expect("guest's connection");
    let guest_path = format!("/api/connections/{}", encode(&guest_name));
    for method in [Method::GET, Method::DELETE] {
        let (status, _) = api.send(method, &guest_path, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    assert!(guest_connection.status().connected());
    assert_eq!(
        api.get(&format!("/api/queues/{own}/{own_queue}")).await["name"],
        own_queue.as_str()
    );

    tracing::info!("a monitor sees every vhost and connection, but queues only where permitted");
    let api = admin.as_user(&monitor, "pw");
    let vhosts = field_of(&api.get("/api/vhosts").await, "name");
    assert!(
        vhosts.contains(&"/".to_string()) && vhosts.contains(&own),
        "{vhosts:?}"
    );
    assert_eq!(
        api.get("/api/connections").await.as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(
        field_of(&api.get("/api/queues").await, "name"),
        [own_queue.as_str()]
    );
    assert!(api.get("/api/overview").await["listeners"].is_array());

    tracing::info!("a policymaker manages the policies of their vhosts only");
    let api = admin.as_user(&policymaker, "pw");
    let policy = json!({"pattern": "^p$", "definition": {"max-length": 1}});
    let (status, _) = api
        .send(
            Method::PUT,
            &format!("/api/policies/{own}/mine"),
            Some(policy.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, error) = api
        .send(Method::PUT, "/api/policies/%2F/theirs", Some(policy))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{error}");
    let (status, _) = api
        .send(Method::GET, "/api/policies/%2F/other-policy", None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = admin
        .as_user(&user, "pw")
        .send(
            Method::GET,
            &format!("/api/policies/{own}/own-policy"),
            None,
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "a management user is no policymaker"
    );
}

/// Percent-encodes a path segment.
fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// RabbitMQ's management API refuses to delete or purge another connection's exclusive queue
/// (400, RESOURCE_LOCKED's text; `rabbit_mgmt_http_SUITE:queue_purge_test`); the owner keeps
/// using it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_queue_is_refused_to_the_api_as_in_rabbitmq() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("excl");
    let exclusive = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    bounded!(channel.queue_declare(queue.as_str().into(), exclusive, FieldTable::default()))
        .unwrap();
    let path = format!("/api/queues/%2F/{queue}");
    assert_eq!(api.get(&path).await["exclusive"], true);
    for target in [path.clone(), format!("{path}/contents")] {
        let (status, error) = api.send(Method::DELETE, &target, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{target}: {error}");
        assert_eq!(error["error"], "bad_request");
        let reason = error["reason"].as_str().unwrap();
        assert!(
            reason.starts_with(&format!(
                "cannot obtain exclusive access to locked queue '{queue}' in vhost '/'"
            )),
            "{reason}"
        );
    }
    publish(&channel, "", &queue, b"still mine").await;
    assert_eq!(
        get_all(&channel, &queue).await,
        vec!["still mine".to_string()]
    );
    assert_eq!(api.get(&path).await["name"], queue.as_str());
}

/// The one item of a list whose `key` is `value`.
fn item_where<'a>(list: &'a Value, key: &str, value: &str) -> &'a Value {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .find(|item| item[key] == value)
        .unwrap_or_else(|| panic!("no item with {key} = {value} in {list}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_connections_and_exchanges_count_what_passed_through_them() {
    const COUNT: usize = 25;
    const BODY: &[u8] = &[b'x'; 100];
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let exchange = unique("stats-x");
    let (first, second) = (unique("stats-q1"), unique("stats-q2"));
    let (status, _) = api
        .send(
            Method::PUT,
            &format!("/api/exchanges/%2F/{exchange}"),
            Some(json!({"type": "fanout"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    for queue in [&first, &second] {
        api.send(Method::PUT, &format!("/api/queues/%2F/{queue}"), None)
            .await;
        let bind = format!("/api/bindings/%2F/e/{exchange}/q/{queue}");
        let (status, _) = api.send(Method::POST, &bind, Some(json!({}))).await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let publisher = broker.connect().await;
    let publish_channel = confirm_channel(&publisher).await;
    for _ in 0..COUNT {
        publish(&publish_channel, &exchange, "", BODY).await;
    }
    let consumer_connection = broker.connect().await;
    let consume_channel = bounded!(consumer_connection.create_channel()).unwrap();
    let mut consumer = consume(&consume_channel, &first, false).await;
    for _ in 0..COUNT {
        let delivery = next_delivery(&mut consumer).await;
        bounded!(delivery.ack(BasicAckOptions::default())).unwrap();
    }

    tracing::info!(
        "the publishing channel counts publishes and confirms, the other deliveries and acks"
    );
    let by_confirm = |confirm: bool| {
        let api = &api;
        async move {
            let channels = api.get("/api/channels").await;
            channels
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["confirm"] == confirm)
                .cloned()
                .unwrap_or_else(|| panic!("no channel with confirm {confirm}: {channels}"))
        }
    };
    eventually("the consumer's acks are counted", LIMIT, || async {
        by_confirm(false).await["message_stats"]["ack"] == COUNT
    })
    .await;
    let stats = by_confirm(true).await["message_stats"].clone();
    assert_eq!(stats["publish"], COUNT, "{stats}");
    assert_eq!(stats["confirm"], COUNT, "{stats}");
    assert_eq!(stats["deliver_get"], 0, "{stats}");
    assert!(stats["publish_details"]["rate"].is_number(), "{stats}");
    let stats = by_confirm(false).await["message_stats"].clone();
    assert_eq!(stats["deliver"], COUNT, "{stats}");
    assert_eq!(stats["deliver_get"], COUNT, "{stats}");
    assert_eq!(stats["ack"], COUNT, "{stats}");
    assert_eq!(stats["publish"], 0, "{stats}");
    assert_eq!(stats["redeliver"], 0, "{stats}");

    tracing::info!("connections count the bytes they read and wrote");
    let bodies = (COUNT * BODY.len()) as u64;
    let connections = api.get("/api/connections").await;
    let publisher_entry = item_where(
        &connections,
        "name",
        by_confirm(true).await["connection_details"]["name"]
            .as_str()
            .unwrap(),
    )
    .clone();
    let consumer_entry = item_where(
        &connections,
        "name",
        by_confirm(false).await["connection_details"]["name"]
            .as_str()
            .unwrap(),
    )
    .clone();
    assert!(
        publisher_entry["recv_oct"].as_u64().unwrap() > bodies,
        "{publisher_entry}"
    );
    assert!(
        publisher_entry["recv_cnt"].as_u64().unwrap() >= 1,
        "{publisher_entry}"
    );
    assert!(
        consumer_entry["send_oct"].as_u64().unwrap() > bodies,
        "{consumer_entry}"
    );
    assert!(
        consumer_entry["send_cnt"].as_u64().unwrap() >= 1,
        "{consumer_entry}"
    );
    assert!(
        publisher_entry["send_oct"].as_u64().unwrap() < bodies,
        "confirms only: {publisher_entry}"
    );
    assert!(
        consumer_entry["recv_oct_details"]["rate"].is_number(),
        "{consumer_entry}"
    );

    tracing::info!("the exchange took COUNT messages and routed a copy to each of two queues");
    let path = format!("/api/exchanges/%2F/{exchange}");
    eventually("the exchange's counts", LIMIT, || async {
        let stats = &api.get(&path).await["message_stats"];
        stats["publish_in"] == COUNT && stats["publish_out"] == 2 * COUNT
    })
    .await;
    let body = json!({"routing_key": "", "payload": "via http", "payload_encoding": "string",
                      "properties": {}});
    api.send(Method::POST, &format!("{path}/publish"), Some(body))
        .await;
    let stats = &api.get(&path).await["message_stats"];
    assert_eq!(stats["publish_in"], COUNT + 1, "{stats}");
    assert_eq!(stats["publish_out"], 2 * COUNT + 2, "{stats}");
    let listed = api.get("/api/exchanges/%2F").await;
    assert_eq!(
        item_where(&listed, "name", &exchange)["message_stats"]["publish_in"],
        COUNT + 1
    );

    tracing::info!("a deleted and redeclared exchange starts from zero");
    api.send(Method::DELETE, &path, None).await;
    api.send(Method::PUT, &path, Some(json!({"type": "fanout"})))
        .await;
    assert_eq!(api.get(&path).await["message_stats"]["publish_in"], 0);
}

/// A channel shows what it holds: deliveries not yet acked, and in a transaction the publishes
/// and acks not yet committed (RabbitMQ's `messages_unacknowledged`, `messages_uncommitted`,
/// `acks_uncommitted`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_show_unacked_and_uncommitted_messages() {
    const COUNT: usize = 7;
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let queue = unique("gauges-q");
    api.send(Method::PUT, &format!("/api/queues/%2F/{queue}"), None)
        .await;
    let connection = broker.connect().await;
    let publisher = confirm_channel(&connection).await;
    for _ in 0..COUNT {
        publish(&publisher, "", &queue, b"held").await;
    }
    let holder = bounded!(connection.create_channel()).unwrap();
    let mut consumer = consume(&holder, &queue, false).await;
    let mut held = Vec::new();
    for _ in 0..COUNT {
        held.push(next_delivery(&mut consumer).await);
    }
    let transactional = bounded!(connection.create_channel()).unwrap();
    bounded!(transactional.tx_select()).unwrap();
    // Routed nowhere, so that the commit adds no deliveries to the consumer above.
    let nowhere = unique("gauges-nowhere");
    for _ in 0..3 {
        let publish = transactional.basic_publish(
            "".into(),
            nowhere.as_str().into(),
            lapin::options::BasicPublishOptions::default(),
            b"uncommitted",
            lapin::BasicProperties::default(),
        );
        bounded!(publish).unwrap();
    }
    let channel_with = |key: &'static str, value: usize| {
        let api = &api;
        async move {
            let channels = api.get("/api/channels").await;
            channels.as_array().unwrap().iter().any(|c| c[key] == value)
        }
    };
    eventually("a channel shows its unacked deliveries", LIMIT, || {
        channel_with("messages_unacknowledged", COUNT)
    })
    .await;
    eventually(
        "a transaction shows its uncommitted publishes",
        LIMIT,
        || channel_with("messages_uncommitted", 3),
    )
    .await;
    tracing::info!("acked and committed, every gauge is back to zero");
    for delivery in held {
        bounded!(delivery.ack(BasicAckOptions::default())).unwrap();
    }
    bounded!(transactional.tx_commit()).unwrap();
    eventually("the gauges fall back to zero", LIMIT, || async {
        let channels = api.get("/api/channels").await;
        channels.as_array().unwrap().iter().all(|c| {
            c["messages_unacknowledged"] == 0
                && c["messages_uncommitted"] == 0
                && c["messages_unconfirmed"] == 0
                && c["acks_uncommitted"] == 0
        })
    })
    .await;
}

/// The samples of one metric in Prometheus text: `(labels, value)`.
fn series(text: &str, metric: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(metric)?.strip_prefix('{')?;
            let (labels, value) = rest.split_once("} ")?;
            Some((labels.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_memory_and_detailed_metrics_with_filters() {
    let broker = TestBroker::start().await;
    let api = Api::new(&broker);
    let prefix = unique("detail");
    let (kept, other) = (format!("{prefix}-kept"), format!("{prefix}-other"));
    for queue in [&kept, &other] {
        api.send(Method::PUT, &format!("/api/queues/%2F/{queue}"), None)
            .await;
    }
    let side = unique("side-vhost");
    api.send(Method::PUT, &format!("/api/vhosts/{side}"), None)
        .await;
    api.send(Method::PUT, &format!("/api/queues/{side}/{kept}"), None)
        .await;
    let path = format!("/api/queues/%2F/{kept}");
    assert_eq!(
        api.get(&path).await["memory"],
        0,
        "an empty queue holds nothing"
    );
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    for _ in 0..10 {
        publish(&channel, "", &kept, &[b'm'; 1000]).await;
    }
    eventually("ten messages ready", LIMIT, || async {
        api.get(&path).await["messages_ready"] == 10
    })
    .await;
    let memory = api.get(&path).await["memory"].as_u64().unwrap();
    assert!(
        memory >= 10_000,
        "ten 1000-byte bodies are resident: {memory}"
    );

    tracing::info!(
        "/metrics/detailed serves only the families asked, for the vhosts and queues asked"
    );
    let http = Client::builder().timeout(LIMIT).build().unwrap();
    let url = broker.prometheus_url();
    let scrape = |query: String| {
        let http = http.clone();
        let url = format!("{url}/metrics/detailed{query}");
        async move {
            let response = bounded!(http.get(url).send()).unwrap();
            let status = response.status();
            (status, bounded!(response.text()).unwrap())
        }
    };
    let (status, text) = scrape(String::new()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !text.contains("rabbitmq_detailed_queue"),
        "no family, no series:\n{text}"
    );
    let query =
        format!("?family=queue_coarse_metrics&family=queue_metrics&vhost=%2F&queue=%5E{prefix}-k");
    let (_, text) = scrape(query).await;
    let ready = series(&text, "rabbitmq_detailed_queue_messages_ready");
    assert_eq!(
        ready,
        [(format!("vhost=\"/\",queue=\"{kept}\""), 10.0)],
        "{text}"
    );
    let memory_series = series(&text, "rabbitmq_detailed_queue_process_memory_bytes");
    assert_eq!(memory_series.len(), 1, "{text}");
    assert!(memory_series[0].1 >= 10_000.0, "{text}");
    assert!(!text.contains("rabbitmq_detailed_connection"), "{text}");
    let (_, text) = scrape(format!(
        "?family=queue_coarse_metrics&vhost={side}&vhost=no-such"
    ))
    .await;
    let labels: Vec<String> = series(&text, "rabbitmq_detailed_queue_messages")
        .into_iter()
        .map(|(labels, _)| labels)
        .collect();
    assert_eq!(
        labels,
        [format!("vhost=\"{side}\",queue=\"{kept}\"")],
        "{text}"
    );

    tracing::info!("connection and channel families, labelled by name");
    let query =
        "?family=connection_coarse_metrics&family=channel_metrics&family=channel_exchange_metrics";
    let (_, text) = scrape(query.to_string()).await;
    let incoming = series(&text, "rabbitmq_detailed_connection_incoming_bytes_total");
    assert_eq!(incoming.len(), 1, "{text}");
    assert!(
        incoming[0].0.starts_with("channel=\"127.0.0.1:") && incoming[0].1 > 10_000.0,
        "{text}"
    );
    assert_eq!(
        series(&text, "rabbitmq_detailed_channel_consumers").len(),
        1,
        "{text}"
    );
    let published = series(&text, "rabbitmq_detailed_channel_messages_published_total");
    assert_eq!(published.len(), 1, "{text}");
    assert_eq!(published[0].1, 10.0, "{text}");

    tracing::info!("a bad queue regex, or two, is 400");
    let (status, _) = scrape("?family=queue_metrics&queue=(".to_string()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = scrape("?family=queue_metrics&queue=a&queue=b".to_string()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    tracing::info!("a purged queue's memory goes back to nothing");
    api.send(Method::DELETE, &format!("{path}/contents"), None)
        .await;
    eventually("memory back to zero", LIMIT, || async {
        api.get(&path).await["memory"] == 0
    })
    .await;
}
