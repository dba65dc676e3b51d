//! The management API checks the same resource permissions as AMQP 0.9.1 (RabbitMQ's
//! access-control table), with RabbitMQ's answers: a user tagged `management` whose
//! permissions in `/` are `^mgr-.*` is refused what they may not do over AMQP, the target is
//! left as it was, and the same call on a `mgr-` resource succeeds.
//!
//! RabbitMQ answers a refusal by the way its route reaches the broker: 401 `Access refused.`
//! for declare, delete, purge, bind and unbind (`rabbit_mgmt_util:direct_request`), 401 with
//! the channel's close text for get (`with_channel`), 400 with code and close text for publish
//! (`rabbit_mgmt_wm_exchange_publish:bad`).

use lapin::options::{BasicGetOptions, QueuePurgeOptions};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use warren_tests::http::Api;
use warren_tests::{bounded, connect_url, expect_amqp_error, message_count, unique, TestBroker};

const PASSWORD: &str = "pw";

/// A broker with a management user limited to `^mgr-.*` in `/`, and resources declared by
/// guest (an administrator): two queues and two direct exchanges, one of each the user may
/// use (`mgr-`) and one they may not, and a topic exchange the user may write to for routing
/// keys `allowed.*` only (topic permissions).
struct World {
    broker: TestBroker,
    admin: Api,
    api: Api,
    user: String,
    other_queue: String,
    mgr_queue: String,
    other_exchange: String,
    mgr_exchange: String,
    topic: String,
}

impl World {
    async fn new() -> World {
        let broker = TestBroker::start().await;
        let admin = Api::new(&broker);
        let user = unique("user");
        let world = World {
            api: admin.as_user(&user, PASSWORD),
            admin,
            user,
            other_queue: unique("other-q"),
            mgr_queue: unique("mgr-q"),
            other_exchange: unique("other-x"),
            mgr_exchange: unique("mgr-x"),
            topic: unique("mgr-topic"),
            broker,
        };
        world.add_user().await;
        for queue in [&world.other_queue, &world.mgr_queue] {
            world.admin_ok(Method::PUT, &queue_path(queue), None).await;
        }
        for (exchange, kind) in [
            (&world.other_exchange, "direct"),
            (&world.mgr_exchange, "direct"),
            (&world.topic, "topic"),
        ] {
            let body = json!({"type": kind, "durable": false});
            world
                .admin_ok(Method::PUT, &exchange_path(exchange), Some(body))
                .await;
        }
        world
    }

    async fn add_user(&self) {
        let user = &self.user;
        let body = json!({"password": PASSWORD, "tags": "management"});
        self.admin_ok(Method::PUT, &format!("/api/users/{user}"), Some(body))
            .await;
        let mgr = json!({"configure": "^mgr-.*", "write": "^mgr-.*", "read": "^mgr-.*"});
        let path = format!("/api/permissions/%2F/{user}");
        self.admin_ok(Method::PUT, &path, Some(mgr)).await;
        let topic = json!({"exchange": self.topic, "write": "^allowed\\.", "read": "^allowed\\."});
        let path = format!("/api/topic-permissions/%2F/{user}");
        self.admin_ok(Method::PUT, &path, Some(topic)).await;
    }

    /// A request as guest that must succeed (2xx).
    async fn admin_ok(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let (status, reply) = self.admin.send(method.clone(), path, body).await;
        assert!(
            status.is_success(),
            "{method} {path} as guest: {status} {reply}"
        );
        reply
    }

    /// Publishes one message as guest through the default exchange to `queue`.
    async fn put_message(&self, queue: &str) {
        let body = json!({"routing_key": queue, "payload": "kept", "payload_encoding": "string",
                          "properties": {}});
        let reply = self
            .admin_ok(Method::POST, &publish_path("amq.default"), Some(body))
            .await;
        assert_eq!(reply, json!({"routed": true}));
    }

    async fn messages(&self, queue: &str) -> u32 {
        let connection = self.broker.connect().await;
        message_count(&connection, queue).await
    }

    async fn exists(&self, path: &str) -> bool {
        let (status, reply) = self.admin.send(Method::GET, path, None).await;
        match status {
            StatusCode::OK => true,
            StatusCode::NOT_FOUND => false,
            other => panic!("GET {path} as guest: {other} {reply}"),
        }
    }

