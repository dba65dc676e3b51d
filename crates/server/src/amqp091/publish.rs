//! Publishing: assembling method + header + body frames into a message, routing it through
//! the vhost's snapshot, batching it per target queue, mandatory returns, publisher confirms
//! and transactions.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};

use warren_core::access::{Perm, ResourceKind};

use bytes::{Bytes, BytesMut};
use rustc_hash::FxHashMap;
use warren_core::confirm::{ConfirmTicket, ConfirmWaits};
use warren_core::message::{Body, Format, Message};
use warren_core::queue::{
    send_credit, ConfirmAfter, QueueHandle, ServeWhileWaiting, SettleOp, Settlements,
};
use warren_core::routing::MessageFields;
use warren_core::stats::add_owned;
use warren_proto::amqp091::{
    self as wire, reply_code, BasicAck, BasicNack, BasicProperties, BasicPublish, BasicReturn,
    ContentHeader, Method,
};

use super::annotations;
use super::channel::{Unacked, WaitingConfirm};
use super::connection::Connection;
use super::convert::message_fields;
use super::fault::{Cause, Fault};

const BASIC_CLASS_ID: u16 = 60;
const PUBLISH_CAUSE: Cause = Cause {
    class_id: 60,
    method_id: 40,
};
pub const REPLY_TO_PSEUDO_QUEUE: &str = "amq.rabbitmq.reply-to";
/// A publish's tag for queues that may refuse it: channel id above this many bits, the
/// channel's confirm sequence number below (2^48 publishes per channel).
const TAG_SEQ_BITS: u32 = 48;
/// How often tx.commit looks at its connection's events while it waits for the queues, when
/// no wake-up came (a safety net: every settlement wakes it).
const COMMIT_POLL: std::time::Duration = std::time::Duration::from_millis(50);
/// The tag of a publish nobody waits to hear about (no confirm mode).
const NO_TAG: u64 = u64::MAX;

/// A publish whose content is still arriving.
pub struct Assembly {
    publish: BasicPublish,
    header: Option<ContentHeader>,
    /// The body's first frame, and any after it (most bodies fit one frame: no allocation).
    first_chunk: Bytes,
    more_chunks: Vec<Bytes>,
    received: u64,
}

/// Work of a transaction, applied at tx.commit.
#[derive(Default)]
pub struct TxBuffer {
    publishes: Vec<(Vec<QueueHandle>, Arc<Message>, bool)>,
    settles: Vec<(SettleOp, Unacked)>,
}

impl TxBuffer {
    /// Publishes and acks waiting for tx.commit (the management API's
    /// `messages_uncommitted` and `acks_uncommitted`).
    pub fn uncommitted(&self) -> (usize, usize) {
        (self.publishes.len(), self.settles.len())
    }
}

/// The publishes for one queue collected in one read.
struct QueueBatch {
    queue: QueueHandle,
    messages: Vec<Arc<Message>>,
    /// For queues that may refuse publishes: each message's tag (see `TAG_SEQ_BITS`).
    tags: Vec<u64>,
}

impl QueueBatch {
    /// Whether the batch's confirm waits for the queue: for the store to write a persistent
    /// message to a durable queue, or for a queue that may refuse publishes to answer.
    fn confirm_waits(&self) -> bool {
        QueueBatch::confirm_waits_for(&self.queue, &self.messages, &self.tags)
    }

    /// The same for a batch already taken apart (`flush_pending` destructures it in the loop
    /// pattern: a whole `QueueBatch` held across its awaits would grow every connection's
    /// future).
    fn confirm_waits_for(queue: &QueueHandle, messages: &[Arc<Message>], tags: &[u64]) -> bool {
        let persistent = messages.iter().any(|m| m.persistent);
        queue.confirm_after(persistent) != ConfirmAfter::Enqueued
            || tags.iter().any(|&tag| tag != NO_TAG)
    }
}

