//! Connection commands: PeerProperties, SaslHandshake, SaslAuthenticate, Tune, Open, Close,
//! Heartbeat and ExchangeCommandVersions.
//!
//! RabbitMQ 4.x departs from the spec's text in two places this codec follows: Tune and
//! Heartbeat carry no correlation id, and an Open or SaslAuthenticate response may stop after
//! its response code (no properties after a failed Open, no data without a challenge).

use bytes::{BufMut, Bytes, BytesMut};

use super::codes::{key, name};
use super::error::{DecodeError, EncodeError};
use super::frame::{encode_frame, Frame};
use super::wire::{Properties, Reader, Writer};

/// A command's key with its accepted versions, as ExchangeCommandVersions lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandVersion {
    pub key: u16,
    pub min_version: u16,
    pub max_version: u16,
}

/// The commands that open, tune and close a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectionCommand {
    PeerPropertiesRequest {
        correlation_id: u32,
        properties: Properties,
    },
    PeerPropertiesResponse {
        correlation_id: u32,
        code: u16,
        properties: Properties,
    },
    SaslHandshakeRequest {
        correlation_id: u32,
    },
    SaslHandshakeResponse {
        correlation_id: u32,
        code: u16,
        mechanisms: Vec<String>,
    },
    SaslAuthenticateRequest {
        correlation_id: u32,
        mechanism: String,
        data: Option<Bytes>,
    },
    /// `data` is `None` when the response stops after its code (no challenge).
    SaslAuthenticateResponse {
        correlation_id: u32,
        code: u16,
        data: Option<Bytes>,
    },
    /// The server's proposal (`response: false`) or the client's answer (`response: true`).
    Tune {
        response: bool,
        frame_max: u32,
        heartbeat: u32,
    },
    OpenRequest {
        correlation_id: u32,
        virtual_host: String,
    },
    OpenResponse {
        correlation_id: u32,
        code: u16,
        properties: Properties,
    },
    /// Sent by either peer.
    CloseRequest {
        correlation_id: u32,
        code: u16,
        reason: Option<String>,
    },
    Heartbeat,
    ExchangeCommandVersionsRequest {
        correlation_id: u32,
        versions: Vec<CommandVersion>,
    },
    ExchangeCommandVersionsResponse {
        correlation_id: u32,
        code: u16,
        versions: Vec<CommandVersion>,
    },
}

/// Whether this family owns the key.
pub(crate) fn owns(command_key: u16) -> bool {
    matches!(
        command_key,
        key::PEER_PROPERTIES
            | key::SASL_HANDSHAKE
            | key::SASL_AUTHENTICATE
            | key::TUNE
            | key::OPEN
            | key::CLOSE
            | key::HEARTBEAT
            | key::EXCHANGE_COMMAND_VERSIONS
    )
}

/// Decodes a frame whose key `owns` accepts; `Ok(None)` for a pairing (response bit,
/// version) this family does not define.
pub(crate) fn decode(frame: &Frame) -> Result<Option<ConnectionCommand>, DecodeError> {
    use ConnectionCommand as C;
    if frame.version != 1 {
        return Ok(None);
    }
    let mut r = Reader::new(frame.body.clone(), name(frame.key));
    let command = match (frame.key, frame.response) {
        (key::PEER_PROPERTIES, false) => C::PeerPropertiesRequest {
            correlation_id: r.u32("correlation id")?,
            properties: r.properties("peer properties")?,
        },
        (key::PEER_PROPERTIES, true) => C::PeerPropertiesResponse {
            correlation_id: r.u32("correlation id")?,
            code: r.u16("response code")?,
            properties: r.properties("peer properties")?,
        },
        (key::SASL_HANDSHAKE, false) => C::SaslHandshakeRequest {
            correlation_id: r.u32("correlation id")?,
        },
        (key::SASL_HANDSHAKE, true) => C::SaslHandshakeResponse {
            correlation_id: r.u32("correlation id")?,
            code: r.u16("response code")?,
            mechanisms: r.strings("mechanisms")?,
        },
        (key::SASL_AUTHENTICATE, false) => C::SaslAuthenticateRequest {
            correlation_id: r.u32("correlation id")?,
            mechanism: r.string("mechanism")?,
            data: r.opt_bytes("sasl opaque data")?,
        },
        (key::SASL_AUTHENTICATE, true) => C::SaslAuthenticateResponse {
            correlation_id: r.u32("correlation id")?,
            code: r.u16("response code")?,
            data: optional_tail(&mut r, |r| r.opt_bytes("sasl opaque data"))?.flatten(),
        },
        (key::TUNE, response) => C::Tune {
            response,
            frame_max: r.u32("frame max")?,
            heartbeat: r.u32("heartbeat")?,
        },
        (key::OPEN, false) => C::OpenRequest {
            correlation_id: r.u32("correlation id")?,
            virtual_host: r.string("virtual host")?,
        },
        (key::OPEN, true) => C::OpenResponse {
            correlation_id: r.u32("correlation id")?,
            code: r.u16("response code")?,
            properties: optional_tail(&mut r, |r| r.properties("connection properties"))?
                .unwrap_or_default(),
        },
        (key::CLOSE, false) => C::CloseRequest {
            correlation_id: r.u32("correlation id")?,
            code: r.u16("closing code")?,
            reason: r.opt_string("closing reason")?,
        },
        (key::HEARTBEAT, false) => C::Heartbeat,
        (key::EXCHANGE_COMMAND_VERSIONS, false) => C::ExchangeCommandVersionsRequest {
            correlation_id: r.u32("correlation id")?,
            versions: command_versions(&mut r)?,
        },
        (key::EXCHANGE_COMMAND_VERSIONS, true) => C::ExchangeCommandVersionsResponse {
            correlation_id: r.u32("correlation id")?,
            code: r.u16("response code")?,
            versions: command_versions(&mut r)?,
        },
        _ => return Ok(None),
    };
    r.finish()?;
    Ok(Some(command))
}

