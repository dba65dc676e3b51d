//! Crash safety of the message store, tested from outside: the `warren` binary runs as a child
//! process on a temporary data dir, lapin clients load it, and the test kills it with SIGKILL
//! (`Child::kill`) at a random moment, restarts it on the same data dir and checks what came back
//! against a model of what the clients were told.
//!
//! `confirmed_messages_survive_kill_9` proves, over several kill/restart rounds with publishers,
//! consumers and acks in flight, that
//! 1. every message whose publisher confirm (basic.ack) arrived is still there after the crash,
//!    unless a consumer acked it;
//! 2. a message whose ack was followed by an answered synchronous method on the same channel
//!    (a passive queue.declare, the "fence") never comes back;
//! 3. a confirmed message that was delivered and not acked comes back, and every message that
//!    comes back after having been delivered carries `redelivered = true`;
//! 4. per queue, each publisher's messages stay in publish order (requeues go back in place);
//! 5. nothing comes back that was never published, and nothing comes back twice.
//!
//! Acks sent without a completed fence are "maybe acked": the message may or may not come back.
//! Unconfirmed messages may or may not survive (delivered or not), but a message that is absent
//! after one restart must never reappear, and one that was found after a restart is on disk and
//! counts as confirmed from then on. The verification consumes every message without acking and
//! closes the channel, so the scanned messages are delivered-not-acked in the next round.
//!
//! `corrupt_segment_tail_is_skipped_with_a_log_line` proves that a record whose bytes were
//! damaged on disk (one flipped byte in a body; a torn last record) is skipped at startup with a
//! WARN line naming the segment file and the byte offset, that the broker still starts, and that
//! only the damaged records are lost.
//!
//! Reproduce a run with `WARREN_CRASH_SEED=<seed>` (the seed only drives the kill delays; thread
//! scheduling still varies). `WARREN_CRASH_SELF_CHECK=1` checks the oracle itself: clients stop
//! gracefully and the broker is not killed, so every assertion must hold even for a broker that
//! keeps messages in memory only.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, PublisherConfirm};

/// How long any single client step (connect, declare, publish, confirm, delivery) may take.
const STEP: Duration = Duration::from_secs(5);
/// How long a started broker may take to log "listening on".
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// After a verification scan got `message_count` messages, how long it waits for any extra.
const SCAN_IDLE: Duration = Duration::from_millis(150);

// ---------------------------------------------------------------------------------------------
// The broker as a child process
// ---------------------------------------------------------------------------------------------

/// A `warren server` child process. Dropping it kills it (SIGKILL), so a failing test never
/// leaves a broker behind; when the test is panicking the tail of its log is printed.
struct BrokerProcess {
    child: Child,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl BrokerProcess {
    /// Starts `warren server` on a free port and `data_dir`; returns once it logged that it is
    /// listening (stdout, where tracing writes) and a TCP connect succeeds.
    async fn start(data_dir: &Path) -> BrokerProcess {
        let port = free_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_warren"))
            .arg("server")
            .args([
                "--amqp-port",
                &port.to_string(),
                "--bind-address",
                "127.0.0.1",
                // Free ports: tests run in parallel, each with its own broker.
                "--http-port",
                "0",
                "--prometheus-port",
                "0",
            ])
            .arg("--data-dir")
            .arg(data_dir)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the warren binary");
        let log = Arc::new(Mutex::new(Vec::new()));
        collect_lines(child.stdout.take().expect("piped stdout"), log.clone(), "");
        collect_lines(
            child.stderr.take().expect("piped stderr"),
            log.clone(),
            "stderr: ",
        );
        let mut broker = BrokerProcess { child, port, log };
        broker.wait_ready().await;
        broker
    }

    async fn wait_ready(&mut self) {
        let started = Instant::now();
        loop {
            let listening = lock(&self.log)
                .iter()
                .any(|line| line.contains("listening on"));
            if listening {
                let connect = tokio::net::TcpStream::connect(("127.0.0.1", self.port));
                if let Ok(Ok(_)) = tokio::time::timeout(STEP, connect).await {
                    return;
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "warren exited during startup ({status}); log:\n{}",
                    self.log_lines().join("\n")
                );
            }
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "warren did not listen on port {} within {READY_TIMEOUT:?}; log:\n{}",
                self.port,
                self.log_lines().join("\n")
            );
            // Readiness polling, not a correctness sleep.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// SIGKILL, then reap the process so the next broker finds the data dir unused.
    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL the broker");
        self.child.wait().expect("reap the killed broker");
    }

    fn log_lines(&self) -> Vec<String> {
        lock(&self.log).clone()
    }

    fn warnings(&self) -> Vec<String> {
        let lines = self.log_lines();
        lines
            .into_iter()
            .filter(|line| line.contains("WARN"))
            .collect()
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let lines = self.log_lines();
            let tail = &lines[lines.len().saturating_sub(40)..];
            eprintln!("--- broker on port {} log (last lines) ---", self.port);
            for line in tail {
                eprintln!("{line}");
            }
        }
    }
}

