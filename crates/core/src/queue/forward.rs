//! Forwarding dead letters from a queue to the queues its dead-letter exchange routes them to.
//!
//! Dead letters take the route a publish takes (the vhost's routing snapshot) and reach the
//! target queues as ordinary `Publish` commands. A queue task never waits on another queue:
//! queue A dead-lettering into B while B dead-letters into A would deadlock if both waited for
//! room in the other's mailbox. So the forwarder only `try_send`s; what does not fit stays in
//! a bounded buffer (`limits::DEAD_LETTER_PENDING_MAX` messages) and is retried after
//! `DEAD_LETTER_RETRY_MS`. Past the bound, new dead letters are dropped and logged: dead-
//! lettering is at-most-once for classic queues, as in RabbitMQ, whose docs say messages can
//! be lost when the target cannot take them.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::limits::DEAD_LETTER_PENDING_MAX;
use crate::message::Message;
use crate::queue::{QueueCmd, QueueHandle};
use crate::vhost::VHost;

/// How long dead letters wait before the next try when a target's mailbox was full.
pub const DEAD_LETTER_RETRY_MS: u64 = 20;

pub struct Forwarder {
    vhost: Weak<VHost>,
    /// Dead letters per target queue, oldest first.
    pending: Vec<(QueueHandle, Vec<Arc<Message>>)>,
    pending_count: usize,
    retry_at: Option<Instant>,
    /// A drop was logged (once per queue, not per message).
    drop_logged: bool,
    cycle_logged: bool,
}

impl Forwarder {
    pub fn new(vhost: Weak<VHost>) -> Forwarder {
        Forwarder {
            vhost,
            pending: Vec::new(),
            pending_count: 0,
            retry_at: None,
            drop_logged: false,
            cycle_logged: false,
        }
    }

    /// Routes a dead-lettered copy; it goes out with `flush`. `source` names the dying queue
    /// for logs.
    pub fn route(&mut self, copy: Message, source: &str) {
        let Some(vhost) = self.vhost.upgrade() else {
            return;
        };
        let exchange = std::str::from_utf8(&copy.exchange).unwrap_or_default();
        let routing_key = std::str::from_utf8(&copy.routing_key).unwrap_or_default();
        let mut targets = Vec::new();
        // A missing exchange drops the message silently, as RabbitMQ does.
        let _ = vhost
            .snapshot()
            .route_dead_letter(exchange, routing_key, &mut targets);
        let deaths = copy.deaths.clone();
        let copy = Arc::new(copy);
        for target in targets {
            if deaths.as_ref().is_some_and(|d| d.is_cycle(target.name())) {
                if !self.cycle_logged {
                    self.cycle_logged = true;
                    tracing::warn!(
                        "dead-letter cycle detected from queue '{source}' to queue '{}': \
                         message dropped",
                        target.name()
                    );
                }
                continue;
            }
            self.add(target, copy.clone(), source);
        }
    }

    fn add(&mut self, target: QueueHandle, copy: Arc<Message>, source: &str) {
        if self.pending_count >= DEAD_LETTER_PENDING_MAX {
            if !self.drop_logged {
                self.drop_logged = true;
                tracing::warn!(
                    "queue '{source}': {} dead letters wait for busy target queues; \
                     further dead letters are dropped",
                    self.pending_count
                );
            }
            return;
        }
        self.pending_count += 1;
        match self.pending.iter_mut().find(|(q, _)| q.same(&target)) {
            Some((_, batch)) => batch.push(copy),
            None => self.pending.push((target, vec![copy])),
        }
    }

    /// Hands what it can to the target queues without waiting.
    pub fn flush(&mut self) {
        if self.pending.is_empty() || self.retry_at.is_some_and(|at| at > Instant::now()) {
            return;
        }
        self.retry_at = None;
        let mut kept = Vec::new();
        for (target, messages) in self.pending.drain(..) {
            let count = messages.len();
            let cmd = QueueCmd::Publish {
                messages,
                confirm: None,
                tags: Vec::new(),
                // Dead letters take no publisher credit: the forwarder's own bound limits them.
                credit: None,
            };
            match target.try_send_data(cmd) {
                Ok(()) => self.pending_count -= count,
                Err(Some(QueueCmd::Publish { messages, .. })) => kept.push((target, messages)),
                Err(_) => self.pending_count -= count, // the target was deleted
            }
        }
        if !kept.is_empty() {
            let delay = Duration::from_millis(DEAD_LETTER_RETRY_MS);
            self.retry_at = Some(Instant::now() + delay);
        } else {
            self.drop_logged = false;
        }
        self.pending = kept;
    }

    /// When the queue task must wake to retry.
    pub fn wake_at(&self) -> Option<Instant> {
        self.retry_at.filter(|_| !self.pending.is_empty())
    }
}
