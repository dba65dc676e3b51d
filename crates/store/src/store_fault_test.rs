//! The message store on a disk that fails on purpose ([`FaultyIo`]): failed fsyncs, short
//! writes, crashes that tear the tail, bit flips.

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::thread;

use proptest::prelude::*;

use super::*;
use crate::record::{FLAG_DURABLE, RECORD_HEADER_LEN};
use crate::FaultyIo;

const QUEUE: u64 = 7;
/// Message bytes of every test message: an enqueue record is then 8 + 18 + 100 bytes.
const BODY_BYTES: usize = 100;
const RECORD_BYTES: u64 = 126;

fn store_dir() -> PathBuf {
    PathBuf::from("/faulty/store")
}

fn open(io: &FaultyIo) -> (Store, Recovered) {
    Store::open_on(
        Arc::new(io.clone()),
        StoreConfig {
            dir: store_dir(),
            segment_bytes: 1 << 20,
        },
    )
    .expect("the store opens")
}

/// Sent by every waiter: the batch's sequence numbers and whether the store confirmed them.
type Confirm = (std::ops::RangeInclusive<u64>, bool);

/// Appends the messages `seqs` as one batch whose waiter reports on `tx`.
fn append(
    store: &Store,
    seqs: std::ops::RangeInclusive<u64>,
    tx: &mpsc::Sender<Confirm>,
) -> Result<Vec<Location>, StoreError> {
    let mut batch = RecordBatch::new();
    for seq in seqs.clone() {
        batch.enqueue(QUEUE, seq, FLAG_DURABLE, |b| {
            b.extend_from_slice(&body(seq));
        });
    }
    let tx = tx.clone();
    batch.on_durable(Box::new(move |ok| {
        let _ = tx.send((seqs, ok));
    }));
    let mut locations = Vec::new();
    store.append(&mut batch, &mut locations)?;
    Ok(locations)
}

fn body(seq: u64) -> Vec<u8> {
    let mut body = vec![(seq % 251) as u8; BODY_BYTES];
    body[..8].copy_from_slice(&seq.to_le_bytes());
    body
}

fn confirmed(rx: &mpsc::Receiver<Confirm>) -> Confirm {
    rx.recv_timeout(Duration::from_secs(10))
        .expect("every waiter is told")
}

fn recovered_seqs(recovered: &mut Recovered) -> Vec<u64> {
    recovered
        .take(QUEUE)
        .map(|queue| queue.messages.iter().map(|m| m.seq).collect())
        .unwrap_or_default()
}

#[test]
fn a_failed_fsync_stops_confirms_for_good() {
    let io = FaultyIo::new();
    let (store, _) = open(&io);
    let (tx, rx) = mpsc::channel();
    append(&store, 1..=10, &tx).unwrap();
    assert_eq!(confirmed(&rx), (1..=10, true));
    io.fail_next_syncs(1);
    append(&store, 11..=20, &tx).unwrap();
    assert_eq!(
        confirmed(&rx),
        (11..=20, false),
        "the failed fsync's waiter hears no"
    );
    let error = append(&store, 21..=30, &tx).unwrap_err();
    let StoreError::Poisoned { cause } = &error else {
        panic!("a later append fails as poisoned: {error}");
    };
    assert!(
        cause.contains("fsync") && cause.contains("/faulty/store/") && cause.contains(".seg"),
        "the cause names the fsync and its file: {cause}"
    );
    assert_eq!(confirmed(&rx), (21..=30, false));
    assert!(store.check().is_err(), "the store stays poisoned");
    let syncs = io.syncs();
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    assert_eq!(io.syncs(), syncs, "the failed fsync is not retried");
    // What was confirmed is on disk; what the failed fsync covered need not be.
    let (_, mut recovered) = open(&io.crash(0));
    assert_eq!(recovered_seqs(&mut recovered), (1..=10).collect::<Vec<_>>());
}

