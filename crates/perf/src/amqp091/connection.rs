//! `Connection`: one AMQP 0.9.1 client connection over TCP, on Warren's own codec. It does the
//! handshake (PLAIN), synchronous calls for setup (channel.open, declares, qos), heartbeats, and
//! owns the two large buffers that the publisher and consumer fast paths work in.
//!
//! Setup calls wait at most `STEP_TIMEOUT` for each answer, so a silent broker fails the run
//! with a message instead of hanging it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;
use warren_proto::amqp091::{
    self as wire, decode_frame, encode_heartbeat, encode_method_frame, ConnectionClose,
    ConnectionOpen, ConnectionStartOk, ConnectionTuneOk, FieldTable, FieldValue, Frame, Method,
    ShortStr, PROTOCOL_HEADER,
};

use crate::error::PerfError;
use crate::uri::Endpoint;

/// Longest wait for any single setup step (TCP connect, each handshake frame, each call).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// Read buffer of a producer or consumer: deliveries are decoded from reads of up to this many
/// bytes.
pub const READ_BUFFER_BYTES: usize = 512 * 1024;
/// Write buffer of a producer or consumer (publishes are flushed before it grows past this).
pub const WRITE_BUFFER_BYTES: usize = 256 * 1024;
/// The socket's send buffer (the kernel doubles it). Autotuning would let it grow to megabytes:
/// an unthrottled producer would then count as sent a hundred thousand messages that sit in
/// its own kernel buffer, which a broker pushing back has not read.
const SEND_BUFFER_BYTES: u32 = 128 * 1024;
/// Buffers during the handshake and setup calls.
const SETUP_BUFFER_BYTES: usize = 16 * 1024;
/// Buffers of an idle connection (`--connections` may hold tens of thousands).
const IDLE_BUFFER_BYTES: usize = 512;
/// frame_max asked for when the broker proposes no limit.
const FRAME_MAX_DEFAULT: u32 = 131_072;

/// An open AMQP 0.9.1 connection.
pub struct Connection {
    pub(crate) socket: TcpStream,
    pub(crate) read_buf: BytesMut,
    pub(crate) write_buf: BytesMut,
    pub(crate) frame_max: u32,
    /// What a read reserves when the read buffer runs out of room.
    read_reserve_bytes: usize,
    /// Negotiated heartbeat interval; zero when disabled.
    heartbeat: Duration,
    last_write: Instant,
    /// `host:port`, for messages.
    pub(crate) address: String,
}

impl Connection {
    /// Connects (from `source` when given) and handshakes: PLAIN login, tune (heartbeat as
    /// asked, frame_max as the broker proposes), then opens the endpoint's vhost.
    pub async fn open(
        endpoint: &Endpoint,
        heartbeat_s: u16,
        source: Option<IpAddr>,
    ) -> Result<Connection, PerfError> {
        let address = endpoint.address();
        let socket = connect(&address, source).await?;
        let mut connection = Connection {
            socket,
            read_buf: BytesMut::with_capacity(SETUP_BUFFER_BYTES),
            write_buf: BytesMut::with_capacity(SETUP_BUFFER_BYTES),
            frame_max: wire::FRAME_MIN_SIZE,
            read_reserve_bytes: SETUP_BUFFER_BYTES,
            heartbeat: Duration::ZERO,
            last_write: Instant::now(),
            address,
        };
        connection.handshake(endpoint, heartbeat_s).await?;
        Ok(connection)
    }

