//! One AMQP 0.9.1 connection: a single task that reads frames in batches, runs them against
//! core, takes queue deliveries from its outbox, and writes everything with one flush per turn.
//!
//! Turn: read what the socket has -> decode every complete frame -> hand publishes to queues
//! in per-queue batches (waiting when a queue's mailbox is full, which stops reading: credit
//! flow to the client) -> send confirms -> write deliveries -> grant consumer credit -> flush.
//!
//! A turn that only brought queue deliveries may leave them unflushed for up to
//! `delivery_hold_ms`, to be written with the next ones (see `hold.rs`).
//!
//! While a resource alarm is in effect, a connection that publishes stops reading (see
//! `throttle.rs`); it keeps writing deliveries and heartbeats.
//!
//! Its life from handshake to teardown, its socket input and output and its publish path are
//! those of every connection (see `crate::connection`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Buf;
use rustc_hash::FxHashMap;
use tokio::sync::watch;
use warren_core::access::Grant;
use warren_core::consumer::{ConnectionId, Event, Outbox};
use warren_core::queue::SettleOp;
use warren_core::registry::{ConnectionEntry, Registration, TlsSession};
use warren_core::vhost::{VHost, VHostConnection};
use warren_proto::amqp091::{self as wire, reply_code, ConnectionClose, Frame, Method, ShortStr};

use super::channel::Channel;
use super::closing::Discard;
use super::confirm::Pending;
use super::fault::{Cause, Fault};
use super::hold::{hold_elapsed, Hold};
use super::registration::close_requested;
use super::throttle::Throttle;
use super::writer::Writer;
use crate::connection::lifecycle::{self, Lifecycle, CLOSE_TIMEOUT};
use crate::connection::read_buffer::ReadBuffer;
use crate::connection::{self as common, Shared};
use crate::socket::{Client, SocketWriter};

/// Negotiated in connection.tune / tune-ok.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    pub frame_max: u32,
    pub channel_max: u16,
    pub heartbeat: u16,
}

/// Client capabilities that change what we send.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientCaps {
    pub consumer_cancel_notify: bool,
    pub authentication_failure_close: bool,
    pub connection_blocked: bool,
}

pub struct Connection {
    pub(super) id: ConnectionId,
    pub(super) shared: Arc<Shared>,
    pub(super) peer: SocketAddr,
    /// Where the client connected to.
    pub(super) local: SocketAddr,
    /// The TLS session, on a TLS listener.
    pub(super) tls: Option<Arc<TlsSession>>,
    /// The SASL mechanism the client logged in with.
    pub(super) auth_mechanism: &'static str,
    socket_w: SocketWriter,
    /// The socket's read side and the bytes read from it.
    pub(super) rbuf: ReadBuffer,
    /// Hands out large body frames in parts, so that no partial frame is copied when the
    /// read buffer is renewed.
    frames: wire::FrameReader,
    pub(super) out: Writer,
    pub(super) outbox: Arc<Outbox>,
    events: Vec<Event>,
    pub(super) vhost: Option<Arc<VHost>>,
    /// Counts this connection in its vhost (`max-connections`).
    pub(super) vhost_connection: Option<VHostConnection>,
    pub(super) user: String,
    /// What the user may do in the vhost (see `authz.rs`).
    pub(super) grant: Option<Arc<Grant>>,
    /// Changes to users, vhosts and permissions.
    access: watch::Receiver<u64>,
    /// Boxed: a map leaves buckets empty, and an empty bucket costs a pointer this way
    /// rather than a whole `Channel`.
    pub(super) channels: FxHashMap<u16, Box<Channel>>,
    pub(super) tuning: Tuning,
    pub(super) caps: ClientCaps,
    pub(super) pending: Pending,
    pub(super) throttle: Throttle,
    /// Heartbeat ticks (half intervals) since the peer last sent anything.
    pub(super) read_idle_ticks: u32,
    /// Whether anything was written since the last heartbeat tick.
    wrote_since_tick: bool,
    /// Whether the last tick sent a heartbeat (then `wrote_since_tick` counts it).
    sent_heartbeat: bool,
    closed_by_client: bool,
    /// Whether the user is tagged `impersonator` (may publish any `user_id`).
    pub(super) impersonator: bool,
    /// Kept from connection.start-ok until the connection registers (see
    /// `ConnectionDetails::client_properties`).
    pub(super) client_properties: bytes::Bytes,
    /// The management API's view of this connection, once open.
    pub(super) registration: Option<Registration>,
    /// What holding deliveries back needs (see `hold_deliveries`); made when the first
    /// deliveries come, so connections that only publish or sit idle carry a pointer.
    pub(super) hold: Option<Box<Hold>>,
    /// Whether everything written since the last flush is deliveries that may wait (see
    /// `ConsumerState::may_wait`).
    pub(super) may_hold: bool,
    /// Deliveries written since the last flush.
    pub(super) unflushed_deliveries: u32,
}

