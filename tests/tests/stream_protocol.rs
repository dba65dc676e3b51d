//! The stream protocol on its own port, driven by `rabbitmq-stream-client` and, for bytes no
//! client sends, by a raw socket: the handshake (identity, advertised address, SASL, vhost),
//! Metadata, the refusal of super-stream commands, malformed frames and heartbeats.

mod stream_support;

use std::time::Duration;

use rabbitmq_stream_client::error::ClientError;
use rabbitmq_stream_client::types::ResponseCode;
use rabbitmq_stream_client::Client;
use stream_support::{client, options_as, stream_addr, RawStream};
use warren_proto::stream::{response_code, AdminCommand, Command, ConnectionCommand};
use warren_tests::{bounded, TestBroker};

#[tokio::test]
async fn open_reports_rabbitmq_identity_and_the_listener_as_advertised_address() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let client = client(&broker).await;
    let server = client.server_properties().await;
    assert_eq!(server.get("product").map(String::as_str), Some("RabbitMQ"));
    let version = server.get("version").expect("a version property");
    let major: u32 = version.split('.').next().unwrap().parse().unwrap();
    assert!(
        major >= 4,
        "clients gate features on version >= 3.13: {version}"
    );
    let connection = client.connection_properties().await;
    let addr = stream_addr(&broker);
    assert_eq!(
        connection.get("advertised_host"),
        Some(&addr.ip().to_string())
    );
    assert_eq!(
        connection.get("advertised_port"),
        Some(&addr.port().to_string())
    );
    bounded!(client.close()).unwrap();
}

#[tokio::test]
async fn configured_advertised_address_is_answered_in_open() {
    let broker = TestBroker::start_with(|config| {
        config.stream_advertised_host = Some("stream.example".into());
        config.stream_advertised_port = Some(5999);
    })
    .await;
    if broker.skip_if_external("configures the in-process broker") {
        return;
    }
    let client = client(&broker).await;
    let connection = client.connection_properties().await;
    assert_eq!(connection.get("advertised_host").unwrap(), "stream.example");
    assert_eq!(connection.get("advertised_port").unwrap(), "5999");
}

#[tokio::test]
async fn a_wrong_password_or_an_unknown_vhost_is_refused() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let wrong = bounded!(Client::connect(options_as(&broker, "guest", "nope", "/")));
    assert!(
        matches!(
            wrong,
            Err(ClientError::RequestError(
                ResponseCode::AuthenticationFailure
            ))
        ),
        "{:?}",
        wrong.err()
    );
    let vhost = bounded!(Client::connect(options_as(
        &broker, "guest", "guest", "nowhere"
    )));
    assert!(
        matches!(
            vhost,
            Err(ClientError::RequestError(
                ResponseCode::VirtualHostAccessFailure
            ))
        ),
        "{:?}",
        vhost.err()
    );
}

#[tokio::test]
async fn metadata_answers_a_missing_stream_with_its_code() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let client = client(&broker).await;
    let metadata = bounded!(client.metadata(vec!["missing".into()])).unwrap();
    // The client leaves out a stream without a leader among the brokers.
    assert!(!metadata.contains_key("missing"), "{metadata:?}");
    let mut raw = RawStream::open(stream_addr(&broker), None).await;
    raw.send(&Command::Admin(AdminCommand::MetadataRequest {
        correlation_id: 7,
        streams: vec!["missing".into()],
    }))
    .await;
    let response = raw.next(Duration::from_secs(5)).await;
    let Some(Command::Admin(AdminCommand::MetadataResponse {
        brokers, streams, ..
    })) = response
    else {
        panic!("expected a Metadata response, got {response:?}");
    };
    assert!(
        brokers.is_empty(),
        "no broker leads a missing stream: {brokers:?}"
    );
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0].code, response_code::STREAM_DOES_NOT_EXIST);
    assert_eq!(streams[0].leader, u16::MAX);
}

