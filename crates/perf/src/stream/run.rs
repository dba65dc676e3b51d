//! The run: create the streams, start the consumers and then the producers, print a line a
//! second, stop at `--time`, print the summary.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::connection::{Created, StreamConnection};
use super::consumer::{self, ConsumerSpec, Finished};
use super::options::StreamOptions;
use super::producer::{self, ProducerSpec};
use super::publish::PublishPlan;
use super::report::{IntervalLine, StreamReport};
use crate::error::PerfError;
use crate::stats::{percentiles, AgentStats, Collector};

const REPORT_EVERY: Duration = Duration::from_secs(1);
/// How long the tasks get to stop once told to.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the load and prints its lines to `out`.
pub async fn run(
    options: &StreamOptions,
    out: &mut (dyn Write + Send),
) -> Result<StreamReport, PerfError> {
    let first = options
        .endpoints
        .first()
        .expect("invariant: options hold at least one URI");
    // Closed during the run: an idle connection would have to answer the broker's heartbeats.
    let mut admin = StreamConnection::connect(first, "warren-perf-stream-admin").await?;
    create_streams(&mut admin, options, out).await?;
    admin.close().await;
    let stop = Arc::new(AtomicBool::new(false));
    let chunks = Arc::new(AtomicU64::new(0));
    let mut agents = Vec::new();
    let finished = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = start_consumers(options, &stop, &chunks, &finished, &mut agents).await?;
    tasks.extend(start_producers(options, &stop, &mut agents).await?);
    let cpu_before = crate::cpu::process_cpu_seconds();
    let started = Instant::now();
    let mut collector = Collector::new(agents, started);
    let lines = watch(options, out, &mut collector, &chunks, &tasks).await;
    stop.store(true, Ordering::Relaxed);
    let failure = join_all(tasks).await;
    let elapsed = collector.last_at().duration_since(started).as_secs_f64();
    let cpu_s = crate::cpu::process_cpu_seconds()
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    if options.delete_streams {
        let mut admin = StreamConnection::connect(first, "warren-perf-stream-admin").await?;
        for stream in &options.streams {
            admin.delete_stream(stream).await?;
            writeln!(out, "stream '{stream}' deleted").ok();
        }
        admin.close().await;
    }
    if let Some(error) = failure {
        return Err(error);
    }
    write_finished(out, &finished);
    let report = StreamReport::new(
        collector.totals(),
        chunks.load(Ordering::Relaxed),
        elapsed,
        percentiles(&collector.total_consumer),
        cpu_s,
        lines,
    );
    report.write_summary(out);
    if let Some(path) = &options.json {
        report.write_json(path)?;
    }
    Ok(report)
}

/// Creates every stream with `--max-length-bytes` and `--stream-max-segment-size-bytes`; a
/// stream that exists already is used as it is (as stream-perf-test does).
async fn create_streams(
    admin: &mut StreamConnection,
    options: &StreamOptions,
    out: &mut (dyn Write + Send),
) -> Result<(), PerfError> {
    for stream in &options.streams {
        let arguments = vec![
            (
                "max-length-bytes".to_owned(),
                options.max_length_bytes.to_string(),
            ),
            (
                "stream-max-segment-size-bytes".to_owned(),
                options.segment_bytes_max.to_string(),
            ),
        ];
        let state = match admin.create_stream(stream, arguments).await? {
            Created::New => "created",
            Created::Existed => "exists already",
            Created::ExistedOtherwise => {
                "exists already, with other retention or segment size than asked (used as it is)"
            }
        };
        writeln!(out, "stream '{stream}' {state}").ok();
    }
    Ok(())
}

type Task = JoinHandle<Result<(), PerfError>>;

type FinishedList = Arc<std::sync::Mutex<Vec<(usize, Finished)>>>;

/// A line per consumer that stopped at `--cmessages`: its own figure, from its subscribe to
/// its last message (the run's rate averages over the whole run).
fn write_finished(out: &mut (dyn Write + Send), finished: &FinishedList) {
    let mut finished = finished.lock().map(|list| list.clone()).unwrap_or_default();
    finished.sort_by_key(|(i, _)| *i);
    for (i, done) in finished {
        let rate = done.messages as f64 / done.seconds.max(1e-9);
        writeln!(
            out,
            "consumer {i}: {} messages in {:.3} s from its subscribe, {rate:.0} msg/s",
            done.messages, done.seconds
        )
        .ok();
    }
}

