//! A queue's effective settings (`QueueArgs`), computed from its declare arguments.
//!
//! Everything the classic queue reads from `x-*` arguments is parsed and validated here once,
//! at queue.declare, with RabbitMQ's rules and error texts (`rabbit_amqqueue:declare_args/0`):
//! `invalid arg 'x-max-priority' for queue 'q' in vhost '/': {max_value_exceeded,300}`. A
//! policy layer will compute the same struct from arguments plus policy and hand it to the
//! running queue (`QueueCmd::SetArgs`); the queue never looks at the raw table again.

use std::sync::Arc;

use crate::error::BrokerError;
use crate::queue::QueueDef;
use crate::value::{Table, Value};

/// RabbitMQ's `MAX_SUPPORTED_PRIORITY`.
pub const MAX_PRIORITY: i64 = 255;
/// RabbitMQ's `MAX_EXPIRY_TIMER` (2^32 - 1 ms): the longest TTL or expiry accepted.
pub const MAX_EXPIRY_MS: i64 = 4_294_967_295;

/// What a full queue does with a new message (`x-overflow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Enqueue it and drop (or dead-letter) the oldest.
    #[default]
    DropHead,
    /// Refuse it: the publisher gets a basic.nack.
    RejectPublish,
    /// Refuse it and dead-letter it.
    RejectPublishDlx,
}

/// The settings of a running queue.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueArgs {
    /// `x-message-ttl`: how long a message may wait in the queue.
    pub message_ttl_ms: Option<u32>,
    /// `x-expires`: delete the queue after it was unused this long.
    pub expires_ms: Option<u32>,
    /// `x-max-length`: ready messages at most.
    pub max_length: Option<u64>,
    /// `x-max-length-bytes`: body bytes of ready messages at most.
    pub max_length_bytes: Option<u64>,
    pub overflow: Overflow,
    /// `x-dead-letter-exchange` (`""` is the default exchange).
    pub dead_letter_exchange: Option<Arc<str>>,
    /// `x-dead-letter-routing-key`; `None` keeps the message's own routing key.
    pub dead_letter_routing_key: Option<Arc<str>>,
    /// `x-max-priority`: message priorities above it count as it; `None` = no priorities.
    pub max_priority: Option<u8>,
    /// `x-single-active-consumer`.
    pub single_active_consumer: bool,
    /// `x-queue-mode=lazy`.
    pub lazy: bool,
    /// `x-max-age` (streams): segments whose messages are all older are deleted.
    pub max_age_ms: Option<u64>,
    /// `x-stream-max-segment-size-bytes` (streams): the size at which a segment rolls.
    pub segment_bytes_max: Option<u64>,
}

impl QueueArgs {
    /// Parses and validates the arguments of `def` (a 406 naming the argument when invalid).
    pub fn from_def(def: &QueueDef) -> Result<QueueArgs, BrokerError> {
        let arguments = &def.arguments;
        let check = Check {
            arguments,
            resource: def.resource(),
        };
        check.dead_letter_exchange_type()?;
        let args = QueueArgs {
            expires_ms: check.expiry("x-expires", false)?,
            message_ttl_ms: check.expiry("x-message-ttl", true)?,
            dead_letter_exchange: check.string("x-dead-letter-exchange")?,
            dead_letter_routing_key: check.dead_letter_routing_key()?,
            max_length: check.non_negative("x-max-length")?,
            max_length_bytes: check.non_negative("x-max-length-bytes")?,
            max_priority: check.max_priority()?,
            overflow: check.overflow()?,
            single_active_consumer: check.boolean("x-single-active-consumer")?,
            lazy: arguments.get("x-queue-mode").and_then(Value::as_str) == Some("lazy"),
            max_age_ms: check.max_age()?,
            segment_bytes_max: check.non_negative("x-stream-max-segment-size-bytes")?,
        };
        Ok(args)
    }

    /// Whether a publish to this queue may be refused (the publisher must wait for the queue
    /// before it is confirmed).
    pub fn rejects_publishes(&self) -> bool {
        self.overflow != Overflow::DropHead
            && (self.max_length.is_some() || self.max_length_bytes.is_some())
    }

    /// The priority level a message of `priority` goes to.
    pub fn level(&self, priority: u8) -> usize {
        usize::from(priority.min(self.max_priority.unwrap_or(0)))
    }
}