    /// The bindings from exchange `source` to `kind` (`q` or `e`) `destination`, as guest.
    async fn bindings(&self, source: &str, kind: &str, destination: &str) -> Vec<Value> {
        let path = format!("/api/bindings/%2F/e/{source}/{kind}/{destination}");
        let reply = self.admin.get(&path).await;
        reply.as_array().expect("a list of bindings").clone()
    }

    /// A request as the restricted user that must be refused with `expected`.
    async fn refused(&self, method: Method, path: &str, body: Option<Value>, expected: &Value) {
        let (status, reply) = self.api.send(method.clone(), path, body).await;
        let want = if expected["error"] == "bad_request" {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::UNAUTHORIZED
        };
        assert_eq!((status, &reply), (want, expected), "{method} {path}");
    }

    /// A request as the restricted user that must succeed with `expected`.
    async fn allowed(&self, method: Method, path: &str, body: Option<Value>, expected: StatusCode) {
        let (status, reply) = self.api.send(method.clone(), path, body).await;
        assert_eq!(status, expected, "{method} {path} as the user: {reply}");
    }

    /// RabbitMQ's text for a refused resource permission (`rabbit_access_control`).
    fn denied(&self, perm: &str, kind: &str, name: &str) -> String {
        format!(
            "{perm} access to {kind} '{name}' in vhost '/' refused for user '{}'",
            self.user
        )
    }
}

/// `rabbit_mgmt_util:direct_request`: an access_refused from the broker is 401 with no text.
fn access_refused() -> Value {
    json!({"error": "not_authorised", "reason": "Access refused."})
}

fn queue_path(name: &str) -> String {
    format!("/api/queues/%2F/{name}")
}

fn exchange_path(name: &str) -> String {
    format!("/api/exchanges/%2F/{name}")
}

fn publish_path(exchange: &str) -> String {
    format!("/api/exchanges/%2F/{exchange}/publish")
}

