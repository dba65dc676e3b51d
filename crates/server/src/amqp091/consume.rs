//! Consuming: basic.qos, consume, cancel, get, deliveries, acknowledgements, recover, and
//! the credit a connection grants its queues; plus confirm.select and the tx class.
//!
//! Credit: a queue delivers to a consumer only against credit. A no-ack consumer (or one
//! without a prefetch limit) gets credit back once its deliveries are written to the socket,
//! so at most `CONSUMER_FLOW_CREDIT_MAX` deliveries are in flight between queue and socket. A
//! consumer with a prefetch count gets credit back when the client settles deliveries.

use std::sync::Arc;
use warren_core::access::{Perm, ResourceKind};

use warren_core::consumer::{Consumer, Delivery, Event};
use warren_core::limits::{
    CONSUMER_FLOW_BYTES_MAX, CONSUMER_FLOW_CREDIT_MAX, CONSUMER_FLOW_CREDIT_MIN,
};
use warren_core::queue::consume_start::STREAM_OFFSET_ARGUMENT;
use warren_core::queue::QueueType;
use warren_core::queue::{send_credit, ConsumeStart, QueueCmd, QueueHandle, SettleOp};
use warren_core::registry::ConsumerDetails;
use warren_core::stats::add_owned;
use warren_core::vhost::generate_name;
use warren_core::{BrokerError, ErrorKind};
use warren_proto::amqp091::{
    reply_code, BasicCancel, BasicCancelOk, BasicConsume, BasicConsumeOk, BasicGetEmpty,
    BasicGetOk, DeliverArgs, FieldTable, Method, ShortStr,
};

use super::annotations;
use super::channel::{Confirms, Unacked};
use super::connection::Connection;
use super::fault::{Cause, Fault};
use super::publish::{exchange_of, routing_key_of, short_str_bytes, REPLY_TO_PSEUDO_QUEUE};
use super::tx::TxBuffer;
use crate::connection::publish_batch;

#[derive(Debug)]
pub struct ConsumerState {
    pub id: u64,
    pub tag: ShortStr,
    pub queue: QueueHandle,
    pub no_ack: bool,
    /// basic.qos prefetch-count when the consumer was created; 0 = unlimited.
    pub prefetch: u32,
    /// Credit the queue still holds for this consumer.
    pub outstanding: u32,
    /// Delivered, not yet settled by the client.
    pub unacked: u32,
    /// Delivered by the queue but held back by the channel-wide prefetch limit.
    pub held: u32,
    /// Running average of the bytes this consumer's deliveries carry.
    pub average_bytes: u32,
}

impl ConsumerState {
    /// Outstanding credit this consumer should have now. `global` is the channel-wide
    /// prefetch (0 = none); deliveries held back by it count against the consumer too, so a
    /// consumer never has more than the limit in flight.
    fn credit_target(&self, global: u16) -> u32 {
        match self.prefetch_limit(global) {
            None => self.flow_window(),
            Some(limit) => limit
                .min(CONSUMER_FLOW_CREDIT_MAX)
                .saturating_sub(self.unacked + self.held),
        }
    }

    /// The unsettled deliveries this consumer may have: its own prefetch count or the
    /// channel-wide one, whichever is lower; `None` when it has no limit (no-ack, or no
    /// prefetch set).
    fn prefetch_limit(&self, global: u16) -> Option<u32> {
        match (self.no_ack, self.prefetch, u32::from(global)) {
            (true, ..) | (false, 0, 0) => None,
            (false, 0, limit) | (false, limit, 0) => Some(limit),
            (false, own, global) => Some(own.min(global)),
        }
    }

    /// Whether a delivery to this consumer may wait to be written with later ones: the
    /// client needs nothing more to go on while under half its prefetch limit is in use.
    fn may_wait(&self, global: u16) -> bool {
        self.waiting_room(global).is_none_or(|room| room > 0)
    }

    /// How many more deliveries may wait (see `may_wait`): what is left below half the
    /// prefetch limit; `None` when there is no limit.
    fn waiting_room(&self, global: u16) -> Option<u32> {
        self.prefetch_limit(global)
            .map(|limit| (limit / 2).saturating_sub(self.unacked + self.held))
    }
}

