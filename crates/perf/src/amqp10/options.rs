//! quiver's flags for `warren perf amqp10`.

use std::path::PathBuf;

use crate::error::PerfError;
use crate::uri::Endpoint;

pub const HELP: &str = "\
usage: warren perf amqp10 URL [flags]

Sends and receives messages over AMQP 1.0 on two connections, as quiver's arrow pair does,
and prints quiver's RESULTS block.

URL: quiver's form //HOST[:PORT]/ADDRESS (e.g. //127.0.0.1:5672//queues/q), or
     amqp://[USER:PASSWORD@]HOST[:PORT]/ADDRESS (e.g. amqp://guest:guest@localhost/queues/q).
     ADDRESS: /queues/NAME (RabbitMQ 4, Warren); for RabbitMQ 3.x's rabbitmq_amqp1_0 plugin
     /amq/queue/NAME (or /queues/NAME with --address-v1; used by itself when the broker says
     it is RabbitMQ 3.x). The queue must exist. User guest/guest unless given.

flags:
  --count N             messages to send (k, m suffixes: 1m = 1,000,000) [1m unless --duration]
  --duration D          stop sending after D (s, m suffixes) [none]
  --body-size N         body bytes (at least 12: the latency stamp) [100]
  --credit N            receiver link credit, topped up when half is used [1000]
  --transaction-size N  accepted and ignored (no transactions)
  --durable             durable messages (header durable = true)
  --presettled          the sender sends pre-settled (alias --settlement presettled)
  --timeout S           give up after S seconds [10 + expected run]
  --address-v1          translate /queues/NAME to the 3.x plugin's /amq/queue/NAME
  --output DIR          write summary.json into DIR
  --json FILE           write the summary (count, duration, rates, latencies) as JSON
  --quiet               no progress lines
";

#[derive(Clone, Debug)]
pub struct Amqp10Options {
    pub endpoint: Endpoint,
    pub address: String,
    pub count: u64,
    pub duration_s: Option<f64>,
    pub body_size: usize,
    pub credit: u32,
    pub durable: bool,
    pub presettled: bool,
    pub timeout_s: u64,
    pub address_v1: bool,
    pub output: Option<PathBuf>,
    pub json: Option<PathBuf>,
    pub quiet: bool,
}

/// `1m`, `20k`, `1000`, `1,000,000`.
pub fn parse_count(text: &str) -> Result<u64, PerfError> {
    let clean: String = text.chars().filter(|c| *c != ',' && *c != '_').collect();
    let lower = clean.to_ascii_lowercase();
    let (digits, scale) = if let Some(d) = lower.strip_suffix('m') {
        (d, 1_000_000)
    } else if let Some(d) = lower.strip_suffix('k') {
        (d, 1_000)
    } else {
        (lower.as_str(), 1)
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| {
            PerfError::usage(format!(
                "bad count '{text}' (expected e.g. 1000, 20k or 1m)"
            ))
        })
}

fn parse_seconds(text: &str) -> Result<f64, PerfError> {
    let (digits, scale) = if let Some(d) = text.strip_suffix('m') {
        (d, 60.0)
    } else {
        (text.strip_suffix('s').unwrap_or(text), 1.0)
    };
    digits
        .parse::<f64>()
        .ok()
        .filter(|v| *v > 0.0)
        .map(|v| v * scale)
        .ok_or_else(|| {
            PerfError::usage(format!(
                "bad duration '{text}' (expected e.g. 10, 10s or 2m)"
            ))
        })
}

