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
    "stream_port",
    "node_name",
    "rabbitmq_version",
];

/// RabbitMQ key prefixes Warren knows and does not implement yet.
const NOT_IMPLEMENTED: &[&str] = &[
    "cluster_formation.",
    "auth_backends.",
    "queue_master_locator",
    "mqtt.",
    "stomp.",
    // Those stream settings not read above (tcp_listen_options, ...).
    "stream.",
];

/// Parses rabbitmq.conf text; the error names the key, its line and what to do.
pub fn parse(text: &str) -> Result<Config, String> {
    let entries = entries(text)?;
    let mut table = Table::new();
    let mut loopback: Option<Vec<String>> = None;
    for entry in &entries {
        let at = |message: String| format!("line {}, key '{}': {message}", entry.line, entry.key);
        if let Some(key) = fold_listed(entry, &mut table).map_err(at)? {
            // Checked as a whole each time it grows, so a bad value names its own line.
            check_one(key, &table[key]).map_err(at)?;
            continue;
        }
        let (key, value) = match translate(entry, &mut loopback) {
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
    if let Some(users) = loopback {
        let users = users.into_iter().map(Value::String).collect();
        table.insert("loopback_users".into(), Value::Array(users));
    }
    let mut config: Config = Value::Table(table.clone())
        .try_into()
        .map_err(|error: toml::de::Error| error.message().trim().to_owned())?;
    // As RabbitMQ's management and Prometheus plugins: a TLS listener alone replaces the
    // default plain one.
    if config.management_ssl.is_some() && !table.contains_key("management_port") {
        config.management_port = None;
    }
    if config.prometheus_ssl.is_some() && !table.contains_key("prometheus_port") {
        config.prometheus_port = None;
    }
    config.validate()?;
    Ok(config)
}

/// The settings RabbitMQ spreads over numbered or dotted keys (`listeners.tcp.N`,
/// `ssl_options.versions.N`, `management.ssl.*`, `auth_mechanisms.N`): folded into `table`
/// under their Warren key, which is returned; `None` for any other key.
fn fold_listed(entry: &Entry<'_>, table: &mut Table) -> Result<Option<&'static str>, String> {
    let (key, value) = (entry.key, entry.value);
    let string = || Value::String(value.to_owned());
    let listeners = |name: &'static str, table: &mut Table| {
        if value != "none" {
            listener_address(value)?;
        }
        let list = array(table, name);
        if value != "none" {
            list.push(string());
        }
        Ok(Some(name))
    };
    if key == "listeners.tcp" || key.starts_with("listeners.tcp.") {
        return listeners("amqp_listeners", table);
    }
    if key == "stream.listeners.tcp" || key.starts_with("stream.listeners.tcp.") {
        return listeners("stream_listeners", table);
    }
    if key == "listeners.ssl" || key.starts_with("listeners.ssl.") {
        return listeners("amqps_listeners", table);
    }
    if key.starts_with("auth_mechanisms.") {
        if !super::AUTH_MECHANISMS.contains(&value) {
            return Err(format!(
                "Warren does not implement the SASL mechanism '{value}'; use {}",
                super::AUTH_MECHANISMS.join(", ")
            ));
        }
        array(table, "auth_mechanisms").push(string());
        return Ok(Some("auth_mechanisms"));
    }
    let tls = [
        ("ssl_options.", "ssl_options"),
        ("management.ssl.", "management_ssl"),
        ("prometheus.ssl.", "prometheus_ssl"),
    ];
    let Some((setting, name)) = tls
        .iter()
        .find_map(|(prefix, name)| key.strip_prefix(prefix).map(|setting| (setting, *name)))
    else {
        return Ok(None);
    };
    fold_tls(name, setting, value, table)?;
    Ok(Some(name))
}

/// A TLS setting (`setting` of `ssl_options.*`, `management.ssl.*` or `prometheus.ssl.*`),
/// folded into the table of TLS options under `name`.
fn fold_tls(name: &str, setting: &str, value: &str, table: &mut Table) -> Result<(), String> {
    let string = || Value::String(value.to_owned());
    let options = match table
        .entry(name)
        .or_insert_with(|| Value::Table(Table::new()))
    {
        Value::Table(options) => options,
        _ => unreachable!("invariant: TLS settings are folded into a table"),
    };
    let http = name != "ssl_options";
    match setting {
        "cacertfile" | "certfile" | "keyfile" | "verify" => {
            options.insert(setting.into(), string());
        }
        "ip" if http => {
            options.insert(setting.into(), string());
        }
        "port" if http => {
            options.insert(setting.into(), typed(setting, value));
        }
        "fail_if_no_peer_cert" => {
            options.insert(setting.into(), typed(setting, value));
        }
        _ if setting.starts_with("versions.") => {
            let versions = options
                .entry("versions")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(versions) = versions {
                versions.push(string());
            }
        }
        _ => {
            return Err(format!(
                "Warren's TLS takes cacertfile, certfile, keyfile, verify, \
                 fail_if_no_peer_cert and versions.N{}; remove this line",
                if http { ", ip and port" } else { "" }
            ))
        }
    }
    Ok(())
}

/// The array under `name` in `table`, made empty the first time (a listed setting replaces
/// the default list).
fn array<'t>(table: &'t mut Table, name: &str) -> &'t mut Vec<Value> {
    match table
        .entry(name)
        .or_insert_with(|| Value::Array(Vec::new()))
    {
        Value::Array(list) => list,
        _ => unreachable!("invariant: listed settings are arrays"),
    }
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

/// The TOML key and value a rabbitmq.conf line stands for; `None` when the line was folded
/// into `listener`, `http_ips` or `loopback`.
fn translate(
    entry: &Entry<'_>,
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
        "management.tcp.ip" => renamed("management_ip"),
        "prometheus.tcp.ip" => renamed("prometheus_ip"),
        "ssl_cert_login_from" => renamed("ssl_cert_login_from"),
        "stream.advertised_host" => renamed("stream_advertised_host"),
        "stream.advertised_port" => renamed("stream_advertised_port"),
        "stream.fsync" => renamed("stream_fsync"),
        "stream.frame_max" => renamed("stream_frame_max"),
        "stream.heartbeat" => renamed("stream_heartbeat"),
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
        _ => translate_prefixed(entry, loopback),
    }
}