/// Copies the lines of a child's stream into `log` on a thread of its own (it ends at EOF).
fn collect_lines(stream: impl Read + Send + 'static, log: Arc<Mutex<Vec<String>>>, tag: &str) {
    let tag = tag.to_owned();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            lock(&log).push(format!("{tag}{line}"));
        }
    });
}

/// A port that was free a moment ago (bind port 0, read it, close the listener).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

/// Locks a mutex, ignoring poisoning (a panicking test task must not hide the real failure).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Bounded client steps
// ---------------------------------------------------------------------------------------------

/// Awaits a lapin step for at most [`STEP`]; panics naming `what` on error or timeout.
async fn must<T>(what: impl fmt::Display, step: impl Future<Output = lapin::Result<T>>) -> T {
    match tokio::time::timeout(STEP, step).await {
        Ok(Ok(value)) => value,
        Ok(Err(error)) => panic!("{what}: {error}"),
        Err(_) => panic!("{what}: no answer within {STEP:?}"),
    }
}

/// Awaits a lapin step for at most [`STEP`]; `None` on error or timeout. Load clients use it:
/// the broker dies under them, which is expected.
async fn attempt<T>(step: impl Future<Output = lapin::Result<T>>) -> Option<T> {
    tokio::time::timeout(STEP, step).await.ok()?.ok()
}

fn connect(url: &str) -> impl Future<Output = lapin::Result<Connection>> + '_ {
    Connection::connect(url, ConnectionProperties::default())
}

fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..Default::default()
    }
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

async fn declare_durable(channel: &Channel, queue: &str) {
    let options = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let declare = channel.queue_declare(queue.into(), options, FieldTable::default());
    must(format!("declare durable queue {queue}"), declare).await;
}

/// Every message in `queue`, in order, with its redelivered flag: consumes with manual ack
/// until the passive declare's `message_count` arrived (and a short idle wait shows no more),
/// acks nothing, and closes the channel, which requeues them all in place.
async fn scan_queue(connection: &Connection, queue: &str, what: &str) -> Vec<(Vec<u8>, bool)> {
    let channel = must(
        format!("{what}: open a channel"),
        connection.create_channel(),
    )
    .await;
    let declare = channel.queue_declare(queue.into(), passive(), FieldTable::default());
    let expected = must(format!("{what}: queue {queue} exists"), declare)
        .await
        .message_count();
    let consume = channel.basic_consume(
        queue.into(),
        "".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    );
    let mut consumer = must(format!("{what}: consume from {queue}"), consume).await;
    let mut seen = Vec::new();
    while seen.len() < expected as usize {
        match tokio::time::timeout(STEP, consumer.next()).await {
            Ok(Some(Ok(delivery))) => seen.push((delivery.data, delivery.redelivered)),
            Ok(Some(Err(error))) => panic!(
                "{what}: queue {queue}: consumer failed after {} of {expected} messages: {error}",
                seen.len()
            ),
            Ok(None) => panic!(
                "{what}: queue {queue}: consumer ended after {} of {expected} messages",
                seen.len()
            ),
            Err(_) => panic!(
                "{what}: queue {queue}: declare-ok said {expected} messages, {} arrived in {STEP:?}",
                seen.len()
            ),
        }
    }
    while let Ok(Some(Ok(delivery))) = tokio::time::timeout(SCAN_IDLE, consumer.next()).await {
        seen.push((delivery.data, delivery.redelivered));
    }
    must(
        format!("{what}: close the scan channel"),
        channel.close(200, "OK".into()),
    )
    .await;
    seen
}

// ---------------------------------------------------------------------------------------------
// Test 1: kill -9 under load, many rounds
// ---------------------------------------------------------------------------------------------

const QUEUES: usize = 2;
const PUBLISHERS: usize = 3;
const ROUNDS: usize = 10;
/// Publishes in flight (unconfirmed) per publisher.
const CONFIRM_WINDOW: usize = 16;
/// Publishes per publisher per round, and messages alive in the model at most: they keep the
/// verification scans short with a debug build.
const PUBLISH_BUDGET: usize = 5000;
const LIVE_CAP: usize = 2000;
const PREFETCH: u16 = 50;
/// A consumer holds every third delivery unacked; at this many it fences and closes its
/// channel (the held ones are requeued) and starts over on a new channel.
const HOLD_LIMIT: usize = 30;
/// A consumer fences after this many acks (and whenever it is idle with unfenced acks).
const FENCE_EVERY: usize = 25;
const CONSUMER_IDLE: Duration = Duration::from_millis(100);
/// Bound on the whole test (a debug build takes a fraction of it).
const TEST1_LIMIT: Duration = Duration::from_secs(90);
/// How long the load clients get to notice the dead broker and return.
const WIND_DOWN: Duration = Duration::from_secs(15);
const BODY_LEN: usize = 48;

