//! Warren's sans-IO wire codecs. They take bytes and return values (and the reverse); they never
//! touch a socket, a clock or a task. Input never panics: malformed bytes become a `DecodeError`
//! that names the protocol's reply code.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)]

pub mod amqp091;
pub mod amqp10;
pub mod convert;
pub mod stream;
