//! The blocking HTTP client (ureq) and where the broker is: flags, WARREN_CTL_URL, defaults.

use std::io::Read;
use std::time::Duration;

use base64::Engine;

use crate::plan::Request;

/// Where the API is and who asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub scheme: String,
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    /// A path before /api (an API behind a reverse proxy), without a trailing slash.
    pub prefix: String,
}

impl Default for Target {
    fn default() -> Target {
        Target {
            scheme: "http".to_string(),
            host: "127.0.0.1".to_string(),
            port: 15672,
            user: "guest".to_string(),
            password: "guest".to_string(),
            prefix: String::new(),
        }
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `http[s]://[user[:password]@]host[:port][/prefix]` onto the defaults.
pub fn parse_url(url: &str) -> Result<Target, String> {
    let mut target = Target::default();
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("URL without scheme: {url} (e.g. http://127.0.0.1:15672)"))?;
    target.scheme = scheme.to_ascii_lowercase();
    if target.scheme != "http" && target.scheme != "https" {
        return Err(format!("URL scheme must be http or https: {url}"));
    }
    if target.scheme == "https" {
        target.port = 443;
    }
    let (authority, prefix) = match rest.find('/') {
        Some(at) => (&rest[..at], rest[at..].trim_end_matches('/')),
        None => (rest, ""),
    };
    target.prefix = prefix.to_string();
    let host_port = match authority.rsplit_once('@') {
        Some((userinfo, host_port)) => {
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            target.user = percent_decode(user);
            target.password = percent_decode(password);
            host_port
        }
        None => authority,
    };
    // [v6 address]:port, host:port or host.
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("bad IPv6 address in URL: {url}"))?;
        (format!("[{host}]"), after.strip_prefix(':'))
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host.to_string(), Some(port)),
            None => (host_port.to_string(), None),
        }
    };
    if host.is_empty() {
        return Err(format!("URL without host: {url}"));
    }
    target.host = host;
    if let Some(port) = port {
        target.port = port
            .parse()
            .map_err(|_| format!("bad port in URL: {url}"))?;
    }
    Ok(target)
}

/// An answer: status and body text (empty for 201/204).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

pub struct Client {
    agent: ureq::Agent,
    target: Target,
    authorization: String,
}

impl Client {
    pub fn new(target: Target) -> Client {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .build();
        let credentials = format!("{}:{}", target.user, target.password);
        let authorization = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(credentials)
        );
        Client {
            agent,
            target,
            authorization,
        }
    }

    pub fn url(&self, path: &str) -> String {
        let t = &self.target;
        format!("{}://{}:{}{}{path}", t.scheme, t.host, t.port, t.prefix)
    }

    /// Sends a request; any HTTP status is an answer, only transport failures are errors.
    pub fn send(&self, request: &Request, raw_body: Option<&str>) -> Result<Response, String> {
        let call = self
            .agent
            .request(request.method.as_str(), &self.url(&request.path))
            .set("Authorization", &self.authorization);
        // No Accept header: RabbitMQ answers DELETE .../contents (purge) with 406 to
        // `Accept: application/json`.
        let body = match (raw_body, &request.body) {
            (Some(text), _) => Some(text.to_string()),
            (None, Some(json)) => Some(json.to_string()),
            (None, None) => None,
        };
        let result = match body {
            Some(body) => call
                .set("Content-Type", "application/json")
                .send_string(&body),
            None => call.call(),
        };
        let response = match result {
            Ok(response) => response,
            Err(ureq::Error::Status(_, response)) => response,
            Err(ureq::Error::Transport(error)) => return Err(self.transport_error(&error)),
        };
        let status = response.status();
        let mut body = String::new();
        response
            .into_reader()
            .take(1 << 30)
            .read_to_string(&mut body)
            .map_err(|error| format!("reading the answer from {}: {error}", self.where_()))?;
        Ok(Response { status, body })
    }

    fn where_(&self) -> String {
        format!("{}:{}", self.target.host, self.target.port)
    }

    fn transport_error(&self, error: &ureq::Transport) -> String {
        match error.kind() {
            ureq::ErrorKind::ConnectionFailed | ureq::ErrorKind::Dns => format!(
                "cannot connect to {} ({error}); check that the broker runs with its HTTP API \
                 on that port (warren server --http-port N; RabbitMQ: the management plugin), \
                 or give --host/--port or WARREN_CTL_URL",
                self.where_()
            ),
            ureq::ErrorKind::UnknownScheme => format!(
                "{error}: this warren ctl was built without https (cargo feature `tls` of \
                 warren-ctl)"
            ),
            _ => format!("{}: {error}", self.where_()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("http://guest:guest@127.0.0.1:15672").unwrap(),
            Target::default()
        );
        let target = parse_url("https://ad%40min:p%3Ass@broker.example/rabbit/").unwrap();
        assert_eq!(target.scheme, "https");
        assert_eq!(target.host, "broker.example");
        assert_eq!(target.port, 443);
        assert_eq!(target.user, "ad@min");
        assert_eq!(target.password, "p:ss");
        assert_eq!(target.prefix, "/rabbit");
        let target = parse_url("http://[::1]:8080").unwrap();
        assert_eq!((target.host.as_str(), target.port), ("[::1]", 8080));
        assert!(parse_url("127.0.0.1:15672").is_err());
        assert!(parse_url("ftp://x").is_err());
        assert!(parse_url("http://x:notaport").is_err());
        assert!(parse_url("http://").is_err());
    }

    #[test]
    fn request_urls() {
        let client = Client::new(parse_url("http://u:p@localhost:1234/pre").unwrap());
        assert_eq!(
            client.url("/api/queues/%2F"),
            "http://localhost:1234/pre/api/queues/%2F"
        );
    }
}
