//! Resource alarms on the stream protocol: while a disk alarm is in effect, a connection with
//! publishers stops being read (its publishes wait unconfirmed) and new publishers are refused
//! with precondition failed; when the alarm clears, the waiting publishes go through.

mod stream_support;

use std::time::Duration;

use rabbitmq_stream_client::types::{Message, ResponseCode};
use stream_support::{client, environment};
use warren_core::alarm::Resource;
use warren_server::config::DiskFreeLimit;
use warren_tests::{bounded, unique, TestBroker};

/// More free space than any disk has.
const DISK_FREE_PETABYTE: DiskFreeLimit = DiskFreeLimit::Absolute(1_000_000_000_000_000);

async fn wait_for_alarm(broker: &TestBroker, on: bool) {
    for _ in 0..200 {
        if broker.core().alarms().current().contains(Resource::Disk) == on {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "the disk alarm did not turn {}",
        if on { "on" } else { "off" }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_alarm_blocks_stream_publishers_until_it_clears() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("sets the disk free limit") {
        return;
    }
    let environment = environment(&broker).await;
    let stream = unique("stream-alarm");
    bounded!(environment.stream_creator().create(&stream)).unwrap();
    let producer = bounded!(environment.producer().build(&stream)).unwrap();
    let message = Message::builder().body("before").build();
    assert!(bounded!(producer.send_with_confirm(message))
        .unwrap()
        .confirmed());

    broker.core().set_disk_free_limit(DISK_FREE_PETABYTE);
    wait_for_alarm(&broker, true).await;
    let other = client(&broker).await;
    let refused = bounded!(other.declare_publisher(7, None, &stream)).unwrap();
    assert_eq!(refused.code(), &ResponseCode::PreconditionFailed);
    let blocked = tokio::spawn(async move {
        let message = Message::builder().body("during").build();
        let status = producer.send_with_confirm(message).await;
        (producer, status)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!blocked.is_finished(), "no confirm while the alarm holds");

    broker
        .core()
        .set_disk_free_limit(DiskFreeLimit::Absolute(1));
    wait_for_alarm(&broker, false).await;
    let (producer, status) = bounded!(blocked).unwrap();
    assert!(
        status.unwrap().confirmed(),
        "confirmed once the alarm cleared"
    );
    bounded!(producer.close()).unwrap();
}
