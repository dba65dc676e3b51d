//! Group commit: many writers, one fsync. Any log of this crate (the message store today, a
//! quorum-queue WAL and a stream log later) writes its records itself, then hands the group
//! commit the files it wrote and the waiters that need those records durable. Sync threads
//! take everything that gathered, fsync each file once, and tell the waiters; while one
//! fsync runs the next group gathers, so a busy log pays one fsync per group, not per write.
//!
//! Groups are numbered and released in order: a group's waiters are told only after every
//! earlier group was, so "durable" only moves forward (a WAL can say "durable up to here").
//!
//! A failed fsync (or a write the log reports through [`GroupCommit::poison`]) POISONS the
//! group commit. It is never retried: after a failed fsync the kernel may already have
//! dropped the unsynced pages, and a second fsync would succeed without them. The failed
//! group's waiters, every group still in flight and every later waiter are told
//! [`StoreError::Poisoned`] with the first cause, and no waiter is told success again.
//!
//! Lock order: the caller's own locks (a log's writer lock) may be held while calling in;
//! the group commit's lock is never held while a waiter runs or a file syncs.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::StoreError;
use crate::io::LogFile;

/// Told once the records it waits for are durable (`Ok`), or can never be (`Err`).
pub trait Notify: Send + 'static {
    fn notify(self, outcome: Result<(), &StoreError>);
}

/// The message store's waiters: `true` once durable, `false` when the store failed.
impl Notify for Box<dyn FnOnce(bool) + Send> {
    fn notify(self, outcome: Result<(), &StoreError>) {
        self(outcome.is_ok())
    }
}

/// How a group commit runs.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// Names the log in its figures ("message store: 850 fsyncs/s, ...").
    pub name: &'static str,
    /// What the log's items are called in its figures ("messages").
    pub items: &'static str,
    /// Names the sync threads (`warren-<thread_name>-<n>`).
    pub thread_name: &'static str,
    /// Sync threads: with two, a group that forms while one fsync runs starts its own at
    /// once instead of waiting for it.
    pub threads: usize,
    /// Items a group needs before it gets an fsync of its own while another runs (small
    /// groups wait and join the next, so a trickle of writes is not a storm of fsyncs).
    pub overlap_min_items: u64,
    /// How often the figures are logged while the log is busy.
    pub report_interval: Duration,
}

/// Figures since the group commit started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Groups committed (each syncs every file written since the last).
    pub fsyncs: u64,
    pub synced_items: u64,
    pub bytes_written: u64,
}

/// The handle; dropping it stops the sync threads once they told every waiter.
pub struct GroupCommit<N: Notify> {
    shared: Arc<Shared<N>>,
}

impl<N: Notify> std::fmt::Debug for GroupCommit<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GroupCommit({})", self.shared.config.name)
    }
}

struct Shared<N> {
    config: GroupConfig,
    state: Mutex<State<N>>,
    wake: Condvar,
    /// Mirrors `state.poison.is_some()` for lock-free checks on the write path.
    poisoned: AtomicBool,
    fsyncs: AtomicU64,
    synced_items: AtomicU64,
    bytes_written: AtomicU64,
}

struct State<N> {
    /// The gathering group.
    waiters: Vec<N>,
    /// Files written since the last group was taken, by the caller's key.
    dirty: Vec<(u64, Arc<dyn LogFile>)>,
    items: u64,
    /// Groups syncing now.
    in_flight: usize,
    /// Number of the next group taken.
    next_group: u64,
    /// Every group below this one was released.
    released: u64,
    /// Groups synced but waiting for an earlier one to finish.
    finished: BTreeMap<u64, Vec<N>>,
    /// The first failure: set once, never cleared.
    poison: Option<String>,
    shutdown: bool,
}

impl<N> State<N> {
    /// Whether a sync thread should take the gathering group now: when no fsync runs, or
    /// when the group is large enough to be worth a second fsync beside the running one.
    fn group_ready(&self, overlap_min_items: u64) -> bool {
        !self.waiters.is_empty() && (self.in_flight == 0 || self.items >= overlap_min_items)
    }
}

