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
                // No stream listener: 5552 may be taken by another broker.
                "--stream-port",
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
                "{what}: queue {queue}: declare-ok said {expected} messages, {} arrived in \
                 {STEP:?}",
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

mod corrupt;
mod kill9;
