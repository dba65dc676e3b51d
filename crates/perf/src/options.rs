//! `RunOptions`: what a run does, checked and with PerfTest's defaults filled in.

use std::path::PathBuf;
use std::time::Duration;

use crate::args::Given;
use crate::error::PerfError;
use crate::uri::Endpoint;

/// What kind of run.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    /// Producers and consumers for `-z` seconds or until `-C`/`-D`.
    Load,
    /// Measure the maximum rate, then step from 10% to 110% of it.
    Sweep { step: Duration },
    /// Open N idle connections with 2 channels each and hold them for `-z` seconds, from
    /// `source_addresses` loopback addresses (127.0.0.2 on; `None`: as many as `count` needs).
    Connections {
        count: u32,
        source_addresses: Option<u8>,
    },
}

/// A queue or consumer argument (`-qa`, `-ca`): numbers and booleans keep their type, as
/// PerfTest converts them, so `x-max-length=10` reaches the broker as an integer.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgValue {
    Int(i64),
    Bool(bool),
    Text(String),
}

/// Queues named by `--queue-pattern 'q-%d' --queue-pattern-from 1 --queue-pattern-to 100`.
#[derive(Clone, Debug, PartialEq)]
pub struct QueuePattern {
    pub pattern: String,
    pub from: u32,
    pub to: u32,
}

impl QueuePattern {
    pub fn names(&self) -> Vec<String> {
        (self.from..=self.to)
            .map(|n| self.pattern.replace("%d", &n.to_string()))
            .collect()
    }
}

/// Everything a run needs, defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOptions {
    pub endpoint: Endpoint,
    pub producers: u32,
    pub consumers: u32,
    pub producer_channels: u16,
    pub consumer_channels: u16,
    /// Body bytes, at least 12.
    pub size: usize,
    /// Per producer channel; 0 is unlimited.
    pub producer_messages: u64,
    /// Per consumer channel; 0 is unlimited.
    pub consumer_messages: u64,
    pub time: Option<Duration>,
    pub queue: Option<String>,
    pub queue_pattern: Option<QueuePattern>,
    pub exchange: String,
    pub exchange_type: String,
    pub routing_key: Option<String>,
    /// `-K`: each message gets its own random routing key (as PerfTest, a UUID's length).
    pub random_routing_key: bool,
    pub persistent: bool,
    pub mandatory: bool,
    /// Most unconfirmed messages per producer channel; `None`: no confirms.
    pub confirm: Option<u32>,
    pub qos: u16,
    pub multi_ack_every: u32,
    pub autoack: bool,
    /// msg/s per producer channel.
    pub rate: Option<f64>,
    /// msg/s per consumer channel.
    pub consumer_rate: Option<f64>,
    pub queue_args: Vec<(String, ArgValue)>,
    pub consumer_args: Vec<(String, ArgValue)>,
    /// Each consumer channel checks that every producer's messages arrive in order, from its
    /// first (`--verify-order`).
    pub verify_order: bool,
    pub predeclared: bool,
    pub auto_delete: bool,
    pub heartbeat: u16,
    pub interval: Duration,
    pub id: String,
    pub json: Option<PathBuf>,
    pub chart: Option<PathBuf>,
    pub label: String,
    pub mode: Mode,
    pub threads: Option<usize>,
    /// No run lasts longer, whatever else it was told.
    pub max_time: Duration,
    /// The command line, kept for the JSON report.
    pub command_line: Vec<String>,
}

/// Hard limit on a run that was given no `-z`, `-C` or `-D` (and on every run).
pub const MAX_TIME_DEFAULT: Duration = Duration::from_secs(3600);
/// How long `--connections` holds its connections without `-z`.
pub const CONNECTIONS_HOLD_DEFAULT: Duration = Duration::from_secs(60);
const SWEEP_STEP_DEFAULT: Duration = Duration::from_secs(5);

