//! Warren's management HTTP API (RabbitMQ's `rabbitmq_management`: the same paths, JSON and
//! errors, so `rabbitmqadmin` and monitoring tools work unchanged) and its Prometheus
//! endpoint (`rabbitmq_prometheus`: `/metrics` and `/metrics/per-object`).
//!
//! Handlers read the broker's registry, queue stats and definitions; they never touch a
//! queue's internals and add nothing to the message path. Rates come from a sampler that
//! reads the queues' counters once a second (`rates.rs`).
//!
//! More routes (users, vhosts, permissions, policies, definitions) are added by merging a
//! router into [`api_router`]'s result before it is served; see [`start_with_routes`].
//!
//! Every listener, plain or TLS, is served by [`serve`]'s accept loop with Cowboy's timeouts
//! and a connection cap; the API refuses non-JSON bodies on requests that change something
//! ([`cross_site`]).

pub mod auth;
pub mod certificate_expiration;
pub mod convert;
pub mod cross_site;
pub mod error;
pub mod listen;
pub mod prometheus;
mod prometheus_detailed;
mod prometheus_stream;
pub mod query;
pub mod rates;
mod routes;
pub mod serve;
pub mod tls;
pub mod ui;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use warren_core::Broker;

pub use rates::Rates;

/// The management listeners and what they list; `None` turns a listener off.
#[derive(Debug, Clone)]
pub struct MgmtConfig {
    /// The HTTP API over plain HTTP (RabbitMQ's `management.tcp.*`, 15672); port 0 picks a
    /// free port.
    pub http: Option<SocketAddr>,
    /// The HTTP API over HTTPS (RabbitMQ's `management.ssl.*`, 15671).
    pub https: Option<TlsListener>,
    /// Prometheus over plain HTTP (`prometheus.tcp.*`, 15692).
    pub prometheus: Option<SocketAddr>,
    /// Prometheus over HTTPS (`prometheus.ssl.*`, 15691).
    pub prometheus_https: Option<TlsListener>,
    /// The protocol listeners (AMQP, AMQPS, stream), listed by `/api/overview` and checked by
    /// the port- and protocol-listener health checks.
    pub protocol_listeners: Vec<Listener>,
    pub data_dir: PathBuf,
}

/// A listener with TLS: where it binds and its rustls configuration (see [`tls`]).
#[derive(Debug, Clone)]
pub struct TlsListener {
    pub addr: SocketAddr,
    pub tls: Arc<rustls::ServerConfig>,
    /// The broker's certificate file, for the certificate-expiration health check.
    pub certfile: PathBuf,
}

/// A bound listener as `/api/overview` lists it.
#[derive(Debug, Clone)]
pub struct Listener {
    /// RabbitMQ's protocol name: `amqp`, `amqp/ssl`, `stream`, `http`, `https`,
    /// `http/prometheus`, `https/prometheus`.
    pub protocol: &'static str,
    pub addr: SocketAddr,
    /// The certificate file of a TLS listener.
    pub certfile: Option<PathBuf>,
}

/// What every handler shares.
pub struct ApiState {
    pub broker: Arc<Broker>,
    pub rates: Arc<Rates>,
    /// The broker identity's node name (`rabbit@<host>`), fixed for the broker's life.
    pub node: String,
    pub started: Instant,
    /// Every listener of the node, for overview and health checks.
    pub listeners: Vec<Listener>,
}

/// The running management listeners.
pub struct Mgmt {
    http_addr: Option<SocketAddr>,
    https_addr: Option<SocketAddr>,
    prometheus_addr: Option<SocketAddr>,
    prometheus_https_addr: Option<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
}

