//! Outgoing frames of one AMQP 0.9.1 connection, written with one vectored write per flush
//! (see `connection::output`, which both protocols share).
//!
//! A large body is not copied: its slices join the write list between each frame's header and
//! end, a body frame of `frame_max` bytes taking as many slices as it spans.

use std::future::Future;

use bytes::BufMut;
use warren_proto::amqp091::{self as wire, Method, FRAME_END};

use warren_core::message::Body;

use crate::connection::output::{Output, ZERO_COPY_BYTES_MIN};
use crate::socket::SocketWriter;

/// A body frame's payload size: the caller cut it at `frame_max`, a `u32`.
fn wire_len(len: usize) -> u32 {
    u32::try_from(len).expect("invariant: body frames are cut at frame_max")
}

/// AMQP 0.9.1 frames on the shared output (see `connection::output`).
#[derive(Default)]
pub struct Writer {
    out: Output,
}

impl Writer {
    pub fn method(&mut self, channel: u16, method: &Method) {
        wire::encode_method_frame(channel, method, self.out.encode());
    }

    pub fn heartbeat(&mut self) {
        wire::encode_heartbeat(self.out.encode());
    }

    pub fn raw(&mut self, bytes: &[u8]) {
        self.out.encode().extend_from_slice(bytes);
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
        wire::encode_deliver_frame(channel, args, self.out.encode());
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
        wire::encode_content_header(channel, class_id, size, properties, self.out.encode());
        // frame_max counts the 8 bytes of frame overhead; 0 means no limit but the size field's.
        let frame_max = if frame_max == 0 { u32::MAX } else { frame_max };
        let chunk_max = usize::try_from(frame_max.saturating_sub(8).max(1)).unwrap_or(usize::MAX);
        let mut offset = 0;
        while offset < body.len() {
            let end = body.len().min(offset + chunk_max);
            if end - offset < ZERO_COPY_BYTES_MIN {
                let len = wire_len(end - offset);
                self.body_frame_head(channel, len);
                body.copy_range_to(offset..end, self.out.encode());
                self.out.encode().put_u8(FRAME_END);
            } else {
                self.body_frame_shared(channel, body, offset..end);
            }
            offset = end;
        }
    }

    fn body_frame_head(&mut self, channel: u16, len: u32) {
        let encode = self.out.encode();
        encode.put_u8(3); // frame type: body
        encode.put_u16(channel);
        encode.put_u32(len);
    }

    /// A body frame whose payload, bytes `range` of `body`, is written from the body's own
    /// slices.
    fn body_frame_shared(&mut self, channel: u16, body: &Body, range: std::ops::Range<usize>) {
        self.body_frame_head(channel, wire_len(range.len()));
        self.out.push_body(body, range);
        self.out.encode().put_u8(FRAME_END);
    }

    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// Bytes waiting to be written.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// Gives back the buffers of a writer with nothing to write (after the handshake, or once
    /// a connection has gone quiet); the next frame starts a small one.
    pub fn shrink(&mut self) {
        self.out.shrink();
    }

    /// Writes everything queued; returns the bytes written and the write calls it took.
    /// (`Output::flush` itself, not a future around it: each level of futures adds to every
    /// connection's future.)
    pub fn flush<'a>(
        &'a mut self,
        socket: &'a mut SocketWriter,
    ) -> impl Future<Output = std::io::Result<(u64, u64)>> + Send + 'a {
        self.out.flush(socket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::encode_buffer::{
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
        let large = writer.out.encode_capacity();
        writer.flush(&mut socket).await.unwrap();

        // A wave: small writes between large ones keep the buffer (the capacity is read once
        // frames are encoded: a flush advances the buffer, which lowers it until the next).
        for _ in 1..ENCODE_BUFFER_SMALL_FLUSHES_MAX {
            heartbeats(&mut writer, 100);
            let kept = writer.out.encode_capacity();
            assert!(kept > large / 2, "dropped within a wave: {kept} of {large}");
            writer.flush(&mut socket).await.unwrap();
        }
        // A large write (over a quarter of the buffer) starts the count again.
        heartbeats(&mut writer, 2 * ENCODE_BUFFER_KEEP_BYTES);
        assert!(writer.out.encode_capacity() > large / 2, "dropped");
        writer.flush(&mut socket).await.unwrap();

        // Small writes only: the buffer goes.
        for _ in 0..ENCODE_BUFFER_SMALL_FLUSHES_MAX {
            heartbeats(&mut writer, 100);
            writer.flush(&mut socket).await.unwrap();
        }
        heartbeats(&mut writer, 100);
        assert!(
            writer.out.encode_capacity() < ENCODE_BUFFER_KEEP_BYTES,
            "kept {} bytes after {ENCODE_BUFFER_SMALL_FLUSHES_MAX} small writes",
            writer.out.encode_capacity()
        );
    }
}
