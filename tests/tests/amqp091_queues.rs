//! Queues: server-named queues, passive declares, equivalence errors, exclusive and auto-delete
//! lifecycles, purge and delete with their counts and preconditions, bindings.

use std::time::Duration;

use lapin::options::{BasicCancelOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection};
use warren_tests::wire::reply;
use warren_tests::{
    bounded, confirm_channel, consume, declare_queue, eventually, expect_amqp_error, message_count,
    passive_declare, publish, queue_exists, table, unique, wait_for_message_count, TestBroker,
};

async fn declare(
    channel: &Channel,
    name: &str,
    options: QueueDeclareOptions,
    arguments: FieldTable,
) -> lapin::Result<lapin::Queue> {
    bounded!(channel.queue_declare(name.into(), options, arguments))
}

async fn new_channel(connection: &Connection) -> Channel {
    bounded!(connection.create_channel()).expect("open a channel")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_named_queues_start_with_amq_gen() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let options = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    let first = declare(&channel, "", options, FieldTable::default())
        .await
        .unwrap();
    let second = declare(&channel, "", options, FieldTable::default())
        .await
        .unwrap();
    assert!(
        first.name().as_str().starts_with("amq.gen-"),
        "{}",
        first.name()
    );
    assert_ne!(first.name(), second.name());
    // The name is usable: publish through the default exchange and count.
    publish(&channel, "", first.name().as_str(), b"x").await;
    let again = declare(
        &channel,
        first.name().as_str(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert_eq!(again.message_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_declare_of_missing_queue_is_404() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let name = unique("q-missing");
    let text = expect_amqp_error(passive_declare(&connection, &name).await, reply::NOT_FOUND);
    assert_eq!(text, format!("NOT_FOUND - no queue '{name}' in vhost '/'"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclare_with_another_durability_is_406_with_rabbitmq_text() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = unique("q-durable");
    declare_queue(&channel, &name).await;
    let options = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let text = expect_amqp_error(
        declare(&channel, &name, options, FieldTable::default()).await,
        reply::PRECONDITION_FAILED,
    );
    assert_eq!(
        text,
        format!(
            "PRECONDITION_FAILED - inequivalent arg 'durable' for queue '{name}' in vhost '/': \
             received 'true' but current is 'false'"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclare_with_another_auto_delete_is_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = unique("q-autodelete-eq");
    declare_queue(&channel, &name).await;
    let options = QueueDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    let text = expect_amqp_error(
        declare(&channel, &name, options, FieldTable::default()).await,
        reply::PRECONDITION_FAILED,
    );
    assert!(text.contains("inequivalent arg 'auto_delete'"), "{text}");
    assert!(text.contains(&format!("queue '{name}'")), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclare_with_other_arguments_is_406_naming_the_argument() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = unique("q-args");
    let first = table(&[("x-max-length", AMQPValue::LongInt(10))]);
    declare(&channel, &name, Default::default(), first.clone())
        .await
        .unwrap();
    // The same arguments again: fine.
    declare(&channel, &name, Default::default(), first)
        .await
        .expect("equivalent redeclare");
    let second = table(&[("x-max-length", AMQPValue::LongInt(20))]);
    let text = expect_amqp_error(
        declare(&channel, &name, Default::default(), second).await,
        reply::PRECONDITION_FAILED,
    );
    // RabbitMQ 3.10.8: "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue '<name>'
    // in vhost '/': received the value '20' of type 'signedint' but current is the value '10'
    // of type 'signedint'"
    assert!(
        text.starts_with(&format!(
            "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue '{name}' in vhost '/'"
        )),
        "{text}"
    );
    assert!(text.contains("'20'") && text.contains("'10'"), "{text}");

    let (_c2, channel) = broker.channel().await;
    let missing = declare(&channel, &name, Default::default(), FieldTable::default()).await;
    let text = expect_amqp_error(missing, reply::PRECONDITION_FAILED);
    assert!(
        text.contains("inequivalent arg 'x-max-length'"),
        "dropping an argument: {text}"
    );
}

/// A passive declare ignores the other flags: it only checks existence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_declare_ignores_flags_and_arguments() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = unique("q-passive");
    declare_queue(&channel, &name).await;
    let options = QueueDeclareOptions {
        passive: true,
        durable: true,
        auto_delete: true,
        ..Default::default()
    };
    let arguments = table(&[("x-max-length", AMQPValue::LongInt(1))]);
    declare(&channel, &name, options, arguments)
        .await
        .expect("passive ignores flags");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declaring_an_amq_prefixed_queue_is_403() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = format!("amq.{}", unique("q"));
    let text = expect_amqp_error(
        declare(&channel, &name, Default::default(), FieldTable::default()).await,
        reply::ACCESS_REFUSED,
    );
    assert_eq!(
        text,
        format!("ACCESS_REFUSED - queue name '{name}' contains reserved prefix 'amq.*'")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declare_ok_reports_message_and_consumer_counts() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let name = unique("q-counts");
    let declared = declare(&channel, &name, Default::default(), FieldTable::default())
        .await
        .unwrap();
    assert_eq!(
        (declared.message_count(), declared.consumer_count()),
        (0, 0)
    );
    for i in 0..3 {
        publish(&channel, "", &name, format!("m{i}").as_bytes()).await;
    }
    let consumer_channel = new_channel(&connection).await;
    bounded!(consumer_channel.basic_qos(1, Default::default())).unwrap();
    let _consumer = consume(&consumer_channel, &name, false).await;
    // One message is now unacked at the consumer: declare-ok counts only ready messages.
    let counted = || async {
        let again = declare(&channel, &name, Default::default(), FieldTable::default())
            .await
            .unwrap();
        (again.message_count(), again.consumer_count()) == (2, 1)
    };
    eventually(
        "declare-ok reports 2 ready messages and 1 consumer",
        Duration::from_secs(3),
        counted,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_queue_is_locked_to_its_connection() {
    let broker = TestBroker::start().await;
    let (_owner, channel) = broker.channel().await;
    let name = unique("q-exclusive");
    let options = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    declare(&channel, &name, options, FieldTable::default())
        .await
        .unwrap();

    let other = broker.connect().await;
    let text = expect_amqp_error(passive_declare(&other, &name).await, reply::RESOURCE_LOCKED);
    assert!(text.starts_with(&format!("RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{name}' in vhost '/'")), "{text}");

    let other_channel = new_channel(&other).await;
    let consume = other_channel.basic_consume(
        name.as_str().into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    );
    expect_amqp_error(bounded!(consume), reply::RESOURCE_LOCKED);

    let other_channel = new_channel(&other).await;
    let delete = other_channel.queue_delete(name.as_str().into(), Default::default());
    expect_amqp_error(bounded!(delete), reply::RESOURCE_LOCKED);

    // Publishing to it from another connection is allowed.
    let other_channel = new_channel(&other).await;
    publish(&other_channel, "", &name, b"from elsewhere").await;
    wait_for_message_count(&_owner, &name, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_queue_is_deleted_when_its_connection_closes() {
    let broker = TestBroker::start().await;
    let (owner, channel) = broker.channel().await;
    let name = unique("q-exclusive-gone");
    let options = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    declare(&channel, &name, options, FieldTable::default())
        .await
        .unwrap();
    bounded!(owner.close(200, "bye".into())).unwrap();

    let observer = broker.connect().await;
    let gone = || async { !queue_exists(&observer, &name).await };
    eventually("exclusive queue deleted", Duration::from_secs(5), gone).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_delete_queue_goes_away_after_its_last_consumer_cancels() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let name = unique("q-autodelete");
    let options = QueueDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    declare(&channel, &name, options, FieldTable::default())
        .await
        .unwrap();
    // Never consumed from: it stays.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        queue_exists(&connection, &name).await,
        "an auto-delete queue lives until a consumer came and went"
    );

    let first = consume(&channel, &name, false).await;
    let second = consume(&channel, &name, false).await;
    bounded!(channel.basic_cancel(first.tag(), BasicCancelOptions::default())).unwrap();
    assert!(queue_exists(&connection, &name).await, "one consumer left");
    bounded!(channel.basic_cancel(second.tag(), BasicCancelOptions::default())).unwrap();
    let gone = || async { !queue_exists(&connection, &name).await };
    eventually("auto-delete queue deleted", Duration::from_secs(5), gone).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_returns_the_number_of_messages_removed() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let name = unique("q-purge");
    declare_queue(&channel, &name).await;
    for _ in 0..7 {
        publish(&channel, "", &name, b"x").await;
    }
    let purged = bounded!(channel.queue_purge(name.as_str().into(), Default::default())).unwrap();
    assert_eq!(purged, 7);
    assert_eq!(message_count(&connection, &name).await, 0);
    let purged = bounded!(channel.queue_purge(name.as_str().into(), Default::default())).unwrap();
    assert_eq!(purged, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_of_a_missing_queue_is_404() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = unique("q-purge-missing");
    let text = expect_amqp_error(
        bounded!(channel.queue_purge(name.as_str().into(), Default::default())),
        reply::NOT_FOUND,
    );
    assert!(text.contains(&name), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_returns_the_message_count() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let name = unique("q-delete");
    declare_queue(&channel, &name).await;
    for _ in 0..4 {
        publish(&channel, "", &name, b"x").await;
    }
    let deleted = bounded!(channel.queue_delete(name.as_str().into(), Default::default())).unwrap();
    assert_eq!(deleted, 4);
    assert!(!queue_exists(&connection, &name).await);
}

/// RabbitMQ 3.10.8 answers queue.delete of a missing queue with delete-ok (message count 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_of_a_missing_queue_succeeds_with_zero() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let deleted =
        bounded!(channel.queue_delete(unique("q-never").as_str().into(), Default::default()));
    assert_eq!(deleted.expect("delete-ok"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_if_empty_with_messages_is_406() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let name = unique("q-ifempty");
    declare_queue(&channel, &name).await;
    publish(&channel, "", &name, b"x").await;
    let options = QueueDeleteOptions {
        if_empty: true,
        ..Default::default()
    };
    let text = expect_amqp_error(
        bounded!(channel.queue_delete(name.as_str().into(), options)),
        reply::PRECONDITION_FAILED,
    );
    assert_eq!(
        text,
        format!("PRECONDITION_FAILED - queue '{name}' in vhost '/' not empty")
    );
    assert_eq!(
        message_count(&connection, &name).await,
        1,
        "the queue and its message survive"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_if_unused_with_a_consumer_is_406() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let name = unique("q-ifunused");
    declare_queue(&channel, &name).await;
    let _consumer = consume(&channel, &name, false).await;
    let other = new_channel(&connection).await;
    let options = QueueDeleteOptions {
        if_unused: true,
        ..Default::default()
    };
    let text = expect_amqp_error(
        bounded!(other.queue_delete(name.as_str().into(), options)),
        reply::PRECONDITION_FAILED,
    );
    assert_eq!(
        text,
        format!("PRECONDITION_FAILED - queue '{name}' in vhost '/' in use")
    );
    assert!(queue_exists(&connection, &name).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_if_empty_and_if_unused_succeed_when_true() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let name = unique("q-ifboth");
    declare_queue(&channel, &name).await;
    let options = QueueDeleteOptions {
        if_empty: true,
        if_unused: true,
        ..Default::default()
    };
    assert_eq!(
        bounded!(channel.queue_delete(name.as_str().into(), options)).unwrap(),
        0
    );
    assert!(!queue_exists(&connection, &name).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_to_a_missing_exchange_or_queue_is_404() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let name = unique("q-bind");
    let missing_exchange = unique("ex-missing");
    declare_queue(&channel, &name).await;
    let bind = channel.queue_bind(
        name.as_str().into(),
        missing_exchange.as_str().into(),
        "k".into(),
        Default::default(),
        FieldTable::default(),
    );
    let text = expect_amqp_error(bounded!(bind), reply::NOT_FOUND);
    assert_eq!(
        text,
        format!("NOT_FOUND - no exchange '{missing_exchange}' in vhost '/'")
    );

    let channel = new_channel(&connection).await;
    let missing_queue = unique("q-missing");
    let bind = channel.queue_bind(
        missing_queue.as_str().into(),
        "amq.direct".into(),
        "k".into(),
        Default::default(),
        FieldTable::default(),
    );
    let text = expect_amqp_error(bounded!(bind), reply::NOT_FOUND);
    assert_eq!(
        text,
        format!("NOT_FOUND - no queue '{missing_queue}' in vhost '/'")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbind_removes_the_binding_and_is_idempotent() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = unique("q-unbind");
    declare_queue(&channel, &name).await;
    let bind = channel.queue_bind(
        name.as_str().into(),
        "amq.direct".into(),
        name.as_str().into(),
        Default::default(),
        FieldTable::default(),
    );
    bounded!(bind).unwrap();
    publish(&channel, "amq.direct", &name, b"bound").await;
    let unbind = || {
        channel.queue_unbind(
            name.as_str().into(),
            "amq.direct".into(),
            name.as_str().into(),
            FieldTable::default(),
        )
    };
    bounded!(unbind()).expect("unbind");
    publish(&channel, "amq.direct", &name, b"unbound").await;
    assert_eq!(warren_tests::get_all(&channel, &name).await, vec!["bound"]);
    // RabbitMQ 3.10.8: unbinding a binding that does not exist is unbind-ok.
    bounded!(unbind()).expect("second unbind is a no-op");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_queue_removes_its_bindings() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = unique("q-rebind");
    declare_queue(&channel, &name).await;
    let bind = channel.queue_bind(
        name.as_str().into(),
        "amq.topic".into(),
        name.as_str().into(),
        Default::default(),
        FieldTable::default(),
    );
    bounded!(bind).unwrap();
    bounded!(channel.queue_delete(name.as_str().into(), Default::default())).unwrap();
    declare_queue(&channel, &name).await;
    publish(&channel, "amq.topic", &name, b"no binding any more").await;
    assert!(warren_tests::get_all(&channel, &name).await.is_empty());
}

/// The queue's type decides which arguments it takes: another type's declare argument or
/// consumer argument is refused with RabbitMQ 4's text, and the channel closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_queue_types_arguments_are_refused_by_the_type() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let name = unique("typed");
    let channel = new_channel(&connection).await;
    let arguments = table(&[("x-delivery-limit", AMQPValue::LongInt(5))]);
    let text = expect_amqp_error(
        declare(&channel, &name, QueueDeclareOptions::default(), arguments).await,
        reply::PRECONDITION_FAILED,
    );
    assert!(
        text.contains(&format!(
            "invalid arg 'x-delivery-limit' for queue '{name}' in vhost '/' of queue type \
             rabbit_classic_queue"
        )),
        "{text}"
    );
    let channel = new_channel(&connection).await;
    declare_queue(&channel, &name).await;
    let options = lapin::options::BasicConsumeOptions::default();
    let arguments = table(&[("x-stream-offset", AMQPValue::LongString("first".into()))]);
    let consume = channel.basic_consume(name.as_str().into(), "".into(), options, arguments);
    let text = expect_amqp_error(bounded!(consume), reply::PRECONDITION_FAILED);
    assert!(
        text.contains(&format!(
            "invalid arg 'x-stream-offset' for queue '{name}' in vhost '/' of queue type \
             rabbit_classic_queue"
        )),
        "{text}"
    );
}
