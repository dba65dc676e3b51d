//! Warren's protocol-agnostic broker: vhosts, exchanges, bindings, routing and queues.
//! Protocol connections translate frames into calls on this crate; it never sees a frame.

pub mod access;
pub mod alarm;
pub mod binding;
pub mod broker;
pub mod confirm;
pub mod consumer;
pub mod dead_letter;
pub mod definitions;
pub mod error;
pub mod exchange;
pub mod identity;
pub mod limits;
pub mod message;
pub mod metadata;
pub mod queue;
pub mod registry;
pub mod routing;
pub mod stats;
pub mod value;
pub mod vhost;

pub use access::{AuthUser, Bootstrap};
pub use broker::Broker;
pub use error::{BrokerError, ErrorKind};
pub use message::Message;

/// The RabbitMQ version whose behaviour Warren matches, written where RabbitMQ writes its own
/// (definitions exports, the management API).
pub const RABBITMQ_COMPATIBLE_VERSION: &str = identity::RABBITMQ_VERSION_DEFAULT;