    async fn handshake(&mut self, endpoint: &Endpoint, heartbeat_s: u16) -> Result<(), PerfError> {
        self.write_buf.extend_from_slice(&PROTOCOL_HEADER);
        self.flush_all().await?;
        let start = match self.next_method(0, "the handshake").await? {
            Method::ConnectionStart(start) => start,
            other => return Err(self.unexpected("connection.start", &other)),
        };
        if !String::from_utf8_lossy(&start.mechanisms)
            .split(' ')
            .any(|m| m == "PLAIN")
        {
            return Err(PerfError::Connect(format!(
                "the broker at {} does not offer PLAIN login (it offers: {})",
                self.address,
                String::from_utf8_lossy(&start.mechanisms)
            )));
        }
        let response = format!("\0{}\0{}", endpoint.user, endpoint.password);
        self.send(
            0,
            &Method::ConnectionStartOk(ConnectionStartOk {
                client_properties: client_properties(),
                mechanism: ShortStr::from_static("PLAIN"),
                response: Bytes::from(response),
                locale: ShortStr::from_static("en_US"),
            }),
        );
        self.flush_all().await?;
        let tune = match self.next_method(0, "login").await {
            Ok(Method::ConnectionTune(tune)) => tune,
            Ok(other) => return Err(self.unexpected("connection.tune", &other)),
            Err(error) => return Err(self.login_error(endpoint, error)),
        };
        self.tune(endpoint, &tune, heartbeat_s);
        self.send(
            0,
            &Method::ConnectionOpen(ConnectionOpen {
                virtual_host: ShortStr::from(endpoint.vhost.as_str()),
                ..Default::default()
            }),
        );
        self.flush_all().await?;
        match self
            .next_method(0, &format!("opening vhost '{}'", endpoint.vhost))
            .await?
        {
            Method::ConnectionOpenOk(_) => Ok(()),
            other => Err(self.unexpected("connection.open-ok", &other)),
        }
    }

    /// Answers connection.tune: frame_max and channel_max as the broker proposes (or lower if
    /// the URI asks), heartbeat as the Java client (so PerfTest) negotiates it.
    fn tune(&mut self, endpoint: &Endpoint, tune: &wire::ConnectionTune, heartbeat_s: u16) {
        let proposed_frame_max = if tune.frame_max == 0 {
            FRAME_MAX_DEFAULT
        } else {
            tune.frame_max
        };
        let frame_max = endpoint
            .frame_max
            .map_or(proposed_frame_max, |asked| asked.min(proposed_frame_max))
            .max(wire::FRAME_MIN_SIZE);
        let channel_max = match (tune.channel_max, endpoint.channel_max) {
            (0, Some(asked)) => asked,
            (proposed, Some(asked)) => proposed.min(asked),
            (proposed, None) => proposed,
        };
        let heartbeat_s = negotiated_heartbeat(heartbeat_s, tune.heartbeat);
        self.frame_max = frame_max;
        self.heartbeat = Duration::from_secs(u64::from(heartbeat_s));
        self.send(
            0,
            &Method::ConnectionTuneOk(ConnectionTuneOk {
                channel_max,
                frame_max,
                heartbeat: heartbeat_s,
            }),
        );
    }

    fn login_error(&self, endpoint: &Endpoint, error: PerfError) -> PerfError {
        match error {
            PerfError::Broker(text) | PerfError::Protocol(text) => PerfError::Connect(format!(
                "access refused for user '{}' at {}: {text}; check the user and password in the \
                 URI (RabbitMQ's guest user may only connect from localhost)",
                endpoint.user, self.address
            )),
            other => other,
        }
    }

    /// Appends a method frame to the write buffer.
    pub fn send(&mut self, channel: u16, method: &Method) {
        encode_method_frame(channel, method, &mut self.write_buf);
    }