fn queue_name(queue: usize) -> String {
    format!("crash-q{queue}")
}

/// A published message: its queue, publisher and the publisher's sequence number (which keeps
/// growing across rounds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct MsgId {
    queue: usize,
    publisher: usize,
    seq: u64,
}

impl fmt::Display for MsgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "q{}/p{}/#{}", self.queue, self.publisher, self.seq)
    }
}

fn body_of(id: MsgId) -> Vec<u8> {
    let mut body = format!("crash q{} p{} s{:010} ", id.queue, id.publisher, id.seq).into_bytes();
    body.resize(BODY_LEN, b'~');
    body
}

/// The id a body encodes, if it is exactly a body the test builds.
fn parse_body(data: &[u8]) -> Option<MsgId> {
    let text = std::str::from_utf8(data).ok()?;
    let mut fields = text.split(' ');
    if fields.next()? != "crash" {
        return None;
    }
    let queue = fields.next()?.strip_prefix('q')?.parse().ok()?;
    let publisher = fields.next()?.strip_prefix('p')?.parse().ok()?;
    let seq = fields.next()?.strip_prefix('s')?.parse().ok()?;
    let id = MsgId {
        queue,
        publisher,
        seq,
    };
    (body_of(id) == data).then_some(id)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ack {
    No,
    /// Sent, no fence answered since: the message may or may not come back.
    Maybe,
    /// Sent, and a later synchronous method on its channel was answered: must not come back.
    Known,
}

/// What the clients know about one published message.
#[derive(Debug)]
struct Record {
    /// Its publisher confirm was an ack, or it was found after a restart (so it is on disk).
    confirmed: bool,
    /// A consumer (or a verification scan) received it; the next delivery must be flagged
    /// redelivered.
    delivered: bool,
    ack: Ack,
    /// Absent after a restart (lost unconfirmed, or acked): it must never come back.
    gone: bool,
}

#[derive(Default)]
struct RoundStats {
    published: usize,
    confirmed: usize,
    nacked: usize,
    known_acked: usize,
    deliveries: usize,
}

struct Model {
    records: HashMap<MsgId, Record>,
    next_seq: Vec<u64>,
    /// Records neither gone nor known acked (bounds the queues' length).
    live: usize,
    violations: Vec<String>,
    stats: RoundStats,
}

impl Model {
    fn new() -> Model {
        Model {
            records: HashMap::new(),
            next_seq: vec![0; PUBLISHERS],
            live: 0,
            violations: Vec::new(),
            stats: RoundStats::default(),
        }
    }

    /// Registers the publisher's next message (before it is sent); `None` while the queues
    /// hold enough.
    fn publish(&mut self, publisher: usize) -> Option<MsgId> {
        if self.live >= LIVE_CAP {
            return None;
        }
        let seq = self.next_seq[publisher];
        self.next_seq[publisher] += 1;
        let id = MsgId {
            queue: (seq % QUEUES as u64) as usize,
            publisher,
            seq,
        };
        let record = Record {
            confirmed: false,
            delivered: false,
            ack: Ack::No,
            gone: false,
        };
        self.records.insert(id, record);
        self.live += 1;
        self.stats.published += 1;
        Some(id)
    }

    fn confirmation(&mut self, id: MsgId, ack: bool) {
        let record = self
            .records
            .get_mut(&id)
            .expect("confirmed ids were published");
        if ack {
            record.confirmed = true;
            self.stats.confirmed += 1;
        } else {
            self.stats.nacked += 1;
        }
    }

    /// A consumer of `queue` received `data`; checks it against the model. Returns its id when
    /// it is a message the test published.
    fn delivered(&mut self, queue: usize, data: &[u8], redelivered: bool) -> Option<MsgId> {
        self.stats.deliveries += 1;
        let Some(id) = parse_body(data) else {
            let body = String::from_utf8_lossy(data).into_owned();
            self.violation(format!(
                "consumer of queue {queue} got an unknown body {body:?}"
            ));
            return None;
        };
        if id.queue != queue {
            self.violation(format!(
                "consumer of queue {queue} got {id}, sent to another queue"
            ));
        }
        let Some(record) = self.records.get_mut(&id) else {
            self.violation(format!(
                "consumer of queue {queue} got {id}, never published"
            ));
            return None;
        };
        let mut problems = Vec::new();
        if record.gone {
            problems.push(format!(
                "{id} was delivered, but was absent after an earlier restart"
            ));
        }
        if record.ack == Ack::Known {
            problems.push(format!("{id} was delivered again after its ack was fenced"));
        }
        if record.delivered && !redelivered {
            problems.push(format!("{id} was delivered again with redelivered = false"));
        }
        record.delivered = true;
        if record.ack == Ack::Maybe {
            record.ack = Ack::No;
        }
        for problem in problems {
            self.violation(problem);
        }
        Some(id)
    }

    /// Called before the ack is sent: from then on the broker may have it.
    fn ack_sent(&mut self, id: MsgId) {
        if let Some(record) = self.records.get_mut(&id) {
            record.ack = Ack::Maybe;
        }
    }

    /// A fence on the channel that sent these acks was answered.
    fn acks_fenced(&mut self, ids: &[MsgId]) {
        for id in ids {
            if let Some(record) = self.records.get_mut(id) {
                if record.ack == Ack::Maybe {
                    record.ack = Ack::Known;
                    self.live -= 1;
                    self.stats.known_acked += 1;
                }
            }
        }
    }

    fn violation(&mut self, text: String) {
        self.violations.push(text);
    }
}

/// What the verification after a restart found, beyond the violations.
#[derive(Default)]
struct Verdict {
    present: Vec<usize>,
    violations: Vec<String>,
    unconfirmed_lost: usize,
    delivered_unconfirmed_lost: usize,
    maybe_acked_gone: usize,
    maybe_acked_back: usize,
}

impl Model {
    /// Checks the queues' contents after a restart (assertions 1 to 5) and moves the model on:
    /// present messages are on disk, delivered and not acked; absent ones are gone for good.
    fn verify(&mut self, scans: &[Vec<(Vec<u8>, bool)>]) -> Verdict {
        let mut verdict = Verdict {
            violations: std::mem::take(&mut self.violations),
            ..Default::default()
        };
        let mut present = HashSet::new();
        for (queue, scan) in scans.iter().enumerate() {
            verdict.present.push(scan.len());
            self.check_scan(queue, scan, &mut present, &mut verdict.violations);
        }
        let mut ids: Vec<MsgId> = self.records.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let record = self.records.get_mut(&id).expect("listed id");
            if record.gone {
                continue;
            }
            if present.contains(&id) {
                verdict.maybe_acked_back += usize::from(record.ack == Ack::Maybe);
                record.confirmed = true;
                record.delivered = true;
                record.ack = Ack::No;
                continue;
            }
            match (record.ack, record.confirmed) {
                (Ack::No, true) => verdict.violations.push(format!(
                    "confirmed message {id} is lost (never acked; delivered to a consumer: {})",
                    record.delivered
                )),
                (Ack::No, false) => {
                    verdict.unconfirmed_lost += 1;
                    verdict.delivered_unconfirmed_lost += usize::from(record.delivered);
                }
                (Ack::Maybe, _) => verdict.maybe_acked_gone += 1,
                (Ack::Known, _) => {}
            }
            record.gone = true;
        }
        self.live = present.len();
        verdict
    }

    fn check_scan(
        &self,
        queue: usize,
        scan: &[(Vec<u8>, bool)],
        present: &mut HashSet<MsgId>,
        violations: &mut Vec<String>,
    ) {
        let mut last_seq: HashMap<usize, MsgId> = HashMap::new();
        for (position, (data, redelivered)) in scan.iter().enumerate() {
            let Some(id) = parse_body(data) else {
                let body = String::from_utf8_lossy(data);
                violations.push(format!(
                    "queue {queue} position {position}: unknown body {body:?}"
                ));
                continue;
            };
            let at = format!("{id} (queue {queue} position {position})");
            if id.queue != queue {
                violations.push(format!("{at} was published to another queue"));
            }
            if !present.insert(id) {
                violations.push(format!("{at} is a duplicate"));
                continue;
            }
            match self.records.get(&id) {
                None => violations.push(format!("{at} was never published")),
                Some(record) => {
                    if record.gone {
                        violations.push(format!("{at} came back after an earlier restart lost it"));
                    }
                    if record.ack == Ack::Known {
                        violations.push(format!("{at} is present although its ack was fenced"));
                    }
                    if record.delivered && !redelivered {
                        violations.push(format!("{at} was delivered before, redelivered = false"));
                    }
                }
            }
            if let Some(previous) = last_seq.insert(id.publisher, id) {
                if previous.seq >= id.seq {
                    violations.push(format!("{at} comes after {previous}: order broken"));
                }
            }
        }
    }
}

