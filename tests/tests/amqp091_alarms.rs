//! Memory and disk alarms: while one is in effect, a connection that publishes is blocked (the
//! broker stops reading it) and, if it announced the capability, told so with
//! `connection.blocked`; connections that only consume keep going; when the alarm clears the
//! publisher gets `connection.unblocked` and every message it sent arrives.
//!
//! The alarms are tripped by limits no broker can meet (a memory high watermark of 0, a disk
//! free limit of 1 PB) and cleared by moving the limit at runtime, as `rabbitmqctl
//! set_vm_memory_high_watermark` does. Against an external broker these tests are skipped.

use std::pin::Pin;
use std::time::{Duration, Instant};

use futures_lite::{Stream, StreamExt};
use lapin::options::{BasicAckOptions, BasicPublishOptions, BasicQosOptions};
use lapin::{BasicProperties, Channel, Connection, Event};
use tokio::task::JoinHandle;
use warren_core::alarm::Resource;
use warren_server::config::{DiskFreeLimit, MemoryWatermark};
use warren_tests::raw::{Handshake, RawClient, RawError, CLIENT_CAPABILITIES};
use warren_tests::wire::{self, method, Args};
use warren_tests::{
    body, bounded, confirm_channel, consume, declare_queue, eventually, get_all, message_count,
    next_delivery, publish, unique, wait_for_message_count, TestBroker,
};

/// A watermark no process can stay under.
const WATERMARK_NONE: MemoryWatermark = MemoryWatermark::Relative(0.0);
/// All the memory there is: the test process stays under it.
const WATERMARK_ALL: MemoryWatermark = MemoryWatermark::Relative(1.0);
/// More free space than any disk has.
const DISK_FREE_PETABYTE: DiskFreeLimit = DiskFreeLimit::Absolute(1_000_000_000_000_000);

/// A watermark below the broker's RSS, set in the config, blocks a publisher as soon as it
/// publishes: it gets `connection.blocked` "low on memory" and none of its messages reach the
/// queue. Raising the watermark at runtime unblocks it and every message arrives, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_alarm_blocks_a_publisher_until_the_watermark_is_raised() {
    let broker = TestBroker::start_with(|config| config.vm_memory_high_watermark = 0.0).await;
    if broker.skip_if_external("sets the memory high watermark") {
        return;
    }
    assert!(broker.core().alarms().current().contains(Resource::Memory));
    publisher_is_blocked_until_cleared(&broker, "low on memory", || {
        broker.core().set_memory_high_watermark(WATERMARK_ALL);
    })
    .await;
}

/// A disk free limit above the free space blocks publishers with "low on disk" (RabbitMQ's
/// text); lowering it unblocks them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_alarm_blocks_a_publisher_until_the_limit_is_lowered() {
    let broker = TestBroker::start_with(|config| config.disk_free_limit = DISK_FREE_PETABYTE).await;
    if broker.skip_if_external("sets the disk free limit") {
        return;
    }
    assert!(broker.core().alarms().current().contains(Resource::Disk));
    publisher_is_blocked_until_cleared(&broker, "low on disk", || {
        broker
            .core()
            .set_disk_free_limit(DiskFreeLimit::Absolute(1));
    })
    .await;
}

