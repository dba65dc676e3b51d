//! What RabbitMQ clients trip over (issue "What RabbitMQ clients still trip over"): unbinding
//! what is gone, exclusive-queue and default-exchange errors with RabbitMQ 4's codes and texts,
//! queue types Warren does not have, and the server identity a client reads at connection.start.

use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::ExchangeKind;
use warren_tests::raw::RawClient;
use warren_tests::wire::{self, reply, table_get, FieldValue};
use warren_tests::{
    bind_queue, bounded, declare_queue, expect_amqp_error, table, text, unique, TestBroker,
};

async fn declare_exchange(channel: &lapin::Channel, name: &str, options: ExchangeDeclareOptions) {
    let declare = channel.exchange_declare(
        name.into(),
        ExchangeKind::Direct,
        options,
        FieldTable::default(),
    );
    bounded!(declare).unwrap_or_else(|error| panic!("declare exchange {name}: {error}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbinding_what_is_gone_is_unbind_ok() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let exchange = unique("ex-gone");
    let queue = unique("q-gone");
    declare_exchange(&channel, &exchange, ExchangeDeclareOptions::default()).await;
    declare_queue(&channel, &queue).await;
    bind_queue(&channel, &queue, &exchange, "k").await;

    tracing::info!("the queue is deleted first, then unbound (delete-then-unbind cleanup)");
    let delete = channel.queue_delete(queue.as_str().into(), QueueDeleteOptions::default());
    bounded!(delete).expect("queue.delete");
    let unbind = channel.queue_unbind(
        queue.as_str().into(),
        exchange.as_str().into(),
        "k".into(),
        FieldTable::default(),
    );
    bounded!(unbind).expect("queue.unbind of a deleted queue is unbind-ok");

    tracing::info!("the exchange is deleted, then a queue is unbound from it");
    declare_queue(&channel, &queue).await;
    bind_queue(&channel, &queue, &exchange, "k").await;
    let delete = channel.exchange_delete(exchange.as_str().into(), Default::default());
    bounded!(delete).expect("exchange.delete");
    let unbind = channel.queue_unbind(
        queue.as_str().into(),
        exchange.as_str().into(),
        "k".into(),
        FieldTable::default(),
    );
    bounded!(unbind).expect("queue.unbind from a deleted exchange is unbind-ok");

    tracing::info!("exchange.unbind naming two exchanges that never existed");
    let unbind = channel.exchange_unbind(
        unique("ex-never").as_str().into(),
        unique("ex-never").as_str().into(),
        "k".into(),
        Default::default(),
        FieldTable::default(),
    );
    bounded!(unbind).expect("exchange.unbind of missing exchanges is unbind-ok");
    // The channel is still open: the unbinds above closed nothing.
    declare_queue(&channel, &unique("q-after")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbinding_after_an_auto_delete_cascade_is_unbind_ok() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let exchange = unique("ex-auto");
    let queue = unique("q-auto");
    let options = ExchangeDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    declare_exchange(&channel, &exchange, options).await;
    declare_queue(&channel, &queue).await;
    bind_queue(&channel, &queue, &exchange, "k").await;
    // Deleting the queue removes its binding, and the auto-delete exchange goes with it.
    let delete = channel.queue_delete(queue.as_str().into(), QueueDeleteOptions::default());
    bounded!(delete).expect("queue.delete");
    let (_c2, other) = broker.channel().await;
    let passive = other.exchange_declare(
        exchange.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    );
    expect_amqp_error(bounded!(passive), reply::NOT_FOUND);
    let unbind = channel.queue_unbind(
        queue.as_str().into(),
        exchange.as_str().into(),
        "k".into(),
        FieldTable::default(),
    );
    bounded!(unbind).expect("unbind after the cascade is unbind-ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_mismatch_is_405_resource_locked() {
    let broker = TestBroker::start().await;
    let (owner, channel) = broker.channel().await;
    let name = unique("q-excl");
    let exclusive = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    let declare = channel.queue_declare(name.as_str().into(), exclusive, FieldTable::default());
    bounded!(declare).expect("declare exclusive");
    let locked = format!(
        "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{name}' in vhost '/'. \
         It could be originally declared on another connection or the exclusive property value \
         does not match that of the original declaration."
    );

    tracing::info!("the owner redeclares without exclusive");
    let channel = owner.create_channel().await.unwrap();
    let declare = channel.queue_declare(
        name.as_str().into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    );
    assert_eq!(
        expect_amqp_error(bounded!(declare), reply::RESOURCE_LOCKED),
        locked
    );

    tracing::info!("another connection declares it, exclusive or not");
    let (_other, other) = broker.channel().await;
    let declare = other.queue_declare(name.as_str().into(), exclusive, FieldTable::default());
    assert_eq!(
        expect_amqp_error(bounded!(declare), reply::RESOURCE_LOCKED),
        locked
    );

    tracing::info!("a shared queue redeclared as exclusive is locked too");
    let shared = unique("q-shared");
    let (_c3, channel) = broker.channel().await;
    declare_queue(&channel, &shared).await;
    let declare = channel.queue_declare(shared.as_str().into(), exclusive, FieldTable::default());
    let text = expect_amqp_error(bounded!(declare), reply::RESOURCE_LOCKED);
    assert!(text.contains(&format!("locked queue '{shared}'")), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_exchange_and_system_exchanges_answer_as_rabbitmq() {
    let broker = TestBroker::start().await;
    let refused = "ACCESS_REFUSED - operation not permitted on the default exchange";
    for passive in [true, false] {
        let (_connection, channel) = broker.channel().await;
        let options = ExchangeDeclareOptions {
            passive,
            ..Default::default()
        };
        let declare = channel.exchange_declare(
            "".into(),
            ExchangeKind::Direct,
            options,
            FieldTable::default(),
        );
        let text = expect_amqp_error(bounded!(declare), reply::ACCESS_REFUSED);
        assert_eq!(text, refused, "passive: {passive}");
    }
    let (_connection, channel) = broker.channel().await;
    let delete = channel.exchange_delete("amq.direct".into(), Default::default());
    let text = expect_amqp_error(bounded!(delete), reply::ACCESS_REFUSED);
    assert_eq!(
        text,
        "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed"
    );
}

async fn declare_typed(broker: &TestBroker, name: &str, kind: &str) -> lapin::Result<lapin::Queue> {
    let (_connection, channel) = broker.channel().await;
    let options = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let arguments = table(&[("x-queue-type", text(kind))]);
    bounded!(channel.queue_declare(name.into(), options, arguments))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_types_warren_lacks_are_refused_with_406() {
    let broker = TestBroker::start().await;
    for kind in ["quorum"] {
        let name = unique("q-typed");
        let text = expect_amqp_error(declare_typed(&broker, &name, kind).await, 406);
        assert_eq!(
            text,
            format!(
                "PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue '{name}' in vhost \
                 '/': \"queue type '{kind}' is not supported by Warren yet (only classic and \
                 stream are); declare it with x-queue-type classic or stream\""
            )
        );
        // Nothing was created under that name.
        let (_connection, channel) = broker.channel().await;
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let declare = channel.queue_declare(name.as_str().into(), passive, FieldTable::default());
        expect_amqp_error(bounded!(declare), reply::NOT_FOUND);
    }
    let name = unique("q-typed");
    let text = expect_amqp_error(declare_typed(&broker, &name, "turbo").await, 406);
    assert!(
        text.ends_with("\"unsupported queue type 'turbo'\""),
        "{text}"
    );

    tracing::info!("classic by name is the classic queue without a type");
    let name = unique("q-classic");
    declare_typed(&broker, &name, "classic")
        .await
        .expect("classic");
    let (_connection, channel) = broker.channel().await;
    let options = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let redeclare = channel.queue_declare(name.as_str().into(), options, FieldTable::default());
    bounded!(redeclare).expect("redeclare without x-queue-type");
    let text = expect_amqp_error(declare_typed(&broker, &name, "quorum").await, 406);
    assert_eq!(
        text,
        format!(
            "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue '{name}' in vhost \
             '/': received the value 'quorum' of type 'longstr' but current is the value \
             'classic' of type 'longstr'"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_properties_name_rabbitmq_and_warren() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client.send(wire::PROTOCOL_HEADER).await;
    let start = client.expect_start().await;
    let get = |key: &str| {
        table_get(&start.server_properties, key)
            .and_then(FieldValue::as_str)
            .map(|v| v.to_string())
    };
    assert_eq!(get("product").as_deref(), Some("RabbitMQ"));
    let version = get("version").expect("version");
    assert!(version.starts_with("4."), "version {version}");
    assert_eq!(get("warren-product").as_deref(), Some("Warren"));
    assert_eq!(
        get("warren-version").as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    let identity = broker.identity().expect("in-process broker");
    assert_eq!(get("cluster_name"), Some(identity.cluster_name()));
    assert!(
        identity.node_name.starts_with("rabbit@"),
        "{}",
        identity.node_name
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_priority_that_is_not_an_integer_is_406_in_rabbitmqs_words() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("q-prio");
    declare_queue(&channel, &queue).await;
    let consume = channel.basic_consume(
        queue.as_str().into(),
        "".into(),
        Default::default(),
        table(&[("x-priority", text("high"))]),
    );
    let text = expect_amqp_error(bounded!(consume), 406);
    assert_eq!(
        text,
        format!(
            "PRECONDITION_FAILED - invalid arg 'x-priority' for queue '{queue}' in vhost '/': \
             \"expected integer, got longstr\""
        )
    );
}
