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

pub mod auth;
pub mod convert;
pub mod error;
pub mod listen;
pub mod prometheus;
mod prometheus_detailed;
pub mod query;
pub mod rates;
mod routes;
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
    /// The AMQP listeners, listed by `/api/overview` and checked by port-listener health
    /// checks.
    pub amqp_listeners: Vec<Listener>,
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
    /// RabbitMQ's protocol name: `amqp`, `amqp/ssl`, `http`, `https`, `http/prometheus`,
    /// `https/prometheus`.
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
    prometheus_addr: Option<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
}

impl Mgmt {
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    pub fn prometheus_addr(&self) -> Option<SocketAddr> {
        self.prometheus_addr
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
    if config.https.is_some() || config.prometheus_https.is_some() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "HTTPS for the management API and Prometheus is not served yet: remove the \
             management.ssl.* and prometheus.ssl.* settings",
        ));
    }
    let http = bind(config.http, "HTTP API").await?;
    let prometheus = bind(config.prometheus, "Prometheus").await?;
    let http_addr = http.as_ref().map(TcpListener::local_addr).transpose()?;
    let prometheus_addr = prometheus
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()?;
    let plain = |protocol, addr| Listener {
        protocol,
        addr,
        certfile: None,
    };
    let mut listeners = config.amqp_listeners.clone();
    listeners.extend(http_addr.map(|addr| plain("http", addr)));
    listeners.extend(prometheus_addr.map(|addr| plain("http/prometheus", addr)));
    let rates = Arc::new(Rates::default());
    let state = Arc::new(ApiState {
        broker: broker.clone(),
        rates: rates.clone(),
        node: broker.identity().node_name.clone(),
        started: Instant::now(),
        listeners,
    });
    let mut tasks = Vec::new();
    if let Some(listener) = http {
        // Only the HTTP API shows rates: without it nothing samples (nor holds samples).
        tasks.push(tokio::spawn(rates.run(broker, shutdown.clone())));
        let addr = http_addr.expect("invariant: a bound listener has an address");
        let router = ui::with_ui(routes::api_router(state.clone(), extend));
        tracing::info!(%addr, "management HTTP API listener ready, listening on {addr}");
        tasks.push(tokio::spawn(serve(listener, router, shutdown.clone())));
    }
    if let Some(listener) = prometheus {
        let addr = prometheus_addr.expect("invariant: a bound listener has an address");
        let router = prometheus::router(state.clone());
        tracing::info!(%addr, "Prometheus listener ready, listening on {addr}");
        tasks.push(tokio::spawn(serve(listener, router, shutdown)));
    }
    Ok(Mgmt {
        http_addr,
        prometheus_addr,
        tasks,
    })
}

async fn bind(addr: Option<SocketAddr>, what: &str) -> io::Result<Option<TcpListener>> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    listen::bind_tcp(addr).map(Some).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("cannot listen for the {what} on {addr}: {error}"),
        )
    })
}

async fn serve(listener: TcpListener, router: Router, mut shutdown: watch::Receiver<bool>) {
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    let stop = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    if let Err(error) = axum::serve(listener, service)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!(%error, "management listener failed");
    }
}
