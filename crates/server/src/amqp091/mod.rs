//! AMQP 0.9.1: one task per connection (see `connection.rs` for the turn it runs).

mod annotations;
mod authz;
mod channel;
mod closing;
mod connection;
mod consume;
mod convert;
mod fault;
mod handshake;
mod publish;
mod throttle;
mod writer;

pub(crate) use annotations::delivery_properties;
pub use connection::{serve, Shared};
pub(crate) use convert::message_fields;
