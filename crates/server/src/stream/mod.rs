//! The RabbitMQ stream protocol on port 5552: its listeners and one connection per client.
//!
//! A connection is one task (`connection.rs`) that reads frames in batches, answers the
//! connection, publishing and administration commands itself, hands publishes to the
//! stream's writer (`publish.rs`) and writes confirms, deliveries and responses with one
//! flush per turn. Each subscription is a task of its own (`subscription.rs`): it reads
//! committed chunks from the stream's log (one pread each), spends one credit per chunk and
//! hands the chunk to the connection through a bounded mailbox, which writes the Deliver
//! header and the chunk's bytes as they lie on disk (one vectored write, no per-message
//! work). A subscription that is caught up waits for the stream to grow.
//!
//! Handshake as RabbitMQ 4.x: PeerProperties, SaslHandshake, SaslAuthenticate (PLAIN, and
//! ANONYMOUS from loopback as for AMQP 1.0), the server's Tune and the client's answer, Open
//! (the vhost). Super-stream, single-active-consumer and filtering commands are refused with
//! the spec's codes (see `connection.rs`).

mod admin;
mod connection;
mod fault;
mod handshake;
mod publish;
mod subscription;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;

use crate::connection::Shared;
use crate::socket::{Client, Socket};
use crate::AmqpListener;

/// Binds every stream listener the configuration names.
pub(crate) fn bind(config: &crate::Config) -> anyhow::Result<Vec<AmqpListener>> {
    let addrs = config.stream_addrs().map_err(anyhow::Error::msg)?;
    let mut listeners = Vec::with_capacity(addrs.len());
    for bind in addrs {
        let socket = warren_mgmt::listen::bind_tcp(bind).with_context(|| {
            format!(
                "cannot listen for the stream protocol on {bind}: is another broker running? \
                 (change stream.listeners.tcp.default, or --stream-port 0 to turn it off)"
            )
        })?;
        crate::limit_segment_size(&socket);
        let addr = socket.local_addr()?;
        tracing::info!(%addr, "stream protocol listener ready, listening on {addr}");
        listeners.push(AmqpListener {
            socket,
            addr,
            tls: None,
            stream: true,
        });
    }
    Ok(listeners)
}

/// Serves one accepted stream protocol socket until it closes.
pub(crate) async fn serve(
    socket: Socket,
    peer: SocketAddr,
    local: SocketAddr,
    shared: Arc<Shared>,
) {
    let tls = socket.tls_session();
    let (reader, writer) = socket.split();
    let client = Client {
        reader,
        writer,
        peer,
        local,
        tls,
        start: bytes::BytesMut::new(),
        deadline: tokio::time::Instant::now() + crate::HANDSHAKE_TIMEOUT,
    };
    connection::serve(client, shared).await;
}