    /// Writes the whole write buffer (setup path; the fast paths write on their own).
    pub async fn flush_all(&mut self) -> Result<(), PerfError> {
        if self.write_buf.is_empty() {
            return Ok(());
        }
        let write = self.socket.write_all(&self.write_buf);
        match tokio::time::timeout(STEP_TIMEOUT, write).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(self.io_error(&error)),
            Err(_) => return Err(self.stalled("writing")),
        }
        self.write_buf.clear();
        self.last_write = Instant::now();
        Ok(())
    }

    /// Sends `method` on `channel` and waits for the answer on that channel; `what` says what
    /// the call does, for error texts ("declaring queue 'orders'").
    pub async fn call(
        &mut self,
        channel: u16,
        method: &Method,
        what: &str,
    ) -> Result<Method, PerfError> {
        self.send(channel, method);
        self.flush_all().await?;
        self.next_method(channel, what).await
    }

    /// The next method frame on `channel`, skipping heartbeats. A close from the broker becomes
    /// an error naming `what` was being done.
    async fn next_method(&mut self, channel: u16, what: &str) -> Result<Method, PerfError> {
        loop {
            let frame = self.next_frame().await.map_err(|error| match error {
                PerfError::Connect(text) => PerfError::Connect(format!("{what}: {text}")),
                other => other,
            })?;
            match frame {
                Frame::Heartbeat { .. } => continue,
                Frame::Method {
                    method: Method::ConnectionClose(close),
                    ..
                } => {
                    self.send(0, &Method::ConnectionCloseOk(wire::ConnectionCloseOk));
                    let _ = self.flush_all().await;
                    let target = "the connection";
                    return Err(closed_error(
                        what,
                        target,
                        close.reply_code,
                        &close.reply_text,
                    ));
                }
                Frame::Method {
                    channel: c,
                    method: Method::ChannelClose(close),
                } => {
                    self.send(c, &Method::ChannelCloseOk(wire::ChannelCloseOk));
                    let _ = self.flush_all().await;
                    let target = format!("channel {c}");
                    return Err(closed_error(
                        what,
                        &target,
                        close.reply_code,
                        &close.reply_text,
                    ));
                }
                Frame::Method { channel: c, method } if c == channel => return Ok(method),
                other => {
                    return Err(PerfError::Protocol(format!(
                        "{what}: unexpected frame from {}: {other:?}",
                        self.address
                    )))
                }
            }
        }
    }

    /// The next frame, reading the socket as needed (setup path, bounded by `STEP_TIMEOUT`).
    pub async fn next_frame(&mut self) -> Result<Frame, PerfError> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            if let Some(frame) = self.decode_buffered()? {
                return Ok(frame);
            }
            match tokio::time::timeout_at(deadline, self.read_more()).await {
                Ok(result) => result?,
                Err(_) => return Err(self.stalled("waiting for an answer")),
            }
        }
    }

    /// Decodes one frame from the read buffer, if a whole one is there.
    pub fn decode_buffered(&mut self) -> Result<Option<Frame>, PerfError> {
        if self.read_buf.starts_with(b"AMQP") && self.read_buf.len() >= 8 {
            return Err(PerfError::Connect(format!(
                "the server at {} answered with protocol header {:?}: it does not speak \
                 AMQP 0-9-1",
                self.address,
                self.read_buf.get(..8).unwrap_or_default()
            )));
        }
        decode_frame(&mut self.read_buf, self.frame_max).map_err(|error| {
            PerfError::Protocol(format!("malformed frame from {}: {error}", self.address))
        })
    }

    /// Gives the connection the large buffers of a producer or consumer.
    pub fn use_large_buffers(&mut self) {
        self.read_reserve_bytes = READ_BUFFER_BYTES;
        self.read_buf.reserve(READ_BUFFER_BYTES);
        self.write_buf.reserve(WRITE_BUFFER_BYTES);
    }

    /// Gives back the setup buffers: an idle connection keeps a few hundred bytes.
    pub fn use_small_buffers(&mut self) {
        self.read_reserve_bytes = IDLE_BUFFER_BYTES;
        if self.read_buf.is_empty() {
            self.read_buf = BytesMut::with_capacity(IDLE_BUFFER_BYTES);
        }
        if self.write_buf.is_empty() {
            self.write_buf = BytesMut::new();
        }
    }

    /// Reads once into the read buffer, with at least an eighth of a reserve of room (many
    /// frames per read). EOF is an error.
    pub async fn read_more(&mut self) -> Result<(), PerfError> {
        let room_min = (self.read_reserve_bytes / 8).max(IDLE_BUFFER_BYTES / 2);
        if self.read_buf.capacity() - self.read_buf.len() < room_min {
            self.read_buf.reserve(self.read_reserve_bytes);
        }
        match self.socket.read_buf(&mut self.read_buf).await {
            Ok(0) => Err(PerfError::Connect(format!(
                "the broker at {} closed the connection",
                self.address
            ))),
            Ok(_) => Ok(()),
            Err(error) => Err(self.io_error(&error)),
        }
    }

    /// Reads and drops whatever arrived, without waiting (an idle connection gets heartbeats);
    /// a connection.close from the broker is an error.
    pub fn discard_ready(&mut self) -> Result<(), PerfError> {
        loop {
            if self.read_buf.capacity() - self.read_buf.len() < IDLE_BUFFER_BYTES / 2 {
                self.read_buf.reserve(IDLE_BUFFER_BYTES);
            }
            match self.socket.try_read_buf(&mut self.read_buf) {
                Ok(0) => {
                    return Err(PerfError::Connect(format!(
                        "the broker at {} closed an idle connection",
                        self.address
                    )))
                }
                Ok(_) => {
                    while let Some(frame) = self.decode_buffered()? {
                        if let Frame::Method {
                            method: Method::ConnectionClose(close),
                            ..
                        } = frame
                        {
                            let (code, text) = (close.reply_code, close.reply_text);
                            return Err(PerfError::Broker(format!(
                                "the broker at {} closed an idle connection: {code} {text}",
                                self.address
                            )));
                        }
                    }
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(error) => return Err(self.io_error(&error)),
            }
        }
    }

    /// Appends a heartbeat frame when nothing was written for half the heartbeat interval.
    pub fn heartbeat_if_due(&mut self, now: Instant) {
        if !self.heartbeat.is_zero() && now.duration_since(self.last_write) >= self.heartbeat / 2 {
            encode_heartbeat(&mut self.write_buf);
            self.last_write = now;
        }
    }

    /// Records that the fast path wrote to the socket (for heartbeats).
    pub fn wrote(&mut self, now: Instant) {
        self.last_write = now;
    }

    /// Sends connection.close and waits (bounded) for close-ok, skipping whatever else arrives.
    pub async fn close(mut self) -> Result<(), PerfError> {
        self.send(
            0,
            &Method::ConnectionClose(ConnectionClose {
                reply_code: wire::reply_code::REPLY_SUCCESS,
                reply_text: ShortStr::from_static("warren perf done"),
                class_id: 0,
                method_id: 0,
            }),
        );
        self.flush_all().await?;
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            while let Some(frame) = self.decode_buffered()? {
                if let Frame::Method {
                    method: Method::ConnectionCloseOk(_),
                    ..
                } = frame
                {
                    return Ok(());
                }
            }
            match tokio::time::timeout_at(deadline, self.read_more()).await {
                Ok(Ok(())) => {}
                // the broker may close the socket right after close-ok, or before
                Ok(Err(_)) => return Ok(()),
                Err(_) => return Err(self.stalled("closing")),
            }
        }
    }

    pub(crate) fn io_error(&self, error: &std::io::Error) -> PerfError {
        PerfError::Connect(format!(
            "the connection to {} failed: {error}",
            self.address
        ))
    }

    fn stalled(&self, doing: &str) -> PerfError {
        PerfError::Connect(format!(
            "the broker at {} did not answer within {} s while {doing}",
            self.address,
            STEP_TIMEOUT.as_secs()
        ))
    }

    fn unexpected(&self, expected: &str, got: &Method) -> PerfError {
        PerfError::Protocol(format!(
            "expected {expected} from {}, got {}",
            self.address,
            got.name()
        ))
    }
}

