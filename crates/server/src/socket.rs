//! A client's socket, plain TCP or TLS, split into the halves a connection reads and writes.
//!
//! Plain TCP keeps tokio's owned halves (no lock, readiness without a buffer). A TLS stream
//! is shared by its halves behind a mutex: a connection's one task reads and writes in turn,
//! so the lock is never contended, and the reader can still look at the TCP socket under it
//! (`is_peer_gone`).

use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use warren_core::registry::TlsSession;

/// A client handed to the connection of the protocol its header names.
pub struct Client {
    pub reader: SocketReader,
    pub writer: SocketWriter,
    pub peer: SocketAddr,
    /// Where the client connected to (a connection's name is `peer -> local`).
    pub local: SocketAddr,
    /// The TLS session of a client of a TLS listener.
    pub tls: Option<Arc<TlsSession>>,
    /// What was read to tell the protocols apart: the start of the protocol header, to be
    /// parsed before anything else is read.
    pub start: BytesMut,
    /// When the client's handshake must be done.
    pub deadline: Instant,
}

impl Client {
    /// A plain TCP client whose protocol header is still to be read (tests use it to serve a
    /// socket with one protocol directly).
    pub fn tcp(socket: TcpStream, peer: SocketAddr) -> Client {
        let local = socket.local_addr().unwrap_or(peer);
        let (reader, writer) = Socket::Tcp(socket).split();
        Client {
            reader,
            writer,
            peer,
            local,
            tls: None,
            start: BytesMut::new(),
            deadline: Instant::now() + crate::HANDSHAKE_TIMEOUT,
        }
    }
}

/// An accepted client socket.
pub enum Socket {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Socket {
    /// The TLS session, for a socket of a TLS listener.
    pub fn tls_session(&self) -> Option<Arc<TlsSession>> {
        match self {
            Socket::Tcp(_) => None,
            Socket::Tls(stream) => Some(Arc::new(warren_mgmt::tls::session(stream.get_ref().1))),
        }
    }

    pub fn split(self) -> (SocketReader, SocketWriter) {
        match self {
            Socket::Tcp(socket) => {
                let _ = socket.set_nodelay(true);
                let (reader, writer) = socket.into_split();
                (SocketReader::Tcp(reader), SocketWriter::Tcp(writer))
            }
            Socket::Tls(stream) => {
                let _ = stream.get_ref().0.set_nodelay(true);
                let shared = Arc::new(Mutex::new(*stream));
                (SocketReader::Tls(shared.clone()), SocketWriter::Tls(shared))
            }
        }
    }
}

/// A TLS stream both halves use.
type SharedTls = Arc<Mutex<TlsStream<TcpStream>>>;

/// The half a connection reads.
pub enum SocketReader {
    Tcp(OwnedReadHalf),
    Tls(SharedTls),
}

impl SocketReader {
    /// Waits until reading may give bytes. For plain TCP this holds no buffer while the client
    /// is quiet; rustls may already hold decrypted bytes, so a TLS socket is always "readable"
    /// and the read itself waits.
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            SocketReader::Tcp(reader) => reader.readable().await,
            SocketReader::Tls(_) => Ok(()),
        }
    }

    /// Whether the peer has closed or reset the connection, seen without reading: for a
    /// connection that has stopped reading (blocked by an alarm), whose client may be gone.
    pub fn is_peer_gone(&self) -> bool {
        match self {
            SocketReader::Tcp(reader) => closed_or_reset(reader.as_ref()),
            SocketReader::Tls(stream) => closed_or_reset(stream.lock().get_ref().0),
        }
    }
}

/// The socket's readiness as epoll last reported it, without waiting: a FIN (read closed) or
/// a reset (error) shows even while unread bytes wait in the socket.
fn closed_or_reset(socket: &TcpStream) -> bool {
    let ready = std::pin::pin!(socket.ready(Interest::READABLE));
    let mut context = Context::from_waker(std::task::Waker::noop());
    match ready.poll(&mut context) {
        Poll::Ready(Ok(ready)) => ready.is_read_closed() || ready.is_error(),
        Poll::Ready(Err(_)) => true,
        Poll::Pending => false,
    }
}

impl AsyncRead for SocketReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SocketReader::Tcp(reader) => Pin::new(reader).poll_read(cx, buf),
            SocketReader::Tls(stream) => Pin::new(&mut *stream.lock()).poll_read(cx, buf),
        }
    }
}

/// The half a connection writes.
pub enum SocketWriter {
    Tcp(OwnedWriteHalf),
    Tls(SharedTls),
}

impl AsyncWrite for SocketWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            SocketWriter::Tcp(writer) => Pin::new(writer).poll_write(cx, buf),
            SocketWriter::Tls(stream) => Pin::new(&mut *stream.lock()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            SocketWriter::Tcp(writer) => Pin::new(writer).poll_write_vectored(cx, bufs),
            SocketWriter::Tls(stream) => {
                Pin::new(&mut *stream.lock()).poll_write_vectored(cx, bufs)
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            SocketWriter::Tcp(writer) => writer.is_write_vectored(),
            SocketWriter::Tls(stream) => stream.lock().is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SocketWriter::Tcp(writer) => Pin::new(writer).poll_flush(cx),
            SocketWriter::Tls(stream) => Pin::new(&mut *stream.lock()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            SocketWriter::Tcp(writer) => Pin::new(writer).poll_shutdown(cx),
            SocketWriter::Tls(stream) => Pin::new(&mut *stream.lock()).poll_shutdown(cx),
        }
    }
}
