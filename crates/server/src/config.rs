//! Broker settings: embedded defaults, overridden by a TOML file, then by command-line flags.
//!
//! Key names follow RabbitMQ's where one exists (`frame_max`, `heartbeat`, `channel_max`,
//! `default_user`, `loopback_users`, `vm_memory_high_watermark`, `disk_free_limit`), so
//! operators recognise them. Every key is documented in
//! README.md; an unknown or malformed key stops startup with the key and the line named.

mod rabbitmq_conf;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use warren_core::alarm::{self, parse_information_unit};
pub use warren_core::alarm::{DiskFreeLimit, MemoryWatermark};
pub use warren_mgmt::tls::{TlsOptions, Verify};

/// The longest `delivery_hold_ms` accepted.
const DELIVERY_HOLD_MS_MAX: u64 = 1000;

/// The smallest `stream_frame_max` accepted: the connection's own frames (peer properties,
/// metadata) must fit.
const STREAM_FRAME_MAX_MIN: u32 = 4096;

/// Everything the broker needs to start. `Default` is the embedded configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the listeners bind: `::` (the default) is every interface, IPv4 and IPv6 on one
    /// socket, as RabbitMQ binds a port-only listener; any other address binds only that one.
    pub bind_address: IpAddr,
    /// AMQP 0.9.1 port; 0 picks a free port (tests).
    pub amqp_port: u16,
    /// Management HTTP API port (RabbitMQ's `management.tcp.port`, 15672); 0 picks a free
    /// port, unset (`None`, only from code) turns the API off.
    #[serde(alias = "http_port")]
    pub management_port: Option<u16>,
    /// Prometheus metrics port (RabbitMQ's `prometheus.tcp.port`, 15692); as above.
    pub prometheus_port: Option<u16>,
    /// Where durable definitions and the message store live.
    pub data_dir: PathBuf,
    /// Largest frame the server accepts, proposed in connection.tune (bytes).
    pub frame_max: u32,
    /// Highest channel number a client may open, proposed in connection.tune.
    pub channel_max: u16,
    /// Heartbeat interval proposed in connection.tune, seconds (0 disables).
    pub heartbeat: u16,
    /// Largest message body accepted, bytes (RabbitMQ's `max_message_size`).
    pub max_message_size: u64,
    /// The user created on first start.
    pub default_user: String,
    pub default_pass: String,
    /// The virtual host created on first start.
    pub default_vhost: String,
    /// Users that may only connect from a loopback address.
    pub loopback_users: Vec<String>,
    /// A RabbitMQ definitions file imported at every start, after the data directory's own
    /// definitions (RabbitMQ's `load_definitions`): users, vhosts, permissions, policies,
    /// exchanges, queues and bindings.
    pub load_definitions: Option<PathBuf>,
    /// Log filter, as `RUST_LOG` (`info`, `warren=debug`, ...).
    pub log_level: String,
    /// Memory each classic queue's ready messages may take (their bytes plus per-message
    /// bookkeeping, `Message::resident_bytes`); beyond it messages
    /// are paged out to the message store and read back when delivered.
    pub queue_memory_budget: u64,
    /// Size at which the message store starts a new segment file (bytes).
    pub store_segment_size: u64,
    /// Messages the publishing connections may have on their way into one queue; when a
    /// queue falls behind, its publishers stop reading their sockets until it catches up
    /// (RabbitMQ's `credit_flow_default_credit`, counted per queue rather than per pair).
    pub credit_flow_default_credit: u32,
    /// Link credit an AMQP 1.0 client's sending link gets, renewed once half of it is used
    /// (RabbitMQ's `max_link_credit`).
    pub max_link_credit: u32,
    /// Transfers an AMQP 1.0 client may send on a session before the broker reopens its
    /// window (RabbitMQ's `max_incoming_window`).
    pub max_incoming_window: u32,
    /// Deliveries a queue may have on their way to one AMQP 1.0 consumer whatever credit its
    /// client granted; topped up as they are sent (RabbitMQ's `max_queue_credit`).
    pub max_queue_credit: u32,
    /// How long, in milliseconds, deliveries to a streaming consumer may wait to be written
    /// with the next ones (see `amqp091::connection`); 0 writes every turn's at once.
    pub delivery_hold_ms: u64,
    /// Memory high watermark as a fraction of the memory available (RAM, or the cgroup limit if
    /// lower): above it, publishers are blocked (RabbitMQ's `vm_memory_high_watermark.relative`).
    #[serde(deserialize_with = "fraction")]
    pub vm_memory_high_watermark: f64,
    /// Memory high watermark in bytes (`vm_memory_high_watermark.absolute`); when set it
    /// replaces the relative one.
    #[serde(deserialize_with = "some_bytes")]
    pub vm_memory_high_watermark_absolute: Option<u64>,
    /// Free space on the data directory's file system below which publishers are blocked.
    #[serde(deserialize_with = "disk_free_limit")]
    pub disk_free_limit: DiskFreeLimit,
    /// This node's name (RabbitMQ's node name, `RABBITMQ_NODENAME`); unset: `rabbit@<host>`.
    pub node_name: Option<String>,
    /// The cluster name clients and the management API see; unset: the node name.
    pub cluster_name: Option<String>,
    /// The RabbitMQ version Warren reports to clients and tools.
    pub rabbitmq_version: Option<String>,
    /// Server properties sent in connection.start and AMQP 1.0 open, over the built-in ones.
    pub server_properties: BTreeMap<String, String>,
    /// AMQP listeners over plain TCP (RabbitMQ's `listeners.tcp.*`): `"5672"` (on
    /// `bind_address`), `"127.0.0.1:5672"`, `"::1:5672"` or `"[::1]:5672"`. Unset: one on
    /// `bind_address` and `amqp_port`; empty: none (a TLS-only broker).
    pub amqp_listeners: Option<Vec<String>>,
    /// AMQP listeners over TLS (`listeners.ssl.*`, RabbitMQ's 5671), in the same forms; they
    /// serve AMQP 0.9.1 and 1.0 with `ssl_options`.
    pub amqps_listeners: Vec<String>,
    /// TLS settings of the AMQPS listeners (RabbitMQ's `ssl_options.*`).
    pub ssl_options: TlsOptions,
    /// SASL mechanisms offered, in order (RabbitMQ's `auth_mechanisms.N`): `PLAIN`,
    /// `AMQPLAIN`, `EXTERNAL` (to TLS clients) and `ANONYMOUS` (AMQP 1.0 clients on loopback).
    pub auth_mechanisms: Vec<String>,
    /// Which name of a client certificate SASL EXTERNAL logs in as (RabbitMQ's
    /// `ssl_cert_login_from`).
    pub ssl_cert_login_from: CertLoginFrom,
    /// Address of the management API's HTTP listener (`management.tcp.ip`); unset:
    /// `bind_address`.
    pub management_ip: Option<IpAddr>,
    /// Address of the Prometheus HTTP listener (`prometheus.tcp.ip`); unset: `bind_address`.
    pub prometheus_ip: Option<IpAddr>,
    /// The management API over HTTPS (RabbitMQ's `management.ssl.*`).
    pub management_ssl: Option<HttpsConfig>,
    /// Prometheus over HTTPS (`prometheus.ssl.*`).
    pub prometheus_ssl: Option<HttpsConfig>,
    /// Stream protocol port when `stream_listeners` is unset (RabbitMQ's 5552); 0 picks a free
    /// port (tests).
    pub stream_port: u16,
    /// Stream protocol listeners (RabbitMQ's `stream.listeners.tcp.*`), in the forms of
    /// `amqp_listeners`. Unset: one on `bind_address` and `stream_port`; empty: none.
    pub stream_listeners: Option<Vec<String>>,
    /// The host stream clients are told to connect to, in Open's connection properties and in
    /// Metadata (`stream.advertised_host`); unset: the address the client connected to.
    pub stream_advertised_host: Option<String>,
    /// The port stream clients are told to connect to (`stream.advertised_port`); unset: the
    /// port the client connected to.
    pub stream_advertised_port: Option<u16>,
    /// Whether a stream publish is confirmed only once fsynced (Warren's `stream.fsync`);
    /// false (the default, as RabbitMQ) confirms once written to the file system.
    pub stream_fsync: bool,
    /// Largest stream protocol frame, proposed in Tune (`stream.frame_max`, bytes).
    pub stream_frame_max: u32,
    /// Stream protocol heartbeat proposed in Tune (`stream.heartbeat`, seconds; 0 disables).
    pub stream_heartbeat: u32,
}