/// The heartbeat interval (s) to use, as the Java client's `negotiatedMaxValue` picks it: 0 on
/// either side takes the other side's value, else the smaller. PerfTest asks for 0 unless `-b`
/// says otherwise, so against a broker that proposes 60 (RabbitMQ's and Warren's default) its
/// connections run with 60 s heartbeats; this tool's do the same.
pub fn negotiated_heartbeat(asked_s: u16, proposed_s: u16) -> u16 {
    if asked_s == 0 || proposed_s == 0 {
        asked_s.max(proposed_s)
    } else {
        asked_s.min(proposed_s)
    }
}

/// TCP connect (bound to `source`, any port, when given) with a bounded wait and errors that
/// say what to check.
async fn connect(address: &str, source: Option<IpAddr>) -> Result<TcpStream, PerfError> {
    let target = resolve(address).await?;
    let socket = if target.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    };
    let socket = socket.map_err(|error| open_files_hint(address, &error))?;
    let setup = || -> std::io::Result<()> {
        socket.set_send_buffer_size(SEND_BUFFER_BYTES)?;
        // Publishes and acks are batched by the tool itself; Nagle would only add delay.
        socket.set_nodelay(true)
    };
    setup().map_err(|error| open_files_hint(address, &error))?;
    if let Some(source) = source {
        socket.bind(SocketAddr::new(source, 0)).map_err(|error| {
            PerfError::Connect(format!(
                "cannot bind a socket to source address {source} to connect to {address}: \
                     {error} (each source address has the kernel's ephemeral ports, \
                     net.ipv4.ip_local_port_range, less those in TIME_WAIT for a minute after \
                     an earlier run: wait, or give more --source-addresses)"
            ))
        })?;
    }
    match tokio::time::timeout(STEP_TIMEOUT, socket.connect(target)).await {
        Ok(Ok(socket)) => Ok(socket),
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(PerfError::Connect(format!(
                "cannot connect to {address}: connection refused: is the broker running on \
                 {address}?"
            )))
        }
        Ok(Err(error)) => Err(PerfError::Connect(format!(
            "cannot connect to {address}: {error} (check the host and port in -h/--uri; \
             too many open files means raising ulimit -n)"
        ))),
        Err(_) => Err(PerfError::Connect(format!(
            "cannot connect to {address}: no answer within {} s",
            STEP_TIMEOUT.as_secs()
        ))),
    }
}

