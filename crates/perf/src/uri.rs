//! `Endpoint`: the broker to load, from an AMQP URI as RabbitMQ's clients read it:
//! `amqp://user:password@host:port/vhost?heartbeat=N&frame_max=N&channel_max=N`.
//!
//! Missing parts take the clients' defaults: guest/guest, localhost, 5672, vhost `/`. User,
//! password and vhost are percent-decoded (`%2f` is `/`); an empty vhost (`amqp://host/`) is
//! taken as `/`, since no broker has a vhost named "".

use crate::error::PerfError;

/// Where and as whom to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub vhost: String,
    /// Heartbeat to ask for in tune-ok, seconds; `None`: this tool's default (0, none).
    pub heartbeat: Option<u16>,
    pub frame_max: Option<u32>,
    pub channel_max: Option<u16>,
}

const DEFAULT_PORT: u16 = 5672;

impl Endpoint {
    /// Parses an `amqp://` URI. `amqps://` is refused: this tool does not speak TLS yet.
    pub fn parse(uri: &str) -> Result<Endpoint, PerfError> {
        let bad = |why: &str| {
            PerfError::usage(format!(
                "bad URI '{uri}': {why} (expected amqp://user:password@host:port/vhost)"
            ))
        };
        let rest = match uri.split_once("://") {
            Some(("amqp", rest)) => rest,
            Some(("amqps", _)) => return Err(bad("TLS (amqps) is not supported by warren perf")),
            Some((scheme, _)) => return Err(bad(&format!("unknown scheme '{scheme}'"))),
            None => return Err(bad("no scheme")),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest
            .split_once('/')
            .map_or((rest, None), |(a, p)| (a, Some(p)));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hostport)) => (Some(userinfo), hostport),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(info) => {
                let (user, password) = info.split_once(':').unwrap_or((info, ""));
                (
                    decode(user).map_err(|e| bad(&e))?,
                    decode(password).map_err(|e| bad(&e))?,
                )
            }
            None => ("guest".to_owned(), "guest".to_owned()),
        };
        let (host, port) = split_host_port(hostport).map_err(|e| bad(&e))?;
        let vhost = match path.map(decode).transpose().map_err(|e| bad(&e))? {
            Some(vhost) if !vhost.is_empty() => vhost,
            _ => "/".to_owned(),
        };
        let mut endpoint = Endpoint {
            host,
            port,
            user,
            password,
            vhost,
            heartbeat: None,
            frame_max: None,
            channel_max: None,
        };
        endpoint.apply_query(query).map_err(|e| bad(&e))?;
        Ok(endpoint)
    }

    /// `host:port`, for messages and `connect`.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The URI without the password, for reports.
    pub fn display(&self) -> String {
        let vhost = if self.vhost == "/" {
            "%2f"
        } else {
            &self.vhost
        };
        format!("amqp://{}@{}/{vhost}", self.user, self.address())
    }

    fn apply_query(&mut self, query: &str) -> Result<(), String> {
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let number = |max: u64| -> Result<u64, String> {
                value
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n <= max)
                    .ok_or_else(|| format!("{key}={value} is not a number up to {max}"))
            };
            match key {
                "heartbeat" => self.heartbeat = Some(number(u64::from(u16::MAX))? as u16),
                "frame_max" => self.frame_max = Some(number(u64::from(u32::MAX))? as u32),
                "channel_max" => self.channel_max = Some(number(u64::from(u16::MAX))? as u16),
                // accepted by RabbitMQ's clients; nothing here for this tool to change
                "connection_timeout" | "auth_mechanism" => {}
                other => {
                    return Err(format!(
                        "unknown query parameter '{other}' (known: heartbeat, frame_max, \
                         channel_max, connection_timeout)"
                    ))
                }
            }
        }
        Ok(())
    }
}

fn split_host_port(hostport: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or("unclosed '[' in the host")?;
        (host, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (hostport, None),
        }
    };
    let port = match port {
        Some(text) => text
            .parse::<u16>()
            .map_err(|_| format!("port '{text}' is not a number from 1 to 65535"))?,
        None => DEFAULT_PORT,
    };
    let host = if host.is_empty() { "localhost" } else { host };
    Ok((host.to_owned(), port))
}

/// Percent-decoding of one URI component.
fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        if byte == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape in '{text}'"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(byte);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("'{text}' is not UTF-8 once decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_uri() {
        let e = Endpoint::parse("amqp://bob:p%40ss@broker:5673/prod%2fa?heartbeat=5").unwrap();
        assert_eq!(
            (e.user.as_str(), e.password.as_str(), e.host.as_str()),
            ("bob", "p@ss", "broker")
        );
        assert_eq!(
            (e.port, e.vhost.as_str(), e.heartbeat),
            (5673, "prod/a", Some(5))
        );
        assert_eq!(e.display(), "amqp://bob@broker:5673/prod/a");
    }

    #[test]
    fn defaults_and_ipv6() {
        let e = Endpoint::parse("amqp://").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.vhost.as_str()),
            ("localhost", 5672, "/")
        );
        assert_eq!((e.user.as_str(), e.password.as_str()), ("guest", "guest"));
        let e = Endpoint::parse("amqp://[::1]:5999/%2f").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.address()),
            ("::1", 5999, "[::1]:5999".into())
        );
        assert_eq!(Endpoint::parse("amqp://h/").unwrap().vhost, "/");
    }

    #[test]
    fn errors_name_the_uri_and_the_problem() {
        let text = |uri: &str| Endpoint::parse(uri).unwrap_err().to_string();
        assert!(text("localhost:5672").contains("'localhost:5672': no scheme"));
        assert!(text("amqps://h").contains("TLS"));
        assert!(text("amqp://h:99999").contains("port '99999'"));
        assert!(text("amqp://h?bogus=1").contains("unknown query parameter 'bogus'"));
        assert!(text("amqp://h/%zz").contains("bad percent escape"));
    }
}