impl ConsumerState {
    /// The credit window of a consumer whose credit returns as deliveries are written:
    /// `CONSUMER_FLOW_CREDIT_MAX` messages, fewer for large messages, so the bytes in flight
    /// between queue and socket stay near `CONSUMER_FLOW_BYTES_MAX`.
    fn flow_window(&self) -> u32 {
        let by_bytes = CONSUMER_FLOW_BYTES_MAX / self.average_bytes.max(1);
        by_bytes.clamp(CONSUMER_FLOW_CREDIT_MIN, CONSUMER_FLOW_CREDIT_MAX)
    }

    fn note_size(&mut self, bytes: usize) {
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        self.average_bytes = self.average_bytes - self.average_bytes / 8 + bytes / 8;
    }
}

impl Connection {
    pub(super) async fn on_basic_method(
        &mut self,
        id: u16,
        method: Method,
        cause: Cause,
    ) -> Result<(), Fault> {
        match method {
            Method::BasicQos(qos) => {
                if qos.prefetch_size != 0 {
                    return Err(Fault::new(
                        id,
                        reply_code::NOT_IMPLEMENTED,
                        format!("prefetch_size!=0 ({})", qos.prefetch_size),
                        cause,
                    ));
                }
                let channel = self.channels.get_mut(&id).expect("invariant: open channel");
                if qos.global {
                    channel.channel_prefetch = qos.prefetch_count;
                } else {
                    channel.consumer_prefetch = qos.prefetch_count;
                }
                let (prefetch, global) = (channel.consumer_prefetch, channel.channel_prefetch);
                if let Some(entry) = self.registry_entry() {
                    entry.update_channel(id, |c| {
                        c.prefetch_count = prefetch;
                        c.global_prefetch_count = global;
                    });
                }
                self.out.method(id, &Method::BasicQosOk(Default::default()));
                Ok(())
            }
            Method::BasicConsume(consume) => self.on_consume(id, consume, cause).await,
            Method::BasicCancel(cancel) => self.on_cancel(id, cancel).await,
            Method::BasicGet(get) => self.on_get(id, get.queue.as_str(), get.no_ack, cause).await,
            Method::BasicAck(_) | Method::BasicNack(_) | Method::BasicReject(_) => {
                self.on_settle_method(id, method, cause)
            }
            Method::BasicRecover(recover) => {
                self.recover(id, recover.requeue, cause)?;
                self.out
                    .method(id, &Method::BasicRecoverOk(Default::default()));
                Ok(())
            }
            Method::BasicRecoverAsync(recover) => self.recover(id, recover.requeue, cause),
            other => self.on_mode_method(id, other, cause).await,
        }
    }

    /// basic.ack, basic.nack and basic.reject.
    pub(super) fn on_settle_method(
        &mut self,
        id: u16,
        method: Method,
        cause: Cause,
    ) -> Result<(), Fault> {
        let requeue_op = |requeue| {
            if requeue {
                SettleOp::Requeue
            } else {
                SettleOp::Discard
            }
        };
        match method {
            Method::BasicAck(ack) => {
                self.settle(id, ack.delivery_tag, ack.multiple, SettleOp::Ack, cause)
            }
            Method::BasicNack(nack) => {
                let op = requeue_op(nack.requeue);
                self.settle(id, nack.delivery_tag, nack.multiple, op, cause)
            }
            Method::BasicReject(reject) => {
                let op = requeue_op(reject.requeue);
                self.settle(id, reject.delivery_tag, false, op, cause)
            }
            _ => unreachable!("invariant: only settlements are routed here"),
        }
    }

