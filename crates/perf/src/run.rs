//! Running a load: `Fleet` opens the consumers, then the producers, and runs one task per
//! connection; `drive` is the conductor's loop, which ends an interval every `-i` seconds
//! (printing its line), watches for task failures, Ctrl-C and the end conditions.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::consumer::{self, ConsumerPlan};
use crate::control::Control;
use crate::driver::{ConsumerSetup, Driver, PublisherSetup};
use crate::error::PerfError;
use crate::options::RunOptions;
use crate::producer::{self, ProducerPlan};
use crate::report::{Report, Sample, Shape, Summary};
use crate::stats::{percentiles, AgentStats, Collector};
use crate::topology::Topology;

/// How often the conductor looks at the tasks and the end conditions.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// With `-C` and no `-D`, consumers are done once nothing arrived for this long.
const QUIET_END: Duration = Duration::from_secs(1);
/// How long stopped tasks get to close their connections before they are aborted.
const STOP_GRACE: Duration = Duration::from_secs(5);

type Task = Option<JoinHandle<Result<(), PerfError>>>;

/// The producer and consumer tasks of a run, and their statistics.
pub struct Fleet {
    pub control: Arc<Control>,
    producers: Vec<Task>,
    consumers: Vec<Task>,
    pub collector: Collector,
    pub started: Instant,
}

/// How many tasks are still running.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub producers_running: usize,
    pub consumers_running: usize,
}

/// Why `drive` returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The time given ran out.
    Deadline,
    /// Producers and consumers finished (`-C`, `-D`).
    Finished,
    /// Ctrl-C.
    Interrupted,
}

impl Stop {
    /// PerfTest's words for why the test stopped.
    pub fn reason(self) -> &'static str {
        match self {
            Stop::Deadline => "Reached time limit",
            Stop::Finished => "Reached message limit",
            Stop::Interrupted => "Interrupted",
        }
    }
}

impl Fleet {
    /// Opens every consumer connection (consuming), then every producer connection, then starts
    /// one task per connection. `rate` is the initial rate per producer channel.
    pub async fn start<D: Driver>(
        driver: &D,
        options: &RunOptions,
        topology: &Topology,
        rate: Option<f64>,
        out: &mut (dyn Write + Send),
    ) -> Result<Fleet, PerfError> {
        let consumer_links = open_consumers(driver, options, topology, out).await?;
        let producer_links = open_producers(driver, options, topology, out).await?;
        let control = Arc::new(Control::new(rate));
        let mut agents = Vec::new();
        let mut consumers = Vec::new();
        let started = Instant::now();
        for link in consumer_links {
            let stats = AgentStats::consumer();
            agents.push(stats.clone());
            let plan = consumer_plan(options);
            consumers.push(Some(tokio::spawn(consumer::run(
                link,
                plan,
                control.clone(),
                stats,
            ))));
        }
        let mut producers = Vec::new();
        for (p, link) in producer_links.into_iter().enumerate() {
            let stats = AgentStats::producer(options.confirm.is_some());
            agents.push(stats.clone());
            let plan = producer_plan(options, p);
            producers.push(Some(tokio::spawn(producer::run(
                link,
                plan,
                control.clone(),
                stats,
            ))));
        }
        Ok(Fleet {
            control,
            producers,
            consumers,
            collector: Collector::new(agents, started),
            started,
        })
    }

    /// Collects the tasks that ended; the first failure ends the run with its error.
    pub async fn poll(&mut self) -> Result<Progress, PerfError> {
        for task in self.producers.iter_mut().chain(self.consumers.iter_mut()) {
            if task.as_ref().is_some_and(JoinHandle::is_finished) {
                if let Some(handle) = task.take() {
                    join(handle).await?;
                }
            }
        }
        Ok(Progress {
            producers_running: self.producers.iter().flatten().count(),
            consumers_running: self.consumers.iter().flatten().count(),
        })
    }

    /// Stops every task and waits (bounded) for them to close their connections.
    pub async fn shut_down(mut self) {
        self.control.stop();
        let deadline = Instant::now() + STOP_GRACE;
        for task in self.producers.iter_mut().chain(self.consumers.iter_mut()) {
            if let Some(mut handle) = task.take() {
                if tokio::time::timeout_at(deadline, &mut handle)
                    .await
                    .is_err()
                {
                    handle.abort();
                }
            }
        }
    }

