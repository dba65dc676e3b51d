//! Connection handshake: SASL login (PLAIN, AMQPLAIN), vhost access, tune negotiation, server
//! properties and capabilities, channel_max enforcement, update-secret.

use std::time::Duration;

use warren_tests::raw::{amqplain_response, plain_response, Handshake, RawClient, RawError};
use warren_tests::wire::{self, method, reply, table_get, Args, FieldValue};
use warren_tests::{amqp_error, bounded, declare_queue, get_all, publish, unique, TestBroker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_login_opens_connection_and_channels() {
    let broker = TestBroker::start().await;
    let connection = broker.connect().await;
    assert!(connection.status().connected());
    let channel = bounded!(connection.create_channel()).unwrap();
    let queue = unique("conn-plain");
    declare_queue(&channel, &queue).await;
    bounded!(channel.close(200, "OK".into())).unwrap();
    bounded!(connection.close(200, "OK".into())).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_refused_with_403_through_lapin() {
    let broker = TestBroker::start().await;
    let url = broker.url().replace("guest:guest@", "guest:wrong@");
    let connect = lapin::Connection::connect(&url, lapin::ConnectionProperties::default());
    let error = bounded!(connect)
        .err()
        .expect("login with a wrong password must fail");
    let (code, text) = amqp_error(&error).unwrap_or_else(|| panic!("not an AMQP error: {error}"));
    assert_eq!(code, reply::ACCESS_REFUSED, "{text}");
}

/// With `authentication_failure_close` advertised, the broker answers a failed login with
/// connection.close 403 (instead of just dropping the socket) and then closes the socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_gets_connection_close_403_on_the_wire() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client.send(wire::PROTOCOL_HEADER).await;
    client.expect_start().await;
    client
        .start_ok("PLAIN", &plain_response("guest", "not-the-password"))
        .await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::ACCESS_REFUSED, "{close:?}");
    // RabbitMQ 3.10.8: "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN.
    // For details see the broker logfile."
    assert!(close.text.starts_with("ACCESS_REFUSED"), "{close:?}");
    assert!(
        close.text.contains("PLAIN"),
        "the text names the mechanism: {close:?}"
    );
    client.send_connection_close_ok().await;
    assert!(
        client
            .wait_for_close(Duration::from_secs(5))
            .await
            .is_some(),
        "socket stays open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_user_is_refused_with_403() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client.send(wire::PROTOCOL_HEADER).await;
    client.expect_start().await;
    client
        .start_ok("PLAIN", &plain_response("no-such-user", "guest"))
        .await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::ACCESS_REFUSED, "{close:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_vhost_is_refused_with_530_not_allowed() {
    let broker = TestBroker::start().await;
    let vhost = unique("no-such-vhost");
    let url = broker.url().replace("/%2f", &format!("/{vhost}"));
    let connect = lapin::Connection::connect(&url, lapin::ConnectionProperties::default());
    let error = bounded!(connect)
        .err()
        .expect("opening a missing vhost must fail");
    let (code, text) = amqp_error(&error).unwrap_or_else(|| panic!("not an AMQP error: {error}"));
    assert_eq!(code, reply::NOT_ALLOWED, "{text}");
    // RabbitMQ 3.10.8: "NOT_ALLOWED - vhost <name> not found"
    assert!(text.contains(&vhost), "the text names the vhost: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_vhost_on_the_wire_is_connection_close_530() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client.send(wire::PROTOCOL_HEADER).await;
    client.expect_start().await;
    client
        .start_ok("PLAIN", &plain_response("guest", "guest"))
        .await;
    let tune = client.expect_tune().await;
    client.tune_ok(tune).await;
    client.open("no-such-vhost").await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::NOT_ALLOWED, "{close:?}");
    assert_eq!(close.text, "NOT_ALLOWED - vhost no-such-vhost not found");
    assert_eq!(
        (close.class_id, close.method_id),
        method::CONNECTION_OPEN,
        "{close:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqplain_login_through_lapin() {
    let broker = TestBroker::start().await;
    let connection = broker.connect_with("auth_mechanism=amqplain").await;
    let channel = bounded!(connection.create_channel()).unwrap();
    declare_queue(&channel, &unique("conn-amqplain")).await;
    bounded!(connection.close(200, "OK".into())).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqplain_login_on_the_wire() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client.send(wire::PROTOCOL_HEADER).await;
    let start = client.expect_start().await;
    assert!(
        start.mechanisms.split(' ').any(|m| m == "AMQPLAIN"),
        "{}",
        start.mechanisms
    );
    client
        .start_ok("AMQPLAIN", &amqplain_response("guest", "guest"))
        .await;
    let tune = client.expect_tune().await;
    client.tune_ok(tune).await;
    client.open("/").await;
    client.expect_method(0, method::CONNECTION_OPEN_OK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqplain_with_wrong_password_is_refused() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client.send(wire::PROTOCOL_HEADER).await;
    client.expect_start().await;
    client
        .start_ok("AMQPLAIN", &amqplain_response("guest", "bad"))
        .await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.code, reply::ACCESS_REFUSED, "{close:?}");
    assert!(close.text.contains("AMQPLAIN"), "{close:?}");
}

/// An unknown SASL mechanism fails the handshake. RabbitMQ 3.10.8 logs "unknown authentication
/// mechanism 'NO-SUCH-MECHANISM'" (command_invalid) and closes the socket about 1 s later
/// without sending connection.close (the connection is not open yet). A broker that does send a
/// close must use 503 COMMAND_INVALID and name the mechanism; Warren sends RabbitMQ's texts
/// (`rabbit_reader:auth_mechanism_to_module`): "unknown" for a mechanism it does not know,
/// "invalid" for one it knows but does not offer (EXTERNAL off TLS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_mechanism_is_refused() {
    let broker = TestBroker::start().await;
    for (mechanism, text) in [
        (
            "NO-SUCH-MECHANISM",
            "COMMAND_INVALID - unknown authentication mechanism 'NO-SUCH-MECHANISM'",
        ),
        (
            "EXTERNAL",
            "COMMAND_INVALID - invalid authentication mechanism 'EXTERNAL'",
        ),
    ] {
        let mut client = RawClient::connect(broker.addr()).await;
        client.send(wire::PROTOCOL_HEADER).await;
        let start = client.expect_start().await;
        assert!(
            !start.mechanisms.contains("EXTERNAL"),
            "EXTERNAL is offered over TLS only: {}",
            start.mechanisms
        );
        client.start_ok(mechanism, b"").await;
        let close = client.expect_close_or_eof(Duration::from_secs(5)).await;
        if broker.is_external() {
            if let Some(close) = close {
                assert_eq!(close.code, reply::COMMAND_INVALID, "{close:?}");
                assert!(close.text.contains(mechanism), "{close:?}");
            }
            continue;
        }
        let close = close.expect("Warren answers with connection.close");
        assert_eq!(close.code, reply::COMMAND_INVALID, "{close:?}");
        assert_eq!(close.text, text);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_start_advertises_version_mechanisms_and_locale() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client.send(wire::PROTOCOL_HEADER).await;
    let start = client.expect_start().await;
    assert_eq!((start.version_major, start.version_minor), (0, 9));
    let mechanisms: Vec<&str> = start.mechanisms.split(' ').collect();
    assert!(mechanisms.contains(&"PLAIN"), "{mechanisms:?}");
    assert!(mechanisms.contains(&"AMQPLAIN"), "{mechanisms:?}");
    assert!(
        start.locales.split(' ').any(|l| l == "en_US"),
        "{}",
        start.locales
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_properties_name_the_product_and_capabilities() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client.send(wire::PROTOCOL_HEADER).await;
    let start = client.expect_start().await;
    let properties = &start.server_properties;
    for key in ["product", "version", "platform"] {
        let value = table_get(properties, key).and_then(FieldValue::as_str);
        assert!(
            value.as_ref().is_some_and(|v| !v.is_empty()),
            "server property {key}: {value:?}"
        );
    }
    let capabilities = table_get(properties, "capabilities")
        .and_then(FieldValue::as_table)
        .expect("server properties carry a capabilities table");
    for capability in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "consumer_priorities",
        "authentication_failure_close",
        "per_consumer_qos",
        "direct_reply_to",
    ] {
        let value = table_get(capabilities, capability);
        assert_eq!(
            value,
            Some(&FieldValue::Bool(true)),
            "capability {capability}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tune_proposes_limits_and_honours_smaller_client_values() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client.send(wire::PROTOCOL_HEADER).await;
    client.expect_start().await;
    client
        .start_ok("PLAIN", &plain_response("guest", "guest"))
        .await;
    let proposed = client.expect_tune().await;
    // RabbitMQ 3.10.8 proposes channel_max 2047, frame_max 131072, heartbeat 60.
    assert!(proposed.frame_max >= 4096, "{proposed:?}");
    assert!(proposed.channel_max >= 16, "{proposed:?}");

    let connection = broker.connect_with("frame_max=4096&channel_max=16").await;
    let configuration = connection.configuration();
    assert_eq!(configuration.frame_max(), 4096);
    assert_eq!(configuration.channel_max(), 16);
    // A 20 KB body must now travel as several 4 KB body frames and still arrive whole.
    let channel = bounded!(connection.create_channel()).unwrap();
    let queue = unique("conn-tune");
    declare_queue(&channel, &queue).await;
    let body = "x".repeat(20_000);
    publish(&channel, "", &queue, body.as_bytes()).await;
    assert_eq!(get_all(&channel, &queue).await, vec![body]);
}

/// A frame_max below the spec minimum of 4096 fails the handshake. RabbitMQ 3.10.8 logs
/// "negotiated frame_max = 1024 is lower than the minimum allowed value (4096)" and closes the
/// socket (about 3 s later, without connection.close). Never reaches open-ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tune_ok_with_frame_max_below_minimum_is_refused() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client.send(wire::PROTOCOL_HEADER).await;
    client.expect_start().await;
    client
        .start_ok("PLAIN", &plain_response("guest", "guest"))
        .await;
    let proposed = client.expect_tune().await;
    client
        .tune_ok(warren_tests::raw::Tune {
            frame_max: 1024,
            ..proposed
        })
        .await;
    // RabbitMQ may already have closed the socket by the time connection.open goes out.
    let _ = client
        .send_lenient(&wire::method_frame(
            0,
            method::CONNECTION_OPEN,
            &Args::new()
                .shortstr("/")
                .shortstr("")
                .bits(&[false])
                .build(),
        ))
        .await;
    if let Some(close) = client.expect_close_or_eof(Duration::from_secs(6)).await {
        assert_ne!(close.code, 200, "{close:?}");
        assert_eq!(
            close.text,
            "NOT_ALLOWED - negotiated frame_max = 1024 is lower than the minimum allowed value \
             (4096)"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_a_channel_above_channel_max_is_refused() {
    let broker = TestBroker::start().await;
    let handshake = Handshake {
        channel_max: Some(2),
        ..Default::default()
    };
    let (mut client, _, _) = RawClient::handshake(broker.addr(), handshake).await;
    client.open_channel(1).await;
    client.open_channel(2).await;
    let args = Args::new().shortstr("").build();
    client.send_method(3, method::CHANNEL_OPEN, &args).await;
    let close = client.expect_connection_close().await;
    // RabbitMQ 3.10.8: 530 "NOT_ALLOWED - number of channels opened (2) has reached the
    // negotiated channel_max (2)". (It counts open channels; it does not reject a channel
    // number above channel_max while fewer channels are open.)
    assert_eq!(close.code, reply::NOT_ALLOWED, "{close:?}");
    assert!(close.text.contains("channel_max"), "{close:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapin_stops_at_negotiated_channel_max() {
    let broker = TestBroker::start().await;
    let connection = broker.connect_with("channel_max=3").await;
    assert_eq!(connection.configuration().channel_max(), 3);
    let mut channels = Vec::new();
    for _ in 0..3 {
        channels.push(bounded!(connection.create_channel()).expect("within channel_max"));
    }
    let fourth = bounded!(connection.create_channel());
    assert!(fourth.is_err(), "a fourth channel must not open");
    // The connection is still usable.
    declare_queue(&channels[0], &unique("conn-chmax")).await;
}

/// connection.update-secret is answered with update-secret-ok for the internal user database
/// (RabbitMQ 3.10.8 accepts it and re-checks the credentials).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_secret_is_acknowledged() {
    let broker = TestBroker::start().await;
    let (mut client, _, _) = RawClient::handshake(broker.addr(), Handshake::default()).await;
    let args = Args::new().longstr(b"guest").shortstr("rotation").build();
    client
        .send_method(0, method::CONNECTION_UPDATE_SECRET, &args)
        .await;
    let frame = client.next_frame().await;
    assert_eq!(frame.channel, 0);
    let got = frame.method_id();
    if got == Some(method::CONNECTION_CLOSE) {
        panic!(
            "update-secret closed the connection: {:?}",
            warren_tests::raw::decode_close(&frame)
        );
    }
    assert_eq!(got, Some(method::CONNECTION_UPDATE_SECRET_OK));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_close_is_answered_with_close_ok() {
    let broker = TestBroker::start().await;
    let (mut client, _, _) = RawClient::handshake(broker.addr(), Handshake::default()).await;
    let args = Args::new()
        .short(200)
        .shortstr("bye")
        .short(0)
        .short(0)
        .build();
    client.send_method(0, method::CONNECTION_CLOSE, &args).await;
    client.expect_method(0, method::CONNECTION_CLOSE_OK).await;
    // RabbitMQ 3.10.8 then waits for the client to close the socket; nothing else is sent.
    assert_eq!(
        client
            .read_frame_within(Duration::from_millis(300))
            .await
            .err(),
        Some(RawError::TimedOut)
    );
}

/// tune-ok asking for more than the broker proposed fails the handshake. RabbitMQ 3.10.8 logs
/// "negotiated frame_max = 1048576 is higher than the maximum allowed value (131072)" and
/// closes the socket; a broker that sends connection.close must name frame_max.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tune_ok_above_the_proposed_frame_max_is_refused() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client.send(wire::PROTOCOL_HEADER).await;
    client.expect_start().await;
    client
        .start_ok("PLAIN", &plain_response("guest", "guest"))
        .await;
    let proposed = client.expect_tune().await;
    let greedy = warren_tests::raw::Tune {
        frame_max: proposed.frame_max * 8,
        ..proposed
    };
    client.tune_ok(greedy).await;
    let open = Args::new()
        .shortstr("/")
        .shortstr("")
        .bits(&[false])
        .build();
    let _ = client
        .send_lenient(&wire::method_frame(0, method::CONNECTION_OPEN, &open))
        .await;
    let outcome = client.expect_close_or_eof(Duration::from_secs(6)).await;
    if let Some(close) = &outcome {
        assert!(close.text.contains("frame_max"), "{close:?}");
    }
    if broker.is_external() {
        return;
    }
    let close = outcome.expect("Warren sends connection.close");
    assert_eq!(
        close.text,
        format!(
            "NOT_ALLOWED - negotiated frame_max = {} is higher than the maximum allowed value \
             ({})",
            proposed.frame_max * 8,
            proposed.frame_max
        )
    );
}

/// Warren only: the configured limits are what connection.tune proposes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_limits_are_proposed_in_tune() {
    let broker = TestBroker::start_with(|config| {
        config.frame_max = 8192;
        config.channel_max = 7;
        config.heartbeat = 3;
    })
    .await;
    if broker.skip_if_external("the external broker's config cannot be changed from here") {
        return;
    }
    let mut client = RawClient::connect(broker.addr()).await;
    client.send(wire::PROTOCOL_HEADER).await;
    client.expect_start().await;
    client
        .start_ok("PLAIN", &plain_response("guest", "guest"))
        .await;
    let proposed = client.expect_tune().await;
    let expected = warren_tests::raw::Tune {
        channel_max: 7,
        frame_max: 8192,
        heartbeat: 3,
    };
    assert_eq!(proposed, expected);
    let connection = broker.connect().await;
    assert_eq!(connection.configuration().frame_max(), 8192);
    assert_eq!(connection.configuration().channel_max(), 7);
    assert_eq!(connection.configuration().heartbeat(), 3);
}

/// The broker asks for TCP segments of at most 16 KiB, also on loopback (whose own limit is
/// 64 KiB): a client whose receive window shrank to one 64 KiB segment would otherwise get a
/// segment per delayed-ACK timeout and stay stuck at a few thousand messages a second (PerfTest's
/// autoack consumer did, after a stall). The client's segment size is the smaller of the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_sockets_ask_for_segments_of_at_most_16_kib() {
    let broker = TestBroker::start().await;
    let stream = bounded!(tokio::net::TcpStream::connect(broker.addr())).unwrap();
    let mss = socket2::SockRef::from(&stream).tcp_mss().unwrap();
    assert!(
        mss > 0 && mss <= 16 * 1024,
        "segment size {mss}: the broker did not limit it"
    );
}