/// An alarm tripped at runtime blocks a connection that published before it at its next
/// publish, while a consumer on another connection keeps receiving, and acknowledging, what
/// was queued before, and its connection, which never publishes, is never
/// blocked (it is told nothing and still declares). The blocked publisher's message arrives
/// once the alarm clears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_keep_consuming_while_publishers_are_blocked() {
    const QUEUED: usize = 20;
    let broker = TestBroker::start().await;
    if broker.skip_if_external("sets the memory high watermark") {
        return;
    }
    let publisher = broker.connect().await;
    let mut publisher_events = events_of(&publisher);
    let queue = unique("alarm-consume");
    let publisher_channel = confirm_channel(&publisher).await;
    declare_queue(&publisher_channel, &queue).await;
    for i in 0..QUEUED {
        publish(
            &publisher_channel,
            "",
            &queue,
            format!("queued-{i}").as_bytes(),
        )
        .await;
    }
    let consumer_connection = broker.connect().await;
    let mut consumer_events = events_of(&consumer_connection);
    let consumer_channel = bounded!(consumer_connection.create_channel()).unwrap();
    // One unacked delivery at a time: every further delivery needs an ack read from the socket.
    bounded!(consumer_channel.basic_qos(1, BasicQosOptions::default())).unwrap();
    let mut consumer = consume(&consumer_channel, &queue, false).await;

    broker.core().set_memory_high_watermark(WATERMARK_NONE);
    eventually(
        "the memory alarm is set",
        Duration::from_secs(5),
        || async { broker.core().alarms().current().contains(Resource::Memory) },
    )
    .await;
    // The same connection that filled the queue is now blocked at its next publish.
    let publishing = publish_in_background(publisher_channel.clone(), &queue, "during", 1);
    let reason = next_block_event(&mut publisher_events).await;
    assert_eq!(reason.as_deref(), Some("low on memory"));

    for i in 0..QUEUED {
        let delivery = next_delivery(&mut consumer).await;
        assert_eq!(body(&delivery), format!("queued-{i}"));
        bounded!(delivery.acker.ack(BasicAckOptions::default())).unwrap();
    }
    assert_eq!(message_count(&consumer_connection, &queue).await, 0);
    expect_no_block_event(&mut consumer_events, Duration::from_millis(300)).await;

    broker.core().set_memory_high_watermark(WATERMARK_ALL);
    assert_eq!(next_block_event(&mut publisher_events).await, None);
    bounded!(publishing).unwrap();
    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(body(&delivery), "during-0");
    expect_no_block_event(&mut consumer_events, Duration::from_millis(100)).await;
}

/// A client that did not announce the `connection.blocked` capability is blocked all the same
/// (its publishes wait unread, unconfirmed) but is sent neither blocked nor unblocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_capability_is_blocked_without_being_told() {
    const COUNT: u64 = 3;
    let broker = TestBroker::start_with(|config| config.vm_memory_high_watermark = 0.0).await;
    if broker.skip_if_external("sets the memory high watermark") {
        return;
    }
    let admin = broker.connect().await;
    let queue = unique("alarm-silent");
    declare_queue(&bounded!(admin.create_channel()).unwrap(), &queue).await;
    let capabilities = CLIENT_CAPABILITIES
        .into_iter()
        .filter(|capability| *capability != "connection.blocked")
        .collect();
    let handshake = Handshake {
        heartbeat: Some(0),
        capabilities: Some(capabilities),
        ..Default::default()
    };
    let (mut client, _, tune) = RawClient::handshake(broker.addr(), handshake).await;
    client.open_channel(1).await;
    confirm_select(&mut client).await;
    let mut frames = Vec::new();
    for i in 0..COUNT {
        let body = format!("silent-{i}");
        frames.extend(wire::publish_frames(
            1,
            "",
            &queue,
            false,
            body.as_bytes(),
            tune.frame_max,
        ));
    }
    client.send(&frames).await;
    let silence = client.read_frame_within(Duration::from_millis(1_500)).await;
    assert_eq!(
        silence,
        Err(RawError::TimedOut),
        "no connection.blocked, no confirm"
    );
    assert_eq!(message_count(&admin, &queue).await, 0);

    broker.core().set_memory_high_watermark(WATERMARK_ALL);
    let mut confirmed = 0;
    while confirmed < COUNT {
        let frame = client.next_frame().await;
        assert_eq!(frame.method_id(), Some(method::BASIC_ACK), "{frame:?}");
        confirmed = frame.args().longlong();
    }
    wait_for_message_count(&admin, &queue, 3).await;
    let after = client.read_frame_within(Duration::from_millis(300)).await;
    assert_eq!(after, Err(RawError::TimedOut), "no connection.unblocked");
}

