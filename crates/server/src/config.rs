//! Broker settings: embedded defaults, overridden by a TOML file, then by command-line flags.
//!
//! Key names follow RabbitMQ's where one exists (`frame_max`, `heartbeat`, `channel_max`,
//! `default_user`, `loopback_users`), so operators recognise them. Every key is documented in
//! README.md; an unknown or malformed key stops startup with the key and the line named.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Everything the broker needs to start. `Default` is the embedded configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the AMQP listener binds (`0.0.0.0` = every interface, as RabbitMQ).
    pub bind_address: IpAddr,
    /// AMQP 0.9.1 port; 0 picks a free port (tests).
    pub amqp_port: u16,
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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind_address: IpAddr::from([0, 0, 0, 0]),
            amqp_port: 5672,
            data_dir: PathBuf::from("warren-data"),
            frame_max: 131_072,
            channel_max: 2047,
            heartbeat: 60,
            max_message_size: 128 * 1024 * 1024,
            default_user: "guest".into(),
            default_pass: "guest".into(),
            default_vhost: "/".into(),
            loopback_users: vec!["guest".into()],
            log_level: "info".into(),
            queue_memory_budget: 64 * 1024 * 1024,
            store_segment_size: 64 * 1024 * 1024,
            credit_flow_default_credit: 2_000,
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
    /// Reads a TOML config file over the embedded defaults.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::from_toml(&text).map_err(|message| ConfigError::Invalid {
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

    fn validate(&self) -> Result<(), String> {
        if self.frame_max != 0 && self.frame_max < 4096 {
            return Err(format!(
                "frame_max = {} is below the AMQP minimum of 4096 bytes",
                self.frame_max
            ));
        }
        if self.channel_max == 0 {
            return Err("channel_max must be at least 1".into());
        }
        Ok(())
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
    fn file_overrides_defaults_only_where_given() {
        let config = Config::from_toml("heartbeat = 5\n").unwrap();
        assert_eq!(config.heartbeat, 5);
        assert_eq!(config.amqp_port, 5672);
        assert_eq!(config.default_user, "guest");
    }
}