    /// Ends the current interval: its sample.
    pub fn sample(&mut self, now: Instant, shape: Shape) -> Sample {
        let interval = self.collector.take(now);
        Sample {
            time_s: interval.elapsed,
            interval_s: interval.seconds,
            counts: interval.delta,
            rates: interval.delta.rates(interval.seconds),
            consumer_latency_us: percentiles(&self.collector.interval_consumer),
            confirm_latency_us: shape
                .confirms
                .then(|| percentiles(&self.collector.interval_confirm)),
        }
    }

    /// The whole run up to `stopped_at` (folds the last, partial interval into the totals).
    pub fn summary(&mut self, stopped_at: Instant, shape: Shape) -> Summary {
        self.collector.take(stopped_at);
        let totals = self.collector.totals();
        let duration_s = stopped_at.duration_since(self.started).as_secs_f64();
        let rates = totals.rates(duration_s);
        Summary {
            duration_s,
            totals,
            sending_rate_avg: rates.sent,
            receiving_rate_avg: rates.received,
            consumer_latency_us: percentiles(&self.collector.total_consumer),
            confirm_latency_us: shape
                .confirms
                .then(|| percentiles(&self.collector.total_confirm)),
            tool_cpu_s: crate::cpu::process_cpu_seconds(),
        }
    }
}

/// Opens every consumer connection, each consuming on its channels.
async fn open_consumers<D: Driver>(
    driver: &D,
    options: &RunOptions,
    topology: &Topology,
    out: &mut (dyn Write + Send),
) -> Result<Vec<D::Consumer>, PerfError> {
    let per = usize::from(options.consumer_channels);
    let mut links = Vec::with_capacity(options.consumers as usize);
    for c in 0..options.consumers as usize {
        say(out, &format!("id: {}, starting consumer #{c}", options.id));
        let sources = (c * per..(c + 1) * per)
            .map(|j| topology.source(j).clone())
            .collect();
        let setup = ConsumerSetup {
            sources,
            prefetch: options.qos,
            autoack: options.autoack,
            arguments: options.consumer_args.clone(),
            queue_arguments: topology.queue_arguments.clone(),
        };
        links.push(driver.open_consumer(setup).await?);
    }
    Ok(links)
}

/// Opens every producer connection with its publishing channels.
async fn open_producers<D: Driver>(
    driver: &D,
    options: &RunOptions,
    topology: &Topology,
    out: &mut (dyn Write + Send),
) -> Result<Vec<D::Publisher>, PerfError> {
    let per = usize::from(options.producer_channels);
    let mut links = Vec::with_capacity(options.producers as usize);
    for p in 0..options.producers as usize {
        say(out, &format!("id: {}, starting producer #{p}", options.id));
        let keys = (p * per..(p + 1) * per)
            .map(|i| topology.routing_key(i).to_owned())
            .collect();
        let setup = PublisherSetup {
            exchange: topology.exchange.clone(),
            routing_keys: keys,
            body_size: options.size,
            persistent: options.persistent,
            mandatory: options.mandatory,
            confirm: options.confirm.is_some(),
            random_routing_key: options.random_routing_key,
        };
        links.push(driver.open_publisher(setup).await?);
    }
    Ok(links)
}

async fn join(handle: JoinHandle<Result<(), PerfError>>) -> Result<(), PerfError> {
    match handle.await {
        Ok(result) => result,
        Err(error) if error.is_panic() => {
            Err(PerfError::Protocol(format!("a task panicked: {error}")))
        }
        Err(_) => Ok(()),
    }
}

fn consumer_plan(options: &RunOptions) -> ConsumerPlan {
    ConsumerPlan {
        channels: usize::from(options.consumer_channels),
        messages: options.consumer_messages,
        rate: options.consumer_rate,
        autoack: options.autoack,
        multi_ack_every: options.multi_ack_every,
        verify_order: options.verify_order,
    }
}

fn producer_plan(options: &RunOptions, producer: usize) -> ProducerPlan {
    let channels = usize::from(options.producer_channels);
    ProducerPlan {
        first_id: (producer * channels) as u32,
        channels,
        messages: options.producer_messages,
        confirm_window: options.confirm,
    }
}