fn get_body() -> Value {
    json!({"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_get_needs_read_on_the_queue_as_over_amqp() {
    let w = World::new().await;
    w.put_message(&w.other_queue).await;
    w.put_message(&w.mgr_queue).await;

    tracing::info!("HTTP: 401 with the channel's close text, the message stays");
    let text = format!(
        "ACCESS_REFUSED - {}",
        w.denied("read", "queue", &w.other_queue)
    );
    let expected = json!({"error": "not_authorised", "reason": text});
    let path = format!("{}/get", queue_path(&w.other_queue));
    w.refused(Method::POST, &path, Some(get_body()), &expected)
        .await;
    assert_eq!(w.messages(&w.other_queue).await, 1);

    tracing::info!("AMQP: basic.get by the same user is 403 with the same text");
    let url = w.broker.url_as(&w.user, PASSWORD, "/");
    let connection = connect_url(&url).await;
    let channel = bounded!(connection.create_channel()).unwrap();
    let get = channel.basic_get(w.other_queue.as_str().into(), BasicGetOptions::default());
    assert_eq!(expect_amqp_error(bounded!(get), 403), text);
    assert_eq!(w.messages(&w.other_queue).await, 1);

    tracing::info!("the user's own queue answers the message");
    let path = format!("{}/get", queue_path(&w.mgr_queue));
    let (status, got) = w.api.send(Method::POST, &path, Some(get_body())).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got[0]["payload"], "kept");
    assert_eq!(w.messages(&w.mgr_queue).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_purge_needs_read_on_the_queue() {
    let w = World::new().await;
    w.put_message(&w.other_queue).await;
    w.put_message(&w.mgr_queue).await;
    let path = format!("{}/contents", queue_path(&w.other_queue));
    w.refused(Method::DELETE, &path, None, &access_refused())
        .await;
    assert_eq!(w.messages(&w.other_queue).await, 1);

    tracing::info!("AMQP refuses the same purge with 403");
    let url = w.broker.url_as(&w.user, PASSWORD, "/");
    let connection = connect_url(&url).await;
    let channel = bounded!(connection.create_channel()).unwrap();
    let purge = channel.queue_purge(w.other_queue.as_str().into(), QueuePurgeOptions::default());
    let text = expect_amqp_error(bounded!(purge), 403);
    assert!(
        text.ends_with(&w.denied("read", "queue", &w.other_queue)),
        "{text}"
    );
    assert_eq!(w.messages(&w.other_queue).await, 1);

    let path = format!("{}/contents", queue_path(&w.mgr_queue));
    w.allowed(Method::DELETE, &path, None, StatusCode::NO_CONTENT)
        .await;
    assert_eq!(w.messages(&w.mgr_queue).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_delete_needs_configure_on_the_queue() {
    let w = World::new().await;
    w.put_message(&w.other_queue).await;
    let path = queue_path(&w.other_queue);
    w.refused(Method::DELETE, &path, None, &access_refused())
        .await;
    assert_eq!(
        w.messages(&w.other_queue).await,
        1,
        "queue and message stay"
    );

    let path = queue_path(&w.mgr_queue);
    w.allowed(Method::DELETE, &path, None, StatusCode::NO_CONTENT)
        .await;
    assert!(!w.exists(&path).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_declare_needs_configure_and_a_dead_letter_exchange_write() {
    let w = World::new().await;
    let other = queue_path(&unique("other-new"));
    w.refused(Method::PUT, &other, None, &access_refused())
        .await;
    assert!(!w.exists(&other).await, "no queue was declared");

    tracing::info!("a dead-letter exchange needs write on it (and read on the queue)");
    let with_dlx = queue_path(&unique("mgr-dlx"));
    let body = json!({"arguments": {"x-dead-letter-exchange": w.other_exchange}});
    w.refused(Method::PUT, &with_dlx, Some(body), &access_refused())
        .await;
    assert!(!w.exists(&with_dlx).await);

    let body = json!({"arguments": {"x-dead-letter-exchange": w.mgr_exchange}});
    w.allowed(Method::PUT, &with_dlx, Some(body), StatusCode::CREATED)
        .await;
    let mine = queue_path(&unique("mgr-new"));
    w.allowed(Method::PUT, &mine, None, StatusCode::CREATED)
        .await;
    assert!(w.exists(&mine).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_declare_and_delete_need_configure() {
    let w = World::new().await;
    let direct = json!({"type": "direct", "durable": false});
    let other = exchange_path(&unique("other-new"));
    w.refused(Method::PUT, &other, Some(direct.clone()), &access_refused())
        .await;
    assert!(!w.exists(&other).await, "no exchange was declared");
    let path = exchange_path(&w.other_exchange);
    w.refused(Method::DELETE, &path, None, &access_refused())
        .await;
    assert!(w.exists(&path).await, "the exchange stays");

    tracing::info!("an alternate exchange needs write on it (and read on the exchange)");
    let with_ae = exchange_path(&unique("mgr-ae"));
    let body = json!({"type": "direct", "durable": false,
                      "arguments": {"alternate-exchange": w.other_exchange}});
    w.refused(Method::PUT, &with_ae, Some(body), &access_refused())
        .await;
    assert!(!w.exists(&with_ae).await);

    let mine = exchange_path(&unique("mgr-new"));
    w.allowed(Method::PUT, &mine, Some(direct), StatusCode::CREATED)
        .await;
    w.allowed(Method::DELETE, &mine, None, StatusCode::NO_CONTENT)
        .await;
    assert!(!w.exists(&mine).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_needs_write_topic_permission_and_the_users_own_user_id() {
    let w = World::new().await;
    for (exchange, key) in [(&w.other_exchange, "k"), (&w.topic, "#")] {
        let path = format!("/api/bindings/%2F/e/{exchange}/q/{}", w.other_queue);
        let body = json!({"routing_key": key});
        w.admin_ok(Method::POST, &path, Some(body)).await;
    }
    let message = |key: &str, properties: Value| {
        json!({"routing_key": key, "payload": "p", "payload_encoding": "string",
               "properties": properties})
    };

    tracing::info!("write on the exchange: 400 with the channel's code and close text");
    let text = w.denied("write", "exchange", &w.other_exchange);
    let expected =
        json!({"error": "bad_request", "reason": format!("403 ACCESS_REFUSED - {text}")});
    let path = publish_path(&w.other_exchange);
    w.refused(
        Method::POST,
        &path,
        Some(message("k", json!({}))),
        &expected,
    )
    .await;
    assert_eq!(w.messages(&w.other_queue).await, 0, "nothing was routed");

    tracing::info!("topic permissions: write on the routing key");
    let text = format!(
        "write access to topic 'denied.k' in exchange '{}' in vhost '/' refused for user '{}'",
        w.topic, w.user
    );
    let expected =
        json!({"error": "bad_request", "reason": format!("403 ACCESS_REFUSED - {text}")});
    let path = publish_path(&w.topic);
    w.refused(
        Method::POST,
        &path,
        Some(message("denied.k", json!({}))),
        &expected,
    )
    .await;
    assert_eq!(w.messages(&w.other_queue).await, 0, "nothing was routed");
    let (status, reply) = w
        .api
        .send(Method::POST, &path, Some(message("allowed.k", json!({}))))
        .await;
    assert_eq!((status, reply), (StatusCode::OK, json!({"routed": true})));
    assert_eq!(w.messages(&w.other_queue).await, 1);

    tracing::info!("user_id must name the logged-in user (validated-user-id)");
    let text = format!(
        "user_id property set to 'guest' but authenticated user was '{}'",
        w.user
    );
    let expected =
        json!({"error": "bad_request", "reason": format!("406 PRECONDITION_FAILED - {text}")});
    let forged = message("allowed.k", json!({"user_id": "guest"}));
    w.refused(Method::POST, &path, Some(forged), &expected)
        .await;
    assert_eq!(w.messages(&w.other_queue).await, 1, "nothing was routed");
    let own = message("allowed.k", json!({"user_id": w.user}));
    let (status, reply) = w.api.send(Method::POST, &path, Some(own)).await;
    assert_eq!((status, reply), (StatusCode::OK, json!({"routed": true})));
    assert_eq!(w.messages(&w.other_queue).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_create_needs_write_on_the_destination_and_read_on_the_source() {
    let w = World::new().await;
    let bind = |source: &str, kind: &str, destination: &str| {
        format!("/api/bindings/%2F/e/{source}/{kind}/{destination}")
    };
    let key = Some(json!({"routing_key": "k"}));
    let (mgr_x, other_x) = (&w.mgr_exchange, &w.other_exchange);
    let (mgr_q, other_q) = (&w.mgr_queue, &w.other_queue);
    for (source, kind, destination) in [
        (other_x, "q", mgr_q),
        (mgr_x, "q", other_q),
        (other_x, "e", mgr_x),
        (mgr_x, "e", other_x),
    ] {
        let path = bind(source, kind, destination);
        w.refused(Method::POST, &path, key.clone(), &access_refused())
            .await;
        assert!(
            w.bindings(source, kind, destination).await.is_empty(),
            "{path}"
        );
    }

    tracing::info!("topic permissions: read on the binding key");
    let path = bind(&w.topic, "q", mgr_q);
    let denied = Some(json!({"routing_key": "denied.#"}));
    w.refused(Method::POST, &path, denied, &access_refused())
        .await;
    assert!(w.bindings(&w.topic, "q", mgr_q).await.is_empty());
    let allowed = Some(json!({"routing_key": "allowed.#"}));
    w.allowed(Method::POST, &path, allowed, StatusCode::CREATED)
        .await;

    let second = unique("mgr-x2");
    let direct = json!({"type": "direct", "durable": false});
    w.admin_ok(Method::PUT, &exchange_path(&second), Some(direct))
        .await;
    for (kind, destination) in [("q", mgr_q), ("e", &second)] {
        let path = bind(mgr_x, kind, destination);
        w.allowed(Method::POST, &path, key.clone(), StatusCode::CREATED)
            .await;
        assert_eq!(w.bindings(mgr_x, kind, destination).await.len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_delete_needs_write_on_the_destination_and_read_on_the_source() {
    let w = World::new().await;
    let (mgr_x, other_x) = (&w.mgr_exchange, &w.other_exchange);
    let (mgr_q, other_q) = (&w.mgr_queue, &w.other_queue);
    let pairs = [
        (other_x, "q", other_q),
        (other_x, "q", mgr_q),
        (mgr_x, "q", other_q),
        (other_x, "e", mgr_x),
        (mgr_x, "e", other_x),
    ];
    for (source, kind, destination) in pairs {
        let path = format!("/api/bindings/%2F/e/{source}/{kind}/{destination}");
        w.admin_ok(Method::POST, &path, Some(json!({"routing_key": "k"})))
            .await;
    }
    for (source, kind, destination) in pairs {
        let path = format!("/api/bindings/%2F/e/{source}/{kind}/{destination}/k");
        w.refused(Method::DELETE, &path, None, &access_refused())
            .await;
        assert_eq!(
            w.bindings(source, kind, destination).await.len(),
            1,
            "{path}"
        );
    }

    let path = format!("/api/bindings/%2F/e/{mgr_x}/q/{mgr_q}");
    w.admin_ok(Method::POST, &path, Some(json!({"routing_key": "k"})))
        .await;
    w.allowed(
        Method::DELETE,
        &format!("{path}/k"),
        None,
        StatusCode::NO_CONTENT,
    )
    .await;
    assert!(w.bindings(mgr_x, "q", mgr_q).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhost_lists_refuse_a_vhost_the_user_cannot_access() {
    let w = World::new().await;
    let vhost = unique("no-access");
    w.admin_ok(Method::PUT, &format!("/api/vhosts/{vhost}"), None)
        .await;
    w.admin_ok(Method::PUT, &format!("/api/queues/{vhost}/q"), None)
        .await;
    let refused = json!({"error": "not_authorised",
                         "reason": "User not authorised to access virtual host"});
    for path in [
        format!("/api/consumers/{vhost}"),
        format!("/api/queues/{vhost}"),
        format!("/api/exchanges/{vhost}"),
        format!("/api/bindings/{vhost}"),
        format!("/api/vhosts/{vhost}/connections"),
        format!("/api/vhosts/{vhost}/channels"),
    ] {
        w.refused(Method::GET, &path, None, &refused).await;
        w.admin.get(&path).await;
    }
    for path in ["/api/queues", "/api/exchanges", "/api/bindings"] {
        let list = w.api.get(path).await;
        let vhosts: Vec<&Value> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|i| &i["vhost"])
            .collect();
        assert!(vhosts.iter().all(|v| *v == "/"), "{path}: {vhosts:?}");
    }
    w.api.get("/api/consumers/%2F").await;
}

/// RabbitMQ checks resource permissions for administrators too (`check_resource_access` has no
/// tag exemption); a vhost created over HTTP grants its creator full permissions in it
/// (`rabbit_vhost:put_vhost`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn administrators_need_permissions_too_and_get_them_on_vhosts_they_create() {
    let w = World::new().await;
    let admin = unique("admin");
    let body = json!({"password": PASSWORD, "tags": "administrator"});
    w.admin_ok(Method::PUT, &format!("/api/users/{admin}"), Some(body))
        .await;
    let api = w.admin.as_user(&admin, PASSWORD);
    let queue = queue_path(&unique("mgr-by-admin"));
    let (status, reply) = api.send(Method::PUT, &queue, None).await;
    assert_eq!(
        (status, reply),
        (StatusCode::UNAUTHORIZED, access_refused())
    );
    assert!(!w.exists(&queue).await);
    let path = format!("{}/get", queue_path(&w.other_queue));
    let (status, reply) = api.send(Method::POST, &path, Some(get_body())).await;
    assert_eq!(
        (status, reply),
        (StatusCode::UNAUTHORIZED, access_refused()),
        "no permissions in the vhost at all: the channel cannot open"
    );
    api.get("/api/queues/%2F").await;

    tracing::info!("a vhost the administrator creates is theirs to use");
    let vhost = unique("admins");
    let (status, _) = api
        .send(Method::PUT, &format!("/api/vhosts/{vhost}"), None)
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let permission = w
        .admin
        .get(&format!("/api/permissions/{vhost}/{admin}"))
        .await;
    assert_eq!(permission["configure"], ".*", "{permission}");
    let (status, reply) = api
        .send(Method::PUT, &format!("/api/queues/{vhost}/q"), None)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{reply}");
}

/// Warren's aliveness test still declares `aliveness-test`, publishes to it and gets the
/// message back (RabbitMQ 4.x made it a no-op), so it needs what that round trip needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aliveness_test_needs_the_permissions_of_its_round_trip() {
    let w = World::new().await;
    let text = format!(
        "ACCESS_REFUSED - {}",
        w.denied("configure", "queue", "aliveness-test")
    );
    let expected = json!({"error": "not_authorised", "reason": text});
    w.refused(Method::GET, "/api/aliveness-test/%2F", None, &expected)
        .await;
    assert!(!w.exists(&queue_path("aliveness-test")).await);
    let reply = w.admin.get("/api/aliveness-test/%2F").await;
    assert_eq!(reply, json!({"status": "ok"}));
}
