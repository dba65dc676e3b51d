//! Warren's protocol-agnostic broker: vhosts, exchanges, bindings, routing and queues.
//! Protocol connections translate frames into calls on this crate; it never sees a frame.

pub mod alarm;
pub mod binding;
pub mod broker;
pub mod consumer;
pub mod dead_letter;
pub mod definitions;
pub mod error;
pub mod exchange;
pub mod limits;
pub mod message;
pub mod queue;
pub mod registry;
pub mod routing;
pub mod value;
pub mod vhost;

pub use broker::{Broker, User};
pub use error::{BrokerError, ErrorKind};
pub use message::Message;