/// A blocked connection keeps sending heartbeats and is not closed for the client's heartbeats
/// it is not reading: blocked for 3.5 s with heartbeat=1 (a silent client is dropped after
/// about 2.5 s), then unblocked, it confirms the publish it had held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_connection_keeps_heartbeating_and_is_not_timed_out() {
    let broker = TestBroker::start_with(|config| config.vm_memory_high_watermark = 0.0).await;
    if broker.skip_if_external("sets the memory high watermark") {
        return;
    }
    let admin = broker.connect().await;
    let queue = unique("alarm-heartbeat");
    declare_queue(&bounded!(admin.create_channel()).unwrap(), &queue).await;
    let handshake = Handshake {
        heartbeat: Some(1),
        ..Default::default()
    };
    let (mut client, _, tune) = RawClient::handshake(broker.addr(), handshake).await;
    client.open_channel(1).await;
    confirm_select(&mut client).await;
    let publish = wire::publish_frames(1, "", &queue, false, b"patient", tune.frame_max);
    client.send(&publish).await;
    let blocked = client.expect_method(0, method::CONNECTION_BLOCKED).await;
    assert_eq!(blocked.args().shortstr(), "low on memory");

    let started = Instant::now();
    let mut heartbeats = 0;
    while started.elapsed() < Duration::from_millis(3_500) {
        match client.read_frame_within(Duration::from_millis(500)).await {
            Ok(frame) if frame.is_heartbeat() => heartbeats += 1,
            Ok(frame) => panic!("unexpected frame while blocked: {frame:?}"),
            Err(RawError::TimedOut) => {}
            Err(error) => panic!("dropped after {:?} blocked: {error:?}", started.elapsed()),
        }
    }
    assert!(heartbeats >= 2, "{heartbeats} heartbeats in 3.5 s blocked");

    broker.core().set_memory_high_watermark(WATERMARK_ALL);
    client.expect_method(0, method::CONNECTION_UNBLOCKED).await;
    let ack = client.expect_method(1, method::BASIC_ACK).await;
    assert_eq!(ack.args().longlong(), 1);
    wait_for_message_count(&admin, &queue, 1).await;
}

/// A blocked connection is not read, but it still notices its client go: a client that sent
/// partial messages until it was blocked and then reset (or closed) its socket is torn down
/// within seconds, heartbeats off, and its partial messages are freed (RabbitMQ's reader sees
/// the socket close the same way). Before, such a connection stayed until the alarm cleared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_connection_whose_client_is_gone_is_torn_down() {
    let broker = TestBroker::start_with(|config| config.vm_memory_high_watermark = 0.0).await;
    if broker.skip_if_external("sets the memory high watermark") {
        return;
    }
    for reset in [true, false] {
        let handshake = Handshake {
            heartbeat: Some(0),
            ..Default::default()
        };
        let (mut client, _, tune) = RawClient::handshake(broker.addr(), handshake).await;
        client.open_channel(1).await;
        let queue = unique("alarm-gone");
        // Partial messages: on each channel a publish and header for 1 MB, then a first body
        // frame of 64 KiB. A reset reaches the broker however much waits unread; a FIN waits
        // behind the bytes the broker has not read, so the closing client sends less than a
        // TCP window (one whose FIN cannot arrive is reset by its kernel later, and seen then).
        let channels = if reset { 4 } else { 1 };
        let mut frames = Vec::new();
        for channel in 1..=channels {
            if channel > 1 {
                client.open_channel(channel).await;
            }
            frames.extend(wire::basic_publish(channel, "", &queue, false));
            frames.extend(wire::content_header_frame(channel, 1 << 20));
            let body = if reset { 64 * 1024 } else { 4 * 1024 };
            frames.extend(wire::frame(wire::FRAME_BODY, channel, &vec![7; body]));
        }
        let _ = tune;
        client.send(&frames).await;
        let blocked = client.expect_method(0, method::CONNECTION_BLOCKED).await;
        assert_eq!(blocked.args().shortstr(), "low on memory");
        let open = broker.core().connection_count();
        assert!(open >= 1, "{open}");
        if reset {
            client.reset();
        } else {
            drop(client);
        }
        let what = format!("the blocked connection is gone with its client (reset: {reset})");
        eventually(&what, Duration::from_secs(5), || async {
            broker.core().connection_count() == open - 1
        })
        .await;
    }
}

