//! One AMQP 1.0 connection: a single task that negotiates SASL and open, then reads frames in
//! batches, runs them against core, takes queue deliveries and confirms from its outbox, and
//! writes everything with one flush per turn (the same turn as AMQP 0.9.1's connection).
//!
//! Errors end what they belong to: a link error detaches the link, a session error ends the
//! session, anything else (malformed frames included) closes the connection with the error's
//! condition; other connections never notice.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rustc_hash::FxHashMap;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use warren_core::access::{Grant, Pattern, Perm, ResourceKind};
use warren_core::alarm::AlarmSet;
use warren_core::consumer::{ConnectionId, ConsumerId, Event, Outbox};
use warren_core::identity::Identity;
use warren_core::queue::QueueHandle;
use warren_core::registry::TlsSession;
use warren_core::vhost::{VHost, VHostConnection};
use warren_core::{BrokerError, ErrorKind};
use warren_proto::amqp10::condition;
use warren_proto::amqp10::frame::{AMQP_HEADER, MIN_MAX_FRAME_SIZE, SASL_HEADER};
use warren_proto::amqp10::{
    decode_frame, AmqpError, Close, Detach, End, Frame, FrameBody, Open, Performative, SaslFrame,
    Value,
};

use super::convert;
use super::publish::Pending;
use super::session::Session;
use super::writer::Writer;
use crate::amqp091::Shared;
use crate::socket::{Client, SocketReader, SocketWriter};

/// Read space reserved during the handshake.
const READ_CHUNK_BYTES: usize = 4 * 1024;
/// Read space reserved in the main loop: starts small so idle connections stay small,
/// doubles while reads fill it (many frames per syscall for a busy publisher), halves when
/// they do not; a connection whose reads are small gives its buffer back once it is drained.
const READ_CHUNK_MIN_BYTES: usize = 4 * 1024;
const READ_CHUNK_MAX_BYTES: usize = 256 * 1024;
/// How long we wait for the client's close after sending ours.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(3);
/// The container-id we open with.
const CONTAINER_ID: &str = "warren";

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
    tls: Option<Arc<TlsSession>>,
    reader: SocketReader,
    socket_w: SocketWriter,
    rbuf: BytesMut,
    read_chunk: usize,
    pub(super) out: Writer,
    pub(super) outbox: Arc<Outbox>,
    events: Vec<Event>,
    pub(super) vhost: Option<Arc<VHost>>,
    /// Counts this connection against the vhost's limits while it is open.
    vhost_connection: Option<VHostConnection>,
    /// The user's permissions in the vhost.
    grant: Option<Arc<Grant>>,
    pub(super) user: String,
    /// Largest frame we accept (what we sent in open).
    max_frame_size: u32,
    /// Largest frame the peer accepts.
    pub(super) peer_max_frame_size: u32,
    channel_max: u16,
    /// How long the peer may stay silent (ours, sent in open); zero for never.
    idle_timeout: Duration,
    /// How often the peer needs to hear from us; zero for never.
    peer_idle_timeout: Duration,
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
        reader,
        socket_w,
        rbuf: start,
        read_chunk: READ_CHUNK_MIN_BYTES,
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
    let shutdown = conn.shared.shutdown.clone();
    let handshake = tokio::time::timeout_at(deadline, conn.handshake());
    let handshake = crate::unless_shutdown(shutdown, handshake)
        .await
        .unwrap_or_else(|| Ok(Err(Fault::Gone("broker shutting down".into()))));
    let open = matches!(handshake, Ok(Ok(()))).then(|| conn.shared.broker.open_connection());
    let outcome = match handshake {
        Ok(Ok(())) => conn.run().await,
        Ok(Err(fault)) => Err(fault),
        Err(_) => Err(Fault::Gone("handshake timeout".into())),
    };
    if let Err(fault) = outcome {
        conn.close_with(fault).await;
    }
    Box::pin(conn.teardown()).await;
    drop(open);
    if conn.closed_by_client {
        let mut scratch = [0u8; 64];
        let wait_eof =
            async { while matches!(conn.reader.read(&mut scratch).await, Ok(n) if n > 0) {} };
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, wait_eof).await;
    }
    tracing::debug!(connection = id, %peer, "AMQP 1.0 connection closed");
}

