//! A raw-socket AMQP 0.9.1 client for tests that need bytes no well-behaved client would send
//! (oversize frames, garbage headers, truncated methods) or need to see exactly what the broker
//! sends (server properties, heartbeats, connection.close codes).
//!
//! Every read is bounded by a timeout; a broker that says nothing fails the test instead of
//! hanging it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::wire::{self, method, Args, FieldValue, Frame, Reader};
use crate::STEP_TIMEOUT;

/// Why a raw read ended without a frame.
#[derive(Debug, Clone, PartialEq)]
pub enum RawError {
    /// The broker closed the socket (EOF or reset); `pending` holds unparsed trailing bytes.
    Closed { pending: Vec<u8> },
    /// Nothing complete arrived in time.
    TimedOut,
    /// The broker answered with a protocol header (it rejected ours); the 8 bytes it sent.
    ProtocolHeader(Vec<u8>),
    /// The bytes do not form a frame (bad frame-end octet and so on).
    BadFrame(String),
}

/// connection.start as received.
#[derive(Debug, Clone)]
pub struct ConnectionStart {
    pub version_major: u8,
    pub version_minor: u8,
    pub server_properties: Vec<(String, FieldValue)>,
    pub mechanisms: String,
    pub locales: String,
}

/// connection.tune as received (or the values sent in tune-ok).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tune {
    pub channel_max: u16,
    pub frame_max: u32,
    pub heartbeat: u16,
}

/// connection.close or channel.close as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    pub code: u16,
    pub text: String,
    pub class_id: u16,
    pub method_id: u16,
}

/// What the raw client asks for in tune-ok. `None` accepts the broker's proposal.
#[derive(Debug, Clone, Default)]
pub struct Handshake {
    pub channel_max: Option<u16>,
    pub frame_max: Option<u32>,
    pub heartbeat: Option<u16>,
    /// Virtual host for connection.open; `/` when `None`.
    pub vhost: Option<String>,
    /// Capabilities announced in start-ok; [`CLIENT_CAPABILITIES`] when `None`.
    pub capabilities: Option<Vec<&'static str>>,
}

/// The client capabilities a modern client (and lapin) advertises in start-ok.
pub const CLIENT_CAPABILITIES: [&str; 7] = [
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "authentication_failure_close",
    "per_consumer_qos",
];

/// Client properties with [`CLIENT_CAPABILITIES`].
pub fn client_properties() -> Vec<u8> {
    client_properties_with(&CLIENT_CAPABILITIES)
}

/// Client properties announcing the given capabilities.
pub fn client_properties_with(capabilities: &[&str]) -> Vec<u8> {
    let capabilities: Vec<u8> = capabilities
        .iter()
        .flat_map(|name| wire::table_entry_bool(name, true))
        .collect();
    let mut entries = wire::table_entry_str("product", "warren-tests raw client");
    entries.extend(wire::table_entry_table("capabilities", &capabilities));
    entries
}

/// The PLAIN SASL response for a user and password.
pub fn plain_response(user: &str, password: &str) -> Vec<u8> {
    format!("\0{user}\0{password}").into_bytes()
}

/// The AMQPLAIN SASL response: a field table without its length prefix.
pub fn amqplain_response(user: &str, password: &str) -> Vec<u8> {
    let mut entries = wire::table_entry_str("LOGIN", user);
    entries.extend(wire::table_entry_str("PASSWORD", password));
    entries
}

/// A TCP connection to the broker that speaks frames by hand.
#[derive(Debug)]
pub struct RawClient {
    socket: TcpStream,
    buffer: Vec<u8>,
}

impl RawClient {
    /// Opens the TCP connection; sends nothing.
    pub async fn connect(addr: SocketAddr) -> RawClient {
        let socket = tokio::time::timeout(STEP_TIMEOUT, TcpStream::connect(addr))
            .await
            .unwrap_or_else(|_| panic!("TCP connect to {addr} timed out"))
            .unwrap_or_else(|error| panic!("TCP connect to {addr} failed: {error}"));
        socket.set_nodelay(true).expect("set TCP_NODELAY");
        RawClient {
            socket,
            buffer: Vec::with_capacity(64 * 1024),
        }
    }

