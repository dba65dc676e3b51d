//! Black-box test harness for Warren.
//!
//! Every test gets a [`TestBroker`]: an in-process Warren on port 0 with a fresh data directory,
//! or, when `WARREN_TEST_AMQP_URL` is set, an external broker (the same tests are validated
//! against RabbitMQ 3.10 that way). Tests reach the broker through lapin ([`TestBroker::connect`])
//! or through [`raw::RawClient`] for handcrafted bytes.
//!
//! No test may hang: every await goes through [`bounded!`] (a step timeout) or one of the
//! helpers here, which are bounded themselves.

pub mod amqp10;
pub mod amqp10_raw;
pub mod client;
pub mod http;
pub mod raw;
pub mod wire;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use client::*;

/// How long any single step (connect, declare, publish, one delivery) may take.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// Environment variable naming an external broker to test instead of an in-process Warren.
pub const EXTERNAL_URL_VAR: &str = "WARREN_TEST_AMQP_URL";

/// Awaits a future for at most [`STEP_TIMEOUT`] (or the given duration), panicking with the call
/// site when it does not finish in time.
#[macro_export]
macro_rules! bounded {
    ($future:expr) => {
        $crate::bounded!($future, $crate::STEP_TIMEOUT)
    };
    ($future:expr, $limit:expr) => {
        match ::tokio::time::timeout($limit, $future).await {
            Ok(output) => output,
            Err(_) => panic!("timed out after {:?} at {}:{}", $limit, file!(), line!()),
        }
    };
}

/// A broker under test: in-process Warren, or an external broker named by the environment.
pub struct TestBroker {
    target: Target,
}

enum Target {
    External { url: String, addr: SocketAddr },
    InProcess(Box<InProcess>),
}

struct InProcess {
    running: warren_server::RunningBroker,
    config: warren_server::Config,
    addr: SocketAddr,
    // Dropped last: the broker must stop before its directory goes away.
    _data_dir: tempfile::TempDir,
}

impl TestBroker {
    /// An external broker when `WARREN_TEST_AMQP_URL` is set, else a fresh in-process Warren.
    pub async fn start() -> TestBroker {
        TestBroker::start_with(|_| {}).await
    }

    /// Like [`TestBroker::start`], letting the test adjust Warren's config (heartbeat,
    /// frame_max, channel_max...). The adjustment is ignored for an external broker, so tests
    /// that depend on it should check [`TestBroker::is_external`].
    pub async fn start_with(adjust: impl FnOnce(&mut warren_server::Config)) -> TestBroker {
        if let Ok(url) = std::env::var(EXTERNAL_URL_VAR) {
            let addr = addr_from_url(&url);
            return TestBroker {
                target: Target::External { url, addr },
            };
        }
        let data_dir = tempfile::Builder::new()
            .prefix("warren-test-")
            .tempdir()
            .expect("create a temporary data dir");
        let mut config = warren_server::Config {
            amqp_port: 0,
            management_port: Some(0),
            prometheus_port: Some(0),
            stream_port: 0,
            bind_address: [127, 0, 0, 1].into(),
            data_dir: data_dir.path().to_path_buf(),
            // Every in-process broker of a test binary shares one process, whose RSS the memory
            // alarm compares with the watermark: 0.4 of a small CI container's memory could
            // block publishers in tests that are not about alarms.
            vm_memory_high_watermark: 1.0,
            ..Default::default()
        };
        adjust(&mut config);
        let running = start_in_process(config.clone()).await;
        let addr = running.amqp_addr();
        TestBroker {
            target: Target::InProcess(Box::new(InProcess {
                running,
                config,
                addr,
                _data_dir: data_dir,
            })),
        }
    }

    /// The AMQP URL (guest:guest, vhost `/`).
    pub fn url(&self) -> String {
        match &self.target {
            Target::External { url, .. } => url.clone(),
            Target::InProcess(broker) => format!("amqp://guest:guest@{}/%2f", broker.addr),
        }
    }

    /// The URL of the in-process broker for another user and vhost (`vhost` unencoded).
    pub fn url_as(&self, user: &str, password: &str, vhost: &str) -> String {
        let vhost: String = vhost
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        format!("amqp://{user}:{password}@{}/{vhost}", self.addr())
    }

