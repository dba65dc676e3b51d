//! AMQPS: both AMQP versions on a TLS listener (RabbitMQ's `listeners.ssl.*` with
//! `ssl_options.*`), client certificates checked against the CA, SASL EXTERNAL from the
//! certificate's common name, and the management API's view of a TLS connection.
//!
//! Certificates come from `tests/interop/tls/certs.sh` (openssl), the ones the pika, Go and
//! Java suites use against RabbitMQ and Warren.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use lapin::options::{BasicGetOptions, BasicPublishOptions};
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::BasicProperties;
use reqwest::Method;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_server::config::{CertLoginFrom, TlsOptions, Verify};
use warren_tests::http::Api;
use warren_tests::{bounded, declare_queue, unique, TestBroker};

/// The test CA, server and client certificates, in a directory removed with it.
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn make() -> Certs {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/tls/certs.sh");
        let status = std::process::Command::new("bash")
            .arg(&script)
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .status()
            .expect("bash runs certs.sh (it needs openssl)");
        assert!(
            status.success(),
            "{} failed: is openssl installed?",
            script.display()
        );
        Certs { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).expect("a certificate file")
    }

    /// lapin's TLS settings: trust the test CA, present `client` (`client`,
    /// `client-wrongca`, `client-expired`) if given.
    fn lapin(&self, client: Option<&str>) -> OwnedTLSConfig {
        OwnedTLSConfig {
            identity: client.map(|name| OwnedIdentity::PKCS8 {
                pem: self.read(&format!("{name}.pem")).into_bytes(),
                key: self.read(&format!("{name}.key")).into_bytes(),
            }),
            cert_chain: Some(self.read("ca.pem")),
        }
    }
}

/// A broker with a plain listener and a TLS one that asks for (and checks) client
/// certificates without requiring them, as the interop suites configure RabbitMQ.
async fn tls_broker(certs: &Certs) -> TestBroker {
    let (ca, cert, key) = (
        certs.path("ca.pem"),
        certs.path("server.pem"),
        certs.path("server.key"),
    );
    TestBroker::start_with(move |config| {
        config.amqps_listeners = vec!["127.0.0.1:0".into()];
        config.ssl_options = TlsOptions {
            cacertfile: Some(ca),
            certfile: Some(cert),
            keyfile: Some(key),
            verify: Verify::VerifyPeer,
            fail_if_no_peer_cert: false,
            versions: Vec::new(),
        };
        config.auth_mechanisms = ["PLAIN", "AMQPLAIN", "EXTERNAL", "ANONYMOUS"]
            .map(String::from)
            .to_vec();
        config.ssl_cert_login_from = CertLoginFrom::CommonName;
    })
    .await
}

fn amqps_url(broker: &TestBroker, credentials: &str, query: &str) -> String {
    let port = broker.amqps_addr().expect("an AMQPS listener").port();
    format!("amqps://{credentials}localhost:{port}/%2f{query}")
}

async fn connect(url: &str, tls: OwnedTLSConfig) -> lapin::Result<lapin::Connection> {
    let runtime = lapin::runtime::default_runtime()?;
    let connect = lapin::Connection::connect_with_config(
        url,
        lapin::ConnectionProperties::default(),
        tls,
        runtime,
    );
    tokio::time::timeout(Duration::from_secs(10), connect)
        .await
        .expect("the TLS connection attempt ends within 10 s")
}

