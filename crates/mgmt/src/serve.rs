//! The accept loop of every management listener (HTTP API, HTTPS API, Prometheus over HTTP
//! and HTTPS): HTTP/1.1 over hyper with Cowboy's limits, so that a client cannot hold a socket
//! without sending a request.
//!
//! - A connection has [`REQUEST_TIMEOUT`] to send a request's whole head, counted from the
//!   accept or from the end of the previous response: a silent socket, a half-sent request and
//!   an idle keep-alive connection are all closed then (Cowboy's `request_timeout`).
//! - Once the head is in, the body may pause for [`IDLE_TIMEOUT`] between reads (Cowboy's
//!   `idle_timeout`); the request then fails and the connection closes.
//! - At most [`CONNECTIONS_MAX`] connections per listener (Ranch's `max_connections`). At the
//!   cap the loop stops accepting: new clients wait in the kernel's backlog, holding no file
//!   descriptor of the broker, until a connection closes (Ranch does the same). Waiting rather
//!   than closing at once means a burst of legitimate clients is served late instead of
//!   refused, and idle sockets make room within [`REQUEST_TIMEOUT`].
//!
//! Shutdown: the listener closes, requests in flight finish, idle connections close, and
//! whatever is left after [`SHUTDOWN_GRACE`] is dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::ServiceBuilder;
use tower_http::add_extension::AddExtensionLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::{listen, tls};

/// How long a client has to send a request's head: from the accept, or from the end of the
/// previous response on a keep-alive connection. Cowboy's `request_timeout` default, which
/// RabbitMQ's management and Prometheus listeners keep (`management.tcp.request_timeout`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a request's body may go without new bytes. Cowboy's `idle_timeout` default
/// (`management.tcp.idle_timeout`).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Connections one listener serves at once; more wait in the kernel's backlog. Ranch's
/// default is 1024, but the four management listeners share the broker's file descriptors
/// with AMQP: 4 x 128 leaves most of a 1024 `ulimit -n` to AMQP clients, and a browser or a
/// monitoring agent uses a handful.
pub const CONNECTIONS_MAX: usize = 128;

/// How long shutdown waits for connections to finish (the broker waits as long for the
/// management listeners).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// At most one "at its connection cap" line per listener per this interval.
const CAP_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// The pause after a failed accept (out of file descriptors, typically), as `axum::serve`.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// One listener to serve.
pub(crate) struct Endpoint {
    pub listener: TcpListener,
    pub router: Router,
    /// TLS: each connection's handshake runs before its first request.
    pub tls: Option<TlsAcceptor>,
    /// The listener's name in log lines ("management HTTPS").
    pub what: &'static str,
}

/// Serves `endpoint` until `shutdown` turns true, then drains its connections.
pub(crate) async fn run(endpoint: Endpoint, mut shutdown: watch::Receiver<bool>) {
    let Endpoint {
        listener,
        router,
        tls,
        what,
    } = endpoint;
    let shared = Arc::new(Shared { router, tls, what });
    let mut cap = Cap::new(what);
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    loop {
        // Finished tasks are reaped at each accept, so at most 2 x CONNECTIONS_MAX are held.
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => break,
            accepted = cap.accept(&listener) => accepted,
        };
        match accepted {
            Ok((socket, peer, permit)) => {
                let peer = listen::canonical_peer(peer);
                let watcher = graceful.watcher();
                connections.spawn(connection(socket, peer, shared.clone(), watcher, permit));
            }
            Err(error) => {
                tracing::warn!(%error, "the {what} listener cannot accept: {error}");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
            }
        }
    }
    drop(listener);
    let drain = async {
        graceful.shutdown().await;
        while connections.join_next().await.is_some() {}
    };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        tracing::info!(
            "the {what} listener closed its remaining connections after {} s",
            SHUTDOWN_GRACE.as_secs()
        );
        connections.abort_all();
    }
}

/// What every connection of a listener shares.
struct Shared {
    router: Router,
    tls: Option<TlsAcceptor>,
    what: &'static str,
}

/// The connection cap of one listener and its log line.
struct Cap {
    permits: Arc<Semaphore>,
    what: &'static str,
    last_logged: Option<Instant>,
    waits_unlogged: u64,
}

impl Cap {
    fn new(what: &'static str) -> Cap {
        Cap {
            permits: Arc::new(Semaphore::new(CONNECTIONS_MAX)),
            what,
            last_logged: None,
            waits_unlogged: 0,
        }
    }

    /// The next client, once the listener is below its cap; the permit is the client's slot.
    async fn accept(
        &mut self,
        listener: &TcpListener,
    ) -> std::io::Result<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                self.log_full();
                self.permits
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("invariant: the cap's semaphore is never closed")
            }
        };
        let (socket, peer) = listener.accept().await?;
        Ok((socket, peer, permit))
    }

    fn log_full(&mut self) {
        self.waits_unlogged += 1;
        let due = self
            .last_logged
            .is_none_or(|at| at.elapsed() >= CAP_LOG_INTERVAL);
        if !due {
            return;
        }
        tracing::warn!(
            connections_max = CONNECTIONS_MAX,
            waits_since_last_line = self.waits_unlogged,
            "the {} listener is at its cap of {CONNECTIONS_MAX} connections: new clients wait \
             until one closes",
            self.what,
        );
        self.last_logged = Some(Instant::now());
        self.waits_unlogged = 0;
    }
}

/// Serves one accepted socket: the TLS handshake if any, then HTTP/1.1 requests until the
/// client closes, a limit closes it, or shutdown. `_permit` holds the socket's slot.
async fn connection(
    socket: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    watcher: Watcher,
    _permit: OwnedSemaphorePermit,
) {
    // Small JSON answers go out at once rather than after the peer's delayed ACK.
    let _ = socket.set_nodelay(true);
    match &shared.tls {
        None => serve_http(socket, peer, shared.router.clone(), watcher).await,
        Some(acceptor) => {
            if let Some(stream) = tls::accept(acceptor, socket, peer, shared.what).await {
                serve_http(stream, peer, shared.router.clone(), watcher).await;
            }
        }
    }
}

/// HTTP/1.1 on `io` with [`REQUEST_TIMEOUT`] for heads and [`IDLE_TIMEOUT`] for bodies; the
/// handlers see the client as `ConnectInfo<SocketAddr>`.
pub(crate) async fn serve_http<I>(io: I, peer: SocketAddr, router: Router, watcher: Watcher)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = ServiceBuilder::new()
        .layer(AddExtensionLayer::new(ConnectInfo(peer)))
        .layer(RequestBodyTimeoutLayer::new(IDLE_TIMEOUT))
        .service(router);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_TIMEOUT)
        .keep_alive(true)
        .half_close(false);
    let connection = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    if let Err(error) = watcher.watch(connection).await {
        // Timeouts and clients that go away: routine, and one line per socket at most.
        tracing::debug!(%peer, %error, "management connection closed");
    }
}

#[cfg(test)]
#[path = "serve_test.rs"]
mod tests;
