//! The publishing side: transfers (multi-frame ones assembled) become messages, routed through
//! the vhost's snapshot and handed to their queues in per-queue batches with the same credit
//! flow as AMQP 0.9.1. Unsettled transfers are settled with a disposition once the message is
//! safe, as 0.9.1 publisher confirms: `accepted` when every queue has it (a persistent message
//! to a durable queue: written and fsynced by the message store), `released` when it reached no
//! queue, `rejected` when a queue refused it or its address is wrong.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use rustc_hash::{FxHashMap, FxHashSet};
use warren_core::access::{Perm, ResourceKind};
use warren_core::confirm::{ConfirmTicket, ConfirmWaits};
use warren_core::message::{Format, Message};
use warren_core::queue::{
    send_credit, ConfirmAfter, QueueHandle, ServeWhileWaiting, SettleOp, Settlements,
};
use warren_core::routing::MessageFields;
use warren_proto::amqp10::message::Sections;
use warren_proto::amqp10::{
    condition, AmqpError, DeliveryState, Disposition, Performative, Transfer, ROLE_RECEIVER,
};

use super::address::{self, Address};
use super::connection::{broker_error, Connection, Fault};
use super::convert;
use super::link::{Assembly, Link, LinkTarget};
use super::management::Request;

/// The tag of a publish nobody waits to hear about (pre-settled).
const NO_TAG: u64 = u64::MAX;

struct QueueBatch {
    queue: QueueHandle,
    messages: Vec<Arc<Message>>,
    tags: Vec<u64>,
}

/// Publishes, settlements and outcomes collected while handling one read.
#[derive(Default)]
pub struct Pending {
    publishes: FxHashMap<usize, QueueBatch>,
    settles: Settlements,
    /// Unsettled publishes of this read: (channel, delivery-id, must wait for a ticket).
    unconfirmed: Vec<(u16, u32, bool)>,
    /// Publishes waiting for a confirm ticket, by ticket.
    waiting: FxHashMap<u64, Vec<(u16, u32)>>,
    /// Tags of publishes a queue refused (`x-overflow=reject-publish`).
    rejected: FxHashSet<u64>,
    /// Outcomes to send: (channel, delivery-id, state).
    outcomes: Vec<(u16, u32, DeliveryState)>,
    /// Requests to the management node.
    management: Vec<Request>,
    /// Credit for queues to deliver to consumers: (queue, consumer, credit).
    credits: Vec<(QueueHandle, u64, u32)>,
    /// Confirm tickets handed to queues and not yet settled by all of them.
    pub(super) confirms: ConfirmWaits,
}

impl Pending {
    pub fn settle(&mut self, queue: &QueueHandle, op: SettleOp, seq: u64) {
        self.settles.add(queue, op, seq);
    }

    pub fn grant(&mut self, credit: (QueueHandle, u64, u32)) {
        self.credits.push(credit);
    }

    fn publish(&mut self, queue: &QueueHandle, message: Arc<Message>, tag: u64) {
        let batch = self
            .publishes
            .entry(queue.key())
            .or_insert_with(|| QueueBatch {
                queue: queue.clone(),
                messages: Vec::new(),
                tags: Vec::new(),
            });
        batch.messages.push(message);
        if queue.args().rejects_publishes() {
            batch.tags.push(tag);
        }
    }
}

fn tag_of(channel: u16, delivery_id: u32) -> u64 {
    (u64::from(channel) << 32) | u64::from(delivery_id)
}

