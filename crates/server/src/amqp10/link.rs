//! Links: attach for both directions, and the consumer side (link credit from the client's
//! flow becomes queue credit; deliveries become transfers; dispositions settle them).
//!
//! Credit: the client's link credit is what we may send. The queue holds `queue_credit` of it
//! (deliveries it may still make); deliveries that arrive when the client took its credit back
//! wait in `held` until it grants more.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use warren_core::access::{Perm, ResourceKind};
use warren_core::consumer::{Consumer, ConsumerId, Delivery};
use warren_core::message::Body;
use warren_core::queue::{QueueCmd, QueueHandle, SettleOp};
use warren_proto::amqp10::{
    condition, AmqpError, Attach, DeliveryState, Detach, Disposition, Flow, Performative, Transfer,
    ROLE_RECEIVER, ROLE_SENDER, SND_SETTLED, SND_UNSETTLED,
};

use super::address::{self, Address};
use super::connection::{broker_error, Connection, Fault};
use super::filter;
use super::management::MANAGEMENT_ADDRESS;
use super::unsettled::Unsettled;

/// Capacity kept for a delivery's sections between deliveries.
const DELIVERY_PREFIX_KEEP_BYTES: usize = 4096;

pub enum Link {
    /// The client sends: we receive and publish.
    Incoming(IncomingLink),
    /// The client receives: we consume from a queue and send.
    Outgoing(OutgoingLink),
    /// The client receives management responses (source `/management`).
    Management(ManagementLink),
}

/// The sending half of a `/management` link pair: responses wait here for link credit.
#[derive(Default)]
pub struct ManagementLink {
    pub delivery_count: u32,
    pub link_credit: u32,
    pub responses: VecDeque<Bytes>,
}

/// Where an incoming link's messages go.
#[derive(Debug, Clone)]
pub enum LinkTarget {
    Exchange {
        exchange: Name,
        routing_key: Name,
    },
    Queue(Name),
    /// The null target: each message's `to` says where it goes.
    Anonymous,
    /// The management node: messages are requests.
    Management,
}

/// An exchange, queue or routing key from a link's address, held as the bytes each message
/// carries: a message takes a handle on them instead of a copy.
#[derive(Debug, Clone)]
pub struct Name(Bytes);

impl Name {
    pub fn new(text: String) -> Name {
        Name(Bytes::from(text))
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("invariant: a Name is built from a String")
    }

    pub fn bytes(&self) -> Bytes {
        self.0.clone()
    }
}

pub struct IncomingLink {
    pub target: LinkTarget,
    pub delivery_count: u32,
    /// Transfers the client may still send on this link.
    pub credit: u32,
    /// A multi-frame transfer in progress.
    pub assembly: Option<Assembly>,
}

pub struct Assembly {
    pub delivery_id: u32,
    pub settled: bool,
    pub chunks: Vec<Bytes>,
    pub size: u64,
}

pub struct OutgoingLink {
    pub queue: QueueHandle,
    pub consumer: ConsumerId,
    /// Pre-settled deliveries (snd-settle-mode settled): the queue forgets them when sent.
    pub settled: bool,
    pub delivery_count: u32,
    pub link_credit: u32,
    pub queue_credit: u32,
    pub held: VecDeque<Delivery>,
    pub drain: bool,
}

impl Connection {
    pub(super) fn attach_incoming(
        &mut self,
        channel: u16,
        attach: &Attach,
    ) -> Result<IncomingLink, AmqpError> {
        let Some(target) = &attach.target else {
            return Err(AmqpError::new(
                condition::INVALID_FIELD,
                "attach of a sending link without a target",
            ));
        };
        if target.coordinator {
            return Err(AmqpError::new(
                condition::NOT_IMPLEMENTED,
                "transactions are not supported: a coordinator target cannot be attached",
            ));
        }
        let link_target = match target.address.as_deref() {
            None => LinkTarget::Anonymous,
            Some(MANAGEMENT_ADDRESS) => LinkTarget::Management,
            Some(text) => {
                let address = address::parse(text)
                    .map_err(|text| AmqpError::new(condition::INVALID_FIELD, text))?;
                self.check_writable(&address)?;
                match address {
                    Address::Queue(queue) => {
                        self.vhost().queue(&queue, self.id).map_err(broker_error)?;
                        LinkTarget::Queue(Name::new(queue))
                    }
                    Address::Exchange {
                        exchange,
                        routing_key,
                    } => LinkTarget::Exchange {
                        exchange: Name::new(exchange),
                        routing_key: Name::new(routing_key),
                    },
                }
            }
        };
        let reply = Attach {
            name: attach.name.clone(),
            handle: attach.handle,
            role: ROLE_RECEIVER,
            snd_settle_mode: attach.snd_settle_mode,
            rcv_settle_mode: Some(0),
            source: attach.source.clone(),
            target: attach.target.clone(),
            max_message_size: Some(self.shared.config.max_message_size),
            properties: attach.properties.clone(),
            ..Attach::default()
        };
        self.out
            .frame(channel, &Performative::Attach(Box::new(reply)));
        Ok(IncomingLink {
            target: link_target,
            delivery_count: attach.initial_delivery_count.unwrap_or(0),
            credit: if self.alarm_in_effect() {
                0
            } else {
                self.max_link_credit()
            },
            assembly: None,
        })
    }

