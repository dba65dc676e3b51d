//! The `/management` node (RabbitMQ 4's HTTP-over-AMQP API): declare, inspect, purge and delete
//! queues, declare and delete exchanges, bind and unbind, as RabbitMQ's AMQP 1.0 clients do.
//!
//! Current-thread runtime: see amqp10_basic.rs for fe2o3-amqp's settlement race.

use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{Message, MessageId, Properties};
use fe2o3_amqp::types::primitives::{OrderedMap, Value};
use fe2o3_amqp::{Receiver, Sender};
use warren_tests::{bounded, get_all, publish, queue_exists, unique, TestBroker};

struct Management {
    requests: Sender,
    responses: Receiver,
    next_id: u64,
}

impl Management {
    async fn attach(session: &mut SessionHandle<()>) -> Management {
        let requests = bounded!(Sender::builder()
            .name("management-link-pair")
            .target("/management")
            .sender_settle_mode(SenderSettleMode::Settled)
            .attach(session))
        .unwrap();
        // RabbitMQ's clients name both links "management-link-pair"; fe2o3-amqp refuses two
        // links of one name in a session, and Warren pairs them by session, not by name.
        let responses = bounded!(Receiver::builder()
            .name("management-link-pair-responses")
            .source("/management")
            .sender_settle_mode(SenderSettleMode::Settled)
            .attach(session))
        .unwrap();
        Management {
            requests,
            responses,
            next_id: 0,
        }
    }

    /// Sends one request; returns the status code and the body.
    async fn request(&mut self, method: &str, path: &str, body: Value) -> (String, Value) {
        self.next_id += 1;
        let id = MessageId::String(self.next_id.to_string());
        let properties = Properties::builder()
            .message_id(id.clone())
            .to(path.to_string())
            .subject(method.to_string())
            .reply_to("$me".to_string())
            .build();
        let message = Message::builder()
            .properties(properties)
            .value(body)
            .build();
        bounded!(self.requests.send(message)).unwrap();
        let delivery = bounded!(self.responses.recv::<Value>()).unwrap();
        let properties = delivery
            .message()
            .properties
            .clone()
            .expect("response properties");
        assert_eq!(properties.correlation_id, Some(id));
        let status = properties.subject.expect("a status code");
        (status, delivery.body().clone())
    }
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    let mut map = OrderedMap::new();
    for (key, value) in pairs {
        map.insert(Value::String(key.to_string()), value);
    }
    Value::Map(map)
}

#[tokio::test]
async fn declare_bind_unbind_purge_and_delete() {
    let broker = TestBroker::start().await;
    let (_connection, mut session) = broker.amqp10().await;
    let mut management = Management::attach(&mut session).await;
    let queue = unique("mq");
    let body = map(vec![
        ("durable", Value::Bool(true)),
        ("exclusive", Value::Bool(false)),
    ]);
    let (status, info) = management
        .request("PUT", &format!("/queues/{queue}"), body)
        .await;
    assert_eq!(status, "200", "{info:?}");
    assert!(format!("{info:?}").contains(&queue));
    let c091 = broker.connect().await;
    assert!(queue_exists(&c091, &queue).await);

    let exchange = unique("mx");
    let body = map(vec![("type", Value::String("fanout".into()))]);
    let (status, _) = management
        .request("PUT", &format!("/exchanges/{exchange}"), body)
        .await;
    assert_eq!(status, "204");
    let binding = map(vec![
        ("source", Value::String(exchange.clone())),
        ("destination_queue", Value::String(queue.clone())),
        ("binding_key", Value::String(String::new())),
        ("arguments", Value::Map(OrderedMap::new())),
    ]);
    let (status, _) = management.request("POST", "/bindings", binding).await;
    assert_eq!(status, "204");
    let channel = c091.create_channel().await.unwrap();
    publish(&channel, &exchange, "", b"via binding").await;
    assert_eq!(get_all(&channel, &queue).await, ["via binding"]);

    let path = format!("/bindings/src={exchange};dstq={queue};key=;args=");
    let (status, _) = management.request("DELETE", &path, Value::Null).await;
    assert_eq!(status, "204");
    publish(&channel, &exchange, "", b"unbound").await;
    publish(&channel, "", &queue, b"direct").await;
    let (status, purged) = management
        .request("DELETE", &format!("/queues/{queue}/messages"), Value::Null)
        .await;
    assert_eq!(status, "200");
    assert!(
        format!("{purged:?}").contains("message_count"),
        "{purged:?}"
    );
    let (status, _) = management
        .request("DELETE", &format!("/queues/{queue}"), Value::Null)
        .await;
    assert_eq!(status, "200");
    assert!(!queue_exists(&c091, &queue).await);
    let (status, _) = management
        .request("GET", &format!("/queues/{queue}"), Value::Null)
        .await;
    assert_eq!(status, "404");
    let (status, _) = management
        .request("DELETE", &format!("/exchanges/{exchange}"), Value::Null)
        .await;
    assert_eq!(status, "204");
}

