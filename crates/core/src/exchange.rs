//! Exchange declarations.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{resource_name, BrokerError};
use crate::value::Table;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExchangeType {
    Direct,
    Fanout,
    Topic,
    Headers,
    /// The consistent-hash exchange of RabbitMQ's `rabbitmq_consistent_hash_exchange` plugin:
    /// binding keys are weights, each message goes to one destination picked by its hash.
    #[serde(rename = "x-consistent-hash")]
    ConsistentHash,
    /// Hash of the routing key modulo the number of bindings (RabbitMQ 4.x).
    #[serde(rename = "x-modulus-hash")]
    ModulusHash,
    /// One bound queue picked at random per message (RabbitMQ 4.0).
    #[serde(rename = "x-local-random")]
    LocalRandom,
}

impl ExchangeType {
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeType::Direct => "direct",
            ExchangeType::Fanout => "fanout",
            ExchangeType::Topic => "topic",
            ExchangeType::Headers => "headers",
            ExchangeType::ConsistentHash => "x-consistent-hash",
            ExchangeType::ModulusHash => "x-modulus-hash",
            ExchangeType::LocalRandom => "x-local-random",
        }
    }
}

impl fmt::Display for ExchangeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ExchangeType {
    type Err = BrokerError;

    fn from_str(kind: &str) -> Result<ExchangeType, BrokerError> {
        match kind {
            "direct" => Ok(ExchangeType::Direct),
            "fanout" => Ok(ExchangeType::Fanout),
            "topic" => Ok(ExchangeType::Topic),
            "headers" => Ok(ExchangeType::Headers),
            "x-consistent-hash" => Ok(ExchangeType::ConsistentHash),
            "x-modulus-hash" => Ok(ExchangeType::ModulusHash),
            "x-local-random" => Ok(ExchangeType::LocalRandom),
            // RabbitMQ 4's `rabbit_exchange:check_type` (3.10 closed the connection with 503).
            other => Err(BrokerError::precondition_failed(format!(
                "unknown exchange type '{other}'"
            ))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExchangeDef {
    pub name: Arc<str>,
    pub vhost: Arc<str>,
    #[serde(rename = "type")]
    pub kind: ExchangeType,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: Table,
}

impl ExchangeDef {
    pub fn resource(&self) -> String {
        resource_name("exchange", &self.name, &self.vhost)
    }

    /// The `alternate-exchange` argument, where unroutable messages go.
    pub fn alternate_exchange(&self) -> Option<&str> {
        self.arguments
            .get("alternate-exchange")
            .and_then(|v| v.as_str())
    }
}
