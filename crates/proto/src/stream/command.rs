//! `Command`: every command this codec knows, decoded from a `Frame` by `decode_command`
//! and encoded, size prefix included, by `Command::encode`.
//!
//! Commands are grouped by family (connection, publish, subscribe, stream admin); responses
//! that carry only a correlation id and a response code share `SimpleResponse`.

use bytes::{BufMut, BytesMut};

use super::codes::key;
use super::connection::{self, ConnectionCommand};
use super::error::{DecodeError, EncodeError};
use super::frame::{encode_frame, Frame};
use super::publish::{self, PublishCommand};
use super::stream_admin::{self, AdminCommand};
use super::subscribe::{self, SubscribeCommand};
use super::wire::Reader;

/// A response that carries only a correlation id and a response code (DeclarePublisher,
/// DeletePublisher, Subscribe, Unsubscribe, Create, Delete and Close responses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimpleResponse {
    /// The command key without the response bit.
    pub key: u16,
    pub correlation_id: u32,
    pub code: u16,
}

/// A decoded command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Connection(ConnectionCommand),
    Publish(PublishCommand),
    Subscribe(SubscribeCommand),
    Admin(AdminCommand),
    Response(SimpleResponse),
}

/// Whether responses to this key carry only a correlation id and a code.
pub fn is_simple_response(command_key: u16) -> bool {
    matches!(
        command_key,
        key::DECLARE_PUBLISHER
            | key::DELETE_PUBLISHER
            | key::SUBSCRIBE
            | key::UNSUBSCRIBE
            | key::CREATE
            | key::DELETE
            | key::CLOSE
    )
}

/// Decodes a frame into its command. A key, response bit or version this codec does not know
/// is `DecodeError::UnknownCommand`, which carries them so the server can answer.
pub fn decode_command(frame: &Frame) -> Result<Command, DecodeError> {
    let decoded = if frame.response && frame.version == 1 && is_simple_response(frame.key) {
        Some(simple_response(frame)?)
    } else if connection::owns(frame.key) {
        connection::decode(frame)?.map(Command::Connection)
    } else if publish::owns(frame.key) {
        publish::decode(frame)?.map(Command::Publish)
    } else if subscribe::owns(frame.key) {
        subscribe::decode(frame)?.map(Command::Subscribe)
    } else if stream_admin::owns(frame.key) {
        stream_admin::decode(frame)?.map(Command::Admin)
    } else {
        None
    };
    decoded.ok_or(DecodeError::UnknownCommand {
        key: frame.key,
        response: frame.response,
        version: frame.version,
    })
}

fn simple_response(frame: &Frame) -> Result<Command, DecodeError> {
    let mut r = Reader::new(frame.body.clone(), "response");
    let response = SimpleResponse {
        key: frame.key,
        correlation_id: r.u32("correlation id")?,
        code: r.u16("response code")?,
    };
    r.finish()?;
    Ok(Command::Response(response))
}

impl Command {
    /// Appends the whole frame (size prefix included) to `out`; on error `out` is unchanged.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        match self {
            Self::Connection(command) => command.encode(out),
            Self::Publish(command) => command.encode(out),
            Self::Subscribe(command) => command.encode(out),
            Self::Admin(command) => command.encode(out),
            Self::Response(response) => response.encode(out),
        }
    }
}

impl SimpleResponse {
    /// Appends the whole frame (size prefix included) to `out`.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        debug_assert!(
            is_simple_response(self.key),
            "key 0x{:04x} has a richer response",
            self.key
        );
        encode_frame(out, self.key, true, 1, |w| {
            w.out.put_u32(self.correlation_id);
            w.out.put_u16(self.code);
            Ok(())
        })
    }
}
