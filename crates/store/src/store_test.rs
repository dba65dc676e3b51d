use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;

use super::*;
use crate::record::FLAG_DURABLE;

fn open(dir: &Path, segment_bytes: u64) -> (Store, Recovered) {
    Store::open(StoreConfig {
        dir: dir.join("store"),
        segment_bytes,
    })
    .expect("the store opens")
}

fn enqueue(
    store: &Store,
    queue: u64,
    seqs: std::ops::RangeInclusive<u64>,
    flags: u8,
) -> Vec<Location> {
    let mut batch = RecordBatch::new();
    for seq in seqs {
        batch.enqueue(queue, seq, flags, |b| {
            b.extend_from_slice(format!("message {seq}").as_bytes())
        });
    }
    let mut locations = Vec::new();
    store.append(&mut batch, &mut locations).expect("append");
    locations
}

fn segment_files(dir: &Path) -> usize {
    fs::read_dir(dir.join("store"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "seg")
        })
        .count()
}

/// A crash: the store stops without sealing its active segment (no index, zeros after the
/// data). Its threads idle until the test ends.
fn crash(store: Store) {
    drop(store);
}

#[test]
fn appended_messages_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path(), 1 << 20);
    let locations = enqueue(&store, 1, 1..=3, FLAG_DURABLE);
    assert_eq!(locations.len(), 3);
    for (i, location) in locations.iter().enumerate() {
        let bytes = store.read(*location).unwrap();
        assert_eq!(&bytes[..], format!("message {}", i + 1).as_bytes());
    }
}

/// `read_many` gives what `read` gives, record for record: runs of neighbours, records of
/// another queue between them, other segments, out-of-order locations, and a location whose
/// segment is gone.
#[test]
fn read_many_reads_what_read_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path(), 4096);
    let mut wanted = Vec::new();
    for round in 0..40u64 {
        let ours = enqueue(&store, 1, round * 10 + 1..=round * 10 + 5, 0);
        enqueue(&store, 2, round * 10 + 6..=round * 10 + 6, 0); // between two runs
        wanted.extend(ours);
    }
    assert!(segment_files(dir.path()) > 2, "the runs must span segments");
    wanted.swap(3, 17);
    let mut missing = wanted[0];
    missing.segment = 9_999;
    wanted.push(missing);
    let many = store.read_many(&wanted);
    assert_eq!(many.len(), wanted.len());
    for (location, read) in wanted.iter().zip(many) {
        match (store.read(*location), read) {
            (Ok(one), Ok(many)) => assert_eq!(one, many, "{location:?}"),
            (Err(_), Err(_)) => assert_eq!(location.segment, 9_999),
            (one, many) => panic!("{location:?}: read {one:?}, read_many {many:?}"),
        }
    }
}

#[test]
fn restart_recovers_durable_unacked_messages_in_order() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, _) = open(dir.path(), 1 << 20);
        let locations = enqueue(&store, 1, 1..=5, FLAG_DURABLE);
        enqueue(&store, 1, 6..=7, 0); // paged out transient messages
        enqueue(&store, 2, 1..=2, FLAG_DURABLE);
        let mut batch = RecordBatch::new();
        batch.ack(1, &mut [2, 4]);
        batch.forget(locations[1]);
        batch.forget(locations[3]);
        batch.delivered(1, 3);
        batch.queue_deleted(2);
        store.append(&mut batch, &mut Vec::new()).unwrap();
        store.close();
    }
    let (store, mut recovered) = open(dir.path(), 1 << 20);
    assert!(
        recovered.take(2).is_none(),
        "a deleted queue has nothing to recover"
    );
    let queue = recovered.take(1).expect("queue 1 recovered");
    let seqs: Vec<(u64, bool)> = queue
        .messages
        .iter()
        .map(|m| (m.seq, m.redelivered))
        .collect();
    assert_eq!(seqs, [(1, true), (3, true), (5, false)]);
    assert_eq!(queue.next_seq, 6);
    assert_eq!(
        &store.read(queue.messages[2].location).unwrap()[..],
        b"message 5"
    );
}

