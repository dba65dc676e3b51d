//! The publishing side: transfers (multi-frame ones assembled) become messages, routed through
//! the vhost's snapshot and handed to their queues in per-queue batches with the same credit
//! flow as AMQP 0.9.1. Unsettled transfers are settled with a disposition once the message is
//! safe, as 0.9.1 publisher confirms: `accepted` when every queue has it (a persistent message
//! to a durable queue: written and fsynced by the message store), `released` when it reached no
//! queue, `rejected` when a queue refused it or its address is wrong.

use std::sync::Arc;

use bytes::Bytes;
use rustc_hash::{FxHashMap, FxHashSet};
use warren_core::access::{Perm, ResourceKind};
use warren_core::consumer::Outbox;
use warren_core::message::{Format, Message};
use warren_core::queue::{send_credit, QueueHandle, ServeWhileWaiting, SettleOp};
use warren_core::routing::MessageFields;
use warren_proto::amqp10::message::Sections;
use warren_proto::amqp10::{
    condition, AmqpError, DeliveryState, Disposition, Performative, ROLE_RECEIVER,
};

use super::address::{self, Address};
use super::connection::{broker_error, Connection, Fault};
use super::convert;
use super::link::LinkTarget;
use super::management::Request;
use super::transfer::Delivered;
use crate::connection::output;
use crate::connection::publish_batch::{self, PublishBatches, Publisher, NO_TAG};

/// Publishes, settlements and outcomes collected while handling one read.
#[derive(Default)]
pub struct Pending {
    /// The turn's batches and the confirm tickets still out (shared with AMQP 0.9.1).
    batches: PublishBatches,
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
}

impl Pending {
    pub fn settle(&mut self, queue: &QueueHandle, op: SettleOp, seq: u64) {
        self.batches.settle(queue, op, seq);
    }

    pub fn grant(&mut self, credit: (QueueHandle, u64, u32)) {
        self.credits.push(credit);
    }
}

fn tag_of(channel: u16, delivery_id: u32) -> u64 {
    (u64::from(channel) << 32) | u64::from(delivery_id)
}

impl Connection {
    /// Publishes a whole delivery from an incoming link (`handle` on session `channel`): its
    /// outcome is sent once it is safe (see `flush_pending`), or at once when it reached no
    /// queue or was refused.
    pub(super) fn publish(
        &mut self,
        channel: u16,
        handle: u32,
        delivery: Delivered,
    ) -> Result<(), Fault> {
        let Delivered {
            delivery_id,
            settled,
            raw,
            target,
        } = delivery;
        // Checked whole, decoded only as far as the broker reads it: the rest goes out as it came.
        let sections = Sections::decode_kept(&raw).map_err(|error| {
            Fault::close(
                condition::DECODE_ERROR,
                format!("malformed message: {error}"),
            )
        })?;
        let properties = sections.properties.as_ref();
        let to = properties.and_then(|p| p.to.as_deref());
        let checked = self
            .check_user_id(properties.and_then(|p| p.user_id.as_ref()))
            .and_then(|()| self.destination(&target, to));
        let (exchange, routing_key) = match checked {
            Ok(to) => to,
            Err(error) => {
                let state = DeliveryState::Rejected { error: Some(error) };
                self.outcome(channel, delivery_id, settled, state);
                return Ok(());
            }
        };
        let message = Arc::new(message_of(&sections, &raw, exchange, routing_key));
        // A vector kept from the last publish (no allocation per message).
        let mut targets = std::mem::take(&mut self.route_targets);
        targets.clear();
        if let Err(error) = self.route(&message, &sections, &raw, &mut targets) {
            if !matches!(target, LinkTarget::Anonymous) {
                let error = broker_error(error);
                return Err(Fault::Detach {
                    channel,
                    handle,
                    error,
                });
            }
            let state = DeliveryState::Rejected {
                error: Some(broker_error(error)),
            };
            self.outcome(channel, delivery_id, settled, state);
        } else if targets.is_empty() {
            self.outcome(channel, delivery_id, settled, DeliveryState::Released);
        } else {
            self.enqueue(channel, delivery_id, settled, &message, &targets);
        }
        targets.clear();
        self.route_targets = targets;
        Ok(())
    }

    /// A user-id property must name the authenticated user. RabbitMQ ends the session;
    /// Warren rejects the message, which every client reports on the send that caused it.
    fn check_user_id(&self, user_id: Option<&Bytes>) -> Result<(), AmqpError> {
        match user_id.filter(|u| u.as_ref() != self.user.as_bytes()) {
            None => Ok(()),
            Some(user_id) => Err(AmqpError::new(
                condition::UNAUTHORIZED_ACCESS,
                format!(
                    "user_id property set to '{}' but authenticated user was '{}'",
                    String::from_utf8_lossy(user_id),
                    self.user
                ),
            )),
        }
    }