impl Connection {
    pub(super) fn on_transfer(
        &mut self,
        channel: u16,
        transfer: Transfer,
        payload: Bytes,
    ) -> Result<(), Fault> {
        let max_size = self.shared.config.max_message_size;
        let session = self.session(channel)?;
        // Flow control is enforced, not advisory (transport §2.5.6, §2.6.7): a transfer past
        // the session's incoming window ends the session, one past the link's credit
        // detaches the link. Alarms withhold credit, so they hold for AMQP 1.0 publishers.
        if session.incoming_window == 0 {
            return Err(Fault::End(
                channel,
                AmqpError::new(
                    condition::WINDOW_VIOLATION,
                    "transfer beyond the session's incoming window",
                ),
            ));
        }
        session.incoming_window -= 1;
        session.next_incoming_id = session.next_incoming_id.wrapping_add(1);
        let handle = transfer.handle;
        let link = match session.links.get_mut(&handle) {
            Some(Link::Incoming(link)) => link,
            Some(Link::Outgoing(_) | Link::Management(_)) => {
                return Err(link_error(
                    channel,
                    handle,
                    condition::ILLEGAL_STATE,
                    "transfer on a link the client receives on".into(),
                ))
            }
            // A link we detached (an error) while the client's transfers were on their way.
            None if session.detached.contains(&handle) => return Ok(()),
            None => {
                return Err(Fault::End(
                    channel,
                    AmqpError::new(
                        condition::UNATTACHED_HANDLE,
                        format!("Unattached link handle: {handle}"),
                    ),
                ))
            }
        };
        if link.assembly.is_none() && link.credit == 0 {
            return Err(link_error(
                channel,
                handle,
                condition::TRANSFER_LIMIT_EXCEEDED,
                "transfer without link credit: wait for a flow granting credit".into(),
            ));
        }
        if link.assembly.is_none() {
            let Some(delivery_id) = transfer.delivery_id else {
                return Err(link_error(
                    channel,
                    handle,
                    condition::INVALID_FIELD,
                    "the first transfer of a delivery has no delivery-id".into(),
                ));
            };
            link.assembly = Some(Assembly {
                delivery_id,
                settled: transfer.settled.unwrap_or(false),
                chunks: Vec::new(),
                size: 0,
            });
        }
        let assembly = link.assembly.as_mut().expect("invariant: set just above");
        if transfer.aborted {
            link.assembly = None;
            return Ok(());
        }
        assembly.size += payload.len() as u64;
        if assembly.size > max_size {
            link.assembly = None;
            return Err(link_error(
                channel,
                handle,
                condition::MESSAGE_SIZE_EXCEEDED,
                format!("message size exceeds the maximum of {max_size} bytes"),
            ));
        }
        if transfer.settled == Some(true) {
            assembly.settled = true;
        }
        if transfer.more {
            assembly.chunks.push(payload);
            return Ok(());
        }
        let assembly = link.assembly.take().expect("invariant: set above");
        link.credit = link.credit.saturating_sub(1);
        link.delivery_count = link.delivery_count.wrapping_add(1);
        let target = link.target.clone();
        let raw = join(assembly.chunks, payload);
        if matches!(target, LinkTarget::Management) {
            self.pending.management.push(Request { channel, raw });
            if !assembly.settled {
                let state = DeliveryState::Accepted;
                self.pending
                    .outcomes
                    .push((channel, assembly.delivery_id, state));
            }
            return Ok(());
        }
        self.publish(
            channel,
            handle,
            &target,
            assembly.delivery_id,
            assembly.settled,
            raw,
        )
    }

