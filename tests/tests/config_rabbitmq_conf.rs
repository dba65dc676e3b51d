//! A broker started from RabbitMQ's rabbitmq.conf format, on its default dual-stack listeners:
//! IPv4 and IPv6 clients reach AMQP, the HTTP API and /metrics on one socket each, and guest's
//! loopback-only login works from 127.0.0.1 arriving as `::ffff:127.0.0.1`.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_tests::connect_url;

const LIMIT: Duration = Duration::from_secs(5);

/// An operator's file with the ports set to 0 (free ports) and no bind address.
fn operator_file(data_dir: &std::path::Path) -> String {
    format!(
        "# rabbitmq.conf\n\
         listeners.tcp.default = 0\n\
         stream.listeners.tcp.default = 0\n\
         management.tcp.port = 0\n\
         prometheus.tcp.port = 0\n\
         heartbeat = 30\n\
         default_vhost = /\n\
         loopback_users.guest = true\n\
         vm_memory_high_watermark.relative = 1.0\n\
         disk_free_limit.absolute = 1MB\n\
         log.console.level = warning\n\
         cluster_name = conf-test\n\
         data_dir = {}\n",
        data_dir.display()
    )
}

/// Sends the AMQP 0.9.1 header to `addr` and reads the first byte of connection.start.
async fn amqp_greets(addr: SocketAddr) -> bool {
    let exchange = async {
        let mut socket = TcpStream::connect(addr).await.ok()?;
        socket.write_all(b"AMQP\x00\x00\x09\x01").await.ok()?;
        let mut frame_type = [0u8; 1];
        socket.read_exact(&mut frame_type).await.ok()?;
        Some(frame_type[0])
    };
    tokio::time::timeout(LIMIT, exchange).await.ok().flatten() == Some(1)
}

async fn status(client: &reqwest::Client, url: &str) -> u16 {
    let response = client
        .get(url)
        .basic_auth("guest", Some("guest"))
        .send()
        .await;
    response.map_or(0, |response| response.status().as_u16())
}

#[tokio::test]
async fn rabbitmq_conf_starts_dual_stack_broker() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rabbitmq.conf");
    std::fs::write(&path, operator_file(&dir.path().join("data"))).unwrap();
    let config = warren_server::Config::from_file(&path).unwrap();
    assert_eq!(config.heartbeat, 30);
    let running = warren_server::start(config).await.unwrap();
    let port = running.amqp_addr().port();
    assert!(
        running.amqp_addr().ip().is_unspecified(),
        "{}",
        running.amqp_addr()
    );

    for ip in ["127.0.0.1", "::1"] {
        let addr = SocketAddr::new(ip.parse().unwrap(), port);
        assert!(amqp_greets(addr).await, "no connection.start from {addr}");
    }
    // guest may log in from loopback only: an IPv4 client on the dual-stack socket is one.
    let connection = connect_url(&format!("amqp://guest:guest@127.0.0.1:{port}/%2f")).await;
    connection.close(200, "bye".into()).await.unwrap();

    let client = reqwest::Client::builder().timeout(LIMIT).build().unwrap();
    let http = running.http_addr().unwrap().port();
    let metrics = running.prometheus_addr().unwrap().port();
    for host in ["127.0.0.1", "[::1]"] {
        let overview = format!("http://{host}:{http}/api/overview");
        assert_eq!(status(&client, &overview).await, 200, "{overview}");
        let scrape = format!("http://{host}:{metrics}/metrics");
        assert_eq!(status(&client, &scrape).await, 200, "{scrape}");
    }
    running.shutdown().await;
}

#[tokio::test]
async fn unsupported_rabbitmq_conf_key_names_file_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rabbitmq.conf");
    std::fs::write(
        &path,
        "listeners.tcp.default = 5672\ncollect_statistics_interval = 5000\n",
    )
    .unwrap();
    let error = warren_server::Config::from_file(&path)
        .unwrap_err()
        .to_string();
    assert!(error.contains("rabbitmq.conf"), "{error}");
    assert!(error.contains("line 2"), "{error}");
    assert!(error.contains("collect_statistics_interval"), "{error}");
}

/// RabbitMQ's listener keys: several `listeners.tcp.N` sockets, each on its own address, and
/// the management API and Prometheus on an address of their own (`management.tcp.ip`,
/// `prometheus.tcp.ip`), each reachable there and only there.
#[tokio::test]
async fn several_amqp_listeners_and_http_on_addresses_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rabbitmq.conf");
    let conf = format!(
        "listeners.tcp.1 = 127.0.0.1:0\n\
         listeners.tcp.2 = ::1:0\n\
         stream.listeners.tcp.default = 0\n\
         management.tcp.ip = ::1\n\
         management.tcp.port = 0\n\
         prometheus.tcp.ip = 127.0.0.1\n\
         prometheus.tcp.port = 0\n\
         vm_memory_high_watermark.relative = 1.0\n\
         disk_free_limit.absolute = 1MB\n\
         data_dir = {}\n",
        dir.path().join("data").display()
    );
    std::fs::write(&path, conf).unwrap();
    let config = warren_server::Config::from_file(&path).unwrap();
    let running = warren_server::start(config).await.unwrap();
    let amqp: Vec<SocketAddr> = running.amqp_addrs().to_vec();
    assert_eq!(amqp.len(), 2, "{amqp:?}");
    assert_eq!(amqp[0].ip().to_string(), "127.0.0.1");
    assert_eq!(amqp[1].ip().to_string(), "::1");
    for addr in &amqp {
        assert!(amqp_greets(*addr).await, "no connection.start from {addr}");
        // guest logs in and opens the vhost on each (loopback both).
        let handshake = warren_tests::raw::Handshake::default();
        let _ = warren_tests::raw::RawClient::handshake(*addr, handshake).await;
    }
    // Each listener has its own address: the IPv6 one does not answer on IPv4.
    let other_family = SocketAddr::new("127.0.0.1".parse().unwrap(), amqp[1].port());
    assert!(!amqp_greets(other_family).await, "{other_family} answered");

    let client = reqwest::Client::builder().timeout(LIMIT).build().unwrap();
    let http = running.http_addr().unwrap();
    assert_eq!(http.ip().to_string(), "::1");
    let overview = format!("http://[::1]:{}/api/overview", http.port());
    assert_eq!(status(&client, &overview).await, 200, "{overview}");
    let overview_v4 = format!("http://127.0.0.1:{}/api/overview", http.port());
    assert_eq!(status(&client, &overview_v4).await, 0, "{overview_v4}");
    let metrics = running.prometheus_addr().unwrap();
    assert_eq!(metrics.ip().to_string(), "127.0.0.1");
    let scrape = format!("http://127.0.0.1:{}/metrics", metrics.port());
    assert_eq!(status(&client, &scrape).await, 200, "{scrape}");
    let overview: serde_json::Value = client
        .get(&overview)
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed: Vec<u64> = overview["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["protocol"] == "amqp")
        .map(|l| l["port"].as_u64().unwrap())
        .collect();
    assert_eq!(listed.len(), 2, "{overview}");
    running.shutdown().await;
}
