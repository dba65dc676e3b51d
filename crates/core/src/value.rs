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