/// Reads a trailing field only when bytes remain: RabbitMQ leaves some out.
fn optional_tail<T>(
    r: &mut Reader,
    read: impl FnOnce(&mut Reader) -> Result<T, DecodeError>,
) -> Result<Option<T>, DecodeError> {
    if r.remaining() == 0 {
        return Ok(None);
    }
    read(r).map(Some)
}

fn command_versions(r: &mut Reader) -> Result<Vec<CommandVersion>, DecodeError> {
    let count = r.count("commands", 6)?;
    let mut versions = Vec::with_capacity(count);
    for _ in 0..count {
        versions.push(CommandVersion {
            key: r.u16("key")?,
            min_version: r.u16("min version")?,
            max_version: r.u16("max version")?,
        });
    }
    Ok(versions)
}

impl ConnectionCommand {
    /// The command key (without the response bit) and whether this is a response.
    pub fn key(&self) -> (u16, bool) {
        use ConnectionCommand as C;
        match self {
            C::PeerPropertiesRequest { .. } => (key::PEER_PROPERTIES, false),
            C::PeerPropertiesResponse { .. } => (key::PEER_PROPERTIES, true),
            C::SaslHandshakeRequest { .. } => (key::SASL_HANDSHAKE, false),
            C::SaslHandshakeResponse { .. } => (key::SASL_HANDSHAKE, true),
            C::SaslAuthenticateRequest { .. } => (key::SASL_AUTHENTICATE, false),
            C::SaslAuthenticateResponse { .. } => (key::SASL_AUTHENTICATE, true),
            C::Tune { response, .. } => (key::TUNE, *response),
            C::OpenRequest { .. } => (key::OPEN, false),
            C::OpenResponse { .. } => (key::OPEN, true),
            C::CloseRequest { .. } => (key::CLOSE, false),
            C::Heartbeat => (key::HEARTBEAT, false),
            C::ExchangeCommandVersionsRequest { .. } => (key::EXCHANGE_COMMAND_VERSIONS, false),
            C::ExchangeCommandVersionsResponse { .. } => (key::EXCHANGE_COMMAND_VERSIONS, true),
        }
    }

    /// Appends the whole frame (size prefix included) to `out`.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let (command_key, response) = self.key();
        encode_frame(out, command_key, response, 1, |w| self.encode_body(w))
    }

    fn encode_body(&self, w: &mut Writer) -> Result<(), EncodeError> {
        use ConnectionCommand as C;
        match self {
            C::PeerPropertiesRequest {
                correlation_id,
                properties,
            } => {
                w.out.put_u32(*correlation_id);
                w.properties("peer properties", properties)?;
            }
            C::PeerPropertiesResponse {
                correlation_id,
                code,
                properties,
            }
            | C::OpenResponse {
                correlation_id,
                code,
                properties,
            } => {
                w.out.put_u32(*correlation_id);
                w.out.put_u16(*code);
                w.properties("properties", properties)?;
            }
            C::SaslHandshakeRequest { correlation_id } => w.out.put_u32(*correlation_id),
            C::SaslHandshakeResponse {
                correlation_id,
                code,
                mechanisms,
            } => {
                w.out.put_u32(*correlation_id);
                w.out.put_u16(*code);
                w.strings("mechanisms", mechanisms)?;
            }
            C::SaslAuthenticateRequest {
                correlation_id,
                mechanism,
                data,
            } => {
                w.out.put_u32(*correlation_id);
                w.string("mechanism", mechanism)?;
                w.opt_bytes("sasl opaque data", data.as_deref())?;
            }
            C::SaslAuthenticateResponse {
                correlation_id,
                code,
                data,
            } => {
                w.out.put_u32(*correlation_id);
                w.out.put_u16(*code);
                if let Some(data) = data {
                    w.opt_bytes("sasl opaque data", Some(data))?;
                }
            }
            _ => return self.encode_rest(w),
        }
        Ok(())
    }

    /// The second half of `encode_body`, split to keep functions short.
    fn encode_rest(&self, w: &mut Writer) -> Result<(), EncodeError> {
        use ConnectionCommand as C;
        match self {
            C::Tune {
                frame_max,
                heartbeat,
                ..
            } => {
                w.out.put_u32(*frame_max);
                w.out.put_u32(*heartbeat);
            }
            C::OpenRequest {
                correlation_id,
                virtual_host,
            } => {
                w.out.put_u32(*correlation_id);
                w.string("virtual host", virtual_host)?;
            }
            C::CloseRequest {
                correlation_id,
                code,
                reason,
            } => {
                w.out.put_u32(*correlation_id);
                w.out.put_u16(*code);
                w.opt_string("closing reason", reason.as_deref())?;
            }
            C::Heartbeat => {}
            C::ExchangeCommandVersionsRequest {
                correlation_id,
                versions,
            } => {
                w.out.put_u32(*correlation_id);
                put_versions(w, versions)?;
            }
            C::ExchangeCommandVersionsResponse {
                correlation_id,
                code,
                versions,
            } => {
                w.out.put_u32(*correlation_id);
                w.out.put_u16(*code);
                put_versions(w, versions)?;
            }
            _ => {}
        }
        Ok(())
    }
}

fn put_versions(w: &mut Writer, versions: &[CommandVersion]) -> Result<(), EncodeError> {
    w.count("commands", versions.len())?;
    for version in versions {
        w.out.put_u16(version.key);
        w.out.put_u16(version.min_version);
        w.out.put_u16(version.max_version);
    }
    Ok(())
}
