//! `DecodeError` and `EncodeError`: what is wrong, where, and (for decoding) which response
//! code the server answers with. An incomplete frame is not an error: `decode_frame` returns
//! `Ok(None)`.
//!
//! Offsets are byte offsets into the frame's body, which starts after the key and version.

use super::codes::response_code;

/// What is wrong with a frame from the peer and where.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The size prefix exceeds the negotiated frame_max.
    #[error(
        "frame too large: the size prefix declares {size} bytes, more than the negotiated \
         frame_max {frame_max}; publish smaller batches or negotiate a larger frame_max in Tune"
    )]
    FrameTooLarge { size: u32, frame_max: u32 },

    /// The size prefix is smaller than a key and a version.
    #[error(
        "frame too small: the size prefix declares {size} bytes, fewer than the 4 of a key and \
         a version; every frame starts with uint16 key and uint16 version"
    )]
    FrameTooSmall { size: u32 },

    /// A key (with its response bit) and version this codec does not know.
    #[error(
        "unknown command: key 0x{key:04x} (response: {response}) version {version}; the server \
         answers with response code unknown frame (0x0d)"
    )]
    UnknownCommand {
        key: u16,
        response: bool,
        version: u16,
    },

    /// A field needs more bytes than remain in the frame.
    #[error(
        "{command}: field '{field}' is truncated at offset {offset}: needs {needed} byte(s), \
         {available} remain in the frame"
    )]
    Truncated {
        command: &'static str,
        field: &'static str,
        offset: usize,
        needed: u64,
        available: usize,
    },

    /// A length prefix below -1.
    #[error("{command}: field '{field}' at offset {offset} has negative length {length}")]
    NegativeLength {
        command: &'static str,
        field: &'static str,
        offset: usize,
        length: i32,
    },

    /// A null (-1) string or bytes where the command requires a value.
    #[error("{command}: field '{field}' at offset {offset} is null but requires a value")]
    NullField {
        command: &'static str,
        field: &'static str,
        offset: usize,
    },

    /// A string that is not UTF-8.
    #[error("{command}: field '{field}' at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        command: &'static str,
        field: &'static str,
        offset: usize,
    },

    /// An offset specification type outside 1..=5.
    #[error(
        "{command}: offset type {offset_type} is unknown; use 1 (first), 2 (last), 3 (next), \
         4 (offset) or 5 (timestamp)"
    )]
    UnknownOffsetType {
        command: &'static str,
        offset_type: u16,
    },

    /// Bytes left in the frame after the last field of the command.
    #[error(
        "{command}: {extra} byte(s) left after the last field; the frame is longer than the \
         command"
    )]
    TrailingBytes { command: &'static str, extra: usize },
}

impl DecodeError {
    /// The response code the server answers a frame that fails with this error.
    pub fn response_code(&self) -> u16 {
        match self {
            Self::FrameTooLarge { .. } => response_code::FRAME_TOO_LARGE,
            Self::UnknownCommand { .. } | Self::FrameTooSmall { .. } => {
                response_code::UNKNOWN_FRAME
            }
            Self::UnknownOffsetType { .. } => response_code::PRECONDITION_FAILED,
            _ => response_code::UNKNOWN_FRAME,
        }
    }
}

/// A value that cannot be put on the wire.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// A string, bytes field, array or frame longer than its length prefix can say.
    #[error(
        "{command}: field '{field}' has length {length}, more than its prefix allows ({max}); \
         shorten it or split the batch"
    )]
    TooLong {
        command: &'static str,
        field: &'static str,
        length: usize,
        max: u64,
    },
}