/// Settles the oldest in-flight publish; `None` when the broker is gone.
async fn settle(model: &Mutex<Model>, (id, confirm): (MsgId, PublisherConfirm)) -> Option<()> {
    let confirmation = attempt(confirm).await?;
    lock(model).confirmation(id, confirmation.is_ack());
    Some(())
}

/// Publishes persistent messages to the queues in turn with confirms, up to the round budget.
async fn publish_loop(
    connection: &Connection,
    publisher: usize,
    model: &Mutex<Model>,
    stop: &AtomicBool,
) -> Option<()> {
    let channel = attempt(connection.create_channel()).await?;
    attempt(channel.confirm_select(ConfirmSelectOptions::default())).await?;
    let mut in_flight = VecDeque::new();
    let mut sent = 0;
    while !stop.load(Ordering::Relaxed) && sent < PUBLISH_BUDGET {
        if in_flight.len() >= CONFIRM_WINDOW {
            settle(model, in_flight.pop_front()?).await?;
            continue;
        }
        let next = lock(model).publish(publisher);
        let Some(id) = next else {
            match in_flight.pop_front() {
                Some(oldest) => settle(model, oldest).await?,
                // The queues are full enough: let the consumers catch up.
                None => tokio::time::sleep(Duration::from_millis(10)).await,
            }
            continue;
        };
        let body = body_of(id);
        let publish = channel.basic_publish(
            "".into(),
            queue_name(id.queue).as_str().into(),
            BasicPublishOptions::default(),
            &body,
            persistent(),
        );
        in_flight.push_back((id, attempt(publish).await?));
        sent += 1;
    }
    while let Some(oldest) = in_flight.pop_front() {
        settle(model, oldest).await?;
    }
    Some(())
}