fn translate_prefixed(
    entry: &Entry<'_>,
    loopback: &mut Option<Vec<String>>,
) -> Result<Option<(String, Value)>, String> {
    let (key, value) = (entry.key, entry.value);
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
    "management_ip",
    "prometheus_ip",
    "ssl_cert_login_from",
    "stream_advertised_host",
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
        assert_eq!(config.amqp_addrs().unwrap(), ["[::]:5673".parse().unwrap()]);
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
        let config = parse(
            "listeners.tcp.1 = ::1:5673\nlisteners.tcp.2 = 127.0.0.1:5674\n\
             listeners.tcp.3 = 5675\nmanagement.tcp.ip = ::1\n",
        )
        .unwrap();
        let addrs: Vec<String> = config
            .amqp_addrs()
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(addrs, ["[::1]:5673", "127.0.0.1:5674", "[::]:5675"]);
        assert_eq!(config.management_ip, Some("::1".parse::<IpAddr>().unwrap()));
        let config = parse("listeners.tcp = none\nlisteners.ssl.default = 5671\n").unwrap();
        assert!(config.amqp_addrs().unwrap().is_empty());
        assert_eq!(config.amqps_addrs().unwrap()[0].port(), 5671);
    }

    #[test]
    fn tls_settings_as_rabbitmq_names_them() {
        let config = parse(
            "listeners.ssl.default = 5671\n\
             ssl_options.cacertfile = /etc/ca.pem\n\
             ssl_options.certfile = /etc/server.pem\n\
             ssl_options.keyfile = /etc/server.key\n\
             ssl_options.verify = verify_peer\n\
             ssl_options.fail_if_no_peer_cert = true\n\
             ssl_options.versions.1 = tlsv1.3\n\
             ssl_options.versions.2 = tlsv1.2\n\
             auth_mechanisms.1 = EXTERNAL\n\
             auth_mechanisms.2 = PLAIN\n\
             ssl_cert_login_from = common_name\n\
             management.ssl.port = 15671\n\
             management.ssl.certfile = /etc/server.pem\n\
             management.ssl.keyfile = /etc/server.key\n",
        )
        .unwrap();
        let tls = &config.ssl_options;
        assert_eq!(
            tls.cacertfile.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
        assert_eq!(tls.verify, crate::config::Verify::VerifyPeer);
        assert!(tls.fail_if_no_peer_cert);
        assert_eq!(tls.versions, ["tlsv1.3", "tlsv1.2"]);
        assert_eq!(config.auth_mechanisms, ["EXTERNAL", "PLAIN"]);
        assert_eq!(
            config.ssl_cert_login_from,
            crate::config::CertLoginFrom::CommonName
        );
        let https = config.management_ssl.as_ref().unwrap();
        assert_eq!(https.port, 15671);
        // As RabbitMQ's management plugin: a TLS listener alone replaces the plain one.
        assert_eq!(config.management_port, None);
        assert_eq!(config.prometheus_port, Some(15692));
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
                "heartbeat = 5\nssl_options.password = secret\n",
                "ssl_options.password",
                "remove this line",
            ),
            (
                "heartbeat = 5\nssl_options.verify = verify_maybe\n",
                "ssl_options.verify",
                "verify_peer",
            ),
            (
                "heartbeat = 5\nlisteners.ssl.default = localhost:5671\n",
                "listeners.ssl.default",
                "not a port",
            ),
            (
                "heartbeat = 5\nauth_mechanisms.1 = GSSAPI\n",
                "auth_mechanisms.1",
                "GSSAPI",
            ),
            ("heartbeat = 5\nheartbeat = soon\n", "heartbeat", "invalid"),
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

    #[test]
    fn stream_keys_fill_the_stream_settings() {
        let config = parse(
            "stream.listeners.tcp.default = 127.0.0.1:5553\nstream.advertised_host = \
             streams.example\nstream.advertised_port = 5999\nstream.fsync = true\n\
             stream.frame_max = 2097152\nstream.heartbeat = 20\n",
        )
        .unwrap();
        assert_eq!(
            config.stream_addrs().unwrap(),
            ["127.0.0.1:5553".parse().unwrap()]
        );
        assert_eq!(
            config.stream_advertised_host.as_deref(),
            Some("streams.example")
        );
        assert_eq!(config.stream_advertised_port, Some(5999));
        assert!(config.stream_fsync);
        assert_eq!(
            (config.stream_frame_max, config.stream_heartbeat),
            (2_097_152, 20)
        );
        let none = parse("stream.listeners.tcp = none\n").unwrap();
        assert!(none.stream_addrs().unwrap().is_empty());
        let error = parse("stream.tcp_listen_options.backlog = 10\n").unwrap_err();
        assert!(error.contains("stream."), "{error}");
    }
}
