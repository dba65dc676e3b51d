//! The publish path both protocols share once a message is routed: the per-queue batches and
//! settlements of one turn, handing them to their queues under one confirm ticket, and the
//! confirm waits that say when a ticket's publishes are safe.
//!
//! A publish is confirmed once every target queue has it under its type's durability contract
//! (`QueueHandle::confirm_after`): in its mailbox (processed in order, in memory), or, for a
//! persistent message to a durable classic queue, written and fsynced by the message store.
//! The batches that must wait share one `ConfirmTicket` per turn; each queue settles it once
//! (`Event::Settled`), and the last settlement completes it (`ConfirmWaits`). What a confirm
//! looks like on the wire (basic.ack with `multiple`, a disposition over a range) stays with
//! each protocol: `Publisher::on_confirmed`.
//!
//! In a turn that has confirms to send, the batches whose confirms wait for nothing are taken
//! into their idle queues' order ahead of the queues' turns (`QueueHandle::try_accept`): their
//! confirms go out first, and the queues' turns (deliveries) run right after (`run_accepted`).

use std::sync::Arc;

use rustc_hash::FxHashMap;
use tokio::sync::oneshot;
use warren_core::confirm::{ConfirmTicket, ConfirmWaits};
use warren_core::consumer::Outbox;
use warren_core::message::Message;
use warren_core::queue::{ConfirmAfter, QueueHandle, ServeWhileWaiting, SettleOp, Settlements};

/// The tag of a publish nobody waits to hear about (no confirm mode, a pre-settled transfer).
pub const NO_TAG: u64 = u64::MAX;

/// Room made at once for a turn's messages to one queue: a streaming publisher's read holds
/// several, so the batch does not grow through 1, 2, 4 and 8.
const QUEUE_BATCH_CAPACITY: usize = 16;

/// The publishes for one queue collected in one turn.
struct QueueBatch {
    queue: QueueHandle,
    messages: Vec<Arc<Message>>,
    /// For queues that may refuse publishes: each message's tag (the publisher's, or
    /// `NO_TAG`); empty for the others.
    tags: Vec<u64>,
}

/// A connection's publishes and settlements of one turn, and its confirm tickets still out.
#[derive(Default)]
pub struct PublishBatches {
    /// The turn's batches, one per queue. A list rather than a map that is drained, so that
    /// handing them over holds no iterator across its awaits: every connection's future is
    /// as large as its deepest await, and this is on it.
    batches: Vec<QueueBatch>,
    /// Where each queue's batch is in `batches`, by `QueueHandle::key`.
    index: FxHashMap<usize, usize>,
    settles: Settlements,
    /// Confirm tickets handed to queues and not yet settled by all of them.
    confirms: ConfirmWaits,
    /// Told once the turn's publishes are safe (tx.commit waits on it).
    reply: Option<oneshot::Sender<bool>>,
    /// The queues that took their batches ahead of their turns (see the module doc); kept
    /// empty between turns, so that its allocation serves every turn.
    accepted: Vec<QueueHandle>,
}

impl PublishBatches {
    /// Adds a routed message to `queue`'s batch of this turn. `tag` names the publish to its
    /// publisher when a queue refuses it (`x-overflow=reject-publish`); `NO_TAG` when the
    /// publisher need not hear.
    pub fn publish(&mut self, queue: &QueueHandle, message: Arc<Message>, tag: u64) {
        let batches = &mut self.batches;
        let at = *self.index.entry(queue.key()).or_insert_with(|| {
            batches.push(QueueBatch {
                queue: queue.clone(),
                messages: Vec::with_capacity(QUEUE_BATCH_CAPACITY),
                tags: Vec::new(),
            });
            batches.len() - 1
        });
        let batch = self
            .batches
            .get_mut(at)
            .expect("invariant: the index names a batch of the list");
        debug_assert!(
            batch.queue.same(queue),
            "invariant: the index names the queue's batch"
        );
        batch.messages.push(message);
        if queue.args().rejects_publishes() {
            batch.tags.push(tag);
        }
        debug_assert!(
            batch.tags.is_empty() || batch.tags.len() == batch.messages.len(),
            "invariant: a tag per message, or none"
        );
    }

    /// Adds a settlement (ack, reject, requeue) of delivery `seq` of `queue`.
    pub fn settle(&mut self, queue: &QueueHandle, op: SettleOp, seq: u64) {
        self.settles.add(queue, op, seq);
    }

    /// Has `reply` told when the turn's publishes are safe (`false`: the store could not make
    /// them so), at the end of this turn: tx.commit.
    pub fn reply_when_safe(&mut self, reply: oneshot::Sender<bool>) {
        debug_assert!(self.reply.is_none(), "invariant: one commit per turn");
        self.reply = Some(reply);
    }

    /// The next batch to hand over; it leaves the turn's batches.
    fn pop(&mut self) -> Option<QueueBatch> {
        let batch = self.batches.pop()?;
        let at = self.index.remove(&batch.queue.key());
        debug_assert_eq!(
            at,
            Some(self.batches.len()),
            "invariant: the index follows the list"
        );
        Some(batch)
    }

