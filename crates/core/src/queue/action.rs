//! What a queue's turn asks its driver to do (RabbitMQ's `rabbit_queue_type` actions): the
//! state machine collects them and the driver carries them out after the turn, so that the
//! machine runs without tasks or sockets and a test can read its outcomes directly. A queue
//! on another node will send the same actions over the wire.

use std::sync::Arc;

use crate::confirm::ConfirmTicket;
use crate::consumer::{Event, Outbox};

#[derive(Debug)]
pub enum Action {
    /// Deliveries (and consumer cancellations) for one connection, in order.
    Deliver {
        outbox: Arc<Outbox>,
        events: Vec<Event>,
    },
    /// The ticket's messages are safe in this queue (`ok`), or never will be.
    Settle { ticket: ConfirmTicket, ok: bool },
    /// The queue refused these publishes (`x-overflow=reject-publish`): the publisher nacks
    /// them. Always before the `Settle` of the same ticket.
    Reject {
        ticket: ConfirmTicket,
        tags: Vec<u64>,
    },
}

impl Action {
    /// Carries the action out; returns the emptied event vector of a `Deliver`, for reuse.
    pub fn apply(self) -> Option<Vec<Event>> {
        match self {
            Action::Deliver { outbox, mut events } => {
                outbox.push_batch(&mut events);
                Some(events)
            }
            Action::Settle { ticket, ok } => {
                ticket.settle(ok);
                None
            }
            Action::Reject { ticket, tags } => {
                ticket.reject(tags);
                None
            }
        }
    }
}