async fn publisher(url: String, publisher: usize, model: Arc<Mutex<Model>>, stop: Arc<AtomicBool>) {
    let Some(connection) = attempt(connect(&url)).await else {
        return;
    };
    let _ = publish_loop(&connection, publisher, &model, &stop).await;
    let _ = attempt(connection.close(200, "OK".into())).await;
}

/// Sends a passive queue.declare on the channel that sent `acks`; once it is answered they
/// are known acked.
async fn fence(channel: &Channel, queue: usize, acks: &mut Vec<MsgId>, model: &Mutex<Model>) {
    if acks.is_empty() {
        return;
    }
    let declare = channel.queue_declare(
        queue_name(queue).as_str().into(),
        passive(),
        FieldTable::default(),
    );
    if attempt(declare).await.is_some() {
        lock(model).acks_fenced(acks);
        acks.clear();
    }
}

/// One channel's life: consume with a prefetch, ack two deliveries of three, fence now and
/// then; once it holds [`HOLD_LIMIT`] unacked deliveries, fence and close the channel (which
/// requeues them). `None` when the connection failed.
async fn consume_cycle(
    connection: &Connection,
    queue: usize,
    model: &Mutex<Model>,
    stop: &AtomicBool,
) -> Option<()> {
    let channel = attempt(connection.create_channel()).await?;
    attempt(channel.basic_qos(PREFETCH, BasicQosOptions::default())).await?;
    let consume = channel.basic_consume(
        queue_name(queue).as_str().into(),
        "".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    );
    let mut consumer = attempt(consume).await?;
    let (mut acks, mut held, mut count) = (Vec::new(), 0, 0u64);
    while !stop.load(Ordering::Relaxed) && held < HOLD_LIMIT {
        let delivery = match tokio::time::timeout(CONSUMER_IDLE, consumer.next()).await {
            Err(_) => {
                fence(&channel, queue, &mut acks, model).await;
                continue;
            }
            Ok(Some(Ok(delivery))) => delivery,
            Ok(_) => return None,
        };
        count += 1;
        let id = lock(model).delivered(queue, &delivery.data, delivery.redelivered);
        let Some(id) = id.filter(|_| count % 3 != 0) else {
            held += 1;
            continue;
        };
        lock(model).ack_sent(id);
        if !attempt(delivery.acker.ack(BasicAckOptions::default())).await? {
            return None;
        }
        acks.push(id);
        if acks.len() >= FENCE_EVERY {
            fence(&channel, queue, &mut acks, model).await;
        }
    }
    fence(&channel, queue, &mut acks, model).await;
    acks.is_empty().then_some(())?;
    attempt(channel.close(200, "OK".into())).await
}

async fn consumer(url: String, queue: usize, model: Arc<Mutex<Model>>, stop: Arc<AtomicBool>) {
    let Some(connection) = attempt(connect(&url)).await else {
        return;
    };
    while !stop.load(Ordering::Relaxed) {
        if consume_cycle(&connection, queue, &model, &stop)
            .await
            .is_none()
        {
            break;
        }
    }
    let _ = attempt(connection.close(200, "OK".into())).await;
}

/// Waits for the load tasks to return; aborts the ones that do not within [`WIND_DOWN`].
async fn wind_down(tasks: Vec<tokio::task::JoinHandle<()>>, round: usize) {
    let deadline = tokio::time::Instant::now() + WIND_DOWN;
    for mut task in tasks {
        match tokio::time::timeout_at(deadline, &mut task).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => panic!("round {round}: a load task failed: {error}"),
            Err(_) => {
                eprintln!("round {round}: a load task did not stop within {WIND_DOWN:?}; aborted");
                task.abort();
            }
        }
    }
}

