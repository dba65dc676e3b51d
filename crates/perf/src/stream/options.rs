//! stream-perf-test's flags for `warren perf stream`: the same long names (and short ones),
//! the same defaults, checked once here.

use std::time::Duration;

use warren_proto::stream::OffsetSpec;

use crate::error::PerfError;
use crate::uri::Endpoint;

/// The stream protocol's port when a URI names none.
pub const STREAM_PORT: u16 = 5552;
/// A run given no `--time` stops after this long.
pub const TIME_MAX_DEFAULT: Duration = Duration::from_secs(3600);

pub const HELP: &str = "\
usage: warren perf stream [flags]

Publishes to and consumes from RabbitMQ streams over the stream protocol (port 5552) with
stream-perf-test's flags, and prints its per-second and summary lines.

flags (stream-perf-test's names; defaults in brackets):
  -x,  --producers N        producer connections, one publisher each [1]
  -y,  --consumers N        consumer connections, one subscription each [1]
  -s,  --size BYTES         message body size, at least 12 (the latency stamp) [12]
  -bs, --batch-size N       entries per publish frame [100]
  -sbs, --sub-entry-size N  messages per sub-entry (uncompressed); 1: no sub-entries [1]
  -c,  --confirms N         most unconfirmed messages per producer [10000]
  -st, --streams A,B,...    streams to use; producers and consumers go round them [stream]
  -o,  --offset SPEC        where consumers start: first, last, next, an offset N,
                            timestamp (the run's start) or timestamp=MS (epoch ms) [next]
  -r,  --rate MSG/S         rate limit per producer [none]
  -z,  --time SECONDS       run time [3600]
  -u,  --uris URI,...       rabbitmq-stream://USER:PASS@HOST:PORT/VHOST, connections go round
                            them [rabbitmq-stream://guest:guest@localhost:5552/%2f]
  -ds, --delete-streams     delete the streams at the end
  -amlb, --max-length-bytes SIZE             retention of created streams (kb, mb, gb) [20gb]
  -smssb, --stream-max-segment-size-bytes SIZE  segment size of created streams [500mb]
  --credit N                chunks of credit per subscription, topped up per chunk [10]
  -C,  --cmessages N        each consumer stops after N messages and prints how long they
                            took from its subscribe; the run ends with the first to stop
  --json FILE               write the summary as JSON
  --help                    this text
";

/// Everything a run needs, defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamOptions {
    pub endpoints: Vec<Endpoint>,
    pub producers: u32,
    pub consumers: u32,
    /// Body bytes, at least 12.
    pub size: usize,
    /// Entries per publish frame.
    pub batch_size: u32,
    /// Messages per entry; 1 sends simple entries.
    pub sub_entry_size: u16,
    /// Most unconfirmed messages per producer.
    pub confirms: u32,
    pub streams: Vec<String>,
    pub offset: OffsetSpec,
    /// msg/s per producer.
    pub rate: Option<f64>,
    pub time: Duration,
    pub delete_streams: bool,
    pub max_length_bytes: u64,
    pub segment_bytes_max: u64,
    pub credit: u16,
    /// Messages after which a consumer stops (PerfTest's `--cmessages`).
    pub consumer_messages: Option<u64>,
    pub json: Option<std::path::PathBuf>,
}

/// One flag: its long and short names and whether it takes a value.
struct Flag {
    long: &'static str,
    short: &'static str,
    takes_value: bool,
}

const FLAGS: &[Flag] = &[
    flag("producers", "x", true),
    flag("consumers", "y", true),
    flag("size", "s", true),
    flag("batch-size", "bs", true),
    flag("sub-entry-size", "sbs", true),
    flag("confirms", "c", true),
    flag("streams", "st", true),
    flag("offset", "o", true),
    flag("rate", "r", true),
    flag("time", "z", true),
    flag("uris", "u", true),
    flag("delete-streams", "ds", false),
    flag("max-length-bytes", "amlb", true),
    flag("stream-max-segment-size-bytes", "smssb", true),
    flag("credit", "", true),
    flag("cmessages", "C", true),
    flag("json", "", true),
];

const fn flag(long: &'static str, short: &'static str, takes_value: bool) -> Flag {
    Flag {
        long,
        short,
        takes_value,
    }
}

/// The flags given, by long name; later ones win.
#[derive(Default)]
struct Given {
    values: Vec<(&'static str, Option<String>)>,
}

impl Given {
    fn value(&self, long: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(name, _)| *name == long)
            .and_then(|(_, v)| v.as_deref())
    }

    fn switch(&self, long: &str) -> bool {
        self.values.iter().any(|(name, _)| *name == long)
    }
}

impl StreamOptions {
    /// Reads the arguments after `stream`; `None` for `--help`.
    pub fn parse(args: &[String]) -> Result<Option<StreamOptions>, PerfError> {
        let Some(given) = tokenize(args)? else {
            return Ok(None);
        };
        StreamOptions::from_given(&given).map(Some)
    }

    fn from_given(given: &Given) -> Result<StreamOptions, PerfError> {
        let uris = given
            .value("uris")
            .unwrap_or("rabbitmq-stream://guest:guest@localhost:5552/%2f");
        let endpoints = uris
            .split(',')
            .filter(|u| !u.is_empty())
            .map(parse_stream_uri)
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(PerfError::usage("--uris needs at least one URI"));
        }
        let streams: Vec<String> = given
            .value("streams")
            .unwrap_or("stream")
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if streams.is_empty() {
            return Err(PerfError::usage("--streams needs at least one stream name"));
        }
        let options = StreamOptions {
            endpoints,
            producers: number(given, "producers", 1)?,
            consumers: number(given, "consumers", 1)?,
            size: crate::body::body_size(number(given, "size", 12)?),
            batch_size: positive(given, "batch-size", 100)?,
            sub_entry_size: positive(given, "sub-entry-size", 1)?,
            confirms: positive(given, "confirms", 10_000)?,
            streams,
            offset: parse_offset(given.value("offset").unwrap_or("next"))?,
            rate: rate(given)?,
            time: number::<u64>(given, "time", 0)
                .map(|s| Some(Duration::from_secs(s)).filter(|d| !d.is_zero()))?
                .unwrap_or(TIME_MAX_DEFAULT),
            delete_streams: given.switch("delete-streams"),
            max_length_bytes: byte_size(given, "max-length-bytes", "20gb")?,
            segment_bytes_max: byte_size(given, "stream-max-segment-size-bytes", "500mb")?,
            credit: positive(given, "credit", 10)?,
            consumer_messages: given
                .value("cmessages")
                .map(|_| positive(given, "cmessages", 1u64))
                .transpose()?,
            json: given.value("json").map(std::path::PathBuf::from),
        };
        if options.producers == 0 && options.consumers == 0 {
            return Err(PerfError::usage(
                "--producers 0 and --consumers 0: nothing to run; give one of them 1 or more",
            ));
        }
        Ok(options)
    }

    /// Messages per publish frame.
    pub fn messages_per_frame(&self) -> u32 {
        self.batch_size * u32::from(self.sub_entry_size)
    }
}

/// Splits `--name value`, `--name=value` and stream-perf-test's short `-bs value` forms.
fn tokenize(args: &[String]) -> Result<Option<Given>, PerfError> {
    let mut given = Given::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--help" || arg == "-h" {
            return Ok(None);
        }
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        let found = FLAGS.iter().find(|f| {
            name.strip_prefix("--") == Some(f.long)
                || (!f.short.is_empty() && name.strip_prefix('-') == Some(f.short))
        });
        let Some(found) = found else {
            return Err(PerfError::usage(format!(
                "unknown flag '{arg}' (warren perf stream takes stream-perf-test's flags; \
                 --help lists them)"
            )));
        };
        let value = match (found.takes_value, inline) {
            (false, None) => None,
            (false, Some(_)) => {
                return Err(PerfError::usage(format!("flag '{arg}' takes no value")));
            }
            (true, Some(value)) => Some(value),
            (true, None) => Some(
                rest.next()
                    .cloned()
                    .ok_or_else(|| PerfError::usage(format!("flag '{arg}' needs a value")))?,
            ),
        };
        given.values.push((found.long, value));
    }
    Ok(Some(given))
}

