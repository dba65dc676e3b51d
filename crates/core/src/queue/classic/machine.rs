//! The classic queue's state machine: a FIFO (one per priority level) held in memory, with
//! the message store behind it. Its driver (the task, mailboxes and inline publishes) is in
//! `mod.rs`.
//!
//! Ready messages sit in `ready` (see `ready.rs` for the order, priorities and requeues). A
//! message handed to a consumer that must acknowledge it moves to `unacked`. The queue's
//! settings come from `QueueArgs`: message TTLs (`expiry.rs`: an expired message is never
//! delivered and is removed when its deadline passes, wherever it stands), length limits
//! with their overflow modes, dead-lettering (`forward.rs`), single active consumer and
//! `x-expires`.
//!
//! A turn: expire what is due, run the commands, enforce the length limits, dispatch, expire
//! what this turn's dispatch did not take (TTL 0), write the store, release deliveries, then
//! forward dead letters. In debug and test builds every turn ends by checking the queue's
//! invariants (`check_invariants`).
//!
//! This file holds the state, the command loop and the turn; each responsibility is a module
//! of its own: `publish` (enqueue and length limits), `delivery` (consumers, credit and the
//! dispatch pass), `settle` (acks, requeues, expiry, dead letters, purge) and `persist` (the
//! message store: records, recovery, paging out and reading back).

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio::time::Instant;

use super::ready::{ReadyQueue, Stored};
use crate::consumer::{Consumer, ConsumerId, Event, Outbox};
use crate::error::BrokerError;
use crate::limits::{QUEUE_FLOW_BACKLOG_MAX, QUEUE_FLOW_STALL_MS};
use crate::message::Message;
use crate::queue::expiry::{self, Expiry};
use crate::queue::forward::Forwarder;
use crate::queue::{
    Action, PublishBatch, QueueArgs, QueueCmd, QueueHandle, QueueInfo, QueueStatsSnapshot,
};

/// What the queue's index holds per message beside the message itself (a `Stored` in its ready
/// queue or unacked map, with the map's or deque's slack), for the `memory` estimate.
const INDEX_ENTRY_BYTES: u64 = 64;

/// Up to this many messages held, a debug build recounts the queue's totals every turn.
const INVARIANTS_RECOUNT_MAX: usize = 4096;

mod delivery;
mod persist;
mod publish;
mod settle;

use delivery::{STAGING_KEEP_EVENTS, STAGING_SPARE_MAX};
use persist::Persist;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    Running,
    Deleted,
    AutoDeleted,
}

/// The queue's state machine: commands in, deliveries out through consumers' outboxes.
pub struct ClassicQueue {
    pub(super) handle: QueueHandle,
    pub(super) state: State,
    args: QueueArgs,
    next_seq: u64,
    ready: ReadyQueue,
    unacked: FxHashMap<u64, Stored>,
    expiry: Expiry,
    persist: Option<Persist>,
    /// Highest sequence number of a stored message handed out in this dispatch pass.
    delivered_max: u64,
    consumers: VecDeque<Consumer>,
    /// With single active consumer: the one that gets messages.
    active: Option<ConsumerId>,
    had_consumers: bool,
    /// Last use (consume, get, declare) for `x-expires`.
    last_used: Instant,
    /// The turn's clock, milliseconds since the epoch (TTL deadlines).
    now_ms: u64,
    pub(super) forwarder: Forwarder,
    /// Publishes are not being taken (see `limits::QUEUE_FLOW_BACKLOG_MAX`).
    pub(super) flow: bool,
    last_dispatch: Instant,
    /// Deliveries staged per consumer outbox during one dispatch pass.
    staged: Vec<(Arc<Outbox>, Vec<Event>)>,
    /// Emptied staging vectors kept for the next pass (their allocations are reused).
    spare: Vec<Vec<Event>>,
    /// Paged-out messages read back ahead of delivery (see `read_ahead`), by seq.
    read_ahead: FxHashMap<u64, (Arc<Message>, Option<u64>)>,
    /// Running totals copied to the handle's stats once per turn.
    totals: QueueStatsSnapshot,
    /// Publishes accepted in the queue's order and not yet run (`InlinePublish::try_accept`):
    /// the next turn, whoever runs it, takes them before any command.
    pub(super) accepted: Vec<PublishBatch>,
    /// What this turn asks the driver to do (`take_actions`).
    actions: Vec<Action>,
}

