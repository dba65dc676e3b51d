//! The registry of queue types, and the interface each one implements (RabbitMQ's
//! `rabbit_queue_type`).
//!
//! `QueueType` names a type Warren has; `x-queue-type` is decided here
//! (`rabbit_amqqueue:check_queue_type`), and every front end (AMQP 0.9.1 and 1.0, the HTTP API,
//! definitions import, `warren ctl` through the API) reaches this through
//! `VHost::declare_queue`. A type Warren does not have is refused with RabbitMQ's 406
//! PRECONDITION_FAILED, never replaced by another: a client that asks for a quorum queue or a
//! stream must not get a classic queue that claims to be one.
//!
//! Each type owns its rules through `Behaviour`: which arguments it accepts, when a publish
//! to it may be confirmed, what it supports (`Capabilities`), and how it starts. The
//! connections ask the queue's type (`QueueHandle::confirm_after`); they hold no rule of their
//! own.

use crate::error::BrokerError;
use crate::queue::{QueueDef, QueueHandle};
use crate::value::{Table, Value};

/// The queue types Warren implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueType {
    Classic,
    Stream,
}

/// RabbitMQ's queue types that Warren does not implement yet.
const NOT_YET: [&str; 1] = ["quorum"];

/// When a queue type lets a publish be confirmed (DESIGN.md, "Durability contract").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfirmAfter {
    /// Once the queue has taken it in its order (in memory).
    Enqueued,
    /// Once it is written and fsynced (group commit).
    Fsynced,
}

/// What a queue type supports (RabbitMQ's `capabilities/0`).
#[derive(Debug)]
pub struct Capabilities {
    /// The `x-*` declare arguments the type accepts; the other types' arguments are refused.
    pub queue_arguments: &'static [&'static str],
    /// The consumer arguments the type accepts (`basic.consume`).
    pub consumer_arguments: &'static [&'static str],
    /// Policy keys that do not apply to the type.
    pub unsupported_policies: &'static [&'static str],
    /// The broker may name the queue (`queue.declare` with an empty name).
    pub server_named: bool,
    /// Exclusive and auto-delete queues, and non-durable ones.
    pub transient: bool,
    /// `basic.qos` with `global=true`.
    pub global_qos: bool,
    /// Messages may be requeued and redelivered.
    pub requeue: bool,
    /// A publisher may run its publish as a turn of the idle queue on its own task
    /// (`InlinePublish`): a driver policy of the type, not a promise the connections rely on.
    pub inline_publish: bool,
}

/// The rules and the start of one queue type (see the module doc).
pub trait Behaviour: Sync {
    /// RabbitMQ's module name, used in its error texts (`rabbit_classic_queue`).
    fn module(&self) -> &'static str;
    fn capabilities(&self) -> &'static Capabilities;
    /// When a publish to the queue of `def` may be confirmed.
    fn confirm_after(&self, def: &QueueDef, persistent: bool) -> ConfirmAfter;
    /// Checks what the type alone refuses in a declare (beyond the arguments of other types,
    /// which `QueueType::check_declare` refuses for every type).
    fn check_declare(&self, def: &QueueDef) -> Result<(), BrokerError>;
    /// Starts a queue of this type.
    fn start(&self, def: QueueDef, setup: super::Setup) -> QueueHandle;
}

/// Every `x-*` declare argument some RabbitMQ queue type accepts
/// (`rabbit_queue_type:arguments(queue_arguments)`).
const ALL_QUEUE_ARGUMENTS: [&str; 27] = [
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-version",
    "x-single-active-consumer",
    "x-queue-type",
    "x-queue-master-locator",
    "x-queue-leader-locator",
    "x-quorum-initial-group-size",
    "x-member-placement-tag",
    "x-delivery-limit",
    "x-consumer-timeout",
    "x-consumer-disconnected-timeout",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-stream-filter-size-bytes",
    "x-initial-cluster-size",
    "x-delayed-retry-type",
];

/// Every consumer argument some RabbitMQ queue type accepts
/// (`rabbit_queue_type:arguments(consumer_arguments)`).
const ALL_CONSUMER_ARGUMENTS: [&str; 5] = [
    "x-priority",
    "x-consumer-timeout",
    "x-stream-offset",
    "x-stream-filter",
    "x-stream-match-unfiltered",
];

impl QueueType {
    /// Every type Warren has.
    pub const ALL: [QueueType; 2] = [QueueType::Classic, QueueType::Stream];