async fn start_consumers(
    options: &StreamOptions,
    stop: &Arc<AtomicBool>,
    chunks: &Arc<AtomicU64>,
    finished: &FinishedList,
    agents: &mut Vec<Arc<AgentStats>>,
) -> Result<Vec<Task>, PerfError> {
    let mut tasks = Vec::new();
    for i in 0..options.consumers as usize {
        let endpoint = &options.endpoints[i % options.endpoints.len()];
        let name = format!("warren-perf-stream-consumer-{i}");
        let connection = StreamConnection::connect(endpoint, &name).await?;
        let stats = AgentStats::consumer();
        agents.push(stats.clone());
        let spec = ConsumerSpec {
            stream: options.streams[i % options.streams.len()].clone(),
            offset: options.offset,
            credit: options.credit,
            stats,
            chunks: chunks.clone(),
            stop: stop.clone(),
            limit: options.consumer_messages,
        };
        let finished = finished.clone();
        tasks.push(tokio::spawn(async move {
            if let Some(done) = consumer::run(connection, spec).await? {
                if let Ok(mut list) = finished.lock() {
                    list.push((i, done));
                }
            }
            Ok(())
        }));
    }
    Ok(tasks)
}

async fn start_producers(
    options: &StreamOptions,
    stop: &Arc<AtomicBool>,
    agents: &mut Vec<Arc<AgentStats>>,
) -> Result<Vec<Task>, PerfError> {
    let mut tasks = Vec::new();
    for i in 0..options.producers {
        let endpoint = &options.endpoints[i as usize % options.endpoints.len()];
        let name = format!("warren-perf-stream-producer-{i}");
        let connection = StreamConnection::connect(endpoint, &name).await?;
        let plan = PublishPlan::new(
            0,
            options.batch_size,
            options.sub_entry_size,
            options.size,
            i,
            connection.frame_max,
        )?;
        let stats = AgentStats::producer(true);
        agents.push(stats.clone());
        let spec = ProducerSpec {
            stream: options.streams[i as usize % options.streams.len()].clone(),
            plan,
            confirms: options.confirms,
            rate: options.rate,
            stats,
            stop: stop.clone(),
        };
        tasks.push(tokio::spawn(producer::run(connection, spec)));
    }
    Ok(tasks)
}

/// A line a second until `--time` is up or a task ends (which only a failure makes happen).
async fn watch(
    options: &StreamOptions,
    out: &mut (dyn Write + Send),
    collector: &mut Collector,
    chunks: &AtomicU64,
    tasks: &[Task],
) -> Vec<IntervalLine> {
    let started = collector.last_at();
    let deadline = started + options.time;
    let mut ticker = tokio::time::interval_at(started + REPORT_EVERY, REPORT_EVERY);
    let (mut lines, mut chunks_before) = (Vec::new(), 0);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = tokio::time::sleep_until(deadline) => {}
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                if tasks.iter().any(JoinHandle::is_finished) {
                    return lines;
                }
                continue;
            }
        }
        let now = Instant::now().min(deadline);
        let interval = collector.take(now);
        let chunks_now = chunks.load(Ordering::Relaxed);
        let line = IntervalLine::new(
            &interval,
            percentiles(&collector.interval_consumer),
            chunks_now - chunks_before,
        );
        chunks_before = chunks_now;
        writeln!(out, "{}", line.text()).ok();
        out.flush().ok();
        lines.push(line);
        if now >= deadline {
            return lines;
        }
    }
}

/// Waits for every task; the first failure, if any.
async fn join_all(tasks: Vec<Task>) -> Option<PerfError> {
    let mut failure = None;
    for task in tasks {
        let outcome = match tokio::time::timeout(STOP_TIMEOUT, task).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(PerfError::Protocol(format!(
                "a task of the run failed: {join}"
            ))),
            Err(_) => Err(PerfError::Broker(format!(
                "a producer or consumer did not stop within {} s",
                STOP_TIMEOUT.as_secs()
            ))),
        };
        if let (Err(error), None) = (outcome, &failure) {
            failure = Some(error);
        }
    }
    failure
}