/// Serves one accepted socket until it closes.
pub async fn serve(client: Box<Client>, shared: Arc<Shared>) {
    let Client {
        reader,
        writer: socket_w,
        peer,
        local,
        tls,
        start,
        deadline,
    } = *client;
    let id = shared.broker.next_id();
    let tuning = Tuning {
        frame_max: shared.config.frame_max,
        channel_max: shared.config.channel_max,
        heartbeat: shared.config.heartbeat,
    };
    let throttle = Throttle::new(shared.broker.alarms().subscribe());
    let access = shared.broker.access().subscribe();
    let mut conn = Connection {
        id,
        shared,
        peer,
        local,
        tls,
        auth_mechanism: "PLAIN",
        socket_w,
        rbuf: ReadBuffer::new(reader, start),
        frames: wire::FrameReader::default(),
        out: Writer::default(),
        outbox: Outbox::new(),
        events: Vec::new(),
        vhost: None,
        vhost_connection: None,
        user: String::new(),
        grant: None,
        access,
        channels: FxHashMap::default(),
        tuning,
        caps: ClientCaps::default(),
        pending: Pending::default(),
        throttle,
        read_idle_ticks: 0,
        wrote_since_tick: false,
        sent_heartbeat: false,
        closed_by_client: false,
        impersonator: false,
        client_properties: bytes::Bytes::new(),
        registration: None,
        hold: None,
        may_hold: true,
        unflushed_deliveries: 0,
    };
    lifecycle::serve(&mut conn, deadline).await;
    tracing::debug!(connection = id, %peer, "connection closed");
}

impl Lifecycle for Connection {
    type Fault = Fault;

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn handshake(&mut self) -> impl std::future::Future<Output = Result<(), Fault>> + Send {
        Connection::handshake(self)
    }

    fn opened(&mut self) {
        // The handshake's buffers are not needed again (connection.start is the largest frame
        // a connection writes until its clients publish or consume).
        self.out.shrink();
        self.rbuf.give_back();
        self.register();
    }

    async fn run(&mut self) -> Result<(), Fault> {
        let heartbeat = Duration::from_secs(u64::from(self.tuning.heartbeat));
        // As RabbitMQ, a tick every half interval (none without heartbeats).
        let mut ticker = common::ticker(Some(heartbeat / 2));
        let mut shutdown = self.shared.shutdown.clone();
        let outbox = self.outbox.clone();
        let entry = self.registration.as_ref().map(|r| r.entry().clone());
        loop {
            let blocked = self.throttle.is_blocked();
            let mut from_outbox = false;
            tokio::select! {
                // Blocked, it reads nothing but still ends when the client is gone.
                read = self.rbuf.read(blocked) => {
                    self.note_read(read?, entry.as_deref());
                    self.on_read().await?;
                    self.rbuf.give_back();
                }
                () = self.throttle.changed(), if blocked => self.on_alarms_changed().await?,
                Ok(()) = self.access.changed() => self.on_access_changed()?,
                // Taken below, with whatever else arrived during this turn.
                () = outbox.notified() => from_outbox = true,
                () = hold_elapsed(&mut self.hold), if self.holding() => self.hold_due(),
                _ = common::tick(&mut ticker) => self.on_tick(heartbeat)?,
                _ = shutdown.changed() => {
                    return Err(forced("broker forced connection closure with reason 'shutdown'"));
                }
                reason = close_requested(entry.as_deref()) => return Err(forced(reason)),
            }
            // Deliveries that arrived meanwhile go out in the same write, unless they are held
            // back (see `hold_deliveries`). The awaits stay in this loop rather than in a
            // function of their own: each level of futures adds to the connection future.
            self.on_events();
            self.grant_credit().await;
            if !(from_outbox && self.hold_deliveries()) {
                let held = self.unflushed_deliveries;
                self.flush().await?;
                self.hold_next_window(held > 0);
                self.set_channel_gauges();
            }
            self.add_counts();
        }
    }

