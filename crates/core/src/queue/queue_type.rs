//! Which queue types Warren has, decided from `x-queue-type` (RabbitMQ's
//! `rabbit_amqqueue:check_queue_type`). A type Warren does not have is refused with RabbitMQ's
//! 406 PRECONDITION_FAILED, never replaced by another: a client that asks for a quorum queue
//! or a stream must not get a classic queue that claims to be one.
//!
//! Every front end (AMQP 0.9.1 and 1.0, the HTTP API, definitions import, `warren ctl`
//! through the API) reaches this through `VHost::declare_queue`.

use crate::error::BrokerError;
use crate::value::{Table, Value};

/// The queue types Warren implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueType {
    Classic,
}

/// RabbitMQ's queue types that Warren does not implement yet.
const NOT_YET: [&str; 2] = ["quorum", "stream"];

impl QueueType {
    /// The name RabbitMQ reports (`type` in the HTTP API, the AMQP 1.0 management node).
    pub fn name(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
        }
    }

    /// The type `arguments` ask for (classic when they name none); `resource` is RabbitMQ's
    /// `queue 'q' in vhost '/'` for the error text.
    pub fn from_arguments(resource: &str, arguments: &Table) -> Result<QueueType, BrokerError> {
        let invalid = |error: String| {
            BrokerError::precondition_failed(format!(
                "invalid arg 'x-queue-type' for {resource}: {error}"
            ))
        };
        match arguments.get("x-queue-type") {
            None => Ok(QueueType::Classic),
            Some(Value::Str(name)) => match name.as_str() {
                "classic" => Ok(QueueType::Classic),
                other if NOT_YET.contains(&other) => Err(invalid(format!(
                    "\"queue type '{other}' is not supported by Warren yet (only classic \
                     queues are); declare the queue without x-queue-type or with \
                     x-queue-type=classic\""
                ))),
                other => Err(invalid(format!("\"unsupported queue type '{other}'\""))),
            },
            Some(other) => Err(invalid(format!(
                "{{unacceptable_type,{}}}",
                super::args::type_name(other)
            ))),
        }
    }
}

/// A vhost's `default_queue_type` must be one Warren has: with `quorum` RabbitMQ would make
/// every durable queue declared without a type a quorum queue.
pub fn check_default_queue_type(vhost: &str, default: Option<&str>) -> Result<(), BrokerError> {
    match default {
        None | Some("" | "undefined" | "classic") => Ok(()),
        Some(other) => Err(BrokerError::precondition_failed(format!(
            "vhost '{vhost}': default queue type '{other}' is not supported by Warren (only \
             classic queues are); leave default_queue_type unset or set it to classic"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(value: Value) -> Table {
        let mut table = Table::default();
        table.insert("x-queue-type".into(), value);
        table
    }

    #[test]
    fn only_classic_is_accepted() {
        let q = "queue 'q' in vhost '/'";
        assert_eq!(
            QueueType::from_arguments(q, &Table::default()),
            Ok(QueueType::Classic)
        );
        assert_eq!(
            QueueType::from_arguments(q, &table(Value::Str("classic".into()))),
            Ok(QueueType::Classic)
        );
        let quorum = QueueType::from_arguments(q, &table(Value::Str("quorum".into())));
        let text = quorum.unwrap_err().text;
        assert!(text.starts_with("invalid arg 'x-queue-type' for queue 'q' in vhost '/': "));
        assert!(
            text.contains("'quorum' is not supported by Warren yet"),
            "{text}"
        );
        let other = QueueType::from_arguments(q, &table(Value::Str("fast".into())));
        assert_eq!(
            other.unwrap_err().text,
            "invalid arg 'x-queue-type' for queue 'q' in vhost '/': \
             \"unsupported queue type 'fast'\""
        );
        let number = QueueType::from_arguments(q, &table(Value::Int(1)));
        assert!(number
            .unwrap_err()
            .text
            .ends_with("{unacceptable_type,long}"));
        assert!(check_default_queue_type("v", Some("quorum")).is_err());
        assert!(check_default_queue_type("v", Some("classic")).is_ok());
    }
}
