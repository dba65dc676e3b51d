//! RabbitMQ's `rabbitmq.conf` (its sysctl-like format: `# comments`, `key = value` lines with
//! untyped values), read onto the same `Config` the TOML file fills.
//!
//! Each RabbitMQ key Warren implements is rewritten to the TOML key and value it stands for,
//! then checked on its own, so that a bad value names its line; Warren-only keys keep their
//! names. A RabbitMQ key Warren does not implement, or an unknown key, stops startup.

use std::net::IpAddr;

use toml::{Table, Value};

use super::Config;

/// One `key = value` line.
struct Entry<'a> {
    line: usize,
    key: &'a str,
    value: &'a str,
}

/// Keys whose value RabbitMQ and Warren both name the same way; the value is typed as TOML
/// would read it (integer, float, boolean, else string).
const SAME_NAME: &[&str] = &[
    "frame_max",
    "channel_max",
    "heartbeat",
    "max_message_size",
    "default_user",
    "default_pass",
    "default_vhost",
    "load_definitions",
    "cluster_name",
    "credit_flow_default_credit",
    // Warren's own settings, under their Warren names.
    "data_dir",
    "amqp_port",
    "management_port",
    "prometheus_port",
    "bind_address",
    "log_level",
    "queue_memory_budget",
    "store_segment_size",
    "max_link_credit",
    "max_incoming_window",
    "max_queue_credit",
    "delivery_hold_ms",
    "node_name",
    "rabbitmq_version",
];

/// RabbitMQ key prefixes Warren knows and does not implement yet.
const NOT_IMPLEMENTED: &[&str] = &[
    "listeners.ssl.",
    "ssl_options.",
    "management.ssl.",
    "prometheus.ssl.",
    "auth_mechanisms.",
    "ssl_cert_login_from",
    "cluster_formation.",
    "auth_backends.",
    "queue_master_locator",
    "mqtt.",
    "stomp.",
    "stream.",
];

/// Parses rabbitmq.conf text; the error names the key, its line and what to do.
pub fn parse(text: &str) -> Result<Config, String> {
    let entries = entries(text)?;
    let mut table = Table::new();
    let mut listener: Option<(usize, Option<IpAddr>, u16)> = None;
    let mut http_ips: Vec<(usize, &str, IpAddr)> = Vec::new();
    let mut loopback: Option<Vec<String>> = None;
    for entry in &entries {
        let at = |message: String| format!("line {}, key '{}': {message}", entry.line, entry.key);
        let (key, value) = match translate(entry, &mut listener, &mut http_ips, &mut loopback) {
            Ok(Some(pair)) => pair,
            Ok(None) => continue,
            Err(message) => return Err(at(message)),
        };
        check_one(&key, &value).map_err(at)?;
        match (table.get_mut(&key), value) {
            (Some(Value::Table(properties)), Value::Table(more)) => properties.extend(more),
            (_, value) => drop(table.insert(key, value)),
        }
    }
    if let Some((_, ip, port)) = listener {
        table.insert("amqp_port".into(), Value::Integer(port.into()));
        if let Some(ip) = ip {
            table.insert("bind_address".into(), Value::String(ip.to_string()));
        }
    }
    let bind = listener.and_then(|(_, ip, _)| ip);
    for (line, key, ip) in http_ips {
        if Some(ip) != bind && !(ip.is_unspecified() && bind.is_none()) {
            return Err(format!(
                "line {line}, key '{key}': Warren serves HTTP on the AMQP listener's address \
                 ({}); give the listener (listeners.tcp.default = {ip}:5672) that address or \
                 remove this line",
                bind.map_or("every interface".to_string(), |ip| ip.to_string())
            ));
        }
    }
    if let Some(users) = loopback {
        let users = users.into_iter().map(Value::String).collect();
        table.insert("loopback_users".into(), Value::Array(users));
    }
    let config: Config = Value::Table(table)
        .try_into()
        .map_err(|error: toml::de::Error| error.message().trim().to_owned())?;
    config.validate()?;
    Ok(config)
}

/// The `key = value` lines of `text`, skipping blanks and `#` comments.
fn entries(text: &str) -> Result<Vec<Entry<'_>>, String> {
    let mut entries = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!(
                "line {}: '{line}' is not a `key = value` line",
                index + 1
            ));
        };
        let (key, value) = (key.trim(), value.trim());
        if key.is_empty() || value.is_empty() {
            return Err(format!(
                "line {}: '{line}' needs both a key and a value",
                index + 1
            ));
        }
        entries.push(Entry {
            line: index + 1,
            key,
            value,
        });
    }
    Ok(entries)
}

type Listener = Option<(usize, Option<IpAddr>, u16)>;