#[test]
fn one_fsync_covers_many_concurrent_writers() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path(), 64 << 20);
    let confirmed = Arc::new(AtomicUsize::new(0));
    let (done_tx, done_rx) = mpsc::channel();
    let writers: Vec<_> = (0..4u64)
        .map(|queue| {
            let store = store.clone();
            let confirmed = confirmed.clone();
            let done_tx = done_tx.clone();
            thread::spawn(move || {
                for seq in 1..=200u64 {
                    let mut batch = RecordBatch::new();
                    batch.enqueue(queue, seq, FLAG_DURABLE, |b| b.extend_from_slice(b"x"));
                    let confirmed = confirmed.clone();
                    let done_tx = done_tx.clone();
                    batch.on_durable(Box::new(move |ok| {
                        assert!(ok);
                        confirmed.fetch_add(1, Ordering::Relaxed);
                        let _ = done_tx.send(());
                    }));
                    store.append(&mut batch, &mut Vec::new()).unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    for _ in 0..800 {
        done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("every waiter runs");
    }
    let stats = store.stats();
    assert_eq!(confirmed.load(Ordering::Relaxed), 800);
    assert_eq!(stats.synced_messages, 800);
    assert!(
        stats.fsyncs >= 1 && stats.fsyncs < 800,
        "group commit: {stats:?}"
    );
}

#[test]
fn segments_rotate_and_acked_ones_are_deleted_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path(), 4096);
    let mut locations = Vec::new();
    for chunk in 0..20u64 {
        locations.extend(enqueue(
            &store,
            1,
            chunk * 50 + 1..=chunk * 50 + 50,
            FLAG_DURABLE,
        ));
    }
    let segments = locations
        .iter()
        .map(|l| l.segment)
        .collect::<std::collections::BTreeSet<_>>();
    assert!(segments.len() > 5, "small segments rotate: {segments:?}");
    assert_eq!(segment_files(dir.path()), segments.len());
    // Ack all but the last message.
    let mut batch = RecordBatch::new();
    let mut seqs: Vec<u64> = (1..1000).collect();
    batch.ack(1, &mut seqs);
    for location in &locations[..999] {
        batch.forget(*location);
    }
    store.append(&mut batch, &mut Vec::new()).unwrap();
    let remaining = segment_files(dir.path());
    assert!(
        remaining <= 3,
        "acked segments are reclaimed, {remaining} left"
    );
    assert_eq!(&store.read(locations[999]).unwrap()[..], b"message 1000");
    store.close();
    drop(store);
    assert_eq!(reopen_seqs(dir.path(), 4096, 1), [1000]);
}

/// Opens the store again and returns the sequence numbers it recovered for `queue`.
fn reopen_seqs(dir: &Path, segment_bytes: u64, queue: u64) -> Vec<u64> {
    let (_, mut recovered) = open(dir, segment_bytes);
    let queue = recovered
        .take(queue)
        .expect("the queue has messages to recover");
    queue.messages.iter().map(|m| m.seq).collect()
}

/// The offset just past the record at `location`.
fn record_end(location: Location) -> usize {
    location.offset as usize + location.len.get() as usize
}

/// Ten durable messages in one segment, then a crash: their locations, the segment's path
/// and bytes (for the test to damage and write back).
fn ten_messages_then_crash(dir: &Path) -> (Vec<Location>, PathBuf, Vec<u8>) {
    let (store, _) = open(dir, 1 << 20);
    let locations = enqueue(&store, 1, 1..=10, FLAG_DURABLE);
    crash(store);
    let path = segment_path(&dir.join("store"), locations[0].segment);
    let bytes = fs::read(&path).unwrap();
    (locations, path, bytes)
}

#[test]
fn a_corrupt_record_is_skipped_and_the_rest_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let (locations, path, mut bytes) = ten_messages_then_crash(dir.path());
    let flip = record_end(locations[3]) - 2;
    bytes[flip] ^= 0xff;
    let torn = locations[9].offset as usize + 5;
    bytes.truncate(torn);
    fs::write(&path, &bytes).unwrap();
    assert_eq!(
        reopen_seqs(dir.path(), 1 << 20, 1),
        [1, 2, 3, 5, 6, 7, 8, 9]
    );
}

#[test]
fn unclaimed_messages_are_dropped_and_their_segments_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, _) = open(dir.path(), 4096);
        for chunk in 0..10u64 {
            enqueue(&store, 9, chunk * 50 + 1..=chunk * 50 + 50, FLAG_DURABLE);
        }
        store.close();
    }
    let before = segment_files(dir.path());
    let (store, recovered) = open(dir.path(), 4096);
    assert_eq!(recovered.message_count(), 500);
    store.forget_unclaimed(recovered);
    assert!(segment_files(dir.path()) < before);
    assert_eq!(
        segment_files(dir.path()),
        1,
        "only the active segment is left"
    );
}

