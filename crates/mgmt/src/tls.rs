//! TLS for every listener (AMQPS, HTTPS for the management API and Prometheus), with rustls
//! and RabbitMQ's settings: `ssl_options.cacertfile`, `certfile`, `keyfile`, `verify`,
//! `fail_if_no_peer_cert` and `versions.N` (see RabbitMQ's ssl.md). The same options serve
//! `management.ssl.*` and `prometheus.ssl.*`.
//!
//! A handshake that fails (a client certificate from an unknown CA or out of its validity, a
//! client speaking plain TCP to the TLS port, a client that does not trust the broker) is
//! logged with the peer and the listener, and costs nothing else: the socket is dropped and
//! every other client carries on.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ServerConnection, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use serde::Deserialize;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
pub use warren_core::registry::TlsSession;

/// How long a client has to finish its TLS handshake (RabbitMQ's `ssl_handshake_timeout`,
/// 5 s by default).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A listener's TLS settings, named as RabbitMQ's `ssl_options.*` keys.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsOptions {
    /// The CA certificates client certificates must chain to (PEM).
    pub cacertfile: Option<PathBuf>,
    /// The broker's certificate chain (PEM), its own certificate first.
    pub certfile: Option<PathBuf>,
    /// The broker's private key (PEM: PKCS#8, PKCS#1 or SEC1), not encrypted.
    pub keyfile: Option<PathBuf>,
    /// Whether clients are asked for a certificate that must chain to `cacertfile`.
    pub verify: Verify,
    /// With `verify_peer`, whether a client without a certificate is refused.
    pub fail_if_no_peer_cert: bool,
    /// Protocol versions offered (`tlsv1.3`, `tlsv1.2`); empty offers both.
    pub versions: Vec<String>,
}

/// RabbitMQ's `ssl_options.verify`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verify {
    /// No client certificate is asked for (Erlang's and RabbitMQ's default).
    #[default]
    VerifyNone,
    /// A client certificate is asked for and, when sent, must chain to `cacertfile`.
    VerifyPeer,
}

/// The rustls configuration `options` describe, for the listener named `what` (which the
/// error names, with the file and the fix).
pub fn server_config(options: &TlsOptions, what: &str) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let missing = |key: &str| {
        format!("{what}: TLS needs {key} (the PEM file with the broker's {key}); set it")
    };
    let certfile = options
        .certfile
        .as_deref()
        .ok_or_else(|| missing("certfile"))?;
    let keyfile = options
        .keyfile
        .as_deref()
        .ok_or_else(|| missing("keyfile"))?;
    let chain = certificates(certfile, what)?;
    let key = PrivateKeyDer::from_pem_file(keyfile).map_err(|error| {
        format!(
            "{what}: cannot read a private key from keyfile {}: {error} (an unencrypted PEM \
             key is needed)",
            keyfile.display()
        )
    })?;
    let versions = protocol_versions(&options.versions, what)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|error| format!("{what}: {error}"))?;
    let builder = match options.verify {
        Verify::VerifyNone => builder.with_no_client_auth(),
        Verify::VerifyPeer => {
            let cacertfile = options.cacertfile.as_deref().ok_or_else(|| {
                format!(
                    "{what}: verify = verify_peer needs cacertfile, the CA certificates client \
                     certificates chain to"
                )
            })?;
            let mut roots = RootCertStore::empty();
            for ca in certificates(cacertfile, what)? {
                roots.add(ca).map_err(|error| {
                    format!(
                        "{what}: cacertfile {} holds a certificate rustls cannot use as a CA: \
                         {error}",
                        cacertfile.display()
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider);
            let verifier = if options.fail_if_no_peer_cert {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            let verifier = verifier
                .build()
                .map_err(|error| format!("{what}: client certificate checks: {error}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|error| {
        format!(
            "{what}: certfile {} and keyfile {} do not make a usable certificate: {error}",
            certfile.display(),
            keyfile.display()
        )
    })?;
    Ok(Arc::new(config))
}

fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let read = CertificateDer::pem_file_iter(path)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>());
    match read {
        Ok(certificates) if !certificates.is_empty() => Ok(certificates),
        Ok(_) => Err(format!(
            "{what}: {} holds no PEM certificate",
            path.display()
        )),
        Err(error) => Err(format!(
            "{what}: cannot read certificates from {}: {error}",
            path.display()
        )),
    }
}

fn protocol_versions(
    names: &[String],
    what: &str,
) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    if names.is_empty() {
        return Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]);
    }
    names
        .iter()
        .map(|name| match name.as_str() {
            "tlsv1.3" => Ok(&rustls::version::TLS13),
            "tlsv1.2" => Ok(&rustls::version::TLS12),
            "tlsv1.1" | "tlsv1" | "sslv3" => Err(format!(
                "{what}: {name} is not offered (it is deprecated and rustls lacks it); use \
                 tlsv1.3 and tlsv1.2"
            )),
            other => Err(format!(
                "{what}: unknown TLS version '{other}'; use tlsv1.3 or tlsv1.2"
            )),
        })
        .collect()
}