/// Creates `user` with `password` and every permission in `/`.
async fn add_user(broker: &TestBroker, user: &str, password: &str) {
    let api = Api::new(broker);
    let (status, body) = api
        .send(
            Method::PUT,
            &format!("/api/users/{user}"),
            Some(json!({"password": password, "tags": ""})),
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
    let (status, body) = api
        .send(
            Method::PUT,
            &format!("/api/permissions/%2F/{user}"),
            Some(json!({"configure": ".*", "write": ".*", "read": ".*"})),
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
}

/// Publishes a message to a fresh queue and reads it back on `connection`.
async fn round_trip(connection: &lapin::Connection) {
    let channel = bounded!(connection.create_channel()).unwrap();
    let queue = unique("tls");
    declare_queue(&channel, &queue).await;
    let body = unique("body").into_bytes();
    bounded!(channel.basic_publish(
        "".into(),
        queue.as_str().into(),
        BasicPublishOptions::default(),
        &body,
        BasicProperties::default(),
    ))
    .unwrap();
    for _ in 0..50 {
        let got =
            bounded!(channel.basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true }))
                .unwrap();
        if let Some(message) = got {
            assert_eq!(message.delivery.data, body);
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the message published over TLS never arrived");
}

/// The management API's entry for the connection whose user is `user`.
async fn connection_entry(broker: &TestBroker, user: &str) -> serde_json::Value {
    let api = Api::new(broker);
    for _ in 0..50 {
        let connections = api.get("/api/connections").await;
        let entry = connections
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["user"] == user && c["ssl"] == true)
            .cloned();
        if let Some(entry) = entry {
            return entry;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no TLS connection of {user} in /api/connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp091_over_tls_with_and_without_a_client_certificate() {
    let certs = Certs::make();
    let broker = tls_broker(&certs).await;
    add_user(&broker, "plain-user", "pw").await;
    let url = amqps_url(&broker, "plain-user:pw@", "");
    let without = connect(&url, certs.lapin(None))
        .await
        .expect("TLS without a client certificate");
    round_trip(&without).await;
    let entry = connection_entry(&broker, "plain-user").await;
    assert_eq!(entry["auth_mechanism"], "PLAIN", "{entry}");
    assert_eq!(entry["ssl_protocol"], "tlsv1.3", "{entry}");
    assert!(
        entry["ssl_cipher"].as_str().unwrap().starts_with("TLS13_"),
        "{entry}"
    );
    assert_eq!(
        entry["peer_cert_subject"],
        serde_json::Value::Null,
        "{entry}"
    );
    assert_eq!(
        entry["port"],
        broker.amqps_addr().unwrap().port(),
        "{entry}"
    );
    bounded!(without.close(200, "OK".into())).unwrap();

    let with = connect(&url, certs.lapin(Some("client")))
        .await
        .expect("TLS with a client certificate");
    round_trip(&with).await;
    let entry = connection_entry(&broker, "plain-user").await;
    assert_eq!(
        entry["peer_cert_subject"], "O=warren-tests,CN=tls-user",
        "{entry}"
    );
    assert_eq!(entry["peer_cert_issuer"], "CN=warren test CA", "{entry}");
    bounded!(with.close(200, "OK".into())).unwrap();
    // The plain listener is still there, beside the TLS one, and the API lists both.
    let plain = broker.connect().await;
    round_trip(&plain).await;
    let overview = Api::new(&broker).get("/api/overview").await;
    let listeners: Vec<(String, u64)> = overview["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["protocol"].as_str().unwrap().to_owned(),
                l["port"].as_u64().unwrap(),
            )
        })
        .collect();
    let amqps = u64::from(broker.amqps_addr().unwrap().port());
    let amqp = u64::from(broker.addr().port());
    assert!(
        listeners.contains(&("amqp/ssl".into(), amqps)),
        "{listeners:?}"
    );
    assert!(listeners.contains(&("amqp".into(), amqp)), "{listeners:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_external_logs_in_as_the_certificates_common_name() {
    let certs = Certs::make();
    let broker = tls_broker(&certs).await;
    let url = amqps_url(&broker, "", "?auth_mechanism=external");
    // No such user yet: the certificate is good, the login is refused.
    let refused = connect(&url, certs.lapin(Some("client"))).await;
    assert!(
        refused.is_err(),
        "EXTERNAL logged in a user that does not exist"
    );
    add_user(&broker, "tls-user", "unused").await;
    let connection = connect(&url, certs.lapin(Some("client")))
        .await
        .expect("EXTERNAL login");
    round_trip(&connection).await;
    let entry = connection_entry(&broker, "tls-user").await;
    assert_eq!(entry["auth_mechanism"], "EXTERNAL", "{entry}");
    // Without a certificate there is no name to log in with.
    let refused = connect(&url, certs.lapin(None)).await;
    assert!(
        refused.is_err(),
        "EXTERNAL logged in without a client certificate"
    );
    round_trip(&connection).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_or_expired_client_certificates_and_plain_tcp_are_refused_and_others_carry_on() {
    let certs = Certs::make();
    let broker = tls_broker(&certs).await;
    let good = connect(&amqps_url(&broker, "guest:guest@", ""), certs.lapin(None))
        .await
        .expect("a good TLS client");
    for client in ["client-wrongca", "client-expired"] {
        let url = amqps_url(&broker, "guest:guest@", "");
        let refused = connect(&url, certs.lapin(Some(client))).await;
        assert!(refused.is_err(), "{client} was accepted");
    }
    // A plain AMQP client on the TLS port gets no AMQP answer (a TLS alert or nothing).
    let mut plain = TcpStream::connect(broker.amqps_addr().unwrap())
        .await
        .unwrap();
    plain.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
    let mut reply = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut reply)).await;
    assert!(
        read.is_ok(),
        "the broker keeps a plain client on the TLS port open"
    );
    assert!(
        !reply.starts_with(b"AMQP") && !reply.starts_with(&[1, 0, 0]),
        "{reply:?}"
    );
    round_trip(&good).await;
    let again = connect(
        &amqps_url(&broker, "guest:guest@", ""),
        certs.lapin(Some("client")),
    )
    .await
    .expect("a good TLS client after the refusals");
    round_trip(&again).await;
}

/// A rustls client that trusts the test CA and presents no certificate.
fn rustls_client(certs: &Certs) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(certs.path("ca.pem")).unwrap() {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp10_over_tls() {
    let certs = Certs::make();
    let broker = tls_broker(&certs).await;
    let (_c091, channel) = broker.channel().await;
    let queue = unique("tls10");
    declare_queue(&channel, &queue).await;
    let tcp = TcpStream::connect(broker.amqps_addr().unwrap())
        .await
        .unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let stream = bounded!(rustls_client(&certs).connect(name, tcp)).expect("TLS handshake");
    // The transport is TLS already: AMQP 1.0 runs over it as over TCP.
    let mut connection = bounded!(Connection::builder()
        .container_id(unique("tls10"))
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Plain {
            username: "guest".into(),
            password: "guest".into(),
        })
        .open_with_stream(stream))
    .expect("AMQP 1.0 opens over TLS");
    let mut session = bounded!(Session::begin(&mut connection)).unwrap();
    let address = format!("/queues/{queue}");
    let mut sender = bounded!(Sender::attach(&mut session, "s", address.as_str())).unwrap();
    // 20 s, not a step's 5: under CI's parallel tests the first transfer's disposition once
    // took longer (a hang still fails); issue 30's closing note tracks the investigation.
    bounded!(sender.send("over tls"), std::time::Duration::from_secs(20))
        .unwrap()
        .accepted_or_else(|o| o)
        .unwrap();
    let mut receiver = bounded!(Receiver::attach(&mut session, "r", address.as_str())).unwrap();
    let delivery = bounded!(receiver.recv::<Value>()).unwrap();
    assert_eq!(delivery.body(), &Value::String("over tls".into()));
    bounded!(receiver.accept(&delivery)).unwrap();
    bounded!(sender.close()).unwrap();
    bounded!(receiver.close()).unwrap();
    bounded!(session.end()).unwrap();
    bounded!(connection.close()).unwrap();
}
