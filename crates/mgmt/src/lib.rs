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
pub mod ui;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use warren_core::Broker;

pub use rates::Rates;

/// Where the management listeners bind; a port of `None` turns its listener off.
#[derive(Debug, Clone)]
pub struct MgmtConfig {
    pub bind_address: IpAddr,
    /// HTTP API (RabbitMQ's 15672); 0 picks a free port.
    pub http_port: Option<u16>,
    /// Prometheus (RabbitMQ's 15692); 0 picks a free port.
    pub prometheus_port: Option<u16>,
    /// The AMQP listener's address, listed by `/api/overview` and checked by port-listener.
    pub amqp_addr: SocketAddr,
    pub data_dir: PathBuf,
}

/// What every handler shares.
pub struct ApiState {
    pub broker: Arc<Broker>,
    pub rates: Arc<Rates>,
    /// The broker identity's node name (`rabbit@<host>`), fixed for the broker's life.
    pub node: String,
    pub started: Instant,
    /// `(protocol, address)` of every listener, for overview and health checks.
    pub listeners: Vec<(&'static str, SocketAddr)>,
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
    let http = bind(config.bind_address, config.http_port, "HTTP API").await?;
    let prometheus = bind(config.bind_address, config.prometheus_port, "Prometheus").await?;
    let http_addr = http.as_ref().map(TcpListener::local_addr).transpose()?;
    let prometheus_addr = prometheus
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()?;
    let mut listeners = vec![("amqp", config.amqp_addr)];
    listeners.extend(http_addr.map(|a| ("http", a)));
    listeners.extend(prometheus_addr.map(|a| ("http/prometheus", a)));
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

async fn bind(ip: IpAddr, port: Option<u16>, what: &str) -> io::Result<Option<TcpListener>> {
    let Some(port) = port else {
        return Ok(None);
    };
    let addr = SocketAddr::new(ip, port);
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
