//! How fast the message store confirms durable messages: writer threads (as queue tasks)
//! append batches of persistent messages, each batch with a waiter, keeping a bounded
//! window of unconfirmed batches (as a publisher's confirm window), for a bounded time.
//!
//!     cargo run --release -p warren-store --example durable_append -- [SECONDS] [WRITERS]
//!
//! Prints confirmed messages per second, fsyncs per second and messages per fsync.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use warren_store::{RecordBatch, Store, StoreConfig, FLAG_DURABLE};

const BATCH_MESSAGES: u64 = 20;
const MESSAGE_BYTES: usize = 1000;
/// Unconfirmed batches a writer keeps in flight (192 messages' worth, as workload w1).
const WINDOW_BATCHES: usize = 10;

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(5)
        .min(60);
    let writers: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(4)
        .min(64);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (store, _) = Store::open(StoreConfig {
        dir: dir.path().join("store"),
        segment_bytes: 64 << 20,
    })
    .expect("the store opens");
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let threads: Vec<_> = (0..writers)
        .map(|queue| {
            let store = store.clone();
            std::thread::spawn(move || write_until(&store, queue, deadline))
        })
        .collect();
    let confirmed: u64 = threads.into_iter().map(|t| t.join().expect("writer")).sum();
    let secs = started.elapsed().as_secs_f64();
    let stats = store.stats();
    println!(
        "{writers} writers, {seconds} s: {:.0} confirmed msg/s, {:.0} fsyncs/s, {:.1} msg/fsync",
        confirmed as f64 / secs,
        stats.fsyncs as f64 / secs,
        stats.synced_messages as f64 / stats.fsyncs.max(1) as f64
    );
    store.close();
}

/// Appends batches until `deadline`, waiting for the oldest confirm when the window is
/// full; returns the messages confirmed.
fn write_until(store: &Store, queue: u64, deadline: Instant) -> u64 {
    let (tx, rx) = mpsc::channel::<bool>();
    let body = vec![7u8; MESSAGE_BYTES];
    let mut in_flight = 0usize;
    let mut confirmed = 0u64;
    let mut seq = 0u64;
    let mut locations = Vec::new();
    while Instant::now() < deadline {
        if in_flight == WINDOW_BATCHES {
            assert!(rx.recv().expect("a confirm"), "the store confirms");
            in_flight -= 1;
            confirmed += BATCH_MESSAGES;
        }
        let mut batch = RecordBatch::new();
        for _ in 0..BATCH_MESSAGES {
            seq += 1;
            batch.enqueue(queue, seq, FLAG_DURABLE, |b| b.extend_from_slice(&body));
        }
        let tx = tx.clone();
        batch.on_durable(Box::new(move |ok| {
            let _ = tx.send(ok);
        }));
        store.append(&mut batch, &mut locations).expect("append");
        in_flight += 1;
    }
    for _ in 0..in_flight {
        assert!(rx.recv().expect("a confirm"), "the store confirms");
        confirmed += BATCH_MESSAGES;
    }
    confirmed
}
