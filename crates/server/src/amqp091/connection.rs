//! One AMQP 0.9.1 connection: a single task that reads frames in batches, runs them against
//! core, takes queue deliveries from its outbox, and writes everything with one flush per turn.
//!
//! Turn: read what the socket has -> decode every complete frame -> hand publishes to queues
//! in per-queue batches (waiting when a queue's mailbox is full, which stops reading: credit
//! flow to the client) -> send confirms -> write deliveries -> grant consumer credit -> flush.
//!
//! A turn that only brought queue deliveries may leave them unflushed for up to
//! `delivery_hold_ms`, to be written with the next ones (see `Connection::hold_deliveries`).
//!
//! While a resource alarm is in effect, a connection that publishes stops reading (see
//! `throttle.rs`); it keeps writing deliveries and heartbeats.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use rustc_hash::FxHashMap;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, Sleep};
use warren_core::access::Grant;
use warren_core::consumer::{ConnectionId, Event, Outbox};
use warren_core::queue::SettleOp;
use warren_core::registry::{
    ConnectionDetails, ConnectionEntry, GlobalCounters, Registration, TlsSession,
};
use warren_core::vhost::{VHost, VHostConnection};
use warren_core::Broker;
use warren_proto::amqp091::{self as wire, reply_code, ConnectionClose, Frame, Method, ShortStr};

use super::channel::Channel;
use super::closing::Discard;
use super::fault::{Cause, Fault};
use super::publish::Pending;
use super::throttle::Throttle;
use super::writer::Writer;
use crate::config::Config;
use crate::socket::{Client, SocketReader, SocketWriter};

/// Read space reserved before each read: starts small so idle connections stay small, doubles
/// while reads fill it (a busy publisher then gets many frames per syscall), halves when they
/// do not.
const READ_CHUNK_MIN_BYTES: usize = 4 * 1024;
const READ_CHUNK_MAX_BYTES: usize = 256 * 1024;
/// A read goes into what is left of the current buffer while at least this much is: a new
/// buffer is taken only when it is nearly full. Messages are slices of the buffer they were
/// read into and keep all of it alive, so a buffer per small read would make each queued
/// message of a slow publisher cost a whole chunk.
const READ_SPACE_MIN_BYTES: usize = 1024;

/// How long we wait for close-ok after sending connection.close.
const CLOSE_OK_TIMEOUT: Duration = Duration::from_secs(3);
/// Deliveries held back to be written with later ones (see `Connection::hold_deliveries`)
/// wait at most `delivery_hold_ms` (rounded up to the timer's millisecond), and no longer
/// once this many deliveries or bytes wait. 256 small deliveries are about a millisecond of
/// PerfTest's autoack stream: with 64, a consumer woken only when its hold fills (see
/// `Outbox::quiet_for`) wrote three times as often, and the broker spent about a third more
/// CPU per message there.
const HOLD_DELIVERIES_MAX: u32 = 256;
const HOLD_BYTES_MAX: usize = 64 * 1024;
/// A client that sent anything this recently may be waiting on what it is sent: no hold.
const HOLD_CLIENT_QUIET: Duration = Duration::from_millis(10);

/// What every connection shares.
pub struct Shared {
    pub broker: Arc<Broker>,
    pub config: Arc<Config>,
    pub shutdown: watch::Receiver<bool>,
}

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
    local: SocketAddr,
    /// The TLS session, on a TLS listener.
    pub(super) tls: Option<Arc<TlsSession>>,
    /// The SASL mechanism the client logged in with.
    pub(super) auth_mechanism: &'static str,
    reader: SocketReader,
    socket_w: SocketWriter,
    pub(super) rbuf: BytesMut,
    /// Hands out large body frames in parts, so that no partial frame is copied when the
    /// read buffer is renewed.
    frames: wire::FrameReader,
    read_chunk: usize,
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
    hold: Option<Box<Hold>>,
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
        reader,
        socket_w,
        rbuf: start,
        frames: wire::FrameReader::default(),
        read_chunk: READ_CHUNK_MIN_BYTES,
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
    // Boxed: it runs once, and the connection future, which every idle connection holds, is
    // as large as its largest await.
    let shutdown = conn.shared.shutdown.clone();
    let handshake = tokio::time::timeout_at(deadline, conn.handshake());
    let handshake = Box::pin(crate::unless_shutdown(shutdown, handshake))
        .await
        .unwrap_or_else(|| Ok(Err(Fault::Gone("broker shutting down".into()))));
    let open = matches!(handshake, Ok(Ok(()))).then(|| conn.shared.broker.open_connection());
    let outcome = match handshake {
        Ok(Ok(())) => {
            // The handshake's buffers are not needed again (connection.start is the largest
            // frame a connection writes until its clients publish or consume).
            conn.out.shrink();
            conn.give_back_read_buffer();
            conn.register();
            conn.run().await
        }
        Ok(Err(fault)) => Err(fault),
        Err(_) => Err(Fault::Gone("handshake timeout".into())),
    };
    if let Err(fault) = outcome {
        conn.close_with(fault).await;
    }
    Box::pin(conn.teardown()).await;
    drop(open);
    conn.registration = None;
    if conn.closed_by_client {
        // As RabbitMQ: after close-ok it is the client that closes the socket.
        let mut scratch = [0u8; 64];
        let wait_eof =
            async { while matches!(conn.reader.read(&mut scratch).await, Ok(n) if n > 0) {} };
        let _ = tokio::time::timeout(CLOSE_OK_TIMEOUT, wait_eof).await;
    }
    tracing::debug!(connection = id, %peer, "connection closed");
}