/// The shared part of the memory and disk cases: with an alarm in effect, a lapin publisher
/// (which announces the capability) is blocked with `reason` and its messages do not arrive;
/// after `clear` it is unblocked and all of them arrive, in order.
async fn publisher_is_blocked_until_cleared(
    broker: &TestBroker,
    reason: &str,
    clear: impl FnOnce(),
) {
    const COUNT: usize = 5;
    let admin = broker.connect().await;
    let queue = unique("alarm-publish");
    let admin_channel = bounded!(admin.create_channel()).unwrap();
    declare_queue(&admin_channel, &queue).await;
    let publisher = broker.connect().await;
    let mut events = events_of(&publisher);
    let publishing = publish_in_background(confirm_channel(&publisher).await, &queue, "m", COUNT);
    assert_eq!(next_block_event(&mut events).await.as_deref(), Some(reason));
    assert_eq!(message_count(&admin, &queue).await, 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        message_count(&admin, &queue).await,
        0,
        "published while blocked"
    );
    assert!(!publishing.is_finished(), "confirmed while blocked");

    clear();
    assert_eq!(
        next_block_event(&mut events).await,
        None,
        "connection.unblocked"
    );
    bounded!(publishing).unwrap();
    let expected: Vec<String> = (0..COUNT).map(|i| format!("m-{i}")).collect();
    assert_eq!(get_all(&admin_channel, &queue).await, expected);
}

type Events = Pin<Box<dyn Stream<Item = Event> + Send>>;

/// The connection's events; lapin only reports those that happen after this is called.
fn events_of(connection: &Connection) -> Events {
    Box::pin(connection.events_listener())
}

/// The next blocked (`Some(reason)`) or unblocked (`None`) event.
async fn next_block_event(events: &mut Events) -> Option<String> {
    loop {
        match bounded!(events.next()) {
            Some(Event::ConnectionBlocked(reason)) => return Some(reason),
            Some(Event::ConnectionUnblocked) => return None,
            Some(_) => {}
            None => panic!("the connection's events ended"),
        }
    }
}

async fn expect_no_block_event(events: &mut Events, wait: Duration) {
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(event) = tokio::time::timeout_at(deadline, events.next()).await {
        if let Some(Event::ConnectionBlocked(_) | Event::ConnectionUnblocked) = event {
            panic!("a connection that never published got {event:?}");
        }
    }
}

/// Publishes `count` messages (`{prefix}-{i}`) on a confirm channel and waits for every
/// confirm, in a task: a blocked publisher's writes wait, so the test checks on it meanwhile.
fn publish_in_background(
    channel: Channel,
    queue: &str,
    prefix: &str,
    count: usize,
) -> JoinHandle<()> {
    let (queue, prefix) = (queue.to_owned(), prefix.to_owned());
    tokio::spawn(async move {
        let mut confirms = Vec::new();
        for i in 0..count {
            let body = format!("{prefix}-{i}");
            let publish = channel.basic_publish(
                "".into(),
                queue.as_str().into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default(),
            );
            confirms.push(publish.await.expect("publish"));
        }
        for confirm in confirms {
            assert!(confirm.await.expect("confirm").is_ack());
        }
    })
}

async fn confirm_select(client: &mut RawClient) {
    let args = Args::new().bits(&[false]).build();
    client.send_method(1, method::CONFIRM_SELECT, &args).await;
    client.expect_method(1, method::CONFIRM_SELECT_OK).await;
}