struct Check<'a> {
    arguments: &'a Table,
    resource: String,
}

impl Check<'_> {
    fn invalid(&self, key: &str, error: impl std::fmt::Display) -> BrokerError {
        BrokerError::precondition_failed(format!(
            "invalid arg '{key}' for {}: {error}",
            self.resource
        ))
    }

    fn unacceptable(&self, key: &str, value: &Value) -> BrokerError {
        self.invalid(key, format!("{{unacceptable_type,{}}}", type_name(value)))
    }

    /// RabbitMQ 3.10 words a non-integer differently from other type errors (an Erlang
    /// string, hence the quotes).
    fn integer(&self, key: &str) -> Result<Option<i64>, BrokerError> {
        match self.arguments.get(key) {
            None => Ok(None),
            Some(Value::Int(value)) => Ok(Some(*value)),
            Some(other) => Err(self.invalid(
                key,
                format!("\"expected integer, got {}\"", type_name(other)),
            )),
        }
    }

    fn non_negative(&self, key: &str) -> Result<Option<u64>, BrokerError> {
        match self.integer(key)? {
            Some(value) if value < 0 => {
                Err(self.invalid(key, format!("{{value_negative,{value}}}")))
            }
            value => Ok(value.map(|v| v.unsigned_abs())),
        }
    }

    /// `x-message-ttl` (0 allowed) and `x-expires` (0 refused), as `rabbit_misc:check_expiry`.
    fn expiry(&self, key: &str, zero_ok: bool) -> Result<Option<u32>, BrokerError> {
        let Some(value) = self.integer(key)? else {
            return Ok(None);
        };
        if value == 0 && !zero_ok {
            return Err(self.invalid(key, "{value_zero,0}"));
        }
        if value < 0 {
            return Err(self.invalid(key, format!("{{value_negative,{value}}}")));
        }
        u32::try_from(value)
            .map(Some)
            .map_err(|_| self.invalid(key, format!("{{value_too_large,{value}}}")))
    }

    fn max_priority(&self) -> Result<Option<u8>, BrokerError> {
        let key = "x-max-priority";
        match self.non_negative(key)? {
            None | Some(0) => Ok(None),
            Some(value) => u8::try_from(value)
                .map(Some)
                .map_err(|_| self.invalid(key, format!("{{max_value_exceeded,{value}}}"))),
        }
    }

    fn string(&self, key: &str) -> Result<Option<Arc<str>>, BrokerError> {
        match self.arguments.get(key) {
            None => Ok(None),
            Some(Value::Str(value)) => Ok(Some(Arc::from(value.as_str()))),
            Some(other) => Err(self.unacceptable(key, other)),
        }
    }

    fn boolean(&self, key: &str) -> Result<bool, BrokerError> {
        match self.arguments.get(key) {
            None => Ok(false),
            Some(Value::Bool(value)) => Ok(*value),
            Some(other) => Err(self.unacceptable(key, other)),
        }
    }

    /// RabbitMQ checks the dead-letter exchange's type in the channel, before the other
    /// arguments, with its own text.
    fn dead_letter_exchange_type(&self) -> Result<(), BrokerError> {
        let key = "x-dead-letter-exchange";
        match self.arguments.get(key) {
            None | Some(Value::Str(_)) => Ok(()),
            Some(other) => Err(BrokerError::precondition_failed(format!(
                "invalid type '{}' for arg '{key}' in {}",
                type_name(other),
                self.resource
            ))),
        }
    }

    fn dead_letter_routing_key(&self) -> Result<Option<Arc<str>>, BrokerError> {
        let key = "x-dead-letter-routing-key";
        let value = self.string(key)?;
        if value.is_some() && !self.arguments.contains_key("x-dead-letter-exchange") {
            return Err(self.invalid(key, "routing_key_but_no_dlx_defined"));
        }
        Ok(value)
    }

    /// `x-max-age`: a string such as `7D` (RabbitMQ's `check_max_age_arg`).
    fn max_age(&self) -> Result<Option<u64>, BrokerError> {
        let key = "x-max-age";
        match self.arguments.get(key) {
            None => Ok(None),
            Some(Value::Str(text)) => super::consume_start::age_ms(text)
                .map(Some)
                .ok_or_else(|| self.invalid(key, "invalid_max_age")),
            Some(other) => Err(self.unacceptable(key, other)),
        }
    }

    fn overflow(&self) -> Result<Overflow, BrokerError> {
        let key = "x-overflow";
        match self.arguments.get(key) {
            None => Ok(Overflow::DropHead),
            Some(Value::Str(value)) => match value.as_str() {
                "drop-head" => Ok(Overflow::DropHead),
                "reject-publish" => Ok(Overflow::RejectPublish),
                "reject-publish-dlx" => Ok(Overflow::RejectPublishDlx),
                _ => Err(self.invalid(key, "invalid_overflow")),
            },
            Some(other) => Err(self.unacceptable(key, other)),
        }
    }
}

