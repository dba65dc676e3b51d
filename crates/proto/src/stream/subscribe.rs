//! Consuming commands: Subscribe (with its offset specification), Deliver, Credit,
//! StoreOffset, QueryOffset, Unsubscribe and ResolveOffsetSpec.
//!
//! The server never decodes a Deliver's osiris chunk: it writes the frame header with
//! `encode_deliver_header` and then the chunk as it lies on disk. `SubscribeCommand::Deliver`
//! exists so that tests and clients can read such a frame back.

use bytes::{BufMut, Bytes, BytesMut};

use super::codes::{key, name};
use super::error::{DecodeError, EncodeError};
use super::frame::{encode_deliver_header, encode_frame, Frame};
use super::wire::{Properties, Reader, Writer};

/// Where a subscription starts reading (the spec's OffsetSpecification).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetSpec {
    First,
    Last,
    Next,
    Offset(u64),
    /// Milliseconds since the epoch.
    Timestamp(i64),
}

impl OffsetSpec {
    /// The spec's OffsetType.
    pub fn offset_type(&self) -> u16 {
        match self {
            Self::First => 1,
            Self::Last => 2,
            Self::Next => 3,
            Self::Offset(_) => 4,
            Self::Timestamp(_) => 5,
        }
    }

    fn read(r: &mut Reader, command: &'static str) -> Result<Self, DecodeError> {
        let offset_type = r.u16("offset type")?;
        Ok(match offset_type {
            1 => Self::First,
            2 => Self::Last,
            3 => Self::Next,
            4 => Self::Offset(r.u64("offset")?),
            5 => Self::Timestamp(r.i64("timestamp")?),
            _ => {
                return Err(DecodeError::UnknownOffsetType {
                    command,
                    offset_type,
                })
            }
        })
    }

    fn write(&self, out: &mut BytesMut) {
        out.put_u16(self.offset_type());
        match self {
            Self::Offset(offset) => out.put_u64(*offset),
            Self::Timestamp(timestamp) => out.put_i64(*timestamp),
            Self::First | Self::Last | Self::Next => {}
        }
    }
}

/// The commands of a subscription's life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubscribeCommand {
    Subscribe {
        correlation_id: u32,
        subscription_id: u8,
        stream: String,
        offset: OffsetSpec,
        credit: u16,
        properties: Properties,
    },
    /// `committed_chunk_id` is `Some` in version 2. `chunk` is the osiris chunk, undecoded.
    Deliver {
        subscription_id: u8,
        committed_chunk_id: Option<u64>,
        chunk: Bytes,
    },
    Credit {
        subscription_id: u8,
        credit: u16,
    },
    /// Sent by the server only when a Credit fails (an unknown subscription).
    CreditResponse {
        code: u16,
        subscription_id: u8,
    },
    StoreOffset {
        reference: String,
        stream: String,
        offset: u64,
    },
    QueryOffsetRequest {
        correlation_id: u32,
        reference: String,
        stream: String,
    },
    QueryOffsetResponse {
        correlation_id: u32,
        code: u16,
        offset: u64,
    },
    Unsubscribe {
        correlation_id: u32,
        subscription_id: u8,
    },
    ResolveOffsetSpecRequest {
        correlation_id: u32,
        stream: String,
        offset: OffsetSpec,
        properties: Properties,
    },
    ResolveOffsetSpecResponse {
        correlation_id: u32,
        code: u16,
        offset: OffsetSpec,
    },
}

/// Whether this family owns the key.
pub(crate) fn owns(command_key: u16) -> bool {
    matches!(
        command_key,
        key::SUBSCRIBE
            | key::DELIVER
            | key::CREDIT
            | key::STORE_OFFSET
            | key::QUERY_OFFSET
            | key::UNSUBSCRIBE
            | key::RESOLVE_OFFSET_SPEC
    )
}

/// Decodes a frame whose key `owns` accepts; `Ok(None)` for an undefined pairing.
pub(crate) fn decode(frame: &Frame) -> Result<Option<SubscribeCommand>, DecodeError> {
    use SubscribeCommand as S;
    let command_name = name(frame.key);
    let mut r = Reader::new(frame.body.clone(), command_name);
    let command = match (frame.key, frame.response, frame.version) {
        (key::DELIVER, false, 1 | 2) => S::Deliver {
            subscription_id: r.u8("subscription id")?,
            committed_chunk_id: match frame.version {
                2 => Some(r.u64("committed chunk id")?),
                _ => None,
            },
            chunk: r.rest(),
        },
        (_, _, version) if version != 1 => return Ok(None),
        (key::SUBSCRIBE, false, _) => S::Subscribe {
            correlation_id: r.u32("correlation id")?,
            subscription_id: r.u8("subscription id")?,
            stream: r.string("stream")?,
            offset: OffsetSpec::read(&mut r, command_name)?,
            credit: r.u16("credit")?,
            properties: r.optional_properties("properties")?,
        },
        (key::CREDIT, false, _) => S::Credit {
            subscription_id: r.u8("subscription id")?,
            credit: r.u16("credit")?,
        },
        (key::CREDIT, true, _) => S::CreditResponse {
            code: r.u16("response code")?,
            subscription_id: r.u8("subscription id")?,
        },
        (key::STORE_OFFSET, false, _) => S::StoreOffset {
            reference: r.string("reference")?,
            stream: r.string("stream")?,
            offset: r.u64("offset")?,
        },
        (key::QUERY_OFFSET, false, _) => S::QueryOffsetRequest {
            correlation_id: r.u32("correlation id")?,
            reference: r.string("reference")?,
            stream: r.string("stream")?,
        },
        (key::QUERY_OFFSET, true, _) => S::QueryOffsetResponse {
            correlation_id: r.u32("correlation id")?,
            code: r.u16("response code")?,
            offset: r.u64("offset")?,
        },
        (key::UNSUBSCRIBE, false, _) => S::Unsubscribe {
            correlation_id: r.u32("correlation id")?,
            subscription_id: r.u8("subscription id")?,
        },
        (key::RESOLVE_OFFSET_SPEC, false, _) => S::ResolveOffsetSpecRequest {
            correlation_id: r.u32("correlation id")?,
            stream: r.string("stream")?,
            offset: OffsetSpec::read(&mut r, command_name)?,
            properties: r.optional_properties("properties")?,
        },
        (key::RESOLVE_OFFSET_SPEC, true, _) => S::ResolveOffsetSpecResponse {
            correlation_id: r.u32("correlation id")?,
            code: r.u16("response code")?,
            offset: OffsetSpec::read(&mut r, command_name)?,
        },
        _ => return Ok(None),
    };
    r.finish()?;
    Ok(Some(command))
}

