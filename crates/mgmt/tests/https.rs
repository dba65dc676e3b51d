//! The management API and Prometheus over HTTPS, end to end on loopback: certificates made
//! by `tests/interop/tls/certs.sh` (openssl), `warren_mgmt::start` with both TLS listeners,
//! and a rustls client that trusts the test CA (or the wrong one).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsConnector;
use warren_core::broker::StorageConfig;
use warren_core::{Bootstrap, Broker};
use warren_mgmt::tls::{server_config, TlsOptions};
use warren_mgmt::{Mgmt, MgmtConfig, TlsListener};

const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// `guest:guest`, which may log in from loopback.
const GUEST: &str = "Basic Z3Vlc3Q6Z3Vlc3Q=";

struct Fixture {
    mgmt: Mgmt,
    certs: PathBuf,
    _shutdown: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

async fn start() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/tls/certs.sh");
    let made = std::process::Command::new("bash")
        .arg(&script)
        .arg(&certs)
        .output()
        .expect("run certs.sh (needs bash and openssl)");
    assert!(made.status.success(), "certs.sh: {made:?}");
    let storage = StorageConfig {
        segment_bytes: 1 << 20,
        queue_memory_budget: 1 << 20,
        queue_credit: 400,
        stream_fsync: false,
        stream_encoding: None,
    };
    let data_dir = dir.path().join("data");
    let broker = Broker::open(&data_dir, &Bootstrap::default(), storage).unwrap();
    let options = TlsOptions {
        certfile: Some(certs.join("server.pem")),
        keyfile: Some(certs.join("server.key")),
        ..TlsOptions::default()
    };
    let tls_listener = |what| TlsListener {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        tls: server_config(&options, what).unwrap(),
        certfile: certs.join("server.pem"),
    };
    let config = MgmtConfig {
        http: None,
        https: Some(tls_listener("management HTTPS")),
        prometheus: None,
        prometheus_https: Some(tls_listener("Prometheus HTTPS")),
        protocol_listeners: Vec::new(),
        data_dir,
    };
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mgmt = warren_mgmt::start(broker, config, shutdown_rx)
        .await
        .unwrap();
    Fixture {
        mgmt,
        certs,
        _shutdown: shutdown,
        _dir: dir,
    }
}

fn connector(ca: &Path) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(certificate.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// `GET path` over TLS to `addr`, trusting `ca`: the status and body, or the handshake's
/// error.
async fn https_get(addr: SocketAddr, ca: &Path, path: &str) -> std::io::Result<(u16, String)> {
    let socket = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    let mut stream = connector(ca).connect(name, socket).await?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: {GUEST}\r\n\
         Connection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut received = Vec::new();
    match stream.read_to_end(&mut received).await {
        Ok(_) => {}
        // A peer that closes without close_notify: the answer is complete all the same.
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(error) => return Err(error),
    }
    let text = String::from_utf8(received).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Ok((status, body.to_string()))
}

async fn get_ok(addr: SocketAddr, ca: &Path, path: &str) -> (u16, String) {
    let answer = tokio::time::timeout(STEP_TIMEOUT, https_get(addr, ca, path));
    answer.await.unwrap().unwrap()
}

/// One test, as certs.sh takes seconds of RSA key generation.
#[tokio::test]
async fn https_listeners() {
    let fixture = start().await;
    the_api_and_prometheus_answer_over_https(&fixture).await;
    certificate_expiration_reads_the_listeners_certificates(&fixture).await;
}

async fn the_api_and_prometheus_answer_over_https(fixture: &Fixture) {
    let ca = fixture.certs.join("ca.pem");
    let https = fixture.mgmt.https_addr().expect("an HTTPS listener");
    let prometheus = fixture
        .mgmt
        .prometheus_https_addr()
        .expect("Prometheus HTTPS");
    assert!(fixture.mgmt.http_addr().is_none());

    tracing::info!("the overview, as guest from loopback: the peer reaches the handlers");
    let (status, body) = get_ok(https, &ca, "/api/overview").await;
    assert_eq!(status, 200, "{body}");
    let overview: Value = serde_json::from_str(&body).unwrap();
    let listed = |protocol: &str, port: u16| {
        overview["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["protocol"] == protocol && l["port"] == port)
    };
    assert!(listed("https", https.port()), "{body}");
    assert!(listed("https/prometheus", prometheus.port()), "{body}");

    tracing::info!("Prometheus");
    let (status, metrics) = get_ok(prometheus, &ca, "/metrics").await;
    assert_eq!(status, 200);
    assert!(metrics.contains("\nrabbitmq_"), "{metrics}");

    tracing::info!("a client that trusts another CA does not get through the handshake");
    let wrong_ca = fixture.certs.join("wrongca.pem");
    let refused = tokio::time::timeout(STEP_TIMEOUT, https_get(https, &wrong_ca, "/api/overview"));
    assert!(refused.await.unwrap().is_err());
}

async fn certificate_expiration_reads_the_listeners_certificates(fixture: &Fixture) {
    let ca = fixture.certs.join("ca.pem");
    let https = fixture.mgmt.https_addr().unwrap();
    let path = |within: &str| format!("/api/health/checks/certificate-expiration/{within}");

    tracing::info!("certs.sh's server certificate is valid for 10 years");
    let (status, body) = get_ok(https, &ca, &path("1/weeks")).await;
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));

    tracing::info!("within 20 years it expires, on both listeners");
    let (status, body) = get_ok(https, &ca, &path("20/years")).await;
    assert_eq!(status, 503, "{body}");
    let failed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["reason"], "Certificates expiring");
    let expired = failed["expired"].as_array().unwrap();
    assert_eq!(expired.len(), 2, "{body}");
    let protocols: Vec<&str> = expired
        .iter()
        .map(|e| e["protocol"].as_str().unwrap())
        .collect();
    assert!(protocols.contains(&"https") && protocols.contains(&"https/prometheus"));
    let on_https = expired.iter().find(|e| e["protocol"] == "https").unwrap();
    assert_eq!(on_https["port"], https.port());
    assert_eq!(on_https["interface"], "127.0.0.1");
    let certfile = fixture.certs.join("server.pem");
    assert_eq!(on_https["certfile"], certfile.display().to_string());
    let dates = on_https["certfile_expires_on"].as_array().unwrap();
    assert_eq!(dates.len(), 1, "{body}");
    assert!(dates[0].as_str().unwrap().starts_with("20"), "{body}");

    tracing::info!("RabbitMQ's 400s");
    let (status, _) = get_ok(https, &ca, &path("two/weeks")).await;
    assert_eq!(status, 400);
    let (status, _) = get_ok(https, &ca, &path("2/week")).await;
    assert_eq!(status, 400);
}