    /// Whether the user may publish to `address`: to a queue through the default exchange
    /// (as RabbitMQ: write on amq.default), or to an exchange that exists.
    pub(super) fn check_writable(&self, address: &Address) -> Result<(), AmqpError> {
        match address {
            Address::Queue(_) => self.check(Perm::Write, ResourceKind::Exchange, ""),
            Address::Exchange { exchange, .. } => {
                self.check(Perm::Write, ResourceKind::Exchange, exchange)?;
                self.check_exchange(exchange)
            }
        }
    }

    fn check_exchange(&self, exchange: &str) -> Result<(), AmqpError> {
        let vhost = self.vhost();
        if vhost.snapshot().exchange(exchange).is_none() {
            return Err(AmqpError::new(
                condition::NOT_FOUND,
                format!("no exchange '{exchange}' in vhost '{}'", vhost.name()),
            ));
        }
        Ok(())
    }

    /// The management node's response link: settled, credit from the client.
    pub(super) fn attach_management(&mut self, channel: u16, attach: &Attach) -> ManagementLink {
        let reply = Attach {
            name: attach.name.clone(),
            handle: attach.handle,
            role: ROLE_SENDER,
            snd_settle_mode: Some(SND_SETTLED),
            rcv_settle_mode: Some(0),
            source: attach.source.clone(),
            target: attach.target.clone(),
            initial_delivery_count: Some(0),
            properties: attach.properties.clone(),
            ..Attach::default()
        };
        self.out
            .frame(channel, &Performative::Attach(Box::new(reply)));
        ManagementLink::default()
    }

    /// Queues a management response on the session's response link and sends what credit
    /// allows.
    pub(super) fn send_management_response(&mut self, channel: u16, message: Bytes) {
        let Some(session) = self.sessions.get_mut(&channel) else {
            return;
        };
        let link = session
            .links
            .iter_mut()
            .find_map(|(handle, link)| match link {
                Link::Management(m) => Some((*handle, m)),
                _ => None,
            });
        let Some((handle, link)) = link else {
            tracing::debug!(
                connection = self.id,
                channel,
                "management response without a response link, dropped"
            );
            return;
        };
        link.responses.push_back(message);
        self.pump_management(channel, handle);
    }

    pub(super) fn pump_management(&mut self, channel: u16, handle: u32) {
        let max_frame_size = self.peer_max_frame_size.min(self.frame_size_out_max());
        loop {
            let Some(session) = self.sessions.get_mut(&channel) else {
                return;
            };
            if session.remote_incoming_window == 0 {
                return;
            }
            let Some(Link::Management(link)) = session.links.get_mut(&handle) else {
                return;
            };
            if link.link_credit == 0 {
                return;
            }
            let Some(message) = link.responses.pop_front() else {
                return;
            };
            link.link_credit -= 1;
            link.delivery_count = link.delivery_count.wrapping_add(1);
            let delivery_id = session.next_outgoing_id;
            let transfer = Transfer {
                handle,
                delivery_id: Some(delivery_id),
                delivery_tag: Some(Bytes::copy_from_slice(&delivery_id.to_be_bytes())),
                message_format: Some(0),
                settled: Some(true),
                ..Transfer::default()
            };
            let frames = self.out.transfer(
                channel,
                transfer,
                &message,
                &Body::default(),
                max_frame_size,
            );
            self.sessions
                .get_mut(&channel)
                .expect("invariant: looked up above")
                .sent(frames);
        }
    }

