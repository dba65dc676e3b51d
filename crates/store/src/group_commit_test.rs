use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use parking_lot::{Condvar, Mutex};

use super::*;

/// A waiter that reports its number and outcome on a channel.
struct Tell(u64, mpsc::Sender<(u64, Result<(), String>)>);

impl Notify for Tell {
    fn notify(self, outcome: Result<(), &StoreError>) {
        let _ = self.1.send((self.0, outcome.map_err(|e| e.to_string())));
    }
}

/// A file whose fsyncs block until the test lets each one finish, as it says (ok or EIO):
/// the test decides which group's fsync ends first.
#[derive(Debug, Default)]
struct GatedFile {
    gate: Mutex<GateState>,
    moved: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    arrived: u64,
    verdicts: HashMap<u64, bool>,
}

impl GatedFile {
    /// Waits until `count` fsyncs have started.
    fn wait_arrived(&self, count: u64) {
        let mut gate = self.gate.lock();
        while gate.arrived < count {
            let timed_out = self
                .moved
                .wait_for(&mut gate, Duration::from_secs(10))
                .timed_out();
            assert!(!timed_out, "fsync {count} never started");
        }
    }

    /// Lets fsync number `call` (from 0) finish, succeeding or not.
    fn finish(&self, call: u64, ok: bool) {
        self.gate.lock().verdicts.insert(call, ok);
        self.moved.notify_all();
    }
}

impl LogFile for GatedFile {
    fn path(&self) -> &Path {
        Path::new("/gated/segment")
    }
    fn write_at(&self, buf: &[u8], _offset: u64) -> io::Result<usize> {
        Ok(buf.len())
    }
    fn read_at(&self, _buf: &mut [u8], _offset: u64) -> io::Result<usize> {
        Ok(0)
    }
    fn sync(&self) -> io::Result<()> {
        let mut gate = self.gate.lock();
        let call = gate.arrived;
        gate.arrived += 1;
        self.moved.notify_all();
        loop {
            if let Some(&ok) = gate.verdicts.get(&call) {
                return if ok {
                    Ok(())
                } else {
                    Err(io::Error::other("injected EIO"))
                };
            }
            self.moved.wait(&mut gate);
        }
    }
    fn len(&self) -> io::Result<u64> {
        Ok(0)
    }
    fn truncate(&self, _len: u64) -> io::Result<()> {
        Ok(())
    }
}

fn config() -> GroupConfig {
    GroupConfig {
        name: "test log",
        items: "records",
        thread_name: "test-sync",
        threads: 2,
        overlap_min_items: 16,
        report_interval: Duration::from_secs(60),
    }
}

type Outcome = (u64, Result<(), String>);
type Outcomes = mpsc::Receiver<Outcome>;
type Teller = mpsc::Sender<Outcome>;

fn setup() -> (GroupCommit<Tell>, Arc<GatedFile>, Teller, Outcomes) {
    let commit = GroupCommit::start(config()).expect("sync threads start");
    let (tx, rx) = mpsc::channel();
    (commit, Arc::new(GatedFile::default()), tx, rx)
}

/// Submits waiters `ids` with one item each, as a write to `file` (key 1).
fn submit(
    commit: &GroupCommit<Tell>,
    file: &Arc<GatedFile>,
    ids: std::ops::Range<u64>,
    tx: &mpsc::Sender<(u64, Result<(), String>)>,
) {
    let written: Vec<(u64, Arc<dyn LogFile>)> = vec![(1, file.clone())];
    let mut waiters: Vec<Tell> = ids.clone().map(|id| Tell(id, tx.clone())).collect();
    commit.submit(&written, &mut waiters, ids.end - ids.start, 100);
    assert!(waiters.is_empty(), "submit takes the waiters");
}

fn receive(rx: &Outcomes, count: usize) -> Vec<(u64, Result<(), String>)> {
    (0..count)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(10))
                .expect("a waiter is told")
        })
        .collect()
}

#[test]
fn writers_that_arrive_during_an_fsync_share_the_next_one() {
    let (commit, file, tx, rx) = setup();
    submit(&commit, &file, 0..1, &tx);
    file.wait_arrived(1);
    for id in 1..11 {
        submit(&commit, &file, id..id + 1, &tx); // ten small writes while fsync 0 runs
    }
    file.finish(0, true);
    assert_eq!(receive(&rx, 1), [(0, Ok(()))]);
    file.wait_arrived(2);
    file.finish(1, true);
    let mut told = receive(&rx, 10);
    told.sort_by_key(|(id, _)| *id);
    assert!(told.iter().all(|(_, outcome)| outcome.is_ok()), "{told:?}");
    assert_eq!(told.len(), 10);
    let stats = commit.stats();
    assert_eq!(
        (stats.fsyncs, stats.synced_items),
        (2, 11),
        "two fsyncs for eleven writes"
    );
    assert_eq!(stats.bytes_written, 1100);
}

#[test]
fn a_group_that_syncs_first_waits_for_the_group_before_it() {
    let (commit, file, tx, rx) = setup();
    submit(&commit, &file, 0..1, &tx);
    file.wait_arrived(1);
    submit(&commit, &file, 1..21, &tx); // large enough for an fsync of its own
    file.wait_arrived(2);
    file.finish(1, true);
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "group 1 is synced but must wait for group 0"
    );
    file.finish(0, true);
    let told = receive(&rx, 21);
    assert_eq!(told[0], (0, Ok(())), "group 0 is told first");
    assert!(told.iter().all(|(_, outcome)| outcome.is_ok()));
}

#[test]
fn a_failed_fsync_poisons_the_group_the_groups_in_flight_and_every_later_one() {
    let (commit, file, tx, rx) = setup();
    submit(&commit, &file, 0..1, &tx);
    file.wait_arrived(1);
    submit(&commit, &file, 1..21, &tx);
    file.wait_arrived(2);
    file.finish(1, true); // the later group's fsync succeeds...
    file.finish(0, false); // ...but the earlier one's failed: nobody is told ok
    let told = receive(&rx, 21);
    for (id, outcome) in &told {
        let error = outcome
            .as_ref()
            .expect_err("no waiter hears ok after a failed fsync");
        assert!(
            error.contains("/gated/segment") && error.contains("fsync"),
            "{id}: {error}"
        );
    }
    submit(&commit, &file, 21..22, &tx);
    let (id, outcome) = receive(&rx, 1).remove(0);
    assert_eq!(id, 21);
    assert!(outcome
        .expect_err("later waiters hear no")
        .contains("stopped"));
    let error = commit.check().expect_err("the group commit stays poisoned");
    assert!(matches!(&error, StoreError::Poisoned { cause } if cause.contains("injected EIO")));
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "the fsync is never retried"
    );
    assert_eq!(file.gate.lock().arrived, 2, "the fsync is never retried");
}

#[test]
fn a_poisoned_group_commit_tells_waiters_no_at_once() {
    let (commit, file, tx, rx) = setup();
    let cause = StoreError::io(
        "write",
        &PathBuf::from("/gated/segment"),
        io::Error::other("x"),
    );
    commit.poison(&cause);
    submit(&commit, &file, 0..3, &tx);
    let told = receive(&rx, 3);
    assert!(told.iter().all(|(_, outcome)| outcome.is_err()), "{told:?}");
    assert_eq!(
        file.gate.lock().arrived,
        0,
        "nothing is synced once poisoned"
    );
}