/// Splits the URL into an endpoint and the AMQP 1.0 address.
pub fn parse_url(url: &str) -> Result<(Endpoint, String), PerfError> {
    let bad = |why: &str| {
        PerfError::usage(format!(
            "bad URL '{url}': {why} (expected //HOST[:PORT]/ADDRESS as quiver, e.g. //127.0.0.1:5672//queues/q, or amqp://USER:PASSWORD@HOST:PORT/queues/q)"
        ))
    };
    let (quiver_form, rest) = if let Some(rest) = url.strip_prefix("amqp://") {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("//") {
        (true, rest)
    } else if url.contains("://") {
        return Err(bad("only amqp:// is supported"));
    } else {
        return Err(bad("no host"));
    };
    let (authority, path) = rest.split_once('/').ok_or_else(|| bad("no address"))?;
    let address = if quiver_form {
        path.to_owned()
    } else {
        // amqp://host/queues/q keeps its slash; amqp://host//queues/q is quiver's double slash
        let path = format!("/{path}");
        match path.strip_prefix('/') {
            Some(rest) if rest.starts_with('/') => rest.to_owned(),
            _ => path,
        }
    };
    if address.is_empty() || address == "/" {
        return Err(bad("no address"));
    }
    let endpoint = Endpoint::parse(&format!("amqp://{authority}"))?;
    Ok((endpoint, address))
}

/// The 3.x plugin's form of a v2 address: `/queues/NAME` becomes `/amq/queue/NAME`,
/// `/exchanges/X/K` becomes `/exchange/X/K`.
pub fn v1_address(address: &str) -> String {
    if let Some(name) = address.strip_prefix("/queues/") {
        format!("/amq/queue/{name}")
    } else if let Some(rest) = address.strip_prefix("/exchanges/") {
        format!("/exchange/{rest}")
    } else {
        address.to_owned()
    }
}

impl Amqp10Options {
    /// `None` for `--help`.
    pub fn parse(args: &[String]) -> Result<Option<Amqp10Options>, PerfError> {
        let mut given = Given::default();
        let mut i = 0;
        while i < args.len() {
            let arg = args[i].as_str();
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
                _ => (arg, None),
            };
            let mut value = || -> Result<String, PerfError> {
                if let Some(v) = inline.clone() {
                    return Ok(v);
                }
                i += 1;
                args.get(i)
                    .cloned()
                    .ok_or_else(|| PerfError::usage(format!("{flag} needs a value")))
            };
            if !given.apply(flag, arg, &mut value)? {
                return Ok(None);
            }
            i += 1;
        }
        given.into_options().map(Some)
    }
}

/// The command line as given, before the defaults that depend on each other (count, timeout).
struct Given {
    url: Option<String>,
    count: Option<u64>,
    duration_s: Option<f64>,
    body_size: usize,
    credit: u32,
    durable: bool,
    presettled: bool,
    timeout_s: Option<u64>,
    address_v1: bool,
    output: Option<PathBuf>,
    json: Option<PathBuf>,
    quiet: bool,
}

impl Default for Given {
    fn default() -> Given {
        Given {
            url: None,
            count: None,
            duration_s: None,
            body_size: 100,
            credit: 1000,
            durable: false,
            presettled: false,
            timeout_s: None,
            address_v1: false,
            output: None,
            json: None,
            quiet: false,
        }
    }
}

impl Given {
    /// Takes one flag (`value` reads its value) or the URL; `false` for `--help`.
    fn apply(
        &mut self,
        flag: &str,
        arg: &str,
        value: &mut dyn FnMut() -> Result<String, PerfError>,
    ) -> Result<bool, PerfError> {
        match flag {
            "-h" | "--help" => return Ok(false),
            "--count" | "-m" => self.count = Some(parse_count(&value()?)?),
            "--duration" | "-d" => self.duration_s = Some(parse_seconds(&value()?)?),
            "--body-size" => self.body_size = parse_body_size(&value()?)?,
            "--credit" => self.credit = parse_credit(&value()?)?,
            "--transaction-size" => {
                value()?;
            }
            "--durable" => self.durable = true,
            "--presettled" => self.presettled = true,
            "--settlement" => self.presettled = parse_settlement(&value()?)?,
            "--timeout" => self.timeout_s = Some(parse_seconds(&value()?)?.ceil() as u64),
            "--address-v1" => self.address_v1 = true,
            "--output" => self.output = Some(PathBuf::from(value()?)),
            "--json" => self.json = Some(PathBuf::from(value()?)),
            "--quiet" | "-q" => self.quiet = true,
            "--verbose" | "--init-only" => {}
            _ if arg.starts_with('-') && arg != "-" => {
                return Err(PerfError::usage(format!(
                    "unknown flag '{arg}' (warren perf amqp10 --help lists them)"
                )))
            }
            _ if self.url.is_none() => self.url = Some(arg.to_owned()),
            _ => return Err(PerfError::usage(format!("unexpected argument '{arg}'"))),
        }
        Ok(true)
    }

