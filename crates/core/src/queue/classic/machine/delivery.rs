//! Consumers and delivery: consume, cancel, credit, single active consumer failover, and
//! the dispatch pass that hands ready messages to consumers with credit (highest
//! `x-priority` first, round-robin among equals) or to a `basic.get`.
//!
//! Deliveries of one pass are staged per consumer connection (one `Action::Deliver` each) and
//! released at the end of the turn, after the store has the `delivered` mark.

use std::sync::Arc;

use tokio::time::Instant;

use super::super::ready::Ready;
use super::{ClassicQueue, State};
use crate::consumer::{Consumer, ConsumerId, Delivery, Event};
use crate::dead_letter::DeathReason;
use crate::error::BrokerError;
use crate::limits::DISPATCH_BATCH_MAX;
use crate::message::Message;
use crate::queue::{Action, GetOk};

/// Staging vectors kept between dispatch passes, and the largest one kept: enough for a few
/// consumer connections' batches without holding a burst's memory.
pub(super) const STAGING_SPARE_MAX: usize = 8;
pub(super) const STAGING_KEEP_EVENTS: usize = 1024;

impl ClassicQueue {
    pub(super) fn consume(&mut self, consumer: Consumer) -> Result<(), BrokerError> {
        // A classic queue hands out its head only: a start belongs to streams (the
        // connections refuse `x-stream-offset` before this; this keeps the type's own rule).
        if let Some(start) = consumer.start {
            return Err(BrokerError::precondition_failed(format!(
                "{} is a classic queue: it cannot start a consumer at {start:?} \
                 (x-stream-offset applies to streams)",
                self.handle.def().resource()
            )));
        }
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

    pub(super) fn cancel(&mut self, consumer: ConsumerId) {
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

    pub(super) fn grant(&mut self, consumer: ConsumerId, credit: u32) {
        if let Some(c) = self.consumers.iter_mut().find(|c| c.id == consumer) {
            c.credit = c.credit.saturating_add(credit);
        }
    }

    /// Hands ready messages to consumers with credit: highest `x-priority` first, round-robin
    /// among equals, one message per turn while several compete, in batches otherwise. With
    /// single active consumer, only the active one.
    pub(super) fn deliver_ready(&mut self) {
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
            debug_assert!(
                consumer.credit > 0,
                "invariant: a delivery spends credit it has"
            );
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
    pub(super) fn flush_staged(&mut self) {
        let actions = &mut self.actions;
        for (outbox, events) in self.staged.drain(..) {
            actions.push(Action::Deliver { outbox, events });
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
        self.totals.delivered_total += 1;
        self.totals.redelivered_total += u64::from(ready.stored.redelivered);
        if no_ack {
            // Done with: no `delivered` mark needed, and no record at all when it was
            // published in this turn.
            self.forget(ready.seq, &ready.stored);
            self.expiry.remove(ready.seq);
        } else {
            self.delivered_max = self.delivered_max.max(ready.seq);
            self.unacked.insert(ready.seq, ready.stored.clone());
        }
    }

    pub(super) fn get(&mut self, channel: u16, no_ack: bool) -> Option<GetOk> {
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

    /// Tells every consumer's connection that the queue is gone (basic.cancel to the client).
    pub(in crate::queue::classic) fn cancel_all_consumers(&mut self) {
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
}