    /// confirm.select and the tx class.
    async fn on_mode_method(&mut self, id: u16, method: Method, cause: Cause) -> Result<(), Fault> {
        let channel = self.channels.get_mut(&id).expect("invariant: open channel");
        let precondition =
            |text: &str| Fault::new(id, reply_code::PRECONDITION_FAILED, text, cause);
        match method {
            Method::ConfirmSelect(select) => {
                if channel.tx.is_some() {
                    return Err(precondition("cannot switch from tx to confirm mode"));
                }
                channel.confirm.get_or_insert_with(Box::<Confirms>::default);
                if let Some(entry) = self.registration.as_ref().map(|r| r.entry()) {
                    entry.update_channel(id, |c| c.confirm = true);
                }
                if !select.nowait {
                    self.out
                        .method(id, &Method::ConfirmSelectOk(Default::default()));
                }
            }
            Method::TxSelect(_) => {
                if channel.confirm.is_some() {
                    return Err(precondition("cannot switch from confirm to tx mode"));
                }
                channel.tx.get_or_insert_with(Box::<TxBuffer>::default);
                if let Some(entry) = self.registration.as_ref().map(|r| r.entry()) {
                    entry.update_channel(id, |c| c.transactional = true);
                }
                self.out.method(id, &Method::TxSelectOk(Default::default()));
            }
            Method::TxCommit(_) => {
                if channel.tx.is_none() {
                    return Err(precondition("channel is not transactional"));
                }
                if !Box::pin(self.tx_commit(id)).await {
                    return Err(Fault::new(
                        id,
                        reply_code::INTERNAL_ERROR,
                        "tx.commit: the message store could not write the transaction's \
                         messages; see the broker log",
                        cause,
                    ));
                }
                self.out.method(id, &Method::TxCommitOk(Default::default()));
            }
            Method::TxRollback(_) => {
                if channel.tx.is_none() {
                    return Err(precondition("channel is not transactional"));
                }
                self.tx_rollback(id);
                self.out
                    .method(id, &Method::TxRollbackOk(Default::default()));
            }
            other => {
                return Err(Fault::connection(
                    reply_code::COMMAND_INVALID,
                    format!("method '{}' is not valid from a client", other.name()),
                    cause,
                ))
            }
        }
        Ok(())
    }

    async fn on_consume(
        &mut self,
        id: u16,
        consume: BasicConsume,
        cause: Cause,
    ) -> Result<(), Fault> {
        let queue = self.consume_queue(id, &consume, cause)?;
        let channel = self.channels.get_mut(&id).expect("invariant: open channel");
        let tag = if consume.consumer_tag.is_empty() {
            ShortStr::from(generate_name("amq.ctag-"))
        } else {
            consume.consumer_tag.clone()
        };
        if channel.consumers.iter().any(|c| c.tag == tag) {
            return Err(Fault::connection(
                reply_code::NOT_ALLOWED,
                format!("attempt to reuse consumer tag '{tag}'"),
                cause,
            ));
        }
        let (priority, start) = consumer_arguments(&queue, &consume.arguments)
            .and_then(|found| {
                super::stream_consume::check_stream_consumer(&queue, &consume, &self.channels[&id])
                    .map(|()| found)
            })
            .map_err(|error| Fault::broker(id, error, cause))?;
        let channel = self.channels.get_mut(&id).expect("invariant: open channel");
        let mut state = ConsumerState {
            id: self.shared.broker.next_id(),
            tag: tag.clone(),
            queue: queue.clone(),
            no_ack: consume.no_ack,
            prefetch: u32::from(channel.consumer_prefetch),
            outstanding: 0,
            unacked: 0,
            held: 0,
            average_bytes: 0,
        };
        let credit = self.initial_credit(id, &state);
        state.outstanding = credit;
        let consumer = Consumer {
            id: state.id,
            connection: self.id,
            channel: id,
            tag: Arc::from(tag.as_str()),
            no_ack: consume.no_ack,
            exclusive: consume.exclusive,
            priority,
            credit,
            credit_on_write: state.no_ack || state.prefetch == 0,
            start,
            outbox: self.outbox.clone(),
        };
        queue
            .request(|reply| QueueCmd::Consume { consumer, reply })
            .await
            .and_then(|r| r)
            .map_err(|e| Fault::broker(id, e, cause))?;
        self.add_consumer(id, state, &consume);
        if !consume.nowait {
            let ok = BasicConsumeOk { consumer_tag: tag };
            self.out.method(id, &Method::BasicConsumeOk(ok));
        }
        Ok(())
    }

