//! How messages leave the classic queue other than by delivery: settlement of unacked ones
//! (ack, requeue, discard), expiry (TTL), dead-lettering, purge, and `x-expires` for the
//! queue itself.

use std::sync::Arc;
use std::time::Duration;

use super::super::ready::Ready;
use super::{ClassicQueue, State};
use crate::dead_letter::{dead_letter_copy, DeathReason};
use crate::message::Message;
use crate::queue::SettleOp;

impl ClassicQueue {
    pub(super) fn settle(&mut self, op: SettleOp, seqs: &[u64]) {
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
    pub(super) fn drop_message(
        &mut self,
        ready: &Ready,
        message: Option<&Arc<Message>>,
        reason: DeathReason,
    ) {
        if let Some(message) = message {
            self.dead_letter(message, reason);
        }
        self.forget(ready.seq, &ready.stored);
        self.expiry.remove(ready.seq);
    }

    /// Republishes a copy to the dead-letter exchange, if the queue has one.
    pub(super) fn dead_letter(&mut self, message: &Arc<Message>, reason: DeathReason) {
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
    pub(super) fn expire_due(&mut self) {
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

    /// `x-expires`: an unused queue deletes itself.
    pub(super) fn check_expires(&mut self) {
        let Some(ms) = self.args.expires_ms else {
            return;
        };
        let unused_for = self.last_used.elapsed();
        if self.consumers.is_empty() && unused_for >= Duration::from_millis(u64::from(ms)) {
            tracing::debug!(queue = %self.handle.name(), "unused for x-expires: deleted");
            self.state = State::AutoDeleted;
        }
    }

    pub(super) fn purge(&mut self) -> u32 {
        let count = u32::try_from(self.ready.len()).unwrap_or(u32::MAX);
        self.read_ahead.clear();
        for ready in self.ready.drain() {
            self.forget(ready.seq, &ready.stored);
            self.expiry.remove(ready.seq);
        }
        count
    }
}
