//! The metadata store seen from clients: a durable declaration or binding is answered only
//! once it is on disk, one that cannot be written is refused and rolled back (not listed, not
//! declared by a retry), and what was acknowledged comes back after a restart, also when many
//! changes went through the journal. In-process Warren only (restarts, the data directory).

use std::path::{Path, PathBuf};

use lapin::options::{QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};
use warren_tests::{bounded, expect_amqp_error, queue_exists, unique, TestBroker};

/// RabbitMQ's INTERNAL_ERROR, the answer to a definition the broker could not write.
const INTERNAL_ERROR: u16 = 541;

async fn declare(channel: &Channel, name: &str, durable: bool) -> lapin::Result<()> {
    let options = QueueDeclareOptions {
        durable,
        ..Default::default()
    };
    bounded!(channel.queue_declare(name.into(), options, FieldTable::default())).map(drop)
}

async fn bind(channel: &Channel, queue: &str, key: &str) -> lapin::Result<()> {
    bounded!(channel.queue_bind(
        queue.into(),
        "amq.direct".into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default()
    ))
}

async fn open_channel(connection: &Connection) -> Channel {
    bounded!(connection.create_channel()).expect("open a channel")
}

/// Replaces `<data>/definitions` by a plain file (root ignores permission bits, so a chmod
/// would not stop the broker); returns where the directory went.
fn break_definitions(data_dir: &Path) -> PathBuf {
    let dir = data_dir.join("definitions");
    let moved = data_dir.join("definitions.moved");
    std::fs::rename(&dir, &moved).expect("move the definitions directory away");
    std::fs::write(&dir, b"not a directory").expect("put a file in its place");
    moved
}

fn repair_definitions(data_dir: &Path, moved: &Path) {
    let dir = data_dir.join("definitions");
    std::fs::remove_file(&dir).expect("remove the file");
    std::fs::rename(moved, &dir).expect("put the directory back");
}