    /// The URL with a query string appended, e.g. `frame_max=4096&heartbeat=1`.
    pub fn url_with(&self, query: &str) -> String {
        let url = self.url();
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}{query}")
    }

    /// The AMQP listener's socket address, for raw-socket tests.
    pub fn addr(&self) -> SocketAddr {
        match &self.target {
            Target::External { addr, .. } => *addr,
            Target::InProcess(broker) => broker.addr,
        }
    }

    /// The stream protocol listener's address of the in-process broker (`None` for an external
    /// broker, or when the test turned the listener off).
    pub fn stream_addr(&self) -> Option<SocketAddr> {
        match &self.target {
            Target::External { .. } => None,
            Target::InProcess(broker) => broker.running.stream_addrs().first().copied(),
        }
    }

    /// The first AMQPS (TLS) listener's address of the in-process broker, when it has one.
    pub fn amqps_addr(&self) -> Option<SocketAddr> {
        match &self.target {
            Target::External { .. } => None,
            Target::InProcess(broker) => broker.running.amqps_addrs().first().copied(),
        }
    }

    /// The management HTTP API's base URL (`http://127.0.0.1:N`); for an external broker,
    /// `WARREN_TEST_HTTP_URL` or port 15672 on the AMQP host.
    pub fn http_url(&self) -> String {
        match &self.target {
            Target::External { addr, .. } => std::env::var("WARREN_TEST_HTTP_URL")
                .unwrap_or_else(|_| format!("http://{}:15672", addr.ip())),
            Target::InProcess(broker) => {
                let addr = broker
                    .running
                    .http_addr()
                    .expect("management API is on in tests");
                format!("http://{addr}")
            }
        }
    }

    /// The Prometheus listener's base URL (in-process brokers only).
    pub fn prometheus_url(&self) -> String {
        match &self.target {
            Target::External { addr, .. } => format!("http://{}:15692", addr.ip()),
            Target::InProcess(broker) => {
                let addr = broker
                    .running
                    .prometheus_addr()
                    .expect("Prometheus is on in tests");
                format!("http://{addr}")
            }
        }
    }

    pub fn is_external(&self) -> bool {
        matches!(self.target, Target::External { .. })
    }

    /// The in-process broker's data directory (`None` for an external broker).
    pub fn data_dir(&self) -> Option<&std::path::Path> {
        match &self.target {
            Target::External { .. } => None,
            Target::InProcess(broker) => Some(broker._data_dir.path()),
        }
    }

    /// The in-process broker's core, for what an operator changes at runtime (alarm limits).
    /// Panics for an external broker: callers skip first.
    pub fn core(&self) -> &warren_core::Broker {
        match &self.target {
            Target::External { .. } => {
                panic!("core() needs an in-process broker; skip the test when is_external()")
            }
            Target::InProcess(broker) => broker.running.broker(),
        }
    }

    /// The in-process broker's identity (`None` for an external broker).
    pub fn identity(&self) -> Option<&warren_core::identity::Identity> {
        match &self.target {
            Target::External { .. } => None,
            Target::InProcess(broker) => Some(broker.running.broker().identity()),
        }
    }

    /// Stops the broker and starts it again on the same data dir (the port may change).
    /// Panics for an external broker: callers skip first.
    pub async fn restart(self) -> TestBroker {
        let Target::InProcess(broker) = self.target else {
            panic!("restart() needs an in-process broker; skip the test when is_external()");
        };
        let InProcess {
            running,
            config,
            _data_dir,
            ..
        } = *broker;
        bounded!(running.shutdown(), Duration::from_secs(10));
        let running = start_in_process(config.clone()).await;
        let addr = running.amqp_addr();
        TestBroker {
            target: Target::InProcess(Box::new(InProcess {
                running,
                config,
                addr,
                _data_dir,
            })),
        }
    }

    /// A lapin connection with default properties.
    pub async fn connect(&self) -> lapin::Connection {
        connect_url(&self.url()).await
    }

    /// A lapin connection to the URL with a query string (`frame_max=4096`, `heartbeat=1`...).
    pub async fn connect_with(&self, query: &str) -> lapin::Connection {
        connect_url(&self.url_with(query)).await
    }

    /// A connection and one channel on it, the common start of a test.
    pub async fn channel(&self) -> (lapin::Connection, lapin::Channel) {
        let connection = self.connect().await;
        let channel = bounded!(connection.create_channel()).expect("open a channel");
        (connection, channel)
    }

    /// Prints why a test is skipped and returns true when the broker is external.
    pub fn skip_if_external(&self, why: &str) -> bool {
        if self.is_external() {
            eprintln!("skipped against an external broker: {why}");
        }
        self.is_external()
    }
}

async fn start_in_process(config: warren_server::Config) -> warren_server::RunningBroker {
    let started = bounded!(warren_server::start(config), Duration::from_secs(10));
    started.unwrap_or_else(|error| panic!("warren_server::start failed: {error:#}"))
}

/// Opens a lapin connection to `url`, bounded by the step timeout.
pub async fn connect_url(url: &str) -> lapin::Connection {
    let connect = lapin::Connection::connect(url, lapin::ConnectionProperties::default());
    bounded!(connect).unwrap_or_else(|error| panic!("connect to {url} failed: {error}"))
}

/// Host and port of an `amqp://user:pass@host:port/vhost` URL.
fn addr_from_url(url: &str) -> SocketAddr {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let with_port = if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:5672")
    };
    with_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .unwrap_or_else(|| panic!("{EXTERNAL_URL_VAR}={url}: cannot resolve {with_port}"))
}

/// A name no other test (or earlier run against a shared broker) uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{prefix}-{}-{count}-{nanos:08x}", std::process::id())
}