/// RabbitMQ's `ssl_cert_login_from`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CertLoginFrom {
    /// The certificate's whole subject, as RabbitMQ prints it (`O=org,CN=name`).
    #[default]
    DistinguishedName,
    /// The subject's first common name.
    CommonName,
}

/// An HTTPS listener (`management.ssl.*`, `prometheus.ssl.*`): where it binds and its TLS
/// settings, named as `ssl_options.*`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpsConfig {
    pub port: u16,
    /// Unset: `bind_address`.
    pub ip: Option<IpAddr>,
    pub cacertfile: Option<PathBuf>,
    pub certfile: Option<PathBuf>,
    pub keyfile: Option<PathBuf>,
    pub verify: Verify,
    pub fail_if_no_peer_cert: bool,
    pub versions: Vec<String>,
}

impl HttpsConfig {
    pub fn tls_options(&self) -> TlsOptions {
        TlsOptions {
            cacertfile: self.cacertfile.clone(),
            certfile: self.certfile.clone(),
            keyfile: self.keyfile.clone(),
            verify: self.verify,
            fail_if_no_peer_cert: self.fail_if_no_peer_cert,
            versions: self.versions.clone(),
        }
    }
}

/// The SASL mechanisms Warren implements.
pub const AUTH_MECHANISMS: [&str; 4] = ["PLAIN", "AMQPLAIN", "EXTERNAL", "ANONYMOUS"];

