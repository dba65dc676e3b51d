//! Short runs of `warren perf` against a Warren started in this process: the lines it prints,
//! the JSON it writes and the counts it reports must agree with each other and with what the
//! workload must do.

mod common;

use common::Broker;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use warren_perf::report::{Report, Sample};

impl Broker {
    fn uri(&self) -> String {
        uri_of(self.running.amqp_addr())
    }
}

fn uri_of(addr: SocketAddr) -> String {
    format!("amqp://guest:guest@{addr}/%2f")
}

/// Runs `warren perf` with `args` (bounded), returning its report and printed lines.
async fn perf(args: &str) -> (Report, Vec<String>) {
    let args: Vec<String> = args.split_whitespace().map(str::to_owned).collect();
    let options = warren_perf::parse(args).unwrap().unwrap();
    let mut out = Vec::new();
    let run = warren_perf::run(&options, &mut out);
    let report = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("run ended")
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    (report, text.lines().map(str::to_owned).collect())
}

/// The numbers of a per-interval line, in order.
fn numbers(line: &str) -> Vec<u64> {
    let after_time = line.split_once(" s, ").expect("a time field").1;
    after_time
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect()
}

fn expected_numbers(sample: &Sample, confirms: bool) -> Vec<u64> {
    let r = &sample.rates;
    let mut n = vec![r.sent];
    if confirms {
        n.extend([r.confirmed, r.nacked]);
    }
    n.push(r.received);
    // "min/median/75th/95th/99th" carries 75, 95 and 99 as numbers too
    n.extend([75, 95, 99]);
    let c = &sample.consumer_latency_us;
    n.extend([c.min, c.median, c.p75, c.p95, c.p99]);
    if let Some(c) = &sample.confirm_latency_us {
        n.extend([c.min, c.median, c.p75, c.p95, c.p99]);
    }
    n
}