    /// The queue basic.consume names, once the user may read it.
    fn consume_queue(
        &mut self,
        id: u16,
        consume: &BasicConsume,
        cause: Cause,
    ) -> Result<QueueHandle, Fault> {
        let queue_name = consume.queue.as_str();
        if queue_name == REPLY_TO_PSEUDO_QUEUE {
            return self.reply_to_queue(id, consume, cause);
        }
        self.check(Perm::Read, ResourceKind::Queue, queue_name)
            .and_then(|()| self.vhost().queue(queue_name, self.id))
            .map_err(|e| Fault::broker(id, e, cause))
    }

    /// A consumer the queue took: the channel delivers to it from now on, and the management
    /// API lists it.
    fn add_consumer(&mut self, id: u16, state: ConsumerState, consume: &BasicConsume) {
        let channel = self.channels.get_mut(&id).expect("invariant: open channel");
        let prefetch_count = channel.consumer_prefetch;
        let details = ConsumerDetails {
            channel: id,
            consumer_tag: state.tag.to_string(),
            queue: state.queue.name().to_string(),
            ack_required: !consume.no_ack,
            exclusive: consume.exclusive,
            prefetch_count,
            arguments: super::convert::table_to_core(&consume.arguments),
        };
        channel.consumers.push(state);
        if let Some(entry) = self.registry_entry() {
            entry.add_consumer(details);
        }
    }

    /// The private queue behind `amq.rabbitmq.reply-to` for this channel.
    fn reply_to_queue(
        &mut self,
        id: u16,
        consume: &BasicConsume,
        cause: Cause,
    ) -> Result<QueueHandle, Fault> {
        if !consume.no_ack {
            return Err(Fault::new(
                id,
                reply_code::PRECONDITION_FAILED,
                "reply consumer cannot acknowledge",
                cause,
            ));
        }
        let vhost = self.vhost();
        let channel = self.channels.get_mut(&id).expect("invariant: open channel");
        if channel.reply_queue.is_some() {
            return Err(Fault::new(
                id,
                reply_code::PRECONDITION_FAILED,
                "reply consumer already set",
                cause,
            ));
        }
        let queue = vhost
            .declare_reply_to_queue(self.id)
            .map_err(|e| Fault::broker(id, e, cause))?;
        channel.reply_queue = Some(queue.clone());
        Ok(queue)
    }

    async fn on_cancel(&mut self, id: u16, cancel: BasicCancel) -> Result<(), Fault> {
        let channel = self.channels.get_mut(&id).expect("invariant: open channel");
        if let Some(index) = channel
            .consumers
            .iter()
            .position(|c| c.tag == cancel.consumer_tag)
        {
            let consumer = channel.consumers.remove(index);
            if let Some(entry) = self.registration.as_ref().map(|r| r.entry()) {
                entry.remove_consumer(id, &consumer.tag);
            }
            let _ = consumer
                .queue
                .request(|reply| QueueCmd::Cancel {
                    consumer: consumer.id,
                    reply: Some(reply),
                })
                .await;
        }
        if !cancel.nowait {
            let ok = BasicCancelOk {
                consumer_tag: cancel.consumer_tag,
            };
            self.out.method(id, &Method::BasicCancelOk(ok));
        }
        Ok(())
    }

