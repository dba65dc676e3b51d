//! `warren perf amqp10` against a Warren started in this process: counts agree on both sides,
//! latencies are sane, durable runs work and a bad address gets an error naming it and the fix.

mod common;

use common::Broker;

use std::time::Duration;

use warren_perf::amqp10::{Amqp10Options, Amqp10Report};

impl Broker {
    fn addr(&self) -> String {
        self.running.amqp_addr().to_string()
    }

    /// Declares a durable classic queue with `warren perf` over AMQP 0.9.1.
    async fn declare(&self, queue: &str) {
        let args = format!(
            "-h amqp://guest:guest@{}/%2f -u {queue} -x 1 -y 1 -f persistent --auto-delete false -C 1 -D 1",
            self.addr()
        );
        let args: Vec<String> = args.split_whitespace().map(str::to_owned).collect();
        let options = warren_perf::parse(args).unwrap().unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(
            Duration::from_secs(30),
            warren_perf::run(&options, &mut out),
        )
        .await
        .unwrap()
        .unwrap();
    }
}

async fn amqp10(args: &str) -> Result<(Amqp10Report, String), warren_perf::error::PerfError> {
    let args: Vec<String> = args.split_whitespace().map(str::to_owned).collect();
    let options = Amqp10Options::parse(&args)?.unwrap();
    let mut out = Vec::new();
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        warren_perf::amqp10::run(&options, &mut out),
    )
    .await
    .expect("the run ended")?;
    Ok((report, String::from_utf8(out).unwrap()))
}

fn check_complete(report: &Amqp10Report, count: u64) {
    assert!(report.complete, "{report:?}");
    assert_eq!(report.sent, count, "{report:?}");
    assert_eq!(report.accepted, count, "{report:?}");
    assert_eq!(report.received, count, "{report:?}");
    assert_eq!(report.refused, 0, "{report:?}");
    let l = &report.latency_ms;
    assert!(
        l.p0 > 0.0 && l.p0 <= l.p50 && l.p50 <= l.p99 && l.p99 <= l.p100,
        "{l:?}"
    );
    assert!(l.p50 < 5_000.0, "{l:?}");
    assert!(
        report.sender_rate > 0.0 && report.receiver_rate > 0.0,
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_run_counts_the_same_on_both_sides() {
    let broker = Broker::start("warren-perf-amqp10-test-").await;
    broker.declare("quiver-short").await;
    let (report, text) = amqp10(&format!(
        "//{}//queues/quiver-short --count 20k --body-size 12 --credit 200",
        broker.addr()
    ))
    .await
    .unwrap();
    check_complete(&report, 20_000);
    assert!(text.contains("RESULTS"), "{text}");
    assert!(
        text.contains("Count ") && text.contains("20,000 messages"),
        "{text}"
    );
    assert!(text.contains("End-to-end rate"), "{text}");
    assert!(text.contains("amqp10-summary count=20000 "), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_run_writes_its_json() {
    let broker = Broker::start("warren-perf-amqp10-test-").await;
    broker.declare("quiver-durable").await;
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let (report, _) = amqp10(&format!(
        "amqp://guest:guest@{}/queues/quiver-durable --durable --count 5k --body-size 100 --credit 50 --quiet --json {}",
        broker.addr(),
        json.display()
    ))
    .await
    .unwrap();
    check_complete(&report, 5_000);
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(value["received"], 5_000);
    assert_eq!(value["durable"], true);
    assert!(value["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_address_names_the_address_and_the_fix() {
    let broker = Broker::start("warren-perf-amqp10-test-").await;
    for address in ["/queues/no-such-queue", "plainname"] {
        let error = amqp10(&format!("//{}/{address} --count 10", broker.addr()))
            .await
            .expect_err("a refused address fails the run")
            .to_string();
        assert!(error.contains(&format!("'{address}'")), "{error}");
        assert!(error.contains("/queues/NAME"), "{error}");
        assert!(error.contains("declare the queue"), "{error}");
    }
}
