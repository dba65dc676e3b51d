//! The Warren broker process: listeners, one connection type per protocol, config.

pub mod amqp091;
pub mod amqp10;
pub mod config;
mod encode_buffer;
pub mod log_writer;
pub mod resource_monitor;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use warren_core::broker::StorageConfig;
use warren_core::{Bootstrap, Broker};

pub use config::Config;
use resource_monitor::ResourceMonitor;

/// How long shutdown waits for connections to finish closing.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A broker started in this process (the `warren server` command and the tests use it).
pub struct RunningBroker {
    broker: Arc<Broker>,
    amqp_addr: SocketAddr,
    shutdown_tx: watch::Sender<bool>,
    acceptor: tokio::task::JoinHandle<()>,
    monitor: tokio::task::JoinHandle<()>,
    mgmt: warren_mgmt::Mgmt,
}

impl RunningBroker {
    /// The broker itself, for what an operator does at runtime (tests use it to move the
    /// alarm limits).
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The address the AMQP 0.9.1 listener is bound to (the real port when 0 was asked).
    pub fn amqp_addr(&self) -> SocketAddr {
        self.amqp_addr
    }

    /// The management HTTP API's address, when it is on.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.mgmt.http_addr()
    }

    /// The Prometheus listener's address, when it is on.
    pub fn prometheus_addr(&self) -> Option<SocketAddr> {
        self.mgmt.prometheus_addr()
    }

    /// Client connections open now (past their handshake, not yet torn down).
    pub fn connection_count(&self) -> usize {
        self.broker.connection_count()
    }

    /// Stops accepting, closes every connection with 320 CONNECTION_FORCED, and returns once
    /// they are gone (or the grace period ends).
    pub async fn shutdown(self) {
        let _ = self.shutdown_tx.send(true);
        let _ = tokio::time::timeout(SHUTDOWN_GRACE * 2, self.acceptor).await;
        let _ = self.monitor.await;
        // HTTP clients may keep connections open: give them the grace period, no more.
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, self.mgmt.join()).await;
        self.broker.close().await;
    }
}

/// Starts a broker with `config`. Returns once every listener is bound.
pub async fn start(config: Config) -> anyhow::Result<RunningBroker> {
    let bootstrap = Bootstrap {
        default_user: config.default_user.clone(),
        default_pass: config.default_pass.clone(),
        default_vhost: config.default_vhost.clone(),
        loopback_users: config.loopback_users.clone(),
        identity: config.identity(),
    };
    let storage = StorageConfig {
        segment_bytes: config.store_segment_size,
        queue_memory_budget: usize::try_from(config.queue_memory_budget).unwrap_or(usize::MAX),
        queue_credit: config.credit_flow_default_credit,
    };
    let broker = Broker::open(&config.data_dir, &bootstrap, storage)
        .with_context(|| format!("cannot open data directory {}", config.data_dir.display()))?;
    if let Some(path) = &config.load_definitions {
        load_definitions(&broker, path).await?;
    }
    broker.set_memory_high_watermark(config.memory_high_watermark());
    broker.set_disk_free_limit(config.disk_free_limit);
    let mut monitor = ResourceMonitor::new(broker.clone(), config.data_dir.clone());
    monitor.sample(); // alarms are in effect before the first client connects
    let bind = SocketAddr::new(config.bind_address, config.amqp_port);
    let listener = warren_mgmt::listen::bind_tcp(bind).with_context(|| {
        format!("cannot listen for AMQP on {bind}: is another broker running? (set --amqp-port)")
    })?;
    limit_segment_size(&listener);
    let amqp_addr = listener.local_addr()?;
    tracing::info!(%amqp_addr, data_dir = %config.data_dir.display(), "AMQP 0.9.1 listener ready, listening on {amqp_addr}");
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let monitor = tokio::spawn(monitor.run(shutdown_rx.clone()));
    let mgmt_config = warren_mgmt::MgmtConfig {
        http: config
            .management_port
            .map(|port| SocketAddr::new(config.bind_address, port)),
        https: None,
        prometheus: config
            .prometheus_port
            .map(|port| SocketAddr::new(config.bind_address, port)),
        prometheus_https: None,
        amqp_listeners: vec![warren_mgmt::Listener {
            protocol: "amqp",
            addr: amqp_addr,
            certfile: None,
        }],
        data_dir: config.data_dir.clone(),
    };
    let mgmt = warren_mgmt::start(broker.clone(), mgmt_config, shutdown_rx.clone()).await?;
    let shared = Arc::new(amqp091::Shared {
        broker: broker.clone(),
        config: Arc::new(config),
        shutdown: shutdown_rx,
    });
    let acceptor = tokio::spawn(accept_loop(listener, shared));
    Ok(RunningBroker {
        broker,
        amqp_addr,
        shutdown_tx,
        acceptor,
        monitor,
        mgmt,
    })
}