    pub(super) async fn attach_outgoing(
        &mut self,
        channel: u16,
        attach: &Attach,
    ) -> Result<OutgoingLink, AmqpError> {
        let address = attach.source.as_ref().and_then(|s| s.address.as_deref());
        let queue_name = match address.map(address::parse) {
            Some(Ok(Address::Queue(queue))) => queue,
            Some(Ok(Address::Exchange { .. })) => {
                return Err(AmqpError::new(
                    condition::INVALID_FIELD,
                    "a receiving link's source must be a queue: /queues/:queue",
                ))
            }
            Some(Err(text)) => return Err(AmqpError::new(condition::INVALID_FIELD, text)),
            None => {
                return Err(AmqpError::new(
                    condition::INVALID_FIELD,
                    "attach of a receiving link without a source address",
                ))
            }
        };
        self.check(Perm::Read, ResourceKind::Queue, &queue_name)?;
        let queue = self
            .vhost()
            .queue(&queue_name, self.id)
            .map_err(broker_error)?;
        let settled = attach.snd_settle_mode == Some(SND_SETTLED);
        let (start, source) = filter::source_filters(attach.source.as_ref(), queue.kind())?;
        let consumer = Consumer {
            id: self.shared.broker.next_id(),
            connection: self.id,
            channel,
            tag: Arc::from(attach.name.as_str()),
            no_ack: settled,
            exclusive: false,
            priority: 0,
            credit: 0,
            credit_on_write: false,
            start,
            outbox: self.outbox.clone(),
        };
        let id = consumer.id;
        queue
            .request(|reply| QueueCmd::Consume { consumer, reply })
            .await
            .and_then(|r| r)
            .map_err(broker_error)?;
        let reply = Attach {
            name: attach.name.clone(),
            handle: attach.handle,
            role: ROLE_SENDER,
            snd_settle_mode: Some(if settled { SND_SETTLED } else { SND_UNSETTLED }),
            rcv_settle_mode: Some(0),
            source,
            target: attach.target.clone(),
            initial_delivery_count: Some(0),
            ..Attach::default()
        };
        self.out
            .frame(channel, &Performative::Attach(Box::new(reply)));
        self.consumers.insert(id, (channel, attach.handle));
        Ok(OutgoingLink {
            queue,
            consumer: id,
            settled,
            delivery_count: 0,
            link_credit: 0,
            queue_credit: 0,
            held: VecDeque::new(),
            drain: false,
        })
    }

    /// A new incoming link gets its credit.
    pub(super) async fn after_attach(&mut self, channel: u16, handle: u32) {
        let incoming = matches!(
            self.sessions
                .get(&channel)
                .and_then(|s| s.links.get(&handle)),
            Some(Link::Incoming(_))
        );
        if incoming {
            self.send_session_flow(channel, Some(handle));
        }
    }

    pub(super) async fn cancel_consumer(&mut self, link: &OutgoingLink) {
        let consumer = link.consumer;
        let _ = link
            .queue
            .request(|reply| QueueCmd::Cancel {
                consumer,
                reply: Some(reply),
            })
            .await;
    }

    /// The client's flow for a link we send on: its credit, and drain.
    pub(super) async fn on_link_credit(&mut self, channel: u16, handle: u32, flow: &Flow) {
        let Some(Link::Outgoing(link)) = self
            .sessions
            .get_mut(&channel)
            .and_then(|s| s.links.get_mut(&handle))
        else {
            return;
        };
        link.link_credit = credit_granted(flow, link.delivery_count);
        link.drain = flow.drain;
        let mut ready = Vec::new();
        while link.link_credit > 0 {
            let Some(delivery) = link.held.pop_front() else {
                break;
            };
            link.link_credit -= 1;
            link.delivery_count = link.delivery_count.wrapping_add(1);
            ready.push(delivery);
        }
        let grant = queue_grant(link, self.shared.config.max_queue_credit);
        let (queue, consumer) = (link.queue.clone(), link.consumer);
        let drain = link.drain && link.link_credit > 0;
        for delivery in ready {
            self.send_or_wait(channel, handle, delivery);
        }
        if grant > 0 {
            let _ = queue
                .send(QueueCmd::Credit {
                    consumer,
                    credit: grant,
                })
                .await;
        }
        if drain {
            self.drain(channel, handle, &queue).await;
        } else if flow.echo {
            self.send_session_flow(channel, Some(handle));
        }
    }

