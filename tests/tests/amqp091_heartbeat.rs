//! Heartbeats: the broker drops a client that negotiated heartbeats and then went silent, sends
//! heartbeat frames itself, keeps a heartbeating client alive, and sends none when heartbeat=0.

use std::time::{Duration, Instant};

use warren_tests::raw::{Handshake, RawClient, RawError};
use warren_tests::wire::{self, method, Args};
use warren_tests::{bounded, declare_queue, unique, TestBroker};

/// heartbeat=1 then total silence: RabbitMQ declares the client dead after two missed
/// heartbeats (about 2-3 s) and closes the socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_client_is_disconnected_after_missed_heartbeats() {
    let broker = TestBroker::start().await;
    let handshake = Handshake {
        heartbeat: Some(1),
        ..Default::default()
    };
    let (mut client, _, tune) = RawClient::handshake(broker.addr(), handshake).await;
    assert_eq!(tune.heartbeat, 1);
    let closed_after = client.wait_for_close(Duration::from_secs(6)).await;
    let elapsed = closed_after.expect("the broker must close a silent connection within 6 s");
    assert!(
        elapsed >= Duration::from_millis(900),
        "closed too early: {elapsed:?}"
    );
}

/// A client that sends a heartbeat every 500 ms receives the broker's heartbeats (about one per
/// second) and is not disconnected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_sends_heartbeats_and_keeps_a_heartbeating_client() {
    let broker = TestBroker::start().await;
    let handshake = Handshake {
        heartbeat: Some(1),
        ..Default::default()
    };
    let (mut client, _, _) = RawClient::handshake(broker.addr(), handshake).await;
    let started = Instant::now();
    let mut heartbeats = 0;
    while started.elapsed() < Duration::from_millis(4_500) {
        client.send(&wire::heartbeat_frame()).await;
        match client.read_frame_within(Duration::from_millis(500)).await {
            Ok(frame) if frame.is_heartbeat() => {
                assert_eq!((frame.channel, frame.payload.len()), (0, 0), "{frame:?}");
                heartbeats += 1;
            }
            Ok(frame) => panic!("unexpected frame while idle: {frame:?}"),
            Err(RawError::TimedOut) => {}
            Err(error) => panic!(
                "connection dropped after {:?}: {error:?}",
                started.elapsed()
            ),
        }
    }
    // About one every half interval, as RabbitMQ (heartbeats.md: "sent about every heartbeat
    // timeout / 2 seconds"): some 9 in 4.5 s.
    assert!(
        heartbeats >= 6,
        "only {heartbeats} heartbeats from the broker in 4.5 s"
    );
    // Still usable.
    client.open_channel(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_zero_disables_heartbeats() {
    let broker = TestBroker::start().await;
    let handshake = Handshake {
        heartbeat: Some(0),
        ..Default::default()
    };
    let (mut client, _, _) = RawClient::handshake(broker.addr(), handshake).await;
    let idle = client.read_frame_within(Duration::from_millis(2_500)).await;
    assert_eq!(
        idle,
        Err(RawError::TimedOut),
        "no heartbeat frames, no close"
    );
    client.open_channel(1).await;
    let qos = Args::new().long(0).short(1).bits(&[false]).build();
    client.send_method(1, method::BASIC_QOS, &qos).await;
    client.expect_method(1, (60, 11)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapin_with_heartbeat_one_survives_four_idle_seconds() {
    let broker = TestBroker::start().await;
    let connection = broker.connect_with("heartbeat=1").await;
    assert_eq!(connection.configuration().heartbeat(), 1);
    let channel = bounded!(connection.create_channel()).unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(connection.status().connected(), "dropped while idle");
    declare_queue(&channel, &unique("hb-alive")).await;
}

/// The broker proposes a heartbeat in connection.tune and accepts the client's lower value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tune_proposes_a_heartbeat_and_the_client_value_wins() {
    let broker = TestBroker::start().await;
    let mut client = RawClient::connect(broker.addr()).await;
    client.send(wire::PROTOCOL_HEADER).await;
    client.expect_start().await;
    let response = warren_tests::raw::plain_response("guest", "guest");
    client.start_ok("PLAIN", &response).await;
    let proposed = client.expect_tune().await;
    // RabbitMQ 3.10.8 proposes 60 s by default; Warren's default config is also 60.
    assert!(proposed.heartbeat > 0, "{proposed:?}");
    client
        .tune_ok(warren_tests::raw::Tune {
            heartbeat: 0,
            ..proposed
        })
        .await;
    client.open("/").await;
    client.expect_method(0, method::CONNECTION_OPEN_OK).await;
}
