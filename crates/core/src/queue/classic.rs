//! The classic queue: a FIFO held in memory, owned by one task.
//!
//! Ready messages sit in `ready` in sequence order. A message handed to a consumer that must
//! acknowledge it moves to `unacked`; a requeued one goes to `returned`, keyed by its sequence
//! number, and is delivered before `ready`. Every unacked sequence number is lower than every
//! ready one (delivery always takes the lowest), so `returned` then `ready` is exactly the
//! original order: a requeued message goes back to its original position, as in RabbitMQ.
//!
//! Messages reach the message store (`warren_store`) as records: a persistent message to a
//! durable queue is written when published (its publisher confirm waits for the fsync), acked
//! when settled, and a `delivered` mark goes out before deliveries do, so after a crash a
//! message a consumer may have seen comes back redelivered. Beyond the queue's memory budget a
//! message keeps only its location in memory (transient ones are written for that) and is read
//! back when delivered, as RabbitMQ's lazy / v2 classic queues do.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio::sync::mpsc;
use tokio::time::Instant;

use warren_store::{Location, RecordBatch, RecoveredQueue, Store, FLAG_DURABLE};

use crate::consumer::{ConfirmTicket, Consumer, ConsumerId, Delivery, Event, Outbox};
use crate::error::BrokerError;
use crate::limits::{
    DISPATCH_BATCH_MAX, QUEUE_BATCH_MAX, QUEUE_CONTROL_MAILBOX_MAX, QUEUE_FLOW_BACKLOG_MAX,
    QUEUE_FLOW_STALL_MS, QUEUE_MAILBOX_MAX, QUEUE_TURN_PUBLISHES_MAX,
};
use crate::message::Message;
use crate::queue::{GetOk, QueueCmd, QueueDef, QueueHandle, QueueInfo, SettleOp};

/// How a queue uses the message store.
#[derive(Debug, Clone)]
pub struct Storage {
    pub store: Store,
    /// Bytes of ready messages kept in memory; beyond it only their location is.
    pub memory_budget: usize,
}

/// Starts a classic queue task. `on_auto_delete` runs (once) when the queue removes itself
/// because its last consumer left (auto-delete); the caller drops its records there.
/// `recovered` holds what a durable queue had on disk at startup.
pub fn spawn(
    def: QueueDef,
    on_auto_delete: Box<dyn FnOnce() + Send>,
    storage: Option<Storage>,
    recovered: Option<RecoveredQueue>,
    credit: u32,
) -> QueueHandle {
    let (data_tx, data_rx) = mpsc::channel(QUEUE_MAILBOX_MAX);
    let (control_tx, control_rx) = mpsc::channel(QUEUE_CONTROL_MAILBOX_MAX);
    let handle = QueueHandle::new(def, data_tx, control_tx, credit);
    let mut queue = ClassicQueue::new(handle.clone());
    if let Some(storage) = storage {
        queue.attach_store(storage, recovered);
    }
    let mailboxes = Mailboxes {
        data: data_rx,
        control: control_rx,
    };
    tokio::spawn(run(queue, mailboxes, on_auto_delete));
    handle
}

struct Mailboxes {
    data: mpsc::Receiver<QueueCmd>,
    control: mpsc::Receiver<QueueCmd>,
}

impl Mailboxes {
    /// Waits for commands; returns control and data commands in the order they must run, or
    /// `false` once every handle is gone.
    /// In `flow`, only control commands are taken (publishers wait), and only for as long as
    /// the consumers keep taking deliveries.
    async fn next(
        &mut self,
        control: &mut Vec<QueueCmd>,
        data: &mut Vec<QueueCmd>,
        flow: bool,
    ) -> bool {
        let received = if flow {
            let stall = Duration::from_millis(QUEUE_FLOW_STALL_MS);
            match tokio::time::timeout(stall, self.control.recv_many(control, QUEUE_BATCH_MAX))
                .await
            {
                Ok(n) => n,
                Err(_) => return true, // no credit came: the caller re-evaluates flow
            }
        } else {
            tokio::select! {
                biased;
                n = self.control.recv_many(control, QUEUE_BATCH_MAX) => n,
                cmd = self.data.recv() => match cmd {
                    Some(cmd) => {
                        data.push(cmd);
                        self.take_more_data(data);
                        data.len()
                    }
                    None => 0,
                },
            }
        };
        if received == 0 {
            return false; // every handle dropped: the vhost forgot the queue
        }
        // A control command sent before the data just taken is in the control mailbox now:
        // take all of it so it runs first.
        while let Ok(cmd) = self.control.try_recv() {
            control.push(cmd);
        }
        true
    }