/// The TOML key and value a rabbitmq.conf line stands for; `None` when the line was folded
/// into `listener`, `http_ips` or `loopback`.
fn translate<'a>(
    entry: &Entry<'a>,
    listener: &mut Listener,
    http_ips: &mut Vec<(usize, &'a str, IpAddr)>,
    loopback: &mut Option<Vec<String>>,
) -> Result<Option<(String, Value)>, String> {
    let (key, value) = (entry.key, entry.value);
    let renamed = |name: &str| Ok(Some((name.to_owned(), typed(name, value))));
    if SAME_NAME.contains(&key) {
        return renamed(key);
    }
    if let Some(server_property) = key.strip_prefix("server_properties.") {
        let mut table = Table::new();
        table.insert(server_property.to_owned(), Value::String(value.to_owned()));
        return Ok(Some(("server_properties".into(), Value::Table(table))));
    }
    match key {
        "management.tcp.port" => renamed("management_port"),
        "prometheus.tcp.port" => renamed("prometheus_port"),
        "management.tcp.ip" | "prometheus.tcp.ip" => {
            let ip = value
                .parse()
                .map_err(|_| format!("'{value}' is not an IP address"))?;
            http_ips.push((entry.line, key, ip));
            Ok(None)
        }
        "definitions.local.path" => renamed("load_definitions"),
        "definitions.import_backend" if value == "local_filesystem" => Ok(None),
        "definitions.import_backend" => Err(format!(
            "Warren imports definitions from a local file only; use local_filesystem, not {value}"
        )),
        "log.console.level" | "log.file.level" => {
            let level = match value {
                "warning" => "warn",
                "critical" | "alert" | "emergency" => "error",
                "none" => "off",
                other => other,
            };
            Ok(Some(("log_level".into(), Value::String(level.to_owned()))))
        }
        "log.console" | "log.file" => Ok(None),
        "vm_memory_high_watermark.relative" => renamed("vm_memory_high_watermark"),
        "vm_memory_high_watermark.absolute" => renamed("vm_memory_high_watermark_absolute"),
        "disk_free_limit.absolute" => renamed("disk_free_limit"),
        "disk_free_limit.relative" => {
            let mut table = Table::new();
            table.insert("mem_relative".into(), typed(key, value));
            Ok(Some(("disk_free_limit".into(), Value::Table(table))))
        }
        "loopback_users" if value == "none" => {
            *loopback = Some(Vec::new());
            Ok(None)
        }
        _ => translate_prefixed(entry, listener, loopback),
    }
}

fn translate_prefixed(
    entry: &Entry<'_>,
    listener: &mut Listener,
    loopback: &mut Option<Vec<String>>,
) -> Result<Option<(String, Value)>, String> {
    let (key, value) = (entry.key, entry.value);
    if key.starts_with("listeners.tcp.") {
        if let Some((line, _, _)) = listener {
            return Err(format!(
                "Warren binds one AMQP listener and line {line} already sets it; keep one \
                 listeners.tcp.* line"
            ));
        }
        let (ip, port) = listener_address(value)?;
        *listener = Some((entry.line, ip, port));
        return Ok(None);
    }
    if let Some(user) = key.strip_prefix("loopback_users.") {
        let users = loopback.get_or_insert_with(|| vec!["guest".to_owned()]);
        users.retain(|name| name != user);
        match value {
            "true" => users.push(user.to_owned()),
            "false" => {}
            _ => return Err(format!("'{value}' is not true or false")),
        }
        return Ok(None);
    }
    if let Some(prefix) = NOT_IMPLEMENTED.iter().find(|p| key.starts_with(*p)) {
        return Err(format!(
            "Warren does not implement RabbitMQ's {}* settings yet; remove this line",
            prefix
        ));
    }
    Err("unknown setting: README.md lists the keys Warren reads; remove this line".into())
}

/// A listener value: `5672`, `127.0.0.1:5672`, `::1:5672` or `[::1]:5672`.
pub fn listener_address(value: &str) -> Result<(Option<IpAddr>, u16), String> {
    let bad = || format!("'{value}' is not a port or an ip:port listener");
    if let Ok(port) = value.parse::<u16>() {
        return Ok((None, port));
    }
    let (ip, port) = value.rsplit_once(':').ok_or_else(bad)?;
    let ip = ip.trim_start_matches('[').trim_end_matches(']');
    let ip: IpAddr = ip.parse().map_err(|_| bad())?;
    let port = port.parse().map_err(|_| bad())?;
    Ok((Some(ip), port))
}

/// Settings whose value is always a string, even when it looks like a number.
const STRINGS: &[&str] = &[
    "default_user",
    "default_pass",
    "default_vhost",
    "load_definitions",
    "cluster_name",
    "node_name",
    "rabbitmq_version",
    "data_dir",
    "bind_address",
    "log_level",
];

/// An untyped value as RabbitMQ types it for `key`: a string for the names above, else as
/// TOML would read it.
fn typed(key: &str, value: &str) -> Value {
    if STRINGS.contains(&key) {
        Value::String(value.to_owned())
    } else if let Ok(integer) = value.parse::<i64>() {
        Value::Integer(integer)
    } else if let Ok(float) = value.parse::<f64>() {
        Value::Float(float)
    } else if let Ok(boolean) = value.parse::<bool>() {
        Value::Boolean(boolean)
    } else {
        Value::String(value.to_owned())
    }
}

