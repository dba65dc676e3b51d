//! `warren perf --connections` against a Warren started in this process: the broker counts
//! every connection open (past its handshake; the tool counts one as opened only once both its
//! channels are), the tool connects from the source addresses asked, and every connection
//! closes cleanly: the broker's count goes back to zero.

mod common;

use common::Broker;

use std::time::Duration;

use tokio::time::Instant;
use warren_perf::report::Report;

/// Connections opened by the run, 2 channels each.
const CONNECTIONS: usize = 200;
/// Longest wait for the broker to see them all open, or all closed.
const SETTLE: Duration = Duration::from_secs(30);

impl Broker {
    /// Waits (bounded) until the broker counts `expected` open connections.
    async fn wait_for_count(&self, expected: usize) {
        let deadline = Instant::now() + SETTLE;
        while self.running.connection_count() != expected {
            assert!(
                Instant::now() < deadline,
                "the broker counts {} open connections after {SETTLE:?}, expected {expected}",
                self.running.connection_count()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_opens_on_the_broker_and_closes_cleanly() {
    let broker = Broker::start("warren-perf-connections-").await;
    let args = format!(
        "-h amqp://guest:guest@{}/%2f --connections {CONNECTIONS} -z 3 --source-addresses 2 \
         --id t-conns",
        broker.running.amqp_addr()
    );
    let options = warren_perf::parse(args.split_whitespace().map(str::to_owned).collect())
        .unwrap()
        .unwrap();
    let run = tokio::spawn(async move {
        let mut out = Vec::new();
        let report = warren_perf::run(&options, &mut out).await;
        (report, String::from_utf8(out).unwrap())
    });

    // the broker sees every connection while the tool holds them
    broker.wait_for_count(CONNECTIONS).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(broker.running.connection_count(), CONNECTIONS);

    // the tool reports them opened with their channels, then closed
    let (report, text) = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the run ended")
        .unwrap();
    let report: Report = report.unwrap();
    let c = report.connections.expect("a connections report");
    assert_eq!((c.requested, c.opened, c.closed), (200, 200, 200), "{text}");
    assert_eq!((c.channels_per_connection, c.source_addresses), (2, 2));
    for expected in [
        "id: t-conns, connecting from 127.0.0.2 to 127.0.0.3 in turn (--source-addresses)",
        "id: t-conns, opened 200 connections with 2 channels each",
        "id: t-conns, held 3.0 s, closed 200 connections",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(expected)),
            "no line '{expected}' in:\n{text}"
        );
    }

    // and the broker has torn every one of them down
    broker.wait_for_count(0).await;
    broker.running.shutdown().await;
}