/// `rabbitmq-stream://user:pass@host:port/vhost`: as an AMQP URI, with 5552 for no port.
pub fn parse_stream_uri(uri: &str) -> Result<Endpoint, PerfError> {
    let Some(rest) = uri.strip_prefix("rabbitmq-stream://") else {
        return Err(PerfError::usage(format!(
            "bad URI '{uri}': expected rabbitmq-stream://USER:PASS@HOST:PORT/VHOST \
             (rabbitmq-stream+tls is not supported by warren perf)"
        )));
    };
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let has_port = match host_port.strip_prefix('[') {
        Some(bracketed) => bracketed.contains("]:"),
        None => host_port.contains(':'),
    };
    let mut endpoint = Endpoint::parse(&format!("amqp://{rest}"))
        .map_err(|e| PerfError::usage(e.to_string().replace("amqp://", "rabbitmq-stream://")))?;
    if !has_port {
        endpoint.port = STREAM_PORT;
    }
    Ok(endpoint)
}

/// stream-perf-test's `--offset`: first, last, next, an offset, or a timestamp.
pub fn parse_offset(text: &str) -> Result<OffsetSpec, PerfError> {
    let bad = || {
        PerfError::usage(format!(
            "bad --offset '{text}' (first, last, next, an offset such as 1000, timestamp, or \
             timestamp=MS with MS milliseconds since the epoch)"
        ))
    };
    Ok(match text {
        "first" => OffsetSpec::First,
        "last" => OffsetSpec::Last,
        "next" => OffsetSpec::Next,
        "timestamp" => OffsetSpec::Timestamp(now_ms()),
        _ => match text.strip_prefix("timestamp=") {
            Some(ms) => OffsetSpec::Timestamp(ms.parse().map_err(|_| bad())?),
            None => OffsetSpec::Offset(text.parse().map_err(|_| bad())?),
        },
    })
}