impl Default for Config {
    fn default() -> Self {
        Config {
            bind_address: IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED),
            amqp_port: 5672,
            management_port: Some(15672),
            prometheus_port: Some(15692),
            data_dir: PathBuf::from("warren-data"),
            frame_max: 131_072,
            channel_max: 2047,
            heartbeat: 60,
            max_message_size: 128 * 1024 * 1024,
            default_user: "guest".into(),
            default_pass: "guest".into(),
            default_vhost: "/".into(),
            loopback_users: vec!["guest".into()],
            load_definitions: None,
            log_level: "info".into(),
            queue_memory_budget: 64 * 1024 * 1024,
            store_segment_size: 64 * 1024 * 1024,
            credit_flow_default_credit: 2_000,
            max_link_credit: 128,
            max_incoming_window: 400,
            max_queue_credit: 256,
            delivery_hold_ms: 1,
            vm_memory_high_watermark: alarm::MEMORY_HIGH_WATERMARK_DEFAULT,
            vm_memory_high_watermark_absolute: None,
            disk_free_limit: DiskFreeLimit::default(),
            node_name: None,
            cluster_name: None,
            rabbitmq_version: None,
            server_properties: BTreeMap::new(),
            amqp_listeners: None,
            amqps_listeners: Vec::new(),
            ssl_options: TlsOptions::default(),
            auth_mechanisms: vec!["PLAIN".into(), "AMQPLAIN".into(), "ANONYMOUS".into()],
            ssl_cert_login_from: CertLoginFrom::default(),
            management_ip: None,
            prometheus_ip: None,
            management_ssl: None,
            prometheus_ssl: None,
            stream_port: 5552,
            stream_listeners: None,
            stream_advertised_host: None,
            stream_advertised_port: None,
            stream_fsync: false,
            stream_frame_max: 1_048_576,
            stream_heartbeat: 60,
        }
    }
}

