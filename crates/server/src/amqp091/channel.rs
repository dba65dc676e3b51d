//! Channel state and the channel-level methods: open, close, flow, exchange and queue classes.
//! Publishing, consuming and acknowledgements live in `publish.rs` and `consume.rs`.

use std::collections::VecDeque;
use std::sync::Arc;

use warren_core::queue::{QueueHandle, SettleOp};
use warren_core::registry::ChannelDetails;
use warren_core::stats::ChannelStats;
use warren_core::vhost::VHost;
use warren_proto::amqp091::{
    reply_code, ChannelClose, ChannelFlowOk, ChannelOpenOk, Method, ShortStr,
};

use super::connection::Connection;
use super::consume::ConsumerState;
use super::fault::{Cause, Fault};
use super::publish::Assembly;
use super::tx::TxBuffer;

/// A delivery the client has not acknowledged yet.
#[derive(Debug, Clone)]
pub struct Unacked {
    pub delivery_tag: u64,
    pub queue: QueueHandle,
    pub seq: u64,
    /// `None` for basic.get.
    pub consumer: Option<u64>,
}

#[derive(Default)]
pub struct Channel {
    /// We sent channel.close and wait for close-ok; everything else is dropped.
    pub closing: bool,
    pub assembly: Option<Assembly>,
    pub consumers: Vec<ConsumerState>,
    pub unacked: VecDeque<Unacked>,
    pub next_delivery_tag: u64,
    /// basic.qos prefetch-count for consumers created from now on (global = false).
    pub consumer_prefetch: u16,
    /// basic.qos prefetch-count shared by the channel's consumers (global = true).
    pub channel_prefetch: u16,
    /// Publisher confirms: the last sequence number assigned and the last one acked. Boxed,
    /// as `tx`: most channels never use them, and every idle channel would carry them.
    pub confirm: Option<Box<Confirms>>,
    pub tx: Option<Box<TxBuffer>>,
    /// Deliveries over the channel-wide prefetch, written as acks make room (bounded by the
    /// consumers' credit).
    pub held: VecDeque<warren_core::consumer::Delivery>,
    /// The private queue behind direct reply-to, once the channel consumes from it.
    pub reply_queue: Option<QueueHandle>,
    /// Message counts the management API shows; this connection is their only writer.
    pub stats: Arc<ChannelStats>,
}

#[derive(Debug, Default)]
pub struct Confirms {
    pub published: u64,
    /// The last sequence number acked or nacked.
    pub acked: u64,
    /// Confirms waiting for their publishes to be safe, oldest first: sent in this order.
    pub waiting: VecDeque<WaitingConfirm>,
    /// Sequence numbers of unconfirmed publishes a queue refused (nacked when their turn
    /// comes), ascending; bounded by the unconfirmed publishes.
    pub rejected: VecDeque<u64>,
}

#[derive(Debug, Clone, Copy)]
pub struct WaitingConfirm {
    /// Publishes up to this sequence number.
    pub up_to: u64,
    /// The confirm ticket they wait for; `None` once it came back.
    pub ticket: Option<u64>,
    pub ok: bool,
}

impl Connection {
    pub(super) fn vhost(&self) -> Arc<VHost> {
        self.vhost
            .clone()
            .expect("invariant: channels exist only after connection.open")
    }

    /// basic.publish, basic.ack and basic.nack: the message path, without a future.
    pub(super) fn on_hot_method(&mut self, id: u16, method: Method) -> Result<(), Fault> {
        let cause = Cause::of(&method);
        if !self.admit(id, &method, cause)? {
            return Ok(());
        }
        match method {
            Method::BasicPublish(publish) => self.on_publish(id, publish),
            other => self.on_settle_method(id, other, cause),
        }
    }

    /// Any other method on a channel (run in a boxed future: see `Connection::on_read`).
    pub(super) async fn on_cold_method(&mut self, id: u16, method: Method) -> Result<(), Fault> {
        // Anything else sees the effects of the publishes and settlements before it, as the
        // client sent them (a passive declare counts them; its reply tells the client its acks
        // reached the queues).
        self.flush_pending().await;
        let cause = Cause::of(&method);
        if !self.admit(id, &method, cause)? {
            return Ok(());
        }
        self.on_method(id, method, cause).await
    }