/// Deserializes `key = value` alone, so that a bad value is reported against its line.
fn check_one(key: &str, value: &Value) -> Result<(), String> {
    let mut table = Table::new();
    table.insert(key.to_owned(), value.clone());
    Value::Table(table)
        .try_into::<Config>()
        .map(drop)
        .map_err(|error| error.message().trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DiskFreeLimit, MemoryWatermark};

    /// An operator's file in RabbitMQ's documented style, trimmed to what Warren supports.
    const OPERATOR_FILE: &str = "\
# Networking
listeners.tcp.default = 5673

management.tcp.port = 15673
prometheus.tcp.port = 15693

## Limits
frame_max = 131072
channel_max = 128
heartbeat = 30
max_message_size = 16777216

default_vhost = /
default_user = admin
default_pass = 1234
loopback_users.guest = false

definitions.import_backend = local_filesystem
definitions.local.path = /etc/rabbitmq/definitions.json

log.console = true
log.console.level = warning

vm_memory_high_watermark.relative = 0.6
disk_free_limit.absolute = 2GB
cluster_name = prod-eu
server_properties.region = eu-west
server_properties.team = queues
";

    #[test]
    fn operator_file_fills_config() {
        let config = parse(OPERATOR_FILE).unwrap();
        assert_eq!(config.amqp_port, 5673);
        assert_eq!(config.management_port, Some(15673));
        assert_eq!(config.prometheus_port, Some(15693));
        assert_eq!((config.frame_max, config.channel_max), (131_072, 128));
        assert_eq!(config.heartbeat, 30);
        assert_eq!(config.max_message_size, 16_777_216);
        assert_eq!(config.default_user, "admin");
        assert_eq!(config.default_pass, "1234");
        assert!(config.loopback_users.is_empty());
        assert_eq!(
            config.load_definitions.as_deref(),
            Some(std::path::Path::new("/etc/rabbitmq/definitions.json"))
        );
        assert_eq!(config.log_level, "warn");
        assert_eq!(
            config.memory_high_watermark(),
            MemoryWatermark::Relative(0.6)
        );
        assert_eq!(
            config.disk_free_limit,
            DiskFreeLimit::Absolute(2_000_000_000)
        );
        assert_eq!(config.cluster_name.as_deref(), Some("prod-eu"));
        assert_eq!(config.server_properties.len(), 2);
        assert_eq!(config.server_properties["region"], "eu-west");
    }

    #[test]
    fn listener_forms() {
        for (value, ip, port) in [
            ("5672", None, 5672),
            ("127.0.0.1:5673", Some("127.0.0.1"), 5673),
            ("::1:5674", Some("::1"), 5674),
            ("[::1]:5675", Some("::1"), 5675),
        ] {
            let ip = ip.map(|ip| ip.parse().unwrap());
            assert_eq!(listener_address(value).unwrap(), (ip, port), "{value}");
        }
        assert!(listener_address("localhost:5672").is_err());
        assert!(listener_address("70000").is_err());
        let config = parse("listeners.tcp.1 = ::1:5673\nmanagement.tcp.ip = ::1\n").unwrap();
        assert_eq!(config.bind_address, "::1".parse::<IpAddr>().unwrap());
        assert_eq!(config.amqp_port, 5673);
    }

    #[test]
    fn relative_and_absolute_limits() {
        let config =
            parse("vm_memory_high_watermark.absolute = 1GiB\ndisk_free_limit.relative = 1.5\n")
                .unwrap();
        assert_eq!(
            config.memory_high_watermark(),
            MemoryWatermark::Absolute(1 << 30)
        );
        assert_eq!(config.disk_free_limit, DiskFreeLimit::MemRelative(1.5));
        assert!(parse("loopback_users = none\n")
            .unwrap()
            .loopback_users
            .is_empty());
    }

    #[test]
    fn refusals_name_key_line_and_fix() {
        for (text, key, hint) in [
            ("heartbeat = 5\nfoo.bar = 1\n", "foo.bar", "unknown setting"),
            (
                "heartbeat = 5\nssl_options.certfile = /x.pem\n",
                "ssl_options.certfile",
                "does not implement",
            ),
            ("heartbeat = 5\nheartbeat = soon\n", "heartbeat", "invalid"),
            (
                "listeners.tcp.1 = 5672\nlisteners.tcp.2 = 5673\n",
                "listeners.tcp.2",
                "one AMQP listener",
            ),
            (
                "heartbeat = 5\nmanagement.tcp.ip = 10.0.0.1\n",
                "management.tcp.ip",
                "AMQP listener's address",
            ),
            (
                "heartbeat = 5\ndefinitions.import_backend = https\n",
                "definitions.import_backend",
                "local_filesystem",
            ),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains("line 2"), "{text:?}: {error}");
            assert!(error.contains(&format!("key '{key}'")), "{text:?}: {error}");
            assert!(error.contains(hint), "{text:?}: {error}");
        }
        let error = parse("heartbeat\n").unwrap_err();
        assert!(error.contains("line 1"), "{error}");
    }
}
