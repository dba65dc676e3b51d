//! Outgoing frames of one connection, written with one vectored write per flush.
//!
//! Small frames are encoded into one buffer; a large body is not copied: its slices (of some
//! publisher's read buffers, see `Body`) join the write list between each frame's header and
//! end, a body frame of `frame_max` bytes taking as many slices as it spans.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use warren_proto::amqp091::{self as wire, Method, FRAME_END};

use warren_core::message::Body;

use crate::encode_buffer::Keeper;
use crate::socket::SocketWriter;

/// Bodies at least this large are written from their own buffer instead of being copied.
const ZERO_COPY_BYTES_MIN: usize = 4096;
/// Buffers handed to one `writev`.
const IOVECS_MAX: usize = 512;

/// A body frame's payload size: the caller cut it at `frame_max`, a `u32`.
fn wire_len(len: usize) -> u32 {
    u32::try_from(len).expect("invariant: body frames are cut at frame_max")
}

#[derive(Default)]
pub struct Writer {
    encode: BytesMut,
    queued: VecDeque<Bytes>,
    queued_bytes: usize,
    /// Whether `encode` is kept between flushes.
    keeper: Keeper,
}

impl Writer {
    pub fn method(&mut self, channel: u16, method: &Method) {
        wire::encode_method_frame(channel, method, &mut self.encode);
    }

    pub fn heartbeat(&mut self) {
        wire::encode_heartbeat(&mut self.encode);
    }

    pub fn raw(&mut self, bytes: &[u8]) {
        self.encode.extend_from_slice(bytes);
    }

    /// Writes a method with content: the method, the content header, and the body split into
    /// frames of at most `frame_max` bytes.
    pub fn content(
        &mut self,
        channel: u16,
        method: &Method,
        properties: &[u8],
        body: &Body,
        frame_max: u32,
    ) {
        self.method(channel, method);
        self.header_and_body(channel, method.class_id(), properties, body, frame_max);
    }

    /// A `basic.deliver` with its content, as `content` writes it, from borrowed fields.
    pub fn deliver(
        &mut self,
        channel: u16,
        args: &wire::DeliverArgs<'_>,
        properties: &[u8],
        body: &Body,
        frame_max: u32,
    ) {
        wire::encode_deliver_frame(channel, args, &mut self.encode);
        let class_id = wire::BasicDeliver::CLASS_ID;
        self.header_and_body(channel, class_id, properties, body, frame_max);
    }

    fn header_and_body(
        &mut self,
        channel: u16,
        class_id: u16,
        properties: &[u8],
        body: &Body,
        frame_max: u32,
    ) {
        let size = u64::try_from(body.len()).unwrap_or(u64::MAX);
        wire::encode_content_header(channel, class_id, size, properties, &mut self.encode);
        // frame_max counts the 8 bytes of frame overhead; 0 means no limit but the size field's.
        let frame_max = if frame_max == 0 { u32::MAX } else { frame_max };
        let chunk_max = usize::try_from(frame_max.saturating_sub(8).max(1)).unwrap_or(usize::MAX);
        let mut offset = 0;
        while offset < body.len() {
            let end = body.len().min(offset + chunk_max);
            if end - offset < ZERO_COPY_BYTES_MIN {
                let len = wire_len(end - offset);
                self.body_frame_head(channel, len);
                body.copy_range_to(offset..end, &mut self.encode);
                self.encode.put_u8(FRAME_END);
            } else {
                self.body_frame_shared(channel, body, offset..end);
            }
            offset = end;
        }
    }

    fn body_frame_head(&mut self, channel: u16, len: u32) {
        self.encode.put_u8(3); // frame type: body
        self.encode.put_u16(channel);
        self.encode.put_u32(len);
    }

    /// A body frame whose payload, bytes `range` of `body`, is written from the body's own
    /// slices.
    fn body_frame_shared(&mut self, channel: u16, body: &Body, range: std::ops::Range<usize>) {
        self.body_frame_head(channel, wire_len(range.len()));
        self.seal();
        self.queued_bytes += range.len();
        body.for_each_slice(range, |slice| self.queued.push_back(slice));
        self.encode.put_u8(FRAME_END);
    }