mod model {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Publish(u8),
        Ack(Vec<u8>),
        Deliver,
        Restart,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u8..20).prop_map(Op::Publish),
            3 => proptest::collection::vec(any::<u8>(), 1..10).prop_map(Op::Ack),
            1 => Just(Op::Deliver),
            1 => Just(Op::Restart),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever the mix of publishes, acks in any order, delivered marks and restarts,
        /// recovery returns exactly the unacked messages, in order, with the right flags.
        #[test]
        fn recovery_matches_a_model(ops in proptest::collection::vec(op(), 1..40)) {
            let dir = tempfile::tempdir().unwrap();
            let (mut store, mut recovered) = open(dir.path(), 2048);
            let mut model: BTreeMap<u64, Location> = BTreeMap::new();
            let mut next_seq = 1u64;
            let mut delivered = 0u64;
            for op in ops {
                match op {
                    Op::Publish(n) => {
                        let last = next_seq + u64::from(n) - 1;
                        let locations = enqueue(&store, 5, next_seq..=last, FLAG_DURABLE);
                        for (seq, location) in (next_seq..=last).zip(locations) {
                            model.insert(seq, location);
                        }
                        next_seq = last + 1;
                    }
                    Op::Ack(picks) => {
                        let keys: Vec<u64> = model.keys().copied().collect();
                        if keys.is_empty() {
                            continue;
                        }
                        let mut seqs: Vec<u64> = picks
                            .iter()
                            .map(|p| keys[*p as usize % keys.len()])
                            .collect();
                        seqs.sort_unstable();
                        seqs.dedup();
                        let mut batch = RecordBatch::new();
                        for seq in &seqs {
                            batch.forget(model.remove(seq).unwrap());
                        }
                        batch.ack(5, &mut seqs);
                        store.append(&mut batch, &mut Vec::new()).unwrap();
                    }
                    Op::Deliver => {
                        delivered = next_seq - 1;
                        let mut batch = RecordBatch::new();
                        batch.delivered(5, delivered);
                        store.append(&mut batch, &mut Vec::new()).unwrap();
                    }
                    Op::Restart => {
                        store.close();
                        drop(store);
                        (store, recovered) = open(dir.path(), 2048);
                        let queue = recovered.take(5).unwrap_or_default();
                        let got: Vec<u64> = queue.messages.iter().map(|m| m.seq).collect();
                        let want: Vec<u64> = model.keys().copied().collect();
                        prop_assert_eq!(got, want);
                        for m in &queue.messages {
                            prop_assert_eq!(m.redelivered, m.seq <= delivered);
                            model.insert(m.seq, m.location);
                        }
                        if !model.is_empty() {
                            prop_assert!(queue.next_seq >= next_seq);
                        }
                    }
                }
            }
            let _ = recovered;
        }
    }
}

