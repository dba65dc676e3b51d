//! Protocol-neutral argument values: queue and exchange arguments, binding arguments and the
//! message headers a headers exchange matches on. Each protocol converts its own field types.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Arguments keyed by name. Ordered, so equal tables compare equal whatever the wire order.
pub type Table = BTreeMap<String, Value>;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "lowercase")]
pub enum Value {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    Decimal { scale: u8, value: u32 },
    Timestamp(u64),
    Array(Vec<Value>),
    Table(Table),
    Void,
}

impl Value {
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(value) => Some(*value),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(value) => Some(value),
            Value::Bytes(value) => std::str::from_utf8(value).ok(),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    /// As RabbitMQ prints argument values in inequivalence errors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(value) => write!(f, "{value}"),
            Value::Int(value) => write!(f, "{value}"),
            Value::Float(value) => write!(f, "{value}"),
            Value::Str(value) => write!(f, "{value}"),
            Value::Bytes(value) => write!(f, "{}", String::from_utf8_lossy(value)),
            Value::Decimal { scale, value } => write!(f, "{value}e-{scale}"),
            Value::Timestamp(value) => write!(f, "{value}"),
            Value::Array(values) => write!(f, "{values:?}"),
            Value::Table(table) => write!(f, "{table:?}"),
            Value::Void => write!(f, "none"),
        }
    }
}

/// A JSON value (definitions files, the HTTP API) as an argument value: integers stay
/// integers, objects become tables, `null` is void.
pub fn from_json(json: &serde_json::Value) -> Value {
    match json {
        serde_json::Value::Null => Value::Void,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::String(s) => Value::Str(s.clone()),
        serde_json::Value::Array(items) => Value::Array(items.iter().map(from_json).collect()),
        serde_json::Value::Object(map) => {
            Value::Table(map.iter().map(|(k, v)| (k.clone(), from_json(v))).collect())
        }
    }
}

/// A JSON object's entries as a table (`from_json` of each value).
pub fn table_from_json(map: &serde_json::Map<String, serde_json::Value>) -> Table {
    map.iter().map(|(k, v)| (k.clone(), from_json(v))).collect()
}

/// An argument value as RabbitMQ writes it in JSON: bytes as text when they are UTF-8,
/// timestamps and decimals as numbers.
pub fn to_json(value: &Value) -> serde_json::Value {
    match value {
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => serde_json::Value::from(*i),
        Value::Float(f) => serde_json::Value::from(*f),
        Value::Str(s) => serde_json::Value::String(s.clone()),
        Value::Bytes(bytes) => serde_json::Value::String(String::from_utf8_lossy(bytes).into()),
        Value::Decimal { scale, value } => {
            serde_json::Value::from(f64::from(*value) / 10f64.powi(i32::from(*scale)))
        }
        Value::Timestamp(t) => serde_json::Value::from(*t),
        Value::Array(items) => serde_json::Value::Array(items.iter().map(to_json).collect()),
        Value::Table(table) => serde_json::Value::Object(table_to_json(table)),
        Value::Void => serde_json::Value::Null,
    }
}

/// A table as a JSON object.
pub fn table_to_json(table: &Table) -> serde_json::Map<String, serde_json::Value> {
    table.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()
}