/// A group taken by a sync thread.
struct Group<N> {
    number: u64,
    waiters: Vec<N>,
    dirty: Vec<(u64, Arc<dyn LogFile>)>,
    items: u64,
}

impl<N: Notify> GroupCommit<N> {
    /// Starts the sync threads.
    pub fn start(config: GroupConfig) -> io::Result<GroupCommit<N>> {
        assert!(
            config.threads >= 1,
            "invariant: a group commit needs a sync thread"
        );
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                waiters: Vec::new(),
                dirty: Vec::new(),
                items: 0,
                in_flight: 0,
                next_group: 0,
                released: 0,
                finished: BTreeMap::new(),
                poison: None,
                shutdown: false,
            }),
            config,
            wake: Condvar::new(),
            poisoned: AtomicBool::new(false),
            fsyncs: AtomicU64::new(0),
            synced_items: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
        });
        for n in 0..shared.config.threads {
            let syncer = shared.clone();
            thread::Builder::new()
                .name(format!("warren-{}-{n}", shared.config.thread_name))
                .spawn(move || sync_loop(&syncer, n == 0))?;
        }
        Ok(GroupCommit { shared })
    }

    /// Hands over what a writer just wrote: the files (by the caller's key, e.g. a segment
    /// number), the waiters that need them durable (taken out of `waiters`), and how many
    /// items they hold. Call it after the writes returned, so the fsync that covers the
    /// waiters starts after them. A poisoned group commit tells the waiters at once.
    pub fn submit(
        &self,
        written: &[(u64, Arc<dyn LogFile>)],
        waiters: &mut Vec<N>,
        items: u64,
        bytes: u64,
    ) {
        self.shared
            .bytes_written
            .fetch_add(bytes, Ordering::Relaxed);
        if written.is_empty() && waiters.is_empty() {
            return;
        }
        let mut state = self.shared.state.lock();
        if let Some(cause) = &state.poison {
            let error = StoreError::Poisoned {
                cause: cause.clone(),
            };
            drop(state);
            for waiter in waiters.drain(..) {
                waiter.notify(Err(&error));
            }
            return;
        }
        for (key, file) in written {
            if !state.dirty.iter().any(|(k, _)| k == key) {
                state.dirty.push((*key, file.clone()));
            }
        }
        if !waiters.is_empty() {
            state.waiters.append(waiters);
            state.items += items;
            self.shared.wake.notify_one();
        }
    }

    /// Stops the group commit for good because of `cause` (a write that failed part way,
    /// say): from now on every waiter is told [`StoreError::Poisoned`].
    pub fn poison(&self, cause: &StoreError) {
        let poisoned = poison_state(&self.shared, &mut self.shared.state.lock(), cause);
        if poisoned {
            self.shared.wake.notify_all();
        }
    }

    /// `Err(Poisoned)` once the group commit is poisoned.
    pub fn check(&self) -> Result<(), StoreError> {
        if !self.shared.poisoned.load(Ordering::Acquire) {
            return Ok(());
        }
        let cause = self.shared.state.lock().poison.clone();
        Err(StoreError::Poisoned {
            cause: cause.unwrap_or_default(),
        })
    }

    pub fn stats(&self) -> GroupStats {
        GroupStats {
            fsyncs: self.shared.fsyncs.load(Ordering::Relaxed),
            synced_items: self.shared.synced_items.load(Ordering::Relaxed),
            bytes_written: self.shared.bytes_written.load(Ordering::Relaxed),
        }
    }

    /// Lets the sync threads stop once they told every waiter; later submits still tell
    /// their waiters (the threads commit whatever is left before they stop).
    pub fn shutdown(&self) {
        self.shared.state.lock().shutdown = true;
        self.shared.wake.notify_all();
    }
}

impl<N: Notify> Drop for GroupCommit<N> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Records the first failure; returns whether this call poisoned it.
fn poison_state<N>(shared: &Shared<N>, state: &mut State<N>, cause: &StoreError) -> bool {
    if state.poison.is_some() {
        return false;
    }
    state.poison = Some(cause.to_string());
    shared.poisoned.store(true, Ordering::Release);
    tracing::error!(
        "{}: {cause}; nothing more is confirmed, restart the broker once the disk is fixed",
        shared.config.name
    );
    true
}