    /// Connects and handshakes with `frame_max` (which the broker must accept as is), then
    /// opens channel 1.
    pub async fn session(addr: SocketAddr, frame_max: u32) -> RawClient {
        let options = Handshake {
            frame_max: Some(frame_max),
            ..Default::default()
        };
        let (mut client, _, tune) = RawClient::handshake(addr, options).await;
        assert_eq!(tune.frame_max, frame_max);
        client.open_channel(1).await;
        client
    }

    /// Closes the socket with a reset (SO_LINGER 0), as a client that crashes or is killed
    /// mid-write leaves it.
    pub fn reset(self) {
        socket2::SockRef::from(&self.socket)
            .set_linger(Some(Duration::ZERO))
            .expect("set SO_LINGER");
        drop(self);
    }

    /// Connects, handshakes with guest/guest PLAIN, and opens the vhost. Returns the client, the
    /// broker's connection.start and the values the client sent in tune-ok.
    pub async fn handshake(
        addr: SocketAddr,
        options: Handshake,
    ) -> (RawClient, ConnectionStart, Tune) {
        let mut client = RawClient::connect(addr).await;
        client.send(wire::PROTOCOL_HEADER).await;
        let start = client.expect_start().await;
        let properties = match &options.capabilities {
            Some(capabilities) => client_properties_with(capabilities),
            None => client_properties(),
        };
        let response = plain_response("guest", "guest");
        client.start_ok_with(&properties, "PLAIN", &response).await;
        let proposed = client.expect_tune().await;
        let tune = Tune {
            channel_max: options.channel_max.unwrap_or(proposed.channel_max),
            frame_max: options.frame_max.unwrap_or(proposed.frame_max),
            heartbeat: options.heartbeat.unwrap_or(proposed.heartbeat),
        };
        client.tune_ok(tune).await;
        client.open(options.vhost.as_deref().unwrap_or("/")).await;
        client.expect_method(0, method::CONNECTION_OPEN_OK).await;
        (client, start, tune)
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        let write = self.socket.write_all(bytes);
        tokio::time::timeout(STEP_TIMEOUT, write)
            .await
            .expect("raw write timed out")
            .unwrap_or_else(|error| panic!("raw write failed: {error}"));
    }

    /// Closes the sending side (TCP FIN): the client will send nothing more.
    pub async fn finish(&mut self) {
        tokio::time::timeout(STEP_TIMEOUT, self.socket.shutdown())
            .await
            .expect("raw shutdown timed out")
            .unwrap_or_else(|error| panic!("raw shutdown failed: {error}"));
    }