    fn publish(
        &mut self,
        channel: u16,
        handle: u32,
        target: &LinkTarget,
        delivery_id: u32,
        settled: bool,
        raw: Bytes,
    ) -> Result<(), Fault> {
        // Checked whole, decoded only as far as the broker reads it: the rest goes out as it came.
        let sections = Sections::decode_kept(&raw).map_err(|error| {
            Fault::close(
                condition::DECODE_ERROR,
                format!("malformed message: {error}"),
            )
        })?;
        let properties = sections.properties.as_ref();
        // A user-id property must name the authenticated user. RabbitMQ ends the session;
        // Warren rejects the message, which every client reports on the send that caused it.
        let user_id = properties.and_then(|p| p.user_id.as_ref());
        if let Some(user_id) = user_id.filter(|u| u.as_ref() != self.user.as_bytes()) {
            let text = format!(
                "user_id property set to '{}' but authenticated user was '{}'",
                String::from_utf8_lossy(user_id),
                self.user
            );
            if !settled {
                let error = Some(AmqpError::new(condition::UNAUTHORIZED_ACCESS, text));
                let state = DeliveryState::Rejected { error };
                self.pending.outcomes.push((channel, delivery_id, state));
            }
            return Ok(());
        }
        let to = properties.and_then(|p| p.to.as_deref());
        let (exchange, routing_key) = match self.destination(target, to) {
            Ok(to) => to,
            Err(error) => {
                if !settled {
                    let state = DeliveryState::Rejected { error: Some(error) };
                    self.pending.outcomes.push((channel, delivery_id, state));
                }
                return Ok(());
            }
        };
        let (head, body) = convert::kept_sections(&sections, &raw);
        let header = sections.header.as_ref();
        let message = Arc::new(Message {
            format: Format::Amqp10,
            exchange,
            routing_key,
            properties: head,
            body: body.into(),
            persistent: header.is_some_and(|h| h.durable),
            priority: header.and_then(|h| h.priority).unwrap_or(0),
            expiration_ms: header.and_then(|h| h.ttl),
            deaths: None,
        });
        // A vector kept from the last publish (no allocation per message).
        let mut targets = std::mem::take(&mut self.route_targets);
        targets.clear();
        if let Err(error) = self.route(&message, &sections, &raw, &mut targets) {
            if matches!(target, LinkTarget::Anonymous) {
                if !settled {
                    let state = DeliveryState::Rejected {
                        error: Some(broker_error(error)),
                    };
                    self.pending.outcomes.push((channel, delivery_id, state));
                }
                return Ok(());
            }
            return Err(Fault::Detach {
                channel,
                handle,
                error: broker_error(error),
            });
        }
        if targets.is_empty() {
            if !settled {
                let state = DeliveryState::Released;
                self.pending.outcomes.push((channel, delivery_id, state));
            }
            return Ok(());
        }
        let tag = if settled {
            NO_TAG
        } else {
            tag_of(channel, delivery_id)
        };
        let waits = targets
            .iter()
            .any(|q| waits_for_queue(q, message.persistent) || q.args().rejects_publishes());
        for queue in &targets {
            self.pending.publish(queue, message.clone(), tag);
        }
        if !settled {
            self.pending.unconfirmed.push((channel, delivery_id, waits));
        }
        targets.clear();
        self.route_targets = targets;
        Ok(())
    }

    /// The exchange and routing key of a message on a link with `target`, whose `to` property
    /// is `to`.
    fn destination(
        &self,
        target: &LinkTarget,
        to: Option<&str>,
    ) -> Result<(Bytes, Bytes), AmqpError> {
        match target {
            // Checked at attach too; again here so that revoked permissions apply at once.
            LinkTarget::Exchange {
                exchange,
                routing_key,
            } => {
                self.check(Perm::Write, ResourceKind::Exchange, exchange.as_str())?;
                Ok((exchange.bytes(), routing_key.bytes()))
            }
            LinkTarget::Queue(queue) => {
                self.check(Perm::Write, ResourceKind::Exchange, "")?;
                Ok((Bytes::new(), queue.bytes()))
            }
            LinkTarget::Management => Err(AmqpError::new(
                condition::NOT_ALLOWED,
                "the management node takes requests, not messages to route",
            )),
            LinkTarget::Anonymous => {
                let Some(to) = to else {
                    return Err(AmqpError::new(
                        condition::PRECONDITION_FAILED,
                        "anonymous terminus requires the 'to' address of each message to be set",
                    ));
                };
                match address::parse(to) {
                    Ok(Address::Queue(queue)) => {
                        self.check(Perm::Write, ResourceKind::Exchange, "")?;
                        Ok((Bytes::new(), Bytes::from(queue)))
                    }
                    Ok(Address::Exchange {
                        exchange,
                        routing_key,
                    }) => {
                        self.check(Perm::Write, ResourceKind::Exchange, &exchange)?;
                        self.check_exchange(&exchange)?;
                        Ok((Bytes::from(exchange), Bytes::from(routing_key)))
                    }
                    Err(text) => Err(AmqpError::new(condition::PRECONDITION_FAILED, text)),
                }
            }
        }
    }