impl RunOptions {
    /// Builds the options from the flags given; `id` is used when `--id` is absent.
    pub fn from_given(
        given: &Given,
        id: String,
        command_line: Vec<String>,
    ) -> Result<Self, PerfError> {
        let endpoint = Endpoint::parse(given.value("uri").unwrap_or("amqp://localhost"))?;
        let label = given
            .value("label")
            .map_or_else(|| endpoint.address(), str::to_owned);
        let (persistent, mandatory) = message_flags(&given.values("flag"))?;
        let options = RunOptions {
            producers: number(given, "producers", 1)?,
            consumers: number(given, "consumers", 1)?,
            producer_channels: number(given, "producer-channel-count", 1)?,
            consumer_channels: number(given, "consumer-channel-count", 1)?,
            size: crate::body::body_size(number(given, "size", 12)?),
            producer_messages: number(given, "pmessages", 0)?,
            consumer_messages: number(given, "cmessages", 0)?,
            time: optional::<u64>(given, "time")?.map(Duration::from_secs),
            queue: given.value("queue").map(str::to_owned),
            queue_pattern: queue_pattern(given)?,
            exchange: given.value("exchange").unwrap_or("direct").to_owned(),
            exchange_type: given.value("type").unwrap_or("direct").to_owned(),
            routing_key: given.value("routing-key").map(str::to_owned),
            random_routing_key: given.switch("random-routing-key"),
            persistent,
            mandatory,
            confirm: optional(given, "confirm")?.filter(|n| *n > 0),
            qos: number(given, "qos", 0)?,
            multi_ack_every: number(given, "multi-ack-every", 0)?,
            autoack: given.switch("autoack"),
            rate: rate(given, "rate")?,
            consumer_rate: rate(given, "consumer-rate")?,
            queue_args: key_values(given, "queue-args")?,
            consumer_args: key_values(given, "consumer-args")?,
            verify_order: given.switch("verify-order"),
            predeclared: given.switch("predeclared"),
            auto_delete: boolean(given, "auto-delete", true)?,
            heartbeat: number(given, "heartbeat", endpoint.heartbeat.unwrap_or(0))?,
            interval: Duration::from_secs(number::<u64>(given, "interval", 1)?.max(1)),
            id: given.value("id").map_or(id, str::to_owned),
            json: given.value("json").map(PathBuf::from),
            chart: given.value("chart").map(PathBuf::from),
            label,
            mode: mode(given)?,
            threads: optional(given, "threads")?,
            max_time: Duration::from_secs(number(
                given,
                "max-seconds",
                MAX_TIME_DEFAULT.as_secs(),
            )?),
            command_line,
            endpoint,
        };
        options.check()?;
        Ok(options)
    }

    /// How long the run may last: `-z` (or the `--connections` default), capped by the hard limit.
    pub fn run_time(&self) -> Duration {
        let asked = match (&self.mode, self.time) {
            (_, Some(time)) => time,
            (Mode::Connections { .. }, None) => CONNECTIONS_HOLD_DEFAULT,
            _ => self.max_time,
        };
        asked.min(self.max_time)
    }

    /// Producer channels across all producer connections.
    pub fn producer_agents(&self) -> u32 {
        self.producers * u32::from(self.producer_channels)
    }