/// Publishes and settlements collected while decoding one read, sent per queue in batches.
#[derive(Default)]
pub struct Pending {
    publishes: FxHashMap<usize, QueueBatch>,
    settles: Settlements,
    confirm_channels: Vec<u16>,
    /// Confirm tickets handed to queues and not yet settled by all of them.
    pub(super) confirms: ConfirmWaits,
    /// tx.commit waits for its publishes to be safe through this.
    commit_reply: Option<tokio::sync::oneshot::Sender<bool>>,
    /// Message counts of this turn, added to the broker's totals once per turn.
    pub(super) counts: MessageCounts,
    /// This turn's publishes by exchange: `(name, published, routed copies)`, added to the
    /// vhost's exchange counts once per turn; at most `EXCHANGES_PER_TURN_MAX` entries.
    pub(super) exchanges: Vec<(Bytes, u64, u64)>,
    /// The queues the message being completed routes to, and in `flush_pending` the queues
    /// that accepted their batches ahead of their turns (see `accept_publishes`); kept empty
    /// between uses so its allocation serves every publish of the connection.
    targets: Vec<QueueHandle>,
}

/// Distinct exchanges a turn counts locally; publishes to more go to the vhost's table
/// directly (a client publishing to that many exchanges in one read is rare).
const EXCHANGES_PER_TURN_MAX: usize = 8;

/// Room made at once for a turn's messages to one queue: a streaming publisher's read holds
/// several, so the batch does not grow through 1, 2, 4 and 8.
const QUEUE_BATCH_CAPACITY: usize = 16;

/// Per-connection message counts, moved to `GlobalCounters` once per turn (see
/// `Connection::add_counts`): no shared write per message.
#[derive(Debug, Default, Clone, Copy)]
pub struct MessageCounts {
    pub received: u64,
    pub routed: u64,
    pub unroutable_dropped: u64,
    pub unroutable_returned: u64,
    pub confirmed: u64,
}

impl Pending {
    fn publish(&mut self, queue: &QueueHandle, message: Arc<Message>, tag: u64) {
        let batch = self
            .publishes
            .entry(queue.key())
            .or_insert_with(|| QueueBatch {
                queue: queue.clone(),
                messages: Vec::with_capacity(QUEUE_BATCH_CAPACITY),
                tags: Vec::new(),
            });
        batch.messages.push(message);
        if queue.args().rejects_publishes() {
            batch.tags.push(tag);
        }
    }

    pub fn settle(&mut self, queue: &QueueHandle, op: SettleOp, seq: u64) {
        self.settles.add(queue, op, seq);
    }
}

impl Connection {
    pub(super) fn on_publish(&mut self, id: u16, publish: BasicPublish) -> Result<(), Fault> {
        if publish.immediate {
            // As RabbitMQ 3.x: the immediate flag was dropped from the protocol's practice.
            return Err(Fault::connection(
                reply_code::NOT_IMPLEMENTED,
                "immediate=true",
                PUBLISH_CAUSE,
            ));
        }
        let exchange = publish.exchange.as_str();
        self.check(Perm::Write, ResourceKind::Exchange, exchange)
            .and_then(|()| self.check_topic(Perm::Write, exchange, &publish.routing_key))
            .map_err(|error| Fault::broker(id, error, PUBLISH_CAUSE))?;
        let channel = self
            .channels
            .get_mut(&id)
            .expect("invariant: caller checked the channel");
        channel.assembly = Some(Assembly {
            publish,
            header: None,
            first_chunk: Bytes::new(),
            more_chunks: Vec::new(),
            received: 0,
        });
        Ok(())
    }

    pub(super) fn on_header(&mut self, id: u16, header: ContentHeader) -> Result<(), Fault> {
        let max_size = self.shared.config.max_message_size;
        let Some(channel) = self.channels.get_mut(&id) else {
            return Err(unexpected_content());
        };
        if channel.closing {
            return Ok(());
        }
        let Some(assembly) = channel.assembly.as_mut().filter(|a| a.header.is_none()) else {
            return Err(unexpected_content());
        };
        if header.class_id != BASIC_CLASS_ID {
            return Err(Fault::connection(
                reply_code::UNEXPECTED_FRAME,
                format!(
                    "expected content header for class {BASIC_CLASS_ID}, got one for class {} \
                     instead",
                    header.class_id
                ),
                PUBLISH_CAUSE,
            ));
        }
        if header.body_size > max_size {
            channel.assembly = None;
            return Err(Fault::new(
                id,
                reply_code::PRECONDITION_FAILED,
                format!(
                    "message size {} is larger than configured max size {max_size}",
                    header.body_size
                ),
                PUBLISH_CAUSE,
            ));
        }
        let empty = header.body_size == 0;
        assembly.header = Some(header);
        if empty {
            self.complete_publish(id)?;
        }
        Ok(())
    }