impl Connection {
    /// Reads until one whole frame is buffered (handshake only; the main loop batches).
    pub(super) async fn read_frame(&mut self) -> Result<Frame, Fault> {
        loop {
            let frame_max = self.tuning.frame_max;
            match wire::decode_frame(&mut self.rbuf, frame_max) {
                Ok(Some(frame)) => return Ok(frame),
                Ok(None) => {}
                Err(error) => return Err(Fault::decode(&error)),
            }
            self.read_more().await?;
        }
    }

    /// Reads more bytes during the handshake (protocol header).
    pub(super) async fn read_more(&mut self) -> Result<&[u8], Fault> {
        self.rbuf.reserve(READ_CHUNK_MIN_BYTES);
        if self.reader.read_buf(&mut self.rbuf).await? == 0 {
            return Err(Fault::Gone("peer closed the socket".into()));
        }
        Ok(&self.rbuf)
    }

    pub(super) fn consume_bytes(&mut self, n: usize) {
        let _ = self.rbuf.split_to(n);
    }

    /// Writes what is queued; this ends any hold (see `hold_deliveries`).
    pub(super) async fn flush(&mut self) -> Result<(), Fault> {
        if let Some(hold) = self.hold.as_deref_mut() {
            hold.until = None;
        }
        self.may_hold = true;
        self.unflushed_deliveries = 0;
        if !self.out.is_empty() {
            let (bytes, writes) = self.out.flush(&mut self.socket_w).await?;
            self.wrote_since_tick = true;
            if let Some(registration) = &self.registration {
                registration.entry().stats.sent(bytes, writes);
            }
        }
        Ok(())
    }

    async fn run(&mut self) -> Result<(), Fault> {
        let heartbeat = Duration::from_secs(u64::from(self.tuning.heartbeat));
        // No timer at all for a connection without heartbeats.
        let mut ticker = (!heartbeat.is_zero()).then(|| {
            let mut ticker = tokio::time::interval(heartbeat / 2);
            ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
            ticker
        });
        let mut shutdown = self.shared.shutdown.clone();
        let outbox = self.outbox.clone();
        let entry = self.registration.as_ref().map(|r| r.entry().clone());
        loop {
            let blocked = self.throttle.is_blocked();
            let mut from_outbox = false;
            tokio::select! {
                // Blocked, it reads nothing but still ends when the client is gone.
                read = read_into(&mut self.reader, &mut self.rbuf, self.read_chunk, blocked) => {
                    let (read, space) = read?;
                    if read == 0 {
                        return Err(Fault::Gone("peer closed the socket".into()));
                    }
                    if let Some(hold) = self.hold.as_deref_mut() {
                        hold.last_read = Instant::now();
                    }
                    self.adapt_read_chunk(read, space);
                    self.read_idle_ticks = 0;
                    if let Some(entry) = &entry {
                        entry.stats.received(read as u64);
                    }
                    self.on_read().await?;
                    self.give_back_read_buffer();
                }
                () = self.throttle.changed(), if blocked => self.on_alarms_changed().await?,

                Ok(()) = self.access.changed() => self.on_access_changed()?,
                // Taken below, with whatever else arrived during this turn.
                () = outbox.notified() => from_outbox = true,
                // Held deliveries are due; those that came meanwhile count as a stream.
                () = hold_elapsed(&mut self.hold), if self.hold.as_ref().is_some_and(|h| h.until.is_some()) => {
                    if let Some(hold) = self.hold.as_deref_mut() {
                        hold.last_deliveries = Instant::now();
                        hold.due = true;
                    }
                }
                _ = tick(&mut ticker) => self.on_tick(heartbeat)?,
                _ = shutdown.changed() => {
                    return Err(Fault::connection(
                        reply_code::CONNECTION_FORCED,
                        "broker forced connection closure with reason 'shutdown'",
                        Cause::default(),
                    ));
                }
                reason = close_requested(entry.as_deref()) => {
                    return Err(Fault::connection(
                        reply_code::CONNECTION_FORCED,
                        reason,
                        Cause::default(),
                    ));
                }
            }
            // Deliveries that arrived meanwhile go out in the same write.
            self.on_events();
            self.grant_credit().await;
            if from_outbox && self.hold_deliveries() {
                self.add_counts();
                continue;
            }
            let held = self.unflushed_deliveries;
            self.flush().await?;
            self.hold_next_window(held > 0);
            self.add_counts();
            self.set_channel_gauges();
        }
    }