    /// The outcome of an unsettled delivery, sent with the turn's; none for a settled one.
    pub(super) fn outcome(
        &mut self,
        channel: u16,
        delivery_id: u32,
        settled: bool,
        state: DeliveryState,
    ) {
        if !settled {
            self.pending.outcomes.push((channel, delivery_id, state));
        }
    }

    /// A request to the management node, answered at the end of the turn.
    pub(super) fn request_management(&mut self, request: Request) {
        self.pending.management.push(request);
    }

    /// Adds a routed message to its queues' batches; an unsettled one waits for its outcome.
    fn enqueue(
        &mut self,
        channel: u16,
        delivery_id: u32,
        settled: bool,
        message: &Arc<Message>,
        targets: &[QueueHandle],
    ) {
        debug_assert!(!targets.is_empty(), "invariant: a routed message");
        let tag = if settled {
            NO_TAG
        } else {
            tag_of(channel, delivery_id)
        };
        let waits = targets
            .iter()
            .any(|q| publish_batch::confirm_waits(q, message.persistent, true));
        for queue in targets {
            self.pending.batches.publish(queue, message.clone(), tag);
        }
        if !settled {
            self.pending.unconfirmed.push((channel, delivery_id, waits));
        }
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
                let address = address::parse(to)
                    .map_err(|text| AmqpError::new(condition::PRECONDITION_FAILED, text))?;
                self.check_writable(&address)?;
                Ok(match address {
                    Address::Queue(queue) => (Bytes::new(), Bytes::from(queue)),
                    Address::Exchange {
                        exchange,
                        routing_key,
                    } => (Bytes::from(exchange), Bytes::from(routing_key)),
                })
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

    /// Hands collected credit, settlements and publishes to their queues (see
    /// `connection::publish_batch`), then sends the outcomes that need no confirm ticket.
    /// Publishes that must be safe first (persistent messages to durable queues, queues that
    /// may refuse them) share one ticket per turn.
    pub(super) async fn flush_pending(&mut self) {
        // Credit and settlements first: they free a consumer's room before the queue
        // dispatches this flush's publishes, which may run at once (inline).
        send_credit(std::mem::take(&mut self.pending.credits)).await;
        let accept = !self.pending.unconfirmed.is_empty();
        publish_batch::end_turn(self, accept).await;
        let requests = std::mem::take(&mut self.pending.management);
        if !requests.is_empty() {
            self.answer_management(requests).await;
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

/// The message a publish makes of its sections, kept as they came (see
/// `convert::kept_sections`).
fn message_of(sections: &Sections, raw: &Bytes, exchange: Bytes, routing_key: Bytes) -> Message {
    let (head, body) = convert::kept_sections(sections, raw);
    let header = sections.header.as_ref();
    Message {
        format: Format::Amqp10,
        exchange,
        routing_key,
        properties: head,
        body: body.into(),
        persistent: header.is_some_and(|h| h.durable),
        priority: header.and_then(|h| h.priority).unwrap_or(0),
        expiration_ms: header.and_then(|h| h.ttl),
        deaths: None,
    }
}

impl ServeWhileWaiting for Connection {
    async fn serve(&mut self) -> bool {
        self.on_events_now();
        self.flush().await.is_ok()
    }
}

impl Publisher for Connection {
    fn publish_parts(&mut self) -> (&mut PublishBatches, &Arc<Outbox>) {
        (&mut self.pending.batches, &self.outbox)
    }

    /// This turn's publishes are with their queues: the unsettled ones that must be safe
    /// first wait for `ticket`, the others are accepted now.
    fn handed_over(&mut self, ticket: Option<u64>) {
        let mut unconfirmed = std::mem::take(&mut self.pending.unconfirmed);
        for (channel, delivery_id, waits) in unconfirmed.drain(..) {
            match ticket.filter(|_| waits) {
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
        self.pending.unconfirmed = unconfirmed;
        self.write_outcomes();
    }

    /// A confirm ticket came back: its publishes are safe (`ok`) or lost.
    fn on_confirmed(&mut self, ticket: u64, ok: bool) {
        let Some(deliveries) = self.pending.waiting.remove(&ticket) else {
            return;
        };
        for (channel, delivery_id) in deliveries {
            let refused = self.pending.rejected.remove(&tag_of(channel, delivery_id));
            let state = if refused {
                DeliveryState::Rejected {
                    error: Some(AmqpError::new(
                        condition::RESOURCE_LIMIT_EXCEEDED,
                        "a target queue refused the message: it is full \
                         (x-overflow=reject-publish)",
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

    fn write_now(&mut self) {
        output::write_without_waiting(self.flush());
    }
}