    /// The options: a count of 1m unless `--duration` bounds the run, and a timeout of 10 s
    /// more than the run should take at 2,000 msg/s (at most an hour).
    fn into_options(self) -> Result<Amqp10Options, PerfError> {
        let url = self.url.ok_or_else(|| {
            PerfError::usage("warren perf amqp10 needs a URL, e.g. //127.0.0.1:5672//queues/q")
        })?;
        let (endpoint, mut address) = parse_url(&url)?;
        if self.address_v1 {
            address = v1_address(&address);
        }
        let count = match (self.count, self.duration_s) {
            (Some(c), _) => c,
            (None, Some(_)) => u64::MAX,
            (None, None) => 1_000_000,
        };
        if count == 0 {
            return Err(PerfError::usage("--count must be at least 1"));
        }
        let expected_s = self
            .duration_s
            .unwrap_or(count as f64 / 2_000.0)
            .min(3600.0);
        Ok(Amqp10Options {
            endpoint,
            address,
            count,
            duration_s: self.duration_s,
            body_size: crate::body::body_size(self.body_size),
            credit: self.credit,
            durable: self.durable,
            presettled: self.presettled,
            timeout_s: self.timeout_s.unwrap_or(10 + expected_s.ceil() as u64),
            address_v1: self.address_v1,
            output: self.output,
            json: self.json,
            quiet: self.quiet,
        })
    }
}

fn parse_body_size(text: &str) -> Result<usize, PerfError> {
    parse_count(text)?
        .try_into()
        .map_err(|_| PerfError::usage(format!("bad --body-size '{text}'")))
}

fn parse_credit(text: &str) -> Result<u32, PerfError> {
    parse_count(text)?
        .try_into()
        .ok()
        .filter(|c| *c > 0)
        .ok_or_else(|| PerfError::usage(format!("bad --credit '{text}' (1 or more)")))
}

/// quiver's `--settlement`: `true` for pre-settled.
fn parse_settlement(text: &str) -> Result<bool, PerfError> {
    match text {
        "presettled" | "settled" | "at-most-once" => Ok(true),
        "unsettled" | "at-least-once" => Ok(false),
        _ => Err(PerfError::usage(format!(
            "bad --settlement '{text}' (presettled or unsettled)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Amqp10Options {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        Amqp10Options::parse(&args).unwrap().unwrap()
    }

    #[test]
    fn quivers_command_line() {
        let o = parse("//127.0.0.1:5672//queues/my-classic-queue --durable --count 1m --body-size 12 --credit 200");
        assert_eq!(o.endpoint.address(), "127.0.0.1:5672");
        assert_eq!(o.endpoint.user, "guest");
        assert_eq!(o.address, "/queues/my-classic-queue");
        assert_eq!(o.count, 1_000_000);
        assert_eq!(o.body_size, 12);
        assert_eq!(o.credit, 200);
        assert!(o.durable);
        let o = parse("amqp://u:p@localhost:5673/queues/q --count 20k --address-v1");
        assert_eq!(o.address, "/amq/queue/q");
        assert_eq!(o.endpoint.user, "u");
        assert_eq!(o.count, 20_000);
        assert_eq!(parse("//h/q").address, "q");
        assert_eq!(parse("amqp://h//queues/q").address, "/queues/q");
        assert!(Amqp10Options::parse(&["//h".to_owned()]).is_err());
        assert!(Amqp10Options::parse(&["//h/q".to_owned(), "--bogus".to_owned()]).is_err());
    }
}