fn bindings_to(broker: &TestBroker, queue: &str) -> Vec<String> {
    let vhost = broker.core().vhost("/").expect("vhost /");
    let mut keys: Vec<String> = vhost
        .bindings()
        .into_iter()
        .filter(|b| &*b.source == "amq.direct" && &**b.destination.name() == queue)
        .map(|b| b.routing_key.to_string())
        .collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declare_that_cannot_be_written_is_refused_rolled_back_and_works_once_fixed() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("needs the data directory of an in-process broker") {
        return;
    }
    let data_dir = broker.data_dir().expect("in-process").to_path_buf();
    let (kept, lost, transient) = (unique("kept"), unique("lost"), unique("tmp"));
    let connection = broker.connect().await;
    let channel = open_channel(&connection).await;
    declare(&channel, &kept, true).await.expect("declare kept");
    bind(&channel, &kept, "before").await.expect("bind before");

    let moved = break_definitions(&data_dir);
    let refused = declare(&channel, &lost, true).await;
    let text = expect_amqp_error(refused, INTERNAL_ERROR);
    assert!(text.contains("cannot write the definitions"), "{text}");
    let connection = broker.connect().await;
    assert!(
        !queue_exists(&connection, &lost).await,
        "a refused queue is not declared"
    );
    let channel = open_channel(&connection).await;
    let retry = declare(&channel, &lost, true).await;
    expect_amqp_error(retry, INTERNAL_ERROR);
    let connection = broker.connect().await;
    let channel = open_channel(&connection).await;
    let refused = bind(&channel, &kept, "during").await;
    expect_amqp_error(refused, INTERNAL_ERROR);
    assert_eq!(
        bindings_to(&broker, &kept),
        ["before"],
        "a refused binding is rolled back"
    );
    // Nothing transient is written, so a broken directory does not stop it.
    let connection = broker.connect().await;
    let channel = open_channel(&connection).await;
    declare(&channel, &transient, false)
        .await
        .expect("a transient queue needs no disk");

    repair_definitions(&data_dir, &moved);
    declare(&channel, &lost, true)
        .await
        .expect("declare once fixed");
    bind(&channel, &kept, "after")
        .await
        .expect("bind once fixed");
    drop(connection);
    let broker = broker.restart().await;
    let connection = broker.connect().await;
    assert!(queue_exists(&connection, &kept).await);
    assert!(
        queue_exists(&connection, &lost).await,
        "declared once fixed, so durable"
    );
    assert!(!queue_exists(&connection, &transient).await);
    assert_eq!(bindings_to(&broker, &kept), ["after", "before"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_binds_and_unbinds_come_back_after_a_restart() {
    const BINDS: usize = 3_000;
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let queue = unique("many");
    let (connection, channel) = broker.channel().await;
    declare(&channel, &queue, true).await.expect("declare");
    for i in 0..BINDS {
        bind(&channel, &queue, &format!("k{i}"))
            .await
            .expect("bind");
    }
    for i in (0..BINDS).step_by(3) {
        let unbind = channel.queue_unbind(
            queue.as_str().into(),
            "amq.direct".into(),
            format!("k{i}").as_str().into(),
            FieldTable::default(),
        );
        bounded!(unbind).expect("unbind");
    }
    // Binding twice is one binding.
    bind(&channel, &queue, "k1").await.expect("bind again");
    let before = bindings_to(&broker, &queue);
    assert_eq!(before.len(), BINDS - BINDS.div_ceil(3));
    drop(connection);
    let broker = broker.restart().await;
    assert_eq!(bindings_to(&broker, &queue), before);
    // The routing table came back too: a kept key routes, a removed one does not.
    let (_connection, channel) = broker.channel().await;
    warren_tests::publish(&channel, "amq.direct", "k1", b"kept").await;
    warren_tests::publish(&channel, "amq.direct", "k0", b"removed").await;
    let got = warren_tests::get_all(&channel, &queue).await;
    assert_eq!(got, ["kept"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_durable_declares_from_many_connections_all_survive_a_restart() {
    const CONNECTIONS: usize = 8;
    const QUEUES_EACH: usize = 40;
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let prefix = unique("conc");
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS {
        let connection = broker.connect().await;
        let prefix = prefix.clone();
        tasks.push(tokio::spawn(async move {
            let channel = open_channel(&connection).await;
            for q in 0..QUEUES_EACH {
                declare(&channel, &format!("{prefix}-{c}-{q}"), true)
                    .await
                    .expect("declare");
            }
            connection
        }));
    }
    for task in tasks {
        drop(bounded!(task, std::time::Duration::from_secs(60)).expect("declarer"));
    }
    let broker = broker.restart().await;
    let vhost = broker.core().vhost("/").expect("vhost /");
    let names = vhost.queue_handles();
    let found = names
        .iter()
        .filter(|q| q.name().starts_with(prefix.as_str()))
        .count();
    assert_eq!(found, CONNECTIONS * QUEUES_EACH);
}

/// The exchange's bindings as `(routing key, destination)`, sorted.
fn bindings_from(broker: &TestBroker, exchange: &str) -> Vec<(String, String)> {
    let vhost = broker.core().vhost("/").expect("vhost /");
    let mut found: Vec<(String, String)> = vhost
        .bindings()
        .into_iter()
        .filter(|b| &*b.source == exchange)
        .map(|b| (b.routing_key.to_string(), b.destination.name().to_string()))
        .collect();
    found.sort();
    found
}

/// As RabbitMQ: a deletion the broker could not write is answered with an error and the
/// object stays (with its bindings, still routing), so a restart brings back what clients
/// were told exists; once the disk is fixed the same deletions go through and last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_that_cannot_be_written_is_refused_and_rolled_back() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("needs the data directory of an in-process broker") {
        return;
    }
    let data_dir = broker.data_dir().expect("in-process").to_path_buf();
    let (queue, exchange) = (unique("kept"), unique("topic"));
    let (connection, channel) = broker.channel().await;
    declare(&channel, &queue, true)
        .await
        .expect("declare the queue");
    let options = lapin::options::ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let topic = lapin::ExchangeKind::Topic;
    bounded!(channel.exchange_declare(
        exchange.as_str().into(),
        topic,
        options,
        FieldTable::default()
    ))
    .expect("declare the exchange");
    bounded!(channel.queue_bind(
        queue.as_str().into(),
        exchange.as_str().into(),
        "k.#".into(),
        QueueBindOptions::default(),
        FieldTable::default()
    ))
    .expect("bind to the topic exchange");
    bind(&channel, &queue, "d")
        .await
        .expect("bind to amq.direct");
    drop(connection);

    let moved = break_definitions(&data_dir);
    let (_connection, channel) = broker.channel().await;
    let refused = bounded!(channel.exchange_delete(exchange.as_str().into(), Default::default()));
    expect_amqp_error(refused, INTERNAL_ERROR);
    let (_connection, channel) = broker.channel().await;
    let refused = bounded!(channel.queue_unbind(
        queue.as_str().into(),
        "amq.direct".into(),
        "d".into(),
        FieldTable::default()
    ));
    expect_amqp_error(refused, INTERNAL_ERROR);
    let (_connection, channel) = broker.channel().await;
    let refused = bounded!(channel.queue_delete(queue.as_str().into(), Default::default()));
    expect_amqp_error(refused, INTERNAL_ERROR);

    let (connection, channel) = broker.channel().await;
    assert!(queue_exists(&connection, &queue).await, "the queue stays");
    assert_eq!(
        bindings_to(&broker, &queue),
        ["d"],
        "the unbound binding stays"
    );
    let to_queue = vec![("k.#".to_string(), queue.clone())];
    assert_eq!(
        bindings_from(&broker, &exchange),
        to_queue,
        "the exchange keeps it"
    );
    // They route again: the snapshot was rolled back too, onto the queue that came back.
    warren_tests::publish(&channel, &exchange, "k.a", b"via topic").await;
    warren_tests::publish(&channel, "amq.direct", "d", b"via direct").await;
    let got = warren_tests::get_all(&channel, &queue).await;
    assert_eq!(got, ["via topic", "via direct"]);
    drop(connection);

    repair_definitions(&data_dir, &moved);
    let (connection, channel) = broker.channel().await;
    bounded!(channel.exchange_delete(exchange.as_str().into(), Default::default()))
        .expect("delete the exchange once fixed");
    bounded!(channel.queue_delete(queue.as_str().into(), Default::default()))
        .expect("delete the queue once fixed");
    drop(connection);
    let broker = broker.restart().await;
    let connection = broker.connect().await;
    assert!(!queue_exists(&connection, &queue).await, "deleted for good");
    assert!(bindings_from(&broker, &exchange).is_empty());
    assert!(bindings_to(&broker, &queue).is_empty());
}