/// Writers append concurrently while an fsync fails: every message confirmed is recovered
/// after a crash (the failed fsync's writes are lost, as Linux loses them), and no writer
/// hears ok after it heard no.
#[test]
fn no_waiter_is_told_ok_after_a_failed_fsync() {
    let io = FaultyIo::new();
    let (store, _) = open(&io);
    let (tx, rx) = mpsc::channel();
    let writers: Vec<_> = (0..4u64)
        .map(|writer| {
            let (store, tx, io) = (store.clone(), tx.clone(), io.clone());
            thread::spawn(move || {
                for round in 0..50u64 {
                    let first = writer * 10_000 + round * 5 + 1;
                    if writer == 0 && round == 25 {
                        io.fail_next_syncs(1);
                    }
                    let _ = append(&store, first..=first + 4, &tx);
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    drop(tx);
    let mut told: Vec<Confirm> = rx.iter().collect();
    assert_eq!(told.len(), 200, "every waiter is told exactly once");
    told.sort_by_key(|(seqs, _)| *seqs.start());
    for writer in told.chunk_by(|a, b| a.0.start() / 10_000 == b.0.start() / 10_000) {
        let first_no = writer
            .iter()
            .position(|(_, ok)| !ok)
            .unwrap_or(writer.len());
        assert!(
            writer[first_no..].iter().all(|(_, ok)| !ok),
            "ok after no: {writer:?}"
        );
    }
    assert!(told.iter().any(|(_, ok)| !ok), "the fsync failure was seen");
    let confirmed: BTreeSet<u64> = told
        .iter()
        .filter(|(_, ok)| *ok)
        .flat_map(|c| c.0.clone())
        .collect();
    let (_, mut recovered) = open(&io.crash(0));
    let recovered: BTreeSet<u64> = recovered_seqs(&mut recovered).into_iter().collect();
    assert!(
        confirmed.is_subset(&recovered),
        "a confirmed message was lost"
    );
}

#[test]
fn a_short_write_is_detected_and_its_partial_record_cut_on_recovery() {
    let io = FaultyIo::new();
    let (store, _) = open(&io);
    let (tx, rx) = mpsc::channel();
    let first = append(&store, 1..=10, &tx).unwrap();
    assert_eq!(confirmed(&rx), (1..=10, true));
    io.fill_disk_after(RECORD_BYTES + 50); // the next batch stops inside its second record
    let error = append(&store, 11..=20, &tx).unwrap_err();
    let StoreError::ShortWrite {
        file,
        offset,
        wanted,
        written,
        ..
    } = &error
    else {
        panic!("a short write is reported as one: {error}");
    };
    let end = u64::from(first[9].offset) + RECORD_BYTES;
    assert_eq!(
        (*offset, *wanted, *written),
        (end, 10 * RECORD_BYTES, RECORD_BYTES + 50)
    );
    assert_eq!(*file, segment_path(&store_dir(), first[0].segment));
    assert_eq!(confirmed(&rx), (11..=20, false));
    assert!(matches!(
        append(&store, 21..=21, &tx),
        Err(StoreError::Poisoned { .. })
    ));
    // Everything written survives the crash, the partial record too; recovery cuts it.
    let after = io.crash(u64::MAX);
    let (store, mut recovered) = open(&after);
    assert_eq!(recovered_seqs(&mut recovered), (1..=11).collect::<Vec<_>>());
    let cut = end + RECORD_BYTES;
    assert!(
        recovered.damage().iter().any(|damage| matches!(damage,
            StoreError::Corrupt { file: f, offset, .. } if *f == *file && *offset == cut)),
        "the torn record is reported at its offset: {:?}",
        recovered.damage()
    );
    let path = segment_path(&store_dir(), first[0].segment);
    assert_eq!(
        after.contents(&path).map(|c| c.len() as u64),
        Some(cut),
        "tail cut"
    );
    drop(store);
}

#[test]
fn a_short_write_inside_a_spliced_body_is_detected_and_cut_on_recovery() {
    let io = FaultyIo::new();
    let (store, _) = open(&io);
    let (tx, rx) = mpsc::channel();
    let first = append(&store, 1..=1, &tx).unwrap();
    assert_eq!(confirmed(&rx), (1..=1, true));
    // Three 8 KiB slices, written from where they are (not copied into the batch); the
    // disk fills inside the second one.
    let chunks: Vec<Bytes> = (0..3u8).map(|i| Bytes::from(vec![i; 8192])).collect();
    let mut batch = RecordBatch::new();
    batch.enqueue_with_body(QUEUE, 2, FLAG_DURABLE, |_| {}, &chunks);
    let record = batch.len() as u64;
    let tx2 = tx.clone();
    batch.on_durable(Box::new(move |ok| {
        let _ = tx2.send((2..=2, ok));
    }));
    io.fill_disk_after(RECORD_HEADER_LEN as u64 + 18 + 8192 + 100);
    let error = store.append(&mut batch, &mut Vec::new()).unwrap_err();
    let StoreError::ShortWrite {
        offset,
        wanted,
        written,
        ..
    } = &error
    else {
        panic!("a short write is reported as one: {error}");
    };
    let end = u64::from(first[0].offset) + RECORD_BYTES;
    assert_eq!((*offset, *wanted), (end, record));
    assert_eq!(*written, RECORD_HEADER_LEN as u64 + 18 + 8192 + 100);
    assert_eq!(confirmed(&rx), (2..=2, false));
    let after = io.crash(u64::MAX);
    let (store, mut recovered) = open(&after);
    assert_eq!(
        recovered_seqs(&mut recovered),
        vec![1],
        "the torn record is cut"
    );
    drop(store);
}

/// A crash keeps the durable bytes plus `torn` bytes of the unsynced writes: recovery
/// returns every confirmed message, then whole unconfirmed records in order, cuts the torn
/// tail and reports it, and the next start finds nothing to cut.
fn crash_with_torn_tail(unsynced_batches: u64, torn: u64) {
    let io = FaultyIo::new();
    let (store, _) = open(&io);
    let (tx, rx) = mpsc::channel();
    let mut seq = 0;
    let mut tail = Vec::new();
    for _ in 0..5 {
        let locations = append(&store, seq + 1..=seq + 4, &tx).unwrap();
        assert_eq!(confirmed(&rx), (seq + 1..=seq + 4, true));
        tail = locations;
        seq += 4;
    }
    let confirmed_up_to = seq;
    let mut batch = RecordBatch::new(); // no waiter: not synced before the crash
    for _ in 0..unsynced_batches * 3 {
        seq += 1;
        batch.enqueue(QUEUE, seq, FLAG_DURABLE, |b| {
            b.extend_from_slice(&body(seq))
        });
    }
    store.append(&mut batch, &mut Vec::new()).unwrap();
    let after = io.crash(torn);
    drop(store);
    let (store, mut recovered) = open(&after);
    let whole = (torn / RECORD_BYTES).min(unsynced_batches * 3);
    let want: Vec<u64> = (1..=confirmed_up_to + whole).collect();
    let damage = std::mem::take(&mut recovered.damage);
    let messages = recovered
        .take(QUEUE)
        .expect("the queue is recovered")
        .messages;
    assert_eq!(messages.iter().map(|m| m.seq).collect::<Vec<_>>(), want);
    for message in &messages {
        let bytes = store
            .read(message.location)
            .expect("a recovered message reads back");
        assert_eq!(bytes[..], body(message.seq)[..], "seq {}", message.seq);
    }
    let partial = !torn.is_multiple_of(RECORD_BYTES) && whole < unsynced_batches * 3;
    let end = u64::from(tail[3].offset) + RECORD_BYTES * (1 + whole);
    let cuts: Vec<u64> = damage
        .iter()
        .filter_map(|damage| match damage {
            StoreError::Corrupt { offset, what, .. } if what.contains("torn tail") => Some(*offset),
            _ => None,
        })
        .collect();
    assert_eq!(cuts, if partial { vec![end] } else { vec![] }, "{damage:?}");
    if partial {
        let path = segment_path(&store_dir(), tail[0].segment);
        let len = after.contents(&path).map(|c| c.len() as u64);
        assert_eq!(len, Some(end), "the segment ends at its last whole record");
    }
    drop(store);
    let (_, mut again) = open(&after.crash(0));
    assert!(again.damage().is_empty(), "cut once: {:?}", again.damage());
    assert_eq!(recovered_seqs(&mut again), want);
}

#[test]
fn a_torn_tail_is_cut_and_every_confirmed_message_recovered() {
    crash_with_torn_tail(2, 0);
    crash_with_torn_tail(2, RECORD_BYTES * 2 + 40);
    crash_with_torn_tail(1, 5);
    crash_with_torn_tail(1, u64::MAX);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn any_torn_tail_is_cut_and_confirmed_messages_survive(
        batches in 1u64..4,
        torn in 0u64..1500,
    ) {
        crash_with_torn_tail(batches, torn);
    }
}

#[test]
fn bit_flips_are_reported_as_corrupt_with_file_and_offset() {
    let io = FaultyIo::new();
    let (store, _) = open(&io);
    let (tx, rx) = mpsc::channel();
    let locations = append(&store, 1..=10, &tx).unwrap();
    assert_eq!(confirmed(&rx), (1..=10, true));
    let path = segment_path(&store_dir(), locations[0].segment);
    let victim = locations[4];
    io.flip_on_read(&path, u64::from(victim.offset) + 40);
    let corrupt_at = |error: &StoreError| {
        matches!(error, StoreError::Corrupt { file, offset, .. }
            if *file == path && *offset == u64::from(victim.offset))
    };
    let error = store.read(victim).unwrap_err();
    assert!(corrupt_at(&error), "{error}");
    assert!(error.to_string().contains("checksum"), "{error}");
    let many = store.read_many(&locations);
    for (i, read) in many.iter().enumerate() {
        match read {
            Err(error) => assert!(i == 4 && corrupt_at(error), "{i}: {error}"),
            Ok(bytes) => assert_eq!(bytes[..], body(i as u64 + 1)[..]),
        }
    }
    // Recovery reads the segment (it was never sealed) and reports the flipped record.
    let after = io.crash(0);
    after.flip_on_read(&path, u64::from(victim.offset) + 40);
    let (_, mut recovered) = open(&after);
    assert_eq!(recovered_seqs(&mut recovered), [1, 2, 3, 4, 6, 7, 8, 9, 10]);
    assert!(
        recovered.damage().iter().any(corrupt_at),
        "{:?}",
        recovered.damage()
    );
}

/// The segment (and, when sealed, its index) of a store that wrote twenty messages of
/// queue [`QUEUE`], all confirmed: the files' paths and bytes.
fn twenty_messages(sealed: bool) -> Vec<(PathBuf, Vec<u8>)> {
    let io = FaultyIo::new();
    let (store, _) = open(&io);
    let (tx, rx) = mpsc::channel();
    let locations = append(&store, 1..=20, &tx).unwrap();
    assert_eq!(confirmed(&rx), (1..=20, true));
    if sealed {
        store.close();
    }
    let segment = locations[0].segment;
    let files = [
        segment_path(&store_dir(), segment),
        index_path(&store_dir(), segment),
    ];
    files
        .into_iter()
        .filter_map(|path| Some((path.clone(), io.contents(&path)?)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Damaged files never make recovery or reads panic: recovery returns only messages
    /// that were written, and each reads back whole or as an error.
    #[test]
    fn recovery_survives_any_damage(
        sealed in any::<bool>(),
        flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 0..8),
        cut in proptest::option::of(any::<usize>()),
        damage_index in any::<bool>(),
    ) {
        let mut files = twenty_messages(sealed);
        let victim = if damage_index && files.len() > 1 { 1 } else { 0 };
        let bytes = &mut files[victim].1;
        for (at, xor) in &flips {
            let len = bytes.len().max(1);
            if let Some(byte) = bytes.get_mut(at % len) {
                *byte ^= xor;
            }
        }
        if let Some(cut) = cut {
            bytes.truncate(cut % (bytes.len() + 1));
        }
        let io = FaultyIo::new();
        for (path, bytes) in &files {
            let file = io.create(path).unwrap();
            write_all_at(&*file, bytes, 0).unwrap();
        }
        let (store, mut recovered) = open(&io);
        let messages = recovered.take(QUEUE).map(|q| q.messages).unwrap_or_default();
        for message in messages {
            prop_assert!((1..=20).contains(&message.seq));
            if let Ok(bytes) = store.read(message.location) {
                prop_assert_eq!(&bytes[..], &body(message.seq)[..]);
            }
        }
    }
}