fn now_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

/// `20gb`, `500mb`, `100kb`, `1000` (bytes; 1 kb = 1000 bytes, as stream-perf-test).
pub fn parse_byte_size(text: &str) -> Result<u64, PerfError> {
    let lower = text.to_ascii_lowercase();
    let (digits, scale) = [("tb", 1_000_000_000_000), ("gb", 1_000_000_000)]
        .into_iter()
        .chain([("mb", 1_000_000), ("kb", 1_000), ("b", 1)])
        .find_map(|(suffix, scale)| lower.strip_suffix(suffix).map(|d| (d, scale)))
        .unwrap_or((lower.as_str(), 1));
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| {
            PerfError::usage(format!(
                "bad size '{text}' (expected e.g. 20gb, 500mb or 1000)"
            ))
        })
}

fn byte_size(given: &Given, long: &str, default: &str) -> Result<u64, PerfError> {
    parse_byte_size(given.value(long).unwrap_or(default))
        .map_err(|e| PerfError::usage(format!("--{long}: {e}")))
}

fn number<T: std::str::FromStr>(given: &Given, long: &str, default: T) -> Result<T, PerfError> {
    match given.value(long) {
        None => Ok(default),
        Some(text) => text
            .parse()
            .map_err(|_| PerfError::usage(format!("--{long} needs a whole number, not '{text}'"))),
    }
}

fn positive<T>(given: &Given, long: &str, default: T) -> Result<T, PerfError>
where
    T: std::str::FromStr + PartialOrd + Default,
{
    let value = number(given, long, default)?;
    if value <= T::default() {
        return Err(PerfError::usage(format!("--{long} must be at least 1")));
    }
    Ok(value)
}

