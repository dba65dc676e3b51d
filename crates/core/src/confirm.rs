//! Publisher confirms as explicit settlements: the one confirm-wait component both protocols'
//! connections use.
//!
//! A connection hands a batch of publishes to several queues under one `ConfirmTicket`. Each
//! queue that takes the ticket settles it exactly once, when the messages are safe under its
//! type's durability contract (`ConfirmAfter`) or can never be: `ConfirmTicket::settle` puts an
//! `Event::Settled` in the publisher's outbox (a queue on another node will send the same
//! settlement over the wire). `ConfirmWaits` counts the queues still holding each ticket; the
//! last settlement completes it, `ok` only when every queue said ok. Nothing happens in a
//! `Drop`: a ticket dropped without a settlement is a bug the invariant checks catch.

use std::sync::Arc;

use rustc_hash::FxHashMap;
use tokio::sync::oneshot;

use crate::consumer::{Event, Outbox};

/// A batch of publishes as a queue holds it until it settles it (see the module doc). One
/// pointer wide: publishing futures hold it across their awaits, and every connection's
/// future is as large as its largest await.
#[derive(Clone)]
pub struct ConfirmTicket(Arc<Ticket>);

struct Ticket {
    id: u64,
    outbox: Arc<Outbox>,
}

impl std::fmt::Debug for ConfirmTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConfirmTicket({})", self.0.id)
    }
}

impl ConfirmTicket {
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// This queue has the ticket's messages safe under its durability contract (`ok`), or can
    /// never have them (`!ok`: the publisher nacks). Called once per queue that took it.
    pub fn settle(&self, ok: bool) {
        let ticket = self.0.id;
        self.0.outbox.push(Event::Settled { ticket, ok });
    }

    /// Some of the ticket's messages were refused: the publisher nacks those (`tags` are
    /// the publisher's), and acks the rest once the ticket completes. Sent before `settle`.
    pub fn reject(&self, tags: Vec<u64>) {
        self.0.outbox.push(Event::PublishRejected { tags });
    }
}

/// One ticket's wait: the settlements still expected and what they said so far.
struct Wait {
    holders: u32,
    ok: bool,
    /// Also told when the ticket completes (tx.commit waits on it).
    reply: Option<oneshot::Sender<bool>>,
}

/// The tickets of one connection still waiting for queues (see the module doc).
#[derive(Default)]
pub struct ConfirmWaits {
    open: FxHashMap<u64, Wait>,
    next_id: u64,
}

impl ConfirmWaits {
    /// Opens a ticket held by its maker until `release`, so that queues settling early
    /// cannot complete it before every queue got it. Queues settle it through `outbox` (the
    /// connection's); `reply` is told the outcome too.
    pub fn open(
        &mut self,
        outbox: &Arc<Outbox>,
        reply: Option<oneshot::Sender<bool>>,
    ) -> ConfirmTicket {
        self.next_id += 1;
        let wait = Wait {
            holders: 1,
            ok: true,
            reply,
        };
        let previous = self.open.insert(self.next_id, wait);
        debug_assert!(previous.is_none(), "invariant: ticket ids are never reused");
        ConfirmTicket(Arc::new(Ticket {
            id: self.next_id,
            outbox: outbox.clone(),
        }))
    }

    /// A queue is about to take the ticket: one more settlement to wait for.
    pub fn hold(&mut self, ticket: &ConfirmTicket) {
        let wait = self
            .open
            .get_mut(&ticket.id())
            .expect("invariant: a ticket is held only while its maker holds it");
        wait.holders += 1;
    }

    /// The maker is done handing the ticket out; `Some(ok)` when that completes it.
    pub fn release(&mut self, ticket: ConfirmTicket) -> Option<bool> {
        self.settled(ticket.id(), true)
    }

    /// A queue settled `ticket` (`Event::Settled`); `Some(ok)` when it was the last one.
    /// A ticket this connection no longer waits for is ignored.
    pub fn settled(&mut self, ticket: u64, ok: bool) -> Option<bool> {
        let wait = self.open.get_mut(&ticket)?;
        debug_assert!(wait.holders > 0, "invariant: a completed ticket is removed");
        wait.holders -= 1;
        wait.ok &= ok;
        if wait.holders > 0 {
            return None;
        }
        let mut wait = self.open.remove(&ticket)?;
        if let Some(reply) = wait.reply.take() {
            let _ = reply.send(wait.ok);
        }
        Some(wait.ok)
    }

    /// Tickets still waiting for a settlement.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settled_events(outbox: &Outbox) -> Vec<(u64, bool)> {
        let mut events = Vec::new();
        outbox.take_all(&mut events);
        events
            .into_iter()
            .filter_map(|e| match e {
                Event::Settled { ticket, ok } => Some((ticket, ok)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_ticket_completes_with_its_last_settlement_and_only_then() {
        let outbox = Outbox::new();
        let mut waits = ConfirmWaits::default();
        let ticket = waits.open(&outbox, None);
        waits.hold(&ticket);
        waits.hold(&ticket);
        // One queue settles before the maker is done: not complete.
        ticket.settle(true);
        let events = settled_events(&outbox);
        assert_eq!(events, [(ticket.id(), true)]);
        assert_eq!(waits.settled(ticket.id(), true), None);
        let id = ticket.id();
        assert_eq!(waits.release(ticket), None);
        // The second queue failed: the ticket completes, not ok.
        assert_eq!(waits.settled(id, false), Some(false));
        assert!(waits.is_empty());
        // A late or repeated settlement of a completed ticket is ignored.
        assert_eq!(waits.settled(id, true), None);
    }

    #[test]
    fn an_unheld_ticket_completes_on_release_and_tells_its_reply() {
        let mut waits = ConfirmWaits::default();
        let (reply, mut told) = oneshot::channel();
        let ticket = waits.open(&Outbox::new(), Some(reply));
        assert_eq!(waits.release(ticket), Some(true));
        assert_eq!(told.try_recv(), Ok(true));
    }
}
