//! `DecodeError`: what is wrong with the input, where, and which reply code closes the
//! connection. An incomplete frame is not an error (`decode_frame` returns `Ok(None)`).
//!
//! Offsets are byte offsets into the part being decoded, which the text names: the method payload
//! (starting at class-id), the content-header payload, or the raw properties (starting at the
//! property flags).

use super::reply_code;

/// What is wrong with the input and where.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum DecodeError {
    /// The frame header declares a payload bigger than the negotiated `frame_max` allows.
    #[error(
        "frame too large: a frame of type {frame_type} on channel {channel} declares a \
         {payload_size}-byte payload, larger than the negotiated frame_max {frame_max}; split \
         bodies into frames of at most frame_max - 8 bytes"
    )]
    FrameTooLarge {
        frame_type: u8,
        channel: u16,
        payload_size: u32,
        frame_max: u32,
    },

    /// The octet after the payload is not 0xCE.
    #[error(
        "invalid frame end marker: found 0x{found:02X} instead of 0xCE after the {payload_size}-byte payload \
         of a frame of type {frame_type} on channel {channel}"
    )]
    BadFrameEnd {
        frame_type: u8,
        channel: u16,
        payload_size: u32,
        found: u8,
    },

    /// The frame type is not method (1), header (2), body (3) or heartbeat (8).
    #[error("unknown frame type {frame_type} on channel {channel}")]
    UnknownFrameType { frame_type: u8, channel: u16 },

    /// A heartbeat frame with a payload.
    #[error(
        "heartbeat frame on channel {channel} has a {payload_size}-byte payload; it must be empty"
    )]
    BadHeartbeat { channel: u16, payload_size: u32 },

    /// A content header with a non-zero weight (the spec says weight must be zero).
    #[error("content header for class {class_id} has weight {weight}; it must be 0")]
    BadHeaderWeight { class_id: u16, weight: u16 },

    /// A class or method id this codec does not know.
    #[error("unknown method: class-id {class_id}, method-id {method_id}")]
    UnknownMethod { class_id: u16, method_id: u16 },

    /// A content header for a class that has no content (only basic, 60, has).
    #[error("content header for class-id {class_id}: expected class 60 (basic), the only class with content")]
    UnknownContentClass { class_id: u16 },

    /// A field needs more bytes than remain.
    #[error(
        "{context}: field '{field}' is truncated at offset {offset}: needs {needed} byte(s), \
         {available} remain"
    )]
    Truncated {
        context: &'static str,
        field: &'static str,
        offset: usize,
        needed: u64,
        available: usize,
    },

    /// A short string (or field-table key) that is not UTF-8.
    #[error("{context}: field '{field}' at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        context: &'static str,
        field: &'static str,
        offset: usize,
    },

    /// A field value with a type tag outside RabbitMQ's set (`tTbBsuIilfdDSAFVx`).
    #[error(
        "{context}: field '{field}' has unknown field-value type 0x{tag:02X} ({}) at offset \
         {offset}",
        (*tag as char).escape_default()
    )]
    UnknownFieldType {
        context: &'static str,
        field: &'static str,
        tag: u8,
        offset: usize,
    },

    /// Field tables and arrays nested deeper than `FIELD_DEPTH_MAX`.
    #[error(
        "{context}: field '{field}' nests tables/arrays deeper than {limit} at offset {offset}"
    )]
    NestingTooDeep {
        context: &'static str,
        field: &'static str,
        limit: usize,
        offset: usize,
    },

    /// Bytes left over after the last argument or property.
    #[error("{context}: {extra} unexpected trailing byte(s) at offset {offset}")]
    TrailingBytes {
        context: &'static str,
        offset: usize,
        extra: usize,
    },

    /// Property flags with the reserved bit or the continuation bit set (basic has 14 properties,
    /// which fit in one flags word).
    #[error(
        "basic properties: property flags 0x{flags:04X} set reserved or continuation bits (0x0003)"
    )]
    BadPropertyFlags { flags: u16 },
}

impl DecodeError {
    /// The method (or part) being decoded when the error was found, e.g. `"queue.declare"`.
    pub fn context(&self) -> Option<&'static str> {
        match self {
            DecodeError::Truncated { context, .. }
            | DecodeError::InvalidUtf8 { context, .. }
            | DecodeError::UnknownFieldType { context, .. }
            | DecodeError::NestingTooDeep { context, .. }
            | DecodeError::TrailingBytes { context, .. } => Some(context),
            _ => None,
        }
    }

    /// The connection-level reply code to close with: 501 FRAME_ERROR for frame structure,
    /// 502 SYNTAX_ERROR for malformed arguments, tables or properties, 540 NOT_IMPLEMENTED for
    /// unknown methods, 505 UNEXPECTED_FRAME for a content header of a class without content.
    pub fn reply_code(&self) -> u16 {
        match self {
            DecodeError::FrameTooLarge { .. }
            | DecodeError::BadFrameEnd { .. }
            | DecodeError::UnknownFrameType { .. }
            | DecodeError::BadHeartbeat { .. }
            | DecodeError::BadHeaderWeight { .. } => reply_code::FRAME_ERROR,
            DecodeError::UnknownMethod { .. } => reply_code::NOT_IMPLEMENTED,
            // As RabbitMQ: a content header where none can be is an unexpected frame.
            DecodeError::UnknownContentClass { .. } => reply_code::UNEXPECTED_FRAME,
            DecodeError::Truncated { .. }
            | DecodeError::InvalidUtf8 { .. }
            | DecodeError::UnknownFieldType { .. }
            | DecodeError::NestingTooDeep { .. }
            | DecodeError::TrailingBytes { .. }
            | DecodeError::BadPropertyFlags { .. } => reply_code::SYNTAX_ERROR,
        }
    }
}