/// Prints a line of the run's output.
pub fn say(out: &mut (dyn Write + Send), line: &str) {
    // a closed stdout (`| head`) must not stop the run: its JSON and chart still get written
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The shape of a run's lines.
pub fn shape(options: &RunOptions) -> Shape {
    Shape {
        returned: options.mandatory,
        confirms: options.confirm.is_some(),
    }
}

/// Runs the conductor's loop until `until`, Ctrl-C, a task failure or (when `finish` is given)
/// the end conditions of `-C`/`-D`. Every interval's sample is printed, added to the report and
/// handed to `on_sample` with the collector (whose `interval_*` histograms are that sample's).
pub async fn drive(
    fleet: &mut Fleet,
    options: &RunOptions,
    until: Instant,
    finish: bool,
    out: &mut (dyn Write + Send),
    report: &mut Report,
    on_sample: &mut (dyn FnMut(&Sample, &Collector) + Send),
) -> Result<Stop, PerfError> {
    let shape = shape(options);
    let mut next_tick = fleet.collector_last_tick() + options.interval;
    let mut quiet = Quiet::default();
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    loop {
        let wake = next_tick.min(until).min(Instant::now() + POLL_INTERVAL);
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = &mut interrupt => return Ok(Stop::Interrupted),
        }
        let now = Instant::now();
        if now >= next_tick {
            let sample = fleet.sample(now, shape);
            say(out, &sample.line(&options.id, shape));
            on_sample(&sample, &fleet.collector);
            report.samples.push(sample);
            next_tick += options.interval;
            if next_tick <= now {
                next_tick = now + options.interval;
            }
        }
        let progress = fleet.poll().await?;
        if now >= until {
            return Ok(Stop::Deadline);
        }
        if finish
            && finished(
                options,
                progress,
                fleet.collector.peek().received,
                &mut quiet,
                now,
            )
        {
            return Ok(Stop::Finished);
        }
    }
}

impl Fleet {
    /// When the current interval started.
    fn collector_last_tick(&self) -> Instant {
        self.collector.last_at()
    }
}

/// Tracks when the received count last moved.
#[derive(Default)]
struct Quiet {
    received: u64,
    since: Option<Instant>,
}

/// The end conditions without `-z`: every producer sent its `-C` messages and the consumers
/// have theirs (`-D`) or went quiet; or every consumer has its `-D` messages.
fn finished(
    options: &RunOptions,
    progress: Progress,
    received: u64,
    quiet: &mut Quiet,
    now: Instant,
) -> bool {
    if received != quiet.received || quiet.since.is_none() {
        quiet.received = received;
        quiet.since = Some(now);
    }
    let producers_done = options.producers == 0 || progress.producers_running == 0;
    let consumers_done = options.consumers > 0 && progress.consumers_running == 0;
    if options.producers == 0 && options.consumers == 0 {
        return true;
    }
    if options.consumer_messages > 0 && consumers_done {
        return true;
    }
    let producers_limited = options.producer_messages > 0 || options.producers == 0;
    if !(producers_limited && producers_done && options.producers > 0) {
        return false;
    }
    let quiet_long = quiet
        .since
        .is_some_and(|since| now.duration_since(since) >= QUIET_END);
    options.consumers == 0 || consumers_done || (options.consumer_messages == 0 && quiet_long)
}

/// A load run: start, drive until the end, summarise.
pub async fn load<D: Driver>(
    driver: &D,
    options: &RunOptions,
    out: &mut (dyn Write + Send),
    report: &mut Report,
) -> Result<(), PerfError> {
    let topology = Topology::new(options, &random_routing_key(&options.id));
    driver.prepare(&topology).await?;
    let mut fleet = Fleet::start(driver, options, &topology, options.rate, out).await?;
    let until = fleet.started + options.run_time();
    let result = drive(
        &mut fleet,
        options,
        until,
        true,
        out,
        report,
        &mut |_, _| {},
    )
    .await;
    let stopped_at = Instant::now();
    fleet.control.stop();
    let summary = fleet.summary(stopped_at, shape(options));
    fleet.shut_down().await;
    let stop = result?;
    say(
        out,
        &format!("id: {}, test stopped ({})", options.id, stop.reason()),
    );
    for line in summary.lines(&options.id) {
        say(out, &line);
    }
    report.summary = summary;
    Ok(())
}

/// The routing key used when neither `-k` nor queue names give one: unique per run.
pub fn random_routing_key(id: &str) -> String {
    format!(
        "warren-perf-{id}-{:x}",
        crate::clock::now_ns() ^ u64::from(std::process::id())
    )
}
