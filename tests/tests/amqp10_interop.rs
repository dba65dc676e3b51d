//! One message, two protocols: published over AMQP 1.0 (fe2o3-amqp) and consumed over
//! AMQP 0.9.1 (lapin), and the reverse, with properties, application-properties and
//! annotations mapped as RabbitMQ's conversions page says.
//!
//! Current-thread runtime: see amqp10_basic.rs for fe2o3-amqp's settlement race.

use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, Header, Message, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Value};
use fe2o3_amqp::{Receiver, Sender};
use lapin::options::BasicGetOptions;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::BasicProperties;
use warren_tests::{bounded, declare_queue, publish_with, unique, TestBroker};

#[tokio::test]
async fn amqp10_to_amqp091() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    declare_queue(&channel, &queue).await;
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut sender = bounded!(Sender::attach(&mut session, "s", address.as_str())).unwrap();
    let properties = Properties::builder()
        .message_id(MessageId::String("id-1".into()))
        .correlation_id(MessageId::String("corr-1".into()))
        .content_type("text/plain")
        .reply_to("/queues/replies")
        .build();
    let application = ApplicationProperties::builder()
        .insert("color", SimpleValue::String("red".into()))
        .insert("n", SimpleValue::Int(7))
        .build();
    let message = Message::builder()
        .header(Header {
            durable: false,
            priority: 5.into(),
            ttl: Some(60_000),
            ..Default::default()
        })
        .properties(properties)
        .application_properties(application)
        .data(Binary::from(b"hello 0.9.1".to_vec()))
        .build();
    assert!(bounded!(sender.send(message)).unwrap().is_accepted());
    let got = bounded!(channel.basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true }))
        .unwrap()
        .expect("the message is in the queue");
    assert_eq!(
        got.delivery.data, b"hello 0.9.1",
        "a data section is the 0.9.1 body as is"
    );
    let p = &got.delivery.properties;
    assert_eq!(p.delivery_mode(), &Some(1));
    assert_eq!(p.priority(), &Some(5));
    assert_eq!(p.expiration().as_ref().map(|s| s.as_str()), Some("60000"));
    assert_eq!(p.message_id().as_ref().map(|s| s.as_str()), Some("id-1"));
    assert_eq!(
        p.correlation_id().as_ref().map(|s| s.as_str()),
        Some("corr-1")
    );
    assert_eq!(
        p.content_type().as_ref().map(|s| s.as_str()),
        Some("text/plain")
    );
    assert_eq!(p.reply_to().as_ref().map(|s| s.as_str()), Some("replies"));
    let headers = p
        .headers()
        .as_ref()
        .expect("application-properties become headers");
    let header = |name: &str| headers.inner().get(name).cloned();
    assert_eq!(header("color"), Some(AMQPValue::LongString("red".into())));
    assert_eq!(header("n"), Some(AMQPValue::LongInt(7)));
}

#[tokio::test]
async fn amqp091_to_amqp10() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    declare_queue(&channel, &queue).await;
    let mut headers = FieldTable::default();
    headers.insert(
        ShortString::from("color"),
        AMQPValue::LongString("blue".into()),
    );
    headers.insert(
        ShortString::from("x-custom"),
        AMQPValue::LongString("ann".into()),
    );
    let properties = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_message_id("m-9".into())
        .with_correlation_id("c-9".into())
        .with_delivery_mode(2)
        .with_priority(3)
        .with_expiration("60000".into())
        .with_reply_to("replies".into())
        .with_timestamp(1_700_000_000)
        .with_headers(headers);
    publish_with(&channel, "", &queue, b"{\"from\":\"0.9.1\"}", properties).await;
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut receiver = bounded!(Receiver::attach(&mut session, "r", address.as_str())).unwrap();
    let delivery = bounded!(receiver.recv::<Body<Value>>()).unwrap();
    let message = delivery.message();
    let Body::Data(data) = &message.body else {
        panic!("expected a data body, got {:?}", message.body);
    };
    assert_eq!(
        data.iter().flat_map(|d| d.0.to_vec()).collect::<Vec<u8>>(),
        b"{\"from\":\"0.9.1\"}"
    );
    let header = message.header.as_ref().expect("a header section");
    assert!(header.durable);
    assert_eq!(header.priority.0, 3);
    assert_eq!(header.ttl, Some(60_000));
    let p = message.properties.as_ref().expect("a properties section");
    assert_eq!(p.message_id, Some(MessageId::String("m-9".into())));
    assert_eq!(p.correlation_id, Some(MessageId::String("c-9".into())));
    assert_eq!(
        p.content_type.as_ref().map(|s| s.0.as_str()),
        Some("application/json")
    );
    assert_eq!(p.reply_to.as_deref(), Some("/queues/replies"));
    let created = p.creation_time.as_ref().map(|t| t.milliseconds());
    assert_eq!(created, Some(1_700_000_000_000));
    let application = message
        .application_properties
        .as_ref()
        .expect("application-properties");
    assert_eq!(
        application.0.get("color"),
        Some(&SimpleValue::String("blue".into()))
    );
    let annotations = format!("{:?}", message.message_annotations);
    assert!(
        annotations.contains("x-custom") && annotations.contains("x-routing-key"),
        "{annotations}"
    );
    bounded!(receiver.accept(&delivery)).unwrap();
}

#[tokio::test]
async fn amqp_value_bodies_round_trip_through_queues() {
    let broker = TestBroker::start().await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    declare_queue(&channel, &queue).await;
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut sender = bounded!(Sender::attach(&mut session, "s", address.as_str())).unwrap();
    assert!(bounded!(sender.send("a string value"))
        .unwrap()
        .is_accepted());
    let mut receiver = bounded!(Receiver::attach(&mut session, "r", address.as_str())).unwrap();
    let delivery = bounded!(receiver.recv::<Value>()).unwrap();
    assert_eq!(delivery.body(), &Value::String("a string value".into()));
    bounded!(receiver.accept(&delivery)).unwrap();
}