fn spawn_load(
    url: &str,
    model: &Arc<Mutex<Model>>,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for queue in 0..QUEUES {
        let client = consumer(url.to_owned(), queue, model.clone(), stop.clone());
        tasks.push(tokio::spawn(client));
    }
    for id in 0..PUBLISHERS {
        let client = publisher(url.to_owned(), id, model.clone(), stop.clone());
        tasks.push(tokio::spawn(client));
    }
    tasks
}

fn env_seed() -> u64 {
    match std::env::var("WARREN_CRASH_SEED") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("WARREN_CRASH_SEED={text:?} is not a u64")),
        Err(_) => fastrand::u64(..),
    }
}

fn report(round: usize, seed: u64, stop: &str, model: &Model, verdict: &Verdict) {
    let stats = &model.stats;
    eprintln!(
        "round {round} (seed {seed}, {stop}): published {}, confirmed {}, \
         nacked {}, deliveries {}, known-acked {}; after restart present {:?}, unconfirmed \
         lost {} (of them delivered {}), maybe-acked gone {} / back {}",
        stats.published,
        stats.confirmed,
        stats.nacked,
        stats.deliveries,
        stats.known_acked,
        verdict.present,
        verdict.unconfirmed_lost,
        verdict.delivered_unconfirmed_lost,
        verdict.maybe_acked_gone,
        verdict.maybe_acked_back,
    );
}

fn fail_round(round: usize, seed: u64, violations: &[String]) -> ! {
    let shown = violations.len().min(25);
    panic!(
        "round {round} (seed {seed}, rerun with WARREN_CRASH_SEED={seed}): {} violation(s) of \
         the store's contract:\n  {}{}",
        violations.len(),
        violations[..shown].join("\n  "),
        if shown < violations.len() {
            format!("\n  ... and {} more", violations.len() - shown)
        } else {
            String::new()
        }
    );
}

/// One round: load, kill -9 after `delay` (or a graceful stop in self-check mode), restart,
/// scan. Returns the broker to use next.
async fn crash_round(
    broker: BrokerProcess,
    data_dir: &Path,
    model: &Arc<Mutex<Model>>,
    round: usize,
    delay: u64,
    self_check: bool,
) -> (BrokerProcess, Vec<Vec<(Vec<u8>, bool)>>) {
    lock(model).stats = RoundStats::default();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = spawn_load(&broker.url(), model, &stop);
    // Not a correctness sleep: it lets the load run until the kill.
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let mut broker = broker;
    if self_check {
        stop.store(true, Ordering::Relaxed);
        wind_down(tasks, round).await;
    } else {
        broker.kill();
        stop.store(true, Ordering::Relaxed);
        wind_down(tasks, round).await;
        drop(broker);
        broker = BrokerProcess::start(data_dir).await;
    }
    let what = format!("round {round} verification");
    let connection = must(format!("{what}: connect"), connect(&broker.url())).await;
    let mut scans = Vec::new();
    for queue in 0..QUEUES {
        scans.push(scan_queue(&connection, &queue_name(queue), &what).await);
    }
    must(format!("{what}: close"), connection.close(200, "OK".into())).await;
    (broker, scans)
}

