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
//! forward dead letters.
//!
//! Messages reach the message store (`warren_store`) as records: a persistent message to a
//! durable queue is written when published (its publisher confirm waits for the fsync), acked
//! when settled, and a `delivered` mark goes out before deliveries do, so after a crash a
//! message a consumer may have seen comes back redelivered. Beyond the queue's memory budget a
//! message keeps only its location in memory (transient ones are written for that) and is read
//! back when delivered, as RabbitMQ's lazy / v2 classic queues do.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio::time::Instant;

use warren_store::{Location, RecordBatch, RecoveredQueue, Store, FLAG_DURABLE};

use super::ready::{Ready, ReadyQueue, Stored};
use super::Storage;
use crate::confirm::ConfirmTicket;
use crate::consumer::{Consumer, ConsumerId, Delivery, Event, Outbox};
use crate::dead_letter::{dead_letter_copy, DeathReason};
use crate::error::BrokerError;
use crate::limits::{DISPATCH_BATCH_MAX, QUEUE_FLOW_BACKLOG_MAX, QUEUE_FLOW_STALL_MS};
use crate::message::Message;
use crate::queue::expiry::{self, Expiry};
use crate::queue::forward::Forwarder;
use crate::queue::{
    Action, GetOk, Overflow, PublishBatch, QueueArgs, QueueCmd, QueueHandle, QueueInfo,
    QueueStatsSnapshot, SettleOp,
};

/// What the queue's index holds per message beside the message itself (a `Stored` in its ready
/// queue or unacked map, with the map's or deque's slack), for the `memory` estimate.
const INDEX_ENTRY_BYTES: u64 = 64;

/// Paged-out messages read back at once ahead of a dispatch pass.
const READ_AHEAD_MAX: usize = 256;
/// Staging vectors kept between dispatch passes, and the largest one kept: enough for a few
/// consumer connections' batches without holding a burst's memory.
const STAGING_SPARE_MAX: usize = 8;
const STAGING_KEEP_EVENTS: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    Running,
    Deleted,
    AutoDeleted,
}

/// The queue's side of the message store.
struct Persist {
    store: Store,
    /// The store's identity of this queue.
    id: u64,
    /// Persistent messages are written and survive restarts (durable, non-exclusive queue).
    durable: bool,
    memory_budget: usize,
    /// Records of this turn, written by `flush_store`.
    batch: RecordBatch,
    /// Sequence numbers of the enqueue records in `batch`, in order, and whether the message
    /// leaves memory once written (beyond the budget).
    enqueued: Vec<(u64, bool)>,
    /// Of those, the ones already done with (delivered no-ack in the same turn): forgotten
    /// once their location is known.
    done_unwritten: Vec<u64>,
    acks: Vec<u64>,
    locations: Vec<Location>,
    /// Highest sequence number a `delivered` record covers.
    delivered_written: u64,
    /// A failed write was logged (the store logs the cause; the queue says it once).
    failure_logged: bool,
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