    /// Drain: with nothing ready in the queue, the rest of the credit is used up at once.
    async fn drain(&mut self, channel: u16, handle: u32, queue: &QueueHandle) {
        let empty = queue.info().await.map(|i| i.messages == 0).unwrap_or(true);
        let Some(Link::Outgoing(link)) = self
            .sessions
            .get_mut(&channel)
            .and_then(|s| s.links.get_mut(&handle))
        else {
            return;
        };
        if empty {
            link.delivery_count = link.delivery_count.wrapping_add(link.link_credit);
            link.link_credit = 0;
        }
        self.send_session_flow(channel, Some(handle));
    }

    /// A queue delivered to one of our consumers.
    pub(super) fn on_delivery(&mut self, delivery: Delivery) {
        let Some(&(channel, handle)) = self.consumers.get(&delivery.consumer) else {
            // The link is gone: the queue gets the message back (a no-op for settled links).
            self.pending_requeue(&delivery.queue, delivery.seq);
            return;
        };
        let Some(Link::Outgoing(link)) = self
            .sessions
            .get_mut(&channel)
            .and_then(|s| s.links.get_mut(&handle))
        else {
            self.pending_requeue(&delivery.queue, delivery.seq);
            return;
        };
        debug_assert!(
            link.queue_credit > 0,
            "invariant: a queue delivers only on credit"
        );
        link.queue_credit = link.queue_credit.saturating_sub(1);
        let grant = queue_grant(link, self.shared.config.max_queue_credit);
        if grant > 0 {
            let top_up = (link.queue.clone(), link.consumer, grant);
            self.pending.grant(top_up);
        }
        let Some(Link::Outgoing(link)) = self
            .sessions
            .get_mut(&channel)
            .and_then(|s| s.links.get_mut(&handle))
        else {
            return;
        };
        if link.link_credit == 0 {
            link.held.push_back(delivery);
            return;
        }
        link.link_credit -= 1;
        link.delivery_count = link.delivery_count.wrapping_add(1);
        self.send_or_wait(channel, handle, delivery);
    }

    /// Sends a delivery whose link credit is taken, or keeps it while the client's session
    /// window is closed.
    fn send_or_wait(&mut self, channel: u16, handle: u32, delivery: Delivery) {
        let Some(session) = self.sessions.get_mut(&channel) else {
            self.pending_requeue(&delivery.queue, delivery.seq);
            return;
        };
        if session.remote_incoming_window == 0 || !session.waiting.is_empty() {
            session.waiting.push_back((handle, delivery));
            return;
        }
        self.write_delivery(channel, handle, delivery);
    }

    /// Sends the deliveries that waited for the client's session window.
    pub(super) fn send_waiting(&mut self, channel: u16) {
        loop {
            let Some(session) = self.sessions.get_mut(&channel) else {
                return;
            };
            if session.remote_incoming_window == 0 {
                return;
            }
            let Some((handle, delivery)) = session.waiting.pop_front() else {
                return;
            };
            self.write_delivery(channel, handle, delivery);
        }
    }

    fn write_delivery(&mut self, channel: u16, handle: u32, delivery: Delivery) {
        let max_frame_size = self.peer_max_frame_size.min(self.frame_size_out_max());
        let Some(session) = self.sessions.get_mut(&channel) else {
            return;
        };
        let settled = match session.links.get(&handle) {
            Some(Link::Outgoing(link)) => link.settled,
            _ => {
                self.pending_requeue(&delivery.queue, delivery.seq);
                return;
            }
        };
        let delivery_id = session.next_outgoing_id;
        let message = &delivery.message;
        self.delivery_prefix.clear();
        let body = self
            .to_amqp10
            .write(message, delivery.redelivered, &mut self.delivery_prefix);
        let transfer = Transfer {
            handle,
            delivery_id: Some(delivery_id),
            delivery_tag: Some(delivery_tag(&mut self.delivery_tags, delivery_id)),
            message_format: Some(0),
            settled: Some(settled),
            ..Transfer::default()
        };
        let frames = self.out.transfer(
            channel,
            transfer,
            &self.delivery_prefix,
            &body,
            max_frame_size,
        );
        let session = self
            .sessions
            .get_mut(&channel)
            .expect("invariant: looked up above");
        session.sent(frames);
        if self.delivery_prefix.capacity() > DELIVERY_PREFIX_KEEP_BYTES {
            self.delivery_prefix = BytesMut::new();
        }
        if !settled {
            session.unsettled.insert(
                delivery_id,
                Unsettled {
                    queue: delivery.queue,
                    seq: delivery.seq,
                    handle,
                },
            );
        }
    }