/// The AMQP 0.9.1 type name RabbitMQ prints for a value (`longstr`, `bool`, ...).
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Bool(_) => "bool",
        Value::Int(_) => "long",
        Value::Float(_) => "double",
        Value::Str(_) => "longstr",
        Value::Bytes(_) => "binary",
        Value::Decimal { .. } => "decimal",
        Value::Timestamp(_) => "timestamp",
        Value::Array(_) => "array",
        Value::Table(_) => "table",
        Value::Void => "void",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(entries: &[(&str, Value)]) -> QueueDef {
        QueueDef {
            name: Arc::from("q"),
            vhost: Arc::from("/"),
            durable: false,
            exclusive_owner: None,
            auto_delete: false,
            arguments: entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        }
    }

    fn error(entries: &[(&str, Value)]) -> String {
        QueueArgs::from_def(&def(entries)).unwrap_err().text
    }

    #[test]
    fn valid_arguments_parse() {
        let args = QueueArgs::from_def(&def(&[
            ("x-message-ttl", Value::Int(0)),
            ("x-expires", Value::Int(1000)),
            ("x-max-length", Value::Int(3)),
            ("x-overflow", Value::Str("reject-publish-dlx".into())),
            ("x-dead-letter-exchange", Value::Str("dlx".into())),
            ("x-dead-letter-routing-key", Value::Str("rk".into())),
            ("x-max-priority", Value::Int(10)),
            ("x-single-active-consumer", Value::Bool(true)),
        ]))
        .unwrap();
        assert_eq!(args.message_ttl_ms, Some(0));
        assert_eq!(args.expires_ms, Some(1000));
        assert_eq!(args.max_length, Some(3));
        assert_eq!(args.overflow, Overflow::RejectPublishDlx);
        assert_eq!(args.max_priority, Some(10));
        assert_eq!(args.level(200), 10);
        assert!(args.single_active_consumer && args.rejects_publishes());
    }

    #[test]
    fn invalid_arguments_are_named_as_rabbitmq_does() {
        let q = "for queue 'q' in vhost '/'";
        let cases = [
            (
                ("x-max-priority", Value::Int(300)),
                format!("invalid arg 'x-max-priority' {q}: {{max_value_exceeded,300}}"),
            ),
            (
                ("x-message-ttl", Value::Int(-1)),
                format!("invalid arg 'x-message-ttl' {q}: {{value_negative,-1}}"),
            ),
            (
                ("x-expires", Value::Int(0)),
                format!("invalid arg 'x-expires' {q}: {{value_zero,0}}"),
            ),
            (
                ("x-max-length", Value::Str("10".into())),
                format!("invalid arg 'x-max-length' {q}: \"expected integer, got longstr\""),
            ),
            (
                ("x-overflow", Value::Str("drop-tail".into())),
                format!("invalid arg 'x-overflow' {q}: invalid_overflow"),
            ),
            (
                ("x-single-active-consumer", Value::Int(1)),
                format!("invalid arg 'x-single-active-consumer' {q}: {{unacceptable_type,long}}"),
            ),
            (
                ("x-dead-letter-routing-key", Value::Str("k".into())),
                format!(
                    "invalid arg 'x-dead-letter-routing-key' {q}: \
                     routing_key_but_no_dlx_defined"
                ),
            ),
            (
                ("x-dead-letter-exchange", Value::Int(1)),
                "invalid type 'long' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'"
                    .to_string(),
            ),
        ];
        for ((key, value), expected) in cases {
            assert_eq!(error(&[(key, value)]), expected);
        }
    }
}
