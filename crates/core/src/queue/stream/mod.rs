//! The stream queue type (RabbitMQ's `rabbit_stream_queue`): an append-only log of chunks
//! (`warren_store::StreamLog`) that many consumers read from any offset, and that keeps its
//! messages after delivery.
//!
//! This module is the type's rules (`STREAM`: arguments, refusals with RabbitMQ's texts, when
//! a publish is confirmed); `driver.rs` is the one task per stream that owns the log and
//! writes one chunk per turn; `handle.rs` is what the stream protocol holds of a stream.

mod batch;
mod driver;
mod handle;
mod readers;

use std::path::PathBuf;
use std::sync::Arc;

use super::queue_type::{Behaviour, Capabilities, ConfirmAfter};
use crate::error::BrokerError;
use crate::message::Message;
use crate::queue::{QueueDef, QueueHandle, Setup};
use crate::value::Value;
use bytes::Bytes;

pub use driver::{dir_name, SEGMENT_BYTES_MAX_DEFAULT};
pub use handle::{ConfirmInbox, StreamHandle, StreamOutcome, StreamPublish};

/// The stream queue type.
pub struct Stream;

pub static STREAM: Stream = Stream;

/// RabbitMQ's `MAX_STREAM_MAX_SEGMENT_SIZE`.
pub const SEGMENT_BYTES_MAX_LIMIT: i64 = 3_000_000_000;

/// RabbitMQ's `rabbit_stream_queue:capabilities/0`.
static CAPABILITIES: Capabilities = Capabilities {
    queue_arguments: &[
        "x-max-length-bytes",
        "x-queue-type",
        "x-max-age",
        "x-stream-max-segment-size-bytes",
        "x-stream-filter-size-bytes",
        "x-initial-cluster-size",
        "x-queue-leader-locator",
    ],
    consumer_arguments: &[
        "x-stream-offset",
        "x-stream-filter",
        "x-stream-match-unfiltered",
    ],
    unsupported_policies: &[
        "expires",
        "message-ttl",
        "dead-letter-exchange",
        "dead-letter-routing-key",
        "max-length",
        "max-in-memory-length",
        "max-in-memory-bytes",
        "max-priority",
        "overflow",
        "queue-mode",
        "delivery-limit",
        "ha-mode",
        "ha-params",
        "ha-sync-mode",
        "ha-promote-on-shutdown",
        "ha-promote-on-failure",
        "queue-master-locator",
        "dead-letter-strategy",
        "target-group-size",
    ],
    server_named: false,
    transient: false,
    global_qos: false,
    requeue: false,
    inline_publish: false,
};

/// How messages are stored in a stream: AMQP 1.0, as RabbitMQ stores them. Core never
/// sees a frame, so the server implements this with its codecs and passes it in at open.
pub trait StreamEncoding: Send + Sync + std::fmt::Debug + 'static {
    /// The record a message is stored as: an AMQP 0.9.1 message converted to AMQP 1.0
    /// sections (header, message-annotations with `x-exchange` and `x-routing-key`,
    /// properties, application-properties from its headers, a data body); an AMQP 1.0
    /// message as it is.
    fn encode(&self, message: &Message) -> Bytes;

    /// The message a record at `offset` holds, as an AMQP 1.0 `Message` with the
    /// `x-stream-offset` message annotation added; `Err` names what is wrong with it.
    fn decode(&self, offset: u64, record: Bytes) -> Result<Message, String>;
}

/// What the broker gives every stream: where logs live, how they are made durable and how
/// messages are encoded.
#[derive(Clone)]
pub struct StreamStorage {
    /// `<data_dir>/streams`: one directory per stream below it.
    pub root: PathBuf,
    pub sync: warren_store::StreamSync,
    pub io: Arc<dyn warren_store::Io>,
    pub encoding: Arc<dyn StreamEncoding>,
}

impl std::fmt::Debug for StreamStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StreamStorage({})", self.root.display())
    }
}

impl Behaviour for Stream {
    fn module(&self) -> &'static str {
        "rabbit_stream_queue"
    }

    fn capabilities(&self) -> &'static Capabilities {
        &CAPABILITIES
    }

    /// Once the chunk is written (and fsynced with `stream.fsync`): the writer settles the
    /// ticket from the log's `on_durable`, whatever the message's delivery mode.
    fn confirm_after(&self, _def: &QueueDef, _persistent: bool) -> ConfirmAfter {
        ConfirmAfter::Fsynced
    }

    fn check_declare(&self, def: &QueueDef) -> Result<(), BrokerError> {
        check_declare(def)
    }

    fn start(&self, def: QueueDef, setup: Setup) -> QueueHandle {
        driver::spawn(def, setup)
    }
}

/// RabbitMQ's `rabbit_stream_queue:declare` checks, in its order, and the arguments
/// `rabbit_amqqueue:declare_args` checks for the stream's keys.
fn check_declare(def: &QueueDef) -> Result<(), BrokerError> {
    let resource = def.resource();
    let property = |name: &str| {
        BrokerError::precondition_failed(format!("invalid property '{name}' for {resource}"))
    };
    if def.auto_delete {
        return Err(property("auto-delete"));
    }
    if def.exclusive_owner.is_some() {
        return Err(property("exclusive-owner"));
    }
    if !def.durable {
        return Err(property("non-durable"));
    }
    let invalid = |key: &str, error: &str| {
        BrokerError::precondition_failed(format!("invalid arg '{key}' for {resource}: {error}"))
    };
    if let Some(value) = def.arguments.get("x-initial-cluster-size") {
        match value {
            Value::Int(0) => return Err(invalid("x-initial-cluster-size", "{value_zero,0}")),
            Value::Int(n) if *n < 0 => {
                return Err(invalid(
                    "x-initial-cluster-size",
                    &format!("{{value_negative,{n}}}"),
                ))
            }
            Value::Int(_) => {}
            other => {
                let text = format!("{{unacceptable_type,{}}}", super::args::type_name(other));
                return Err(invalid("x-initial-cluster-size", &text));
            }
        }
    }
    if let Some(value) = def.arguments.get("x-queue-leader-locator") {
        let known = ["client-local", "balanced", "random", "least-leaders"];
        if !value.as_str().is_some_and(|name| known.contains(&name)) {
            return Err(invalid(
                "x-queue-leader-locator",
                "invalid_queue_locator_arg",
            ));
        }
    }
    let segment = def.arguments.get("x-stream-max-segment-size-bytes");
    if segment
        .and_then(Value::as_i64)
        .is_some_and(|bytes| bytes > SEGMENT_BYTES_MAX_LIMIT)
    {
        return Err(BrokerError::precondition_failed(
            "Exceeded max value for x-stream-max-segment-size-bytes",
        ));
    }
    if def.arguments.contains_key("x-stream-filter-size-bytes") {
        return Err(BrokerError::precondition_failed(format!(
            "invalid arg 'x-stream-filter-size-bytes' for {resource}: stream filtering is \
             not supported by Warren yet; declare the stream without it"
        )));
    }
    Ok(())
}

/// `stream 'name' in vhost '/'`, for the stream protocol's error texts.
fn resource(def: &QueueDef) -> String {
    crate::error::resource_name("stream", &def.name, &def.vhost)
}
