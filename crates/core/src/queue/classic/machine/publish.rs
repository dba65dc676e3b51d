//! Publishes into the classic queue: the length limits (`x-max-length`, `x-max-length-bytes`
//! with their overflow modes) and the enqueue itself, which decides whether a message is
//! written to the store and when its publisher confirm may go out (the type's rule,
//! `Classic::confirm_after`).

use std::sync::Arc;

use warren_store::FLAG_DURABLE;

use super::super::ready::{Ready, Stored};
use super::persist::Unwritten;
use super::ClassicQueue;
use crate::confirm::ConfirmTicket;
use crate::dead_letter::DeathReason;
use crate::message::Message;
use crate::queue::expiry;
use crate::queue::{Action, Overflow};

impl ClassicQueue {
    /// Enqueues a batch; with `x-overflow=reject-publish(-dlx)` a message that would exceed
    /// the length limit is refused, and its publisher (`tags`) told through the ticket.
    pub(super) fn publish(
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
                // Written by `flush_store` at the end of the turn, unless done with by then.
                persist.enqueued.push(Unwritten {
                    seq,
                    flags: if durable { FLAG_DURABLE } else { 0 },
                    message: message.clone(),
                    deadline,
                    page_out: over_budget,
                    done: false,
                });
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

    /// `x-overflow=drop-head`: drops (or dead-letters) from the head while over a limit.
    pub(super) fn enforce_limits(&mut self) {
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
}