impl ClassicQueue {
    pub fn new(handle: QueueHandle) -> ClassicQueue {
        let args = QueueArgs::clone(&handle.args());
        let levels = usize::from(args.max_priority.unwrap_or(0)) + 1;
        ClassicQueue {
            handle,
            state: State::Running,
            args,
            next_seq: 1,
            ready: ReadyQueue::new(levels),
            unacked: FxHashMap::default(),
            expiry: Expiry::default(),
            persist: None,
            delivered_max: 0,
            consumers: VecDeque::new(),
            active: None,
            had_consumers: false,
            last_used: Instant::now(),
            now_ms: expiry::now_ms(),
            forwarder: Forwarder::new(Weak::new()),
            flow: false,
            last_dispatch: Instant::now(),
            staged: Vec::new(),
            spare: Vec::new(),
            read_ahead: FxHashMap::default(),
            totals: QueueStatsSnapshot::default(),
            accepted: Vec::new(),
            actions: Vec::new(),
        }
    }

    pub fn handle(&mut self, cmd: QueueCmd) {
        if self.state != State::Running {
            cmd.abandon(); // deleted mid-batch: later commands see a closed queue
            return;
        }
        match cmd {
            QueueCmd::Publish {
                messages,
                confirm,
                tags,
                credit,
            } => {
                self.publish(messages, confirm, &tags);
                drop(credit); // taken: the publishers may send more
            }
            QueueCmd::Consume { consumer, reply } => {
                let _ = reply.send(self.consume(consumer));
            }
            QueueCmd::Cancel { consumer, reply } => {
                self.cancel(consumer);
                if let Some(reply) = reply {
                    let _ = reply.send(());
                }
            }
            QueueCmd::Credit { consumer, credit } => self.grant(consumer, credit),
            QueueCmd::Settle { op, seqs } => self.settle(op, &seqs),
            QueueCmd::Get {
                channel,
                no_ack,
                reply,
            } => {
                self.last_used = Instant::now();
                // Publishes taken earlier in this turn meet the length limits, waiting
                // consumers and their TTLs before anything is handed out here.
                self.settle_ready_now();
                self.flush_store();
                let got = self.get(channel, no_ack);
                self.flush_store(); // the delivered mark goes out before the message
                let _ = reply.send(got);
            }
            QueueCmd::Purge { reply } => {
                self.flush_store();
                let purged = self.purge();
                self.flush_store();
                let _ = reply.send(purged);
            }
            QueueCmd::Delete {
                if_unused,
                if_empty,
                reply,
            } => {
                let _ = reply.send(self.delete(if_unused, if_empty));
            }
            QueueCmd::Info { reply } => {
                // queue.declare asks for these counts: a redeclaration renews `x-expires`.
                self.last_used = Instant::now();
                self.settle_ready_now(); // the count is as of the publishes before it
                let _ = reply.send(self.info());
            }
            QueueCmd::SetArgs { args } => self.set_args(*args),
        }
    }

