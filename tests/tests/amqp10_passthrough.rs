//! AMQP 1.0 messages kept as AMQP 1.0 (RabbitMQ's `mc`): what an AMQP 1.0 publisher sent
//! reaches AMQP 1.0 consumers unchanged, including values AMQP 0.9.1 cannot represent (a uuid
//! message-id, ulong and symbol application-properties), through routing on its
//! application-properties, dead-lettering and a broker restart, and is converted only for an
//! AMQP 0.9.1 consumer, as RabbitMQ's conversions page maps it.
//!
//! Current-thread runtime: see amqp10_basic.rs for fe2o3-amqp's settlement race.

use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, Data, Header, Message, MessageAnnotations, MessageId, Outcome,
    Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Uuid, Value};
use fe2o3_amqp::{Receiver, Sender};
use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};
use warren_tests::{bounded, declare_queue, table, text, unique, TestBroker};

const UUID: [u8; 16] = [
    0x55, 0x0e, 0x84, 0, 0xe2, 0x9b, 0x41, 0xd4, 0xa7, 0x16, 0x44, 0x66, 0x55, 0x44, 0, 1,
];

fn properties() -> Properties {
    Properties::builder()
        .message_id(MessageId::Uuid(Uuid::from(UUID)))
        .correlation_id(MessageId::Ulong(42))
        .content_type("text/plain")
        .subject("a subject 0.9.1 has no field for")
        .build()
}

fn application_properties(color: &str) -> ApplicationProperties {
    ApplicationProperties::builder()
        .insert("color", SimpleValue::String(color.into()))
        .insert("big", SimpleValue::Ulong(u64::MAX))
        .insert("kind", SimpleValue::Symbol(Symbol::from("sym")))
        .insert("n", SimpleValue::Int(7))
        .build()
}

/// A durable message with annotations of the publisher's own and a data body.
fn message(color: &str, body: &[u8]) -> Message<Body<Value>> {
    Message::builder()
        .header(Header {
            durable: true,
            ..Default::default()
        })
        .message_annotations(
            MessageAnnotations::builder()
                .insert("x-opt-publisher", Value::String("p1".into()))
                .build(),
        )
        .properties(properties())
        .application_properties(application_properties(color))
        .body(Body::Data(vec![Data(Binary::from(body.to_vec()))].into()))
        .build()
}

async fn send(
    session: &mut SessionHandle<()>,
    address: &str,
    message: Message<Body<Value>>,
) -> Outcome {
    let mut sender = bounded!(Sender::attach(session, unique("s"), address)).unwrap();
    let outcome = bounded!(sender.send(message)).unwrap();
    bounded!(sender.close()).unwrap();
    outcome
}

async fn receive(session: &mut SessionHandle<()>, address: &str) -> Message<Body<Value>> {
    let mut receiver = bounded!(Receiver::attach(session, unique("r"), address)).unwrap();
    let delivery = bounded!(receiver.recv::<Body<Value>>()).unwrap();
    bounded!(receiver.accept(&delivery)).unwrap();
    bounded!(receiver.close()).unwrap();
    delivery.into_message()
}

fn annotation<'a>(message: &'a Message<Body<Value>>, key: &str) -> Option<&'a Value> {
    message
        .message_annotations
        .as_ref()?
        .0
        .get(&OwnedKey::from(key))
}

/// The bare message arrives as sent; the header and the broker's annotations are per hop.
fn assert_as_sent(got: &Message<Body<Value>>, color: &str, body: &[u8]) {
    assert_eq!(got.properties, Some(properties()));
    assert_eq!(
        got.application_properties,
        Some(application_properties(color))
    );
    let Body::Data(data) = &got.body else {
        panic!("expected a data body, got {:?}", got.body);
    };
    assert_eq!(
        data.iter().flat_map(|d| d.0.to_vec()).collect::<Vec<u8>>(),
        body
    );
    assert!(got.header.as_ref().is_some_and(|h| h.durable));
    assert_eq!(
        annotation(got, "x-opt-publisher"),
        Some(&Value::String("p1".into()))
    );
}

async fn get_091(channel: &Channel, queue: &str) -> lapin::message::BasicGetMessage {
    bounded!(channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }))
        .unwrap()
        .expect("the message is in the queue")
}

/// The AMQP 0.9.1 form of `message(color, body)`.
fn assert_mapped(got: &lapin::message::BasicGetMessage, color: &str, body: &[u8]) -> FieldTable {
    assert_eq!(got.delivery.data, body);
    let p = &got.delivery.properties;
    assert_eq!(p.delivery_mode(), &Some(2));
    assert_eq!(
        p.message_id().as_ref().map(|s| s.as_str()),
        Some("urn:uuid:550e8400-e29b-41d4-a716-446655440001")
    );
    assert_eq!(p.correlation_id().as_ref().map(|s| s.as_str()), Some("42"));
    let headers = p.headers().clone().expect("headers");
    let header = |name: &str| headers.inner().get(name).cloned();
    assert_eq!(header("color"), Some(AMQPValue::LongString(color.into())));
    assert_eq!(header("kind"), Some(AMQPValue::LongString("sym".into())));
    assert_eq!(header("n"), Some(AMQPValue::LongInt(7)));
    assert_eq!(
        header("big"),
        None,
        "a ulong beyond a long has no 0.9.1 form"
    );
    assert_eq!(
        header("x-opt-publisher"),
        Some(AMQPValue::LongString("p1".into()))
    );
    headers
}

