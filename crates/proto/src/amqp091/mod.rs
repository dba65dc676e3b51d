//! AMQP 0.9.1 (RabbitMQ's dialect): frames, methods generated from the spec JSON, content-header
//! properties and field tables.
//!
//! Decoding is zero-copy: `decode_frame` splits a complete frame off the read buffer, and bodies,
//! short strings and long strings are `Bytes` slices of it. Encoding writes straight into the
//! caller's `BytesMut`.

mod error;
mod field_table;
mod frame;
mod frame_reader;
mod method;
mod properties;
pub mod reply_code;
mod short_str;
mod wire;

#[cfg(test)]
mod test_support;

pub use error::DecodeError;
pub use field_table::{decode_table_body, FieldTable, FieldValue, FIELD_DEPTH_MAX};
pub use frame::{
    check_protocol_header, decode_frame, encode_body_frame, encode_content_header,
    encode_deliver_frame, encode_heartbeat, encode_method_frame, ContentHeader, DeliverArgs, Frame,
    ProtocolHeader, FRAME_END, FRAME_HEADER_SIZE, FRAME_MIN_SIZE, PROTOCOL_HEADER,
};
pub use frame_reader::{FrameReader, BODY_PART_BYTES_MIN};
pub use method::*;
pub use properties::{peek_delivery_mode, peek_priority, validate_properties, BasicProperties};
pub use short_str::{LongStr, ShortStr};