impl SubscribeCommand {
    /// The command key (without the response bit) and whether this is a response.
    pub fn key(&self) -> (u16, bool) {
        use SubscribeCommand as S;
        match self {
            S::Subscribe { .. } => (key::SUBSCRIBE, false),
            S::Deliver { .. } => (key::DELIVER, false),
            S::Credit { .. } => (key::CREDIT, false),
            S::CreditResponse { .. } => (key::CREDIT, true),
            S::StoreOffset { .. } => (key::STORE_OFFSET, false),
            S::QueryOffsetRequest { .. } => (key::QUERY_OFFSET, false),
            S::QueryOffsetResponse { .. } => (key::QUERY_OFFSET, true),
            S::Unsubscribe { .. } => (key::UNSUBSCRIBE, false),
            S::ResolveOffsetSpecRequest { .. } => (key::RESOLVE_OFFSET_SPEC, false),
            S::ResolveOffsetSpecResponse { .. } => (key::RESOLVE_OFFSET_SPEC, true),
        }
    }

    /// Appends the whole frame (size prefix included) to `out`.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        if let Self::Deliver {
            subscription_id,
            committed_chunk_id,
            chunk,
        } = self
        {
            let chunk = std::slice::from_ref(chunk);
            encode_deliver_header(out, *subscription_id, *committed_chunk_id, chunk)?;
            chunk.iter().for_each(|part| out.extend_from_slice(part));
            return Ok(());
        }
        let (command_key, response) = self.key();
        encode_frame(out, command_key, response, 1, |w| self.encode_body(w))
    }

    fn encode_body(&self, w: &mut Writer) -> Result<(), EncodeError> {
        use SubscribeCommand as S;
        match self {
            S::Subscribe {
                correlation_id,
                subscription_id,
                stream,
                offset,
                credit,
                properties,
            } => {
                w.out.put_u32(*correlation_id);
                w.out.put_u8(*subscription_id);
                w.string("stream", stream)?;
                offset.write(w.out);
                w.out.put_u16(*credit);
                w.properties("properties", properties)?;
            }
            // Written by `encode` without a body writer.
            S::Deliver { .. } => {}
            S::Credit {
                subscription_id,
                credit,
            } => {
                w.out.put_u8(*subscription_id);
                w.out.put_u16(*credit);
            }
            S::CreditResponse {
                code,
                subscription_id,
            } => {
                w.out.put_u16(*code);
                w.out.put_u8(*subscription_id);
            }
            _ => return self.encode_rest(w),
        }
        Ok(())
    }

    /// The second half of `encode_body`, split to keep functions short.
    fn encode_rest(&self, w: &mut Writer) -> Result<(), EncodeError> {
        use SubscribeCommand as S;
        match self {
            S::StoreOffset {
                reference,
                stream,
                offset,
            } => {
                w.string("reference", reference)?;
                w.string("stream", stream)?;
                w.out.put_u64(*offset);
            }
            S::QueryOffsetRequest {
                correlation_id,
                reference,
                stream,
            } => {
                w.out.put_u32(*correlation_id);
                w.string("reference", reference)?;
                w.string("stream", stream)?;
            }
            S::QueryOffsetResponse {
                correlation_id,
                code,
                offset,
            } => {
                w.out.put_u32(*correlation_id);
                w.out.put_u16(*code);
                w.out.put_u64(*offset);
            }
            S::Unsubscribe {
                correlation_id,
                subscription_id,
            } => {
                w.out.put_u32(*correlation_id);
                w.out.put_u8(*subscription_id);
            }
            S::ResolveOffsetSpecRequest {
                correlation_id,
                stream,
                offset,
                properties,
            } => {
                w.out.put_u32(*correlation_id);
                w.string("stream", stream)?;
                offset.write(w.out);
                w.properties("properties", properties)?;
            }
            S::ResolveOffsetSpecResponse {
                correlation_id,
                code,
                offset,
            } => {
                w.out.put_u32(*correlation_id);
                w.out.put_u16(*code);
                offset.write(w.out);
            }
            _ => {}
        }
        Ok(())
    }
}