    pub(super) fn on_body(&mut self, id: u16, payload: Bytes) -> Result<(), Fault> {
        let Some(channel) = self.channels.get_mut(&id) else {
            return Err(unexpected_content());
        };
        if channel.closing {
            return Ok(());
        }
        let Some(assembly) = channel.assembly.as_mut() else {
            return Err(unexpected_content());
        };
        let Some(header) = &assembly.header else {
            return Err(Fault::connection(
                reply_code::UNEXPECTED_FRAME,
                format!(
                    "expected content header for class {BASIC_CLASS_ID}, got non content \
                     header frame instead"
                ),
                PUBLISH_CAUSE,
            ));
        };
        assembly.received += payload.len() as u64;
        if assembly.received > header.body_size {
            return Err(Fault::connection(
                reply_code::FRAME_ERROR,
                "content body frame exceeds remaining content size",
                PUBLISH_CAUSE,
            ));
        }
        let done = assembly.received == header.body_size;
        if assembly.first_chunk.is_empty() && assembly.more_chunks.is_empty() {
            assembly.first_chunk = payload;
        } else {
            assembly.more_chunks.push(payload);
        }
        if done {
            self.complete_publish(id)?;
        }
        Ok(())
    }

    fn complete_publish(&mut self, id: u16) -> Result<(), Fault> {
        let channel = self
            .channels
            .get_mut(&id)
            .expect("invariant: caller checked the channel");
        let assembly = channel
            .assembly
            .take()
            .expect("invariant: a publish is being assembled");
        let header = assembly
            .header
            .expect("invariant: complete content has a header");
        let body = join(assembly.first_chunk, assembly.more_chunks);
        debug_assert_eq!(body.len() as u64, header.body_size);
        let publish = assembly.publish;
        self.check_user_id(id, &header.properties)?;
        let properties = self.rewrite_reply_to(id, header.properties)?;
        let (properties, cc) = sender_selected(properties)
            .map_err(|text| Fault::new(id, reply_code::PRECONDITION_FAILED, text, PUBLISH_CAUSE))?;
        let expiration_ms = annotations::expiration_ms(&properties)
            .map_err(|text| Fault::new(id, reply_code::PRECONDITION_FAILED, text, PUBLISH_CAUSE))?;
        let mut targets = std::mem::take(&mut self.pending.targets);
        self.route(id, &publish, &properties, &cc, &mut targets)?;
        let message = Arc::new(Message {
            format: Format::Amqp091,
            exchange: publish.exchange.into_bytes(),
            routing_key: publish.routing_key.into_bytes(),
            persistent: wire::peek_delivery_mode(&properties) == Some(2),
            priority: wire::peek_priority(&properties).unwrap_or(0),
            expiration_ms,
            deaths: None,
            properties,
            body,
        });
        self.pending.counts.received += 1;
        self.count_exchange(&message.exchange, targets.len());
        let channel = self
            .channels
            .get_mut(&id)
            .expect("invariant: checked above");
        add_owned(&channel.stats.publish, 1);
        if let Some(tx) = channel.tx.as_mut() {
            // The list goes with the transaction; the next publish starts a new one.
            tx.publishes.push((targets, message, publish.mandatory));
            return Ok(());
        }
        let mut tag = NO_TAG;
        if let Some(confirm) = channel.confirm.as_mut() {
            confirm.published += 1;
            tag = (u64::from(id) << TAG_SEQ_BITS) | confirm.published;
            if !self.pending.confirm_channels.contains(&id) {
                self.pending.confirm_channels.push(id);
            }
        }
        self.deliver_published(id, &targets, message, publish.mandatory, tag);
        targets.clear();
        self.pending.targets = targets;
        Ok(())
    }