/// A config file that could not be used; the text names the file, key and line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl Config {
    /// The memory high watermark these settings give: the absolute one when set.
    pub fn memory_high_watermark(&self) -> MemoryWatermark {
        match self.vm_memory_high_watermark_absolute {
            Some(bytes) => MemoryWatermark::Absolute(bytes),
            None => MemoryWatermark::Relative(self.vm_memory_high_watermark),
        }
    }

    /// Reads a config file over the embedded defaults: RabbitMQ's rabbitmq.conf format when the
    /// file is named `*.conf` or is not TOML, else TOML.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let conf_name = path.extension().is_some_and(|ext| ext == "conf");
        let parsed = if conf_name || text.parse::<toml::Table>().is_err() {
            Config::from_rabbitmq_conf(&text)
        } else {
            Config::from_toml(&text)
        };
        parsed.map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses TOML text; the error names the key and its line.
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let config: Config = toml::from_str(text).map_err(|error| describe(text, &error))?;
        config.validate()?;
        Ok(config)
    }

    /// Parses rabbitmq.conf text (RabbitMQ's `key = value` format); the error names the key,
    /// its line and what to do.
    pub fn from_rabbitmq_conf(text: &str) -> Result<Config, String> {
        rabbitmq_conf::parse(text)
    }

    /// Broker identity settings, with `RABBITMQ_NODENAME` for an unset node name.
    pub fn identity(&self) -> warren_core::identity::IdentityConfig {
        let node_name = self.node_name.clone().or_else(|| {
            std::env::var("RABBITMQ_NODENAME")
                .ok()
                .filter(|name| !name.is_empty())
        });
        warren_core::identity::IdentityConfig {
            rabbitmq_version: self.rabbitmq_version.clone(),
            node_name,
            cluster_name: self.cluster_name.clone(),
            server_properties: self
                .server_properties
                .iter()
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
        }
    }

    /// The plain AMQP listeners' addresses.
    pub fn amqp_addrs(&self) -> Result<Vec<SocketAddr>, String> {
        match &self.amqp_listeners {
            None => Ok(vec![SocketAddr::new(self.bind_address, self.amqp_port)]),
            Some(listeners) => self.listener_addrs("amqp_listeners", listeners),
        }
    }

    /// The stream protocol listeners' addresses.
    pub fn stream_addrs(&self) -> Result<Vec<SocketAddr>, String> {
        match &self.stream_listeners {
            None => Ok(vec![SocketAddr::new(self.bind_address, self.stream_port)]),
            Some(listeners) => self.listener_addrs("stream_listeners", listeners),
        }
    }

    /// The AMQPS listeners' addresses.
    pub fn amqps_addrs(&self) -> Result<Vec<SocketAddr>, String> {
        self.listener_addrs("amqps_listeners", &self.amqps_listeners)
    }

    fn listener_addrs(&self, key: &str, listeners: &[String]) -> Result<Vec<SocketAddr>, String> {
        listeners
            .iter()
            .map(|listener| {
                let (ip, port) =
                    rabbitmq_conf::listener_address(listener).map_err(|e| format!("{key}: {e}"))?;
                Ok(SocketAddr::new(ip.unwrap_or(self.bind_address), port))
            })
            .collect()
    }

    fn validate(&self) -> Result<(), String> {
        if self.frame_max != 0 && self.frame_max < 4096 {
            return Err(format!(
                "frame_max = {} is below the AMQP minimum of 4096 bytes",
                self.frame_max
            ));
        }
        if self.max_link_credit == 0 {
            return Err("max_link_credit must be at least 1".into());
        }
        if self.max_incoming_window == 0 {
            return Err("max_incoming_window must be at least 1".into());
        }
        if self.max_queue_credit == 0 {
            return Err("max_queue_credit must be at least 1".into());
        }
        if self.channel_max == 0 {
            return Err("channel_max must be at least 1".into());
        }
        for mechanism in &self.auth_mechanisms {
            if !AUTH_MECHANISMS.contains(&mechanism.as_str()) {
                return Err(format!(
                    "auth_mechanisms: Warren does not implement the SASL mechanism \
                     '{mechanism}'; use {}",
                    AUTH_MECHANISMS.join(", ")
                ));
            }
        }
        self.amqp_addrs()?;
        self.amqps_addrs()?;
        self.stream_addrs()?;
        if self.stream_frame_max != 0 && self.stream_frame_max < STREAM_FRAME_MAX_MIN {
            return Err(format!(
                "stream_frame_max = {} is below the minimum of {STREAM_FRAME_MAX_MIN} bytes",
                self.stream_frame_max
            ));
        }
        if self.delivery_hold_ms > DELIVERY_HOLD_MS_MAX {
            return Err(format!(
                "delivery_hold_ms = {} is above {DELIVERY_HOLD_MS_MAX}: consumers would wait that \
                 long for deliveries (1 is the default, 0 turns holding off)",
                self.delivery_hold_ms
            ));
        }
        Ok(())
    }
}