    /// Things that are accepted but worth saying (PerfTest ignores them silently).
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.autoack && (self.qos > 0 || self.multi_ack_every > 0) {
            warnings.push(
                "with -a/--autoack nothing is acked: -q and --multi-ack-every do nothing".into(),
            );
        }
        if !self.autoack && self.qos > 0 && self.multi_ack_every > u32::from(self.qos) {
            warnings.push(format!(
                "--multi-ack-every {} is above the prefetch -q {}: each consumer stalls until a \
                 50 ms quiet spell makes it ack early",
                self.multi_ack_every, self.qos
            ));
        }
        if self.verify_order && self.consumers == 0 {
            warnings.push(
                "--verify-order checks what consumers receive: with -y 0 it does nothing".into(),
            );
        }
        warnings
    }

    fn check(&self) -> Result<(), PerfError> {
        let fail = |text: &str| Err(PerfError::usage(text));
        if self.producer_channels == 0 || self.consumer_channels == 0 {
            return fail("-X/-Y: a connection needs at least one channel");
        }
        if self.queue.is_some() && self.queue_pattern.is_some() {
            return fail("-u/--queue and --queue-pattern name the queues twice: give one");
        }
        if self.exchange.is_empty() && self.queue.is_none() && self.queue_pattern.is_none() {
            return fail(
                "-e '' (the default exchange) routes by queue name: give -u or --queue-pattern",
            );
        }
        if let Mode::Sweep { .. } = self.mode {
            if self.producers == 0 || self.consumers == 0 {
                return fail("--sweep needs producers and consumers (-x and -y of at least 1)");
            }
            if self.rate.is_some() || self.time.is_some() {
                return fail(
                    "--sweep sets the rate and the time itself: drop -r and -z \
                     (--sweep-step-seconds sets each step's length)",
                );
            }
        }
        if self.max_time.is_zero() {
            return fail("--max-seconds must be at least 1");
        }
        self.check_verify_order()
    }

    /// `--verify-order` needs each queue read by one consumer channel (two would each see a
    /// part of every producer's sequence) and, with two or more producer channels, bodies of 16
    /// bytes or more, which carry the producer id.
    fn check_verify_order(&self) -> Result<(), PerfError> {
        if !self.verify_order {
            return Ok(());
        }
        let named_queues = match (&self.queue, &self.queue_pattern) {
            (Some(_), _) => Some(1),
            (None, Some(pattern)) => Some(u64::from(pattern.to - pattern.from) + 1),
            (None, None) => None,
        };
        let consumer_channels = u64::from(self.consumers) * u64::from(self.consumer_channels);
        if named_queues.is_some_and(|queues| consumer_channels > queues) {
            return Err(PerfError::usage(format!(
                "--verify-order needs one consumer channel per queue: {consumer_channels} \
                 consumer channels share {} named queue(s), so each would see only part of \
                 every producer's sequence",
                named_queues.unwrap_or(0)
            )));
        }
        if self.producer_agents() > 1 && self.size < crate::body::STAMP_WITH_PRODUCER_BYTES {
            return Err(PerfError::usage(format!(
                "--verify-order with {} producer channels needs -s 16 or more: smaller bodies \
                 carry no producer id, so the producers' sequences cannot be told apart",
                self.producer_agents()
            )));
        }
        Ok(())
    }
}

fn mode(given: &Given) -> Result<Mode, PerfError> {
    let sweep = given.switch("sweep");
    if given.value("source-addresses").is_some() && given.value("connections").is_none() {
        return Err(PerfError::usage(
            "--source-addresses goes with --connections (load runs use few connections)",
        ));
    }
    match optional::<u32>(given, "connections")? {
        Some(_) if sweep => Err(PerfError::usage(
            "--sweep and --connections are two kinds of run: pick one",
        )),
        Some(0) => Err(PerfError::usage("--connections needs at least 1")),
        Some(count) => Ok(Mode::Connections {
            count,
            source_addresses: source_addresses(given)?,
        }),
        None if sweep => {
            let step = number(given, "sweep-step-seconds", SWEEP_STEP_DEFAULT.as_secs())?;
            if step < 2 {
                return Err(PerfError::usage("--sweep-step-seconds must be at least 2"));
            }
            Ok(Mode::Sweep {
                step: Duration::from_secs(step),
            })
        }
        None => Ok(Mode::Load),
    }
}

/// `--source-addresses N`: 127.0.0.2 up to 127.0.0.254 at most.
fn source_addresses(given: &Given) -> Result<Option<u8>, PerfError> {
    match optional::<u8>(given, "source-addresses")? {
        Some(n) if n > crate::connections::SOURCE_ADDRESSES_MAX => Err(PerfError::usage(format!(
            "--source-addresses {n}: at most {} (127.0.0.2 to 127.0.0.254)",
            crate::connections::SOURCE_ADDRESSES_MAX
        ))),
        other => Ok(other),
    }
}