    /// Counts a publish to `exchange` that reached `routed` queues, for the exchange's
    /// `publish_in` and `publish_out` (added to the vhost's table once per turn).
    fn count_exchange(&mut self, exchange: &Bytes, routed: usize) {
        let routed = routed as u64;
        let turn = &mut self.pending.exchanges;
        if let Some(entry) = turn.iter_mut().find(|(name, ..)| name == exchange) {
            entry.1 += 1;
            entry.2 += routed;
        } else if turn.len() < EXCHANGES_PER_TURN_MAX {
            turn.push((exchange.clone(), 1, routed));
        } else {
            self.vhost().exchange_stats().add(exchange, 1, routed);
        }
    }

    /// Queues `message` for its targets, or returns it to the publisher when mandatory and
    /// unroutable (the return is written before the confirm, as the spec orders).
    fn deliver_published(
        &mut self,
        id: u16,
        targets: &[QueueHandle],
        message: Arc<Message>,
        mandatory: bool,
        tag: u64,
    ) {
        if targets.is_empty() {
            let stats = self.channels.get(&id).map(|c| &c.stats);
            if mandatory {
                self.pending.counts.unroutable_returned += 1;
                if let Some(stats) = stats {
                    add_owned(&stats.return_unroutable, 1);
                }
                let method = Method::BasicReturn(BasicReturn {
                    reply_code: reply_code::NO_ROUTE,
                    reply_text: "NO_ROUTE".into(),
                    exchange: exchange_of(&message),
                    routing_key: routing_key_of(&message),
                });
                let frame_max = self.tuning.frame_max;
                self.out
                    .content(id, &method, &message.properties, &message.body, frame_max);
            } else {
                self.pending.counts.unroutable_dropped += 1;
                if let Some(stats) = stats {
                    add_owned(&stats.drop_unroutable, 1);
                }
            }
            return;
        }
        self.pending.counts.routed += 1;
        for queue in targets {
            self.pending.publish(queue, message.clone(), tag);
        }
    }

    /// Routes on the message's routing key and its sender-selected keys (`cc`: the `CC` and
    /// `BCC` headers' routing keys, usually none).
    fn route(
        &mut self,
        id: u16,
        publish: &BasicPublish,
        properties: &Bytes,
        cc: &[String],
        targets: &mut Vec<QueueHandle>,
    ) -> Result<(), Fault> {
        let vhost = self.vhost();
        let exchange = publish.exchange.as_str();
        let routing_key = publish.routing_key.as_str();
        let mut fields = || -> MessageFields {
            BasicProperties::decode(properties)
                .map_or_else(|_| MessageFields::default(), message_fields)
        };
        let snapshot = vhost.snapshot();
        let routed = if cc.is_empty() {
            let keys = std::slice::from_ref(&routing_key);
            snapshot.route(exchange, keys, &mut fields, targets)
        } else {
            let mut keys = Vec::with_capacity(cc.len() + 1);
            keys.push(routing_key);
            keys.extend(cc.iter().map(String::as_str));
            snapshot.route(exchange, &keys, &mut fields, targets)
        };
        routed.map_err(|error| Fault::broker(id, error, PUBLISH_CAUSE))
    }

    /// As RabbitMQ: a `user_id` property must name the authenticated user.
    fn check_user_id(&self, id: u16, raw: &Bytes) -> Result<(), Fault> {
        const USER_ID_FLAG: u8 = 0x10; // bit 4 of the first flags word
        if raw.get(1).is_none_or(|low| low & USER_ID_FLAG == 0) {
            return Ok(());
        }
        let Ok(properties) = BasicProperties::decode(raw) else {
            return Ok(()); // validated when the frame was decoded
        };
        let Some(user_id) = properties.user_id else {
            return Ok(());
        };
        // RabbitMQ's `check_user_id`: the user's own name, or any name for an impersonator.
        let (user, impersonator) = (&self.user, self.impersonator);
        warren_core::access::check_user_id_as(user_id.as_str(), user, impersonator).map_err(
            |error| {
                Fault::new(
                    id,
                    reply_code::PRECONDITION_FAILED,
                    error.text,
                    PUBLISH_CAUSE,
                )
            },
        )
    }

