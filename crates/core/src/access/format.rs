//! RabbitMQ's definitions JSON (`rabbitmqctl export_definitions`, `GET /api/definitions`):
//! the serde model Warren imports, exports and keeps its own users, vhosts, permissions and
//! policies in. Import is lenient where RabbitMQ versions differ (tags as a list or a
//! comma-separated string, operator policy definitions as a map or a list of pairs).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value as Json};

use super::password::HashingAlgorithm;
use super::policy::PolicyRecord;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Definitions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rabbit_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rabbitmq_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_version: Option<String>,
    #[serde(default)]
    pub users: Vec<UserDef>,
    #[serde(default)]
    pub vhosts: Vec<VHostDef>,
    #[serde(default)]
    pub permissions: Vec<PermissionDef>,
    #[serde(default)]
    pub topic_permissions: Vec<TopicPermissionDef>,
    #[serde(default)]
    pub parameters: Vec<ParameterDef>,
    #[serde(default)]
    pub global_parameters: Vec<Json>,
    #[serde(default)]
    pub policies: Vec<PolicyRecord>,
    #[serde(default)]
    pub queues: Vec<QueueJson>,
    #[serde(default)]
    pub exchanges: Vec<ExchangeJson>,
    #[serde(default)]
    pub bindings: Vec<BindingJson>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserDef {
    pub name: String,
    #[serde(default)]
    pub password_hash: String,
    #[serde(default)]
    pub hashing_algorithm: HashingAlgorithm,
    #[serde(default, deserialize_with = "tags")]
    pub tags: Vec<String>,
    #[serde(default)]
    pub limits: Map<String, Json>,
    /// A plain-text password, accepted on import (hashed at once, never stored).
    #[serde(default, skip_serializing)]
    pub password: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VHostMetadata {
    #[serde(default)]
    pub description: String,
    #[serde(default, deserialize_with = "tags")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_queue_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VHostDef {
    pub name: String,
    #[serde(default)]
    pub metadata: Option<VHostMetadata>,
    /// Older exports put the description and tags beside the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(
        default,
        deserialize_with = "tags",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tags: Vec<String>,
    /// RabbitMQ 3.10 writes the limits here too, as `[["max-queues", 10]]`; import reads
    /// them from `parameters` (component `vhost-limits`).
    #[serde(default)]
    pub limits: Json,
}

impl VHostDef {
    pub fn metadata(&self) -> VHostMetadata {
        let mut metadata = self.metadata.clone().unwrap_or_default();
        if metadata.description.is_empty() {
            metadata.description = self.description.clone().unwrap_or_default();
        }
        if metadata.tags.is_empty() {
            metadata.tags = self.tags.clone();
        }
        metadata
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionDef {
    pub user: String,
    pub vhost: String,
    pub configure: String,
    pub write: String,
    pub read: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicPermissionDef {
    pub user: String,
    pub vhost: String,
    pub exchange: String,
    pub write: String,
    pub read: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParameterDef {
    pub vhost: String,
    pub component: String,
    pub name: String,
    pub value: Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueJson {
    pub name: String,
    pub vhost: String,
    #[serde(default)]
    pub durable: bool,
    #[serde(default)]
    pub auto_delete: bool,
    #[serde(default)]
    pub arguments: Map<String, Json>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExchangeJson {
    pub name: String,
    pub vhost: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub durable: bool,
    #[serde(default)]
    pub auto_delete: bool,
    #[serde(default)]
    pub internal: bool,
    #[serde(default)]
    pub arguments: Map<String, Json>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BindingJson {
    pub source: String,
    pub vhost: String,
    pub destination: String,
    pub destination_type: String,
    #[serde(default)]
    pub routing_key: String,
    #[serde(default)]
    pub arguments: Map<String, Json>,
}

/// Limits of one vhost (`rabbitmqctl set_vhost_limits`); a negative value means no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VHostLimits {
    pub max_connections: Option<i64>,
    pub max_queues: Option<i64>,
}

impl VHostLimits {
    /// Reads `{"max-connections": 5, "max-queues": 10}`, refusing other keys and non-integers.
    pub fn from_json(value: &Json) -> Result<VHostLimits, String> {
        let object = value
            .as_object()
            .ok_or_else(|| format!("vhost limits must be a JSON object, got {value}"))?;
        let mut limits = VHostLimits::default();
        for (key, value) in object {
            let n = value
                .as_i64()
                .ok_or_else(|| format!("vhost limit {key} must be an integer, got {value}"))?;
            let n = (n >= 0).then_some(n);
            match key.as_str() {
                "max-connections" => limits.max_connections = n,
                "max-queues" => limits.max_queues = n,
                other => {
                    return Err(format!(
                        "unknown vhost limit '{other}': use max-connections or max-queues"
                    ))
                }
            }
        }
        Ok(limits)
    }

    pub fn to_json(self) -> Map<String, Json> {
        let mut map = Map::new();
        if let Some(n) = self.max_connections {
            map.insert("max-connections".into(), n.into());
        }
        if let Some(n) = self.max_queues {
            map.insert("max-queues".into(), n.into());
        }
        map
    }

    pub fn is_empty(self) -> bool {
        self.max_connections.is_none() && self.max_queues.is_none()
    }
}

/// An operator policy as `parameters` carry it (component `operator_policy`).
pub fn operator_policy_from_parameter(parameter: &ParameterDef) -> Result<PolicyRecord, String> {
    let value = parameter
        .value
        .as_object()
        .ok_or_else(|| format!("operator policy '{}' is not an object", parameter.name))?;
    let mut value = value.clone();
    if let Some(Json::Array(pairs)) = value.get("definition") {
        let mut definition = Map::new();
        for pair in pairs {
            match pair.as_array().map(Vec::as_slice) {
                Some([Json::String(key), v]) => {
                    definition.insert(key.clone(), v.clone());
                }
                _ => {
                    return Err(format!(
                        "operator policy '{}': bad definition",
                        parameter.name
                    ))
                }
            }
        }
        value.insert("definition".into(), Json::Object(definition));
    }
    value.insert("vhost".into(), parameter.vhost.clone().into());
    value.insert("name".into(), parameter.name.clone().into());
    serde_json::from_value(Json::Object(value))
        .map_err(|error| format!("operator policy '{}': {error}", parameter.name))
}

pub fn operator_policy_to_parameter(policy: &PolicyRecord) -> ParameterDef {
    ParameterDef {
        vhost: policy.vhost.clone(),
        component: "operator_policy".into(),
        name: policy.name.clone(),
        value: serde_json::json!({
            "pattern": policy.pattern,
            "definition": policy.definition,
            "priority": policy.priority,
            "apply-to": policy.apply_to,
        }),
    }
}

/// Tags as a JSON list or a comma-separated string (`"administrator,monitoring"`).
fn tags<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Tags {
        List(Vec<String>),
        Text(String),
        Null(()),
    }
    Ok(match Tags::deserialize(deserializer)? {
        Tags::List(list) => list,
        Tags::Text(text) => parse_tags(&text),
        Tags::Null(()) => Vec::new(),
    })
}

/// `"administrator, monitoring"` as a list, empty entries dropped.
pub fn parse_tags(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}