    /// Moves the encode buffer to the write list.
    fn seal(&mut self) {
        if !self.encode.is_empty() {
            let frozen = self.encode.split().freeze();
            self.queued_bytes += frozen.len();
            self.queued.push_back(frozen);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.encode.is_empty() && self.queued.is_empty()
    }

    /// Bytes waiting to be written.
    pub fn len(&self) -> usize {
        self.encode.len() + self.queued_bytes
    }

    /// Gives back the buffers of a writer with nothing to write (after the handshake, or once
    /// a connection has gone quiet); the next frame starts a small one.
    pub fn shrink(&mut self) {
        if self.is_empty() {
            self.encode = BytesMut::new();
            self.queued = VecDeque::new();
        }
    }

    /// Writes everything queued, in as few syscalls as the socket allows; returns the bytes
    /// written and the write calls it took (the connection's `send_oct` and `send_cnt`).
    pub async fn flush(&mut self, socket: &mut SocketWriter) -> std::io::Result<(u64, u64)> {
        let (mut bytes, mut writes) = (0u64, 0u64);
        if self.queued.is_empty() {
            // Small frames only: written from the encode buffer, which stays whole (no write
            // list, no shared handle: an idle connection keeps just the buffer).
            while !self.encode.is_empty() {
                let written = socket.write(&self.encode).await?;
                if written == 0 {
                    return Err(std::io::ErrorKind::WriteZero.into());
                }
                bytes += written as u64;
                writes += 1;
                self.encode.advance(written);
            }
        }
        self.seal();
        while !self.queued.is_empty() {
            let slices: Vec<IoSlice<'_>> = self
                .queued
                .iter()
                .take(IOVECS_MAX)
                .map(|b| IoSlice::new(b))
                .collect();
            let mut written = socket.write_vectored(&slices).await?;
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            bytes += written as u64;
            writes += 1;
            self.queued_bytes -= written;
            while written > 0 {
                let front = self
                    .queued
                    .front_mut()
                    .expect("invariant: written <= queued");
                if front.len() <= written {
                    written -= front.len();
                    self.queued.pop_front();
                } else {
                    front.advance(written);
                    written = 0;
                }
            }
        }
        debug_assert_eq!(self.queued_bytes, 0);
        // A TLS socket may hold records back until flushed (plain TCP: nothing to do).
        socket.flush().await?;
        // Zero-copy bodies count as written too, which only errs toward keeping the buffer
        // while large bodies are written.
        let written = usize::try_from(bytes).unwrap_or(usize::MAX);
        self.keeper.after_flush(&mut self.encode, written);
        Ok((bytes, writes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode_buffer::{
        KEEP_BYTES as ENCODE_BUFFER_KEEP_BYTES,
        SMALL_FLUSHES_MAX as ENCODE_BUFFER_SMALL_FLUSHES_MAX,
    };
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    /// A writer's socket, with a task that reads and drops everything sent to it.
    async fn socket() -> SocketWriter {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let client = TcpStream::connect(address).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        tokio::spawn(async move {
            let mut sink = vec![0u8; 64 * 1024];
            while matches!(server.read(&mut sink).await, Ok(n) if n > 0) {}
        });
        SocketWriter::Tcp(client.into_split().1)
    }

    fn heartbeats(writer: &mut Writer, bytes: usize) {
        while writer.len() < bytes {
            writer.heartbeat();
        }
    }

    #[tokio::test]
    async fn a_large_encode_buffer_outlives_small_flushes_until_they_are_the_rule() {
        let mut socket = socket().await;
        let mut writer = Writer::default();
        heartbeats(&mut writer, 4 * ENCODE_BUFFER_KEEP_BYTES);
        let large = writer.encode.capacity();
        writer.flush(&mut socket).await.unwrap();

        // A wave: small writes between large ones keep the buffer (the capacity is read once
        // frames are encoded: a flush advances the buffer, which lowers it until the next).
        for _ in 1..ENCODE_BUFFER_SMALL_FLUSHES_MAX {
            heartbeats(&mut writer, 100);
            let kept = writer.encode.capacity();
            assert!(kept > large / 2, "dropped within a wave: {kept} of {large}");
            writer.flush(&mut socket).await.unwrap();
        }
        // A large write (over a quarter of the buffer) starts the count again.
        heartbeats(&mut writer, 2 * ENCODE_BUFFER_KEEP_BYTES);
        assert!(writer.encode.capacity() > large / 2, "dropped");
        writer.flush(&mut socket).await.unwrap();

        // Small writes only: the buffer goes.
        for _ in 0..ENCODE_BUFFER_SMALL_FLUSHES_MAX {
            heartbeats(&mut writer, 100);
            writer.flush(&mut socket).await.unwrap();
        }
        heartbeats(&mut writer, 100);
        assert!(
            writer.encode.capacity() < ENCODE_BUFFER_KEEP_BYTES,
            "kept {} bytes after {ENCODE_BUFFER_SMALL_FLUSHES_MAX} small writes",
            writer.encode.capacity()
        );
    }
}
