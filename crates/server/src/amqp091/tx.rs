//! Transactions (the tx class): a channel in tx mode keeps its publishes and settlements until
//! tx.commit, which hands them over and answers once the publishes are safe; tx.rollback drops
//! the publishes and gives the settled deliveries back to the channel, unacked.

use std::sync::Arc;

use warren_core::message::Message;
use warren_core::queue::ServeWhileWaiting;
use warren_core::queue::{QueueHandle, SettleOp};

use super::channel::Unacked;
use super::connection::Connection;
use crate::connection::publish_batch::NO_TAG;

/// How often tx.commit looks at its connection's events while it waits for the queues, when
/// no wake-up came (a safety net: every settlement wakes it).
const COMMIT_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Work of a transaction, applied at tx.commit.
#[derive(Default)]
pub struct TxBuffer {
    pub(super) publishes: Vec<(Vec<QueueHandle>, Arc<Message>, bool)>,
    settles: Vec<(SettleOp, Unacked)>,
}

impl TxBuffer {
    /// Publishes and acks waiting for tx.commit (the management API's
    /// `messages_uncommitted` and `acks_uncommitted`).
    pub fn uncommitted(&self) -> (usize, usize) {
        (self.publishes.len(), self.settles.len())
    }
}

impl Connection {
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
        let tx = self.take_transaction(id);
        for (targets, message, mandatory) in tx.publishes {
            self.deliver_published(id, &targets, message, mandatory, NO_TAG);
        }
        for (op, unacked) in tx.settles {
            self.pending.settle(&unacked.queue, op, unacked.seq);
            self.note_settled(id, &unacked);
        }
        let (reply, mut safe) = tokio::sync::oneshot::channel();
        self.pending.batches.reply_when_safe(reply);
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
        let tx = self.take_transaction(id);
        let channel = self
            .channels
            .get_mut(&id)
            .expect("invariant: caller checked the channel");
        for (_, unacked) in tx.settles {
            let at = channel
                .unacked
                .partition_point(|u| u.delivery_tag < unacked.delivery_tag);
            channel.unacked.insert(at, unacked);
        }
    }

    /// The channel's transaction so far; the channel starts a new one.
    fn take_transaction(&mut self, id: u16) -> TxBuffer {
        let channel = self
            .channels
            .get_mut(&id)
            .expect("invariant: caller checked the channel");
        let tx = channel
            .tx
            .as_mut()
            .expect("invariant: caller checked tx mode");
        std::mem::take(tx)
    }
}
