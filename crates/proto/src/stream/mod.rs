//! The RabbitMQ stream protocol (port 5552): the frame layer, every command RabbitMQ 4.x
//! serves that Warren answers, and the response codes.
//!
//! Decoding is zero-copy: `decode_frame` splits a complete frame off the read buffer and
//! message bodies are `Bytes` slices of it. Encoding appends whole frames, size prefix
//! included, to the caller's `BytesMut`; a Deliver's osiris chunk is not copied but written
//! after `encode_deliver_header` by the connection.

mod codes;
mod command;
mod connection;
mod error;
mod frame;
mod publish;
mod stream_admin;
mod subscribe;
mod wire;

#[cfg(test)]
mod codec_test;
#[cfg(test)]
mod frame_test;
#[cfg(test)]
mod proptest_test;

pub use codes::{key, response_code, RESPONSE_BIT};
pub use command::{decode_command, is_simple_response, Command, SimpleResponse};
pub use connection::{CommandVersion, ConnectionCommand};
pub use error::{DecodeError, EncodeError};
pub use frame::{decode_frame, encode_deliver_header, Frame, FRAME_HEADER_LEN, SIZE_PREFIX_LEN};
pub use publish::{PublishCommand, PublishedMessage, SubBatch};
pub use stream_admin::{AdminCommand, Broker, StreamMetadata};
pub use subscribe::{OffsetSpec, SubscribeCommand};
pub use wire::Properties;