    /// Direct reply-to: `reply_to = amq.rabbitmq.reply-to` becomes the channel's private
    /// reply queue, so the responder's publish to that name reaches this channel's consumer.
    fn rewrite_reply_to(&mut self, id: u16, raw: Bytes) -> Result<Bytes, Fault> {
        let marker = REPLY_TO_PSEUDO_QUEUE.as_bytes();
        if !raw.windows(marker.len()).any(|w| w == marker) {
            return Ok(raw);
        }
        let Ok(mut properties) = BasicProperties::decode(&raw) else {
            return Ok(raw);
        };
        if properties.reply_to.as_deref() != Some(REPLY_TO_PSEUDO_QUEUE) {
            return Ok(raw);
        }
        let channel = self
            .channels
            .get(&id)
            .expect("invariant: caller checked the channel");
        let Some(queue) = &channel.reply_queue else {
            return Err(Fault::new(
                id,
                reply_code::PRECONDITION_FAILED,
                "fast reply consumer does not exist",
                PUBLISH_CAUSE,
            ));
        };
        properties.reply_to = Some(queue.name().as_ref().into());
        let mut out = BytesMut::with_capacity(raw.len() + 32);
        properties.encode(&mut out);
        Ok(out.freeze())
    }

    /// Hands collected settlements and publishes to their queues, then confirms.
    ///
    /// A publish is confirmed once every target queue has it under its durability contract:
    /// in its mailbox (processed in order, in memory), or, for a persistent message to a
    /// durable queue, written and fsynced by the message store. The latter hold a confirm
    /// ticket that comes back through the outbox (`on_confirmed`); confirms go out in order.
    pub(super) async fn flush_pending(&mut self) {
        // Settlements first: an ack read with a publish frees its consumer's room before the
        // queue dispatches the publish, which may run at once (inline, see `publish_serving`).
        self.pending.settles.send().await;
        let mut publishes = std::mem::take(&mut self.pending.publishes);
        self.accept_publishes(&mut publishes);
        let mut commit_reply = self.pending.commit_reply.take();
        let mut ticket: Option<ConfirmTicket> = None; // for the first batch that must wait
        for (
            _,
            QueueBatch {
                queue,
                messages: batch,
                tags,
            },
        ) in publishes.drain()
        {
            let confirm = QueueBatch::confirm_waits_for(&queue, &batch, &tags).then(|| {
                let waits = &mut self.pending.confirms;
                let ticket =
                    ticket.get_or_insert_with(|| waits.open(&self.outbox, commit_reply.take()));
                waits.hold(ticket); // the queue settles it once (see `warren_core::confirm`)
                ticket.clone()
            });
            // Served meanwhile (it may consume from the same queue): see `publish_serving`.
            let outbox = self.outbox.clone();
            queue
                .publish_serving(batch, confirm, tags, &outbox, self)
                .await;
        }
        // What this flush's confirms wait for, if anything, and whether it is complete.
        let waiting_for = ticket.as_ref().map(ConfirmTicket::id);
        let completed = ticket.and_then(|t| self.pending.confirms.release(t));
        if let Some(reply) = commit_reply {
            let _ = reply.send(true); // nothing to wait for
        }
        self.pending.publishes = publishes;
        let confirm_channels = std::mem::take(&mut self.pending.confirm_channels);
        for id in &confirm_channels {
            let Some(confirm) = self.channels.get_mut(id).and_then(|c| c.confirm.as_mut()) else {
                continue;
            };
            if confirm.published > confirm.waiting.back().map_or(confirm.acked, |w| w.up_to) {
                confirm.waiting.push_back(WaitingConfirm {
                    up_to: confirm.published,
                    ticket: waiting_for,
                    ok: true,
                });
            }
            self.send_confirms(*id);
        }
        if let (Some(ticket), Some(ok)) = (waiting_for, completed) {
            self.on_confirmed(ticket, ok); // every queue settled before the channels waited
        }
        self.pending.confirm_channels = confirm_channels;
        self.pending.confirm_channels.clear();
        if !self.pending.targets.is_empty() {
            // The accepted publishes are in their queues' order, so their confirms may go out
            // now, before the turns that deliver them: a publisher spread over many queues
            // gets its confirms while those turns run, not after all of them.
            self.write_now();
            for queue in self.pending.targets.drain(..) {
                queue.run_accepted();
            }
        }
    }