    /// Takes what else is waiting in the data mailbox, up to `QUEUE_BATCH_MAX` commands and
    /// about `QUEUE_TURN_PUBLISHES_MAX` published messages: a turn stays short, so the acks
    /// that give consumers more credit wait at most one short turn behind a flood of publishes.
    fn take_more_data(&mut self, data: &mut Vec<QueueCmd>) {
        let mut published: usize = data.iter().map(QueueCmd::published_count).sum();
        while data.len() < QUEUE_BATCH_MAX && published < QUEUE_TURN_PUBLISHES_MAX {
            let Ok(cmd) = self.data.try_recv() else {
                break;
            };
            published += cmd.published_count();
            data.push(cmd);
        }
    }
}

async fn run(
    mut queue: ClassicQueue,
    mut mailboxes: Mailboxes,
    on_auto_delete: Box<dyn FnOnce() + Send>,
) {
    let mut control = Vec::with_capacity(QUEUE_BATCH_MAX);
    let mut data = Vec::with_capacity(QUEUE_BATCH_MAX);
    while mailboxes
        .next(&mut control, &mut data, queue.in_flow())
        .await
    {
        for cmd in control.drain(..).chain(data.drain(..)) {
            queue.handle(cmd);
        }
        queue.dispatch(); // ends with the turn's one write to the store
        match queue.state {
            State::Running => {}
            State::Deleted => {
                queue.erase_from_store();
                break;
            }
            State::AutoDeleted => {
                queue.erase_from_store();
                on_auto_delete();
                break;
            }
        }
    }
    queue.cancel_all_consumers();
    tracing::debug!(queue = %queue.handle.name(), "queue stopped");
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Deleted,
    AutoDeleted,
}

/// A message as the queue holds it: in memory, on disk, or both.
#[derive(Debug, Clone)]
struct Stored {
    message: Option<Arc<Message>>,
    location: Option<Location>,
    /// Handed to a consumer before (or maybe, before a crash).
    redelivered: bool,
}

/// 32 bytes: what a message beyond the memory budget costs.
struct Ready {
    seq: u64,
    stored: Stored,
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
    handle: QueueHandle,
    state: State,
    next_seq: u64,
    ready: VecDeque<Ready>,
    returned: BTreeMap<u64, Ready>,
    unacked: FxHashMap<u64, Stored>,
    persist: Option<Persist>,
    /// Bytes of the messages in `ready` held in memory.
    ready_memory: usize,
    /// Highest sequence number of a stored message handed out in this dispatch pass.
    delivered_max: u64,
    consumers: VecDeque<Consumer>,
    had_consumers: bool,
    /// Publishes are not being taken (see `limits::QUEUE_FLOW_BACKLOG_MAX`).
    flow: bool,
    last_dispatch: Instant,
    /// Deliveries staged per consumer outbox during one dispatch pass.
    staged: Vec<(Arc<Outbox>, Vec<Event>)>,
}

impl ClassicQueue {
    pub fn new(handle: QueueHandle) -> ClassicQueue {
        ClassicQueue {
            handle,
            state: State::Running,
            next_seq: 1,
            ready: VecDeque::new(),
            returned: BTreeMap::new(),
            unacked: FxHashMap::default(),
            persist: None,
            ready_memory: 0,
            delivered_max: 0,
            consumers: VecDeque::new(),
            had_consumers: false,
            flow: false,
            last_dispatch: Instant::now(),
            staged: Vec::new(),
        }
    }