/// A number from 0 to 1 (an integer 0 or 1 too).
fn fraction<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    deserializer.deserialize_any(FractionVisitor)
}

struct FractionVisitor;

impl Visitor<'_> for FractionVisitor {
    type Value = f64;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a fraction from 0.0 to 1.0")
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<f64, E> {
        if (0.0..=1.0).contains(&value) {
            Ok(value)
        } else {
            Err(E::custom(format!(
                "{value} is not a fraction from 0.0 to 1.0"
            )))
        }
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<f64, E> {
        match value {
            0 => Ok(0.0),
            1 => Ok(1.0),
            _ => Err(E::custom(format!(
                "{value} is not a fraction from 0.0 to 1.0"
            ))),
        }
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<f64, E> {
        self.visit_i64(i64::try_from(value).unwrap_or(i64::MAX))
    }
}

/// Bytes, as an integer or a string with a unit (`"50MB"`, `"2GiB"`), as RabbitMQ accepts.
struct BytesVisitor;

impl Visitor<'_> for BytesVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("bytes, as an integer or a string with a unit such as \"50MB\" or \"2GiB\"")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
        Ok(value)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<u64, E> {
        u64::try_from(value).map_err(|_| E::custom(format!("{value} is below 0 bytes")))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<u64, E> {
        parse_information_unit(value).map_err(E::custom)
    }
}

fn some_bytes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    deserializer.deserialize_any(BytesVisitor).map(Some)
}

/// `disk_free_limit = "50MB"`, `= 50000000`, or `= { mem_relative = 1.0 }`.
fn disk_free_limit<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DiskFreeLimit, D::Error> {
    deserializer.deserialize_any(DiskFreeLimitVisitor)
}

struct DiskFreeLimitVisitor;

