//! AMQP 1.0: the type system, frames, performatives, SASL and message sections. Sans-IO and
//! zero-copy: decoded binaries and transfer payloads are slices of the read buffer.

pub mod condition;
mod error;
mod fast;
mod fields;
pub mod frame;
pub mod message;
pub mod performative;
pub mod sasl;
pub mod types;

pub use error::DecodeError;
pub use frame::{decode_frame, Frame, FrameBody, AMQP_HEADER, SASL_HEADER};
pub use performative::*;
pub use sasl::SaslFrame;
pub use types::Value;

#[cfg(test)]
mod codec_test;