fn check_lines_match_samples(report: &Report, lines: &[String]) {
    let interval_lines: Vec<&String> = lines.iter().filter(|l| l.contains(", time ")).collect();
    assert_eq!(interval_lines.len(), report.samples.len(), "{lines:#?}");
    for (line, sample) in interval_lines.iter().zip(&report.samples) {
        assert!(
            line.starts_with(&format!("id: {}, time {:.3} s, ", report.id, sample.time_s)),
            "{line}"
        );
        assert_eq!(
            numbers(line),
            expected_numbers(sample, report.shape.confirms),
            "{line}"
        );
    }
    let summary = report.summary.lines(&report.id);
    assert!(lines.ends_with(&summary), "{lines:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autoack_run_lines_and_json_agree() {
    let broker = Broker::start("warren-perf-test-").await;
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let args = format!(
        "-h {} -x 1 -y 1 -s 12 -a -z 3 --id t-autoack --json {}",
        broker.uri(),
        json.display()
    );
    let (report, lines) = perf(&args).await;
    check_lines_match_samples(&report, &lines);
    assert_eq!(Report::read_json(&json).unwrap(), report);
    let s = &report.summary;
    assert!(report.samples.len() >= 2, "{lines:#?}");
    assert!(s.totals.sent > 1000 && s.totals.received > 1000, "{s:?}");
    assert!(s.totals.received <= s.totals.sent);
    let sampled: u64 = report.samples.iter().map(|x| x.counts.received).sum();
    assert!(sampled <= s.totals.received);
    assert!(s.consumer_latency_us.count > 0 && s.consumer_latency_us.median > 0);
    assert!((2.9..4.0).contains(&s.duration_s), "{}", s.duration_s);
    assert_eq!(lines[0], "id: t-autoack, starting consumer #0");
    broker.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_limits_with_confirms_and_acks_count_exactly() {
    let broker = Broker::start("warren-perf-test-").await;
    let args = format!(
        "-h {} -x 2 -X 2 -y 1 -u perf-limits -C 500 -c 20 -q 50 --multi-ack-every 10 -z 30 -s 40",
        broker.uri()
    );
    let (report, lines) = perf(&args).await;
    let s = &report.summary;
    assert_eq!(
        (s.totals.sent, s.totals.confirmed, s.totals.nacked),
        (2000, 2000, 0),
        "{lines:#?}"
    );
    assert_eq!(s.totals.received, 2000, "{lines:#?}");
    assert!(lines
        .iter()
        .any(|l| l.ends_with("test stopped (Reached message limit)")));
    assert!(s.duration_s < 20.0, "-C ends the run long before -z");
    let confirm = s.confirm_latency_us.expect("confirm latency with -c");
    assert_eq!(confirm.count, 2000);
    assert!(lines
        .iter()
        .any(|l| l.contains("confirm latency min/median/75th/95th/99th")));
    check_lines_match_samples(&report, &lines);
    broker.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_pattern_fanout_and_fixed_rate() {
    let broker = Broker::start("warren-perf-test-").await;
    let uri = broker.uri();
    // ten queues, a consumer each; each producer channel feeds one queue
    let args = format!(
        "-h {uri} -x 10 -y 10 --queue-pattern q-%d --queue-pattern-from 1 --queue-pattern-to 10 \
         -C 100 -a -z 30"
    );
    let (report, _) = perf(&args).await;
    assert_eq!(
        (report.summary.totals.sent, report.summary.totals.received),
        (1000, 1000)
    );
    // fanout 1 -> 3: every message reaches every consumer's own queue
    let args = format!("-h {uri} -x 1 -y 3 -e perf-fanout -t fanout -C 200 -a -z 30");
    let (report, _) = perf(&args).await;
    assert_eq!(
        (report.summary.totals.sent, report.summary.totals.received),
        (200, 600)
    );
    // a fixed rate of 200 msg/s for 2 s
    let (report, _) = perf(&format!("-h {uri} -x 1 -y 1 -r 200 -a -z 2")).await;
    let sent = report.summary.totals.sent;
    assert!(
        (360..=440).contains(&sent),
        "sent {sent} at 200 msg/s in 2 s"
    );
    broker.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_open_hold_and_close() {
    let broker = Broker::start("warren-perf-test-").await;
    let (report, lines) = perf(&format!("-h {} --connections 20 -z 1", broker.uri())).await;
    let c = report.connections.expect("a connections report");
    assert_eq!(
        (c.requested, c.opened, c.closed, c.channels_per_connection),
        (20, 20, 20, 2)
    );
    assert!(lines
        .iter()
        .any(|l| l.contains("opened 20 connections with 2 channels each")));
    broker.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_problem_and_the_fix() {
    let broker = Broker::start("warren-perf-test-").await;
    let uri = broker.uri();
    let run = |args: String| async move {
        let args: Vec<String> = args.split_whitespace().map(str::to_owned).collect();
        let options = warren_perf::parse(args).unwrap().unwrap();
        let mut out = Vec::new();
        let run = warren_perf::run(&options, &mut out);
        tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .unwrap()
            .unwrap_err()
            .to_string()
    };
    let text = run(format!("-h {uri} -u missing-queue -p -z 1")).await;
    assert!(
        text.contains("queue 'missing-queue'") && text.contains("404"),
        "{text}"
    );
    assert!(text.contains("-p/--predeclared"), "{text}");
    let addr = broker.running.amqp_addr();
    let text = run(format!("-h amqp://guest:wrong@{addr}/%2f -z 1")).await;
    assert!(text.contains("access refused for user 'guest'"), "{text}");
    broker.running.shutdown().await;
    let text = run(format!("-h {} -z 1", uri_of(addr))).await;
    assert!(
        text.contains(&format!("is the broker running on {addr}?")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_draws_its_chart() {
    if !Path::new(warren_plot::chart::DEFAULT_FONTS[0]).is_file() {
        eprintln!("no DejaVu Sans (fonts-dejavu-core): chart not tested");
        return;
    }
    let broker = Broker::start("warren-perf-test-").await;
    let dir = tempfile::tempdir().unwrap();
    let (json, png) = (dir.path().join("a.json"), dir.path().join("a.png"));
    let args = format!(
        "-h {} -x 1 -y 1 -a -r 1000 -z 2 --json {} --chart {}",
        broker.uri(),
        json.display(),
        png.display()
    );
    perf(&args).await;
    assert_eq!(&std::fs::read(&png).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
    let side = dir.path().join("side.png");
    let refs: Vec<String> = [json.clone(), json, "-o".into(), side.clone()]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut args = vec!["chart".to_string()];
    args.extend(refs);
    assert_eq!(warren_perf::main(args), std::process::ExitCode::SUCCESS);
    assert_eq!(&std::fs::read(&side).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
    broker.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_order_passes_in_order_and_names_the_first_gap() {
    let broker = Broker::start("warren-perf-test-").await;
    let uri = broker.uri();
    // two producers into one queue: each one's sequence arrives in order
    let args = format!(
        "-h {uri} -x 2 -y 1 -u perf-order -s 16 -C 300 -D 600 -c 20 -q 50 --verify-order -z 30"
    );
    let (report, lines) = perf(&args).await;
    assert_eq!(report.summary.totals.received, 600, "{lines:#?}");
    // a backlog published by one run, consumed in two: the second starts at sequence 5
    let queue = "-u perf-order-backlog --flag persistent --auto-delete false";
    let (report, _) = perf(&format!("-h {uri} {queue} -x 1 -y 0 -C 10 -c 10 -z 30")).await;
    assert_eq!(report.summary.totals.confirmed, 10);
    let consume = format!("-h {uri} {queue} -x 0 -y 1 -D 5 --verify-order -z 30");
    let (report, _) = perf(&consume).await;
    assert_eq!(report.summary.totals.received, 5);
    let args: Vec<String> = consume.split_whitespace().map(str::to_owned).collect();
    let options = warren_perf::parse(args).unwrap().unwrap();
    let mut out = Vec::new();
    let run = warren_perf::run(&options, &mut out);
    let error = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "--verify-order, consumer channel 1: first out-of-order message: delivery #1 from \
         producer 0 carries sequence 5, expected 0 (5 messages missing before it)"
    );
    broker.running.shutdown().await;
}

/// `-K` gives each message its own routing key, so a consistent-hash exchange spreads one
/// producer's messages over every bound queue (bound with weight `-k 1`), none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_routing_keys_spread_over_a_consistent_hash_exchange() {
    let broker = Broker::start("warren-perf-test-").await;
    let args = format!(
        "-h {} -x 1 -y 0 -e perf-hash -t x-consistent-hash -k 1 -K --queue-pattern h-%d \
         --queue-pattern-from 1 --queue-pattern-to 4 -C 4000 -c 100 -z 30",
        broker.uri()
    );
    let (report, _) = perf(&args).await;
    assert_eq!(report.summary.totals.sent, 4000);
    assert_eq!(report.summary.totals.confirmed, 4000);
    let vhost = broker.running.broker().vhost("/").unwrap();
    let mut counts = Vec::new();
    for n in 1..=4 {
        let queue = vhost.queue(&format!("h-{n}"), 0).unwrap();
        counts.push(queue.info().await.unwrap().messages);
    }
    assert_eq!(counts.iter().sum::<u32>(), 4000, "{counts:?}");
    assert!(
        counts.iter().all(|&c| c > 500),
        "each of 4 equal-weight queues gets a share: {counts:?}"
    );
    broker.running.shutdown().await;
}

/// Report JSON is read back bit for bit (serde_json's `float_roundtrip`): without it 1.010329959
/// came back as 1.0103299589999999 and the JSON no longer matched the run.
#[test]
fn report_floats_survive_their_json() {
    for value in [1.010329959_f64, 0.1, 3.020475585, 1e-9, 123456.789012345] {
        let text = serde_json::to_string(&value).unwrap();
        assert_eq!(serde_json::from_str::<f64>(&text).unwrap(), value, "{text}");
    }
}
