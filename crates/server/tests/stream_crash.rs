//! Crash safety of streams with `stream.fsync = true`, from outside: the `warren` binary runs
//! as a child process, a raw stream protocol client publishes numbered messages and records
//! which publishing ids were confirmed, the test kills the broker with SIGKILL mid-load,
//! restarts it on the same data dir and reads the stream from the first offset: every
//! confirmed message must be there, in order, and the log must read to its end.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_proto::stream::{
    decode_command, decode_frame, AdminCommand, Command, ConnectionCommand, OffsetSpec,
    PublishCommand, PublishedMessage, SubscribeCommand,
};

const STEP: Duration = Duration::from_secs(3);

/// A `warren server` child with a stream listener; killed (SIGKILL) when dropped.
struct Broker {
    child: Child,
    port: u16,
}

impl Broker {
    async fn start(data_dir: &Path) -> Broker {
        let (amqp, port) = (free_port(), free_port());
        let config = data_dir.join("warren.conf");
        std::fs::write(&config, "stream.fsync = true\n").unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_warren"))
            .args(["server", "--bind-address", "127.0.0.1", "--no-management"])
            .args(["--no-prometheus", "--amqp-port", &amqp.to_string()])
            .args(["--stream-port", &port.to_string(), "--config"])
            .arg(&config)
            .arg("--data-dir")
            .arg(data_dir.join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the warren binary");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "warren did not listen"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Broker { child, port }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A raw, opened stream protocol connection.
struct Raw {
    socket: TcpStream,
    buf: BytesMut,
}

impl Raw {
    async fn open(port: u16) -> Raw {
        use ConnectionCommand as C;
        let socket = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut raw = Raw {
            socket,
            buf: BytesMut::new(),
        };
        raw.send(&Command::Connection(C::PeerPropertiesRequest {
            correlation_id: 1,
            properties: Vec::new(),
        }))
        .await;
        raw.send(&Command::Connection(C::SaslAuthenticateRequest {
            correlation_id: 2,
            mechanism: "PLAIN".into(),
            data: Some(Bytes::from_static(b"\0guest\0guest")),
        }))
        .await;
        raw.send(&Command::Connection(C::Tune {
            response: true,
            frame_max: 1_048_576,
            heartbeat: 0,
        }))
        .await;
        raw.send(&Command::Connection(C::OpenRequest {
            correlation_id: 3,
            virtual_host: "/".into(),
        }))
        .await;
        loop {
            if let Some(Command::Connection(C::OpenResponse { code, .. })) = raw.next().await {
                assert_eq!(code, 1, "open");
                return raw;
            }
        }
    }

    async fn send(&mut self, command: &Command) {
        let mut out = BytesMut::new();
        command.encode(&mut out).unwrap();
        self.socket.write_all(&out).await.unwrap();
    }

    /// The next command; `None` when the socket ends or nothing comes within `STEP`.
    async fn next(&mut self) -> Option<Command> {
        loop {
            if let Some(frame) = decode_frame(&mut self.buf, 0).unwrap() {
                return Some(decode_command(&frame).unwrap());
            }
            let read = tokio::time::timeout(STEP, self.socket.read_buf(&mut self.buf)).await;
            if !matches!(read, Ok(Ok(1..))) {
                return None;
            }
        }
    }
}

/// Publishes numbered messages in batches until the socket breaks (the broker was killed)
/// or `limit` are sent; returns the confirmed publishing ids.
async fn publish_until_killed(mut raw: Raw, limit: u64) -> Vec<u64> {
    let mut confirmed = Vec::new();
    let mut next_id = 0;
    while next_id < limit {
        let messages = (next_id..next_id + 100)
            .map(|id| PublishedMessage {
                publishing_id: id,
                filter_value: None,
                message: Bytes::from(format!("m{id:08}")),
                sub_batch: None,
            })
            .collect();
        next_id += 100;
        let publish = Command::Publish(PublishCommand::Publish {
            publisher_id: 1,
            filtered: false,
            messages,
        });
        let mut out = BytesMut::new();
        publish.encode(&mut out).unwrap();
        if raw.socket.write_all(&out).await.is_err() {
            break;
        }
        // Take whatever confirms are already there without waiting for them.
        while let Ok(Some(command)) = tokio::time::timeout(Duration::ZERO, raw.next()).await {
            if let Command::Publish(PublishCommand::PublishConfirm { publishing_ids, .. }) = command
            {
                confirmed.extend(publishing_ids);
            }
        }
    }
    confirmed
}

/// Reads every record of `stream` from the first offset; returns the record count.
async fn read_all(raw: &mut Raw, stream: &str) -> u64 {
    raw.send(&Command::Subscribe(SubscribeCommand::Subscribe {
        correlation_id: 9,
        subscription_id: 1,
        stream: stream.into(),
        offset: OffsetSpec::First,
        credit: u16::MAX,
        properties: Vec::new(),
    }))
    .await;
    let mut records = 0u64;
    let mut expected_offset = 0u64;
    while let Some(command) = raw.next().await {
        if let Command::Subscribe(SubscribeCommand::Deliver { chunk, .. }) = command {
            // osiris header: num_records at byte 4, the chunk's first offset at byte 24.
            let count = u32::from_be_bytes(chunk[4..8].try_into().unwrap());
            let first = u64::from_be_bytes(chunk[24..32].try_into().unwrap());
            assert_eq!(first, expected_offset, "chunks follow each other");
            expected_offset += u64::from(count);
            records += u64::from(count);
        }
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_stream_messages_survive_kill_9_with_fsync() {
    let dir = tempfile::Builder::new()
        .prefix("warren-stream-crash-")
        .tempdir()
        .unwrap();
    let stream = "crash-stream";
    let mut broker = Broker::start(dir.path()).await;
    let mut raw = Raw::open(broker.port).await;
    raw.send(&Command::Admin(AdminCommand::Create {
        correlation_id: 4,
        stream: stream.into(),
        arguments: Vec::new(),
    }))
    .await;
    raw.send(&Command::Publish(PublishCommand::DeclarePublisher {
        correlation_id: 5,
        publisher_id: 1,
        reference: Some("crash".into()),
        stream: stream.into(),
    }))
    .await;
    let load = tokio::spawn(publish_until_killed(raw, 2_000_000));
    tokio::time::sleep(Duration::from_millis(700)).await;
    broker.child.kill().unwrap();
    broker.child.wait().unwrap();
    let confirmed = tokio::time::timeout(Duration::from_secs(30), load)
        .await
        .expect("the publisher ends once the broker is gone")
        .unwrap();
    let highest = confirmed.iter().max().copied();
    assert!(
        highest.is_some(),
        "some messages were confirmed before the kill"
    );
    drop(broker);
    let broker = Broker::start(dir.path()).await;
    let mut raw = Raw::open(broker.port).await;
    let recovered = read_all(&mut raw, stream).await;
    // Publishing ids 0, 1, ... went in order: every confirmed id n needs n + 1 records.
    let needed = highest.unwrap() + 1;
    eprintln!(
        "confirmed {} (highest id {}), recovered {recovered} records",
        confirmed.len(),
        needed - 1
    );
    assert!(
        recovered >= needed,
        "confirmed up to publishing id {} but only {recovered} records after kill -9",
        needed - 1
    );
}
