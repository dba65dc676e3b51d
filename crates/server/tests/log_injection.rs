//! A client-chosen name with control characters cannot forge a log line: the `warren` binary
//! logs a failed login whose user name carries `\n` and `\r`, and its output keeps one line
//! for it, with the characters escaped.

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const FORGED: &str = "FORGED-LINE level=INFO";

/// One AMQP 0.9.1 frame on channel 0.
fn method_frame(payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![1, 0, 0];
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(payload);
    frame.push(0xce);
    frame
}

/// connection.start-ok with PLAIN for `user` / `password`.
fn start_ok(user: &str, password: &str) -> Vec<u8> {
    let mut payload = vec![0, 10, 0, 11];
    payload.extend_from_slice(&0u32.to_be_bytes()); // empty client-properties
    payload.push(5);
    payload.extend_from_slice(b"PLAIN");
    let response = format!("\0{user}\0{password}");
    payload.extend_from_slice(&(response.len() as u32).to_be_bytes());
    payload.extend_from_slice(response.as_bytes());
    payload.push(5);
    payload.extend_from_slice(b"en_US");
    method_frame(&payload)
}

async fn connect(port: u16) -> TcpStream {
    let started = Instant::now();
    loop {
        if let Ok(socket) = TcpStream::connect(("127.0.0.1", port)).await {
            return socket;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the broker never listened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_user_name_with_newlines_cannot_forge_a_log_line() {
    let data_dir = tempfile::tempdir().expect("a data dir");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args([
            "server",
            "--bind-address",
            "127.0.0.1",
            "--no-management",
            "--no-prometheus",
            // No stream listener: 5552 may be taken by another broker.
            "--stream-port",
            "0",
        ])
        .args(["--amqp-port", &port.to_string()])
        .arg("--data-dir")
        .arg(data_dir.path())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the warren binary");
    let mut socket = connect(port).await;
    socket.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
    let mut start = [0u8; 1024];
    let _ = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut start)).await;
    let user = format!("mallory\n{FORGED}\r\n{FORGED}");
    socket.write_all(&start_ok(&user, "wrong")).await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut rest)).await;
    // Give the log line a moment to be written, then stop the broker and read its output.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = child.kill();
    let mut output = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut output)
        .unwrap();
    let _ = child.wait();
    let failed: Vec<&str> = output.lines().filter(|l| l.contains("mallory")).collect();
    assert_eq!(failed.len(), 1, "one line names the user:\n{output}");
    assert!(
        failed[0].contains("\\x0a"),
        "the newline is escaped: {}",
        failed[0]
    );
    assert!(
        !output.lines().any(|line| line.starts_with(FORGED)),
        "a forged line made it into the log:\n{output}"
    );
}