impl Connection {
    pub(super) fn vhost(&self) -> Arc<VHost> {
        self.vhost
            .clone()
            .expect("invariant: frames are handled only after open")
    }

    async fn read_more(&mut self) -> Result<(), Fault> {
        self.rbuf.reserve(READ_CHUNK_BYTES);
        if self.reader.read_buf(&mut self.rbuf).await? == 0 {
            return Err(Fault::Gone("peer closed the socket".into()));
        }
        self.last_read = Instant::now();
        Ok(())
    }

    async fn read_header(&mut self) -> Result<[u8; 8], Fault> {
        while self.rbuf.len() < 8 {
            self.read_more().await?;
        }
        let header = self.rbuf.split_to(8);
        let mut out = [0u8; 8];
        out.copy_from_slice(&header);
        Ok(out)
    }

    async fn read_frame(&mut self) -> Result<Frame, Fault> {
        loop {
            match decode_frame(&mut self.rbuf, self.max_frame_size) {
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

    async fn handshake(&mut self) -> Result<(), Fault> {
        let header = self.read_header().await?;
        if header != SASL_HEADER {
            // We require SASL: answer with the header we want, as the spec says, and close.
            self.out.raw(&SASL_HEADER);
            let _ = self.flush().await;
            return Err(Fault::Gone(
                "client did not start with the SASL layer".into(),
            ));
        }
        self.out.raw(&SASL_HEADER);
        self.sasl().await?;
        let header = self.read_header().await?;
        if header != AMQP_HEADER {
            self.out.raw(&AMQP_HEADER);
            let _ = self.flush().await;
            return Err(Fault::Gone("protocol header mismatch after SASL".into()));
        }
        // Clients wait for our header before they send open.
        self.out.raw(&AMQP_HEADER);
        self.flush().await?;
        self.open().await
    }

    async fn sasl(&mut self) -> Result<(), Fault> {
        let loopback = self.peer.ip().is_loopback();
        let config = &self.shared.config;
        let offered = crate::sasl::offered(config, &MECHANISMS, self.tls.is_some(), loopback);
        let mechanisms = offered.iter().map(|m| (*m).to_owned()).collect();
        self.out.sasl(&SaslFrame::Mechanisms(mechanisms));
        self.flush().await?;
        let frame = self.read_frame().await?;
        let FrameBody::Sasl(SaslFrame::Init {
            mechanism,
            initial_response,
            ..
        }) = frame.body
        else {
            return Err(Fault::Gone("expected sasl-init".into()));
        };
        let access = self.shared.broker.access();
        let config = &self.shared.config;
        let outcome = match offered.iter().find(|m| **m == mechanism.as_str()) {
            Some(&"PLAIN") => match initial_response.as_deref().and_then(parse_plain) {
                Some((user, password)) => access
                    .authenticate("PLAIN", &user, &password, loopback)
                    .map(|_| user),
                None => Err("malformed PLAIN response".into()),
            },
            Some(&"EXTERNAL") => crate::sasl::certificate_name(config, self.tls.as_deref())
                .and_then(|user| access.authenticate_external(&user, loopback).map(|_| user)),
            Some(_) => Ok(config.default_user.clone()),
            None => Err(format!(
                "authentication mechanism '{mechanism}' is not offered to this client"
            )),
        };
        match outcome {
            Ok(user) => {
                self.user = user;
                self.out.sasl(&SaslFrame::Outcome {
                    code: condition::SASL_OK,
                    additional_data: None,
                });
                self.flush().await
            }
            Err(text) => {
                tracing::warn!(peer = %self.peer, "AMQP 1.0 authentication failed: {text}");
                self.out.sasl(&SaslFrame::Outcome {
                    code: condition::SASL_AUTH,
                    additional_data: None,
                });
                let _ = self.flush().await;
                Err(Fault::Gone("authentication failed".into()))
            }
        }
    }

    async fn open(&mut self) -> Result<(), Fault> {
        let frame = self.read_frame().await?;
        let FrameBody::Amqp {
            performative: Performative::Open(open),
            ..
        } = frame.body
        else {
            return Err(Fault::close(condition::ILLEGAL_STATE, "expected open"));
        };
        let reply = Open {
            container_id: CONTAINER_ID.into(),
            max_frame_size: Some(self.max_frame_size),
            channel_max: Some(self.channel_max),
            idle_time_out: (!self.idle_timeout.is_zero())
                .then(|| u32::try_from(self.idle_timeout.as_millis()).unwrap_or(u32::MAX)),
            offered_capabilities: vec!["ANONYMOUS-RELAY".into()],
            properties: Some(server_properties(self.shared.broker.identity())),
            ..Open::default()
        };
        self.out.frame(0, &Performative::Open(Box::new(reply)));
        self.peer_max_frame_size = open.max_frame_size.unwrap_or(u32::MAX);
        if self.peer_max_frame_size < MIN_MAX_FRAME_SIZE {
            return Err(Fault::close(
                condition::FRAME_SIZE_TOO_SMALL,
                format!(
                    "max-frame-size {} is below the minimum of {MIN_MAX_FRAME_SIZE}",
                    self.peer_max_frame_size
                ),
            ));
        }
        self.channel_max = self.channel_max.min(open.channel_max.unwrap_or(u16::MAX));
        self.peer_idle_timeout = Duration::from_millis(u64::from(open.idle_time_out.unwrap_or(0)));
        let name = match open
            .hostname
            .as_deref()
            .and_then(|h| h.strip_prefix("vhost:"))
        {
            Some(name) => name.to_owned(),
            None => self.shared.config.default_vhost.clone(),
        };
        let (connection, grant) = self
            .shared
            .broker
            .enter_vhost(&self.user, &name)
            .map_err(|error| {
                tracing::warn!(peer = %self.peer, user = %self.user, vhost = %name, "AMQP 1.0 open refused: {}", error.text);
                let condition = if self.shared.broker.vhost(&name).is_none() {
                    condition::NOT_FOUND
                } else {
                    condition::UNAUTHORIZED_ACCESS
                };
                Fault::close(condition, error.text)
            })?;
        self.vhost = Some(connection.vhost().clone());
        self.vhost_connection = Some(connection);
        self.grant = Some(grant);
        self.flush().await?;
        tracing::debug!(connection = self.id, peer = %self.peer, user = %self.user, vhost = %name, container = %open.container_id, "AMQP 1.0 connection open");
        Ok(())
    }

    async fn run(&mut self) -> Result<(), Fault> {
        let tick_every = [self.idle_timeout / 2, self.peer_idle_timeout / 2]
            .into_iter()
            .filter(|d| !d.is_zero())
            .min();
        let mut ticker = tick_every.map(|every| {
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
            ticker
        });
        let mut shutdown = self.shared.shutdown.clone();
        let outbox = self.outbox.clone();
        // Frames that arrived with open (pipelined clients) are handled before reading.
        self.on_read().await?;
        loop {
            tokio::select! {
                read = read_into(&mut self.reader, &mut self.rbuf, self.read_chunk) => {
                    let (read, space) = read?;
                    if read == 0 {
                        return Err(Fault::Gone("peer closed the socket".into()));
                    }
                    self.last_read = Instant::now();
                    self.read_chunk = if read == space {
                        (self.read_chunk * 2).min(READ_CHUNK_MAX_BYTES)
                    } else if read < space / 4 {
                        (self.read_chunk / 2).max(READ_CHUNK_MIN_BYTES)
                    } else {
                        self.read_chunk
                    };
                    self.on_read().await?;
                    if self.rbuf.is_empty() && self.read_chunk == READ_CHUNK_MIN_BYTES {
                        // Quiet: hold no buffer while waiting (messages keep their slices).
                        self.rbuf = BytesMut::new();
                    }
                }
                () = outbox.notified() => {}
                // Credit withheld during an alarm is granted once it clears.
                Ok(()) = self.alarms.changed() => self.after_read(),
                Ok(()) = self.access.changed() => self.on_access_changed()?,
                _ = tick(&mut ticker) => self.on_tick()?,
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
            let frame = match decode_frame(&mut self.rbuf, self.max_frame_size) {
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
                Event::Settled { ticket, ok } => {
                    if let Some(ok) = self.pending.confirms.settled(ticket, ok) {
                        self.on_confirmed(ticket, ok);
                    }
                }
                Event::PublishRejected { tags } => self.on_publish_rejected(&tags),
                Event::ConsumerCancelled { consumer, .. } => self.on_consumer_cancelled(consumer),
            }
        }
        self.events = events;
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
        tracing::info!(connection = self.id, peer = %self.peer, condition = %error.condition, description = ?error.description, "closing AMQP 1.0 connection");
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
        if let Some(vhost) = self.vhost.clone() {
            for queue in vhost.exclusive_queues_of(self.id) {
                let _ = vhost
                    .delete_queue(queue.name(), false, false, self.id)
                    .await;
            }
        }
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
        let broker = &self.shared.broker;
        let vhost = self.vhost();
        if !broker.access().user_exists(&self.user) {
            let text = format!("user '{}' is deleted", self.user);
            return Err(Fault::close(condition::CONNECTION_FORCED, text));
        }
        let current = broker.vhost(vhost.name());
        if !current.is_some_and(|current| Arc::ptr_eq(&current, &vhost)) {
            let text = format!("vhost '{}' is deleted", vhost.name());
            return Err(Fault::close(condition::CONNECTION_FORCED, text));
        }
        let grant = broker.access().grant(&self.user, vhost.name());
        self.grant = Some(grant.unwrap_or_else(|| {
            Arc::new(Grant {
                user: Arc::from(self.user.as_str()),
                vhost: vhost.name().clone(),
                configure: Pattern::Nothing,
                write: Pattern::Nothing,
                read: Pattern::Nothing,
                topics: Vec::new(),
            })
        }));
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

/// Reads into `rbuf` with `chunk` bytes of room; returns the bytes read and the room there was.
/// A given-back buffer is reserved again only once the socket is readable.
async fn read_into(
    reader: &mut SocketReader,
    rbuf: &mut BytesMut,
    chunk: usize,
) -> std::io::Result<(usize, usize)> {
    if rbuf.capacity() == 0 {
        reader.readable().await?;
    }
    if rbuf.capacity() - rbuf.len() < chunk {
        rbuf.reserve(chunk);
    }
    let space = rbuf.capacity() - rbuf.len();
    let read = reader.read_buf(rbuf).await?;
    Ok((read, space))
}

async fn tick(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(ticker) => {
            ticker.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The SASL mechanisms AMQP 1.0 implements; ANONYMOUS logs a loopback client in as
/// `default_user`, as RabbitMQ's `anonymous_login_user`.
const MECHANISMS: [&str; 3] = ["PLAIN", "EXTERNAL", "ANONYMOUS"];

/// PLAIN: `authzid NUL authcid NUL password`.
fn parse_plain(response: &[u8]) -> Option<(String, String)> {
    let mut parts = response.split(|b| *b == 0);
    let _authzid = parts.next()?;
    let user = std::str::from_utf8(parts.next()?).ok()?;
    let password = std::str::from_utf8(parts.next()?).ok()?;
    Some((user.to_owned(), password.to_owned()))
}

/// The AMQP 1.0 open's properties: the broker's identity (see `warren_core::identity`).
/// RabbitMQ's AMQP 1.0 client libraries (Java, .NET, Python, Go) refuse a server whose
/// `product` is not `RabbitMQ` or whose `version` is below 4.0.0.
fn server_properties(identity: &Identity) -> Vec<(Value, Value)> {
    identity
        .properties()
        .into_iter()
        .map(|(key, value)| (Value::symbol(&key), Value::string(&value)))
        .collect()
}