    /// Hands the batches whose confirms wait for nothing to their queues ahead of the queues'
    /// turns (`QueueHandle::try_accept`), when this turn has confirms to send; the accepted
    /// queues are left in `pending.targets`, the rest of the batches in `publishes`. A turn
    /// that has other batches too runs the accepted ones at once: the others may wait for
    /// their queues, and these must not wait with them.
    fn accept_publishes(&mut self, publishes: &mut FxHashMap<usize, QueueBatch>) {
        if self.pending.commit_reply.is_some() || self.pending.confirm_channels.is_empty() {
            return;
        }
        let accepted = &mut self.pending.targets;
        debug_assert!(accepted.is_empty(), "invariant: kept empty between uses");
        publishes.retain(|_, batch| {
            if batch.confirm_waits() {
                return true;
            }
            let messages = std::mem::take(&mut batch.messages);
            let tags = std::mem::take(&mut batch.tags);
            match batch.queue.try_accept((messages, None, tags)) {
                Ok(()) => {
                    accepted.push(batch.queue.clone());
                    false
                }
                Err((messages, _, tags)) => {
                    batch.messages = messages;
                    batch.tags = tags;
                    true
                }
            }
        });
        if !publishes.is_empty() {
            for queue in accepted.drain(..) {
                queue.run_accepted();
            }
        }
    }

    /// Writes what is queued as far as the socket takes it without waiting; the rest goes
    /// with the turn's own flush.
    fn write_now(&mut self) {
        let flush = std::pin::pin!(self.flush());
        // An error is the socket's, and the turn's flush meets it again.
        let _ = flush.poll(&mut Context::from_waker(Waker::noop()));
    }

    /// A confirm ticket came back: its publishes are safe (`ok`) or lost (nack).
    pub(super) fn on_confirmed(&mut self, ticket: u64, ok: bool) {
        let ids: Vec<u16> = self
            .channels
            .iter_mut()
            .filter_map(|(id, channel)| {
                let confirm = channel.confirm.as_mut()?;
                let mut hit = false;
                for waiting in confirm
                    .waiting
                    .iter_mut()
                    .filter(|w| w.ticket == Some(ticket))
                {
                    waiting.ticket = None;
                    waiting.ok = ok;
                    hit = true;
                }
                hit.then_some(*id)
            })
            .collect();
        for id in ids {
            self.send_confirms(id);
        }
    }

    /// Queues refused these publishes (`x-overflow=reject-publish`): they are nacked when
    /// their confirms go out.
    pub(super) fn on_publish_rejected(&mut self, tags: &[u64]) {
        for &tag in tags.iter().filter(|&&tag| tag != NO_TAG) {
            let id = u16::try_from(tag >> TAG_SEQ_BITS).unwrap_or(0);
            let seq = tag & ((1 << TAG_SEQ_BITS) - 1);
            let Some(confirm) = self.channels.get_mut(&id).and_then(|c| c.confirm.as_mut()) else {
                continue;
            };
            if seq <= confirm.acked || seq > confirm.published {
                continue; // not this channel's current publishes (closed and reopened)
            }
            let at = confirm.rejected.partition_point(|&s| s < seq);
            if confirm.rejected.get(at) != Some(&seq) {
                confirm.rejected.insert(at, seq);
            }
        }
    }