/// What `connection` negotiated, once its handshake is done.
pub fn session(connection: &ServerConnection) -> TlsSession {
    let protocol = match connection.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_2) => "tlsv1.2",
        _ => "tlsv1.3",
    };
    let cipher = connection
        .negotiated_cipher_suite()
        .and_then(|suite| suite.suite().as_str())
        .unwrap_or("unknown")
        .to_owned();
    let mut session = TlsSession {
        protocol,
        cipher,
        ..TlsSession::default()
    };
    let leaf = connection
        .peer_certificates()
        .and_then(|chain| chain.first());
    if let Some(leaf) = leaf {
        if let Ok((_, certificate)) = x509_parser::parse_x509_certificate(leaf.as_ref()) {
            session.peer_cert_subject = Some(distinguished_name(certificate.subject()));
            session.peer_cert_issuer = Some(distinguished_name(certificate.issuer()));
            let validity = certificate.validity();
            session.peer_cert_validity = Some(format!(
                "{{not_before,{}}},{{not_after,{}}}",
                validity.not_before, validity.not_after
            ));
            session.peer_cert_common_name = certificate
                .subject()
                .iter_common_name()
                .next()
                .and_then(|cn| cn.as_str().ok())
                .map(str::to_owned);
        }
    }
    session
}

/// A name as RabbitMQ's `rabbit_cert_info` prints it: RDNs last first, joined by commas,
/// each `TYPE=value` with RFC 4514's escapes.
fn distinguished_name(name: &x509_parser::x509::X509Name<'_>) -> String {
    let registry = x509_parser::objects::oid_registry();
    let mut rdns: Vec<String> = Vec::new();
    for rdn in name.iter_rdn() {
        let mut text = String::new();
        for (index, attribute) in rdn.iter().enumerate() {
            if index > 0 {
                text.push('+');
            }
            let oid = attribute.attr_type();
            match x509_parser::objects::oid2abbrev(oid, registry) {
                Ok(abbrev) => text.push_str(abbrev),
                Err(_) => text.push_str(&oid.to_id_string()),
            }
            text.push('=');
            match attribute.as_str() {
                Ok(value) => escape_rfc4514(value, &mut text),
                Err(_) => {
                    text.push('#');
                    for byte in attribute.attr_value().data.iter() {
                        let _ = write!(text, "{byte:02x}");
                    }
                }
            }
        }
        rdns.push(text);
    }
    rdns.reverse();
    rdns.join(",")
}

fn escape_rfc4514(value: &str, out: &mut String) {
    let last = value.chars().count().saturating_sub(1);
    for (index, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=')
            || (index == 0 && matches!(c, '#' | ' '))
            || (index == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
}

/// Runs the TLS handshake of a client accepted on the listener named `what`, within
/// [`HANDSHAKE_TIMEOUT`]; a failure is logged with the peer and gives `None`.
pub async fn accept(
    acceptor: &TlsAcceptor,
    socket: TcpStream,
    peer: SocketAddr,
    what: &str,
) -> Option<TlsStream<TcpStream>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(error)) => {
            tracing::warn!(%peer, "TLS handshake with {peer} on the {what} listener failed: {error}");
            None
        }
        Err(_) => {
            tracing::warn!(
                %peer,
                "TLS handshake with {peer} on the {what} listener failed: not finished within {} s",
                HANDSHAKE_TIMEOUT.as_secs()
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4514_escapes() {
        let mut out = String::new();
        escape_rfc4514("#a,b+c ", &mut out);
        assert_eq!(out, "\\#a\\,b\\+c\\ ");
    }

    #[test]
    fn versions_are_rabbitmqs_names() {
        assert_eq!(
            protocol_versions(&["tlsv1.3".into()], "x").unwrap().len(),
            1
        );
        let error = protocol_versions(&["tlsv1.1".into()], "AMQPS").unwrap_err();
        assert!(error.contains("tlsv1.1"), "{error}");
        assert!(protocol_versions(&["tls9".into()], "x").is_err());
    }

    #[test]
    fn missing_files_are_named() {
        let options = TlsOptions {
            certfile: Some("/nonexistent/server.pem".into()),
            keyfile: Some("/nonexistent/server.key".into()),
            ..TlsOptions::default()
        };
        let error = server_config(&options, "AMQPS listener").unwrap_err();
        assert!(error.contains("/nonexistent/server.pem"), "{error}");
        let error = server_config(&TlsOptions::default(), "AMQPS listener").unwrap_err();
        assert!(error.contains("certfile"), "{error}");
    }
}