impl<'de> Visitor<'de> for DiskFreeLimitVisitor {
    type Value = DiskFreeLimit;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("bytes (an integer or a string such as \"50MB\") or { mem_relative = N }")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<DiskFreeLimit, E> {
        BytesVisitor.visit_u64(value).map(DiskFreeLimit::Absolute)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<DiskFreeLimit, E> {
        BytesVisitor.visit_i64(value).map(DiskFreeLimit::Absolute)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<DiskFreeLimit, E> {
        BytesVisitor.visit_str(value).map(DiskFreeLimit::Absolute)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DiskFreeLimit, A::Error> {
        let mut factor = None;
        while let Some(key) = map.next_key::<String>()? {
            if key != "mem_relative" || factor.is_some() {
                return Err(de::Error::custom(format!(
                    "unexpected '{key}': the table form is {{ mem_relative = N }}"
                )));
            }
            let value = match map.next_value::<toml::Value>()? {
                toml::Value::Float(value) => value,
                toml::Value::Integer(value) => value as f64,
                other => {
                    return Err(de::Error::custom(format!(
                        "mem_relative = {other} must be a number"
                    )))
                }
            };
            if !(value.is_finite() && value >= 0.0) {
                return Err(de::Error::custom(format!(
                    "mem_relative = {value} must be a number of 0 or more"
                )));
            }
            factor = Some(value);
        }
        factor
            .map(DiskFreeLimit::MemRelative)
            .ok_or_else(|| de::Error::custom("the table form is { mem_relative = N }"))
    }
}

/// `line 3, key 'amqp_port': invalid type: string "x", expected u16`. An unknown key is found
/// by name (toml reports it against the whole table); other errors by their span.
fn describe(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim().to_owned();
    let unknown = message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split('`').next());
    let line = match unknown {
        Some(key) => text.lines().position(|l| key_of(l) == Some(key)),
        None => error
            .span()
            .map(|span| text[..span.start.min(text.len())].matches('\n').count()),
    };
    let Some(index) = line else {
        return message;
    };
    match text.lines().nth(index).and_then(key_of) {
        Some(key) => format!("line {}, key '{key}': {message}", index + 1),
        None => format!("line {}: {message}", index + 1),
    }
}

/// The key a `key = value` line sets.
fn key_of(line: &str) -> Option<&str> {
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty() && !key.starts_with('#')).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_key_names_key_and_line() {
        let error = Config::from_toml("amqp_port = 5673\nfram_max = 10\n").unwrap_err();
        assert!(error.contains("line 2"), "{error}");
        assert!(error.contains("fram_max"), "{error}");
    }

    #[test]
    fn malformed_value_names_key_and_line() {
        let error = Config::from_toml("heartbeat = 5\n\namqp_port = \"x\"\n").unwrap_err();
        assert!(error.contains("line 3"), "{error}");
        assert!(
            error.contains("amqp_port") || error.contains("integer"),
            "{error}"
        );
    }

    #[test]
    fn alarm_limits_default_to_rabbitmqs() {
        let config = Config::from_toml("").unwrap();
        assert_eq!(
            config.memory_high_watermark(),
            MemoryWatermark::Relative(0.4)
        );
        assert_eq!(config.disk_free_limit, DiskFreeLimit::Absolute(50_000_000));
    }

    #[test]
    fn alarm_limits_take_numbers_and_units() {
        let config =
            Config::from_toml("vm_memory_high_watermark = 0.6\ndisk_free_limit = \"1GB\"\n")
                .unwrap();
        assert_eq!(
            config.memory_high_watermark(),
            MemoryWatermark::Relative(0.6)
        );
        assert_eq!(
            config.disk_free_limit,
            DiskFreeLimit::Absolute(1_000_000_000)
        );
        let config = Config::from_toml(
            "vm_memory_high_watermark_absolute = \"2GiB\"\ndisk_free_limit = 1000\n",
        )
        .unwrap();
        assert_eq!(
            config.memory_high_watermark(),
            MemoryWatermark::Absolute(2 << 30)
        );
        assert_eq!(config.disk_free_limit, DiskFreeLimit::Absolute(1000));
        let config = Config::from_toml(
            "vm_memory_high_watermark = 0\ndisk_free_limit = { mem_relative = 1.5 }\n",
        )
        .unwrap();
        assert_eq!(
            config.memory_high_watermark(),
            MemoryWatermark::Relative(0.0)
        );
        assert_eq!(config.disk_free_limit, DiskFreeLimit::MemRelative(1.5));
    }

    #[test]
    fn bad_alarm_limits_name_key_and_line() {
        for (text, key) in [
            (
                "heartbeat = 5\nvm_memory_high_watermark = 1.5\n",
                "vm_memory_high_watermark",
            ),
            (
                "heartbeat = 5\nvm_memory_high_watermark = \"40%\"\n",
                "vm_memory_high_watermark",
            ),
            (
                "heartbeat = 5\nvm_memory_high_watermark_absolute = \"2XB\"\n",
                "vm_memory_high_watermark_absolute",
            ),
            ("heartbeat = 5\ndisk_free_limit = -1\n", "disk_free_limit"),
            (
                "heartbeat = 5\ndisk_free_limit = \"lots\"\n",
                "disk_free_limit",
            ),
            (
                "heartbeat = 5\ndisk_free_limit = { relative = 2 }\n",
                "disk_free_limit",
            ),
        ] {
            let error = Config::from_toml(text).unwrap_err();
            assert!(error.contains("line 2"), "{text:?}: {error}");
            assert!(error.contains(&format!("key '{key}'")), "{text:?}: {error}");
        }
    }

    #[test]
    fn delivery_hold_defaults_to_a_millisecond_and_is_bounded() {
        assert_eq!(Config::from_toml("").unwrap().delivery_hold_ms, 1);
        assert_eq!(
            Config::from_toml("delivery_hold_ms = 0\n")
                .unwrap()
                .delivery_hold_ms,
            0
        );
        let error = Config::from_toml("delivery_hold_ms = 5000\n").unwrap_err();
        assert!(error.contains("delivery_hold_ms = 5000"), "{error}");
    }

    #[test]
    fn file_overrides_defaults_only_where_given() {
        let config = Config::from_toml("heartbeat = 5\n").unwrap();
        assert_eq!(config.heartbeat, 5);
        assert_eq!(config.amqp_port, 5672);
        assert_eq!(config.default_user, "guest");
    }
}