fn open_files_hint(address: &str, error: &std::io::Error) -> PerfError {
    PerfError::Connect(format!(
        "cannot open a socket to connect to {address}: {error} (too many open files means \
         raising ulimit -n)"
    ))
}

async fn resolve(address: &str) -> Result<std::net::SocketAddr, PerfError> {
    let unresolved = |why: String| {
        PerfError::Connect(format!(
            "cannot resolve {address}: {why} (check the host in -h/--uri)"
        ))
    };
    let lookup = tokio::time::timeout(STEP_TIMEOUT, tokio::net::lookup_host(address)).await;
    match lookup {
        Ok(Ok(mut addrs)) => addrs.next().ok_or_else(|| unresolved("no address".into())),
        Ok(Err(error)) => Err(unresolved(error.to_string())),
        Err(_) => Err(unresolved(format!(
            "no answer within {} s",
            STEP_TIMEOUT.as_secs()
        ))),
    }
}

/// "declaring queue 'q': the broker closed channel 1: 404 NOT_FOUND - no queue 'q'..."
fn closed_error(what: &str, target: &str, code: u16, text: &ShortStr) -> PerfError {
    let hint = match code {
        wire::reply_code::NOT_FOUND => {
            " (with -p/--predeclared the queues and exchange must exist)"
        }
        wire::reply_code::ACCESS_REFUSED => " (check the user's permissions on the vhost)",
        wire::reply_code::NOT_ALLOWED => " (does the vhost exist, and may the user use it?)",
        wire::reply_code::PRECONDITION_FAILED => {
            " (an existing queue or exchange has other properties: delete it or match them)"
        }
        _ => "",
    };
    PerfError::Broker(format!(
        "{what}: the broker closed {target}: {code} {text}{hint}"
    ))
}

/// Properties sent in start-ok: who we are and the RabbitMQ extensions we handle.
fn client_properties() -> FieldTable {
    let mut capabilities = FieldTable::default();
    for name in [
        "publisher_confirms",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
        "per_consumer_qos",
        "exchange_exchange_bindings",
    ] {
        capabilities.insert(name, FieldValue::Bool(true));
    }
    let mut properties = FieldTable::default();
    let text = |s: &'static str| FieldValue::LongStr(Bytes::from_static(s.as_bytes()));
    properties.insert("product", text("warren perf"));
    properties.insert("version", text(env!("CARGO_PKG_VERSION")));
    properties.insert("platform", text("Rust"));
    properties.insert("capabilities", FieldValue::Table(capabilities));
    properties
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_are_negotiated_as_the_java_client_does() {
        // PerfTest's default -b 0 takes the broker's 60 s
        assert_eq!(negotiated_heartbeat(0, 60), 60);
        assert_eq!(negotiated_heartbeat(5, 60), 5);
        assert_eq!(negotiated_heartbeat(600, 60), 60);
        assert_eq!(negotiated_heartbeat(5, 0), 5);
        assert_eq!(negotiated_heartbeat(0, 0), 0);
    }
}
