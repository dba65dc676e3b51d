//! Test 1: kill -9 under load, many rounds (see the crate doc): publishers, consumers and acks
//! against a model of what the clients were told, the broker killed and restarted each round.

use super::*;

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
