//! `DecodeError` for AMQP 1.0: what is wrong with the input and where. An incomplete frame is
//! not an error (`decode_frame` returns `Ok(None)`). Every variant maps to the error condition
//! the connection is closed with (`condition`).

/// What is wrong with the input and where.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum DecodeError {
    /// The frame header declares a size above the negotiated max-frame-size.
    #[error("frame of {size} bytes exceeds max-frame-size {max_frame_size}")]
    FrameTooLarge { size: u32, max_frame_size: u32 },
    /// The frame header's size or data offset is impossible.
    #[error("malformed frame header: size {size}, data offset {doff} (in 4-byte words)")]
    BadFrameHeader { size: u32, doff: u8 },
    /// A frame type other than AMQP (0) or SASL (1).
    #[error("unknown frame type {frame_type}")]
    UnknownFrameType { frame_type: u8 },
    /// A value needs more bytes than remain.
    #[error("truncated {what} at offset {offset}: needs {needed} bytes, {available} left")]
    Truncated {
        what: &'static str,
        offset: usize,
        needed: usize,
        available: usize,
    },
    /// A format code this codec does not know.
    #[error("invalid format code 0x{code:02x} at offset {offset}")]
    BadFormatCode { code: u8, offset: usize },
    /// Compound or described values nested deeper than the codec allows.
    #[error("values nested deeper than {max} levels at offset {offset}")]
    TooDeep { max: usize, offset: usize },
    /// A string or symbol that is not valid UTF-8 (or ASCII).
    #[error("invalid {what} at offset {offset}: not valid UTF-8")]
    BadUtf8 { what: &'static str, offset: usize },
    /// A compound's count does not fit its size.
    #[error("{what} at offset {offset} declares {count} elements in {size} bytes")]
    BadCount {
        what: &'static str,
        offset: usize,
        count: u32,
        size: u32,
    },
    /// The frame body is not a described list, or its descriptor names no known performative.
    #[error("unknown performative {descriptor}")]
    UnknownPerformative { descriptor: String },
    /// A field of a performative or section has the wrong type or is missing.
    #[error("invalid field '{field}' of {context}: {problem}")]
    BadField {
        context: &'static str,
        field: &'static str,
        problem: &'static str,
    },
    /// Bytes left over after a value that must fill its space.
    #[error("{extra} unexpected bytes after {what}")]
    TrailingBytes { what: &'static str, extra: usize },
}

impl DecodeError {
    /// The AMQP 1.0 error condition a connection is closed with for this error.
    pub fn condition(&self) -> &'static str {
        match self {
            DecodeError::FrameTooLarge { .. } => super::condition::FRAME_SIZE_TOO_SMALL,
            DecodeError::BadFrameHeader { .. } | DecodeError::UnknownFrameType { .. } => {
                super::condition::FRAMING_ERROR
            }
            _ => super::condition::DECODE_ERROR,
        }
    }
}