    async fn on_get(
        &mut self,
        id: u16,
        queue: &str,
        no_ack: bool,
        cause: Cause,
    ) -> Result<(), Fault> {
        self.check(Perm::Read, ResourceKind::Queue, queue)
            .map_err(|e| Fault::broker(id, e, cause))?;
        let vhost = self.vhost();
        let queue = vhost
            .queue(queue, self.id)
            .map_err(|e| Fault::broker(id, e, cause))?;
        if queue.kind() == QueueType::Stream {
            let text = format!(
                "basic.get not supported by stream queues {}",
                queue.def().resource()
            );
            let error = BrokerError::new(ErrorKind::NotImplemented, text);
            return Err(Fault::broker(id, error, cause));
        }
        let got = queue
            .request(|reply| QueueCmd::Get {
                channel: id,
                no_ack,
                reply,
            })
            .await
            .map_err(|e| Fault::broker(id, e, cause))?;
        let channel = self.channels.get_mut(&id).expect("invariant: open channel");
        let Some(got) = got else {
            add_owned(&channel.stats.get_empty, 1);
            self.out
                .method(id, &Method::BasicGetEmpty(BasicGetEmpty::default()));
            return Ok(());
        };
        let delivery = got.delivery;
        let stats = &channel.stats;
        add_owned(
            if no_ack {
                &stats.get_no_ack
            } else {
                &stats.get
            },
            1,
        );
        add_owned(&stats.redeliver, u64::from(delivery.redelivered));
        channel.next_delivery_tag += 1;
        let delivery_tag = channel.next_delivery_tag;
        if !no_ack {
            channel.unacked.push_back(Unacked {
                delivery_tag,
                queue: delivery.queue.clone(),
                seq: delivery.seq,
                consumer: None,
            });
        }
        let method = Method::BasicGetOk(BasicGetOk {
            delivery_tag,
            redelivered: delivery.redelivered,
            exchange: exchange_of(&delivery.message),
            routing_key: routing_key_of(&delivery.message),
            message_count: got.remaining,
        });
        let message = &delivery.message;
        let frame_max = self.tuning.frame_max;
        let (properties, body) = annotations::delivery_content(message);
        self.out.content(id, &method, &properties, &body, frame_max);
        Ok(())
    }

    /// basic.ack / nack / reject: validates the tag(s), then settles with the queues.
    fn settle(
        &mut self,
        id: u16,
        delivery_tag: u64,
        multiple: bool,
        op: SettleOp,
        cause: Cause,
    ) -> Result<(), Fault> {
        let channel = self.channels.get_mut(&id).expect("invariant: open channel");
        let settled: Vec<Unacked> = if multiple {
            // Tag 0 with multiple settles everything outstanding.
            let upto = if delivery_tag == 0 {
                u64::MAX
            } else {
                delivery_tag
            };
            let count = channel.unacked.partition_point(|u| u.delivery_tag <= upto);
            if count == 0 && delivery_tag != 0 {
                return Err(unknown_tag(id, delivery_tag, cause));
            }
            channel.unacked.drain(..count).collect()
        } else {
            let at = channel
                .unacked
                .partition_point(|u| u.delivery_tag < delivery_tag);
            match channel.unacked.get(at) {
                Some(u) if u.delivery_tag == delivery_tag => {}
                _ => return Err(unknown_tag(id, delivery_tag, cause)),
            }
            channel.unacked.remove(at).into_iter().collect()
        };
        if op == SettleOp::Ack {
            add_owned(&channel.stats.ack, settled.len() as u64);
        }
        if self.tx_settle(id, op, settled.clone()) {
            return Ok(());
        }
        for unacked in &settled {
            self.pending.settle(&unacked.queue, op, unacked.seq);
            self.note_settled(id, unacked);
        }
        self.release_held(id);
        Ok(())
    }

    /// Frees the prefetch room a settled delivery held.
    pub(super) fn note_settled(&mut self, id: u16, unacked: &Unacked) {
        let Some(channel) = self.channels.get_mut(&id) else {
            return;
        };
        if let Some(consumer_id) = unacked.consumer {
            if let Some(c) = channel.consumers.iter_mut().find(|c| c.id == consumer_id) {
                debug_assert!(c.unacked > 0, "invariant: a settled delivery was unacked");
                c.unacked = c.unacked.saturating_sub(1);
            }
        }
    }

    /// basic.recover: every unacked delivery goes back to its queue, marked redelivered.
    fn recover(&mut self, id: u16, requeue: bool, cause: Cause) -> Result<(), Fault> {
        if !requeue {
            return Err(Fault::connection(
                reply_code::NOT_IMPLEMENTED,
                "requeue=false",
                cause,
            ));
        }
        let channel = self.channels.get_mut(&id).expect("invariant: open channel");
        let unacked: Vec<Unacked> = channel.unacked.drain(..).collect();
        for u in &unacked {
            self.pending.settle(&u.queue, SettleOp::Requeue, u.seq);
            self.note_settled(id, u);
        }
        self.release_held(id);
        Ok(())
    }