    /// Like [`RawClient::send`], but a broker that already closed the socket is not an error.
    pub async fn send_lenient(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match tokio::time::timeout(STEP_TIMEOUT, self.socket.write_all(bytes)).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::other("raw write timed out")),
        }
    }

    pub async fn send_method(&mut self, channel: u16, id: (u16, u16), args: &[u8]) {
        self.send(&wire::method_frame(channel, id, args)).await;
    }

    pub async fn start_ok(&mut self, mechanism: &str, response: &[u8]) {
        self.start_ok_with(&client_properties(), mechanism, response)
            .await;
    }

    /// start-ok with the given client properties (table entries).
    pub async fn start_ok_with(&mut self, properties: &[u8], mechanism: &str, response: &[u8]) {
        let args = Args::new()
            .table(properties)
            .shortstr(mechanism)
            .longstr(response)
            .shortstr("en_US")
            .build();
        self.send_method(0, method::CONNECTION_START_OK, &args)
            .await;
    }

    pub async fn tune_ok(&mut self, tune: Tune) {
        let args = Args::new()
            .short(tune.channel_max)
            .long(tune.frame_max)
            .short(tune.heartbeat)
            .build();
        self.send_method(0, method::CONNECTION_TUNE_OK, &args).await;
    }

    pub async fn open(&mut self, vhost: &str) {
        let args = Args::new()
            .shortstr(vhost)
            .shortstr("")
            .bits(&[false])
            .build();
        self.send_method(0, method::CONNECTION_OPEN, &args).await;
    }

    pub async fn open_channel(&mut self, channel: u16) {
        let args = Args::new().shortstr("").build();
        self.send_method(channel, method::CHANNEL_OPEN, &args).await;
        self.expect_method(channel, method::CHANNEL_OPEN_OK).await;
    }

    pub async fn expect_start(&mut self) -> ConnectionStart {
        let frame = self.expect_method(0, method::CONNECTION_START).await;
        let mut args = frame.args();
        ConnectionStart {
            version_major: args.octet(),
            version_minor: args.octet(),
            server_properties: args.table(),
            mechanisms: String::from_utf8_lossy(&args.longstr()).into_owned(),
            locales: String::from_utf8_lossy(&args.longstr()).into_owned(),
        }
    }

    pub async fn expect_tune(&mut self) -> Tune {
        let frame = self.expect_method(0, method::CONNECTION_TUNE).await;
        let mut args = frame.args();
        Tune {
            channel_max: args.short(),
            frame_max: args.long(),
            heartbeat: args.short(),
        }
    }

    /// Reads one frame within the default step timeout.
    pub async fn read_frame(&mut self) -> Result<Frame, RawError> {
        self.read_frame_within(STEP_TIMEOUT).await
    }

    /// Reads one frame, waiting at most `limit`.
    pub async fn read_frame_within(&mut self, limit: Duration) -> Result<Frame, RawError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(outcome) = self.parse_buffered() {
                return outcome;
            }
            let mut chunk = [0u8; 16 * 1024];
            let read = tokio::time::timeout_at(deadline, self.socket.read(&mut chunk)).await;
            match read {
                Err(_) => return Err(RawError::TimedOut),
                Ok(Ok(0)) | Ok(Err(_)) => {
                    return Err(RawError::Closed {
                        pending: std::mem::take(&mut self.buffer),
                    })
                }
                Ok(Ok(n)) => self.buffer.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Parses one frame from the buffer: `None` when more bytes are needed.
    fn parse_buffered(&mut self) -> Option<Result<Frame, RawError>> {
        if self.buffer.len() >= 8 && self.buffer.starts_with(b"AMQP") {
            let header: Vec<u8> = self.buffer.drain(..8).collect();
            return Some(Err(RawError::ProtocolHeader(header)));
        }
        if self.buffer.len() < 7 {
            return None;
        }
        let mut head = Reader::new(&self.buffer[..7]);
        let kind = head.octet();
        let channel = head.short();
        let size = usize::try_from(head.long()).expect("invariant: u32 fits usize");
        if self.buffer.len() < size + 8 {
            return None;
        }
        if self.buffer[size + 7] != wire::FRAME_END {
            let found = self.buffer[size + 7];
            return Some(Err(RawError::BadFrame(format!(
                "frame end octet is {found:#04x}"
            ))));
        }
        let payload = self.buffer[7..7 + size].to_vec();
        self.buffer.drain(..size + 8);
        Some(Ok(Frame {
            kind,
            channel,
            payload,
        }))
    }

    /// Next non-heartbeat frame; panics when the socket closes or nothing arrives in time.
    pub async fn next_frame(&mut self) -> Frame {
        loop {
            match self.read_frame().await {
                Ok(frame) if frame.is_heartbeat() => continue,
                Ok(frame) => return frame,
                Err(error) => panic!("expected a frame from the broker, got {error:?}"),
            }
        }
    }

    /// Next frame must be the given method on the given channel. A close from the broker is
    /// decoded into the panic message, so a failing test says what the broker objected to.
    pub async fn expect_method(&mut self, channel: u16, id: (u16, u16)) -> Frame {
        let frame = self.next_frame().await;
        if frame.channel == channel && frame.method_id() == Some(id) {
            return frame;
        }
        let detail = match frame.method_id() {
            Some(method::CONNECTION_CLOSE) | Some(method::CHANNEL_CLOSE) => {
                format!("{:?}", decode_close(&frame))
            }
            _ => format!("{frame:?}"),
        };
        panic!("expected method {id:?} on channel {channel}, got {detail}");
    }

    /// Reads a content header and its body frames on `channel`; returns the body.
    pub async fn read_content(&mut self, channel: u16) -> Vec<u8> {
        let header = self.next_frame().await;
        assert_eq!(
            (header.kind, header.channel),
            (wire::FRAME_HEADER, channel),
            "{header:?}"
        );
        let mut args = Reader::new(&header.payload);
        let (_class, _weight) = (args.short(), args.short());
        let size = usize::try_from(args.longlong()).expect("invariant: test bodies fit usize");
        let mut body = Vec::with_capacity(size);
        while body.len() < size {
            let frame = self.next_frame().await;
            assert_eq!(
                (frame.kind, frame.channel),
                (wire::FRAME_BODY, channel),
                "{frame:?}"
            );
            body.extend_from_slice(&frame.payload);
        }
        assert_eq!(body.len(), size, "body frames overran the declared size");
        body
    }

    /// Reads frames (skipping anything else) until connection.close arrives on channel 0.
    pub async fn expect_connection_close(&mut self) -> Close {
        loop {
            match self.read_frame().await {
                Ok(frame)
                    if frame.channel == 0
                        && frame.method_id() == Some(method::CONNECTION_CLOSE) =>
                {
                    return decode_close(&frame)
                }
                Ok(_) => continue,
                Err(error) => panic!("expected connection.close, got {error:?}"),
            }
        }
    }

    /// Reads frames until channel.close arrives on `channel`.
    pub async fn expect_channel_close(&mut self, channel: u16) -> Close {
        loop {
            let frame = self.next_frame().await;
            match frame.method_id() {
                Some(method::CHANNEL_CLOSE) if frame.channel == channel => {
                    return decode_close(&frame)
                }
                Some(method::CONNECTION_CLOSE) => {
                    panic!(
                        "expected channel.close, got connection.close {:?}",
                        decode_close(&frame)
                    )
                }
                _ => continue,
            }
        }
    }

    /// For handshake failures, where RabbitMQ may close the socket without a connection.close
    /// (the spec only allows a close once the connection is open; failed logins are the
    /// exception when the client advertises `authentication_failure_close`). Returns the close
    /// if one arrived; panics if the socket is still open after `limit`.
    pub async fn expect_close_or_eof(&mut self, limit: Duration) -> Option<Close> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.read_frame_within(remaining).await {
                Ok(frame) if frame.method_id() == Some(method::CONNECTION_CLOSE) => {
                    let close = decode_close(&frame);
                    self.send_connection_close_ok().await;
                    return Some(close);
                }
                Ok(_) => continue,
                Err(RawError::Closed { .. }) => return None,
                Err(error) => panic!("expected the broker to close the connection: {error:?}"),
            }
        }
    }

    pub async fn send_connection_close_ok(&mut self) {
        // The broker may already have closed its side; that is fine after a close.
        let _ = self
            .send_lenient(&wire::method_frame(0, method::CONNECTION_CLOSE_OK, &[]))
            .await;
    }

    /// Reads and discards whatever arrives until the broker closes the socket. Returns how long
    /// that took, or `None` if the socket was still open after `limit`.
    pub async fn wait_for_close(&mut self, limit: Duration) -> Option<Duration> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.read_frame_within(remaining).await {
                Err(RawError::Closed { .. }) => return Some(started.elapsed()),
                Err(RawError::TimedOut) => return None,
                Err(RawError::BadFrame(_)) => self.buffer.clear(),
                Ok(_) | Err(RawError::ProtocolHeader(_)) => continue,
            }
        }
    }
}

/// Decodes connection.close or channel.close arguments.
pub fn decode_close(frame: &Frame) -> Close {
    let mut args = frame.args();
    Close {
        code: args.short(),
        text: args.shortstr(),
        class_id: args.short(),
        method_id: args.short(),
    }
}