async fn crash_rounds(seed: u64) {
    let data_dir = tempfile::Builder::new()
        .prefix("warren-crash-")
        .tempdir()
        .expect("create a temporary data dir");
    let mut rng = fastrand::Rng::with_seed(seed);
    let self_check = std::env::var_os("WARREN_CRASH_SELF_CHECK").is_some();
    let mut broker = BrokerProcess::start(data_dir.path()).await;
    let connection = must("setup: connect", connect(&broker.url())).await;
    let channel = must("setup: open a channel", connection.create_channel()).await;
    for queue in 0..QUEUES {
        declare_durable(&channel, &queue_name(queue)).await;
    }
    must("setup: close", connection.close(200, "OK".into())).await;
    let model = Arc::new(Mutex::new(Model::new()));
    for round in 0..ROUNDS {
        let delay = rng.u64(200..=1500);
        let (next, scans) =
            crash_round(broker, data_dir.path(), &model, round, delay, self_check).await;
        broker = next;
        let mut model = lock(&model);
        let verdict = model.verify(&scans);
        let stop = if self_check {
            "graceful stop (self-check)"
        } else {
            "kill -9"
        };
        report(
            round,
            seed,
            &format!("{stop} after {delay} ms"),
            &model,
            &verdict,
        );
        for line in broker.warnings().iter().take(10) {
            eprintln!("round {round}: broker log: {line}");
        }
        if !verdict.violations.is_empty() {
            fail_round(round, seed, &verdict.violations);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_messages_survive_kill_9() {
    let seed = env_seed();
    eprintln!("confirmed_messages_survive_kill_9: seed {seed} (set WARREN_CRASH_SEED to reuse)");
    let started = Instant::now();
    let finished = tokio::time::timeout(TEST1_LIMIT, crash_rounds(seed)).await;
    assert!(
        finished.is_ok(),
        "seed {seed}: the crash rounds did not finish within {TEST1_LIMIT:?}"
    );
    eprintln!("{ROUNDS} rounds in {:?}", started.elapsed());
}

// ---------------------------------------------------------------------------------------------
// Test 2: damaged segment files
// ---------------------------------------------------------------------------------------------

const CORRUPT_QUEUE: &str = "crash-corrupt";
const CORRUPT_COUNT: usize = 200;
/// The message whose body gets one byte flipped.
const CORRUPT_VICTIM: usize = 100;
const CORRUPT_BODY_LEN: usize = 100;
const CORRUPT_PREFIX: &[u8] = b"crash-test-msg-";
const TEST2_LIMIT: Duration = Duration::from_secs(60);

fn corrupt_body(index: usize) -> Vec<u8> {
    let mut body = format!("crash-test-msg-{index:05}-").into_bytes();
    body.resize(CORRUPT_BODY_LEN, b'=');
    body
}

/// A segment file's name and bytes.
struct Segment {
    path: PathBuf,
    bytes: Vec<u8>,
}

/// Where a body lies: segment index and byte offset in it.
#[derive(Clone, Copy, Debug)]
struct Place {
    segment: usize,
    at: usize,
}

/// The `.seg` files of `<data_dir>/store`, in name order (which is write order).
fn read_segments(data_dir: &Path) -> Vec<Segment> {
    let store = data_dir.join("store");
    let entries = std::fs::read_dir(&store).unwrap_or_else(|error| {
        panic!(
            "{} cannot be read ({error}) after {CORRUPT_COUNT} confirmed persistent messages and \
             kill -9: the broker keeps no message store on disk",
            store.display()
        )
    });
    let mut paths: Vec<PathBuf> = entries
        .map(|entry| entry.expect("read a store directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "seg"))
        .collect();
    assert!(
        !paths.is_empty(),
        "no .seg file in {} after {CORRUPT_COUNT} confirmed persistent messages and kill -9",
        store.display()
    );
    paths.sort();
    let read = |path: PathBuf| {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        Segment { path, bytes }
    };
    paths.into_iter().map(read).collect()
}

/// Where each test body is stored; each must be there verbatim exactly once.
fn locate_bodies(segments: &[Segment]) -> Vec<Place> {
    let mut places: Vec<Vec<Place>> = vec![Vec::new(); CORRUPT_COUNT];
    for (segment, file) in segments.iter().enumerate() {
        let bytes = &file.bytes;
        let mut from = 0;
        while let Some(found) = find(&bytes[from..], CORRUPT_PREFIX) {
            let at = from + found;
            from = at + 1;
            let digits = &bytes[at + CORRUPT_PREFIX.len()..bytes.len().min(at + 20)];
            let index = std::str::from_utf8(digits.get(..5).unwrap_or_default())
                .ok()
                .and_then(|text| text.parse::<usize>().ok());
            let Some(index) = index.filter(|&index| index < CORRUPT_COUNT) else {
                continue;
            };
            if bytes[at..].starts_with(&corrupt_body(index)) {
                places[index].push(Place { segment, at });
            }
        }
    }
    let describe = |index: usize, found: &Vec<Place>| -> Place {
        assert!(
            found.len() == 1,
            "message {index}'s body should be stored verbatim exactly once in the .seg files, \
             found {} times: {found:?}",
            found.len()
        );
        found[0]
    };
    places
        .iter()
        .enumerate()
        .map(|(i, found)| describe(i, found))
        .collect()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The byte range that must contain the offset a WARN line reports for the damaged record of
/// message `index`, whose bytes are damaged from `damaged_at` on: the record starts after the
/// previous body in the same file (or at 0), and at or before the damaged byte.
fn record_range(places: &[Place], index: usize, damaged_at: usize) -> (usize, usize) {
    let place = places[index];
    let low = match index.checked_sub(1).map(|before| places[before]) {
        Some(before) if before.segment == place.segment => before.at + CORRUPT_BODY_LEN,
        _ => 0,
    };
    (low, damaged_at + 1)
}

/// The numbers that follow the word `offset` in a log line (`offset=12`, `offset: 12`, ...).
fn offsets_in(line: &str) -> Vec<usize> {
    line.match_indices("offset")
        .filter_map(|(at, word)| {
            let rest = line[at + word.len()..].trim_start_matches([' ', '=', ':', '"']);
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// Asserts a WARN line names `file` and reports an offset in `low..high`.
fn expect_warning(warnings: &[String], file: &Path, (low, high): (usize, usize), what: &str) {
    let name = file
        .file_name()
        .expect("segment file name")
        .to_string_lossy();
    let found = warnings.iter().any(|line| {
        line.contains(name.as_ref())
            && offsets_in(line)
                .iter()
                .any(|offset| (low..high).contains(offset))
    });
    assert!(
        found,
        "no WARN line names {} with `offset` in {low}..{high} for {what}; WARN lines:\n{}",
        file.display(),
        warnings.join("\n")
    );
}

async fn publish_numbered(broker: &BrokerProcess) {
    let connection = must("connect", connect(&broker.url())).await;
    let channel = must("open a channel", connection.create_channel()).await;
    declare_durable(&channel, CORRUPT_QUEUE).await;
    must(
        "confirm.select",
        channel.confirm_select(ConfirmSelectOptions::default()),
    )
    .await;
    let mut confirms = Vec::new();
    for index in 0..CORRUPT_COUNT {
        let body = corrupt_body(index);
        let publish = channel.basic_publish(
            "".into(),
            CORRUPT_QUEUE.into(),
            BasicPublishOptions::default(),
            &body,
            persistent(),
        );
        confirms.push(must(format!("publish message {index}"), publish).await);
    }
    for (index, confirm) in confirms.into_iter().enumerate() {
        let confirmation = must(format!("confirm of message {index}"), confirm).await;
        assert!(
            confirmation.is_ack(),
            "message {index} was not confirmed: {confirmation:?}"
        );
    }
}

/// Flips a byte in the victim's body and tears the last record; returns the expected WARN
/// ranges: (flipped file, range) and (torn file, range).
fn damage(segments: &mut [Segment], places: &[Place]) -> [(PathBuf, (usize, usize)); 2] {
    let victim = places[CORRUPT_VICTIM];
    let file = &mut segments[victim.segment];
    let flip_at = victim.at + CORRUPT_BODY_LEN / 2;
    file.bytes[flip_at] ^= 0xff;
    std::fs::write(&file.path, &file.bytes).expect("write the flipped segment");
    let flipped = (
        file.path.clone(),
        record_range(places, CORRUPT_VICTIM, flip_at),
    );

    let last = CORRUPT_COUNT - 1;
    let torn = places[last];
    assert_eq!(
        torn.segment,
        segments.len() - 1,
        "the last message should be in the last segment file (names sort in write order)"
    );
    let file = &segments[torn.segment];
    let cut = torn.at + CORRUPT_BODY_LEN / 2;
    let handle = std::fs::OpenOptions::new()
        .write(true)
        .open(&file.path)
        .unwrap_or_else(|error| panic!("open {}: {error}", file.path.display()));
    handle
        .set_len(cut as u64)
        .expect("truncate the last segment");
    handle.sync_all().expect("sync the truncated segment");
    [
        flipped,
        (file.path.clone(), record_range(places, last, cut)),
    ]
}

async fn corrupt_scenario() {
    let data_dir = tempfile::Builder::new()
        .prefix("warren-corrupt-")
        .tempdir()
        .expect("create a temporary data dir");
    let mut broker = BrokerProcess::start(data_dir.path()).await;
    publish_numbered(&broker).await;
    broker.kill();
    drop(broker);

    let mut segments = read_segments(data_dir.path());
    let places = locate_bodies(&segments);
    let [flipped, torn] = damage(&mut segments, &places);

    let broker = BrokerProcess::start(data_dir.path()).await;
    let warnings = broker.warnings();
    expect_warning(&warnings, &flipped.0, flipped.1, "the flipped byte");
    expect_warning(&warnings, &torn.0, torn.1, "the torn last record");

    let connection = must("connect after the restart", connect(&broker.url())).await;
    let scan = scan_queue(&connection, CORRUPT_QUEUE, "after the restart").await;
    let got: Vec<String> = scan
        .iter()
        .map(|(body, _)| describe_corrupt(body))
        .collect();
    let want: Vec<String> = (0..CORRUPT_COUNT)
        .filter(|&index| index != CORRUPT_VICTIM && index != CORRUPT_COUNT - 1)
        .map(|index| describe_corrupt(&corrupt_body(index)))
        .collect();
    let missing: Vec<&String> = want.iter().filter(|body| !got.contains(body)).collect();
    let extra: Vec<&String> = got.iter().filter(|body| !want.contains(body)).collect();
    assert!(
        got == want,
        "after the restart the queue should hold every message except {CORRUPT_VICTIM} (flipped) \
         and {} (torn), in order; missing {missing:?}, unexpected {extra:?}, got {} messages",
        CORRUPT_COUNT - 1,
        got.len()
    );
}

/// A short name for a body: `msg 42` for a test body, else the text.
fn describe_corrupt(body: &[u8]) -> String {
    let index = (0..CORRUPT_COUNT).find(|&index| corrupt_body(index) == body);
    match index {
        Some(index) => format!("msg {index}"),
        None => format!("{:?}", String::from_utf8_lossy(body)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_segment_tail_is_skipped_with_a_log_line() {
    let finished = tokio::time::timeout(TEST2_LIMIT, corrupt_scenario()).await;
    assert!(
        finished.is_ok(),
        "the corruption test did not finish within {TEST2_LIMIT:?}"
    );
}