    /// Whether the deliveries this turn wrote wait for more instead of being flushed now.
    ///
    /// A consumer connection fed in small batches (a publisher's round split over many
    /// queues, or a publisher read a few messages at a time) would otherwise write a few
    /// deliveries per `send` and wake its client as often: the syscall and the wake-up cost
    /// more than the deliveries. In a steady stream they wait for the next ones, at most
    /// `delivery_hold_ms` after the first, while all of this holds:
    /// - everything written since the last flush is deliveries to consumers that need nothing
    ///   more to go on (`ConsumerState::may_wait`);
    /// - the client sent nothing for `HOLD_CLIENT_QUIET`: one that publishes or acknowledges
    ///   may be waiting on what it is sent (a request-reply client, a consumer at its
    ///   prefetch limit);
    /// - deliveries came less than `delivery_hold_ms` before (a stream, not a lone message);
    /// - fewer than `HOLD_DELIVERIES_MAX` deliveries and `HOLD_BYTES_MAX` bytes wait.
    ///
    /// Any other turn (the client sent something, a heartbeat, a confirm) flushes at once.
    fn hold_deliveries(&mut self) -> bool {
        let hold_ms = self.shared.config.delivery_hold_ms;
        if hold_ms == 0 || !self.may_hold || self.out.is_empty() {
            return false;
        }
        let now = Instant::now();
        let Some(hold) = self.hold.as_deref_mut() else {
            // The first deliveries: nothing known of the stream yet.
            self.hold = Some(Box::new(Hold {
                last_read: now,
                last_deliveries: now,
                until: None,
                due: false,
                timer: Box::pin(tokio::time::sleep_until(now)),
            }));
            return false;
        };
        let previous = std::mem::replace(&mut hold.last_deliveries, now);
        if self.unflushed_deliveries >= HOLD_DELIVERIES_MAX
            || self.out.len() >= HOLD_BYTES_MAX
            || now.duration_since(hold.last_read) < HOLD_CLIENT_QUIET
        {
            return false;
        }
        let holding = match hold.until {
            Some(until) => now < until,
            None => {
                let limit = Duration::from_millis(hold_ms);
                if now.duration_since(previous) >= limit {
                    return false;
                }
                hold.until = Some(now + limit);
                hold.timer.as_mut().reset(now + limit);
                true
            }
        };
        if holding {
            // The hold timer wakes this connection: deliveries that keep the hold going need
            // not wake it before (one queue task turn less per batch, not one per queue).
            let deliveries =
                (HOLD_DELIVERIES_MAX - self.unflushed_deliveries).min(self.waiting_room());
            self.outbox
                .quiet_for(deliveries, HOLD_BYTES_MAX - self.out.len());
        }
        holding
    }

