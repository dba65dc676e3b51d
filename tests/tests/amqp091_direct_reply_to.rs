//! Direct reply-to: a requester consumes from the pseudo-queue `amq.rabbitmq.reply-to` (no-ack),
//! publishes with `reply_to = amq.rabbitmq.reply-to`, the broker rewrites reply_to to a routable
//! `amq.rabbitmq.reply-to.<token>`, and a reply published there arrives at the requester.

use std::time::Duration;

use lapin::options::BasicConsumeOptions;
use lapin::types::{FieldTable, ShortString};
use lapin::BasicProperties;
use warren_tests::wire::reply;
use warren_tests::{
    body, bounded, consume, declare_queue, expect_amqp_error, expect_no_delivery, next_delivery,
    publish, publish_with, unique, ChannelWatch, TestBroker,
};

const REPLY_TO: &str = "amq.rabbitmq.reply-to";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_and_reply_through_direct_reply_to() {
    let broker = TestBroker::start().await;
    let (_server_connection, server) = broker.channel().await;
    let requests = unique("rpc-requests");
    declare_queue(&server, &requests).await;
    let mut incoming = consume(&server, &requests, true).await;

    let (_client_connection, client) = broker.channel().await;
    let mut replies = consume(&client, REPLY_TO, true).await;
    let properties = BasicProperties::default()
        .with_reply_to(ShortString::from(REPLY_TO))
        .with_correlation_id(ShortString::from("call-1"));
    publish_with(&client, "", &requests, b"ping", properties).await;

    let request = next_delivery(&mut incoming).await;
    assert_eq!(body(&request), "ping");
    let reply_to = request
        .properties
        .reply_to()
        .clone()
        .expect("reply_to is set")
        .to_string();
    assert!(
        reply_to.starts_with("amq.rabbitmq.reply-to."),
        "rewritten to a routable name: {reply_to}"
    );
    assert_ne!(reply_to, REPLY_TO);
    let answer = BasicProperties::default().with_correlation_id(ShortString::from("call-1"));
    publish_with(&server, "", &reply_to, b"pong", answer).await;

    let reply = next_delivery(&mut replies).await;
    assert_eq!(body(&reply), "pong");
    assert_eq!(
        reply
            .properties
            .correlation_id()
            .as_ref()
            .map(|id| id.as_str()),
        Some("call-1")
    );
    assert_eq!(reply.routing_key.as_str(), reply_to);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_replies_reach_the_same_requester() {
    let broker = TestBroker::start().await;
    let (_server_connection, server) = broker.channel().await;
    let (_client_connection, client) = broker.channel().await;
    let requests = unique("rpc-multi");
    declare_queue(&server, &requests).await;
    let mut incoming = consume(&server, &requests, true).await;
    let mut replies = consume(&client, REPLY_TO, true).await;
    for i in 0..3 {
        let properties = BasicProperties::default().with_reply_to(ShortString::from(REPLY_TO));
        publish_with(
            &client,
            "",
            &requests,
            format!("q{i}").as_bytes(),
            properties,
        )
        .await;
    }
    for _ in 0..3 {
        let request = next_delivery(&mut incoming).await;
        let reply_to = request.properties.reply_to().clone().unwrap().to_string();
        let answer = format!("a-{}", body(&request));
        publish(&server, "", &reply_to, answer.as_bytes()).await;
    }
    let answers: Vec<String> = [
        next_delivery(&mut replies).await,
        next_delivery(&mut replies).await,
        next_delivery(&mut replies).await,
    ]
    .iter()
    .map(body)
    .collect();
    assert_eq!(answers, ["a-q0", "a-q1", "a-q2"]);
}

/// RabbitMQ 3.10.8: 406 "PRECONDITION_FAILED - reply consumer cannot acknowledge".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consuming_reply_to_with_acks_is_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let options = BasicConsumeOptions {
        no_ack: false,
        ..Default::default()
    };
    let result =
        bounded!(channel.basic_consume(REPLY_TO.into(), "".into(), options, FieldTable::default()));
    let text = expect_amqp_error(result, reply::PRECONDITION_FAILED);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - reply consumer cannot acknowledge"
    );
}

/// Publishing with reply_to=amq.rabbitmq.reply-to without consuming from it first.
/// RabbitMQ 3.10.8: 406 "PRECONDITION_FAILED - fast reply consumer does not exist".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_with_reply_to_before_consuming_it_is_406() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let queue = unique("rpc-no-consumer");
    declare_queue(&channel, &queue).await;
    let watch = ChannelWatch::new(&channel).await;
    let properties = BasicProperties::default().with_reply_to(ShortString::from(REPLY_TO));
    let publish = channel.basic_publish(
        "".into(),
        queue.as_str().into(),
        Default::default(),
        b"x",
        properties,
    );
    let _ = bounded!(publish);
    let text = watch.expect_close(reply::PRECONDITION_FAILED).await;
    assert_eq!(
        text,
        "PRECONDITION_FAILED - fast reply consumer does not exist"
    );
}

/// RabbitMQ 3.10.8 answers a declare of the pseudo-queue with a synthetic declare-ok:
/// message_count 0, consumer_count 1 (even on a connection with no reply consumer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_declare_of_the_reply_to_pseudo_queue_succeeds() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    let declared = warren_tests::passive_declare(&connection, REPLY_TO)
        .await
        .expect("declare-ok");
    assert_eq!(
        (declared.message_count(), declared.consumer_count()),
        (0, 1)
    );
}

/// A reply to a token that does not decode is dropped silently: the responder's channel stays
/// open. (RabbitMQ 3.10.8 does this for `amq.rabbitmq.reply-to.not-a-real-token`; for a token
/// shaped like its own, e.g. `amq.rabbitmq.reply-to.g1h2AA5yZXBseUA0NTg2MTQ5.x`, its channel
/// crashes and the connection closes with 541 INTERNAL_ERROR, a bug not worth copying.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_to_an_undecodable_token_is_dropped_silently() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = broker.channel().await;
    let mut watch = ChannelWatch::new(&channel).await;
    publish(&channel, "", "amq.rabbitmq.reply-to.not-a-real-token", b"x").await;
    watch.expect_open(Duration::from_millis(500)).await;
}

/// Replies are only delivered to the channel that consumed from the pseudo-queue, and stop once
/// that channel is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_after_the_requester_channel_closed_are_dropped() {
    let broker = TestBroker::start().await;
    let (_server_connection, server) = broker.channel().await;
    let requests = unique("rpc-closed");
    declare_queue(&server, &requests).await;
    let mut incoming = consume(&server, &requests, true).await;
    let (client_connection, client) = broker.channel().await;
    let _replies = consume(&client, REPLY_TO, true).await;
    let properties = BasicProperties::default().with_reply_to(ShortString::from(REPLY_TO));
    publish_with(&client, "", &requests, b"ping", properties).await;
    let reply_to = next_delivery(&mut incoming)
        .await
        .properties
        .reply_to()
        .clone()
        .unwrap()
        .to_string();
    bounded!(client.close(200, "OK".into())).unwrap();

    let mut watch = ChannelWatch::new(&server).await;
    publish(&server, "", &reply_to, b"too late").await;
    watch.expect_open(Duration::from_millis(500)).await;
    let other = bounded!(client_connection.create_channel()).unwrap();
    let mut fresh = consume(&other, REPLY_TO, true).await;
    expect_no_delivery(&mut fresh, Duration::from_millis(300)).await;
}