    /// The client settles deliveries we sent (role receiver); as a sender it has nothing to
    /// settle with us (we settle its transfers ourselves).
    pub(super) fn on_disposition(&mut self, channel: u16, d: Disposition) -> Result<(), Fault> {
        self.session(channel)?;
        if d.role != ROLE_RECEIVER {
            return Ok(());
        }
        let last = d.last.unwrap_or(d.first).max(d.first);
        let op = match &d.state {
            None | Some(DeliveryState::Accepted) => Some(SettleOp::Ack),
            Some(DeliveryState::Released) => Some(SettleOp::Requeue),
            Some(DeliveryState::Rejected { .. }) => Some(SettleOp::Discard),
            Some(DeliveryState::Modified {
                undeliverable_here, ..
            }) => Some(if *undeliverable_here {
                SettleOp::Discard
            } else {
                SettleOp::Requeue
            }),
            Some(DeliveryState::Received { .. }) => None,
        };
        let Some(op) = op else {
            return Ok(());
        };
        let session = self
            .sessions
            .get_mut(&channel)
            .expect("invariant: self.session found it");
        let pending = &mut self.pending;
        session
            .unsettled
            .take_range(d.first, last, |u| pending.settle(&u.queue, op, u.seq));
        Ok(())
    }

    /// The queue cancelled a consumer (it was deleted): its link is detached with an error.
    pub(super) fn on_consumer_cancelled(&mut self, consumer: ConsumerId) {
        let Some((channel, handle)) = self.consumers.remove(&consumer) else {
            return;
        };
        let Some(session) = self.sessions.get_mut(&channel) else {
            return;
        };
        let Some(Link::Outgoing(link)) = session.links.remove(&handle) else {
            return;
        };
        session.unsettled.take_where(|u| u.handle == handle, drop);
        session.waiting.retain(|(h, _)| *h != handle);
        let detach = Detach {
            handle,
            closed: true,
            error: Some(AmqpError::new(
                condition::RESOURCE_DELETED,
                format!("{} was deleted", link.queue.def().resource()),
            )),
        };
        self.out.frame(channel, &Performative::Detach(detach));
    }

    pub(super) fn pending_requeue(&mut self, queue: &QueueHandle, seq: u64) {
        self.pending.settle(queue, SettleOp::Requeue, seq);
    }

    /// Our own frames stay within the frame size we accept too (the writer's buffers).
    fn frame_size_out_max(&self) -> u32 {
        super::connection::frame_size_limit(self.shared.config.frame_max)
    }
}

/// The link credit a client's flow grants a link we send on, whose delivery count is
/// `delivery_count` (transport §2.6.7: the client's delivery count plus its credit, less
/// ours). More than granted means the client's count is behind ours: the credit is used up.
pub(super) fn credit_granted(flow: &Flow, delivery_count: u32) -> u32 {
    let granted = flow.link_credit.unwrap_or(0);
    let counted_from = flow.delivery_count.unwrap_or(delivery_count);
    let credit = counted_from
        .wrapping_add(granted)
        .wrapping_sub(delivery_count);
    if credit > granted {
        0
    } else {
        credit
    }
}

/// Bytes of the block delivery tags are cut from (256 tags; what is left of it stays with an
/// idle connection, so it is kept small).
const DELIVERY_TAG_BLOCK_BYTES: usize = 1024;

/// The tag of delivery `id` (its id, 4 bytes), cut from a block shared by the tags of many
/// deliveries: no allocation of its own.
fn delivery_tag(tags: &mut BytesMut, id: u32) -> Bytes {
    let bytes = id.to_be_bytes();
    if tags.capacity() - tags.len() < bytes.len() {
        *tags = BytesMut::with_capacity(DELIVERY_TAG_BLOCK_BYTES);
    }
    tags.extend_from_slice(&bytes);
    tags.split().freeze()
}

/// Credit to give the queue now: what the client's credit allows beyond the deliveries already
/// on their way, at most `max_queue_credit` outstanding, in batches of half of it.
fn queue_grant(link: &mut OutgoingLink, max_queue_credit: u32) -> u32 {
    if link.queue_credit > max_queue_credit / 2 {
        return 0;
    }
    let in_flight = link.queue_credit.saturating_add(len_u32(link.held.len()));
    let wanted = link.link_credit.saturating_sub(in_flight);
    let grant = wanted.min(max_queue_credit - link.queue_credit);
    link.queue_credit += grant;
    grant
}

fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}
