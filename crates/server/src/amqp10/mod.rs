//! AMQP 1.0 on the AMQP port: the protocol header picks it (`AMQP 3 1 0 0` for the SASL layer,
//! then `AMQP 0 1 0 0`). One task per connection, as for AMQP 0.9.1 (see `connection.rs`).
//!
//! SASL: PLAIN checks the user like AMQP 0.9.1 does (loopback-only users included). ANONYMOUS
//! is offered to loopback peers only and logs them in as the default user (`default_user`),
//! which is what RabbitMQ does with `anonymous_login_user` set to `guest` (its default), whose
//! guest user may only connect from loopback.

mod address;
mod connection;
pub(crate) mod convert;
mod filter;
mod handshake;
mod link;
mod management;
mod publish;
mod session;
mod transfer;
mod unsettled;
mod writer;

use warren_proto::amqp10::{AMQP_HEADER, SASL_HEADER};

pub use connection::serve;

/// AMQP 1.0's two protocol headers, SASL's and plain AMQP's (AMQP 0.9.1 sends
/// `AMQP 0 0 9 1`).
const HEADERS: [[u8; 8]; 2] = [SASL_HEADER, AMQP_HEADER];

pub(crate) fn is_amqp10_header(header: &[u8]) -> bool {
    HEADERS.iter().any(|h| h[..] == *header)
}

/// Whether `start`, shorter than a header, agrees with an AMQP 1.0 header so far.
pub(crate) fn may_begin_amqp10_header(start: &[u8]) -> bool {
    HEADERS.iter().any(|header| header.starts_with(start))
}
