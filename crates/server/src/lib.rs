//! The Warren broker process: listeners, one connection type per protocol, config.

pub mod amqp091;
pub mod amqp10;
pub mod config;
mod connection;
pub mod log_writer;
pub mod resource_monitor;
mod sasl;
pub mod socket;
pub mod stream;
pub mod stream_encoding;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use warren_core::broker::StorageConfig;
use warren_core::{Bootstrap, Broker};
use warren_mgmt::tls;

use socket::{Client, Socket};

pub use config::Config;
use resource_monitor::ResourceMonitor;

/// How long shutdown waits for connections to finish closing.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A broker started in this process (the `warren server` command and the tests use it).
pub struct RunningBroker {
    broker: Arc<Broker>,
    amqp_addrs: Vec<SocketAddr>,
    amqps_addrs: Vec<SocketAddr>,
    stream_addrs: Vec<SocketAddr>,
    shutdown_tx: watch::Sender<bool>,
    acceptors: Vec<tokio::task::JoinHandle<()>>,
    monitor: tokio::task::JoinHandle<()>,
    mgmt: warren_mgmt::Mgmt,
}

impl RunningBroker {
    /// The broker itself, for what an operator does at runtime (tests use it to move the
    /// alarm limits).
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The address the first plain AMQP listener is bound to (the real port when 0 was
    /// asked), else the first TLS one's.
    pub fn amqp_addr(&self) -> SocketAddr {
        self.amqp_addrs
            .first()
            .or(self.amqps_addrs.first())
            .copied()
            .expect("invariant: the broker has at least one AMQP listener")
    }

    /// Every plain AMQP listener's address.
    pub fn amqp_addrs(&self) -> &[SocketAddr] {
        &self.amqp_addrs
    }

    /// Every AMQPS (TLS) listener's address.
    pub fn amqps_addrs(&self) -> &[SocketAddr] {
        &self.amqps_addrs
    }

    /// Every stream protocol listener's address (none when the stream listener is off).
    pub fn stream_addrs(&self) -> &[SocketAddr] {
        &self.stream_addrs
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
        let acceptors = futures_join_all(self.acceptors);
        let _ = tokio::time::timeout(SHUTDOWN_GRACE * 2, acceptors).await;
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
        stream_fsync: config.stream_fsync,
        stream_encoding: Some(std::sync::Arc::new(stream_encoding::Amqp10StreamEncoding)),
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
    let listeners = bind_amqp(&config)?;
    if listeners.is_empty() {
        anyhow::bail!(
            "no AMQP listener: give listeners.tcp.* or listeners.ssl.* (amqp_listeners or \
             amqps_listeners) at least one address"
        );
    }
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let monitor = tokio::spawn(monitor.run(shutdown_rx.clone()));
    let stream_listeners = stream::bind(&config)?;
    let mgmt_config = mgmt_config(&config, listeners.iter().chain(&stream_listeners))?;
    let mgmt = warren_mgmt::start(broker.clone(), mgmt_config, shutdown_rx.clone()).await?;
    let shared = Arc::new(connection::Shared {
        broker: broker.clone(),
        config: Arc::new(config),
        shutdown: shutdown_rx,
    });
    let (mut amqp_addrs, mut amqps_addrs) = (Vec::new(), Vec::new());
    let mut acceptors = Vec::new();
    for listener in listeners {
        let addrs = if listener.tls.is_some() {
            &mut amqps_addrs
        } else {
            &mut amqp_addrs
        };
        addrs.push(listener.addr);
        acceptors.push(tokio::spawn(accept_loop(listener, shared.clone())));
    }
    let mut stream_addrs = Vec::new();
    for listener in stream_listeners {
        stream_addrs.push(listener.addr);
        acceptors.push(tokio::spawn(accept_loop(listener, shared.clone())));
    }
    Ok(RunningBroker {
        broker,
        amqp_addrs,
        amqps_addrs,
        stream_addrs,
        shutdown_tx,
        acceptors,
        monitor,
        mgmt,
    })
}

/// The management plugin's listeners (HTTP API, Prometheus, with or without TLS) and the
/// protocol listeners (AMQP, AMQPS, stream) it lists.
fn mgmt_config<'a>(
    config: &Config,
    listeners: impl Iterator<Item = &'a AmqpListener>,
) -> anyhow::Result<warren_mgmt::MgmtConfig> {
    let https = |name: &str, https: &Option<config::HttpsConfig>, default_ip| {
        https
            .as_ref()
            .map(|https| -> anyhow::Result<warren_mgmt::TlsListener> {
                let options = https.tls_options();
                Ok(warren_mgmt::TlsListener {
                    addr: SocketAddr::new(https.ip.unwrap_or(default_ip), https.port),
                    tls: tls::server_config(&options, name).map_err(anyhow::Error::msg)?,
                    certfile: options.certfile.clone().unwrap_or_default(),
                })
            })
            .transpose()
    };
    let bind = config.bind_address;
    Ok(warren_mgmt::MgmtConfig {
        http: config
            .management_port
            .map(|port| SocketAddr::new(config.management_ip.unwrap_or(bind), port)),
        https: https("management.ssl", &config.management_ssl, bind)?,
        prometheus: config
            .prometheus_port
            .map(|port| SocketAddr::new(config.prometheus_ip.unwrap_or(bind), port)),
        prometheus_https: https("prometheus.ssl", &config.prometheus_ssl, bind)?,
        protocol_listeners: listeners
            .map(|listener| warren_mgmt::Listener {
                protocol: match (listener.stream, listener.tls.is_some()) {
                    (true, _) => "stream",
                    (false, true) => "amqp/ssl",
                    (false, false) => "amqp",
                },
                addr: listener.addr,
                certfile: listener
                    .tls
                    .as_ref()
                    .map(|_| config.ssl_options.certfile.clone().unwrap_or_default()),
            })
            .collect(),
        data_dir: config.data_dir.clone(),
    })
}

/// How long a client has from its connection (or its TLS handshake) to finish the AMQP
/// handshake: the protocol header, authentication and open.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A bound listener: AMQP (with `tls`, AMQPS) or, with `stream`, the stream protocol's.
pub(crate) struct AmqpListener {
    pub(crate) socket: TcpListener,
    pub(crate) addr: SocketAddr,
    pub(crate) tls: Option<TlsAcceptor>,
    /// Whether it serves the stream protocol (port 5552) rather than AMQP.
    pub(crate) stream: bool,
}

/// Binds every AMQP listener the configuration names, plain then TLS.
fn bind_amqp(config: &Config) -> anyhow::Result<Vec<AmqpListener>> {
    let plain = config.amqp_addrs().map_err(anyhow::Error::msg)?;
    let secure = config.amqps_addrs().map_err(anyhow::Error::msg)?;
    let acceptor = if secure.is_empty() {
        None
    } else {
        let server_config =
            tls::server_config(&config.ssl_options, "ssl_options").map_err(anyhow::Error::msg)?;
        Some(TlsAcceptor::from(server_config))
    };
    let mut listeners = Vec::new();
    let all = plain
        .into_iter()
        .map(|addr| (addr, None))
        .chain(secure.into_iter().map(|addr| (addr, acceptor.clone())));
    for (bind, tls) in all {
        let what = if tls.is_some() { "AMQPS" } else { "AMQP" };
        let socket = warren_mgmt::listen::bind_tcp(bind).with_context(|| {
            format!(
                "cannot listen for {what} on {bind}: is another broker running? (change the \
                 listener's port)"
            )
        })?;
        limit_segment_size(&socket);
        let addr = socket.local_addr()?;
        tracing::info!(
            %addr, data_dir = %config.data_dir.display(),
            "{what} listener ready (AMQP 0.9.1 and 1.0), listening on {addr}"
        );
        listeners.push(AmqpListener {
            socket,
            addr,
            tls,
            stream: false,
        });
    }
    Ok(listeners)
}

/// Serves one accepted socket with the protocol its header names. The AMQP 1.0 connection is
/// boxed so that the task of every AMQP 0.9.1 connection stays as small as it was.
async fn serve(
    socket: Socket,
    peer: SocketAddr,
    local: SocketAddr,
    shared: Arc<connection::Shared>,
) {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let tls = socket.tls_session();
    let (mut reader, writer) = socket.split();
    let mut start = BytesMut::with_capacity(PROTOCOL_HEADER_BYTES);
    // A client that has not even sent its protocol header is dropped at shutdown; one that
    // sends none within the handshake timeout too.
    let sniff = tokio::time::timeout_at(deadline, sniff(&mut reader, &mut start));
    let Some(Ok(amqp10)) = unless_shutdown(shared.shutdown.clone(), sniff).await else {
        tracing::debug!(%peer, "no protocol header within the handshake timeout");
        return;
    };
    let client = Box::new(Client {
        reader,
        writer,
        peer,
        local,
        tls,
        start,
        deadline,
    });
    if amqp10 {
        Box::pin(amqp10::serve(client, shared)).await;
    } else {
        amqp091::serve(client, shared).await;
    }
}

/// Both AMQP versions' protocol headers are 8 bytes.
const PROTOCOL_HEADER_BYTES: usize = 8;

/// Reads the start of the client's protocol header into `start` (which the connection then
/// parses): until it is whole or can no longer be AMQP 1.0's. Whether it is AMQP 1.0's.
async fn sniff(reader: &mut socket::SocketReader, start: &mut BytesMut) -> bool {
    while start.len() < PROTOCOL_HEADER_BYTES {
        if !amqp10::may_begin_amqp10_header(start) {
            return false;
        }
        match reader.read_buf(start).await {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
    }
    amqp10::is_amqp10_header(&start[..PROTOCOL_HEADER_BYTES])
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

async fn accept_loop(listener: AmqpListener, shared: Arc<connection::Shared>) {
    let mut connections = JoinSet::new();
    let mut shutdown = shared.shutdown.clone();
    loop {
        tokio::select! {
            accepted = listener.socket.accept() => match accepted {
                Ok((socket, peer)) => {
                    let peer = warren_mgmt::listen::canonical_peer(peer);
                    let local = socket.local_addr().unwrap_or(listener.addr);
                    let shared = shared.clone();
                    match &listener.tls {
                        None if listener.stream => connections.spawn(stream::serve(
                            Socket::Tcp(socket), peer, local, shared,
                        )),
                        None => connections.spawn(serve(Socket::Tcp(socket), peer, local, shared)),
                        Some(acceptor) => {
                            let acceptor = acceptor.clone();
                            connections.spawn(async move {
                                let handshake = tls::accept(&acceptor, socket, peer, "AMQPS");
                                let Some(Some(stream)) =
                                    unless_shutdown(shared.shutdown.clone(), handshake).await
                                else {
                                    return;
                                };
                                serve(Socket::Tls(Box::new(stream)), peer, local, shared).await;
                            })
                        }
                    };
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

/// Waits for every task (their results do not matter).
async fn futures_join_all(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        let _ = task.await;
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

pub(crate) fn limit_segment_size(listener: &TcpListener) {
    if let Err(error) = socket2::SockRef::from(listener).set_tcp_mss(TCP_SEGMENT_BYTES_MAX) {
        tracing::warn!("cannot limit TCP segments to {TCP_SEGMENT_BYTES_MAX} bytes: {error}");
    }
}
