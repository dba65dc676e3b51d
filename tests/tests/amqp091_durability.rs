//! Durability of definitions across a restart on the same data dir: durable exchanges, queues
//! and the bindings between them come back; transient ones do not. In-process Warren only: an
//! external broker cannot be restarted from here, so these tests skip (and say so).

use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};
use warren_tests::wire::reply;
use warren_tests::{
    bind_queue, bounded, expect_amqp_error, get_all, passive_declare, publish, queue_exists, table,
    unique, TestBroker,
};

async fn declare_exchange(channel: &Channel, name: &str, kind: ExchangeKind, durable: bool) {
    let options = ExchangeDeclareOptions {
        durable,
        ..Default::default()
    };
    let declare = channel.exchange_declare(name.into(), kind, options, FieldTable::default());
    bounded!(declare).unwrap_or_else(|error| panic!("declare exchange {name}: {error}"));
}

async fn declare_queue(channel: &Channel, name: &str, durable: bool, arguments: FieldTable) {
    let options = QueueDeclareOptions {
        durable,
        ..Default::default()
    };
    let declare = channel.queue_declare(name.into(), options, arguments);
    bounded!(declare).unwrap_or_else(|error| panic!("declare queue {name}: {error}"));
}

async fn exchange_exists(channel: &Channel, name: &str) -> lapin::Result<()> {
    let options = ExchangeDeclareOptions {
        passive: true,
        ..Default::default()
    };
    bounded!(channel.exchange_declare(
        name.into(),
        ExchangeKind::Direct,
        options,
        FieldTable::default()
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_definitions_survive_a_restart_and_transient_ones_do_not() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let (durable_ex, transient_ex) = (unique("dur-ex"), unique("tmp-ex"));
    let (durable_q, transient_q) = (unique("dur-q"), unique("tmp-q"));
    {
        let (connection, channel) = broker.channel().await;
        declare_exchange(&channel, &durable_ex, ExchangeKind::Topic, true).await;
        declare_exchange(&channel, &transient_ex, ExchangeKind::Topic, false).await;
        declare_queue(&channel, &durable_q, true, FieldTable::default()).await;
        declare_queue(&channel, &transient_q, false, FieldTable::default()).await;
        bind_queue(&channel, &durable_q, &durable_ex, "orders.#").await;
        bounded!(connection.close(200, "OK".into())).unwrap();
    }
    let broker = broker.restart().await;

    let (connection, channel) = broker.channel().await;
    exchange_exists(&channel, &durable_ex)
        .await
        .expect("durable exchange is back");
    assert!(
        queue_exists(&connection, &durable_q).await,
        "durable queue is back"
    );
    assert!(
        !queue_exists(&connection, &transient_q).await,
        "transient queue is gone"
    );
    let channel = bounded!(connection.create_channel()).unwrap();
    expect_amqp_error(
        exchange_exists(&channel, &transient_ex).await,
        reply::NOT_FOUND,
    );

    // The binding came back too: it routes.
    let channel = bounded!(connection.create_channel()).unwrap();
    publish(&channel, &durable_ex, "orders.created", b"after restart").await;
    assert_eq!(get_all(&channel, &durable_q).await, ["after restart"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_queue_keeps_its_arguments_and_type_equivalence() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let queue = unique("dur-args");
    let arguments = table(&[("x-max-length", AMQPValue::LongInt(10))]);
    {
        let (_connection, channel) = broker.channel().await;
        declare_queue(&channel, &queue, true, arguments.clone()).await;
    }
    let broker = broker.restart().await;
    let (connection, channel) = broker.channel().await;
    // The same declaration is still equivalent; a different one is not.
    declare_queue(&channel, &queue, true, arguments).await;
    let other = table(&[("x-max-length", AMQPValue::LongInt(11))]);
    let declare = channel.queue_declare(
        queue.as_str().into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        other,
    );
    let text = expect_amqp_error(bounded!(declare), reply::PRECONDITION_FAILED);
    assert!(text.contains("x-max-length"), "{text}");
    assert!(passive_declare(&connection, &queue).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_to_exchange_bindings_survive_a_restart() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let (source, destination, queue) = (unique("dur-src"), unique("dur-dst"), unique("dur-e2e-q"));
    {
        let (_connection, channel) = broker.channel().await;
        declare_exchange(&channel, &source, ExchangeKind::Fanout, true).await;
        declare_exchange(&channel, &destination, ExchangeKind::Direct, true).await;
        declare_queue(&channel, &queue, true, FieldTable::default()).await;
        bind_queue(&channel, &queue, &destination, "k").await;
        let bind = channel.exchange_bind(
            destination.as_str().into(),
            source.as_str().into(),
            "".into(),
            Default::default(),
            FieldTable::default(),
        );
        bounded!(bind).unwrap();
    }
    let broker = broker.restart().await;
    let (_connection, channel) = broker.channel().await;
    publish(&channel, &source, "k", b"through two exchanges").await;
    assert_eq!(get_all(&channel, &queue).await, ["through two exchanges"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_durable_definitions_stay_deleted_after_a_restart() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let (exchange, queue) = (unique("dur-deleted-ex"), unique("dur-deleted-q"));
    {
        let (_connection, channel) = broker.channel().await;
        declare_exchange(&channel, &exchange, ExchangeKind::Direct, true).await;
        declare_queue(&channel, &queue, true, FieldTable::default()).await;
        bounded!(channel.exchange_delete(exchange.as_str().into(), Default::default())).unwrap();
        bounded!(channel.queue_delete(queue.as_str().into(), Default::default())).unwrap();
    }
    let broker = broker.restart().await;
    let (connection, channel) = broker.channel().await;
    assert!(!queue_exists(&connection, &queue).await);
    expect_amqp_error(exchange_exists(&channel, &exchange).await, reply::NOT_FOUND);
}
