//! One stream protocol connection: a single task that reads frames in batches, answers them,
//! takes chunks from its subscriptions' mailbox and outcomes from its confirm inbox, and
//! writes everything with one flush per turn.
//!
//! Turn: read what the socket has -> decode every complete frame -> hand each publisher's
//! messages to its stream in one batch (waiting when the stream's mailbox is full, which stops
//! reading: back-pressure to the client) -> write confirms and deliveries -> flush.
//!
//! While a memory or disk alarm is in effect, a connection that publishes stops reading its
//! socket at the first Publish frame (RabbitMQ's blocked state); deliveries, confirms and
//! heartbeats still go out, and missed client heartbeats are not counted meanwhile.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, watch};
use warren_core::access::Grant;
use warren_core::alarm::AlarmSet;
use warren_core::consumer::ConnectionId;
use warren_core::queue::stream::{ConfirmInbox, StreamOutcome};
use warren_core::registry::{ConnectionDetails, ConnectionEntry, Registration};
use warren_core::vhost::{VHost, VHostConnection};
use warren_proto::stream::{
    decode_command, decode_frame, key, response_code, Command, ConnectionCommand, DecodeError,
    SimpleResponse,
};

use super::fault::Fault;
use super::publish::{Pending, Publisher};
use super::subscription::{Event, Subscription};
use crate::connection::lifecycle::{self, Lifecycle, CLOSE_TIMEOUT};
use crate::connection::output::Output;
use crate::connection::read_buffer::ReadBuffer;
use crate::connection::{self as common, Shared};
use crate::socket::{Client, SocketWriter};

/// Chunks the subscriptions of one connection may have on their way to its writer; a full
/// mailbox stops the subscriptions' reads until the connection has written (bounded memory
/// per connection whatever its consumers' credit).
pub const DELIVER_MAILBOX_MAX: usize = 32;
/// Chunks written per turn before the connection looks at its socket again.
const DELIVER_TURN_MAX: usize = 64;

pub struct Connection {
    pub(super) id: ConnectionId,
    pub(super) shared: Arc<Shared>,
    pub(super) peer: SocketAddr,
    pub(super) local: SocketAddr,
    pub(super) socket_w: SocketWriter,
    pub(super) rbuf: ReadBuffer,
    pub(super) out: Output,
    /// Negotiated in Tune; the server's proposal until then.
    pub(super) frame_max: u32,
    pub(super) heartbeat: u32,
    pub(super) user: String,
    pub(super) auth_mechanism: &'static str,
    pub(super) vhost: Option<Arc<VHost>>,
    pub(super) vhost_connection: Option<VHostConnection>,
    pub(super) grant: Option<Arc<Grant>>,
    access: watch::Receiver<u64>,
    alarms: watch::Receiver<AlarmSet>,
    /// Not reading the socket until every alarm clears.
    blocked: bool,
    pub(super) publishers: FxHashMap<u8, Publisher>,
    /// A publisher's messages decoded this turn, handed to its stream as one batch.
    pub(super) pending: Option<Pending>,
    pub(super) confirms: Arc<ConfirmInbox>,
    outcomes: Vec<StreamOutcome>,
    pub(super) subscriptions: FxHashMap<u8, Subscription>,
    /// Numbers subscriptions, so that chunks of an ended one still in the mailbox are dropped.
    pub(super) subscription_serial: u64,
    pub(super) events_tx: mpsc::Sender<Event>,
    /// Per stream in use, the task that reports its deletion.
    pub(super) watchers: FxHashMap<Arc<str>, tokio::task::JoinHandle<()>>,
    events_rx: mpsc::Receiver<Event>,
    /// Whether the client said it reads Deliver version 2 (ExchangeCommandVersions).
    pub(super) deliver_v2: bool,
    /// The client's peer properties, for the management API.
    pub(super) client_properties: Vec<(String, String)>,
    registration: Option<Registration>,
    read_idle_ticks: u32,
    wrote_since_tick: bool,
    closed_by_client: bool,
}

