//! Sessions: begin and end, the session windows, and the links of each session (attach,
//! detach and flow are dispatched here to `link.rs` and `publish.rs`).
//!
//! Incoming window: the client may send `max_incoming_window` transfers; once half of them are
//! used, the window is reopened after the read that used them (by then their publishes were
//! handed to their queues, which is where back-pressure happens). Outgoing: deliveries wait in
//! the session when the client's incoming window is closed.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use warren_core::consumer::Delivery;
use warren_proto::amqp10::{condition, AmqpError, Attach, Begin, Detach, End, Flow, Performative};

use super::connection::{Connection, Fault};
use super::link::{IncomingLink, Link};
use super::unsettled::UnsettledDeliveries;

/// Our outgoing window: we never hold transfers back on our side.
const OUTGOING_WINDOW: u32 = u32::MAX;
/// Links per session (RabbitMQ's `link_max_per_session` default is 256).
pub const HANDLE_MAX: u32 = 255;

pub struct Session {
    /// Transfer-id the client's next transfer has.
    pub next_incoming_id: u32,
    /// Transfers the client may still send.
    pub incoming_window: u32,
    /// Our next transfer-id (also our next delivery-id).
    pub next_outgoing_id: u32,
    /// Transfers the client can still take.
    pub remote_incoming_window: u32,
    pub links: FxHashMap<u32, Link>,
    /// Deliveries sent unsettled, by delivery-id.
    pub unsettled: UnsettledDeliveries,
    /// Deliveries waiting for the client's incoming window, with their link's handle.
    pub waiting: VecDeque<(u32, Delivery)>,
    /// Handles of links we detached (an error) whose client has not answered with its detach:
    /// transfers on them may still be on their way and are dropped, not a session error.
    pub detached: Vec<u32>,
}

impl Session {
    /// `frames` transfer frames went out: each takes a transfer-id and a unit of the client's
    /// incoming window (a delivery split over frames may take more than the window had).
    pub fn sent(&mut self, frames: u32) {
        debug_assert!(frames > 0, "invariant: a delivery takes at least one frame");
        self.next_outgoing_id = self.next_outgoing_id.wrapping_add(frames);
        self.remote_incoming_window = self.remote_incoming_window.saturating_sub(frames);
    }
}

impl Connection {
    pub(super) fn session(&mut self, channel: u16) -> Result<&mut Session, Fault> {
        self.sessions.get_mut(&channel).ok_or_else(|| {
            Fault::close(
                condition::ILLEGAL_STATE,
                format!("no session is begun on channel {channel}"),
            )
        })
    }

    pub(super) fn on_begin(&mut self, channel: u16, begin: Begin) -> Result<(), Fault> {
        if channel > self.channel_max() {
            return Err(Fault::close(
                condition::RESOURCE_LIMIT_EXCEEDED,
                format!(
                    "channel {channel} is above channel-max {}",
                    self.channel_max()
                ),
            ));
        }
        if self.sessions.contains_key(&channel) || begin.remote_channel.is_some() {
            return Err(Fault::close(
                condition::ILLEGAL_STATE,
                format!("begin on channel {channel}, which has a session already"),
            ));
        }
        let incoming_window = self.shared.config.max_incoming_window;
        let session = Session {
            next_incoming_id: begin.next_outgoing_id,
            incoming_window,
            next_outgoing_id: 0,
            remote_incoming_window: begin.incoming_window,
            links: FxHashMap::default(),
            unsettled: UnsettledDeliveries::default(),
            waiting: VecDeque::new(),
            detached: Vec::new(),
        };
        self.sessions.insert(channel, session);
        let reply = Begin {
            remote_channel: Some(channel),
            next_outgoing_id: 0,
            incoming_window,
            outgoing_window: OUTGOING_WINDOW,
            handle_max: Some(HANDLE_MAX),
            ..Begin::default()
        };
        self.out.frame(channel, &Performative::Begin(reply));
        Ok(())
    }

    pub(super) async fn on_end(&mut self, channel: u16, end: End) -> Result<(), Fault> {
        self.session(channel)?;
        tracing::debug!(
            connection = self.id, channel, error = ?end.error, "session ended by client"
        );
        self.release_session(channel).await;
        self.out.frame(channel, &Performative::End(End::default()));
        Ok(())
    }

