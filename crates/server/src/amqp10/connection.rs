//! One AMQP 1.0 connection: a single task that negotiates SASL and open (`handshake.rs`), then
//! reads frames in batches, runs them against core, takes queue deliveries and confirms from
//! its outbox, and writes everything with one flush per turn (the same turn as AMQP 0.9.1's
//! connection, on the same plumbing: see `crate::connection`).
//!
//! Errors end what they belong to: a link error detaches the link, a session error ends the
//! session, anything else (malformed frames included) closes the connection with the error's
//! condition; other connections never notice.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rustc_hash::FxHashMap;
use tokio::sync::watch;
use warren_core::access::{Grant, Perm, ResourceKind};
use warren_core::alarm::AlarmSet;
use warren_core::consumer::{ConnectionId, ConsumerId, Event, Outbox};
use warren_core::queue::QueueHandle;
use warren_core::registry::TlsSession;
use warren_core::vhost::{VHost, VHostConnection};
use warren_core::{BrokerError, ErrorKind};
use warren_proto::amqp10::condition;
use warren_proto::amqp10::frame::MIN_MAX_FRAME_SIZE;
use warren_proto::amqp10::{
    decode_frame, AmqpError, Close, Detach, End, Frame, FrameBody, Performative,
};

use super::convert;
use super::publish::Pending;
use super::session::Session;
use super::writer::Writer;
use crate::connection::lifecycle::{self, Lifecycle, CLOSE_TIMEOUT};
use crate::connection::publish_batch;
use crate::connection::read_buffer::ReadBuffer;
use crate::connection::{self as common, Shared};
use crate::socket::{Client, SocketWriter};

/// What ends a link, a session or the connection.
#[derive(Debug)]
pub enum Fault {
    /// The socket is gone or the connection ended without an error to send.
    Gone(String),
    /// A connection error: close with it.
    Close(AmqpError),
    /// A session error: end the session with it.
    End(u16, AmqpError),
    /// A link error: detach the link (closed) with it.
    Detach {
        channel: u16,
        handle: u32,
        error: AmqpError,
    },
}

impl Fault {
    pub fn close(condition: &str, text: impl Into<String>) -> Fault {
        Fault::Close(AmqpError::new(condition, text))
    }
}

impl From<std::io::Error> for Fault {
    fn from(error: std::io::Error) -> Fault {
        Fault::Gone(error.to_string())
    }
}

/// The condition for a broker error.
pub fn broker_error(error: BrokerError) -> AmqpError {
    let condition = match error.kind {
        ErrorKind::NotFound => condition::NOT_FOUND,
        ErrorKind::AccessRefused => condition::UNAUTHORIZED_ACCESS,
        ErrorKind::ResourceLocked => condition::RESOURCE_LOCKED,
        ErrorKind::PreconditionFailed => condition::PRECONDITION_FAILED,
        ErrorKind::NotAllowed | ErrorKind::CommandInvalid => condition::NOT_ALLOWED,
        ErrorKind::ResourceError => condition::RESOURCE_LIMIT_EXCEEDED,
        ErrorKind::NotImplemented => condition::NOT_IMPLEMENTED,
        ErrorKind::InternalError => condition::INTERNAL_ERROR,
    };
    AmqpError::new(condition, error.text)
}

pub struct Connection {
    pub(super) id: ConnectionId,
    pub(super) shared: Arc<Shared>,
    pub(super) peer: SocketAddr,
    /// The TLS session, on a TLS listener.
    pub(super) tls: Option<Arc<TlsSession>>,
    socket_w: SocketWriter,
    /// The socket's read side and the bytes read from it.
    pub(super) rbuf: ReadBuffer,
    pub(super) out: Writer,
    pub(super) outbox: Arc<Outbox>,
    events: Vec<Event>,
    pub(super) vhost: Option<Arc<VHost>>,
    /// Counts this connection against the vhost's limits while it is open.
    pub(super) vhost_connection: Option<VHostConnection>,
    /// The user's permissions in the vhost.
    pub(super) grant: Option<Arc<Grant>>,
    pub(super) user: String,
    /// Largest frame we accept (what we sent in open).
    pub(super) max_frame_size: u32,
    /// Largest frame the peer accepts.
    pub(super) peer_max_frame_size: u32,
    pub(super) channel_max: u16,
    /// How long the peer may stay silent (ours, sent in open); zero for never.
    pub(super) idle_timeout: Duration,
    /// How often the peer needs to hear from us; zero for never.
    pub(super) peer_idle_timeout: Duration,
    pub(super) sessions: FxHashMap<u16, Session>,
    /// Which session and link each of our consumers belongs to.
    pub(super) consumers: FxHashMap<ConsumerId, (u16, u32)>,
    pub(super) pending: Pending,
    /// The sections last written before a delivery's body.
    pub(super) to_amqp10: convert::Amqp10Memo,
    /// A delivery's sections before its body, reused from one delivery to the next.
    pub(super) delivery_prefix: BytesMut,
    /// The block delivery tags are cut from.
    pub(super) delivery_tags: BytesMut,
    /// The queues a publish is routed to, kept empty between publishes.
    pub(super) route_targets: Vec<QueueHandle>,
    /// Memory and disk alarms: while one is in effect, publishing links get no new credit.
    alarms: watch::Receiver<AlarmSet>,
    /// Changes to users, vhosts and permissions.
    access: watch::Receiver<u64>,
    last_read: Instant,
    last_write: Instant,
    closed_by_client: bool,
}

