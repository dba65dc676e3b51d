//! Vhosts, users, permissions, topic permissions, vhost limits and policies, as RabbitMQ's
//! access-control, vhosts and policies guides describe them, driven with lapin. Definitions
//! come from a file exported by RabbitMQ 3.10.8 (`crates/core/tests/fixtures`), so its
//! password hashes are RabbitMQ's own. Operator actions go through the broker's core, as
//! `warren ctl` and the HTTP API do; against an external broker these tests are skipped.

use std::time::Duration;

use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::ExchangeKind;
use serde_json::json;
use warren_core::access::format::{Definitions, PermissionDef, VHostLimits, VHostMetadata};
use warren_core::access::policy::PolicyRecord;
use warren_tests::{
    bounded, confirm_channel, declare_queue, eventually, expect_amqp_error, get_all, message_count,
    publish, table, text, TestBroker,
};

const RABBITMQ_DEFINITIONS: &str =
    include_str!("../../crates/core/tests/fixtures/rabbitmq-3.10.8-definitions.json");

async fn try_connect(url: &str) -> lapin::Result<lapin::Connection> {
    bounded!(lapin::Connection::connect(
        url,
        lapin::ConnectionProperties::default()
    ))
}

/// A broker with RabbitMQ's exported definitions imported: user `alice` (password `s3cret`,
/// hashed by RabbitMQ) in vhost `dev` with configure `^alice-.*`, write `.*`, read `amq\..*`,
/// topic write `^{username}\..*` on amq.topic, an operator policy capping max-length at 100
/// and a policy giving `t.` queues a message TTL.
async fn broker_with_rabbitmq_definitions() -> Option<TestBroker> {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("imports definitions through the broker's core") {
        return None;
    }
    let definitions: Definitions = serde_json::from_str(RABBITMQ_DEFINITIONS).unwrap();
    bounded!(broker.core().import_definitions(&definitions)).expect("import");
    Some(broker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_imported_with_a_rabbitmq_hash_logs_in_with_its_password() {
    let Some(broker) = broker_with_rabbitmq_definitions().await else {
        return;
    };
    let alice = try_connect(&broker.url_as("alice", "s3cret", "dev")).await;
    assert!(alice.is_ok(), "alice/s3cret into dev: {:?}", alice.err());
    let wrong = try_connect(&broker.url_as("alice", "s3cret!", "dev")).await;
    assert!(wrong.is_err(), "a wrong password must be refused");
    let text = expect_amqp_error(
        try_connect(&broker.url_as("alice", "s3cret", "/")).await,
        530,
    );
    assert!(
        text.contains("access to vhost '/' refused for user 'alice'"),
        "{text}"
    );
    let text = expect_amqp_error(
        try_connect(&broker.url_as("alice", "s3cret", "nope")).await,
        530,
    );
    assert!(text.contains("vhost nope not found"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_operation_checks_the_permission_rabbitmq_documents() {
    let Some(broker) = broker_with_rabbitmq_definitions().await else {
        return;
    };
    let connection = try_connect(&broker.url_as("alice", "s3cret", "dev"))
        .await
        .unwrap();
    let channel = bounded!(connection.create_channel()).unwrap();
    // configure ^alice-.* : declaring her own queue works, another is refused.
    declare_queue(&channel, "alice-q").await;
    let text = expect_amqp_error(
        bounded!(channel.queue_declare(
            "bob-q".into(),
            QueueDeclareOptions::default(),
            FieldTable::default()
        )),
        403,
    );
    assert_eq!(
        text,
        "ACCESS_REFUSED - configure access to queue 'bob-q' in vhost 'dev' refused for user 'alice'"
    );
    // write .* : publishing through the default exchange works.
    let channel = bounded!(connection.create_channel()).unwrap();
    publish(&channel, "", "alice-q", b"m1").await;
    // read amq\..* : consuming, getting and purging her queue are refused.
    let text = expect_amqp_error(
        bounded!(channel.basic_consume(
            "alice-q".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default()
        )),
        403,
    );
    assert!(text.contains("read access to queue 'alice-q'"), "{text}");
    let channel = bounded!(connection.create_channel()).unwrap();
    let text = expect_amqp_error(
        bounded!(channel.basic_get("alice-q".into(), BasicGetOptions::default())),
        403,
    );
    assert!(text.contains("read access to queue 'alice-q'"), "{text}");
    let channel = bounded!(connection.create_channel()).unwrap();
    expect_amqp_error(
        bounded!(channel.queue_purge("alice-q".into(), QueuePurgeOptions::default())),
        403,
    );
    // queue.bind needs write on the queue and read on the exchange (amq.direct matches).
    let channel = bounded!(connection.create_channel()).unwrap();
    bounded!(channel.queue_bind(
        "alice-q".into(),
        "amq.direct".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default()
    ))
    .unwrap();
    // exchange.declare needs configure on the exchange.
    let text = expect_amqp_error(
        bounded!(channel.exchange_declare(
            "orders".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default()
        )),
        403,
    );
    assert!(
        text.contains("configure access to exchange 'orders' in vhost 'dev'"),
        "{text}"
    );
    // A queue with a dead-letter exchange needs write on it and read on the queue.
    let channel = bounded!(connection.create_channel()).unwrap();
    let args = table(&[("x-dead-letter-exchange", text_value("amq.fanout"))]);
    let text = expect_amqp_error(
        bounded!(channel.queue_declare("alice-dl".into(), QueueDeclareOptions::default(), args)),
        403,
    );
    assert!(text.contains("read access to queue 'alice-dl'"), "{text}");
    // The broker keeps serving: guest in / is unaffected.
    let (_guest, guest_channel) = broker.channel().await;
    declare_queue(&guest_channel, "bob-q").await;
}

fn text_value(value: &str) -> lapin::types::AMQPValue {
    text(value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_permissions_check_routing_keys_on_topic_exchanges() {
    let Some(broker) = broker_with_rabbitmq_definitions().await else {
        return;
    };
    let connection = try_connect(&broker.url_as("alice", "s3cret", "dev"))
        .await
        .unwrap();
    let channel = confirm_channel(&connection).await;
    publish(&channel, "amq.topic", "alice.orders", b"ok").await;
    let refused = bounded!(async {
        channel
            .basic_publish(
                "amq.topic".into(),
                "bob.orders".into(),
                Default::default(),
                b"no",
                Default::default(),
            )
            .await?
            .await
    });
    let text = expect_amqp_error(refused, 403);
    assert!(
        text.contains("write access to topic 'bob.orders' in exchange 'amq.topic' in vhost 'dev' refused for user 'alice'"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhost_limits_cap_connections_and_queues() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("sets vhost limits through the broker's core") {
        return;
    }
    let core = broker.core();
    core.add_vhost("small", VHostMetadata::default())
        .await
        .unwrap();
    core.access()
        .set_permissions(PermissionDef {
            user: "guest".into(),
            vhost: "small".into(),
            configure: ".*".into(),
            write: ".*".into(),
            read: ".*".into(),
        })
        .await
        .unwrap();
    core.set_vhost_limits(
        "small",
        VHostLimits {
            max_connections: Some(1),
            max_queues: Some(2),
        },
    )
    .await
    .unwrap();
    let url = broker.url_as("guest", "guest", "small");
    let first = try_connect(&url).await.unwrap();
    let text = expect_amqp_error(try_connect(&url).await, 530);
    assert!(
        text.contains("refused for user 'guest': vhost connection limit (1) is reached"),
        "{text}"
    );
    let channel = bounded!(first.create_channel()).unwrap();
    declare_queue(&channel, "q1").await;
    declare_queue(&channel, "q2").await;
    let text = expect_amqp_error(
        bounded!(channel.queue_declare(
            "q3".into(),
            QueueDeclareOptions::default(),
            FieldTable::default()
        )),
        406,
    );
    assert!(
        text.contains("cannot declare queue 'q3': queue limit in vhost 'small' (2) is reached"),
        "{text}"
    );
    // Closing the connection frees its place.
    bounded!(first.close(200, "bye".into())).unwrap();
    eventually(
        "the vhost's connection count drops",
        Duration::from_secs(5),
        || async { try_connect(&url).await.is_ok() },
    )
    .await;
}

fn policy(vhost: &str, name: &str, pattern: &str, definition: serde_json::Value) -> PolicyRecord {
    PolicyRecord {
        vhost: vhost.into(),
        name: name.into(),
        pattern: pattern.into(),
        apply_to: Default::default(),
        priority: 0,
        definition: definition.as_object().unwrap().clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_apply_to_existing_queues_and_operator_policies_cap_them() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("sets policies through the broker's core") {
        return;
    }
    let (connection, channel) = broker.channel().await;
    declare_queue(&channel, "capped").await;
    let core = broker.core();
    bounded!(core.set_policy(
        policy("/", "len", "^capped$", json!({"max-length": 3})),
        false
    ))
    .unwrap();
    let confirms = confirm_channel(&connection).await;
    for i in 0..5 {
        publish(&confirms, "", "capped", format!("m{i}").as_bytes()).await;
    }
    assert_eq!(
        message_count(&connection, "capped").await,
        3,
        "policy max-length 3"
    );
    assert_eq!(
        get_all(&channel, "capped").await,
        ["m2", "m3", "m4"],
        "drop-head"
    );
    // A declared argument wins over the policy; an operator policy caps it.
    let args = table(&[("x-max-length", lapin::types::AMQPValue::LongLongInt(4))]);
    bounded!(channel.queue_declare("capped2".into(), QueueDeclareOptions::default(), args))
        .unwrap();
    bounded!(core.set_policy(
        policy("/", "len2", "^capped2$", json!({"max-length": 1})),
        false
    ))
    .unwrap();
    for i in 0..6 {
        publish(&confirms, "", "capped2", format!("n{i}").as_bytes()).await;
    }
    assert_eq!(
        message_count(&connection, "capped2").await,
        4,
        "declared 4 wins"
    );
    bounded!(core.set_policy(policy("/", "ops", ".*", json!({"max-length": 2})), true)).unwrap();
    publish(&confirms, "", "capped2", b"n6").await;
    assert_eq!(
        message_count(&connection, "capped2").await,
        2,
        "operator policy caps at 2"
    );
    // Clearing the policies lifts the limits.
    bounded!(core.clear_policy("/", "ops", true)).unwrap();
    bounded!(core.clear_policy("/", "len", false)).unwrap();
    for i in 0..5 {
        publish(&confirms, "", "capped", format!("p{i}").as_bytes()).await;
    }
    assert_eq!(message_count(&connection, "capped").await, 5);
    // An alternate exchange given by policy catches unroutable messages.
    declare_queue(&channel, "unrouted").await;
    bounded!(channel.queue_bind(
        "unrouted".into(),
        "amq.fanout".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default()
    ))
    .unwrap();
    let mut ae = policy(
        "/",
        "ae",
        "^amq\\.direct$",
        json!({"alternate-exchange": "amq.fanout"}),
    );
    ae.apply_to = warren_core::access::policy::ApplyTo::Exchanges;
    bounded!(core.set_policy(ae, false)).unwrap();
    publish(&confirms, "amq.direct", "nobody", b"lost?").await;
    assert_eq!(get_all(&channel, "unrouted").await, ["lost?"]);
    // Invalid policies are refused with a reason.
    let error = bounded!(core.set_policy(policy("/", "bad", ".*", json!({"colour": 1})), false))
        .unwrap_err();
    assert!(error.text.contains("colour"), "{}", error.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_vhosts_permissions_and_policies_survive_a_restart() {
    let Some(broker) = broker_with_rabbitmq_definitions().await else {
        return;
    };
    let core = broker.core();
    core.access()
        .put_user("carol", Some("pw"), None, vec!["management".into()])
        .await
        .unwrap();
    core.access()
        .set_permissions(PermissionDef {
            user: "carol".into(),
            vhost: "dev".into(),
            configure: ".*".into(),
            write: ".*".into(),
            read: ".*".into(),
        })
        .await
        .unwrap();
    {
        let connection = try_connect(&broker.url_as("carol", "pw", "dev"))
            .await
            .unwrap();
        let channel = bounded!(connection.create_channel()).unwrap();
        bounded!(channel.queue_declare(
            "t.kept".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default()
        ))
        .unwrap();
        bounded!(connection.close(200, "bye".into())).unwrap();
    }
    let before = core.export_definitions();
    let broker = broker.restart().await;
    let after = broker.core().export_definitions();
    assert_eq!(
        serde_json::to_value(&before.users).unwrap(),
        serde_json::to_value(&after.users).unwrap()
    );
    assert_eq!(before.permissions, after.permissions);
    assert_eq!(before.policies, after.policies);
    assert_eq!(before.parameters, after.parameters);
    assert_eq!(before.queues, after.queues);
    assert!(after
        .queues
        .iter()
        .any(|q| q.name == "t.kept" && q.vhost == "dev"));
    let carol = try_connect(&broker.url_as("carol", "pw", "dev")).await;
    assert!(carol.is_ok(), "carol logs in after the restart");
    let alice = try_connect(&broker.url_as("alice", "s3cret", "dev")).await;
    assert!(alice.is_ok(), "alice logs in after the restart");
    let (policy, operator) = broker.core().vhost("dev").unwrap().queue_policies("t.kept");
    assert_eq!(
        (policy.as_deref(), operator.as_deref()),
        (Some("ttl"), Some("cap"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_user_or_vhost_closes_its_connections() {
    let Some(broker) = broker_with_rabbitmq_definitions().await else {
        return;
    };
    let core = broker.core();
    let alice = try_connect(&broker.url_as("alice", "s3cret", "dev"))
        .await
        .unwrap();
    core.access().delete_user("alice").await.unwrap();
    eventually(
        "alice's connection closes",
        Duration::from_secs(5),
        || async { !alice.status().connected() },
    )
    .await;
    let (guest_in_dev, guest_channel) = {
        core.access()
            .set_permissions(PermissionDef {
                user: "guest".into(),
                vhost: "dev".into(),
                configure: ".*".into(),
                write: ".*".into(),
                read: ".*".into(),
            })
            .await
            .unwrap();
        let connection = try_connect(&broker.url_as("guest", "guest", "dev"))
            .await
            .unwrap();
        let channel = bounded!(connection.create_channel()).unwrap();
        (connection, channel)
    };
    declare_queue(&guest_channel, "doomed").await;
    bounded!(core.delete_vhost("dev")).unwrap();
    eventually(
        "connections to the deleted vhost close",
        Duration::from_secs(5),
        || async { !guest_in_dev.status().connected() },
    )
    .await;
    assert!(core.vhost("dev").is_none());
    let text = expect_amqp_error(
        try_connect(&broker.url_as("guest", "guest", "dev")).await,
        530,
    );
    assert!(text.contains("not found"), "{text}");
    // The default vhost is untouched.
    let (_c, channel) = broker.channel().await;
    declare_queue(&channel, "still-here").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_then_import_into_a_fresh_broker_gives_the_same_definitions() {
    let Some(broker) = broker_with_rabbitmq_definitions().await else {
        return;
    };
    let (_c, channel) = broker.channel().await;
    bounded!(channel.exchange_declare(
        "orders".into(),
        ExchangeKind::Topic,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default()
    ))
    .unwrap();
    let args = table(&[("x-message-ttl", lapin::types::AMQPValue::LongInt(60_000))]);
    bounded!(channel.queue_declare(
        "orders.eu".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args
    ))
    .unwrap();
    bounded!(channel.queue_bind(
        "orders.eu".into(),
        "orders".into(),
        "eu.#".into(),
        QueueBindOptions::default(),
        FieldTable::default()
    ))
    .unwrap();
    let exported = broker.core().export_definitions();
    let json = serde_json::to_string(&exported).unwrap();
    let fresh = TestBroker::start().await;
    let parsed: Definitions = serde_json::from_str(&json).unwrap();
    bounded!(fresh.core().import_definitions(&parsed)).unwrap();
    let again = fresh.core().export_definitions();
    assert_eq!(
        serde_json::to_value(&exported.users).unwrap(),
        serde_json::to_value(&again.users).unwrap()
    );
    assert_eq!(exported.vhosts, again.vhosts);
    assert_eq!(exported.permissions, again.permissions);
    assert_eq!(exported.topic_permissions, again.topic_permissions);
    assert_eq!(exported.policies, again.policies);
    assert_eq!(exported.parameters, again.parameters);
    assert_eq!(exported.queues, again.queues);
    assert_eq!(exported.exchanges, again.exchanges);
    assert_eq!(exported.bindings, again.bindings);
    assert!(again.bindings.iter().any(|b| b.routing_key == "eu.#"));
    let alice = try_connect(&fresh.url_as("alice", "s3cret", "dev")).await;
    assert!(alice.is_ok(), "the hash survives export and import");
    // A malformed document is refused with a reason and changes nothing.
    let bad: Definitions = serde_json::from_value(json!({
        "users": [{"name": "eve", "password_hash": "not base64!", "tags": ""}]
    }))
    .unwrap();
    let error = bounded!(fresh.core().import_definitions(&bad)).unwrap_err();
    assert!(error.text.contains("user 'eve'"), "{}", error.text);
    assert!(!fresh.core().access().user_exists("eve"));
}

/// `load_definitions` imports a RabbitMQ definitions file at start; a file that is not one
/// stops startup with a message naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_definitions_imports_a_file_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("definitions.json");
    std::fs::write(&path, RABBITMQ_DEFINITIONS).unwrap();
    let broker =
        TestBroker::start_with(|config| config.load_definitions = Some(path.clone())).await;
    if broker.skip_if_external("sets load_definitions") {
        return;
    }
    let alice = try_connect(&broker.url_as("alice", "s3cret", "dev")).await;
    assert!(
        alice.is_ok(),
        "alice from the loaded file logs in: {:?}",
        alice.err()
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, b"{\"users\": 5}").unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let config = warren_server::Config {
        amqp_port: 0,
        stream_port: 0,
        management_port: None,
        prometheus_port: None,
        bind_address: [127, 0, 0, 1].into(),
        data_dir: data_dir.path().to_path_buf(),
        load_definitions: Some(bad.clone()),
        ..Default::default()
    };
    let error = match bounded!(warren_server::start(config)) {
        Ok(_) => panic!("a malformed definitions file must stop startup"),
        Err(error) => format!("{error:#}"),
    };
    assert!(
        error.contains("bad.json") && error.contains("not a RabbitMQ definitions"),
        "{error}"
    );
}
