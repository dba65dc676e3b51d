//! What the stream protocol tests share: a `rabbitmq-stream-client` environment and client
//! for a test broker's stream listener, and a raw client (Warren's codec over a plain socket)
//! for bytes no well-behaved client sends. Every wait is bounded.

#![allow(dead_code)] // each test file uses its own part

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use rabbitmq_stream_client::{Client, ClientOptions, Environment};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_proto::stream::{decode_command, decode_frame, Command, ConnectionCommand};
use warren_tests::{bounded, TestBroker};

/// The stream listener of an in-process broker (tests skip external brokers first).
pub fn stream_addr(broker: &TestBroker) -> SocketAddr {
    broker
        .stream_addr()
        .expect("the in-process test broker has a stream listener")
}

/// Client options for `user` into `vhost`.
pub fn options_as(broker: &TestBroker, user: &str, password: &str, vhost: &str) -> ClientOptions {
    let addr = stream_addr(broker);
    ClientOptions::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .user(user)
        .password(password)
        .v_host(vhost)
        .build()
}

/// A low-level client as guest into `/`.
pub async fn client(broker: &TestBroker) -> Client {
    let options = options_as(broker, "guest", "guest", "/");
    bounded!(Client::connect(options)).expect("stream client connects")
}

/// An environment as guest into `/`.
pub async fn environment(broker: &TestBroker) -> Environment {
    let addr = stream_addr(broker);
    let build = Environment::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .build();
    bounded!(build).expect("stream environment connects")
}

/// A stream protocol client that sends what the test writes and decodes what comes back.
pub struct RawStream {
    socket: TcpStream,
    buf: BytesMut,
}

impl RawStream {
    pub async fn connect(addr: SocketAddr) -> RawStream {
        let socket = bounded!(TcpStream::connect(addr)).expect("connect to the stream port");
        RawStream {
            socket,
            buf: BytesMut::new(),
        }
    }

    pub async fn send(&mut self, command: &Command) {
        let mut out = BytesMut::new();
        command.encode(&mut out).expect("encodable command");
        self.send_bytes(&out).await;
    }

    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        bounded!(self.socket.write_all(bytes)).expect("write to the broker");
    }

    /// The next command from the broker; `None` once the broker closed the socket.
    pub async fn next(&mut self, within: Duration) -> Option<Command> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(frame) = decode_frame(&mut self.buf, 0).expect("a well-formed frame") {
                return Some(decode_command(&frame).expect("a known command"));
            }
            let read = tokio::time::timeout_at(deadline, self.socket.read_buf(&mut self.buf))
                .await
                .unwrap_or_else(|_| panic!("nothing from the broker within {within:?}"));
            if matches!(read, Ok(0) | Err(_)) {
                return None;
            }
        }
    }

    /// Waits until the broker closes the socket, skipping what it sends; the Close it sent
    /// first, if any.
    pub async fn closed(&mut self, within: Duration) -> Option<(u16, Option<String>)> {
        let mut close = None;
        while let Some(command) = self.next(within).await {
            if let Command::Connection(ConnectionCommand::CloseRequest {
                correlation_id,
                code,
                reason,
            }) = command
            {
                close = Some((code, reason));
                let ok = warren_proto::stream::SimpleResponse {
                    key: warren_proto::stream::key::CLOSE,
                    correlation_id,
                    code: 1,
                };
                let mut out = BytesMut::new();
                ok.encode(&mut out).expect("close response");
                let _ = self.socket.write_all(&out).await;
            }
        }
        close
    }

    /// PeerProperties, SaslHandshake, SaslAuthenticate (PLAIN guest), Tune (the broker's
    /// values, or `heartbeat` when given) and Open `/`; panics on any refusal.
    pub async fn open(addr: SocketAddr, heartbeat: Option<u32>) -> RawStream {
        use ConnectionCommand as C;
        let mut raw = RawStream::connect(addr).await;
        raw.send(&Command::Connection(C::PeerPropertiesRequest {
            correlation_id: 1,
            properties: vec![("product".into(), "warren-tests".into())],
        }))
        .await;
        raw.expect_ok().await;
        raw.send(&Command::Connection(C::SaslAuthenticateRequest {
            correlation_id: 2,
            mechanism: "PLAIN".into(),
            data: Some(bytes::Bytes::from_static(b"\0guest\0guest")),
        }))
        .await;
        raw.expect_ok().await;
        let Some(Command::Connection(C::Tune {
            frame_max,
            heartbeat: proposed,
            ..
        })) = raw.next(Duration::from_secs(5)).await
        else {
            panic!("expected the broker's Tune");
        };
        raw.send(&Command::Connection(C::Tune {
            response: true,
            frame_max,
            heartbeat: heartbeat.unwrap_or(proposed),
        }))
        .await;
        raw.send(&Command::Connection(C::OpenRequest {
            correlation_id: 3,
            virtual_host: "/".into(),
        }))
        .await;
        raw.expect_ok().await;
        raw
    }

    async fn expect_ok(&mut self) {
        use ConnectionCommand as C;
        let response = self.next(Duration::from_secs(5)).await;
        let code = match &response {
            Some(Command::Connection(
                C::PeerPropertiesResponse { code, .. }
                | C::SaslAuthenticateResponse { code, .. }
                | C::OpenResponse { code, .. },
            )) => *code,
            other => panic!("expected a handshake response, got {other:?}"),
        };
        assert_eq!(code, 1, "handshake step refused: {response:?}");
    }
}