    /// Detaches every link of the session and forgets it.
    pub(super) async fn release_session(&mut self, channel: u16) {
        let handles: Vec<u32> = self
            .sessions
            .get(&channel)
            .map(|s| s.links.keys().copied().collect())
            .unwrap_or_default();
        for handle in handles {
            self.release_link(channel, handle).await;
        }
        if let Some(mut session) = self.sessions.remove(&channel) {
            for unsettled in session.unsettled.drain() {
                self.pending_requeue(&unsettled.queue, unsettled.seq);
            }
            for (_, delivery) in session.waiting {
                self.pending_requeue(&delivery.queue, delivery.seq);
            }
        }
    }

    pub(super) async fn on_attach(&mut self, channel: u16, attach: Attach) -> Result<(), Fault> {
        let session = self.session(channel)?;
        let handle = attach.handle;
        if handle > HANDLE_MAX {
            return Err(Fault::End(
                channel,
                AmqpError::new(
                    condition::RESOURCE_LIMIT_EXCEEDED,
                    format!("link handle {handle} is above handle-max {HANDLE_MAX}"),
                ),
            ));
        }
        if session.links.contains_key(&handle) {
            return Err(Fault::End(
                channel,
                AmqpError::new(
                    condition::HANDLE_IN_USE,
                    format!("handle {handle} is in use"),
                ),
            ));
        }
        // The client's role is the opposite of ours: its sender is our receiving link.
        let management_source = attach.source.as_ref().and_then(|s| s.address.as_deref())
            == Some(super::management::MANAGEMENT_ADDRESS);
        let attached = if attach.role && management_source {
            Ok(Link::Management(self.attach_management(channel, &attach)))
        } else if attach.role {
            self.attach_outgoing(channel, &attach)
                .await
                .map(Link::Outgoing)
        } else {
            self.attach_incoming(channel, &attach).map(Link::Incoming)
        };
        match attached {
            Ok(link) => {
                self.session(channel)?.links.insert(handle, link);
                self.after_attach(channel, handle).await;
                Ok(())
            }
            Err(error) => {
                // As the spec asks for a refused link: attach with no terminus, then detach.
                let reply = Attach {
                    name: attach.name,
                    handle,
                    role: !attach.role,
                    ..Attach::default()
                };
                self.out
                    .frame(channel, &Performative::Attach(Box::new(reply)));
                let detach = Detach {
                    handle,
                    closed: true,
                    error: Some(error),
                };
                self.out.frame(channel, &Performative::Detach(detach));
                Ok(())
            }
        }
    }

    pub(super) async fn on_detach(&mut self, channel: u16, detach: Detach) -> Result<(), Fault> {
        let session = self.session(channel)?;
        if !session.links.contains_key(&detach.handle) {
            // The answer to a detach of ours (a refused attach, a link error): the handle is
            // free again.
            session.detached.retain(|h| *h != detach.handle);
            return Ok(());
        }
        self.release_link(channel, detach.handle).await;
        let reply = Detach {
            handle: detach.handle,
            closed: detach.closed,
            error: None,
        };
        self.out.frame(channel, &Performative::Detach(reply));
        Ok(())
    }

    /// Forgets a link: a consumer is cancelled and what it had not settled is requeued.
    pub(super) async fn release_link(&mut self, channel: u16, handle: u32) {
        let Some(session) = self.sessions.get_mut(&channel) else {
            return;
        };
        let Some(link) = session.links.remove(&handle) else {
            return;
        };
        let Link::Outgoing(link) = link else {
            return;
        };
        let mut requeue = Vec::new();
        session
            .unsettled
            .take_where(|u| u.handle == handle, |u| requeue.push((u.queue, u.seq)));
        session.waiting.retain(|(h, delivery)| {
            if *h == handle {
                requeue.push((delivery.queue.clone(), delivery.seq));
            }
            *h != handle
        });
        for (queue, seq) in requeue {
            self.pending_requeue(&queue, seq);
        }
        self.consumers.remove(&link.consumer);
        self.cancel_consumer(&link).await;
        for delivery in link.held {
            self.pending_requeue(&delivery.queue, delivery.seq);
        }
    }