#[tokio::test]
async fn amqp10_messages_reach_amqp10_consumers_as_sent_and_amqp091_ones_mapped() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    declare_queue(&channel, &queue).await;
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    for _ in 0..2 {
        assert!(send(&mut session, &address, message("red", b"one"))
            .await
            .is_accepted());
    }
    let got = receive(&mut session, &address).await;
    assert_as_sent(&got, "red", b"one");
    assert_eq!(
        annotation(&got, "x-routing-key"),
        Some(&Value::String(queue.clone()))
    );
    assert_mapped(&get_091(&channel, &queue).await, "red", b"one");

    tracing::info!("the management API shows the AMQP 0.9.1 form");
    assert!(send(&mut session, &address, message("red", b"api"))
        .await
        .is_accepted());
    let url = format!("{}/api/queues/%2F/{queue}/get", broker.http_url());
    let get = serde_json::json!({"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"});
    let request = reqwest::Client::new()
        .post(url)
        .basic_auth("guest", Some("guest"))
        .json(&get);
    let response = bounded!(request.send()).unwrap();
    let got: serde_json::Value = bounded!(response.json()).unwrap();
    assert_eq!(got[0]["payload"], "api", "{got}");
    assert_eq!(got[0]["payload_bytes"], 3);
    assert_eq!(got[0]["properties"]["delivery_mode"], 2);
    assert_eq!(got[0]["properties"]["headers"]["color"], "red");
}

#[tokio::test]
async fn headers_exchanges_route_amqp10_messages_on_application_properties() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let (exchange, queue) = (unique("hx"), unique("q"));
    let declare = channel.exchange_declare(
        exchange.as_str().into(),
        ExchangeKind::Headers,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    );
    bounded!(declare).unwrap();
    declare_queue(&channel, &queue).await;
    let arguments = table(&[("x-match", text("all")), ("color", text("red"))]);
    let bind = channel.queue_bind(
        queue.as_str().into(),
        exchange.as_str().into(),
        "".into(),
        QueueBindOptions::default(),
        arguments,
    );
    bounded!(bind).unwrap();
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/exchanges/{exchange}");
    let blue = send(&mut session, &address, message("blue", b"blue")).await;
    assert!(matches!(blue, Outcome::Released(_)), "{blue:?}");
    assert!(send(&mut session, &address, message("red", b"red"))
        .await
        .is_accepted());
    let got = receive(&mut session, &format!("/queues/{queue}")).await;
    assert_as_sent(&got, "red", b"red");
}

#[tokio::test]
async fn rejected_amqp10_messages_are_dead_lettered_as_sent() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let (queue, dlq) = (unique("q"), unique("dlq"));
    declare_queue(&channel, &dlq).await;
    let arguments = table(&[
        ("x-dead-letter-exchange", text("")),
        ("x-dead-letter-routing-key", text(&dlq)),
    ]);
    let declare = channel.queue_declare(
        queue.as_str().into(),
        QueueDeclareOptions::default(),
        arguments,
    );
    bounded!(declare).unwrap();
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut receiver = bounded!(Receiver::attach(&mut session, "r", address.as_str())).unwrap();
    for _ in 0..2 {
        assert!(send(&mut session, &address, message("red", b"dead"))
            .await
            .is_accepted());
        let delivery = bounded!(receiver.recv::<Body<Value>>()).unwrap();
        bounded!(receiver.reject(&delivery, None)).unwrap();
    }
    bounded!(receiver.close()).unwrap();
    let got = receive(&mut session, &format!("/queues/{dlq}")).await;
    assert_as_sent(&got, "red", b"dead");
    let reason = annotation(&got, "x-first-death-reason");
    assert_eq!(reason, Some(&Value::String("rejected".into())));
    let queue_annotation = annotation(&got, "x-last-death-queue");
    assert_eq!(queue_annotation, Some(&Value::String(queue.clone())));
    let headers = assert_mapped(&get_091(&channel, &dlq).await, "red", b"dead");
    let Some(AMQPValue::FieldArray(x_death)) = headers.inner().get("x-death") else {
        panic!("x-death: {headers:?}");
    };
    assert_eq!(x_death.as_slice().len(), 1);
}

#[tokio::test]
async fn durable_amqp10_messages_survive_a_restart_as_sent() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restart() needs an in-process broker") {
        return;
    }
    let queue = unique("q");
    {
        let (_c091, channel) = broker.channel().await;
        let options = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        let declare = channel.queue_declare(queue.as_str().into(), options, FieldTable::default());
        bounded!(declare).unwrap();
        let (connection, mut session) = broker.amqp10().await;
        let address = format!("/queues/{queue}");
        assert!(send(&mut session, &address, message("red", b"kept"))
            .await
            .is_accepted());
        drop(session);
        drop(connection);
    }
    let broker = broker.restart().await;
    let (_connection, mut session) = broker.amqp10().await;
    let got = receive(&mut session, &format!("/queues/{queue}")).await;
    assert_as_sent(&got, "red", b"kept");
}
