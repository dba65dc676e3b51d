//! What the broker calls itself, the same everywhere a client or tool can read it: AMQP 0.9.1
//! `server-properties`, the AMQP 1.0 open, the stream protocol's peer properties, the
//! management API (`rabbitmq_version`, `product_name`, `node`, `cluster_name`) and Prometheus
//! `rabbitmq_identity_info`.
//!
//! Clients gate features on these values (the RabbitMQ AMQP 1.0 clients refuse a `product`
//! other than `RabbitMQ` or a version below 4.0; stream clients enable features by version),
//! so Warren reports RabbitMQ's product name with the RabbitMQ version whose behaviour it
//! follows, and names itself in `warren-product` / `warren-version`.

use parking_lot::RwLock;

/// The RabbitMQ version whose behaviour Warren follows, reported unless configured otherwise.
pub const RABBITMQ_VERSION_DEFAULT: &str = "4.0.9";

/// The product every identity reports (clients compare it literally).
pub const PRODUCT: &str = "RabbitMQ";

/// Warren's own name and version, in `warren-product` / `warren-version`.
pub const WARREN_PRODUCT: &str = "Warren";
pub const WARREN_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The broker's identity. `cluster_name` changes at runtime (`PUT /api/cluster-name`).
#[derive(Debug)]
pub struct Identity {
    /// The RabbitMQ version reported (`version` property, `rabbitmq_version`).
    pub rabbitmq_version: String,
    /// RabbitMQ's node name form, `rabbit@<host>`, unless configured.
    pub node_name: String,
    cluster_name: RwLock<String>,
    /// Configured `server_properties` entries: they replace or add to what the AMQP 0.9.1
    /// `server-properties` and AMQP 1.0 open properties carry.
    pub server_properties: Vec<(String, String)>,
}

/// The settings an identity is made from (config keys `node_name`, `cluster_name`,
/// `rabbitmq_version`, `server_properties.*`); `None` takes the default.
#[derive(Debug, Clone, Default)]
pub struct IdentityConfig {
    pub rabbitmq_version: Option<String>,
    pub node_name: Option<String>,
    pub cluster_name: Option<String>,
    pub server_properties: Vec<(String, String)>,
}

impl Identity {
    pub fn new(config: &IdentityConfig) -> Identity {
        let node_name = config.node_name.clone().unwrap_or_else(default_node_name);
        let cluster_name = config
            .cluster_name
            .clone()
            .unwrap_or_else(|| node_name.clone());
        Identity {
            rabbitmq_version: config
                .rabbitmq_version
                .clone()
                .unwrap_or_else(|| RABBITMQ_VERSION_DEFAULT.to_string()),
            node_name,
            cluster_name: RwLock::new(cluster_name),
            server_properties: config.server_properties.clone(),
        }
    }

    /// The product reported (`RabbitMQ`, unless a `server_properties.product` entry says
    /// otherwise).
    pub fn product(&self) -> &str {
        self.property("product").unwrap_or(PRODUCT)
    }

    /// The version reported (`rabbitmq_version`, unless `server_properties.version` is set).
    pub fn version(&self) -> &str {
        self.property("version").unwrap_or(&self.rabbitmq_version)
    }

    /// The cluster's name (RabbitMQ's default: the node name).
    pub fn cluster_name(&self) -> String {
        self.cluster_name.read().clone()
    }

    pub fn set_cluster_name(&self, name: String) {
        *self.cluster_name.write() = name;
    }

    /// The string properties every protocol reports (AMQP 0.9.1 `server-properties`, the
    /// AMQP 1.0 open, stream peer properties), RabbitMQ's keys first, then Warren's own, with
    /// the configured `server_properties` entries replacing or adding to them.
    pub fn properties(&self) -> Vec<(String, String)> {
        let mut properties: Vec<(String, String)> = [
            ("product", PRODUCT),
            ("version", self.rabbitmq_version.as_str()),
            ("platform", "Rust"),
            ("copyright", "Copyright (c) the Warren contributors"),
            ("information", "Licensed under the Apache License 2.0"),
            ("warren-product", WARREN_PRODUCT),
            ("warren-version", WARREN_VERSION),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
        properties.insert(3, ("cluster_name".into(), self.cluster_name()));
        for (key, value) in &self.server_properties {
            match properties.iter_mut().find(|(name, _)| name == key) {
                Some(entry) => entry.1 = value.clone(),
                None => properties.push((key.clone(), value.clone())),
            }
        }
        properties
    }

    /// A configured `server_properties` entry.
    pub fn property(&self, key: &str) -> Option<&str> {
        self.server_properties
            .iter()
            .rev()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }
}

impl Default for Identity {
    fn default() -> Identity {
        Identity::new(&IdentityConfig::default())
    }
}

/// RabbitMQ's node name, `rabbit@<short hostname>`.
pub fn default_node_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string());
    let short = host.split('.').next().unwrap_or(&host).to_string();
    format!("rabbit@{short}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_rabbitmq_and_overrides_win() {
        let identity = Identity::default();
        assert_eq!(identity.product(), "RabbitMQ");
        assert_eq!(identity.version(), RABBITMQ_VERSION_DEFAULT);
        assert!(identity.node_name.starts_with("rabbit@"));
        assert_eq!(identity.cluster_name(), identity.node_name);
        let identity = Identity::new(&IdentityConfig {
            node_name: Some("rabbit@a".into()),
            server_properties: vec![("product".into(), "Other".into())],
            ..IdentityConfig::default()
        });
        assert_eq!(identity.product(), "Other");
        assert_eq!(identity.cluster_name(), "rabbit@a");
        identity.set_cluster_name("prod".into());
        assert_eq!(identity.cluster_name(), "prod");
        let properties = identity.properties();
        let get = |key: &str| {
            properties
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("product"), Some("Other"));
        assert_eq!(get("cluster_name"), Some("prod"));
        assert_eq!(get("warren-product"), Some("Warren"));
        assert_eq!(properties.iter().filter(|(k, _)| k == "product").count(), 1);
    }
}