    /// Starts the next hold right after held deliveries went out: their stream likely goes
    /// on, and its next deliveries then need not wake this connection either. Without this
    /// a stream woke it twice per hold, once for the deliveries that start the hold and once
    /// for its timer; a hold with nothing in it when the timer fires ends the stream's run.
    /// `wrote`: the flush that ended the hold wrote deliveries.
    fn hold_next_window(&mut self, wrote: bool) {
        let hold_ms = self.shared.config.delivery_hold_ms;
        let Some(hold) = self.hold.as_deref_mut() else {
            return;
        };
        let now = Instant::now();
        if !std::mem::take(&mut hold.due)
            || !wrote
            || hold_ms == 0
            || now.duration_since(hold.last_read) < HOLD_CLIENT_QUIET
        {
            return;
        }
        let room = self.waiting_room();
        if room == 0 {
            return;
        }
        let Some(hold) = self.hold.as_deref_mut() else {
            return;
        };
        let until = now + Duration::from_millis(hold_ms);
        hold.until = Some(until);
        hold.timer.as_mut().reset(until);
        self.outbox
            .quiet_for(HOLD_DELIVERIES_MAX.min(room), HOLD_BYTES_MAX);
    }

    /// Adds this turn's message counts to the broker's totals (Prometheus' global counters).
    fn add_counts(&mut self) {
        let counts = std::mem::take(&mut self.pending.counts);
        if counts.received + counts.confirmed == 0 {
            return;
        }
        let global = self.shared.broker.registry().counters();
        GlobalCounters::add(&global.received, counts.received);
        GlobalCounters::add(&global.routed, counts.routed);
        GlobalCounters::add(&global.unroutable_dropped, counts.unroutable_dropped);
        GlobalCounters::add(&global.unroutable_returned, counts.unroutable_returned);
        GlobalCounters::add(&global.confirmed, counts.confirmed);
        if let Some(vhost) = &self.vhost {
            for (exchange, published, routed) in self.pending.exchanges.drain(..) {
                vhost.exchange_stats().add(&exchange, published, routed);
            }
        }
    }

    /// Publishes each channel's unacked, unconfirmed and uncommitted counts for the management
    /// API: a store per channel and turn.
    fn set_channel_gauges(&self) {
        for channel in self.channels.values() {
            let unconfirmed = channel
                .confirm
                .as_ref()
                .map_or(0, |c| c.published.saturating_sub(c.acked));
            let (messages, acks) = channel.tx.as_ref().map_or((0, 0), |tx| tx.uncommitted());
            channel.stats.set_gauges([
                channel.unacked.len() as u64,
                unconfirmed,
                messages as u64,
                acks as u64,
            ]);
        }
    }

    /// Lists the connection in the broker's registry (management API) once it is open.
    fn register(&mut self) {
        let details = ConnectionDetails {
            id: self.id,
            protocol: "AMQP 0-9-1",
            peer: self.peer,
            // Where the client connected to: the connection's name is `peer -> local`.
            local: self.local,
            user: self.user.clone(),
            vhost: self
                .vhost
                .as_ref()
                .map_or_else(|| Arc::from(""), |v| v.name().clone()),
            client_properties: std::mem::take(&mut self.client_properties),
            channel_max: self.tuning.channel_max,
            frame_max: self.tuning.frame_max,
            heartbeat: self.tuning.heartbeat,
            auth_mechanism: self.auth_mechanism,
            tls: self.tls.clone(),
            connected_at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        };
        self.registration = Some(self.shared.broker.registry().register(details));
    }

    /// The registry's entry of this connection, to note channel and consumer changes.
    pub(super) fn registry_entry(&self) -> Option<&ConnectionEntry> {
        self.registration.as_ref().map(|r| &**r.entry())
    }

    /// Drops the read buffer once everything in it is decoded, for a connection that reads
    /// little (its reserve is at the minimum: an idle one holds no buffer while it waits), or
    /// after a burst. A busy connection keeps its buffer, whose reserve doubles while reads
    /// fill it, so that a publisher gets many frames per syscall.
    ///
    /// A quiet publisher's buffer is kept while messages still slice it and it has room: the
    /// memory stays taken by them anyway, and its next messages go into the same block instead
    /// of a new one each (`read_into`).
    fn give_back_read_buffer(&mut self) {
        if !self.rbuf.is_empty() {
            return;
        }
        let quiet = self.read_chunk == READ_CHUNK_MIN_BYTES;
        if quiet {
            let room = self.rbuf.capacity() >= READ_SPACE_MIN_BYTES;
            // Asking for more than the room left succeeds (at no cost) only when nothing else
            // holds the allocation: the frames read into it were all dropped.
            let shared = !self.rbuf.try_reclaim(self.rbuf.capacity() + 1);
            if !(shared && room) {
                self.rbuf = BytesMut::new();
            }
        } else if self.rbuf.capacity() > self.read_chunk * 2 {
            self.rbuf = BytesMut::new();
        }
    }

