//! Exchanges: declare and redeclare, passive checks, equivalence errors, internal and auto-delete
//! exchanges, exchange-to-exchange bindings, alternate exchanges, the `amq.*` and default
//! exchanges.

use lapin::options::{
    ExchangeBindOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, ExchangeUnbindOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, ExchangeKind};
use warren_tests::wire::reply;
use warren_tests::{
    bind_queue, bounded, declare_queue, expect_amqp_error, get_all, publish, table, text, unique,
    ChannelWatch, TestBroker,
};

async fn declare(
    channel: &Channel,
    name: &str,
    kind: ExchangeKind,
    options: ExchangeDeclareOptions,
) -> lapin::Result<()> {
    bounded!(channel.exchange_declare(name.into(), kind, options, FieldTable::default()))
}

async fn declare_ok(channel: &Channel, name: &str, kind: ExchangeKind) {
    declare(channel, name, kind, ExchangeDeclareOptions::default())
        .await
        .unwrap_or_else(|error| panic!("declare exchange {name}: {error}"));
}

async fn passive(channel: &Channel, name: &str) -> lapin::Result<()> {
    let options = ExchangeDeclareOptions {
        passive: true,
        ..Default::default()
    };
    declare(channel, name, ExchangeKind::Direct, options).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exchange_type_declares_redeclares_and_deletes() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let kinds = [
        ExchangeKind::Direct,
        ExchangeKind::Fanout,
        ExchangeKind::Topic,
        ExchangeKind::Headers,
    ];
    for kind in kinds {
        let name = unique(&format!("ex-{kind:?}"));
        declare_ok(&channel, &name, kind.clone()).await;
        // An identical redeclare is a no-op, and a passive declare finds it.
        declare_ok(&channel, &name, kind.clone()).await;
        passive(&channel, &name)
            .await
            .expect("passive declare of an existing exchange");
        bounded!(channel.exchange_delete(name.as_str().into(), ExchangeDeleteOptions::default()))
            .expect("delete");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_declare_of_missing_exchange_is_404_and_closes_the_channel() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let name = unique("ex-missing");
    let text = expect_amqp_error(passive(&channel, &name).await, reply::NOT_FOUND);
    assert_eq!(
        text,
        format!("NOT_FOUND - no exchange '{name}' in vhost '/'")
    );
    assert!(
        !channel.status().connected(),
        "the channel is closed after a 404"
    );
    // The connection survives a channel error.
    let other = bounded!(connection.create_channel()).expect("connection still usable");
    declare_queue(&other, &unique("ex-after-404")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclare_with_another_type_is_406_naming_the_exchange() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = unique("ex-type");
    declare_ok(&channel, &name, ExchangeKind::Direct).await;
    let result = declare(&channel, &name, ExchangeKind::Fanout, Default::default()).await;
    let text = expect_amqp_error(result, reply::PRECONDITION_FAILED);
    assert_eq!(
        text,
        format!(
            "PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{name}' in vhost '/': \
             received 'fanout' but current is 'direct'"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclare_with_another_durability_is_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = unique("ex-durable");
    declare_ok(&channel, &name, ExchangeKind::Topic).await;
    let options = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let text = expect_amqp_error(
        declare(&channel, &name, ExchangeKind::Topic, options).await,
        reply::PRECONDITION_FAILED,
    );
    assert!(text.contains("inequivalent arg 'durable'"), "{text}");
    assert!(text.contains(&format!("exchange '{name}'")), "{text}");
    // Clean up (the channel is closed; use another one).
    let (_c2, channel) = broker.channel().await;
    let _ = bounded!(channel.exchange_delete(name.as_str().into(), Default::default()));
}

/// An unknown exchange type is a channel error in RabbitMQ 4 (`rabbit_exchange:check_type`):
/// 406 "PRECONDITION_FAILED - unknown exchange type 'x-no-such-type'"; the connection stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_exchange_type_is_406_precondition_failed() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let name = unique("ex-kind");
    let kind = ExchangeKind::Custom("x-no-such-type".into());
    let text = expect_amqp_error(
        declare(&channel, &name, kind, Default::default()).await,
        reply::PRECONDITION_FAILED,
    );
    assert_eq!(
        text,
        "PRECONDITION_FAILED - unknown exchange type 'x-no-such-type'"
    );
    assert!(connection.status().connected(), "only the channel closes");
    let channel = bounded!(connection.create_channel()).expect("a new channel");
    declare(&channel, &name, ExchangeKind::Direct, Default::default())
        .await
        .expect("the connection still serves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_exchange_refuses_publishes_with_403() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = unique("ex-internal");
    let options = ExchangeDeclareOptions {
        internal: true,
        ..Default::default()
    };
    declare(&channel, &name, ExchangeKind::Fanout, options)
        .await
        .expect("declare internal");
    let watch = ChannelWatch::new(&channel).await;
    let publish = channel.basic_publish(
        name.as_str().into(),
        "".into(),
        Default::default(),
        b"x",
        Default::default(),
    );
    let _ = bounded!(publish);
    let text = watch.expect_close(reply::ACCESS_REFUSED).await;
    assert_eq!(
        text,
        format!("ACCESS_REFUSED - cannot publish to internal exchange '{name}' in vhost '/'")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_exchange_still_routes_from_a_bound_exchange() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let front = unique("ex-front");
    let internal = unique("ex-internal");
    let queue = unique("q-internal");
    declare_ok(&channel, &front, ExchangeKind::Fanout).await;
    let options = ExchangeDeclareOptions {
        internal: true,
        ..Default::default()
    };
    declare(&channel, &internal, ExchangeKind::Fanout, options)
        .await
        .unwrap();
    let bind = channel.exchange_bind(
        internal.as_str().into(),
        front.as_str().into(),
        "".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    );
    bounded!(bind).expect("exchange.bind");
    declare_queue(&channel, &queue).await;
    bind_queue(&channel, &queue, &internal, "").await;
    publish(&channel, &front, "any", b"via-internal").await;
    assert_eq!(get_all(&channel, &queue).await, vec!["via-internal"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_if_unused_with_a_binding_is_406_and_without_succeeds() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = unique("ex-inuse");
    let queue = unique("q-inuse");
    declare_ok(&channel, &name, ExchangeKind::Direct).await;
    declare_queue(&channel, &queue).await;
    bind_queue(&channel, &queue, &name, "k").await;
    let options = ExchangeDeleteOptions {
        if_unused: true,
        ..Default::default()
    };
    let text = expect_amqp_error(
        bounded!(channel.exchange_delete(name.as_str().into(), options)),
        reply::PRECONDITION_FAILED,
    );
    assert_eq!(
        text,
        format!("PRECONDITION_FAILED - exchange '{name}' in vhost '/' in use")
    );

    let (_c2, channel) = broker.channel().await;
    let unbind = channel.queue_unbind(
        queue.as_str().into(),
        name.as_str().into(),
        "k".into(),
        FieldTable::default(),
    );
    bounded!(unbind).expect("unbind");
    bounded!(channel.exchange_delete(name.as_str().into(), options)).expect("unused now");
    let text = expect_amqp_error(passive(&channel, &name).await, reply::NOT_FOUND);
    assert!(text.contains(&name), "{text}");
}

/// RabbitMQ 3.10.8 answers exchange.delete of a missing exchange with delete-ok (idempotent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_of_a_missing_exchange_succeeds() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = unique("ex-never");
    bounded!(channel.exchange_delete(name.as_str().into(), Default::default())).expect("delete-ok");
    declare_queue(&channel, &unique("q-after-delete")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_to_exchange_binding_routes_until_unbound() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let source = unique("ex-src");
    let destination = unique("ex-dst");
    let queue = unique("q-e2e");
    declare_ok(&channel, &source, ExchangeKind::Topic).await;
    declare_ok(&channel, &destination, ExchangeKind::Direct).await;
    declare_queue(&channel, &queue).await;
    bind_queue(&channel, &queue, &destination, "orders.created").await;
    let bind = channel.exchange_bind(
        destination.as_str().into(),
        source.as_str().into(),
        "orders.*".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    );
    bounded!(bind).expect("exchange.bind");

    publish(&channel, &source, "orders.created", b"one").await;
    publish(
        &channel,
        &source,
        "orders.deleted",
        b"filtered by the queue binding",
    )
    .await;
    publish(
        &channel,
        &source,
        "users.created",
        b"filtered by the e2e binding",
    )
    .await;
    assert_eq!(get_all(&channel, &queue).await, vec!["one"]);

    let unbind = channel.exchange_unbind(
        destination.as_str().into(),
        source.as_str().into(),
        "orders.*".into(),
        ExchangeUnbindOptions::default(),
        FieldTable::default(),
    );
    bounded!(unbind).expect("exchange.unbind");
    publish(&channel, &source, "orders.created", b"after unbind").await;
    assert!(get_all(&channel, &queue).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_bind_with_a_missing_side_is_404() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let existing = unique("ex-exists");
    let missing = unique("ex-missing");
    declare_ok(&channel, &existing, ExchangeKind::Fanout).await;
    let bind = channel.exchange_bind(
        existing.as_str().into(),
        missing.as_str().into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    );
    let text = expect_amqp_error(bounded!(bind), reply::NOT_FOUND);
    assert!(text.contains(&missing), "{text}");

    let (_c2, channel) = broker.channel().await;
    let bind = channel.exchange_bind(
        missing.as_str().into(),
        existing.as_str().into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    );
    let text = expect_amqp_error(bounded!(bind), reply::NOT_FOUND);
    assert!(text.contains(&missing), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternate_exchange_receives_unroutable_messages() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let main = unique("ex-main");
    let alternate = unique("ex-alt");
    let routed = unique("q-routed");
    let unrouted = unique("q-unrouted");
    declare_ok(&channel, &alternate, ExchangeKind::Fanout).await;
    let arguments = table(&[("alternate-exchange", text(&alternate))]);
    let declare_main = channel.exchange_declare(
        main.as_str().into(),
        ExchangeKind::Direct,
        Default::default(),
        arguments,
    );
    bounded!(declare_main).expect("declare with alternate-exchange");
    declare_queue(&channel, &routed).await;
    declare_queue(&channel, &unrouted).await;
    bind_queue(&channel, &routed, &main, "known").await;
    bind_queue(&channel, &unrouted, &alternate, "").await;

    publish(&channel, &main, "known", b"routed").await;
    publish(&channel, &main, "unknown", b"to the alternate").await;
    assert_eq!(get_all(&channel, &routed).await, vec!["routed"]);
    assert_eq!(get_all(&channel, &unrouted).await, vec!["to the alternate"]);
}

/// As RabbitMQ (`rabbit_exchange:route`): the alternate exchange is used when the exchange's
/// own bindings match nothing, not when the exchanges they lead to route nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternate_exchange_is_skipped_when_a_binding_matched_an_exchange() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let (main, alternate, inner) = (unique("ex-main"), unique("ex-alt"), unique("ex-inner"));
    let unrouted = unique("q-unrouted");
    declare_ok(&channel, &alternate, ExchangeKind::Fanout).await;
    declare_ok(&channel, &inner, ExchangeKind::Fanout).await;
    let arguments = table(&[("alternate-exchange", text(&alternate))]);
    let declare_main = channel.exchange_declare(
        main.as_str().into(),
        ExchangeKind::Direct,
        Default::default(),
        arguments,
    );
    bounded!(declare_main).expect("declare with alternate-exchange");
    declare_queue(&channel, &unrouted).await;
    bind_queue(&channel, &unrouted, &alternate, "").await;
    let bind = channel.exchange_bind(
        inner.as_str().into(),
        main.as_str().into(),
        "to-inner".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    );
    bounded!(bind).expect("bind inner to main");

    publish(&channel, &main, "to-inner", b"matched, then dropped").await;
    publish(&channel, &main, "unknown", b"to the alternate").await;
    assert_eq!(get_all(&channel, &unrouted).await, vec!["to the alternate"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_delete_exchange_goes_away_after_its_last_binding() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = unique("ex-autodelete");
    let queue = unique("q-autodelete");
    let options = ExchangeDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    declare(&channel, &name, ExchangeKind::Direct, options)
        .await
        .unwrap();
    declare_queue(&channel, &queue).await;
    bind_queue(&channel, &queue, &name, "a").await;
    bind_queue(&channel, &queue, &name, "b").await;
    let unbind = |key: &'static str| {
        channel.queue_unbind(
            queue.as_str().into(),
            name.as_str().into(),
            key.into(),
            FieldTable::default(),
        )
    };
    bounded!(unbind("a")).unwrap();
    passive(&channel, &name)
        .await
        .expect("one binding left: the exchange stays");
    bounded!(unbind("b")).unwrap();
    expect_amqp_error(passive(&channel, &name).await, reply::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predeclared_amq_exchanges_exist_with_their_types() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let predeclared = [
        ("amq.direct", ExchangeKind::Direct),
        ("amq.fanout", ExchangeKind::Fanout),
        ("amq.topic", ExchangeKind::Topic),
        ("amq.headers", ExchangeKind::Headers),
        ("amq.match", ExchangeKind::Headers),
    ];
    for (name, kind) in predeclared {
        passive(&channel, name)
            .await
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        // Redeclaring with the same type and flags (durable) is an equivalent declare: ok.
        let options = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        declare(&channel, name, kind, options)
            .await
            .unwrap_or_else(|error| panic!("{name}: {error}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declaring_a_new_amq_prefixed_exchange_is_403() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let name = format!("amq.{}", unique("custom"));
    let text = expect_amqp_error(
        declare(&channel, &name, ExchangeKind::Direct, Default::default()).await,
        reply::ACCESS_REFUSED,
    );
    assert_eq!(
        text,
        format!("ACCESS_REFUSED - exchange name '{name}' contains reserved prefix 'amq.*'")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_amq_exchange_is_403() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let text = expect_amqp_error(
        bounded!(channel.exchange_delete("amq.direct".into(), Default::default())),
        reply::ACCESS_REFUSED,
    );
    assert!(text.contains("amq.direct"), "{text}");
    let (_c2, channel) = broker.channel().await;
    passive(&channel, "amq.direct")
        .await
        .expect("amq.direct still exists");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_exchange_routes_by_queue_name() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("q-default");
    declare_queue(&channel, &queue).await;
    publish(&channel, "", &queue, b"direct to queue").await;
    publish(&channel, "", &unique("q-nobody"), b"dropped").await;
    assert_eq!(get_all(&channel, &queue).await, vec!["direct to queue"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_exchange_cannot_be_bound_declared_or_deleted() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("q-default-bind");
    declare_queue(&channel, &queue).await;
    let bind = channel.queue_bind(
        queue.as_str().into(),
        "".into(),
        "other".into(),
        Default::default(),
        FieldTable::default(),
    );
    let text = expect_amqp_error(bounded!(bind), reply::ACCESS_REFUSED);
    assert!(text.contains("default exchange"), "{text}");

    let (_c2, channel) = broker.channel().await;
    let text = expect_amqp_error(
        declare(&channel, "", ExchangeKind::Direct, Default::default()).await,
        reply::ACCESS_REFUSED,
    );
    assert!(text.contains("default exchange"), "{text}");

    let (_c3, channel) = broker.channel().await;
    let text = expect_amqp_error(
        bounded!(channel.exchange_delete("".into(), Default::default())),
        reply::ACCESS_REFUSED,
    );
    assert!(text.contains("default exchange"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_to_a_missing_exchange_closes_the_channel_with_404() {
    let broker = TestBroker::start().await;
    let (connection, channel) = broker.channel().await;
    let name = unique("ex-nowhere");
    let watch = ChannelWatch::new(&channel).await;
    let publish = channel.basic_publish(
        name.as_str().into(),
        "k".into(),
        Default::default(),
        b"x",
        Default::default(),
    );
    let _ = bounded!(publish);
    let text = watch.expect_close(reply::NOT_FOUND).await;
    assert_eq!(
        text,
        format!("NOT_FOUND - no exchange '{name}' in vhost '/'")
    );
    assert!(
        connection.status().connected(),
        "a channel error leaves the connection open"
    );
}
