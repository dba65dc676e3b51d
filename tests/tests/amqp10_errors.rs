//! AMQP 1.0 errors and durability: a bad password fails SASL, a malformed frame closes only its
//! own connection with amqp:decode-error, a client without SASL is refused, and a durable
//! message to a durable queue survives a restart.
//!
//! Current-thread runtime: see amqp10_basic.rs for fe2o3-amqp's settlement race.

use std::time::Duration;

use fe2o3_amqp::types::messaging::{Header, Message};
use fe2o3_amqp::{Connection, Sender};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_tests::amqp10_raw::{frame, handshake_bytes, handshake_bytes_with, read_until};
use warren_tests::{bounded, get_all, unique, TestBroker};

#[tokio::test]
async fn a_bad_password_fails_sasl() {
    let broker = TestBroker::start().await;
    let url = format!("amqp://guest:wrong@{}", broker.addr());
    let result = bounded!(Connection::open("bad-password", url.as_str()));
    let Err(error) = result else {
        panic!("the connection is refused");
    };
    assert!(format!("{error:?}").contains("Auth"), "{error:?}");
    // The broker keeps serving.
    let (_connection, _session) = broker.amqp10().await;
}

#[tokio::test]
async fn a_malformed_frame_closes_only_its_connection_with_decode_error() {
    let broker = TestBroker::start().await;
    let (mut good_connection, mut good_session) = broker.amqp10().await;
    let mut socket = bounded!(TcpStream::connect(broker.addr())).unwrap();
    let mut bytes = handshake_bytes();
    // A begin whose fields list claims more elements than its bytes hold.
    bytes.extend(frame(0, &[0x00, 0x53, 0x11, 0xc0, 0x02, 0x09, 0x40]));
    socket.write_all(&bytes).await.unwrap();
    let seen = read_until(&mut socket, b"amqp:decode-error", Duration::from_secs(5)).await;
    assert!(
        seen.windows(17).any(|w| w == b"amqp:decode-error"),
        "no close with amqp:decode-error in {seen:?}"
    );
    // Unknown format code: decode-error too, on another connection.
    let mut socket = bounded!(TcpStream::connect(broker.addr())).unwrap();
    let mut bytes = handshake_bytes();
    bytes.extend(frame(0, &[0x00, 0x53, 0x11, 0xc0, 0x02, 0x01, 0x01]));
    socket.write_all(&bytes).await.unwrap();
    let seen = read_until(&mut socket, b"amqp:decode-error", Duration::from_secs(5)).await;
    assert!(seen.windows(17).any(|w| w == b"amqp:decode-error"));
    // The other connection is unaffected.
    let mut sender = bounded!(Sender::attach(
        &mut good_session,
        "s",
        "/exchanges/amq.fanout"
    ))
    .unwrap();
    assert!(bounded!(sender.send("still here")).unwrap().is_released());
    bounded!(sender.close()).unwrap();
    bounded!(good_connection.close()).unwrap();
}

/// The open's properties carry the broker's one identity: RabbitMQ's product and version (the
/// RabbitMQ AMQP 1.0 clients refuse anything else), its cluster name, and Warren's own name.
#[tokio::test]
async fn the_open_names_rabbitmq_and_warren() {
    let broker = TestBroker::start().await;
    let mut socket = bounded!(TcpStream::connect(broker.addr())).unwrap();
    socket.write_all(&handshake_bytes()).await.unwrap();
    let identity = broker.identity().expect("an in-process broker");
    let version = identity.version().to_string();
    let seen = read_until(&mut socket, version.as_bytes(), Duration::from_secs(5)).await;
    let contains = |needle: &[u8]| seen.windows(needle.len()).any(|w| w == needle);
    // A symbol key then a string value: sym8 (0xa3) and str8 (0xa1) with their lengths.
    let pair = |key: &str, value: &str| {
        let mut bytes = vec![0xa3, key.len() as u8];
        bytes.extend_from_slice(key.as_bytes());
        bytes.extend_from_slice(&[0xa1, value.len() as u8]);
        bytes.extend_from_slice(value.as_bytes());
        bytes
    };
    assert!(contains(&pair("product", "RabbitMQ")), "{seen:?}");
    assert!(version.starts_with("4."), "{version}");
    assert!(contains(&pair("version", &version)), "{seen:?}");
    assert!(contains(&pair("warren-product", "Warren")), "{seen:?}");
    assert!(
        contains(&pair("cluster_name", &identity.cluster_name())),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_client_without_sasl_is_told_to_use_it() {
    let broker = TestBroker::start().await;
    let mut socket = bounded!(TcpStream::connect(broker.addr())).unwrap();
    socket.write_all(b"AMQP\x00\x01\x00\x00").await.unwrap();
    let seen = read_until(&mut socket, b"AMQP\x03\x01\x00\x00", Duration::from_secs(5)).await;
    assert_eq!(seen, b"AMQP\x03\x01\x00\x00");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut rest)).await;
    assert!(matches!(closed, Ok(Ok(0))), "the socket closes");
}

