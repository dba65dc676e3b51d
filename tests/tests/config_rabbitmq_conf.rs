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
