//! AMQP 0.9.1: one task per connection (see `connection.rs` for the turn it runs).

mod annotations;
mod authz;
mod channel;
mod closing;
mod confirm;
mod connection;
mod consume;
mod convert;
mod fault;
mod handshake;
mod hold;
mod publish;
mod registration;
mod stream_consume;
mod throttle;
mod topology;
mod tx;
mod writer;

pub use crate::connection::Shared;
pub(crate) use annotations::delivery_properties;
pub use connection::serve;
pub(crate) use convert::message_fields;