    /// Routes `message`, decoded from `raw` as `sections`; a headers exchange reads the
    /// headers its AMQP 0.9.1 form would have.
    fn route(
        &self,
        message: &Message,
        sections: &Sections,
        raw: &Bytes,
        targets: &mut Vec<QueueHandle>,
    ) -> Result<(), warren_core::BrokerError> {
        let exchange = std::str::from_utf8(&message.exchange).unwrap_or_default();
        let routing_key = std::str::from_utf8(&message.routing_key).unwrap_or_default();
        // Only a headers or hashing exchange asks: the sections `decode_kept` passed over are
        // decoded then (they were checked, so this cannot fail).
        let mut fields = || -> MessageFields {
            let full = Sections::decode(raw);
            let (properties, _) =
                warren_proto::convert::to_amqp091(full.as_ref().unwrap_or(sections), raw);
            crate::amqp091::message_fields(properties)
        };
        let vhost = self.vhost();
        let snapshot = vhost.snapshot();
        snapshot.route(exchange, &[routing_key], &mut fields, targets)
    }

    /// Hands collected credit, settlements and publishes to their queues, then sends the
    /// outcomes that need no confirm ticket. Publishes that must be safe first (persistent
    /// messages to durable queues, queues that may refuse them) share one ticket per call.
    pub(super) async fn flush_pending(&mut self) {
        // Credit and settlements first: they free a consumer's room before the queue
        // dispatches this flush's publishes, which may run at once (inline).
        send_credit(std::mem::take(&mut self.pending.credits)).await;
        self.pending.settles.send().await;
        let mut publishes = std::mem::take(&mut self.pending.publishes);
        let mut ticket: Option<ConfirmTicket> = None;
        for (
            _,
            QueueBatch {
                queue,
                messages,
                tags,
            },
        ) in publishes.drain()
        {
            let persistent = messages.iter().any(|m| m.persistent);
            let waits = waits_for_queue(&queue, persistent) || tags.iter().any(|&t| t != NO_TAG);
            let confirm = waits.then(|| {
                let confirms = &mut self.pending.confirms;
                let ticket = ticket.get_or_insert_with(|| confirms.open(&self.outbox, None));
                confirms.hold(ticket); // the queue settles it once (see `warren_core::confirm`)
                ticket.clone()
            });
            // Served meanwhile (it may consume from the same queue): see `publish_serving`.
            let outbox = self.outbox.clone();
            queue
                .publish_serving(messages, confirm, tags, &outbox, self)
                .await;
        }
        self.pending.publishes = publishes;
        let ticket_id = ticket.as_ref().map(ConfirmTicket::id);
        let completed = ticket.and_then(|t| self.pending.confirms.release(t));
        for (channel, delivery_id, waits) in std::mem::take(&mut self.pending.unconfirmed) {
            match ticket_id.filter(|_| waits) {
                Some(id) => self
                    .pending
                    .waiting
                    .entry(id)
                    .or_default()
                    .push((channel, delivery_id)),
                None => self
                    .pending
                    .outcomes
                    .push((channel, delivery_id, DeliveryState::Accepted)),
            }
        }
        if let (Some(ticket), Some(ok)) = (ticket_id, completed) {
            self.on_confirmed(ticket, ok); // every queue settled before the deliveries waited
        }
        let requests = std::mem::take(&mut self.pending.management);
        if !requests.is_empty() {
            self.answer_management(requests).await;
        }
        self.write_outcomes();
    }