    /// Connects the queue to the message store and takes what it had on disk.
    fn attach_store(&mut self, storage: Storage, recovered: Option<RecoveredQueue>) {
        let def = self.handle.def();
        // `x-queue-mode=lazy`: keep no message bodies in memory beyond what is delivered.
        let lazy = def.arguments.get("x-queue-mode").and_then(|v| v.as_str()) == Some("lazy");
        self.persist = Some(Persist {
            store: storage.store,
            id: warren_store::queue_id(&def.vhost, &def.name),
            durable: def.durable && def.exclusive_owner.is_none(),
            memory_budget: if lazy { 0 } else { storage.memory_budget },
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
        self.ready
            .extend(recovered.messages.into_iter().map(|m| Ready {
                seq: m.seq,
                stored: Stored {
                    message: None,
                    location: Some(m.location),
                    redelivered: m.redelivered,
                },
            }));
        tracing::info!(
            "{}: recovered {} messages from the message store",
            self.handle.def().resource(),
            self.ready.len()
        );
    }

    pub fn handle(&mut self, cmd: QueueCmd) {
        if self.state != State::Running {
            return; // deleted mid-batch: later commands see a closed queue
        }
        match cmd {
            QueueCmd::Publish {
                messages,
                confirm,
                credit,
            } => {
                self.publish(messages, confirm);
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
                let _ = reply.send(self.info());
            }
        }
    }

    /// Whether to stop taking publishes: a backlog in front of consumers that take all the
    /// broker sends, while they keep taking it. Hysteresis: enter above the limit, leave
    /// below half of it or when deliveries stall.
    fn in_flow(&mut self) -> bool {
        let backlog = self.ready_count();
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

    fn ready_count(&self) -> usize {
        self.ready.len() + self.returned.len()
    }

    fn info(&self) -> QueueInfo {
        QueueInfo {
            messages: u32::try_from(self.ready_count()).unwrap_or(u32::MAX),
            consumers: u32::try_from(self.consumers.len()).unwrap_or(u32::MAX),
        }
    }

    fn publish(&mut self, messages: Vec<Arc<Message>>, confirm: Option<ConfirmTicket>) {
        self.ready.reserve(messages.len());
        let mut written = false;
        for message in messages {
            let seq = self.next_seq;
            self.next_seq += 1;
            let stored = Stored {
                message: Some(message),
                location: None,
                redelivered: false,
            };
            if let Some(persist) = self.persist.as_mut() {
                let message = stored.message.as_ref().expect("just set");
                let durable = persist.durable && message.persistent;
                let over_budget =
                    self.ready_memory + message.resident_bytes() > persist.memory_budget;
                if durable || over_budget {
                    let flags = if durable { FLAG_DURABLE } else { 0 };
                    persist
                        .batch
                        .enqueue(persist.id, seq, flags, |out| message.encode_stored(out));
                    // Beyond the budget the message leaves memory once it is written.
                    persist.enqueued.push((seq, over_budget));
                    written |= durable;
                }
            }
            self.ready_memory += resident_bytes(&stored);
            self.ready.push_back(Ready { seq, stored });
        }
        if let (true, Some(ticket), Some(persist)) = (written, confirm, self.persist.as_mut()) {
            // The confirm waits for the fsync of these records.
            persist.batch.on_durable(Box::new(move |ok| {
                if !ok {
                    ticket.fail();
                }
            }));
        }
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
        // The turn's messages are where dispatch left them: still ready, or unacked.
        for ((seq, page_out), location) in
            persist.enqueued.drain(..).zip(persist.locations.drain(..))
        {
            if let Ok(at) = self.ready.binary_search_by_key(&seq, |r| r.seq) {
                let stored = &mut self.ready[at].stored;
                stored.location = Some(location);
                if page_out {
                    self.ready_memory -= resident_bytes(stored);
                    stored.message = None; // read back when delivered
                }
            } else if let Some(stored) = self.unacked.get_mut(&seq) {
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
            .chain(self.returned.values().map(|r| &r.stored))
            .chain(self.unacked.values());
        for location in stored.filter_map(|s| s.location) {
            persist.batch.forget(location);
        }
        self.flush_store();
    }

    /// The message of a ready entry, read back from the store when it was paged out. `None`
    /// when the stored copy is unreadable (logged; the message is dropped).
    fn load(&mut self, ready: &mut Ready) -> Option<Arc<Message>> {
        if let Some(message) = &ready.stored.message {
            return Some(message.clone());
        }
        let persist = self.persist.as_ref()?;
        let location = ready.stored.location?;
        let read = persist.store.read(location).and_then(|bytes| {
            Message::decode_stored(bytes).ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "not a stored message")
            })
        });
        match read {
            Ok(message) => {
                let message = Arc::new(message);
                ready.stored.message = Some(message.clone());
                Some(message)
            }
            Err(error) => {
                tracing::error!(
                    "{}: cannot read stored message {}: {error}; dropped",
                    self.handle.def().resource(),
                    ready.seq
                );
                let stored = ready.stored.clone();
                self.forget(ready.seq, &stored);
                None
            }
        }
    }

    fn consume(&mut self, consumer: Consumer) -> Result<(), BrokerError> {
        let exclusive_taken = self.consumers.iter().any(|c| c.exclusive);
        if exclusive_taken || (consumer.exclusive && !self.consumers.is_empty()) {
            return Err(BrokerError::access_refused(format!(
                "queue '{}' in vhost '{}' in exclusive use",
                self.handle.def().name,
                self.handle.def().vhost
            )));
        }
        self.had_consumers = true;
        self.consumers.push_back(consumer);
        Ok(())
    }

    fn cancel(&mut self, consumer: ConsumerId) {
        let before = self.consumers.len();
        self.consumers.retain(|c| c.id != consumer);
        let removed = before != self.consumers.len();
        if removed
            && self.consumers.is_empty()
            && self.had_consumers
            && self.handle.def().auto_delete
        {
            self.state = State::AutoDeleted;
        }
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
            if op == SettleOp::Requeue {
                stored.redelivered = true;
                let previous = self.returned.insert(seq, Ready { seq, stored });
                debug_assert!(previous.is_none(), "a sequence number is requeued once");
            } else {
                self.forget(seq, &stored);
            }
        }
    }

    /// The next message to deliver, loaded into memory, with its message.
    fn next_ready(&mut self) -> Option<(Ready, Arc<Message>)> {
        loop {
            let mut ready = match self.returned.pop_first() {
                Some((_, ready)) => ready,
                None => {
                    let ready = self.ready.pop_front()?;
                    self.ready_memory -= resident_bytes(&ready.stored);
                    ready
                }
            };
            if let Some(message) = self.load(&mut ready) {
                return Some((ready, message));
            }
        }
    }

    /// Takes a message out for a consumer: it becomes unacked, or is done with when the
    /// consumer does not ack (no-ack).
    fn hand_out(&mut self, ready: &Ready, no_ack: bool) {
        self.delivered_max = self.delivered_max.max(ready.seq);
        if no_ack {
            self.forget(ready.seq, &ready.stored);
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
        let remaining = u32::try_from(self.ready_count()).unwrap_or(u32::MAX);
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
        let count = u32::try_from(self.ready_count()).unwrap_or(u32::MAX);
        let ready = std::mem::take(&mut self.ready);
        let returned = std::mem::take(&mut self.returned);
        for r in ready.iter().chain(returned.values()) {
            self.forget(r.seq, &r.stored);
        }
        self.ready_memory = 0;
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
        if if_empty && self.ready_count() > 0 {
            return Err(BrokerError::precondition_failed(format!(
                "{} not empty",
                def.resource()
            )));
        }
        let count = u32::try_from(self.ready_count()).unwrap_or(u32::MAX);
        self.state = State::Deleted;
        Ok(count)
    }

    /// Tells every consumer's connection that the queue is gone (basic.cancel to the client).
    fn cancel_all_consumers(&mut self) {
        for consumer in self.consumers.drain(..) {
            consumer.outbox.push(Event::ConsumerCancelled {
                channel: consumer.channel,
                consumer: consumer.id,
                consumer_tag: consumer.tag.clone(),
            });
        }
    }

    /// Hands ready messages to consumers with credit: highest `x-priority` first, round-robin
    /// among equals, one message per turn while several compete, in batches otherwise.
    pub fn dispatch(&mut self) {
        let before = self.ready_count();
        while self.ready_count() > 0 {
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
        self.mark_delivered();
        self.flush_staged();
        // A drained backlog gives its index memory back.
        if self.ready.capacity() > 4096 && self.ready.len() < self.ready.capacity() / 4 {
            self.ready.shrink_to(self.ready.len() * 2);
        }
        if self.ready_count() < before {
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
            let outbox = consumer.outbox.clone();
            stage(&mut self.staged, outbox, event);
            delivered += 1;
        }
    }

    fn flush_staged(&mut self) {
        for (outbox, mut events) in self.staged.drain(..) {
            outbox.push_batch(&mut events);
        }
    }
}

/// Bytes a stored message occupies in memory.
fn resident_bytes(stored: &Stored) -> usize {
    stored.message.as_ref().map_or(0, |m| m.resident_bytes())
}

fn stage(staged: &mut Vec<(Arc<Outbox>, Vec<Event>)>, outbox: Arc<Outbox>, event: Event) {
    if let Some((_, events)) = staged.iter_mut().find(|(o, _)| Arc::ptr_eq(o, &outbox)) {
        events.push(event);
    } else {
        staged.push((outbox, vec![event]));
    }
}

#[cfg(test)]
#[path = "classic_test.rs"]
mod tests;