    /// Sends the confirms at the head of the channel's queue that no ticket holds back,
    /// coalesced into `multiple` acks and nacks; a publish a queue refused is nacked alone.
    fn send_confirms(&mut self, id: u16) {
        let Some(channel) = self.channels.get_mut(&id) else {
            return;
        };
        let stats = &channel.stats;
        let Some(confirm) = channel.confirm.as_mut() else {
            return;
        };
        let mut methods = Vec::new();
        let mut ack_up_to = None;
        let mut confirmed = 0;
        while let Some(waiting) = confirm.waiting.front().copied() {
            if waiting.ticket.is_some() {
                break;
            }
            confirm.waiting.pop_front();
            if !waiting.ok {
                if let Some(up_to) = ack_up_to.take() {
                    methods.push(confirm_method(confirm, up_to, true, &mut confirmed));
                }
                methods.push(confirm_method(
                    confirm,
                    waiting.up_to,
                    false,
                    &mut confirmed,
                ));
                confirm.rejected.retain(|&seq| seq > waiting.up_to);
                continue;
            }
            while let Some(&seq) = confirm.rejected.front().filter(|&&s| s <= waiting.up_to) {
                confirm.rejected.pop_front();
                if seq <= confirm.acked {
                    continue;
                }
                if seq - 1 > confirm.acked {
                    methods.push(confirm_method(confirm, seq - 1, true, &mut confirmed));
                }
                ack_up_to = None; // covered by the ack just sent
                methods.push(confirm_method(confirm, seq, false, &mut confirmed));
            }
            if waiting.up_to > confirm.acked {
                ack_up_to = Some(waiting.up_to);
            }
        }
        if let Some(up_to) = ack_up_to {
            methods.push(confirm_method(confirm, up_to, true, &mut confirmed));
        }
        self.pending.counts.confirmed += confirmed;
        add_owned(&stats.confirm, confirmed);
        for method in methods {
            self.out.method(id, &method);
        }
    }

    pub(super) fn tx_settle(&mut self, id: u16, op: SettleOp, unacked: Vec<Unacked>) -> bool {
        let Some(tx) = self.channels.get_mut(&id).and_then(|c| c.tx.as_mut()) else {
            return false;
        };
        tx.settles.extend(unacked.into_iter().map(|u| (op, u)));
        true
    }

    /// Applies the transaction; returns once its publishes are safe (for persistent messages
    /// to durable queues: fsynced), `false` when the message store could not make them so.
    pub(super) async fn tx_commit(&mut self, id: u16) -> bool {
        let channel = self
            .channels
            .get_mut(&id)
            .expect("invariant: caller checked the channel");
        let tx = std::mem::take(
            channel
                .tx
                .as_mut()
                .expect("invariant: caller checked tx mode"),
        );
        for (targets, message, mandatory) in tx.publishes {
            self.deliver_published(id, &targets, message, mandatory, NO_TAG);
        }
        for (op, unacked) in tx.settles {
            self.pending.settle(&unacked.queue, op, unacked.seq);
            self.note_settled(id, &unacked);
        }
        let (reply, mut safe) = tokio::sync::oneshot::channel();
        self.pending.commit_reply = Some(reply);
        self.flush_pending().await;
        // The queues' settlements arrive as events of this connection: serve them meanwhile.
        let outbox = self.outbox.clone();
        loop {
            if let Ok(safe) = safe.try_recv() {
                return safe;
            }
            tokio::select! {
                safe = &mut safe => return safe.unwrap_or(false),
                () = outbox.notified() => {}
                () = tokio::time::sleep(COMMIT_POLL) => {}
            }
            if !self.serve().await {
                return false; // the socket is gone
            }
        }
    }

    /// Rollback: publishes are dropped, acknowledgements undone (the messages stay unacked).
    pub(super) fn tx_rollback(&mut self, id: u16) {
        let channel = self
            .channels
            .get_mut(&id)
            .expect("invariant: caller checked the channel");
        let tx = std::mem::take(
            channel
                .tx
                .as_mut()
                .expect("invariant: caller checked tx mode"),
        );
        for (_, unacked) in tx.settles {
            let at = channel
                .unacked
                .partition_point(|u| u.delivery_tag < unacked.delivery_tag);
            channel.unacked.insert(at, unacked);
        }
    }
}

/// basic.ack or basic.nack of every publish up to `up_to` not yet confirmed.
/// `confirmed` counts the publishes acked.
fn confirm_method(
    confirm: &mut super::channel::Confirms,
    up_to: u64,
    ack: bool,
    confirmed: &mut u64,
) -> Method {
    let multiple = up_to - confirm.acked > 1;
    if ack {
        *confirmed += up_to - confirm.acked;
    }
    confirm.acked = up_to;
    if ack {
        Method::BasicAck(BasicAck {
            delivery_tag: up_to,
            multiple,
        })
    } else {
        Method::BasicNack(BasicNack {
            delivery_tag: up_to,
            multiple,
            requeue: false,
        })
    }
}