    /// Checks a method against its channel's state: channel.open opens it; a closing channel
    /// drops everything but close and close-ok; a content must not be interrupted. `false`:
    /// the method was dealt with here.
    fn admit(&mut self, id: u16, method: &Method, cause: Cause) -> Result<bool, Fault> {
        let Some(channel) = self.channels.get_mut(&id) else {
            if let Method::ChannelOpen(_) = method {
                let open = self.channels.len();
                if open >= usize::from(self.tuning.channel_max) {
                    return Err(Fault::connection(
                        reply_code::NOT_ALLOWED,
                        format!(
                            "number of channels opened ({open}) has reached the negotiated \
                             channel_max ({})",
                            self.tuning.channel_max
                        ),
                        cause,
                    ));
                }
                let channel = Box::<Channel>::default();
                if let Some(entry) = self.registry_entry() {
                    entry.set_channel(ChannelDetails {
                        number: id,
                        stats: channel.stats.clone(),
                        ..ChannelDetails::default()
                    });
                }
                self.channels.insert(id, channel);
                let ok = ChannelOpenOk::default();
                self.out.method(id, &Method::ChannelOpenOk(ok));
                return Ok(false);
            }
            return Err(Fault::connection(
                reply_code::CHANNEL_ERROR,
                "expected 'channel.open'",
                cause,
            ));
        };
        if channel.closing {
            // We sent channel.close and wait for close-ok, as RabbitMQ's `closing` channel: a
            // crossing channel.close from the client is answered with close-ok, the id stays
            // taken until the client's close-ok, and anything else is dropped.
            match method {
                Method::ChannelCloseOk(_) => {
                    self.channels.remove(&id);
                }
                Method::ChannelClose(_) => {
                    self.out
                        .method(id, &Method::ChannelCloseOk(Default::default()));
                }
                _ => {}
            }
            return Ok(false);
        }
        if channel.assembly.is_some() {
            return Err(Fault::connection(
                reply_code::UNEXPECTED_FRAME,
                "expected content header for class 60, got non content header frame instead",
                Cause {
                    class_id: 60,
                    method_id: 40,
                },
            ));
        }
        Ok(true)
    }

    /// Every method but publish, ack and nack, on an open channel.
    async fn on_method(&mut self, id: u16, method: Method, cause: Cause) -> Result<(), Fault> {
        match method {
            Method::ChannelClose(_) => {
                if let Some(entry) = self.registry_entry() {
                    entry.remove_channel(id);
                }
                if let Some(channel) = self.channels.remove(&id) {
                    self.release_channel(*channel).await;
                }
                self.out
                    .method(id, &Method::ChannelCloseOk(Default::default()));
                Ok(())
            }
            Method::ChannelCloseOk(_) => Ok(()),
            Method::ChannelOpen(_) => Err(Fault::connection(
                reply_code::CHANNEL_ERROR,
                "second 'channel.open' seen",
                cause,
            )),
            Method::ChannelFlow(flow) => {
                if !flow.active {
                    // As RabbitMQ: a client may not pause deliveries with flow; it uses
                    // prefetch instead.
                    return Err(Fault::connection(
                        reply_code::NOT_IMPLEMENTED,
                        "active=false",
                        cause,
                    ));
                }
                let ok = ChannelFlowOk { active: true };
                self.out.method(id, &Method::ChannelFlowOk(ok));
                Ok(())
            }
            Method::AccessRequest(_) => {
                let ok = warren_proto::amqp091::AccessRequestOk { ticket: 1 };
                self.out.method(id, &Method::AccessRequestOk(ok));
                Ok(())
            }
            Method::ExchangeDeclare(_)
            | Method::ExchangeDelete(_)
            | Method::ExchangeBind(_)
            // Boxed: topology changes wait for the metadata store, and the connection future,
            // which every idle connection holds, is as large as its largest await.
            | Method::ExchangeUnbind(_) => {
                Box::pin(self.on_exchange_method(id, method, cause)).await
            }
            Method::QueueDeclare(_)
            | Method::QueueBind(_)
            | Method::QueueUnbind(_)
            | Method::QueuePurge(_)
            | Method::QueueDelete(_) => Box::pin(self.on_queue_method(id, method, cause)).await,
            other => self.on_basic_method(id, other, cause).await,
        }
    }

    /// Closes a channel for a soft error: releases what it held, sends channel.close, and
    /// drops its frames until close-ok.
    pub(super) async fn close_channel_with(
        &mut self,
        id: u16,
        code: u16,
        text: String,
        class_id: u16,
        method_id: u16,
    ) {
        tracing::debug!(connection = self.id, channel = id, code, %text, "closing channel");
        if let Some(entry) = self.registry_entry() {
            entry.remove_channel(id);
        }
        if let Some(channel) = self.channels.remove(&id) {
            self.release_channel(*channel).await;
        }
        self.channels.insert(
            id,
            Box::new(Channel {
                closing: true,
                ..Channel::default()
            }),
        );
        let close = ChannelClose {
            reply_code: code,
            reply_text: ShortStr::elided(&text),
            class_id,
            method_id,
        };
        self.out.method(id, &Method::ChannelClose(close));
    }

    /// Cancels the channel's consumers and requeues its unacked messages.
    ///
    /// Each cancel is confirmed by its queue, so no delivery for these consumers can reach
    /// the outbox afterwards; those already there are requeued when taken (`deliver` finds
    /// no consumer) or, at connection teardown, by `requeue_outbox`.
    pub(super) async fn release_channel(&mut self, channel: Channel) {
        for consumer in &channel.consumers {
            let _ = consumer
                .queue
                .request(|reply| warren_core::queue::QueueCmd::Cancel {
                    consumer: consumer.id,
                    reply: Some(reply),
                })
                .await;
        }
        for unacked in channel.unacked {
            self.pending
                .settle(&unacked.queue, SettleOp::Requeue, unacked.seq);
        }
        for delivery in channel.held {
            self.pending
                .settle(&delivery.queue, SettleOp::Requeue, delivery.seq);
        }
        if let Some(queue) = channel.reply_queue {
            let vhost = self.vhost();
            let _ = vhost
                .delete_queue(queue.name(), false, false, self.id)
                .await;
        }
        self.flush_pending().await;
    }
}