    fn adapt_read_chunk(&mut self, read: usize, space: usize) {
        if read == space {
            self.read_chunk = (self.read_chunk * 2).min(READ_CHUNK_MAX_BYTES);
        } else if read < space / 4 {
            self.read_chunk = (self.read_chunk / 2).max(READ_CHUNK_MIN_BYTES);
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
            let frame = match self.frames.decode(&mut self.rbuf, self.tuning.frame_max) {
                Ok(Some(frame)) => frame,
                Ok(None) => break Ok(()),
                Err(error) => break Err(Fault::decode(&error)),
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
                tracing::debug!(connection = self.id, code = close.reply_code, text = %close.reply_text, "client closed");
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
        let _ = tokio::time::timeout(CLOSE_OK_TIMEOUT, wait_close_ok).await;
    }

    /// The closing state: reads and discards the peer's frames, payloads unread, until
    /// connection.close-ok (or connection.close) arrives or the socket ends.
    async fn discard_until_close_ok(&mut self) {
        // A body frame being read in parts is skipped to its end first.
        let mut discard = Discard::skipping(self.frames.bytes_to_frame_end());
        while !discard.scan(&mut self.rbuf) {
            if self.read_more().await.is_err() {
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
        if let Some(vhost) = self.vhost.clone() {
            for queue in vhost.exclusive_queues_of(self.id) {
                let _ = vhost
                    .delete_queue(queue.name(), false, false, self.id)
                    .await;
            }
        }
    }
}

/// The next heartbeat tick; never, without heartbeats.
/// Resolves when the management API asks the connection to close (never without a
/// registration).
async fn close_requested(entry: Option<&ConnectionEntry>) -> String {
    match entry {
        Some(entry) => entry.close_requested().await,
        None => std::future::pending().await,
    }
}

/// A consumer connection's record for holding deliveries back.
struct Hold {
    /// When the client last sent anything (since this record was made).
    last_read: Instant,
    /// When queue deliveries last came.
    last_deliveries: Instant,
    /// Held deliveries are due then.
    until: Option<Instant>,
    /// The timer fired: the flush that follows ends this hold (see `hold_next_window`).
    due: bool,
    timer: Pin<Box<Sleep>>,
}

/// Resolves when held deliveries are due.
async fn hold_elapsed(hold: &mut Option<Box<Hold>>) {
    match hold {
        Some(hold) => hold.timer.as_mut().await,
        None => std::future::pending().await,
    }
}

async fn tick(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(ticker) => {
            ticker.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// How often a blocked connection checks whether its client is still there.
const BLOCKED_PEER_CHECK: Duration = Duration::from_secs(1);

/// Resolves once the peer has closed or reset the socket, checked every
/// `BLOCKED_PEER_CHECK` (the socket is not read meanwhile, so its readiness alone cannot wake
/// the connection: unread bytes keep it readable).
async fn peer_gone(reader: &SocketReader) {
    loop {
        tokio::time::sleep(BLOCKED_PEER_CHECK).await;
        if reader.is_peer_gone() {
            return;
        }
    }
}

/// Reads into `rbuf` with at least `chunk` bytes of room; returns the bytes read and the room
/// there was. A buffer that was given back is reserved again only once the socket is readable,
/// so that a connection waiting for its client holds none.
///
/// A `blocked` connection (see `throttle.rs`) reads nothing: this waits until its client is
/// gone and then reports end of file. Not reading, it would otherwise notice neither a close
/// nor a reset (without heartbeats, never) and keep the client's partial messages forever.
async fn read_into(
    reader: &mut SocketReader,
    rbuf: &mut BytesMut,
    chunk: usize,
    blocked: bool,
) -> std::io::Result<(usize, usize)> {
    if blocked {
        peer_gone(reader).await;
        return Ok((0, 0));
    }
    if rbuf.capacity() == 0 {
        reader.readable().await?;
    }
    // A quiet connection reads into what is left of its buffer while enough is; a busy one
    // always has a whole chunk of room (see `give_back_read_buffer`).
    if chunk > READ_CHUNK_MIN_BYTES || rbuf.capacity() - rbuf.len() < READ_SPACE_MIN_BYTES {
        rbuf.reserve(chunk);
    }
    let space = rbuf.capacity() - rbuf.len();
    let read = reader.read_buf(rbuf).await?;
    Ok((read, space))
}