    /// A confirm ticket came back: its publishes are safe (`ok`) or lost.
    pub(super) fn on_confirmed(&mut self, ticket: u64, ok: bool) {
        let Some(deliveries) = self.pending.waiting.remove(&ticket) else {
            return;
        };
        for (channel, delivery_id) in deliveries {
            let refused = self.pending.rejected.remove(&tag_of(channel, delivery_id));
            let state = if refused {
                DeliveryState::Rejected {
                    error: Some(AmqpError::new(
                        condition::RESOURCE_LIMIT_EXCEEDED,
                        "a target queue refused the message: it is full (x-overflow=reject-publish)",
                    )),
                }
            } else if ok {
                DeliveryState::Accepted
            } else {
                DeliveryState::Rejected {
                    error: Some(AmqpError::new(
                        condition::INTERNAL_ERROR,
                        "the message store could not write the message",
                    )),
                }
            };
            self.pending.outcomes.push((channel, delivery_id, state));
        }
        self.write_outcomes();
    }

    pub(super) fn on_publish_rejected(&mut self, tags: &[u64]) {
        self.pending
            .rejected
            .extend(tags.iter().filter(|&&t| t != NO_TAG));
    }

    /// Writes the collected outcomes as settled dispositions, runs of consecutive
    /// delivery-ids with the same state in one.
    fn write_outcomes(&mut self) {
        let mut outcomes = std::mem::take(&mut self.pending.outcomes);
        outcomes.sort_by_key(|(channel, id, _)| (*channel, *id));
        let mut run: Option<(u16, u32, u32, DeliveryState)> = None;
        for (channel, id, state) in outcomes.drain(..) {
            if let Some((c, _, last, s)) = &mut run {
                if *c == channel && last.wrapping_add(1) == id && *s == state {
                    *last = id;
                    continue;
                }
            }
            if let Some(done) = run.replace((channel, id, id, state)) {
                self.write_disposition(done);
            }
        }
        if let Some(done) = run {
            self.write_disposition(done);
        }
        self.pending.outcomes = outcomes;
    }

    fn write_disposition(&mut self, (channel, first, last, state): (u16, u32, u32, DeliveryState)) {
        if !self.sessions.contains_key(&channel) {
            return; // the session ended meanwhile
        }
        let disposition = Disposition {
            role: ROLE_RECEIVER,
            first,
            last: (last != first).then_some(last),
            settled: true,
            state: Some(state),
            batchable: false,
        };
        self.out
            .frame(channel, &Performative::Disposition(disposition));
    }
}

fn link_error(channel: u16, handle: u32, condition: &str, text: String) -> Fault {
    Fault::Detach {
        channel,
        handle,
        error: AmqpError::new(condition, text),
    }
}

/// Whether the queue's type confirms such a publish only after a durability event (an fsync)
/// rather than once it holds it.
fn waits_for_queue(queue: &QueueHandle, persistent: bool) -> bool {
    queue.confirm_after(persistent) != ConfirmAfter::Enqueued
}

/// A message from the payloads of its transfers: `chunks` then `last`.
fn join(chunks: Vec<Bytes>, last: Bytes) -> Bytes {
    if chunks.is_empty() {
        return last;
    }
    // A message split over frames is joined once; single-frame messages stay zero-copy.
    let size = chunks.iter().map(Bytes::len).sum::<usize>() + last.len();
    let mut body = BytesMut::with_capacity(size);
    chunks.iter().for_each(|c| body.extend_from_slice(c));
    body.extend_from_slice(&last);
    body.freeze()
}

impl ServeWhileWaiting for Connection {
    async fn serve(&mut self) -> bool {
        self.on_events_now();
        self.flush().await.is_ok()
    }
}
