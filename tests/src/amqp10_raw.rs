//! Handcrafted AMQP 1.0 bytes, for what client libraries never send: malformed frames,
//! transfers past credit, handles no link holds.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// A frame of `frame_type` (0 AMQP, 1 SASL) on channel 0.
pub fn frame(frame_type: u8, body: &[u8]) -> Vec<u8> {
    frame_on(frame_type, 0, body)
}

/// A frame of `frame_type` on `channel`.
pub fn frame_on(frame_type: u8, channel: u16, body: &[u8]) -> Vec<u8> {
    let mut out = (8 + body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&[2, frame_type]);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A described list with a small ulong descriptor and already-encoded fields.
pub fn composite(code: u8, fields: &[&[u8]]) -> Vec<u8> {
    let body: Vec<u8> = fields.concat();
    let mut out = vec![
        0x00,
        0x53,
        code,
        0xc0,
        (body.len() + 1) as u8,
        fields.len() as u8,
    ];
    out.extend_from_slice(&body);
    out
}

/// A `uint` in its four-byte form.
pub fn uint(value: u32) -> Vec<u8> {
    let mut out = vec![0x70];
    out.extend_from_slice(&value.to_be_bytes());
    out
}

/// A `str8` string.
pub fn str8(text: &str) -> Vec<u8> {
    let mut out = vec![0xa1, text.len() as u8];
    out.extend_from_slice(text.as_bytes());
    out
}

/// SASL PLAIN as guest, then open: everything a raw client sends before its first session.
pub fn handshake_bytes() -> Vec<u8> {
    handshake_bytes_with(&[b"\xa1\x03raw"])
}

/// The handshake with these open fields (container-id first).
pub fn handshake_bytes_with(open_fields: &[&[u8]]) -> Vec<u8> {
    let mut out = b"AMQP\x03\x01\x00\x00".to_vec();
    let mut response = vec![0xa0, 12];
    response.extend_from_slice(b"\0guest\0guest");
    out.extend(frame(1, &composite(0x41, &[b"\xa3\x05PLAIN", &response])));
    out.extend_from_slice(b"AMQP\x00\x01\x00\x00");
    out.extend(frame(0, &composite(0x10, open_fields)));
    out
}

/// Reads until `needle` was seen, the socket closed or `limit` passed; returns what came.
pub async fn read_until(socket: &mut TcpStream, needle: &[u8], limit: Duration) -> Vec<u8> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    let mut chunk = [0u8; 4096];
    while !contains(&seen, needle) {
        let read = tokio::time::timeout_at(deadline, socket.read(&mut chunk)).await;
        match read {
            Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    seen
}

/// Whether `needle` occurs in `seen`.
pub fn contains(seen: &[u8], needle: &[u8]) -> bool {
    seen.windows(needle.len()).any(|w| w == needle)
}