#[test]
fn segments_larger_than_a_read_chunk_recover_whole_also_with_huge_records() {
    let dir = tempfile::tempdir().unwrap();
    let body = |seq: u64| -> Vec<u8> {
        let len = if seq == 3000 { 6 << 20 } else { 1500 };
        (0..len).map(|i| (seq as usize + i) as u8).collect()
    };
    let locations = {
        let (store, _) = open(dir.path(), 256 << 20);
        let mut locations = Vec::new();
        for chunk in 0..60u64 {
            let mut batch = RecordBatch::new();
            for seq in chunk * 100 + 1..=chunk * 100 + 100 {
                batch.enqueue(3, seq, FLAG_DURABLE, |b| b.extend_from_slice(&body(seq)));
            }
            let mut written = Vec::new();
            store.append(&mut batch, &mut written).unwrap();
            locations.extend(written);
        }
        crash(store);
        locations
    };
    let (store, mut recovered) = open(dir.path(), 256 << 20);
    let queue = recovered.take(3).unwrap();
    assert_eq!(queue.messages.len(), 6000);
    for (i, message) in queue.messages.iter().enumerate() {
        assert_eq!(message.seq, i as u64 + 1);
        assert_eq!(message.location, locations[i]);
    }
    assert_eq!(
        store.read(queue.messages[2999].location).unwrap(),
        body(3000)
    );
    crash(store);

    // A flipped byte past the first chunks: only that record is lost (the index written by
    // the last start is removed so the segment is read again).
    fs::remove_file(index_path(&dir.path().join("store"), locations[0].segment)).unwrap();
    let path = segment_path(&dir.path().join("store"), locations[0].segment);
    let mut bytes = fs::read(&path).unwrap();
    let victim = locations[4500];
    bytes[record_end(victim) - 1] ^= 1;
    fs::write(&path, &bytes).unwrap();
    let seqs = reopen_seqs(dir.path(), 256 << 20, 3);
    assert_eq!(seqs.len(), 5999);
    assert!(!seqs.contains(&4501));
}

#[test]
fn a_torn_write_into_preallocated_space_loses_only_that_record() {
    let dir = tempfile::tempdir().unwrap();
    let (locations, path, mut bytes) = ten_messages_then_crash(dir.path());
    let last = locations[9];
    let end = record_end(last);
    assert!(
        bytes.len() > end,
        "the segment is preallocated past its data"
    );
    assert!(bytes[end..].iter().all(|&b| b == 0));
    bytes[end - 6..end].fill(0); // the write stopped short of the record's end
    fs::write(&path, &bytes).unwrap();
    let seqs = reopen_seqs(dir.path(), 1 << 20, 1);
    assert_eq!(seqs, (1..=9).collect::<Vec<_>>());
}

#[test]
fn sealed_segments_recover_from_their_index_and_bodies_are_checked_when_read() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let locations = {
        let (store, _) = open(dir.path(), 1 << 20);
        let locations = enqueue(&store, 1, 1..=20, FLAG_DURABLE);
        let mut batch = RecordBatch::new();
        batch.ack(1, &mut [1, 2]);
        batch.forget(locations[0]);
        batch.forget(locations[1]);
        batch.delivered(1, 5);
        store.append(&mut batch, &mut Vec::new()).unwrap();
        store.close();
        locations
    };
    let segment = locations[0].segment;
    assert!(
        index_path(&store_dir, segment).exists(),
        "a clean stop seals the active segment"
    );
    // Damage a body: the index does not notice, the read does.
    let path = segment_path(&store_dir, segment);
    let mut bytes = fs::read(&path).unwrap();
    let victim = locations[9];
    bytes[record_end(victim) - 1] ^= 1;
    fs::write(&path, &bytes).unwrap();
    let (store, mut recovered) = open(dir.path(), 1 << 20);
    let queue = recovered.take(1).unwrap();
    let seqs: Vec<u64> = queue.messages.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, (3..=20).collect::<Vec<_>>());
    assert!(queue.messages.iter().all(|m| m.redelivered == (m.seq <= 5)));
    let error = store.read(queue.messages[7].location).unwrap_err();
    assert!(error.to_string().contains("offset"), "{error}");
    assert_eq!(
        &store.read(queue.messages[8].location).unwrap()[..],
        b"message 11"
    );
    crash(store);

    // A damaged index is not trusted: the segment is read instead (and the body damage found).
    let index = index_path(&store_dir, segment);
    let mut bytes = fs::read(&index).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0xff;
    fs::write(&index, &bytes).unwrap();
    let seqs = reopen_seqs(dir.path(), 1 << 20, 1);
    let expected: Vec<u64> = (3..=20).filter(|&s| s != 10).collect();
    assert_eq!(seqs, expected);
}
