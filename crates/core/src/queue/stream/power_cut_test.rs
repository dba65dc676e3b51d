//! `stream.fsync = true` keeps every confirmed message through a power cut, and the same run
//! without fsync loses confirmed ones: the control that shows the check can see a loss. A
//! kill -9 cannot tell the two apart (the page cache outlives the process), so the disk here
//! is `FaultyIo`, which drops whatever was not fsynced when the machine stops.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use warren_store::{Entry, FaultyIo, ReadStart};

use super::test_support::{start_stream, BodyEncoding};
use super::*;
use crate::queue::stream::{ConfirmInbox, StreamOutcome, StreamPublish};

const BATCHES: u64 = 400;
const PER_BATCH: u64 = 10;
/// The power goes after this many batches were sent, with more still on the way.
const CUT_AFTER: u64 = 250;

fn start(root: &std::path::Path, io: &FaultyIo, fsync: bool, restart: bool) -> QueueHandle {
    let storage = StreamStorage {
        root: root.to_path_buf(),
        sync: warren_store::StreamSync::start(fsync).expect("stream sync"),
        io: Arc::new(io.clone()),
        encoding: Arc::new(BodyEncoding),
    };
    start_stream("cut", storage, restart)
}

/// Publishes `BATCHES` batches of ids without waiting for confirms, cuts the power after
/// `CUT_AFTER`, and returns (the ids confirmed, the ids a restart on the cut disk reads).
async fn publish_and_cut(fsync: bool) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let root = tempfile::tempdir().unwrap();
    let io = FaultyIo::new();
    let queue = start(root.path(), &io, fsync, false);
    let stream = queue.stream().expect("a stream handle").clone();
    let inbox = ConfirmInbox::new();
    let mut after = None;
    for batch in 0..BATCHES {
        if batch == CUT_AFTER {
            after = Some(io.crash(0));
        }
        let messages = (batch * PER_BATCH..(batch + 1) * PER_BATCH)
            .map(|id| (id, Entry::Simple(Bytes::from(format!("m{id}")))))
            .collect();
        let publish = StreamPublish {
            publisher_id: 1,
            reference: None,
            messages,
            confirms: inbox.clone(),
        };
        if stream.publish(publish).await.is_err() {
            break; // the writer stopped on the dead disk
        }
        if batch % 16 == 0 {
            tokio::task::yield_now().await;
        }
    }
    // Outcomes still on their way (an fsync that completed before the cut) come within this.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut outcomes = Vec::new();
    inbox.take_all(&mut outcomes);
    let confirmed = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            StreamOutcome::Confirmed { ids, .. } => Some(ids.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    drop(queue);
    let after = after.expect("the power was cut");
    (confirmed, recovered(root.path(), &after).await)
}

async fn recovered(root: &std::path::Path, io: &FaultyIo) -> BTreeSet<u64> {
    let queue = start(root, io, true, true);
    let stream = queue.stream().expect("a stream handle");
    let mut reader = stream.view().reader(ReadStart::First).expect("a reader");
    let mut ids = BTreeSet::new();
    while let Some(chunk) = reader.next_chunk().expect("the recovered log reads") {
        for record in chunk.records() {
            let (_, body) = record.expect("a whole record");
            let text = std::str::from_utf8(&body).expect("utf-8 body");
            ids.insert(text[1..].parse::<u64>().expect("m<id>"));
        }
    }
    ids
}

#[tokio::test]
async fn with_fsync_every_confirmed_message_survives_a_power_cut() {
    let (confirmed, recovered) = publish_and_cut(true).await;
    assert!(
        confirmed.len() as u64 >= PER_BATCH,
        "some batches were confirmed before the cut: {}",
        confirmed.len()
    );
    let lost: Vec<_> = confirmed.difference(&recovered).collect();
    assert!(lost.is_empty(), "confirmed but lost: {lost:?}");
    eprintln!(
        "fsync: {} confirmed, {} recovered, 0 lost",
        confirmed.len(),
        recovered.len()
    );
}

#[tokio::test]
async fn without_fsync_a_power_cut_loses_confirmed_messages() {
    let (confirmed, recovered) = publish_and_cut(false).await;
    let lost = confirmed.difference(&recovered).count();
    assert!(
        lost > 0,
        "without fsync the cut should lose confirmed messages ({} confirmed, {} recovered)",
        confirmed.len(),
        recovered.len()
    );
    eprintln!(
        "no fsync: {} confirmed, {} recovered, {lost} lost",
        confirmed.len(),
        recovered.len()
    );
}
