//! What both AMQP versions share of SASL: which mechanisms a client is offered, the PLAIN
//! response, and the name SASL EXTERNAL takes from a client certificate (RabbitMQ's
//! `rabbit_auth_mechanism_ssl`).

use warren_core::registry::TlsSession;

use crate::config::{CertLoginFrom, Config, Verify};

/// The mechanisms offered to a client: those of `implemented` (its protocol's) that
/// `auth_mechanisms` lists, in that setting's order; EXTERNAL only over TLS and ANONYMOUS
/// only from loopback, as RabbitMQ's `should_offer`.
pub fn offered(
    config: &Config,
    implemented: &[&'static str],
    tls: bool,
    loopback: bool,
) -> Vec<&'static str> {
    config
        .auth_mechanisms
        .iter()
        .filter_map(|name| implemented.iter().find(|m| **m == name.as_str()).copied())
        .filter(|m| *m != "EXTERNAL" || tls)
        .filter(|m| *m != "ANONYMOUS" || loopback)
        .collect()
}

/// The user SASL EXTERNAL logs in as: the client certificate's name that
/// `ssl_cert_login_from` picks, or why there is none (for the log).
pub fn certificate_name(config: &Config, tls: Option<&TlsSession>) -> Result<String, String> {
    let Some(tls) = tls else {
        return Err("not a TLS-enabled connection".into());
    };
    if config.ssl_options.verify != Verify::VerifyPeer {
        return Err(
            "TLS configuration is unsafe: ssl_options.verify is not verify_peer, so client \
             certificates are not checked"
                .into(),
        );
    }
    if tls.peer_cert_subject.is_none() {
        return Err("connection peer presented no TLS (x.509) certificate".into());
    }
    let name = match config.ssl_cert_login_from {
        CertLoginFrom::CommonName => tls.peer_cert_common_name.clone(),
        CertLoginFrom::DistinguishedName => tls.peer_cert_subject.clone(),
    };
    name.ok_or_else(|| "no name found in the client certificate".into())
}

/// The user and password of a SASL PLAIN response: `authzid NUL authcid NUL password`.
pub fn parse_plain(response: &[u8]) -> Option<(String, String)> {
    let mut parts = response.split(|b| *b == 0);
    let _authzid = parts.next()?;
    let user = std::str::from_utf8(parts.next()?).ok()?;
    let password = std::str::from_utf8(parts.next()?).ok()?;
    Some((user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_over_tls_only_and_anonymous_from_loopback_only() {
        let config = Config {
            auth_mechanisms: vec!["EXTERNAL".into(), "ANONYMOUS".into(), "PLAIN".into()],
            ..Config::default()
        };
        let all = ["PLAIN", "EXTERNAL", "ANONYMOUS"];
        assert_eq!(
            offered(&config, &all, true, true),
            ["EXTERNAL", "ANONYMOUS", "PLAIN"]
        );
        assert_eq!(offered(&config, &all, false, false), ["PLAIN"]);
        assert_eq!(
            offered(&config, &["PLAIN", "AMQPLAIN"], true, true),
            ["PLAIN"]
        );
    }

    #[test]
    fn the_certificate_name_follows_ssl_cert_login_from() {
        let session = TlsSession {
            peer_cert_subject: Some("O=warren-tests,CN=tls-user".into()),
            peer_cert_common_name: Some("tls-user".into()),
            ..TlsSession::default()
        };
        let mut config = Config::default();
        assert!(certificate_name(&config, Some(&session))
            .unwrap_err()
            .contains("unsafe"));
        config.ssl_options.verify = Verify::VerifyPeer;
        assert_eq!(
            certificate_name(&config, Some(&session)).unwrap(),
            "O=warren-tests,CN=tls-user"
        );
        config.ssl_cert_login_from = CertLoginFrom::CommonName;
        assert_eq!(
            certificate_name(&config, Some(&session)).unwrap(),
            "tls-user"
        );
        assert!(certificate_name(&config, None).is_err());
        let no_cert = TlsSession::default();
        assert!(certificate_name(&config, Some(&no_cert))
            .unwrap_err()
            .contains("no TLS (x.509) certificate"));
    }
}