/// Serves one accepted socket until it closes.
pub async fn serve(client: Client, shared: Arc<Shared>) {
    let Client {
        reader,
        writer,
        peer,
        local,
        start,
        deadline,
        ..
    } = client;
    let id = shared.broker.next_id();
    let (events_tx, events_rx) = mpsc::channel(DELIVER_MAILBOX_MAX);
    let mut conn = Connection {
        id,
        peer,
        local,
        socket_w: writer,
        rbuf: ReadBuffer::new(reader, start),
        out: Output::default(),
        frame_max: shared.config.stream_frame_max,
        heartbeat: shared.config.stream_heartbeat,
        user: String::new(),
        auth_mechanism: "PLAIN",
        vhost: None,
        vhost_connection: None,
        grant: None,
        access: shared.broker.access().subscribe(),
        alarms: shared.broker.alarms().subscribe(),
        blocked: false,
        publishers: FxHashMap::default(),
        pending: None,
        confirms: ConfirmInbox::new(),
        outcomes: Vec::new(),
        subscriptions: FxHashMap::default(),
        subscription_serial: 0,
        events_tx,
        watchers: FxHashMap::default(),
        events_rx,
        deliver_v2: false,
        client_properties: Vec::new(),
        registration: None,
        read_idle_ticks: 0,
        wrote_since_tick: false,
        closed_by_client: false,
        shared,
    };
    lifecycle::serve(&mut conn, deadline).await;
    tracing::debug!(connection = id, %peer, "stream connection closed");
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
        self.out.shrink();
        self.rbuf.give_back();
        self.register();
    }

    async fn run(&mut self) -> Result<(), Fault> {
        let heartbeat = Duration::from_secs(u64::from(self.heartbeat));
        let mut ticker = common::ticker(Some(heartbeat / 2));
        let mut shutdown = self.shared.shutdown.clone();
        let confirms = self.confirms.clone();
        let entry = self.registration.as_ref().map(|r| r.entry().clone());
        loop {
            let blocked = self.blocked;
            tokio::select! {
                read = self.rbuf.read(blocked) => {
                    let read = read?;
                    self.read_idle_ticks = 0;
                    if let Some(entry) = &entry {
                        entry.stats.received(read as u64);
                    }
                    self.on_read().await?;
                    self.rbuf.give_back();
                }
                Some(event) = self.events_rx.recv() => self.on_events(event),
                () = confirms.notified() => {}
                changed = self.alarms.changed(), if blocked => {
                    if changed.is_ok() {
                        self.on_alarms_changed().await?;
                    }
                }
                Ok(()) = self.access.changed() => self.on_access_changed()?,
                _ = common::tick(&mut ticker) => self.on_tick(heartbeat)?,
                _ = shutdown.changed() => {
                    return Err(Fault::forced("broker forced connection closure with reason \
                                              'shutdown'"));
                }
                reason = close_requested(entry.as_deref()) => {
                    // As RabbitMQ's stream reader: the socket is closed without a Close
                    // command, which clients read as an unexpected loss and recover from
                    // (the Java client does not recover after a server Close).
                    tracing::info!(
                        connection = self.id, peer = %self.peer, %reason,
                        "stream connection closed by request"
                    );
                    return Err(Fault::Gone(reason));
                }
            }
            self.write_outcomes();
            self.flush().await?;
        }
    }

    async fn close_with(&mut self, fault: Fault) {
        let (code, reason) = match fault {
            Fault::Gone(reason) => {
                tracing::debug!(connection = self.id, %reason, "stream connection ended");
                let _ = self.flush().await;
                return;
            }
            Fault::Close { code, reason } => (code, reason),
        };
        tracing::info!(
            connection = self.id, peer = %self.peer, code, %reason, "closing stream connection"
        );
        let close = ConnectionCommand::CloseRequest {
            correlation_id: 1,
            code,
            reason: Some(reason),
        };
        self.send(&Command::Connection(close));
        if self.flush().await.is_err() {
            return;
        }
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.discard_until_close_response()).await;
    }

    async fn teardown(&mut self) {
        self.end_subscriptions();
        let _ = self.hand_over_pending().await;
        self.publishers.clear();
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
    /// Appends a command's frame to the output. A command that cannot be encoded (a string
    /// longer than the protocol allows) is logged and left out.
    pub(super) fn send(&mut self, command: &Command) {
        if let Err(error) = command.encode(self.out.encode()) {
            tracing::warn!(connection = self.id, %error, "stream frame not sent");
        }
    }

    /// A response that carries only a correlation id and a code.
    pub(super) fn respond(&mut self, command_key: u16, correlation_id: u32, code: u16) {
        let response = SimpleResponse {
            key: command_key,
            correlation_id,
            code,
        };
        self.send(&Command::Response(response));
    }

    /// Writes what is queued.
    pub(super) async fn flush(&mut self) -> Result<(), Fault> {
        if self.out.is_empty() {
            return Ok(());
        }
        let (bytes, writes) = self.out.flush(&mut self.socket_w).await?;
        self.wrote_since_tick = true;
        if let Some(registration) = &self.registration {
            registration.entry().stats.sent(bytes, writes);
        }
        Ok(())
    }

    /// Decodes and handles every complete frame in the read buffer; then hands the batch of
    /// publishes decoded to its stream. A Publish during an alarm stops decoding after it.
    async fn on_read(&mut self) -> Result<(), Fault> {
        let alarm = !self.alarms.borrow_and_update().is_empty();
        if alarm && !self.publishers.is_empty() {
            // As RabbitMQ: a connection with publishers stops reading during an alarm; what
            // it read stays buffered until the alarms clear.
            self.block();
            return Ok(());
        }
        let outcome = loop {
            let frame = match decode_frame(self.rbuf.bytes(), self.frame_max) {
                Ok(Some(frame)) => frame,
                Ok(None) => break Ok(()),
                Err(error) => break Err(self.malformed(&error)),
            };
            let publish = frame.key == key::PUBLISH;
            let handled = match decode_command(&frame) {
                Ok(Command::Publish(command)) if publish => self.on_publish(command).await,
                Ok(command) => Box::pin(self.on_command(command)).await,
                Err(DecodeError::UnknownCommand { key, response, .. }) if !response => {
                    self.on_unsupported(key, &frame.body)
                }
                Err(error) => Err(self.malformed(&error)),
            };
            if let Err(fault) = handled {
                break Err(fault);
            }
            if publish && alarm && !self.publishers.is_empty() {
                self.block();
                break Ok(());
            }
        };
        self.hand_over_pending().await?;
        outcome
    }

    fn block(&mut self) {
        self.blocked = true;
        tracing::debug!(connection = self.id, peer = %self.peer, "stream connection blocked");
    }

    /// The resource alarms in effect now.
    pub(super) fn alarms_now(&self) -> AlarmSet {
        *self.alarms.borrow()
    }

    /// A frame that cannot be decoded closes the connection with the spec's code.
    fn malformed(&self, error: &DecodeError) -> Fault {
        tracing::warn!(
            connection = self.id, peer = %self.peer, %error, "malformed stream frame, closing"
        );
        Fault::decode(error)
    }

    /// The alarms changed while blocked: once none is left, handle the frames still buffered
    /// and read again.
    async fn on_alarms_changed(&mut self) -> Result<(), Fault> {
        if !self.alarms.borrow_and_update().is_empty() {
            return Ok(());
        }
        self.blocked = false;
        self.read_idle_ticks = 0;
        tracing::debug!(connection = self.id, peer = %self.peer, "stream connection unblocked");
        self.on_read().await
    }

    /// Users, vhosts or permissions changed: a deleted user or vhost ends the connection,
    /// otherwise the grant is refreshed.
    fn on_access_changed(&mut self) -> Result<(), Fault> {
        let Some(vhost) = self.vhost.clone() else {
            return Ok(());
        };
        let grant = common::current_grant(&self.shared.broker, &self.user, &vhost)
            .map_err(Fault::forced)?;
        self.grant = Some(grant);
        Ok(())
    }

    /// Every half heartbeat interval: a client silent for two intervals is gone; an idle
    /// half interval on our side gets a heartbeat.
    fn on_tick(&mut self, heartbeat: Duration) -> Result<(), Fault> {
        if !self.blocked {
            self.read_idle_ticks += 1;
        }
        if self.read_idle_ticks > 4 {
            tracing::warn!(
                connection = self.id, peer = %self.peer, timeout_s = heartbeat.as_secs(),
                "missed heartbeats from stream client, closing"
            );
            return Err(Fault::Gone("missed heartbeats".into()));
        }
        if !std::mem::take(&mut self.wrote_since_tick) && self.out.is_empty() {
            self.out.shrink();
            self.send(&Command::Connection(ConnectionCommand::Heartbeat));
        }
        Ok(())
    }

    /// Writes the publish outcomes the streams reported since the last turn.
    fn write_outcomes(&mut self) {
        let mut outcomes = std::mem::take(&mut self.outcomes);
        self.confirms.take_all(&mut outcomes);
        for outcome in outcomes.drain(..) {
            self.write_outcome(outcome);
        }
        self.outcomes = outcomes;
    }

    /// Handles the first event and whatever else the mailbox holds, up to a turn's budget.
    fn on_events(&mut self, first: Event) {
        self.on_event(first);
        for _ in 1..DELIVER_TURN_MAX {
            match self.events_rx.try_recv() {
                Ok(event) => self.on_event(event),
                Err(_) => break,
            }
        }
    }

    /// Lists the connection in the broker's registry (management API) once it is open.
    fn register(&mut self) {
        let details = ConnectionDetails {
            id: self.id,
            protocol: "stream",
            peer: self.peer,
            local: self.local,
            user: self.user.clone(),
            vhost: self
                .vhost
                .as_ref()
                .map_or_else(|| Arc::from(""), |v| v.name().clone()),
            client_properties: peer_properties_table(&self.client_properties),
            channel_max: 0,
            frame_max: self.frame_max,
            heartbeat: u16::try_from(self.heartbeat).unwrap_or(u16::MAX),
            auth_mechanism: self.auth_mechanism,
            tls: None,
            connected_at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        };
        self.registration = Some(self.shared.broker.registry().register(details));
    }

    /// The registry's entry of this connection, to list its publishers and subscriptions.
    pub(super) fn registry_entry(&self) -> Option<&Arc<ConnectionEntry>> {
        self.registration.as_ref().map(Registration::entry)
    }

    /// After the server's Close: reads and drops frames until the client's Close response
    /// (or its own Close) arrives or the socket ends.
    async fn discard_until_close_response(&mut self) {
        loop {
            loop {
                match decode_frame(self.rbuf.bytes(), 0) {
                    Ok(Some(frame)) if frame.key == key::CLOSE => return,
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
            if self.rbuf.read_more().await.is_err() {
                return;
            }
        }
    }

    /// The client closed the connection: answer, and end once it closes the socket.
    pub(super) async fn on_client_close(&mut self, correlation_id: u32) -> Fault {
        Box::pin(self.teardown()).await;
        self.respond(key::CLOSE, correlation_id, response_code::OK);
        let _ = self.flush().await;
        self.closed_by_client = true;
        Fault::Gone("closed by client".into())
    }
}

/// The client's peer properties as an AMQP 0.9.1 field table body of long strings: the form
/// the registry keeps client properties in, for the management API to show.
fn peer_properties_table(properties: &[(String, String)]) -> Bytes {
    use warren_proto::amqp091::{FieldTable, FieldValue};
    let mut table = FieldTable::default();
    for (key, value) in properties {
        table.insert(
            key.as_str(),
            FieldValue::LongStr(Bytes::from(value.clone())),
        );
    }
    let mut encoded = bytes::BytesMut::with_capacity(table.encoded_len());
    table.encode(&mut encoded);
    // The registry keeps the body without the table's u32 length prefix.
    encoded.freeze().slice(4..)
}

/// Resolves when the management API asks the connection to close (never without a
/// registration).
async fn close_requested(entry: Option<&warren_core::registry::ConnectionEntry>) -> String {
    match entry {
        Some(entry) => entry.close_requested().await,
        None => std::future::pending().await,
    }
}