    /// Takes the batches whose confirms wait for nothing into their idle queues' order (see
    /// the module doc); an accepted batch is left empty and its queue goes to `accepted`. A
    /// turn that has other batches too runs the accepted ones at once: the others may wait
    /// for their queues, and these must not wait with them.
    fn accept(&mut self) {
        debug_assert!(
            self.accepted.is_empty(),
            "invariant: kept empty between turns"
        );
        for batch in &mut self.batches {
            if batch_waits(&batch.queue, &batch.messages, &batch.tags) {
                continue;
            }
            let messages = std::mem::take(&mut batch.messages);
            let tags = std::mem::take(&mut batch.tags);
            match batch.queue.try_accept((messages, None, tags)) {
                Ok(()) => self.accepted.push(batch.queue.clone()),
                Err((messages, _, tags)) => {
                    batch.messages = messages;
                    batch.tags = tags;
                }
            }
        }
        if self.accepted.len() < self.batches.len() {
            for queue in self.accepted.drain(..) {
                queue.run_accepted();
            }
        }
    }
}

/// Whether the confirm of a publish to `queue` waits for the queue: for its durability event
/// (`persistent`: the message is), or, when the publisher must hear of a refusal (`tagged`),
/// for a queue that may refuse publishes to answer.
pub fn confirm_waits(queue: &QueueHandle, persistent: bool, tagged: bool) -> bool {
    queue.confirm_after(persistent) != ConfirmAfter::Enqueued
        || (tagged && queue.args().rejects_publishes())
}

/// `confirm_waits` for a whole batch.
fn batch_waits(queue: &QueueHandle, messages: &[Arc<Message>], tags: &[u64]) -> bool {
    let persistent = messages.iter().any(|m| m.persistent);
    let tagged = tags.iter().any(|&tag| tag != NO_TAG);
    confirm_waits(queue, persistent, tagged)
}

/// A protocol's connection, as the shared publish path needs it.
pub trait Publisher: ServeWhileWaiting + Send {
    /// The connection's batches, and the outbox where its queues put its events (confirm
    /// settlements among them).
    fn publish_parts(&mut self) -> (&mut PublishBatches, &Arc<Outbox>);

    fn batches(&mut self) -> &mut PublishBatches {
        self.publish_parts().0
    }

    /// The turn's publishes were handed to their queues: those that must be safe first wait
    /// for `ticket` (none when nothing waits); the protocol notes them with it and confirms
    /// the rest now.
    fn handed_over(&mut self, ticket: Option<u64>);

    /// A confirm ticket completed: the publishes that waited for it are safe (`ok`), or
    /// lost. The protocol confirms them.
    fn on_confirmed(&mut self, ticket: u64, ok: bool);

    /// Writes what is queued as far as the socket takes it without waiting; the rest goes
    /// with the turn's own flush.
    fn write_now(&mut self);
}

/// A queue settled `ticket` (`Event::Settled`): when it was the last one, the publishes that
/// waited for it are confirmed.
pub fn on_settled<P: Publisher>(conn: &mut P, ticket: u64, ok: bool) {
    if let Some(ok) = conn.batches().confirms.settled(ticket, ok) {
        conn.on_confirmed(ticket, ok);
    }
}

/// Ends a turn's publishing (see the module doc): hands the turn's settlements, then its
/// publishes, to their queues, has the protocol confirm what it may (`handed_over`), and runs
/// the turns of queues that took their batches ahead.
///
/// `accept`: the turn has confirms to send, so batches whose confirms wait for nothing are
/// taken ahead of their queues' turns; a turn with a reply (`reply_when_safe`) takes none.
pub async fn end_turn<P: Publisher>(conn: &mut P, accept: bool) {
    // Settlements first: an ack read with a publish frees its consumer's room before the
    // queue dispatches the publish, which may run at once (inline, see `publish_serving`).
    conn.batches().settles.send().await;
    if accept && conn.batches().reply.is_none() {
        conn.batches().accept();
    }
    let outbox = conn.publish_parts().1.clone();
    let mut ticket: Option<ConfirmTicket> = None; // for the first batch that must wait
    while let Some(QueueBatch {
        queue,
        messages,
        tags,
    }) = conn.batches().pop()
    {
        if messages.is_empty() {
            continue; // accepted ahead
        }
        let confirm = batch_waits(&queue, &messages, &tags).then(|| {
            let batches = conn.batches();
            let ticket = ticket.get_or_insert_with(|| {
                let reply = batches.reply.take();
                batches.confirms.open(&outbox, reply)
            });
            batches.confirms.hold(ticket); // the queue settles it once (see `warren_core::confirm`)
            ticket.clone()
        });
        // Served meanwhile (it may consume from the same queue): see `publish_serving`.
        queue
            .publish_serving(messages, confirm, tags, &outbox, conn)
            .await;
    }
    if let Some(reply) = conn.batches().reply.take() {
        let _ = reply.send(true); // nothing to wait for
    }
    let waiting_for = ticket.as_ref().map(ConfirmTicket::id);
    let completed = ticket.and_then(|t| conn.batches().confirms.release(t));
    conn.handed_over(waiting_for);
    if let (Some(ticket), Some(ok)) = (waiting_for, completed) {
        conn.on_confirmed(ticket, ok); // every queue settled before the publishes waited
    }
    run_accepted(conn);
}

/// Runs the turns of the queues that took their batches ahead of them, once the confirms
/// those batches allowed are written: the accepted publishes are in their queues' order, so
/// their confirms may go out before the turns that deliver them, and a publisher spread over
/// many queues gets its confirms while those turns run, not after all of them.
fn run_accepted<P: Publisher>(conn: &mut P) {
    if conn.batches().accepted.is_empty() {
        return;
    }
    conn.write_now();
    for queue in conn.batches().accepted.drain(..) {
        queue.run_accepted();
    }
}
