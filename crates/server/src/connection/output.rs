//! The write side both protocols' writers share: small frames are encoded into one buffer, a
//! large body joins a write list as the slices it is made of (of some publisher's read
//! buffers, see `Body`), not copied, and a flush writes everything in order with as few
//! vectored writes as the socket takes.
//!
//! A flush is cancel-safe: what was written leaves the list as it goes, so a flush dropped
//! half way (see `Connection::write_now` in either protocol) is taken up by the next one.

use std::collections::VecDeque;
use std::future::Future;
use std::io::IoSlice;
use std::ops::Range;
use std::task::{Context, Waker};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use warren_core::message::Body;

use super::encode_buffer::Keeper;
use crate::socket::SocketWriter;

/// Bodies at least this large are written from their own buffers instead of being copied.
pub const ZERO_COPY_BYTES_MIN: usize = 4096;
/// Buffers handed to one `writev`.
const IOVECS_MAX: usize = 512;

/// The frames a connection has to write (see the module doc).
#[derive(Default)]
pub struct Output {
    encode: BytesMut,
    /// Sealed encoded bytes and body slices, in write order.
    queued: VecDeque<Bytes>,
    queued_bytes: usize,
    /// Whether `encode` is kept between flushes.
    keeper: Keeper,
}

impl Output {
    /// Where frames are encoded.
    pub fn encode(&mut self) -> &mut BytesMut {
        &mut self.encode
    }

    /// Appends bytes `range` of `body` from the body's own slices: what is encoded so far goes
    /// before them, what is encoded next after them.
    pub fn push_body(&mut self, body: &Body, range: Range<usize>) {
        debug_assert!(range.end <= body.len(), "invariant: a range of the body");
        self.seal();
        self.queued_bytes += range.len();
        body.for_each_slice(range, |slice| self.queued.push_back(slice));
    }

    /// Appends `bytes` as they are (a stream chunk read from its log): what is encoded so far
    /// goes before them, what is encoded next after them.
    pub fn push_bytes(&mut self, bytes: Bytes) {
        self.seal();
        self.queued_bytes += bytes.len();
        self.queued.push_back(bytes);
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

    /// Gives back the buffers of an output with nothing to write (after the handshake, or once
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
            let written = socket.write_vectored(&slices).await?;
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.written(written);
            bytes += written as u64;
            writes += 1;
        }
        debug_assert_eq!(
            self.queued_bytes, 0,
            "invariant: counts what the list holds"
        );
        // A TLS socket may hold records back until flushed (plain TCP: nothing to do).
        socket.flush().await?;
        // Zero-copy bodies count as written too, which only errs toward keeping the buffer
        // while large bodies are written.
        let written = usize::try_from(bytes).unwrap_or(usize::MAX);
        self.keeper.after_flush(&mut self.encode, written);
        Ok((bytes, writes))
    }

    /// `written` bytes of the list's head went out: they leave the list.
    fn written(&mut self, written: usize) {
        debug_assert!(written <= self.queued_bytes, "invariant: written <= queued");
        self.queued_bytes -= written;
        let mut left = written;
        while left > 0 {
            let front = self
                .queued
                .front_mut()
                .expect("invariant: written <= queued");
            if front.len() <= left {
                left -= front.len();
                self.queued.pop_front();
            } else {
                front.advance(left);
                left = 0;
            }
        }
    }

    /// The encode buffer's capacity (tests of when it is kept).
    #[cfg(test)]
    pub fn encode_capacity(&self) -> usize {
        self.encode.capacity()
    }
}

/// Runs `flush` as far as it goes without waiting (a connection's `write_now`): what the
/// socket takes now is written, the rest goes with the turn's own flush, which also meets
/// any error again.
pub fn write_without_waiting<F: Future>(flush: F) {
    let flush = std::pin::pin!(flush);
    let _ = flush.poll(&mut Context::from_waker(Waker::noop()));
}