    pub(super) async fn on_flow(&mut self, channel: u16, flow: Flow) -> Result<(), Fault> {
        let session = self.session(channel)?;
        // The client's window, counted from our next transfer-id.
        let next_incoming = flow.next_incoming_id.unwrap_or(0);
        session.remote_incoming_window = next_incoming
            .wrapping_add(flow.incoming_window)
            .wrapping_sub(session.next_outgoing_id);
        if session.remote_incoming_window > flow.incoming_window {
            session.remote_incoming_window = flow.incoming_window; // ids from before begin
        }
        let Some(handle) = flow.handle else {
            if flow.echo {
                self.send_session_flow(channel, None);
            }
            self.send_waiting(channel);
            return Ok(());
        };
        match session.links.get_mut(&handle) {
            // A link we detached while the client's flow was on its way.
            None if session.detached.contains(&handle) => Ok(()),
            // "the recipient MUST respond by ending the session with an unattached-handle
            // session error" (transport §2.7.4).
            None => Err(Fault::End(
                channel,
                AmqpError::new(
                    condition::UNATTACHED_HANDLE,
                    format!("Unattached link handle: {handle}"),
                ),
            )),
            Some(Link::Incoming(_)) => {
                if flow.echo {
                    self.send_session_flow(channel, Some(handle));
                }
                Ok(())
            }
            Some(Link::Outgoing(_)) => {
                self.on_link_credit(channel, handle, &flow).await;
                self.send_waiting(channel);
                Ok(())
            }
            Some(Link::Management(link)) => {
                link.link_credit = super::link::credit_granted(&flow, link.delivery_count);
                self.pump_management(channel, handle);
                if flow.echo {
                    self.send_session_flow(channel, Some(handle));
                }
                Ok(())
            }
        }
    }

    /// A flow with the session's state and, with `handle`, that link's.
    pub(super) fn send_session_flow(&mut self, channel: u16, handle: Option<u32>) {
        let Some(session) = self.sessions.get(&channel) else {
            return;
        };
        let mut flow = Flow {
            next_incoming_id: Some(session.next_incoming_id),
            incoming_window: session.incoming_window,
            next_outgoing_id: session.next_outgoing_id,
            outgoing_window: OUTGOING_WINDOW,
            ..Flow::default()
        };
        if let Some(link) = handle.and_then(|h| session.links.get(&h)) {
            flow.handle = handle;
            match link {
                Link::Incoming(l) => {
                    flow.delivery_count = Some(l.delivery_count);
                    flow.link_credit = Some(l.credit);
                }
                Link::Management(l) => {
                    flow.delivery_count = Some(l.delivery_count);
                    flow.link_credit = Some(l.link_credit);
                }
                Link::Outgoing(l) => {
                    flow.delivery_count = Some(l.delivery_count);
                    flow.link_credit = Some(l.link_credit);
                    flow.available = Some(u32::try_from(l.held.len()).unwrap_or(u32::MAX));
                    flow.drain = l.drain;
                }
            }
        }
        self.out.frame(channel, &Performative::Flow(flow));
    }

    /// After a read: reopen the session windows and the link credit the client used up (no
    /// link credit while a resource alarm is in effect: RabbitMQ's way of blocking AMQP 1.0
    /// publishers, who keep settling and consuming meanwhile).
    pub(super) fn after_read(&mut self) {
        let max_link_credit = if self.alarm_in_effect() {
            0
        } else {
            self.max_link_credit()
        };
        let window = self.shared.config.max_incoming_window;
        let mut flows = Vec::new();
        for (channel, session) in self.sessions.iter_mut() {
            let mut session_flow = false;
            if session.incoming_window < window / 2 {
                session.incoming_window = window;
                session_flow = true;
            }
            for (handle, link) in session.links.iter_mut() {
                if let Link::Incoming(IncomingLink { credit, .. }) = link {
                    if *credit < max_link_credit.div_ceil(2) {
                        *credit = max_link_credit;
                        flows.push((*channel, Some(*handle)));
                        session_flow = false;
                    }
                }
            }
            if session_flow {
                flows.push((*channel, None));
            }
        }
        for (channel, handle) in flows {
            self.send_session_flow(channel, handle);
        }
    }

    pub(super) fn max_link_credit(&self) -> u32 {
        self.shared.config.max_link_credit
    }
}