    /// Sends connection.close for a hard error and waits (briefly) for close-ok.
    async fn close_with(&mut self, fault: Fault) {
        let (code, text, class_id, method_id) = match fault {
            Fault::Gone(reason) => {
                tracing::debug!(connection = self.id, %reason, "connection ended");
                let _ = self.flush().await;
                return;
            }
            Fault::Connection {
                code,
                text,
                class_id,
                method_id,
            } => (code, text, class_id, method_id),
            Fault::Channel { code, text, .. } => (code, text, 0, 0),
        };
        tracing::info!(connection = self.id, peer = %self.peer, code, %text, "closing connection");
        let close = ConnectionClose {
            reply_code: code,
            reply_text: ShortStr::elided(&text),
            class_id,
            method_id,
        };
        self.out.method(0, &Method::ConnectionClose(close));
        if self.flush().await.is_err() {
            return;
        }
        let wait_close_ok = self.discard_until_close_ok();
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, wait_close_ok).await;
    }

    /// Releases everything the connection held: consumers, unacked messages, exclusive queues.
    async fn teardown(&mut self) {
        let ids: Vec<u16> = self.channels.keys().copied().collect();
        for id in ids {
            if let Some(channel) = self.channels.remove(&id) {
                self.release_channel(*channel).await;
            }
        }
        self.requeue_outbox();
        self.flush_pending().await;
        common::delete_exclusive_queues(self.vhost.as_ref(), self.id).await;
    }

    fn closed(&mut self) {
        self.registration = None;
    }

    fn closed_by_client(&self) -> bool {
        self.closed_by_client
    }

    fn input(&mut self) -> &mut ReadBuffer {
        &mut self.rbuf
    }
}

impl Connection {
    /// Reads until one whole frame is buffered (handshake only; the main loop batches).
    pub(super) async fn read_frame(&mut self) -> Result<Frame, Fault> {
        loop {
            let frame_max = self.tuning.frame_max;
            match wire::decode_frame(self.rbuf.bytes(), frame_max) {
                Ok(Some(frame)) => return Ok(frame),
                Ok(None) => {}
                Err(error) => return Err(Fault::decode(&error)),
            }
            self.rbuf.read_more().await?;
        }
    }

    pub(super) fn consume_bytes(&mut self, n: usize) {
        self.rbuf.bytes().advance(n);
    }

    /// Writes what is queued; this ends any hold (see `hold_deliveries`).
    pub(super) async fn flush(&mut self) -> Result<(), Fault> {
        self.end_hold();
        if !self.out.is_empty() {
            let (bytes, writes) = self.out.flush(&mut self.socket_w).await?;
            self.wrote_since_tick = true;
            if let Some(registration) = &self.registration {
                registration.entry().stats.sent(bytes, writes);
            }
        }
        Ok(())
    }

    /// The socket gave `read` bytes: the client is there.
    fn note_read(&mut self, read: usize, entry: Option<&ConnectionEntry>) {
        self.note_client_read();
        self.read_idle_ticks = 0;
        if let Some(entry) = entry {
            entry.stats.received(read as u64);
        }
    }

    /// Runs every half heartbeat interval: a peer silent for two whole intervals is gone; an
    /// idle half interval on our side gets a heartbeat frame.
    fn on_tick(&mut self, heartbeat: Duration) -> Result<(), Fault> {
        if !self.throttle.is_blocked() {
            // A blocked connection does not read: the client's heartbeats wait in the socket.
            self.read_idle_ticks += 1;
        }
        if self.read_idle_ticks > 4 {
            tracing::warn!(
                connection = self.id,
                peer = %self.peer,
                timeout_s = heartbeat.as_secs(),
                "missed heartbeats from client, closing"
            );
            return Err(Fault::Gone("missed heartbeats".into()));
        }
        // As RabbitMQ, an idle connection gets a heartbeat every half interval (a tick): one
        // written since the last tick, if that was only our heartbeat, is idle too.
        let wrote = std::mem::take(&mut self.wrote_since_tick);
        self.sent_heartbeat = (!wrote || self.sent_heartbeat) && self.out.is_empty();
        if self.sent_heartbeat {
            // Quiet for half an interval: no need to keep what the last burst grew.
            self.out.shrink();
            self.out.heartbeat();
        }
        Ok(())
    }