/// The exchange a stored message was published to, as a short string again (checked UTF-8
/// when it was decoded, so the fallback is unreachable).
pub(super) fn exchange_of(message: &Message) -> wire::ShortStr {
    wire::ShortStr::from_utf8(message.exchange.clone()).unwrap_or_default()
}

pub(super) fn routing_key_of(message: &Message) -> wire::ShortStr {
    wire::ShortStr::from_utf8(message.routing_key.clone()).unwrap_or_default()
}

/// `bytes` when they make a short string (UTF-8, at most 255 bytes), else none: what
/// `exchange_of` and `routing_key_of` give, without taking a reference.
pub(super) fn short_str_bytes(bytes: &Bytes) -> &[u8] {
    if wire::ShortStr::fits(bytes) {
        bytes
    } else {
        &[]
    }
}

/// Sender-selected distribution: the routing keys in the `CC` and `BCC` headers (arrays of
/// strings), with `BCC` removed from the properties. Only properties whose bytes contain a `CC`
/// or `BCC` table key are decoded, and only those with a `BCC` header are re-encoded: every
/// other message passes through untouched. A `CC`/`BCC` header that is not an array is refused
/// (406), as RabbitMQ refuses it ("unacceptable type in header").
fn sender_selected(raw: Bytes) -> Result<(Bytes, Vec<String>), String> {
    const HEADERS_FLAG: u8 = 0x20; // bit 13 of the flags word: headers present
    const MARKERS: [&[u8]; 2] = [b"\x02CC", b"\x03BCC"]; // the keys as short strings
    if raw.first().is_none_or(|high| high & HEADERS_FLAG == 0)
        || !MARKERS
            .iter()
            .any(|m| raw.windows(m.len()).any(|w| w == *m))
    {
        return Ok((raw, Vec::new()));
    }
    let Ok(mut properties) = BasicProperties::decode(&raw) else {
        return Ok((raw, Vec::new())); // validated when the frame was decoded
    };
    let Some(headers) = properties.headers.as_mut() else {
        return Ok((raw, Vec::new()));
    };
    let mut keys = Vec::new();
    let mut bcc = false;
    for name in ["CC", "BCC"] {
        match headers.get(name) {
            None => {}
            Some(wire::FieldValue::Array(values)) => {
                bcc |= name == "BCC";
                keys.extend(values.iter().filter_map(|v| v.as_str()).map(str::to_owned));
            }
            Some(other) => {
                return Err(format!(
                    "invalid message: unacceptable type in header {name}: expected an array \
                     of longstr, got type '{}'",
                    char::from(other.tag())
                ))
            }
        }
    }
    if !bcc {
        return Ok((raw, keys));
    }
    headers.0.retain(|(key, _)| key.as_str() != "BCC");
    let mut out = BytesMut::with_capacity(raw.len());
    properties.encode(&mut out);
    Ok((out.freeze(), keys))
}

/// The body of a publish: its frames' payloads as they are, slices of the read buffers.
fn join(first: Bytes, mut more: Vec<Bytes>) -> Body {
    if more.is_empty() {
        return Body::from(first);
    }
    more.insert(0, first);
    Body::from_chunks(more)
}

/// A content frame where a method frame is due (RabbitMQ's `rabbit_command_assembler`).
fn unexpected_content() -> Fault {
    Fault::connection(
        reply_code::UNEXPECTED_FRAME,
        "expected method frame, got non method frame instead",
        PUBLISH_CAUSE,
    )
}

impl ServeWhileWaiting for Connection {
    async fn serve(&mut self) -> bool {
        self.on_events();
        let grants = self.credit_due();
        if !grants.is_empty() {
            // Boxed: rare (see `Connection::on_read`).
            Box::pin(send_credit(grants)).await;
        }
        self.flush().await.is_ok() // false: the socket is gone; teardown follows
    }
}