/// `--flag persistent`, `--flag mandatory` (PerfTest's other flags are not supported).
fn message_flags(values: &[&str]) -> Result<(bool, bool), PerfError> {
    let (mut persistent, mut mandatory) = (false, false);
    for value in values {
        match *value {
            "persistent" => persistent = true,
            "mandatory" => mandatory = true,
            other => {
                return Err(PerfError::usage(format!(
                    "-f/--flag '{other}': warren perf knows persistent and mandatory"
                )))
            }
        }
    }
    Ok((persistent, mandatory))
}

fn queue_pattern(given: &Given) -> Result<Option<QueuePattern>, PerfError> {
    let Some(pattern) = given.value("queue-pattern") else {
        return Ok(None);
    };
    if !pattern.contains("%d") {
        return Err(PerfError::usage(format!(
            "--queue-pattern '{pattern}' has no %d for the queue number"
        )));
    }
    let from: u32 = number(given, "queue-pattern-from", 1)?;
    let Some(to) = optional::<u32>(given, "queue-pattern-to")? else {
        return Err(PerfError::usage("--queue-pattern needs --queue-pattern-to"));
    };
    if to < from {
        return Err(PerfError::usage(format!(
            "--queue-pattern-to {to} is below --queue-pattern-from {from}"
        )));
    }
    Ok(Some(QueuePattern {
        pattern: pattern.to_owned(),
        from,
        to,
    }))
}

fn flag_names(long: &str) -> String {
    let flag = crate::args::FLAGS.iter().find(|f| f.long == long);
    match flag.and_then(|f| f.short) {
        Some(short) => format!("-{short}/--{long}"),
        None => format!("--{long}"),
    }
}

fn optional<T: std::str::FromStr>(given: &Given, long: &str) -> Result<Option<T>, PerfError> {
    given
        .value(long)
        .map(|text| {
            text.trim().parse::<T>().map_err(|_| {
                PerfError::usage(format!(
                    "{}: '{text}' is not a whole number in range",
                    flag_names(long)
                ))
            })
        })
        .transpose()
}

fn number<T: std::str::FromStr>(given: &Given, long: &str, default: T) -> Result<T, PerfError> {
    Ok(optional(given, long)?.unwrap_or(default))
}

fn rate(given: &Given, long: &str) -> Result<Option<f64>, PerfError> {
    let Some(text) = given.value(long) else {
        return Ok(None);
    };
    match text.trim().parse::<f64>() {
        // PerfTest reads 0 as "no limit"
        Ok(0.0) => Ok(None),
        Ok(r) if r.is_finite() && r > 0.0 => Ok(Some(r)),
        _ => Err(PerfError::usage(format!(
            "{}: '{text}' is not a rate in msg/s",
            flag_names(long)
        ))),
    }
}

fn boolean(given: &Given, long: &str, default: bool) -> Result<bool, PerfError> {
    match given.value(long) {
        None => Ok(default),
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(other) => Err(PerfError::usage(format!(
            "{}: '{other}' is neither true nor false",
            flag_names(long)
        ))),
    }
}

/// `k=v,k=v` as PerfTest reads `--queue-args`: integers and booleans keep their type.
fn key_values(given: &Given, long: &str) -> Result<Vec<(String, ArgValue)>, PerfError> {
    let mut out = Vec::new();
    for text in given.values(long) {
        for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(PerfError::usage(format!(
                    "{}: '{pair}' is not KEY=VALUE",
                    flag_names(long)
                )));
            };
            let value = match value.trim() {
                "true" => ArgValue::Bool(true),
                "false" => ArgValue::Bool(false),
                v => v
                    .parse::<i64>()
                    .map_or_else(|_| ArgValue::Text(v.to_owned()), ArgValue::Int),
            };
            out.push((key.trim().to_owned(), value));
        }
    }
    Ok(out)
}
