//! The classic queue: a FIFO held in memory, owned by one task.
//!
//! Ready messages sit in `ready` in sequence order. A message handed to a consumer that must
//! acknowledge it moves to `unacked`; a requeued one goes to `returned`, keyed by its sequence
//! number, and is delivered before `ready`. Every unacked sequence number is lower than every
//! ready one (delivery always takes the lowest), so `returned` then `ready` is exactly the
//! original order: a requeued message goes back to its original position, as in RabbitMQ.
//!
//! Persistence of messages is the message store's (next milestone); until then a persistent
//! message to a durable queue lives in memory like any other.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use std::time::Duration;

use rustc_hash::FxHashMap;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::consumer::{Consumer, ConsumerId, Delivery, Event, Outbox};
use crate::error::BrokerError;
use crate::limits::{
    DISPATCH_BATCH_MAX, QUEUE_BATCH_MAX, QUEUE_CONTROL_MAILBOX_MAX, QUEUE_FLOW_BACKLOG_MAX,
    QUEUE_FLOW_STALL_MS, QUEUE_MAILBOX_MAX,
};
use crate::message::Message;
use crate::queue::{GetOk, QueueCmd, QueueDef, QueueHandle, QueueInfo, SettleOp};

/// Starts a classic queue task. `on_auto_delete` runs (once) when the queue removes itself
/// because its last consumer left (auto-delete); the caller drops its records there.
pub fn spawn(def: QueueDef, on_auto_delete: Box<dyn FnOnce() + Send>) -> QueueHandle {
    let (data_tx, data_rx) = mpsc::channel(QUEUE_MAILBOX_MAX);
    let (control_tx, control_rx) = mpsc::channel(QUEUE_CONTROL_MAILBOX_MAX);
    let handle = QueueHandle::new(def, data_tx, control_tx);
    let queue = ClassicQueue::new(handle.clone());
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
                n = self.data.recv_many(data, QUEUE_BATCH_MAX) => n,
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
        queue.dispatch();
        match queue.state {
            State::Running => {}
            State::Deleted => break,
            State::AutoDeleted => {
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

struct Ready {
    seq: u64,
    message: Arc<Message>,
    redelivered: bool,
}

/// The queue's state machine: commands in, deliveries out through consumers' outboxes.
pub struct ClassicQueue {
    handle: QueueHandle,
    state: State,
    next_seq: u64,
    ready: VecDeque<Ready>,
    returned: BTreeMap<u64, Ready>,
    unacked: FxHashMap<u64, Arc<Message>>,
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
            consumers: VecDeque::new(),
            had_consumers: false,
            flow: false,
            last_dispatch: Instant::now(),
            staged: Vec::new(),
        }
    }

    pub fn handle(&mut self, cmd: QueueCmd) {
        if self.state != State::Running {
            return; // deleted mid-batch: later commands see a closed queue
        }
        match cmd {
            QueueCmd::Publish(messages) => self.publish(messages),
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
                let _ = reply.send(self.get(channel, no_ack));
            }
            QueueCmd::Purge { reply } => {
                let _ = reply.send(self.purge());
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

    fn publish(&mut self, messages: Vec<Arc<Message>>) {
        self.ready.reserve(messages.len());
        for message in messages {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.ready.push_back(Ready {
                seq,
                message,
                redelivered: false,
            });
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
            let Some(message) = self.unacked.remove(&seq) else {
                continue; // already settled (channel closed twice, queue purged)
            };
            if op == SettleOp::Requeue {
                let previous = self.returned.insert(
                    seq,
                    Ready {
                        seq,
                        message,
                        redelivered: true,
                    },
                );
                debug_assert!(previous.is_none(), "a sequence number is requeued once");
            }
        }
    }

    fn next_ready(&mut self) -> Option<Ready> {
        if let Some((_, ready)) = self.returned.pop_first() {
            return Some(ready);
        }
        self.ready.pop_front()
    }

    fn get(&mut self, channel: u16, no_ack: bool) -> Option<GetOk> {
        let ready = self.next_ready()?;
        if !no_ack {
            self.unacked.insert(ready.seq, ready.message.clone());
        }
        let remaining = u32::try_from(self.ready_count()).unwrap_or(u32::MAX);
        Some(GetOk {
            delivery: Delivery {
                channel,
                consumer: 0,
                consumer_tag: Arc::from(""),
                queue: self.handle.clone(),
                seq: ready.seq,
                message: ready.message,
                redelivered: ready.redelivered,
            },
            remaining,
        })
    }

    fn purge(&mut self) -> u32 {
        let count = u32::try_from(self.ready_count()).unwrap_or(u32::MAX);
        self.ready.clear();
        self.returned.clear();
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
        self.flush_staged();
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
            let Some(ready) = self.next_ready() else {
                return;
            };
            let consumer = &mut self.consumers[index];
            consumer.credit -= 1;
            if !consumer.no_ack {
                self.unacked.insert(ready.seq, ready.message.clone());
            }
            let event = Event::Deliver(Delivery {
                channel: consumer.channel,
                consumer: consumer.id,
                consumer_tag: consumer.tag.clone(),
                queue: self.handle.clone(),
                seq: ready.seq,
                message: ready.message,
                redelivered: ready.redelivered,
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
