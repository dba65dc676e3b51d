//! The read side both protocols' connections share: the socket's read half and the buffer
//! frames are decoded from, sized to the connection's pace.
//!
//! The room reserved before each read starts small, so that idle connections stay small,
//! doubles while reads fill it (a busy publisher then gets many frames per syscall) and halves
//! when they do not. Messages are slices of the buffer they were read into and keep all of it
//! alive, so a quiet connection reads into what is left of its buffer while enough is, and
//! gives its buffer back once everything in it is decoded (see `give_back`).

use std::io;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;

use crate::socket::SocketReader;

/// Read room reserved during the handshake, and the least reserved in the main loop.
const READ_CHUNK_MIN_BYTES: usize = 4 * 1024;
const READ_CHUNK_MAX_BYTES: usize = 256 * 1024;
/// A read goes into what is left of the current buffer while at least this much is: a new
/// buffer is taken only when it is nearly full. Messages are slices of the buffer they were
/// read into and keep all of it alive, so a buffer per small read would make each queued
/// message of a slow publisher cost a whole chunk.
const READ_SPACE_MIN_BYTES: usize = 1024;
/// How often a blocked connection checks whether its client is still there.
const BLOCKED_PEER_CHECK: Duration = Duration::from_secs(1);

/// A connection's socket input (see the module doc).
pub struct ReadBuffer {
    reader: SocketReader,
    buf: BytesMut,
    /// Room reserved before the next read, between the chunk bounds.
    chunk: usize,
}

impl ReadBuffer {
    /// `start`: what the listener read to tell the protocols apart, decoded first.
    pub fn new(reader: SocketReader, start: BytesMut) -> ReadBuffer {
        ReadBuffer {
            reader,
            buf: start,
            chunk: READ_CHUNK_MIN_BYTES,
        }
    }

    /// The bytes read and not yet decoded; decoding splits frames off its front.
    pub fn bytes(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Reads more bytes during the handshake, or while closing; the peer closing the
    /// socket is an error (`UnexpectedEof`).
    pub async fn read_more(&mut self) -> io::Result<()> {
        self.buf.reserve(READ_CHUNK_MIN_BYTES);
        match self.reader.read_buf(&mut self.buf).await? {
            0 => Err(peer_closed()),
            _ => Ok(()),
        }
    }

    /// The main loop's read: waits for the socket and reads what it has, at least the room
    /// the connection's pace asks for; returns the bytes read. A buffer that was given back is
    /// reserved again only once the socket is readable, so that a connection waiting for its
    /// client holds none. The peer closing the socket is an error (`UnexpectedEof`).
    ///
    /// A `blocked` connection (a publisher during a resource alarm) reads nothing: this waits
    /// until its client is gone. Not reading, it would otherwise notice neither a close nor a
    /// reset (without heartbeats, never) and keep the client's partial messages forever.
    /// Cancel-safe: a read that did not complete took nothing from the socket.
    pub async fn read(&mut self, blocked: bool) -> io::Result<usize> {
        if blocked {
            self.peer_gone().await;
            return Err(peer_closed());
        }
        if self.buf.capacity() == 0 {
            self.reader.readable().await?;
        }
        // A quiet connection reads into what is left of its buffer while enough is; a busy one
        // always has a whole chunk of room (see `give_back`).
        let room = self.buf.capacity() - self.buf.len();
        if self.chunk > READ_CHUNK_MIN_BYTES || room < READ_SPACE_MIN_BYTES {
            self.buf.reserve(self.chunk);
        }
        let space = self.buf.capacity() - self.buf.len();
        let read = self.reader.read_buf(&mut self.buf).await?;
        if read == 0 {
            return Err(peer_closed());
        }
        self.adapt_chunk(read, space);
        Ok(read)
    }

    /// Doubles the room for reads that filled it, halves it for reads that used under a
    /// quarter of it.
    fn adapt_chunk(&mut self, read: usize, space: usize) {
        debug_assert!(read <= space, "invariant: a read fits the room it had");
        if read == space {
            self.chunk = (self.chunk * 2).min(READ_CHUNK_MAX_BYTES);
        } else if read < space / 4 {
            self.chunk = (self.chunk / 2).max(READ_CHUNK_MIN_BYTES);
        }
        debug_assert!((READ_CHUNK_MIN_BYTES..=READ_CHUNK_MAX_BYTES).contains(&self.chunk));
    }

    /// Drops the buffer once everything in it is decoded, for a connection that reads little
    /// (its reserve is at the minimum: an idle one holds no buffer while it waits), or after a
    /// burst. A busy connection keeps its buffer, whose reserve doubles while reads fill it, so
    /// that a publisher gets many frames per syscall.
    ///
    /// A quiet publisher's buffer is kept while messages still slice it and it has room: the
    /// memory stays taken by them anyway, and its next messages go into the same block instead
    /// of a new one each (`read`).
    pub fn give_back(&mut self) {
        if !self.buf.is_empty() {
            return;
        }
        let quiet = self.chunk == READ_CHUNK_MIN_BYTES;
        if quiet {
            let room = self.buf.capacity() >= READ_SPACE_MIN_BYTES;
            // Asking for more than the room left succeeds (at no cost) only when nothing else
            // holds the allocation: the frames read into it were all dropped.
            let shared = !self.buf.try_reclaim(self.buf.capacity() + 1);
            if !(shared && room) {
                self.buf = BytesMut::new();
            }
        } else if self.buf.capacity() > self.chunk * 2 {
            self.buf = BytesMut::new();
        }
    }

    /// Resolves once the peer has closed or reset the socket, checked every
    /// `BLOCKED_PEER_CHECK` (the socket is not read meanwhile, so its readiness alone cannot
    /// wake the connection: unread bytes keep it readable).
    async fn peer_gone(&self) {
        loop {
            tokio::time::sleep(BLOCKED_PEER_CHECK).await;
            if self.reader.is_peer_gone() {
                return;
            }
        }
    }

    /// Reads and drops whatever comes until the peer closes the socket (after a close the
    /// client started: as RabbitMQ, it is the client that closes the socket).
    pub async fn discard_until_eof(&mut self) {
        let mut scratch = [0u8; 64];
        while matches!(self.reader.read(&mut scratch).await, Ok(n) if n > 0) {}
    }
}

fn peer_closed() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed the socket")
}