/// Serves one accepted socket that opened with an AMQP 1.0 header, until it closes.
pub async fn serve(client: Box<Client>, shared: Arc<Shared>) {
    let Client {
        reader,
        writer: socket_w,
        peer,
        local: _,
        tls,
        start,
        deadline,
    } = *client;
    let id = shared.broker.next_id();
    let max_frame_size = frame_size_limit(shared.config.frame_max);
    let channel_max = shared.config.channel_max;
    let idle_timeout = Duration::from_secs(u64::from(shared.config.heartbeat));
    let alarms = shared.broker.alarms().subscribe();
    let access = shared.broker.access().subscribe();
    let mut conn = Connection {
        id,
        shared,
        peer,
        tls,
        socket_w,
        rbuf: ReadBuffer::new(reader, start),
        out: Writer::default(),
        outbox: Outbox::new(),
        events: Vec::new(),
        vhost: None,
        vhost_connection: None,
        grant: None,
        user: String::new(),
        max_frame_size,
        peer_max_frame_size: u32::MAX,
        channel_max,
        idle_timeout,
        peer_idle_timeout: Duration::ZERO,
        sessions: FxHashMap::default(),
        consumers: FxHashMap::default(),
        pending: Pending::default(),
        to_amqp10: convert::Amqp10Memo::default(),
        delivery_prefix: BytesMut::new(),
        delivery_tags: BytesMut::new(),
        route_targets: Vec::new(),
        alarms,
        access,
        last_read: Instant::now(),
        last_write: Instant::now(),
        closed_by_client: false,
    };
    lifecycle::serve(&mut conn, deadline).await;
    tracing::debug!(connection = id, %peer, "AMQP 1.0 connection closed");
}

impl Lifecycle for Connection {
    type Fault = Fault;

    fn handshake(&mut self) -> impl std::future::Future<Output = Result<(), Fault>> + Send {
        Connection::handshake(self)
    }

    async fn run(&mut self) -> Result<(), Fault> {
        let tick_every = [self.idle_timeout / 2, self.peer_idle_timeout / 2]
            .into_iter()
            .filter(|d| !d.is_zero())
            .min();
        let mut ticker = common::ticker(tick_every);
        let mut shutdown = self.shared.shutdown.clone();
        let outbox = self.outbox.clone();
        // Frames that arrived with open (pipelined clients) are handled before reading.
        self.on_read().await?;
        loop {
            tokio::select! {
                read = self.rbuf.read(false) => {
                    read?;
                    self.last_read = Instant::now();
                    self.on_read().await?;
                    self.rbuf.give_back();
                }
                () = outbox.notified() => {}
                // Credit withheld during an alarm is granted once it clears.
                Ok(()) = self.alarms.changed() => self.after_read(),
                Ok(()) = self.access.changed() => self.on_access_changed()?,
                _ = common::tick(&mut ticker) => self.on_tick()?,
                _ = shutdown.changed() => {
                    return Err(Fault::close(
                        condition::CONNECTION_FORCED,
                        "broker forced connection closure with reason 'shutdown'",
                    ));
                }
            }
            self.on_events();
            self.flush_pending().await;
            self.flush().await?;
        }
    }