#[tokio::test]
async fn super_stream_commands_are_refused_not_accepted() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let client = client(&broker).await;
    let partitions = bounded!(client.partitions("orders".into())).unwrap();
    assert!(!partitions.is_ok() && partitions.streams.is_empty());
    let route = bounded!(client.route("key".into(), "orders".into())).unwrap();
    assert!(!route.is_ok() && route.streams.is_empty());
    let created = bounded!(client.create_super_stream(
        "orders",
        vec!["orders-0".into()],
        vec!["0".into()],
        Default::default()
    ))
    .unwrap();
    assert_eq!(created.code(), &ResponseCode::PreconditionFailed);
    // The connection is still usable afterwards.
    bounded!(client.metadata(vec!["orders".into()])).unwrap();
}

#[tokio::test]
async fn an_unknown_command_closes_with_unknown_frame() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let mut raw = RawStream::open(stream_addr(&broker), None).await;
    // Key 0x0077, version 1, a correlation id.
    raw.send_bytes(&[0, 0, 0, 8, 0x00, 0x77, 0, 1, 0, 0, 0, 9])
        .await;
    let close = raw.closed(Duration::from_secs(5)).await;
    assert_eq!(close.map(|c| c.0), Some(response_code::UNKNOWN_FRAME));
}

#[tokio::test]
async fn a_truncated_command_closes_with_unknown_frame() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let mut raw = RawStream::open(stream_addr(&broker), None).await;
    // Subscribe (0x0007) whose body stops inside the stream name.
    raw.send_bytes(&[0, 0, 0, 11, 0x00, 0x07, 0, 1, 0, 0, 0, 1, 3, 0, 10])
        .await;
    let close = raw.closed(Duration::from_secs(5)).await;
    let (code, reason) = close.expect("a Close before the socket closes");
    assert_eq!(code, response_code::UNKNOWN_FRAME);
    assert!(reason.unwrap_or_default().contains("truncated"));
}

#[tokio::test]
async fn a_frame_above_frame_max_closes_with_frame_too_large() {
    let broker = TestBroker::start_with(|config| config.stream_frame_max = 8192).await;
    if broker.skip_if_external("configures the in-process broker") {
        return;
    }
    let mut raw = RawStream::open(stream_addr(&broker), None).await;
    // Only the size prefix: the broker refuses it before the rest arrives.
    raw.send_bytes(&100_000u32.to_be_bytes()).await;
    let close = raw.closed(Duration::from_secs(5)).await;
    assert_eq!(close.map(|c| c.0), Some(response_code::FRAME_TOO_LARGE));
}

#[tokio::test]
async fn garbage_before_the_handshake_closes_the_socket() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let mut raw = RawStream::connect(stream_addr(&broker)).await;
    raw.send_bytes(b"GET / HTTP/1.1\r\n\r\n").await;
    assert_eq!(raw.closed(Duration::from_secs(5)).await, None);
}

#[tokio::test]
async fn heartbeats_go_both_ways_and_a_silent_client_is_dropped() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("reads the in-process broker's stream port") {
        return;
    }
    let mut raw = RawStream::open(stream_addr(&broker), Some(1)).await;
    let first = raw.next(Duration::from_secs(3)).await;
    assert_eq!(
        first,
        Some(Command::Connection(ConnectionCommand::Heartbeat))
    );
    // The client never sends one: gone after two intervals, well within ten seconds.
    let started = std::time::Instant::now();
    let _ = raw.closed(Duration::from_secs(10)).await;
    assert!(started.elapsed() < Duration::from_secs(8));
}

#[tokio::test]
async fn the_listener_can_be_turned_off() {
    let broker = TestBroker::start_with(|config| config.stream_listeners = Some(Vec::new())).await;
    if broker.skip_if_external("configures the in-process broker") {
        return;
    }
    assert_eq!(broker.stream_addr(), None);
}