fn rate(given: &Given) -> Result<Option<f64>, PerfError> {
    let Some(text) = given.value("rate") else {
        return Ok(None);
    };
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(Some(rate)),
        Ok(0.0) => Ok(None),
        _ => Err(PerfError::usage(format!(
            "--rate needs a rate in msg/s above 0, not '{text}'"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> StreamOptions {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        StreamOptions::parse(&args).unwrap().unwrap()
    }

    fn error(line: &str) -> String {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        StreamOptions::parse(&args).unwrap_err().to_string()
    }

    #[test]
    fn stream_perf_test_defaults() {
        let o = parse("");
        assert_eq!((o.producers, o.consumers, o.size), (1, 1, 12));
        assert_eq!(
            (o.batch_size, o.sub_entry_size, o.confirms),
            (100, 1, 10_000)
        );
        assert_eq!(o.streams, vec!["stream".to_owned()]);
        assert_eq!(o.offset, OffsetSpec::Next);
        assert_eq!(o.endpoints[0].address(), "localhost:5552");
        assert_eq!(
            (o.endpoints[0].user.as_str(), o.endpoints[0].vhost.as_str()),
            ("guest", "/")
        );
        assert_eq!(o.max_length_bytes, 20_000_000_000);
        assert_eq!(o.segment_bytes_max, 500_000_000);
        assert_eq!(
            (o.time, o.rate, o.delete_streams),
            (TIME_MAX_DEFAULT, None, false)
        );
    }

    #[test]
    fn long_short_and_inline_forms() {
        let o = parse(
            "--producers 2 -y 3 --size=100 -bs 50 -sbs 10 -c 192 -st a,b -o first -r 5000 \
             -z 10 -u rabbitmq-stream://u:p@127.0.0.1:5999/v,rabbitmq-stream://h -ds \
             -amlb 2gb -smssb 100mb --credit 5",
        );
        assert_eq!((o.producers, o.consumers, o.size), (2, 3, 100));
        assert_eq!((o.batch_size, o.sub_entry_size, o.confirms), (50, 10, 192));
        assert_eq!(o.messages_per_frame(), 500);
        assert_eq!(o.streams, vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(o.offset, OffsetSpec::First);
        assert_eq!((o.rate, o.time), (Some(5000.0), Duration::from_secs(10)));
        assert_eq!(o.endpoints[0].address(), "127.0.0.1:5999");
        assert_eq!(
            (o.endpoints[0].user.as_str(), o.endpoints[0].vhost.as_str()),
            ("u", "v")
        );
        assert_eq!(o.endpoints[1].address(), "h:5552");
        assert!(o.delete_streams);
        assert_eq!(
            (o.max_length_bytes, o.segment_bytes_max),
            (2_000_000_000, 100_000_000)
        );
        assert_eq!(o.credit, 5);
        assert_eq!(o.consumer_messages, None);
        assert_eq!(parse("-C 10000000").consumer_messages, Some(10_000_000));
        assert_eq!(parse("--cmessages 7").consumer_messages, Some(7));
        assert!(StreamOptions::parse(&["-C".to_owned(), "0".to_owned()]).is_err());
        assert_eq!(parse("-s 1").size, 12);
        assert!(StreamOptions::parse(&["--help".to_owned()])
            .unwrap()
            .is_none());
    }

    #[test]
    fn offsets() {
        assert_eq!(parse_offset("last").unwrap(), OffsetSpec::Last);
        assert_eq!(parse_offset("1234").unwrap(), OffsetSpec::Offset(1234));
        assert_eq!(
            parse_offset("timestamp=99").unwrap(),
            OffsetSpec::Timestamp(99)
        );
        assert!(matches!(parse_offset("timestamp").unwrap(), OffsetSpec::Timestamp(ms) if ms > 0));
        assert!(parse_offset("middle")
            .unwrap_err()
            .to_string()
            .contains("bad --offset"));
    }

    #[test]
    fn errors_name_the_flag() {
        assert!(error("--producer 1").contains("unknown flag '--producer'"));
        assert!(error("-x").contains("flag '-x' needs a value"));
        assert!(error("-ds=1").contains("unknown flag"));
        assert!(error("--delete-streams=1").contains("takes no value"));
        assert!(error("-bs 0").contains("--batch-size must be at least 1"));
        assert!(error("-x many").contains("--producers needs a whole number"));
        assert!(error("-amlb 2zb").contains("--max-length-bytes: bad size '2zb'"));
        assert!(error("-u amqp://h").contains("expected rabbitmq-stream://"));
        assert!(error("-x 0 -y 0").contains("nothing to run"));
        assert!(error("-r -5").contains("--rate"));
    }
}