#[tokio::test]
async fn a_frame_above_max_frame_size_is_refused() {
    let broker = TestBroker::start_with(|c| c.frame_max = 4096).await;
    let mut socket = bounded!(TcpStream::connect(broker.addr())).unwrap();
    let mut bytes = handshake_bytes();
    bytes.extend_from_slice(&[0, 1, 0, 0, 2, 0, 0, 0]); // declares 65536 bytes
    socket.write_all(&bytes).await.unwrap();
    let seen = read_until(
        &mut socket,
        b"amqp:frame-size-too-small",
        Duration::from_secs(5),
    )
    .await;
    assert!(
        seen.windows(25).any(|w| w == b"amqp:frame-size-too-small"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn durable_messages_survive_a_restart() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restarts the broker") {
        return;
    }
    let queue = unique("durable");
    {
        let (_c091, channel) = broker.channel().await;
        let options = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        bounded!(channel.queue_declare(queue.as_str().into(), options, FieldTable::default()))
            .unwrap();
        let (mut connection, mut session) = broker.amqp10().await;
        let address = format!("/queues/{queue}");
        let mut sender = bounded!(Sender::attach(&mut session, "s", address.as_str())).unwrap();
        for i in 0..20 {
            let message = Message::builder()
                .header(Header {
                    durable: true,
                    ..Default::default()
                })
                .value(format!("d{i}"))
                .build();
            // Accepted only once the message store has it on disk.
            assert!(bounded!(sender.send(message)).unwrap().is_accepted());
        }
        bounded!(sender.close()).unwrap();
        bounded!(connection.close()).unwrap();
    }
    let broker = broker.restart().await;
    let (_c091, channel) = broker.channel().await;
    let bodies = get_all(&channel, &queue).await;
    assert_eq!(bodies.len(), 20, "every accepted durable message survives");
}

#[tokio::test]
async fn idle_timeouts_both_ways() {
    let broker = TestBroker::start_with(|c| c.heartbeat = 1).await;
    let mut socket = bounded!(TcpStream::connect(broker.addr())).unwrap();
    // container-id, hostname null, max-frame-size null, channel-max null, idle-time-out 400 ms.
    let idle: &[u8] = &[0x70, 0, 0, 1, 0x90];
    let bytes = handshake_bytes_with(&[b"\xa1\x03raw", b"\x40", b"\x40", b"\x40", idle]);
    socket.write_all(&bytes).await.unwrap();
    // We asked for 400 ms: the broker sends empty frames well within it while we are silent...
    let empty_frame: &[u8] = &[0, 0, 0, 8, 2, 0, 0, 0];
    let seen = read_until(&mut socket, empty_frame, Duration::from_secs(2)).await;
    assert!(
        seen.windows(8).any(|w| w == empty_frame),
        "no empty frame in {seen:?}"
    );
    // ...and, silent for twice its own 1 s idle-time-out, we are closed with an error.
    let started = tokio::time::Instant::now();
    let seen = read_until(
        &mut socket,
        b"amqp:resource-limit-exceeded",
        Duration::from_secs(6),
    )
    .await;
    assert!(seen
        .windows(28)
        .any(|w| w == b"amqp:resource-limit-exceeded"));
    assert!(started.elapsed() >= Duration::from_millis(1000));
}

/// A resource alarm blocks AMQP 1.0 publishers the way RabbitMQ 4 does: their links get no
/// new credit until it clears; consumers keep going.
#[tokio::test]
async fn an_alarm_withholds_link_credit_from_publishers() {
    use warren_core::alarm::MemoryWatermark;
    let broker = TestBroker::start_with(|c| c.vm_memory_high_watermark = 0.0).await;
    if broker.skip_if_external("sets the memory high watermark") {
        return;
    }
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    warren_tests::declare_queue(&channel, &queue).await;
    let (_connection, mut session) = broker.amqp10().await;
    let address = format!("/queues/{queue}");
    let mut sender = bounded!(Sender::attach(&mut session, "s", address.as_str())).unwrap();
    let blocked = tokio::time::timeout(Duration::from_millis(500), sender.send("waits")).await;
    assert!(blocked.is_err(), "a send completed during the alarm");
    broker
        .core()
        .set_memory_high_watermark(MemoryWatermark::Relative(1.0));
    let outcome = bounded!(sender.send("flows")).unwrap();
    assert!(outcome.is_accepted());
    let bodies = get_all(&channel, &queue).await;
    assert!(bodies.len() == 1 || bodies.len() == 2, "{bodies:?}");
}

#[tokio::test]
async fn a_forged_user_id_is_rejected() {
    use fe2o3_amqp::types::messaging::Properties;
    use fe2o3_amqp::types::primitives::Binary;
    let broker = TestBroker::start().await;
    let (_connection, mut session) = broker.amqp10().await;
    let mut sender = bounded!(Sender::attach(&mut session, "s", "/exchanges/amq.fanout")).unwrap();
    let forged = Message::builder()
        .properties(
            Properties::builder()
                .user_id(Binary::from(b"admin".to_vec()))
                .build(),
        )
        .value("forged".to_string())
        .build();
    let result = bounded!(sender.send(forged));
    assert!(
        format!("{result:?}").contains("UnauthorizedAccess"),
        "{result:?}"
    );
    // The right user-id is fine.
    let mut sender = bounded!(Sender::attach(&mut session, "s2", "/exchanges/amq.fanout")).unwrap();
    let honest = Message::builder()
        .properties(
            Properties::builder()
                .user_id(Binary::from(b"guest".to_vec()))
                .build(),
        )
        .value("honest".to_string())
        .build();
    assert!(bounded!(sender.send(honest)).unwrap().is_released());
}

/// Permissions apply to AMQP 1.0 links as to AMQP 0.9.1 methods: write on the target
/// exchange (amq.default for /queues/:queue), read on the source queue.
#[tokio::test]
async fn links_need_permissions() {
    use fe2o3_amqp::link::SenderAttachError;
    use fe2o3_amqp::Receiver;
    use warren_core::access::format::PermissionDef;
    let broker = TestBroker::start().await;
    if broker.skip_if_external("creates a user") {
        return;
    }
    let (_c091, channel) = broker.channel().await;
    let queue = unique("q");
    warren_tests::declare_queue(&channel, &queue).await;
    let access = broker.core().access();
    access
        .put_user("reader", Some("pw"), None, Vec::new())
        .await
        .unwrap();
    access
        .set_permissions(PermissionDef {
            user: "reader".into(),
            vhost: "/".into(),
            configure: String::new(),
            write: String::new(),
            read: ".*".into(),
        })
        .await
        .unwrap();
    let url = format!("amqp://reader:pw@{}", broker.addr());
    let mut connection = bounded!(Connection::open("reader", url.as_str())).unwrap();
    let mut session = bounded!(fe2o3_amqp::Session::begin(&mut connection)).unwrap();
    let address = format!("/queues/{queue}");
    let refused = bounded!(Sender::attach(&mut session, "s", address.as_str()));
    assert!(
        matches!(&refused, Err(SenderAttachError::RemoteClosedWithError(e)) if format!("{e:?}").contains("UnauthorizedAccess")),
        "{:?}",
        refused.err()
    );
    let receiver = bounded!(Receiver::attach(&mut session, "r", address.as_str()));
    assert!(receiver.is_ok(), "read is allowed: {:?}", receiver.err());
}

/// Revoked permissions apply to open links; a deleted user's connection is closed.
#[tokio::test]
async fn revoked_permissions_and_deleted_users_apply_at_once() {
    use fe2o3_amqp::types::messaging::Outcome;
    use warren_core::access::format::PermissionDef;
    let broker = TestBroker::start().await;
    if broker.skip_if_external("creates a user") {
        return;
    }
    let access = broker.core().access();
    access
        .put_user("temp", Some("pw"), None, Vec::new())
        .await
        .unwrap();
    let everything = PermissionDef {
        user: "temp".into(),
        vhost: "/".into(),
        configure: ".*".into(),
        write: ".*".into(),
        read: ".*".into(),
    };
    access.set_permissions(everything).await.unwrap();
    let url = format!("amqp://temp:pw@{}", broker.addr());
    let mut connection = bounded!(Connection::open("temp", url.as_str())).unwrap();
    let mut session = bounded!(fe2o3_amqp::Session::begin(&mut connection)).unwrap();
    let mut sender = bounded!(Sender::attach(&mut session, "s", "/exchanges/amq.fanout")).unwrap();
    assert!(bounded!(sender.send("allowed")).unwrap().is_released());
    access.clear_permissions("temp", "/").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let outcome = bounded!(sender.send("revoked")).unwrap();
    assert!(matches!(outcome, Outcome::Rejected(_)), "{outcome:?}");
    access.delete_user("temp").await.unwrap();
    let closed = bounded!(connection.on_close());
    assert!(format!("{closed:?}").contains("deleted"), "{closed:?}");
}

/// A broker that stops does not wait for an AMQP 1.0 client still in SASL: it sent its SASL
/// header and nothing more.
#[tokio::test]
async fn shutdown_does_not_wait_for_a_sasl_handshake() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("restarts the broker") {
        return;
    }
    let mut socket = bounded!(TcpStream::connect(broker.addr())).unwrap();
    socket.write_all(b"AMQP\x03\x01\x00\x00").await.unwrap();
    let seen = read_until(&mut socket, b"AMQP\x03\x01\x00\x00", Duration::from_secs(5)).await;
    assert!(
        seen.starts_with(b"AMQP\x03\x01\x00\x00"),
        "the broker answers with the SASL header: {seen:?}"
    );
    let before = std::time::Instant::now();
    let _broker = broker.restart().await;
    // The grace period for open connections is 5 s; this one is not open.
    let took = before.elapsed();
    assert!(took < Duration::from_secs(3), "the restart took {took:?}");
}