impl Mgmt {
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.https_addr
    }

    pub fn prometheus_addr(&self) -> Option<SocketAddr> {
        self.prometheus_addr
    }

    pub fn prometheus_https_addr(&self) -> Option<SocketAddr> {
        self.prometheus_https_addr
    }

    /// Waits for the listeners to stop (they stop when shutdown is signalled).
    pub async fn join(self) {
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Starts the listeners with the standard routes.
pub async fn start(
    broker: Arc<Broker>,
    config: MgmtConfig,
    shutdown: watch::Receiver<bool>,
) -> io::Result<Mgmt> {
    start_with_routes(broker, config, shutdown, |router| router).await
}

/// Starts the listeners; `extend` may add routes to the API router (they get the same basic
/// authentication).
pub async fn start_with_routes(
    broker: Arc<Broker>,
    config: MgmtConfig,
    shutdown: watch::Receiver<bool>,
    extend: impl FnOnce(Router<Arc<ApiState>>) -> Router<Arc<ApiState>>,
) -> io::Result<Mgmt> {
    let http = Bound::plain(config.http, "http", "management HTTP API")?;
    let https = Bound::tls(config.https.as_ref(), "https", "management HTTPS API")?;
    let prometheus = Bound::plain(config.prometheus, "http/prometheus", "Prometheus")?;
    let prometheus_https = Bound::tls(
        config.prometheus_https.as_ref(),
        "https/prometheus",
        "Prometheus HTTPS",
    )?;
    let api_ports = [http, https];
    let prometheus_ports = [prometheus, prometheus_https];
    let addr_of = |bound: &Option<Bound>| bound.as_ref().map(|bound| bound.entry.addr);
    let mgmt_addrs = Mgmt {
        http_addr: addr_of(&api_ports[0]),
        https_addr: addr_of(&api_ports[1]),
        prometheus_addr: addr_of(&prometheus_ports[0]),
        prometheus_https_addr: addr_of(&prometheus_ports[1]),
        tasks: Vec::new(),
    };
    let mut listeners = config.protocol_listeners.clone();
    let bound = api_ports.iter().chain(&prometheus_ports).flatten();
    listeners.extend(bound.map(|bound| bound.entry.clone()));
    let rates = Arc::new(Rates::default());
    let state = Arc::new(ApiState {
        broker: broker.clone(),
        rates: rates.clone(),
        node: broker.identity().node_name.clone(),
        started: Instant::now(),
        listeners,
    });
    let mut tasks = Vec::new();
    if api_ports.iter().any(Option::is_some) {
        // Only the HTTP API shows rates: without it nothing samples (nor holds samples).
        tasks.push(tokio::spawn(rates.run(broker, shutdown.clone())));
    }
    let api = cross_site::protect(ui::with_ui(routes::api_router(state.clone(), extend)));
    let metrics = prometheus::router(state).layer(cross_site::nosniff());
    let routed = api_ports.into_iter().map(|port| (port, api.clone())).chain(
        prometheus_ports
            .into_iter()
            .map(|port| (port, metrics.clone())),
    );
    for (port, router) in routed {
        if let Some(port) = port {
            let (what, addr) = (port.what, port.entry.addr);
            tracing::info!(%addr, "{what} listener ready, listening on {addr}");
            tasks.push(tokio::spawn(port.serve(router, shutdown.clone())));
        }
    }
    Ok(Mgmt {
        tasks,
        ..mgmt_addrs
    })
}

/// A bound listener, before it serves.
struct Bound {
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    /// How `/api/overview` lists it.
    entry: Listener,
    /// Its name in log lines.
    what: &'static str,
}

impl Bound {
    fn plain(
        addr: Option<SocketAddr>,
        protocol: &'static str,
        what: &'static str,
    ) -> io::Result<Option<Bound>> {
        let Some(addr) = addr else {
            return Ok(None);
        };
        Bound::bind(addr, protocol, what, None).map(Some)
    }

    fn tls(
        config: Option<&TlsListener>,
        protocol: &'static str,
        what: &'static str,
    ) -> io::Result<Option<Bound>> {
        let Some(config) = config else {
            return Ok(None);
        };
        Bound::bind(config.addr, protocol, what, Some(config)).map(Some)
    }

    fn bind(
        addr: SocketAddr,
        protocol: &'static str,
        what: &'static str,
        tls: Option<&TlsListener>,
    ) -> io::Result<Bound> {
        let listener = listen::bind_tcp(addr).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("cannot listen for the {what} on {addr}: {error}"),
            )
        })?;
        let entry = Listener {
            protocol,
            addr: listener.local_addr()?,
            certfile: tls.map(|tls| tls.certfile.clone()),
        };
        Ok(Bound {
            listener,
            tls: tls.map(|tls| TlsAcceptor::from(tls.tls.clone())),
            entry,
            what,
        })
    }

    async fn serve(self, router: Router, shutdown: watch::Receiver<bool>) {
        let endpoint = serve::Endpoint {
            listener: self.listener,
            router,
            tls: self.tls,
            what: self.what,
        };
        serve::run(endpoint, shutdown).await;
    }
}