    /// A queue event: write a delivery, or tell the client its consumer was cancelled.
    pub(super) fn on_event(&mut self, event: Event) {
        if !matches!(event, Event::Deliver(_)) {
            self.may_hold = false;
        }
        match event {
            Event::Deliver(delivery) => self.deliver(delivery),
            Event::Settled { ticket, ok } => publish_batch::on_settled(self, ticket, ok),
            Event::PublishRejected { tags } => self.on_publish_rejected(&tags),
            Event::ConsumerCancelled {
                channel: id,
                consumer,
                ..
            } => {
                let Some(channel) = self.channels.get_mut(&id) else {
                    return;
                };
                let Some(index) = channel.consumers.iter().position(|c| c.id == consumer) else {
                    return;
                };
                let state = channel.consumers.remove(index);
                if let Some(entry) = self.registration.as_ref().map(|r| r.entry()) {
                    entry.remove_consumer(id, &state.tag);
                }
                if self.caps.consumer_cancel_notify {
                    let cancel = BasicCancel {
                        consumer_tag: state.tag,
                        nowait: true,
                    };
                    self.out.method(id, &Method::BasicCancel(cancel));
                }
            }
        }
    }

    /// How many more deliveries this connection may take while each of its consumers still
    /// `may_wait`: the least waiting room of any of them.
    pub(super) fn waiting_room(&self) -> u32 {
        self.channels
            .values()
            .flat_map(|channel| {
                let global = channel.channel_prefetch;
                channel
                    .consumers
                    .iter()
                    .filter_map(move |c| c.waiting_room(global))
            })
            .min()
            .unwrap_or(u32::MAX)
    }

    fn deliver(&mut self, delivery: Delivery) {
        let id = delivery.channel;
        let channel = self.channels.get_mut(&id).filter(|c| !c.closing);
        let consumer = channel.and_then(|c| {
            let index = c.consumers.iter().position(|s| s.id == delivery.consumer)?;
            Some((c, index))
        });
        let Some((channel, index)) = consumer else {
            // Cancelled or closed meanwhile: the queue gets it back (no-op for no-ack).
            self.pending
                .settle(&delivery.queue, SettleOp::Requeue, delivery.seq);
            return;
        };
        let state = &mut channel.consumers[index];
        debug_assert!(
            state.outstanding > 0,
            "invariant: a queue delivers only on credit"
        );
        state.outstanding = state.outstanding.saturating_sub(1);
        if !state.may_wait(channel.channel_prefetch) {
            self.may_hold = false;
        }
        let global = usize::from(channel.channel_prefetch);
        if !state.no_ack && global > 0 && channel.unacked.len() >= global {
            state.held += 1;
            channel.held.push_back(delivery);
            return;
        }
        self.write_delivery(id, index, delivery);
    }

    fn write_delivery(&mut self, id: u16, index: usize, delivery: Delivery) {
        let frame_max = self.tuning.frame_max;
        let channel = self
            .channels
            .get_mut(&id)
            .expect("invariant: caller found the channel");
        channel.next_delivery_tag += 1;
        let delivery_tag = channel.next_delivery_tag;
        let state = &mut channel.consumers[index];
        state.note_size(delivery.message.size_bytes());
        let stats = &channel.stats;
        let counter = if state.no_ack {
            &stats.deliver_no_ack
        } else {
            &stats.deliver
        };
        add_owned(counter, 1);
        add_owned(&stats.redeliver, u64::from(delivery.redelivered));
        if !state.no_ack {
            state.unacked += 1;
            channel.unacked.push_back(Unacked {
                delivery_tag,
                queue: delivery.queue.clone(),
                seq: delivery.seq,
                consumer: Some(state.id),
            });
        }
        let message = &delivery.message;
        let args = DeliverArgs {
            consumer_tag: &state.tag,
            delivery_tag,
            redelivered: delivery.redelivered,
            exchange: short_str_bytes(&message.exchange),
            routing_key: short_str_bytes(&message.routing_key),
        };
        let (properties, body) = annotations::delivery_content(message);
        self.out.deliver(id, &args, &properties, &body, frame_max);
        self.unflushed_deliveries += 1;
    }

