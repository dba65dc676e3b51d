//! Publisher confirms and the end of a publishing turn: the turn's publishes go to their
//! queues through the shared publish path (`connection::publish_batch`), and each confirm
//! channel's publishes are acked or nacked, in order, once their queues have them safe:
//! coalesced into `multiple` acks, a publish a queue refused nacked alone.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use warren_core::consumer::Outbox;
use warren_core::queue::{send_credit, QueueHandle, ServeWhileWaiting, SettleOp};
use warren_core::stats::add_owned;
use warren_proto::amqp091::{BasicAck, BasicNack, Method};

use super::channel::{Confirms, WaitingConfirm};
use super::connection::Connection;
use crate::connection::output;
use crate::connection::publish_batch::{self, PublishBatches, Publisher, NO_TAG};

/// A publish's tag for queues that may refuse it: channel id above this many bits, the
/// channel's confirm sequence number below (2^48 publishes per channel).
pub const TAG_SEQ_BITS: u32 = 48;

/// Publishes and settlements collected while decoding one read, sent per queue in batches.
#[derive(Default)]
pub struct Pending {
    /// The turn's batches and the confirm tickets still out (shared with AMQP 1.0).
    pub(super) batches: PublishBatches,
    /// Channels in confirm mode that published this turn.
    pub(super) confirm_channels: Vec<u16>,
    /// Message counts of this turn, added to the broker's totals once per turn.
    pub(super) counts: MessageCounts,
    /// This turn's publishes by exchange: `(name, published, routed copies)`, added to the
    /// vhost's exchange counts once per turn; at most `EXCHANGES_PER_TURN_MAX` entries.
    pub(super) exchanges: Vec<(Bytes, u64, u64)>,
    /// The queues the message being completed routes to; kept empty between uses so its
    /// allocation serves every publish of the connection.
    pub(super) targets: Vec<QueueHandle>,
}

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
    pub fn settle(&mut self, queue: &QueueHandle, op: SettleOp, seq: u64) {
        self.batches.settle(queue, op, seq);
    }
}

impl Connection {
    /// Hands collected settlements and publishes to their queues, then confirms (see
    /// `connection::publish_batch`): publishes whose queues have them safe at once are acked
    /// now, the others when their ticket comes back through the outbox (`on_confirmed`);
    /// confirms go out in order. Not an `async fn` of its own: the connection future, which
    /// every idle connection holds, is as large as its deepest await, and this is on it.
    pub(super) fn flush_pending(&mut self) -> impl Future<Output = ()> + Send + '_ {
        let accept = !self.pending.confirm_channels.is_empty();
        publish_batch::end_turn(self, accept)
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
}

/// basic.ack or basic.nack of every publish up to `up_to` not yet confirmed.
/// `confirmed` counts the publishes acked.
fn confirm_method(confirm: &mut Confirms, up_to: u64, ack: bool, confirmed: &mut u64) -> Method {
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

impl Publisher for Connection {
    fn publish_parts(&mut self) -> (&mut PublishBatches, &Arc<Outbox>) {
        (&mut self.pending.batches, &self.outbox)
    }

    /// This turn's publishes are with their queues: each confirm channel's wait for `ticket`
    /// (or for nothing), and the confirms that wait for nothing go out.
    fn handed_over(&mut self, ticket: Option<u64>) {
        let confirm_channels = std::mem::take(&mut self.pending.confirm_channels);
        for id in &confirm_channels {
            let Some(confirm) = self.channels.get_mut(id).and_then(|c| c.confirm.as_mut()) else {
                continue;
            };
            if confirm.published > confirm.waiting.back().map_or(confirm.acked, |w| w.up_to) {
                confirm.waiting.push_back(WaitingConfirm {
                    up_to: confirm.published,
                    ticket,
                    ok: true,
                });
            }
            self.send_confirms(*id);
        }
        self.pending.confirm_channels = confirm_channels;
        self.pending.confirm_channels.clear();
    }

    /// A confirm ticket came back: its publishes are safe (`ok`) or lost (nack).
    fn on_confirmed(&mut self, ticket: u64, ok: bool) {
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

    fn write_now(&mut self) {
        output::write_without_waiting(self.flush());
    }
}