    /// The name RabbitMQ reports (`type` in the HTTP API, the AMQP 1.0 management node).
    pub fn name(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Stream => "stream",
        }
    }

    /// The type's rules and start.
    pub fn behaviour(self) -> &'static dyn Behaviour {
        match self {
            QueueType::Classic => &super::classic::CLASSIC,
            QueueType::Stream => &super::stream::STREAM,
        }
    }

    pub fn capabilities(self) -> &'static Capabilities {
        self.behaviour().capabilities()
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
                // RabbitMQ accepts the module names too.
                "classic" | "rabbit_classic_queue" => Ok(QueueType::Classic),
                "stream" | "rabbit_stream_queue" => Ok(QueueType::Stream),
                other if NOT_YET.contains(&other) => Err(invalid(format!(
                    "\"queue type '{other}' is not supported by Warren yet (only classic and \
                     stream are); declare it with x-queue-type classic or stream\""
                ))),
                other => Err(invalid(format!("\"unsupported queue type '{other}'\""))),
            },
            Some(other) => Err(invalid(format!(
                "{{unacceptable_type,{}}}",
                super::args::type_name(other)
            ))),
        }
    }

    /// Decides the type of a declare and checks it against the type's rules: arguments that
    /// belong to other types only are refused with RabbitMQ's text (`invalid arg
    /// 'x-delivery-limit' for queue 'q' in vhost '/' of queue type rabbit_classic_queue`).
    pub fn check_declare(def: &QueueDef) -> Result<QueueType, BrokerError> {
        let kind = QueueType::from_arguments(&def.resource(), &def.arguments)?;
        let behaviour = kind.behaviour();
        let accepted = behaviour.capabilities().queue_arguments;
        let refused = def.arguments.keys().find(|key| {
            ALL_QUEUE_ARGUMENTS.contains(&key.as_str()) && !accepted.contains(&key.as_str())
        });
        if let Some(key) = refused {
            return Err(BrokerError::precondition_failed(format!(
                "invalid arg '{key}' for {} of queue type {}",
                def.resource(),
                behaviour.module()
            )));
        }
        behaviour.check_declare(def)?;
        Ok(kind)
    }
}

impl QueueType {
    /// The type starts a consumer where it asks (`x-stream-offset`, see `ConsumeStart`).
    pub fn takes_consume_start(self) -> bool {
        self.behaviour()
            .capabilities()
            .consumer_arguments
            .contains(&super::consume_start::STREAM_OFFSET_ARGUMENT)
    }

    /// Checks a consumer's argument names against the type (RabbitMQ's
    /// `check_consume_arguments`): another type's argument, such as `x-stream-offset` on a
    /// classic queue, is refused with `invalid arg 'x-stream-offset' for queue 'q' in vhost
    /// '/' of queue type rabbit_classic_queue`; names no type knows are ignored.
    pub fn check_consume<'a>(
        self,
        resource: &str,
        mut keys: impl Iterator<Item = &'a str>,
    ) -> Result<(), BrokerError> {
        let behaviour = self.behaviour();
        let accepted = behaviour.capabilities().consumer_arguments;
        match keys.find(|key| ALL_CONSUMER_ARGUMENTS.contains(key) && !accepted.contains(key)) {
            Some(key) => Err(BrokerError::precondition_failed(format!(
                "invalid arg '{key}' for {resource} of queue type {}",
                behaviour.module()
            ))),
            None => Ok(()),
        }
    }
}

/// A vhost's `default_queue_type` must be one Warren has: with `quorum` RabbitMQ would make
/// every durable queue declared without a type a quorum queue.
pub fn check_default_queue_type(vhost: &str, default: Option<&str>) -> Result<(), BrokerError> {
    match default {
        None | Some("" | "undefined" | "classic" | "rabbit_classic_queue") => Ok(()),
        Some("stream" | "rabbit_stream_queue") => Ok(()),
        Some(other) => Err(BrokerError::precondition_failed(format!(
            "vhost '{vhost}': default queue type '{other}' is not supported by Warren (only \
             classic and stream are); leave default_queue_type unset or set it to classic \
             or stream"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

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
        assert!(check_default_queue_type("v", Some("stream")).is_ok());
    }

    #[test]
    fn other_types_arguments_are_refused_by_name() {
        let mut arguments = Table::default();
        arguments.insert("x-delivery-limit".into(), Value::Int(5));
        arguments.insert("x-custom".into(), Value::Int(5)); // not any type's: ignored
        let def = QueueDef {
            name: Arc::from("q"),
            vhost: Arc::from("/"),
            durable: true,
            exclusive_owner: None,
            auto_delete: false,
            arguments,
        };
        assert_eq!(
            QueueType::check_declare(&def).unwrap_err().text,
            "invalid arg 'x-delivery-limit' for queue 'q' in vhost '/' of queue type \
             rabbit_classic_queue"
        );
        let mut def = def;
        def.arguments.remove("x-delivery-limit");
        def.arguments.insert("x-max-priority".into(), Value::Int(5));
        assert_eq!(QueueType::check_declare(&def), Ok(QueueType::Classic));
        let q = def.resource();
        let classic = QueueType::Classic;
        assert!(classic
            .check_consume(&q, ["x-priority", "x-mine"].into_iter())
            .is_ok());
        assert_eq!(
            classic
                .check_consume(&q, ["x-stream-offset"].into_iter())
                .unwrap_err()
                .text,
            "invalid arg 'x-stream-offset' for queue 'q' in vhost '/' of queue type \
             rabbit_classic_queue"
        );
    }
}