    /// Sends close for a connection error and waits (briefly) for the client's close.
    async fn close_with(&mut self, fault: Fault) {
        let error = match fault {
            Fault::Gone(reason) => {
                tracing::debug!(connection = self.id, %reason, "AMQP 1.0 connection ended");
                let _ = self.flush().await;
                return;
            }
            Fault::Close(error) | Fault::End(_, error) | Fault::Detach { error, .. } => error,
        };
        tracing::info!(
            connection = self.id, peer = %self.peer, condition = %error.condition,
            description = ?error.description, "closing AMQP 1.0 connection"
        );
        let close = Close { error: Some(error) };
        self.out.frame(0, &Performative::Close(close));
        if self.flush().await.is_err() {
            return;
        }
        let wait_close = async {
            loop {
                match self.read_frame().await {
                    Ok(Frame {
                        body:
                            FrameBody::Amqp {
                                performative: Performative::Close(_),
                                ..
                            },
                        ..
                    })
                    | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, wait_close).await;
    }

    async fn teardown(&mut self) {
        let channels: Vec<u16> = self.sessions.keys().copied().collect();
        for channel in channels {
            self.release_session(channel).await;
        }
        // Deliveries still in the outbox find no link and go back to their queues.
        self.on_events();
        self.flush_pending().await;
        // Exclusive queues (declared through the management node) go with their connection.
        common::delete_exclusive_queues(self.vhost.as_ref(), self.id).await;
    }

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn input(&mut self) -> &mut ReadBuffer {
        &mut self.rbuf
    }

    fn closed_by_client(&self) -> bool {
        self.closed_by_client
    }
}

impl Connection {
    pub(super) fn vhost(&self) -> Arc<VHost> {
        self.vhost
            .clone()
            .expect("invariant: frames are handled only after open")
    }

    /// Reads more bytes during the handshake, or while closing.
    pub(super) async fn read_more(&mut self) -> Result<(), Fault> {
        self.rbuf.read_more().await?;
        self.last_read = Instant::now();
        Ok(())
    }

    pub(super) async fn read_frame(&mut self) -> Result<Frame, Fault> {
        loop {
            match decode_frame(self.rbuf.bytes(), self.max_frame_size) {
                Ok(Some(frame)) => return Ok(frame),
                Ok(None) => self.read_more().await?,
                Err(error) => return Err(Fault::close(error.condition(), error.to_string())),
            }
        }
    }

    pub(super) async fn flush(&mut self) -> Result<(), Fault> {
        if !self.out.is_empty() {
            self.out.flush(&mut self.socket_w).await?;
            self.last_write = Instant::now();
        }
        Ok(())
    }

    /// A peer silent for twice our idle timeout is gone (RabbitMQ closes after one; twice
    /// leaves room for a late heartbeat); a quiet half of the peer's gets an empty frame.
    fn on_tick(&mut self) -> Result<(), Fault> {
        if !self.idle_timeout.is_zero() && self.last_read.elapsed() > self.idle_timeout * 2 {
            return Err(Fault::close(
                condition::RESOURCE_LIMIT_EXCEEDED,
                format!(
                    "no frames received for {} ms (idle-time-out {} ms)",
                    self.last_read.elapsed().as_millis(),
                    self.idle_timeout.as_millis()
                ),
            ));
        }
        if !self.peer_idle_timeout.is_zero()
            && self.last_write.elapsed() >= self.peer_idle_timeout / 2
            && self.out.is_empty()
        {
            self.out.empty();
        }
        Ok(())
    }

    /// Decodes and handles every complete frame in the read buffer, then hands the publishes
    /// they carried to their queues.
    async fn on_read(&mut self) -> Result<(), Fault> {
        let outcome = loop {
            let frame = match decode_frame(self.rbuf.bytes(), self.max_frame_size) {
                Ok(Some(frame)) => frame,
                Ok(None) => break Ok(()),
                Err(error) => break Err(Fault::close(error.condition(), error.to_string())),
            };
            match Box::pin(self.on_frame(frame)).await {
                Ok(()) => {}
                Err(Fault::End(channel, error)) => {
                    Box::pin(self.end_session(channel, Some(error))).await
                }
                Err(Fault::Detach {
                    channel,
                    handle,
                    error,
                }) => Box::pin(self.detach_link(channel, handle, Some(error))).await,
                Err(fault) => break Err(fault),
            }
        };
        self.after_read();
        self.flush_pending().await;
        outcome
    }

    async fn on_frame(&mut self, frame: Frame) -> Result<(), Fault> {
        let channel = frame.channel;
        let (performative, payload) = match frame.body {
            FrameBody::Empty => return Ok(()),
            FrameBody::Sasl(_) => {
                return Err(Fault::close(
                    condition::FRAMING_ERROR,
                    "SASL frame after the SASL layer completed",
                ))
            }
            FrameBody::Amqp {
                performative,
                payload,
            } => (performative, payload),
        };
        match performative {
            Performative::Open(_) => Err(Fault::close(
                condition::ILLEGAL_STATE,
                "open received twice on one connection",
            )),
            Performative::Close(close) => {
                tracing::debug!(connection = self.id, error = ?close.error, "client closed");
                self.out.frame(0, &Performative::Close(Close::default()));
                let _ = self.flush().await;
                self.closed_by_client = true;
                Err(Fault::Gone("closed by client".into()))
            }
            Performative::Begin(begin) => self.on_begin(channel, begin),
            Performative::Transfer(transfer) => self.on_transfer(channel, transfer, payload),
            Performative::Disposition(d) => self.on_disposition(channel, d),
            Performative::Flow(flow) => self.on_flow(channel, flow).await,
            Performative::Attach(attach) => self.on_attach(channel, *attach).await,
            Performative::Detach(detach) => self.on_detach(channel, detach).await,
            Performative::End(end) => self.on_end(channel, end).await,
        }
    }

    /// Takes queue events now (while a publish waits for its queue).
    pub(super) fn on_events_now(&mut self) {
        self.on_events();
    }

    fn on_events(&mut self) {
        let mut events = std::mem::take(&mut self.events);
        self.outbox.take_all(&mut events);
        for event in events.drain(..) {
            match event {
                Event::Deliver(delivery) => self.on_delivery(delivery),
                Event::Settled { ticket, ok } => publish_batch::on_settled(self, ticket, ok),
                Event::PublishRejected { tags } => self.on_publish_rejected(&tags),
                Event::ConsumerCancelled { consumer, .. } => self.on_consumer_cancelled(consumer),
            }
        }
        self.events = events;
    }

    /// Ends a session with an error (a session error) and releases what it held.
    pub(super) async fn end_session(&mut self, channel: u16, error: Option<AmqpError>) {
        if self.sessions.contains_key(&channel) {
            self.release_session(channel).await;
            self.out.frame(channel, &Performative::End(End { error }));
        }
    }

    /// Detaches (closes) a link with an error.
    pub(super) async fn detach_link(
        &mut self,
        channel: u16,
        handle: u32,
        error: Option<AmqpError>,
    ) {
        self.release_link(channel, handle).await;
        if let Some(session) = self.sessions.get_mut(&channel) {
            if !session.detached.contains(&handle) {
                session.detached.push(handle);
            }
        }
        let detach = Detach {
            handle,
            closed: true,
            error,
        };
        self.out.frame(channel, &Performative::Detach(detach));
    }

    /// Users, vhosts or permissions changed: a deleted user or vhost closes the connection
    /// (as RabbitMQ and AMQP 0.9.1 do); new permissions apply to what comes next.
    fn on_access_changed(&mut self) -> Result<(), Fault> {
        let vhost = self.vhost();
        let grant = common::current_grant(&self.shared.broker, &self.user, &vhost)
            .map_err(|text| Fault::close(condition::CONNECTION_FORCED, text))?;
        self.grant = Some(grant);
        Ok(())
    }

    /// Checks the user's permission on a resource of the vhost.
    pub(super) fn check(
        &self,
        perm: Perm,
        kind: ResourceKind,
        name: &str,
    ) -> Result<(), AmqpError> {
        self.permit(perm, kind, name).map_err(broker_error)
    }

    /// `check` with core's error (the management node answers with a status code).
    pub(super) fn permit(
        &self,
        perm: Perm,
        kind: ResourceKind,
        name: &str,
    ) -> Result<(), BrokerError> {
        let grant = self
            .grant
            .as_deref()
            .expect("invariant: links exist only after open");
        grant.check(perm, kind, name)
    }

    /// Whether a memory or disk alarm is in effect (publishers get no new link credit).
    pub(super) fn alarm_in_effect(&self) -> bool {
        !self.alarms.borrow().is_empty()
    }

    pub(super) fn channel_max(&self) -> u16 {
        self.channel_max
    }
}

/// The largest frame we accept: `frame_max`, where 0 means no limit as in AMQP 0.9.1.
pub fn frame_size_limit(frame_max: u32) -> u32 {
    match frame_max {
        0 => u32::MAX,
        n => n.max(MIN_MAX_FRAME_SIZE),
    }
}