    /// Decodes and handles every complete frame in the read buffer, then hands the publishes
    /// they carried to their queues (also when a frame ends the connection). Publish content
    /// during an alarm stops it at that frame.
    pub(super) async fn on_read(&mut self) -> Result<(), Fault> {
        self.throttle.refresh();
        let outcome = loop {
            // `FrameReader::decode` taken apart, so that the frame is built here (see
            // `FrameReader::body_in_progress`).
            let buf = self.rbuf.bytes();
            let frame = if self.frames.body_in_progress() {
                match self.frames.continue_body(buf) {
                    Ok(Some(part)) => part,
                    Ok(None) => break Ok(()),
                    Err(error) => break Err(Fault::decode(&error)),
                }
            } else {
                match wire::decode_frame(buf, self.tuning.frame_max) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => match self.frames.start_body(buf) {
                        Some(part) => part,
                        None => break Ok(()),
                    },
                    Err(error) => break Err(Fault::decode(&error)),
                }
            };
            let content = matches!(frame, Frame::Header { .. } | Frame::Body { .. });
            // Publishes, their content and acks are handled without a future; every other
            // frame through a boxed one: the connection future is as large as its largest
            // await, and every idle connection holds it.
            let handled = match self.on_hot_frame(frame) {
                Ok(None) => Ok(()),
                Ok(Some(frame)) => Box::pin(self.on_frame(frame)).await,
                Err(fault) => Err(fault),
            };
            match handled {
                Ok(()) => {}
                Err(Fault::Channel {
                    channel,
                    code,
                    text,
                    class_id,
                    method_id,
                }) => {
                    Box::pin(self.close_channel_with(channel, code, text, class_id, method_id))
                        .await
                }
                Err(fault) => break Err(fault),
            }
            if content && self.throttle.is_blocking() && self.block() {
                break Ok(());
            }
        };
        self.flush_pending().await;
        outcome
    }

    /// The message path: basic.publish, content headers and bodies, basic.ack and nack, and
    /// heartbeats. Any other frame is handed back for `on_frame`.
    fn on_hot_frame(&mut self, frame: Frame) -> Result<Option<Frame>, Fault> {
        match frame {
            Frame::Heartbeat { channel: 0 } => {}
            Frame::Method {
                channel: channel @ 1..,
                method:
                    method @ (Method::BasicPublish(_) | Method::BasicAck(_) | Method::BasicNack(_)),
            } => self.on_hot_method(channel, method)?,
            Frame::Header { channel, header } => self.on_header(channel, header)?,
            Frame::Body { channel, payload } => self.on_body(channel, payload)?,
            other => return Ok(Some(other)),
        }
        Ok(None)
    }

    async fn on_frame(&mut self, frame: Frame) -> Result<(), Fault> {
        match frame {
            Frame::Heartbeat { channel } => Err(Fault::connection(
                reply_code::FRAME_ERROR,
                format!("heartbeat frame on channel {channel}; heartbeats belong on channel 0"),
                Cause::default(),
            )),
            Frame::Method { channel: 0, method } => self.on_connection_method(method).await,
            Frame::Method { channel, method } => self.on_cold_method(channel, method).await,
            Frame::Header { channel, header } => self.on_header(channel, header),
            Frame::Body { channel, payload } => self.on_body(channel, payload),
        }
    }

    async fn on_connection_method(&mut self, method: Method) -> Result<(), Fault> {
        match method {
            Method::ConnectionClose(close) => {
                tracing::debug!(
                    connection = self.id, code = close.reply_code, text = %close.reply_text,
                    "client closed"
                );
                // As RabbitMQ: every channel is shut down (consumers cancelled, unacked
                // messages requeued, exclusive queues deleted) before close-ok, so a client
                // that reconnects at close-ok finds them back. Boxed: the connection future,
                // which every idle connection holds, stays small.
                Box::pin(self.teardown()).await;
                self.out
                    .method(0, &Method::ConnectionCloseOk(Default::default()));
                let _ = self.flush().await;
                self.closed_by_client = true;
                Err(Fault::Gone("closed by client".into()))
            }
            Method::ConnectionUpdateSecret(_) => {
                // No token-based auth backend yet: the new secret is accepted as RabbitMQ's
                // internal backend does.
                self.out
                    .method(0, &Method::ConnectionUpdateSecretOk(Default::default()));
                Ok(())
            }
            Method::ConnectionCloseOk(_) => Err(Fault::Gone("close-ok".into())),
            other => Err(Fault::connection(
                reply_code::COMMAND_INVALID,
                format!("method '{}' is not allowed on channel 0", other.name()),
                Cause::of(&other),
            )),
        }
    }

    pub(super) fn on_events(&mut self) {
        let mut events = std::mem::take(&mut self.events);
        self.outbox.take_all(&mut events);
        for event in events.drain(..) {
            self.on_event(event);
        }
        self.events = events;
    }

    /// The closing state: reads and discards the peer's frames, payloads unread, until
    /// connection.close-ok (or connection.close) arrives or the socket ends.
    async fn discard_until_close_ok(&mut self) {
        // A body frame being read in parts is skipped to its end first.
        let mut discard = Discard::skipping(self.frames.bytes_to_frame_end());
        while !discard.scan(self.rbuf.bytes()) {
            if self.rbuf.read_more().await.is_err() {
                return;
            }
        }
    }

    /// Gives back deliveries that reached the outbox but were never written (their consumers
    /// are cancelled): without this, messages for consumers that acknowledge would stay
    /// unacked in their queues for good.
    fn requeue_outbox(&mut self) {
        let mut events = std::mem::take(&mut self.events);
        self.outbox.take_all(&mut events);
        for event in events.drain(..) {
            if let Event::Deliver(delivery) = event {
                self.pending
                    .settle(&delivery.queue, SettleOp::Requeue, delivery.seq);
            }
        }
    }
}

/// A hard error of the broker's: the connection closes with 320 CONNECTION_FORCED.
fn forced(text: impl AsRef<str>) -> Fault {
    Fault::connection(reply_code::CONNECTION_FORCED, text, Cause::default())
}