#[tokio::test]
async fn an_inequivalent_redeclare_is_a_conflict() {
    let broker = TestBroker::start().await;
    let (_connection, mut session) = broker.amqp10().await;
    let mut management = Management::attach(&mut session).await;
    let queue = unique("mq");
    let durable = map(vec![("durable", Value::Bool(true))]);
    let (status, _) = management
        .request("PUT", &format!("/queues/{queue}"), durable)
        .await;
    assert_eq!(status, "200");
    let transient = map(vec![("durable", Value::Bool(false))]);
    let (status, text) = management
        .request("PUT", &format!("/queues/{queue}"), transient)
        .await;
    assert_eq!(status, "409", "{text:?}");
}

#[tokio::test]
async fn queue_types_warren_lacks_are_refused_and_classic_is_reported() {
    let broker = TestBroker::start().await;
    let (_connection, mut session) = broker.amqp10().await;
    let mut management = Management::attach(&mut session).await;
    for kind in ["quorum"] {
        let queue = unique("mq-typed");
        let arguments = map(vec![("x-queue-type", Value::String(kind.into()))]);
        let body = map(vec![
            ("durable", Value::Bool(true)),
            ("arguments", arguments),
        ]);
        let (status, text) = management
            .request("PUT", &format!("/queues/{queue}"), body)
            .await;
        assert_eq!(status, "409", "{text:?}");
        let text = format!("{text:?}");
        assert!(
            text.contains(&format!(
                "queue type '{kind}' is not supported by Warren yet"
            )),
            "{text}"
        );
        let (status, _) = management
            .request("GET", &format!("/queues/{queue}"), Value::Null)
            .await;
        assert_eq!(status, "404", "nothing was created for {kind}");
    }
    let queue = unique("mq-classic");
    let arguments = map(vec![("x-queue-type", Value::String("classic".into()))]);
    let body = map(vec![
        ("durable", Value::Bool(true)),
        ("arguments", arguments),
    ]);
    let (status, info) = management
        .request("PUT", &format!("/queues/{queue}"), body)
        .await;
    assert_eq!(status, "200", "{info:?}");
    let Value::Map(info) = info else {
        panic!("queue info is a map: {info:?}")
    };
    let get = |key: &str| info.get(&Value::String(key.into())).cloned();
    assert_eq!(get("type"), Some(Value::String("classic".into())));
    let node = broker.identity().expect("in-process").node_name.clone();
    assert_eq!(get("leader"), Some(Value::String(node)));
    // A stream is declared through the management node too, and reported as one.
    let stream = unique("mq-stream");
    let arguments = map(vec![("x-queue-type", Value::String("stream".into()))]);
    let body = map(vec![
        ("durable", Value::Bool(true)),
        ("arguments", arguments),
    ]);
    let (status, info) = management
        .request("PUT", &format!("/queues/{stream}"), body)
        .await;
    assert_eq!(status, "200", "{info:?}");
    let Value::Map(info) = info else {
        panic!("queue info is a map: {info:?}")
    };
    let kind = info.get(&Value::String("type".into())).cloned();
    assert_eq!(kind, Some(Value::String("stream".into())));
}