    /// Connects the queue to the message store and takes what it had on disk.
    pub(super) fn attach_store(&mut self, storage: Storage, recovered: Option<RecoveredQueue>) {
        let def = self.handle.def();
        self.persist = Some(Persist {
            store: storage.store,
            id: warren_store::queue_id(&def.vhost, &def.name),
            durable: def.durable && def.exclusive_owner.is_none(),
            // `x-queue-mode=lazy`: keep no message bodies in memory beyond what is delivered.
            memory_budget: if self.args.lazy {
                0
            } else {
                storage.memory_budget
            },
            batch: RecordBatch::new(),
            enqueued: Vec::new(),
            done_unwritten: Vec::new(),
            acks: Vec::new(),
            locations: Vec::new(),
            delivered_written: 0,
            failure_logged: false,
        });
        let Some(recovered) = recovered else {
            return;
        };
        self.next_seq = self.next_seq.max(recovered.next_seq);
        // Priority levels and TTL deadlines live in the stored messages: a queue that orders
        // or expires by them reads each one back once (others learn a message's deadline when
        // it is read for delivery).
        let read_back = self.args.max_priority.is_some() || self.args.message_ttl_ms.is_some();
        for m in recovered.messages {
            let mut level = 0;
            if read_back {
                if let Some((message, deadline)) = self.read_stored(m.location) {
                    level = self.args.level(message.priority);
                    if let Some(deadline) = deadline {
                        self.expiry.insert(m.seq, deadline);
                    }
                }
            }
            let stored = Stored {
                message: None,
                location: Some(m.location),
                redelivered: m.redelivered,
                gone: false,
            };
            self.ready.push(level, Ready { seq: m.seq, stored });
        }
        tracing::info!(
            "{}: recovered {} messages from the message store",
            self.handle.def().resource(),
            self.ready.len()
        );
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

    /// Enqueues a batch; with `x-overflow=reject-publish(-dlx)` a message that would exceed
    /// the length limit is refused, and its publisher (`tags`) told through the ticket.
    fn publish(
        &mut self,
        messages: Vec<Arc<Message>>,
        confirm: Option<ConfirmTicket>,
        tags: &[u64],
    ) {
        let mut written = false;
        let mut rejected = Vec::new();
        self.totals.published_total += messages.len() as u64;
        for (index, message) in messages.into_iter().enumerate() {
            if self.args.rejects_publishes() && self.would_overflow(&message) {
                rejected.extend(tags.get(index).copied());
                if self.args.overflow == Overflow::RejectPublishDlx {
                    self.dead_letter(&message, DeathReason::Maxlen);
                }
                continue;
            }
            written |= self.enqueue(message);
        }
        let Some(ticket) = confirm else {
            return;
        };
        if !rejected.is_empty() {
            let tags = rejected; // before the ticket is settled
            self.actions.push(Action::Reject {
                ticket: ticket.clone(),
                tags,
            });
        }
        match self.persist.as_mut() {
            // The type's rule (`Classic::confirm_after`): written records wait for the fsync;
            // the store tells the waiter once, `false` when the write or the fsync failed.
            Some(persist) if written => {
                persist
                    .batch
                    .on_durable(Box::new(move |ok| ticket.settle(ok)));
            }
            // In the queue's order in memory: safe as a transient message is.
            _ => self.actions.push(Action::Settle { ticket, ok: true }),
        }
    }

    fn would_overflow(&self, message: &Message) -> bool {
        let len = self.ready.len() as u64 + 1;
        let bytes = self.ready.body_bytes() + message.body.len() as u64;
        self.args.max_length.is_some_and(|max| len > max)
            || self.args.max_length_bytes.is_some_and(|max| bytes > max)
    }

    /// Adds one message; returns whether it must be fsynced before it is confirmed.
    fn enqueue(&mut self, message: Arc<Message>) -> bool {
        let seq = self.next_seq;
        self.next_seq += 1;
        let deadline =
            expiry::deadline(self.now_ms, self.args.message_ttl_ms, message.expiration_ms);
        if let Some(deadline) = deadline {
            self.expiry.insert(seq, deadline);
        }
        let level = self.args.level(message.priority);
        let mut written = false;
        if let Some(persist) = self.persist.as_mut() {
            let durable = persist.durable && message.persistent;
            let over_budget =
                self.ready.memory() + message.resident_bytes() > persist.memory_budget;
            if durable || over_budget {
                let flags = if durable { FLAG_DURABLE } else { 0 };
                persist.batch.enqueue_with_body(
                    persist.id,
                    seq,
                    flags,
                    |out| message.encode_stored_head(out, deadline),
                    message.body.chunks(),
                );
                // Beyond the budget the message leaves memory once it is written.
                persist.enqueued.push((seq, over_budget));
                written = durable;
            }
        }
        let stored = Stored {
            message: Some(message),
            location: None,
            redelivered: false,
            gone: false,
        };
        self.ready.push(level, Ready { seq, stored });
        written
    }

    /// Writes the records of this turn and notes where the enqueued messages went.
    pub fn flush_store(&mut self) {
        let Some(persist) = self.persist.as_mut() else {
            return;
        };
        if !persist.acks.is_empty() {
            persist.batch.ack(persist.id, &mut persist.acks);
            persist.acks.clear();
        }
        if persist.batch.is_empty() {
            return;
        }
        let result = persist
            .store
            .append(&mut persist.batch, &mut persist.locations);
        if let Err(error) = result {
            if !persist.failure_logged {
                persist.failure_logged = true;
                tracing::error!(
                    "{}: message store write failed: {error}; messages stay in memory",
                    self.handle.def().resource()
                );
            }
            persist.enqueued.clear();
            persist.done_unwritten.clear();
            return;
        }
        // The turn's messages are where dispatch left them: still ready, unacked, or done.
        persist.done_unwritten.sort_unstable();
        for ((seq, page_out), location) in
            persist.enqueued.drain(..).zip(persist.locations.drain(..))
        {
            if self.ready.set_location(seq, location, page_out) {
                continue;
            }
            if let Some(stored) = self.unacked.get_mut(&seq) {
                stored.location = Some(location);
            } else if persist.done_unwritten.binary_search(&seq).is_ok() {
                persist.batch.forget(location);
            }
        }
        persist.done_unwritten.clear();
        if !persist.batch.is_empty() {
            // Only the forgotten ones: accounting, no write.
            let _ = persist
                .store
                .append(&mut persist.batch, &mut persist.locations);
        }
    }

    /// Marks a stored message as done with on disk (acked, dropped, purged).
    fn forget(&mut self, seq: u64, stored: &Stored) {
        let Some(persist) = self.persist.as_mut() else {
            return;
        };
        let written = match stored.location {
            Some(location) => {
                persist.batch.forget(location);
                true
            }
            None if persist
                .enqueued
                .binary_search_by_key(&seq, |&(s, _)| s)
                .is_ok() =>
            {
                persist.done_unwritten.push(seq); // its record goes out with this turn's
                true
            }
            None => false,
        };
        if written && persist.durable {
            persist.acks.push(seq); // a paged-out transient message needs no ack record
        }
    }

    /// The queue is gone for good: its records are void.
    fn erase_from_store(&mut self) {
        self.flush_store(); // the turn's records first, so every message has its location
        let Some(persist) = self.persist.as_mut() else {
            return;
        };
        persist.acks.clear();
        persist.batch.queue_deleted(persist.id);
        let stored = self
            .ready
            .iter()
            .map(|r| &r.stored)
            .chain(self.unacked.values());
        for location in stored.filter_map(|s| s.location) {
            persist.batch.forget(location);
        }
        self.flush_store();
    }

    fn read_stored(&self, location: Location) -> Option<(Message, Option<u64>)> {
        let persist = self.persist.as_ref()?;
        let read = persist.store.read(location).map_err(std::io::Error::from);
        let read = read.and_then(|bytes| {
            Message::decode_stored(bytes).ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "not a stored message")
            })
        });
        match read {
            Ok(read) => Some(read),
            Err(error) => {
                tracing::error!(
                    "{}: cannot read stored message at {location:?}: {error}",
                    self.handle.def().resource(),
                );
                None
            }
        }
    }

    /// The message of a ready entry, read back from the store when it was paged out. `None`
    /// when the stored copy is unreadable (logged; the message is dropped and forgotten).
    fn load(&mut self, ready: &mut Ready) -> Option<Arc<Message>> {
        if let Some(message) = &ready.stored.message {
            return Some(message.clone());
        }
        let read = match self.read_ahead.remove(&ready.seq) {
            Some(read) => Some(read),
            None => ready
                .stored
                .location
                .and_then(|at| self.read_stored(at))
                .map(|(message, deadline)| (Arc::new(message), deadline)),
        };
        let Some((message, deadline)) = read else {
            let stored = ready.stored.clone();
            self.forget(ready.seq, &stored);
            self.expiry.remove(ready.seq);
            return None;
        };
        if let (Some(deadline), None) = (deadline, self.expiry.get(ready.seq)) {
            self.expiry.insert(ready.seq, deadline); // recovered: its deadline came with it
        }
        ready.stored.message = Some(message.clone());
        Some(message)
    }

    /// Before a dispatch pass takes up to `count` messages: when the next ones were paged
    /// out, reads them back together (`Store::read_many`: a read per run of neighbouring
    /// records) instead of one read each. What fails here is read again, and reported, by
    /// `load`.
    fn read_ahead(&mut self, count: usize) {
        let Some(persist) = self.persist.as_ref() else {
            return;
        };
        let paged = self.ready.next_paged_out(count.min(READ_AHEAD_MAX));
        if paged.len() < 2 {
            return;
        }
        if self.read_ahead.len() > READ_AHEAD_MAX * 4 {
            self.read_ahead.clear(); // left behind by messages that went another way
        }
        let locations: Vec<Location> = paged.iter().map(|&(_, at)| at).collect();
        let reads = persist.store.read_many(&locations);
        for ((seq, _), read) in paged.into_iter().zip(reads) {
            if let Some((message, deadline)) = read.ok().and_then(Message::decode_stored) {
                self.read_ahead.insert(seq, (Arc::new(message), deadline));
            }
        }
    }

    fn consume(&mut self, consumer: Consumer) -> Result<(), BrokerError> {
        let exclusive_taken = self.consumers.iter().any(|c| c.exclusive);
        let sac = self.args.single_active_consumer;
        // As RabbitMQ: an exclusive consumer on a single-active-consumer queue is refused.
        if exclusive_taken || (consumer.exclusive && (sac || !self.consumers.is_empty())) {
            return Err(BrokerError::access_refused(format!(
                "queue '{}' in vhost '{}' in exclusive use",
                self.handle.def().name,
                self.handle.def().vhost
            )));
        }
        self.had_consumers = true;
        self.last_used = Instant::now();
        if sac && self.active.is_none() {
            self.active = Some(consumer.id);
        }
        self.consumers.push_back(consumer);
        Ok(())
    }

    fn cancel(&mut self, consumer: ConsumerId) {
        let before = self.consumers.len();
        self.consumers.retain(|c| c.id != consumer);
        let removed = before != self.consumers.len();
        if !removed {
            return;
        }
        if self.active == Some(consumer) {
            self.active = self.next_active();
        }
        if self.consumers.is_empty() {
            self.last_used = Instant::now(); // unused from now on (`x-expires`)
            if self.had_consumers && self.handle.def().auto_delete {
                self.state = State::AutoDeleted;
            }
        }
    }

    /// Single active consumer failover: the highest `x-priority`, the earliest registered
    /// among equals (consumers keep their registration order: no round-robin in this mode).
    fn next_active(&self) -> Option<ConsumerId> {
        let priority = self.consumers.iter().map(|c| c.priority).max()?;
        self.consumers
            .iter()
            .find(|c| c.priority == priority)
            .map(|c| c.id)
    }

    fn grant(&mut self, consumer: ConsumerId, credit: u32) {
        if let Some(c) = self.consumers.iter_mut().find(|c| c.id == consumer) {
            c.credit = c.credit.saturating_add(credit);
        }
    }

    fn settle(&mut self, op: SettleOp, seqs: &[u64]) {
        for &seq in seqs {
            let Some(mut stored) = self.unacked.remove(&seq) else {
                continue; // already settled (channel closed twice, queue purged)
            };
            match op {
                SettleOp::Requeue => {
                    stored.redelivered = true;
                    let priority = stored.message.as_ref().map_or(0, |m| m.priority);
                    let level = self.args.level(priority);
                    self.ready.requeue(level, Ready { seq, stored });
                    self.expiry.requeued(seq);
                }
                SettleOp::Ack => {
                    self.totals.acknowledged_total += 1;
                    self.forget(seq, &stored);
                    self.expiry.remove(seq);
                }
                SettleOp::Discard => {
                    let ready = Ready { seq, stored };
                    let message = ready.stored.message.clone();
                    self.drop_message(&ready, message.as_ref(), DeathReason::Rejected);
                }
            }
        }
    }

    /// A message leaves the queue without being delivered: dead-lettered when the queue has a
    /// dead-letter exchange (`message` is then its body, loaded), else dropped.
    fn drop_message(&mut self, ready: &Ready, message: Option<&Arc<Message>>, reason: DeathReason) {
        if let Some(message) = message {
            self.dead_letter(message, reason);
        }
        self.forget(ready.seq, &ready.stored);
        self.expiry.remove(ready.seq);
    }

    /// Republishes a copy to the dead-letter exchange, if the queue has one.
    fn dead_letter(&mut self, message: &Arc<Message>, reason: DeathReason) {
        let Some(exchange) = self.args.dead_letter_exchange.clone() else {
            return;
        };
        let name = self.handle.name().clone();
        let routing_key = self.args.dead_letter_routing_key.as_ref();
        let now_secs = self.now_ms / 1000;
        let copy = dead_letter_copy(message, reason, &name, &exchange, routing_key, now_secs);
        self.forwarder.route(copy, &name);
    }

    /// Removes the ready messages whose deadline has passed, wherever they stand.
    fn expire_due(&mut self) {
        if self.expiry.is_empty() {
            return;
        }
        let dead_lettering = self.args.dead_letter_exchange.is_some();
        while let Some(seq) = self.expiry.pop_due(self.now_ms) {
            let Some(mut ready) = self.ready.remove(seq) else {
                continue; // unacked: it keeps its deadline for when it is requeued
            };
            if !dead_lettering {
                self.drop_message(&ready, None, DeathReason::Expired);
            } else if let Some(message) = self.load(&mut ready) {
                self.drop_message(&ready, Some(&message), DeathReason::Expired);
            }
        }
    }

    /// `x-overflow=drop-head`: drops (or dead-letters) from the head while over a limit.
    fn enforce_limits(&mut self) {
        if self.args.overflow != Overflow::DropHead {
            return; // the reject modes refuse publishes instead
        }
        let dead_lettering = self.args.dead_letter_exchange.is_some();
        loop {
            let over_length = self
                .args
                .max_length
                .is_some_and(|max| self.ready.len() as u64 > max);
            let over_bytes = self
                .args
                .max_length_bytes
                .is_some_and(|max| self.ready.body_bytes() > max);
            if !(over_length || over_bytes) {
                return;
            }
            let Some(mut ready) = self.ready.pop() else {
                return;
            };
            if !dead_lettering {
                self.drop_message(&ready, None, DeathReason::Maxlen);
            } else if let Some(message) = self.load(&mut ready) {
                self.drop_message(&ready, Some(&message), DeathReason::Maxlen);
            }
        }
    }

    /// `x-expires`: an unused queue deletes itself.
    fn check_expires(&mut self) {
        let Some(ms) = self.args.expires_ms else {
            return;
        };
        let unused_for = self.last_used.elapsed();
        if self.consumers.is_empty() && unused_for >= Duration::from_millis(u64::from(ms)) {
            tracing::debug!(queue = %self.handle.name(), "unused for x-expires: deleted");
            self.state = State::AutoDeleted;
        }
    }

    /// The next message to deliver, loaded into memory, with its message. An expired one is
    /// never delivered: it is dropped or dead-lettered here. A deadline equal to the turn's
    /// clock still delivers, so a TTL of 0 reaches a consumer that can take it at once.
    fn next_ready(&mut self) -> Option<(Ready, Arc<Message>)> {
        loop {
            let mut ready = self.ready.pop()?;
            let Some(message) = self.load(&mut ready) else {
                continue;
            };
            if self.expiry.get(ready.seq).is_some_and(|d| d < self.now_ms) {
                self.drop_message(&ready, Some(&message), DeathReason::Expired);
                continue;
            }
            return Some((ready, message));
        }
    }

    /// Takes a message out for a consumer: it becomes unacked, or is done with when the
    /// consumer does not ack (no-ack).
    fn hand_out(&mut self, ready: &Ready, no_ack: bool) {
        self.delivered_max = self.delivered_max.max(ready.seq);
        self.totals.delivered_total += 1;
        self.totals.redelivered_total += u64::from(ready.stored.redelivered);
        if no_ack {
            self.forget(ready.seq, &ready.stored);
            self.expiry.remove(ready.seq);
        } else {
            self.unacked.insert(ready.seq, ready.stored.clone());
        }
    }

    /// Writes the `delivered` mark for what this pass handed out (before it leaves the queue).
    fn mark_delivered(&mut self) {
        let Some(persist) = self.persist.as_mut() else {
            return;
        };
        if persist.durable && self.delivered_max > persist.delivered_written {
            persist.batch.delivered(persist.id, self.delivered_max);
            persist.delivered_written = self.delivered_max;
        }
        self.flush_store();
    }

    fn get(&mut self, channel: u16, no_ack: bool) -> Option<GetOk> {
        let (ready, message) = self.next_ready()?;
        self.hand_out(&ready, no_ack);
        self.mark_delivered();
        let remaining = u32::try_from(self.ready.len()).unwrap_or(u32::MAX);
        Some(GetOk {
            delivery: Delivery {
                channel,
                consumer: 0,
                consumer_tag: Arc::from(""),
                queue: self.handle.clone(),
                seq: ready.seq,
                message,
                redelivered: ready.stored.redelivered,
            },
            remaining,
        })
    }

    fn purge(&mut self) -> u32 {
        let count = u32::try_from(self.ready.len()).unwrap_or(u32::MAX);
        self.read_ahead.clear();
        for ready in self.ready.drain() {
            self.forget(ready.seq, &ready.stored);
            self.expiry.remove(ready.seq);
        }
        count
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

    /// Tells every consumer's connection that the queue is gone (basic.cancel to the client).
    pub(super) fn cancel_all_consumers(&mut self) {
        for consumer in self.consumers.drain(..) {
            let cancelled = Event::ConsumerCancelled {
                channel: consumer.channel,
                consumer: consumer.id,
                consumer_tag: consumer.tag.clone(),
            };
            self.actions.push(Action::Deliver {
                outbox: consumer.outbox,
                events: vec![cancelled],
            });
        }
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

    /// Hands ready messages to consumers with credit: highest `x-priority` first, round-robin
    /// among equals, one message per turn while several compete, in batches otherwise. With
    /// single active consumer, only the active one.
    fn deliver_ready(&mut self) {
        let before = self.ready.len();
        if self.args.single_active_consumer {
            let active = self.active;
            if let Some(index) = self.consumers.iter().position(|c| Some(c.id) == active) {
                self.deliver_to(index, u32::MAX);
            }
        }
        while !self.args.single_active_consumer && !self.ready.is_empty() {
            let Some(index) = self.pick_consumer() else {
                break;
            };
            let competing = self.consumers.iter().filter(|c| c.credit > 0).count() > 1;
            let turn = if competing { 1 } else { DISPATCH_BATCH_MAX };
            self.deliver_to(index, turn);
            if competing {
                // Round-robin: the consumer just served goes to the back.
                if let Some(consumer) = self.consumers.remove(index) {
                    self.consumers.push_back(consumer);
                }
            }
        }
        if self.ready.len() < before {
            self.last_dispatch = Instant::now();
        }
    }

    fn pick_consumer(&self) -> Option<usize> {
        let priority = self
            .consumers
            .iter()
            .filter(|c| c.credit > 0)
            .map(|c| c.priority)
            .max()?;
        self.consumers
            .iter()
            .position(|c| c.credit > 0 && c.priority == priority)
    }

    fn deliver_to(&mut self, index: usize, turn: u32) {
        let Some(consumer) = self.consumers.get(index) else {
            return;
        };
        let expected = consumer.credit.min(turn) as usize;
        let outbox = consumer.outbox.clone();
        self.read_ahead(expected);
        // Every delivery of this call goes to one outbox: its staging vector is found (or
        // made, with room for them all) once.
        let slot = match self
            .staged
            .iter()
            .position(|(o, _)| Arc::ptr_eq(o, &outbox))
        {
            Some(slot) => slot,
            None => {
                let events = self.spare.pop().unwrap_or_default();
                self.staged.push((outbox, events));
                self.staged.len() - 1
            }
        };
        self.staged[slot]
            .1
            .reserve(expected.min(self.ready.len()).min(STAGING_KEEP_EVENTS));
        let mut delivered = 0;
        while delivered < turn {
            let Some(credit) = self.consumers.get(index).map(|c| c.credit) else {
                return;
            };
            if credit == 0 {
                return;
            }
            let Some((ready, message)) = self.next_ready() else {
                return;
            };
            let no_ack = self.consumers[index].no_ack;
            self.hand_out(&ready, no_ack);
            let consumer = &mut self.consumers[index];
            consumer.credit -= 1;
            let event = Event::Deliver(Delivery {
                channel: consumer.channel,
                consumer: consumer.id,
                consumer_tag: consumer.tag.clone(),
                queue: self.handle.clone(),
                seq: ready.seq,
                message,
                redelivered: ready.stored.redelivered,
            });
            self.staged[slot].1.push(event);
            delivered += 1;
        }
    }

    /// Turns this pass's staged deliveries into actions, one per connection.
    fn flush_staged(&mut self) {
        let actions = &mut self.actions;
        for (outbox, events) in self.staged.drain(..) {
            actions.push(Action::Deliver { outbox, events });
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