    /// One turn, run by the queue's task or inline by a publisher: the commands in order,
    /// then one write to the store, deliveries and dead letters, then the figures.
    pub(super) fn turn(&mut self, cmds: impl IntoIterator<Item = QueueCmd>) {
        self.begin_turn();
        // Accepted while every command sent before them was handled: anything taken now was
        // sent after them.
        let mut accepted = std::mem::take(&mut self.accepted);
        for (messages, confirm, tags) in accepted.drain(..) {
            self.handle(QueueCmd::Publish {
                messages,
                confirm,
                tags,
                credit: None,
            });
        }
        self.accepted = accepted;
        for cmd in cmds {
            self.handle(cmd);
        }
        self.dispatch();
        self.store_stats();
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// What the end of a turn leaves true, checked in debug and test builds: the counts the
    /// management API reports match what the queue holds (ready + unacked = messages, the
    /// ready bytes are the sum of the ready messages'), no message is both ready and unacked,
    /// every seq was issued, the turn's store records and staged deliveries went out, and no
    /// ready message waits while a consumer that may take it has credit. The O(n) recounts
    /// run while the queue is small (`INVARIANTS_RECOUNT_MAX`), so a debug broker holding a
    /// long backlog is not slowed down quadratically.
    fn check_invariants(&self) {
        let totals = &self.totals;
        assert_eq!(
            totals.messages_ready,
            self.ready.len() as u64,
            "invariant: ready count"
        );
        assert_eq!(
            totals.message_bytes_ready,
            self.ready.body_bytes(),
            "invariant: bytes"
        );
        assert_eq!(
            totals.messages_unacknowledged,
            self.unacked.len() as u64,
            "invariant: unacked count"
        );
        assert!(
            self.staged.is_empty(),
            "invariant: the turn released its deliveries"
        );
        assert!(
            self.unacked.keys().all(|&seq| seq < self.next_seq),
            "invariant: every unacked seq was issued"
        );
        if let Some(persist) = &self.persist {
            persist.check_flushed();
            assert!(
                persist.delivered_written <= self.delivered_max,
                "invariant: the delivered mark covers only what was handed out"
            );
        }
        if let Some(active) = self.active {
            assert!(
                self.consumers.iter().any(|c| c.id == active),
                "invariant: the single active consumer is one of the consumers"
            );
        }
        if self.state == State::Running && !self.ready.is_empty() {
            let sac = self.args.single_active_consumer;
            let eligible = |c: &&Consumer| !sac || Some(c.id) == self.active;
            assert!(
                !self.consumers.iter().filter(eligible).any(|c| c.credit > 0),
                "invariant: no ready message waits while a consumer has credit"
            );
        }
        if self.ready.len() + self.unacked.len() <= INVARIANTS_RECOUNT_MAX {
            self.ready.check_counts();
            for ready in self.ready.iter() {
                assert!(
                    ready.seq < self.next_seq,
                    "invariant: every ready seq was issued"
                );
                assert!(
                    !self.unacked.contains_key(&ready.seq),
                    "invariant: a message is ready or unacked, not both"
                );
            }
        }
    }

    /// Starts a turn: reads the clock and expires what is due.
    pub fn begin_turn(&mut self) {
        self.now_ms = expiry::now_ms();
        self.expire_due();
    }

    /// When the task must wake without a command: the next message deadline, `x-expires`,
    /// or a retry of dead letters.
    pub(super) fn wake_at(&mut self) -> Option<Instant> {
        let now = Instant::now();
        let ttl = self
            .expiry
            .next_deadline()
            .map(|deadline| now + Duration::from_millis(deadline.saturating_sub(expiry::now_ms())));
        let unused = self.consumers.is_empty();
        let expires = self
            .args
            .expires_ms
            .filter(|_| unused)
            .map(|ms| self.last_used + Duration::from_millis(u64::from(ms)));
        [ttl, expires, self.forwarder.wake_at()]
            .into_iter()
            .flatten()
            .min()
    }

    /// What the end of the turn does to ready messages, done mid-turn for a command that
    /// counts or takes them (a running queue only): the length limits, then deliveries to
    /// consumers with credit, then expiry, so a message with TTL 0 published earlier in the
    /// turn reaches a waiting consumer or is gone, as it would be by the next turn.
    fn settle_ready_now(&mut self) {
        if self.state == State::Running {
            self.enforce_limits();
            self.deliver_ready();
            self.expire_due();
        }
    }

    /// A policy changed the settings (see `QueueCmd::SetArgs`).
    fn set_args(&mut self, mut args: QueueArgs) {
        args.max_priority = self.args.max_priority;
        args.single_active_consumer = self.args.single_active_consumer;
        self.args = args;
    }

    /// Whether to stop taking publishes: a backlog in front of consumers that take all the
    /// broker sends, while they keep taking it. Hysteresis: enter above the limit, leave
    /// below half of it or when deliveries stall.
    pub(super) fn in_flow(&mut self) -> bool {
        let backlog = self.ready.len();
        let limit = if self.flow {
            QUEUE_FLOW_BACKLOG_MAX / 2
        } else {
            QUEUE_FLOW_BACKLOG_MAX
        };
        let stalled = self.last_dispatch.elapsed() >= Duration::from_millis(QUEUE_FLOW_STALL_MS);
        let fast_consumers = self.consumers.iter().any(|c| c.credit_on_write);
        let flow = backlog > limit && fast_consumers && !stalled;
        if flow != self.flow {
            tracing::debug!(queue = %self.handle.name(), backlog, flow, "queue flow");
            self.flow = flow;
        }
        flow
    }

    /// Copies this turn's figures to the handle, for the management API (no per-message cost).
    fn store_stats(&mut self) {
        let totals = &mut self.totals;
        totals.messages_ready = self.ready.len() as u64;
        totals.message_bytes_ready = self.ready.body_bytes();
        totals.messages_unacknowledged = self.unacked.len() as u64;
        totals.consumers = self.consumers.len() as u64;
        let entries = (self.ready.len() + self.unacked.len()) as u64;
        totals.memory_bytes = self.ready.memory() as u64 + entries * INDEX_ENTRY_BYTES;
        self.handle.stats_cell().store(totals);
    }

    fn info(&self) -> QueueInfo {
        QueueInfo {
            messages: u32::try_from(self.ready.len()).unwrap_or(u32::MAX),
            consumers: u32::try_from(self.consumers.len()).unwrap_or(u32::MAX),
        }
    }

    fn delete(&mut self, if_unused: bool, if_empty: bool) -> Result<u32, BrokerError> {
        let def = self.handle.def();
        if if_unused && !self.consumers.is_empty() {
            return Err(BrokerError::precondition_failed(format!(
                "{} in use",
                def.resource()
            )));
        }
        if if_empty && !self.ready.is_empty() {
            return Err(BrokerError::precondition_failed(format!(
                "{} not empty",
                def.resource()
            )));
        }
        let count = u32::try_from(self.ready.len()).unwrap_or(u32::MAX);
        self.state = State::Deleted;
        Ok(count)
    }

    /// A queue that stopped running (deleted) erases its records; returns whether it removed
    /// itself (auto-delete, `x-expires`), which its owner must hear of.
    pub(super) fn finish(&mut self) -> bool {
        self.erase_from_store();
        self.state == State::AutoDeleted
    }

    /// Ends a turn: enforces the length limits, hands ready messages to consumers, expires
    /// what they did not take (TTL 0), writes the store, releases the deliveries and forwards
    /// dead letters.
    pub fn dispatch(&mut self) {
        self.settle_ready_now();
        self.mark_delivered();
        self.flush_staged();
        self.forwarder.flush();
        self.ready.shrink();
        if self.state == State::Running {
            self.check_expires();
        }
    }

    /// What the turns since the last call ask the driver to do, in order; the driver gives
    /// the emptied vector back with `return_actions` (its allocation is reused).
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    pub fn return_actions(&mut self, actions: Vec<Action>) {
        debug_assert!(
            actions.is_empty(),
            "invariant: every action was carried out"
        );
        if self.actions.is_empty() {
            self.actions = actions;
        }
    }

    /// Gives back an applied delivery vector (`Action::apply`) for the next pass to fill.
    pub fn recycle(&mut self, events: Vec<Event>) {
        debug_assert!(
            events.is_empty(),
            "invariant: applied actions leave their vector empty"
        );
        if self.spare.len() < STAGING_SPARE_MAX && events.capacity() <= STAGING_KEEP_EVENTS {
            self.spare.push(events);
        }
    }
}

#[cfg(test)]
#[path = "machine_test.rs"]
mod tests;