/// Serves one accepted socket with the protocol its header names. The AMQP 1.0 connection is
/// boxed so that the task of every AMQP 0.9.1 connection stays as small as it was.
async fn serve(socket: tokio::net::TcpStream, peer: SocketAddr, shared: Arc<amqp091::Shared>) {
    // A client that has not even sent its protocol header is dropped at shutdown.
    let Some(amqp10) = unless_shutdown(shared.shutdown.clone(), amqp10::is_amqp10(&socket)).await
    else {
        return;
    };
    if amqp10 {
        Box::pin(amqp10::serve(socket, peer, shared)).await;
    } else {
        amqp091::serve(socket, peer, shared).await;
    }
}

/// What `future` gives, unless the broker starts shutting down first (`None`): for a client
/// that is not open yet, which has nothing to finish and gets no connection.close.
pub(crate) async fn unless_shutdown<F: std::future::Future>(
    mut shutdown: watch::Receiver<bool>,
    future: F,
) -> Option<F::Output> {
    tokio::select! {
        output = future => Some(output),
        _ = shutdown.wait_for(|&stopping| stopping) => None,
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<amqp091::Shared>) {
    let mut connections = JoinSet::new();
    let mut shutdown = shared.shutdown.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let peer = warren_mgmt::listen::canonical_peer(peer);
                    connections.spawn(serve(socket, peer, shared.clone()));
                }
                Err(error) => {
                    // Out of file descriptors and the like: log, pause, keep serving.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        connections.abort_all();
    }
}

/// Imports the definitions file named by `load_definitions`.
async fn load_definitions(broker: &Broker, path: &std::path::Path) -> anyhow::Result<()> {
    let text = std::fs::read(path)
        .with_context(|| format!("cannot read load_definitions file {}", path.display()))?;
    let definitions: warren_core::access::format::Definitions = serde_json::from_slice(&text)
        .with_context(|| {
            format!(
                "load_definitions file {} is not a RabbitMQ definitions document",
                path.display()
            )
        })?;
    broker
        .import_definitions(&definitions)
        .await
        .map_err(|error| {
            anyhow::anyhow!(
                "cannot import load_definitions file {}: {}",
                path.display(),
                error.text
            )
        })?;
    tracing::info!(path = %path.display(), "imported definitions");
    Ok(())
}

/// Largest TCP segment the broker sends or asks for (`TCP_MAXSEG` on the listener, inherited by
/// every accepted socket). Only loopback and jumbo-frame links have larger ones (loopback's is
/// 64 KiB). With 64 KiB segments, a client whose receive window has shrunk to one segment
/// (the Java client's 128 KiB socket buffer after a stall) acknowledges each one only when its
/// delayed-ACK timer fires: a consumer then gets one segment every 100 ms or so (about 2,300
/// messages a second) and never recovers. Four segments fit in such a window, and a receiver
/// acknowledges every second full segment at once.
const TCP_SEGMENT_BYTES_MAX: u32 = 16 * 1024;

fn limit_segment_size(listener: &TcpListener) {
    if let Err(error) = socket2::SockRef::from(listener).set_tcp_mss(TCP_SEGMENT_BYTES_MAX) {
        tracing::warn!("cannot limit TCP segments to {TCP_SEGMENT_BYTES_MAX} bytes: {error}");
    }
}