fn sync_loop<N: Notify>(shared: &Arc<Shared<N>>, reports: bool) {
    let mut last_report = Instant::now();
    let mut reported = GroupStats::default();
    loop {
        let group = {
            let mut state = shared.state.lock();
            let overlap = shared.config.overlap_min_items;
            if !state.group_ready(overlap) && !state.shutdown {
                shared
                    .wake
                    .wait_for(&mut state, shared.config.report_interval);
            }
            if state.shutdown && state.waiters.is_empty() {
                return;
            }
            if state.group_ready(overlap) || state.shutdown {
                Some(take_group(&mut state))
            } else {
                None
            }
        };
        if let Some(group) = group {
            commit(shared, group);
        }
        let elapsed = last_report.elapsed();
        if reports && elapsed >= shared.config.report_interval {
            report(shared, elapsed, &mut reported);
            last_report = Instant::now();
        }
    }
}

fn take_group<N>(state: &mut State<N>) -> Group<N> {
    debug_assert!(!state.waiters.is_empty() || state.shutdown);
    state.in_flight += 1;
    let number = state.next_group;
    state.next_group += 1;
    Group {
        number,
        waiters: std::mem::take(&mut state.waiters),
        dirty: std::mem::take(&mut state.dirty),
        items: std::mem::take(&mut state.items),
    }
}

/// Syncs the group's files (unless poisoned), then releases every group that is now next
/// in order, telling their waiters.
fn commit<N: Notify>(shared: &Shared<N>, group: Group<N>) {
    let mut failure = None;
    if !shared.poisoned.load(Ordering::Acquire) {
        for (_, file) in &group.dirty {
            if let Err(error) = file.sync() {
                failure = Some(StoreError::io("fsync", file.path(), error));
                break;
            }
        }
    }
    shared.fsyncs.fetch_add(1, Ordering::Relaxed);
    shared
        .synced_items
        .fetch_add(group.items, Ordering::Relaxed);
    let (released, outcome) = {
        let mut state = shared.state.lock();
        assert!(
            state.in_flight > 0,
            "invariant: a committed group was in flight"
        );
        state.in_flight -= 1;
        if let Some(error) = &failure {
            poison_state(shared, &mut state, error);
        }
        assert!(
            group.number >= state.released,
            "invariant: a group is released once"
        );
        state.finished.insert(group.number, group.waiters);
        let mut released = Vec::new();
        loop {
            let next = state.released;
            let Some(waiters) = state.finished.remove(&next) else {
                break;
            };
            released.extend(waiters);
            state.released += 1;
        }
        let outcome = state
            .poison
            .clone()
            .map(|cause| StoreError::Poisoned { cause });
        (released, outcome)
    };
    shared.wake.notify_one(); // the group that waited for this one
    let count = released.len();
    for waiter in released {
        waiter.notify(outcome.as_ref().map_or(Ok(()), Err));
    }
    tracing::trace!(
        waiters = count,
        items = group.items,
        "{}: fsync",
        shared.config.name
    );
}

fn report<N>(shared: &Shared<N>, elapsed: Duration, last: &mut GroupStats) {
    let now = GroupStats {
        fsyncs: shared.fsyncs.load(Ordering::Relaxed),
        synced_items: shared.synced_items.load(Ordering::Relaxed),
        bytes_written: shared.bytes_written.load(Ordering::Relaxed),
    };
    let fsyncs = now.fsyncs - last.fsyncs;
    let items = now.synced_items - last.synced_items;
    let bytes = now.bytes_written - last.bytes_written;
    *last = now;
    if fsyncs == 0 {
        return;
    }
    let secs = elapsed.as_secs_f64();
    tracing::info!(
        "{}: {:.0} fsyncs/s, {:.1} {} per fsync, {:.1} MiB/s written",
        shared.config.name,
        fsyncs as f64 / secs,
        items as f64 / fsyncs as f64,
        shared.config.items,
        bytes as f64 / secs / (1024.0 * 1024.0)
    );
}

#[cfg(test)]
#[path = "group_commit_test.rs"]
mod tests;