    /// Writes deliveries the channel-wide prefetch held back, as far as settlements made room.
    pub(super) fn release_held(&mut self, id: u16) {
        loop {
            let Some(channel) = self.channels.get_mut(&id) else {
                return;
            };
            let global = usize::from(channel.channel_prefetch);
            if channel.held.is_empty() || (global > 0 && channel.unacked.len() >= global) {
                return;
            }
            let delivery = channel
                .held
                .pop_front()
                .expect("invariant: checked non-empty");
            let Some(index) = channel
                .consumers
                .iter()
                .position(|c| c.id == delivery.consumer)
            else {
                self.pending
                    .settle(&delivery.queue, SettleOp::Requeue, delivery.seq);
                continue;
            };
            channel.consumers[index].held -= 1;
            self.write_delivery(id, index, delivery);
        }
    }

    fn initial_credit(&self, id: u16, state: &ConsumerState) -> u32 {
        state.credit_target(self.channels[&id].channel_prefetch)
    }

    /// Gives consumers back the credit their written or settled deliveries freed; batched so
    /// a busy consumer costs one credit command per half window, not one per message.
    pub(super) async fn grant_credit(&mut self) {
        send_credit(self.credit_due()).await;
    }

    /// The credit to grant now: (queue, consumer, credit).
    pub(super) fn credit_due(&mut self) -> Vec<(QueueHandle, u64, u32)> {
        let mut grants: Vec<(QueueHandle, u64, u32)> = Vec::new();
        for channel in self.channels.values_mut() {
            if channel.closing || channel.consumers.is_empty() {
                continue;
            }
            let global = channel.channel_prefetch;
            for consumer in channel.consumers.iter_mut() {
                let target = consumer.credit_target(global);
                let grant = target.saturating_sub(consumer.outstanding);
                let worth_it = grant > 0 && (grant >= target / 2 || consumer.outstanding == 0);
                if worth_it {
                    consumer.outstanding += grant;
                    debug_assert!(
                        consumer.outstanding <= target,
                        "invariant: credit up to target"
                    );
                    grants.push((consumer.queue.clone(), consumer.id, grant));
                }
            }
        }
        grants
    }
}

/// What basic.consume's arguments ask for, once the queue's type has taken their names: the
/// priority (`x-priority`, 0 without it) and where to start (`x-stream-offset`).
fn consumer_arguments(
    queue: &QueueHandle,
    arguments: &FieldTable,
) -> Result<(i64, Option<ConsumeStart>), BrokerError> {
    // The queue's type decides which consumer arguments it takes.
    let keys = arguments.iter().map(|(key, _)| key.as_str());
    let resource = queue.def().resource();
    queue.kind().check_consume(&resource, keys)?;
    let start = match arguments.get(STREAM_OFFSET_ARGUMENT) {
        None => None,
        Some(value) => {
            let value = super::convert::value_to_core(value);
            let start = ConsumeStart::from_argument_now(&value).map_err(|expected| {
                BrokerError::precondition_failed(format!(
                    "invalid arg '{STREAM_OFFSET_ARGUMENT}' for {resource}: {expected}"
                ))
            })?;
            Some(start)
        }
    };
    let Some(value) = arguments.get("x-priority") else {
        return Ok((0, start));
    };
    let priority = value.as_i64().ok_or_else(|| {
        // RabbitMQ's `check_consume_arguments` text.
        let kind = warren_core::queue::args::type_name(&super::convert::value_to_core(value));
        BrokerError::precondition_failed(format!(
            "invalid arg 'x-priority' for {resource}: \"expected integer, got {kind}\""
        ))
    })?;
    Ok((priority, start))
}

fn unknown_tag(id: u16, delivery_tag: u64, cause: Cause) -> Fault {
    Fault::new(
        id,
        reply_code::PRECONDITION_FAILED,
        format!("unknown delivery tag {delivery_tag}"),
        cause,
    )
}
