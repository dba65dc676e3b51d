//! Publishing commands: DeclarePublisher, Publish (v1, and v2 with a filter value per
//! message), PublishConfirm, PublishError, QueryPublisherSequence and DeletePublisher.
//!
//! Message bodies are `Bytes` slices of the frame: a publish batch reaches the store without
//! a copy.

use bytes::{BufMut, Bytes, BytesMut};

use super::codes::{key, name};
use super::error::{DecodeError, EncodeError};
use super::frame::{encode_frame, Frame};
use super::wire::{Reader, Writer};

/// Publishing id (u64), then for v2 a filter value (i16 length), then the message (i32 length).
const MESSAGE_SIZE_MIN: usize = 12;

/// Set in the first byte of a published entry that is a sub-batch rather than one message
/// (where a simple entry's int32 length has its sign bit).
const SUB_BATCH_BIT: u8 = 0x80;

/// One entry of a Publish frame: a message, or a sub-batch of messages the client packed (and
/// perhaps compressed) itself, which the server stores as it came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishedMessage {
    pub publishing_id: u64,
    /// Only version 2 frames carry it; always `None` in a version 1 frame.
    pub filter_value: Option<String>,
    /// A message, or with `sub_batch` the sub-batch's (possibly compressed) records.
    pub message: Bytes,
    pub sub_batch: Option<SubBatch>,
}

/// The header of a sub-batch entry: `1:1 Compression:3 Unused:4 Records:16
/// UncompressedLength:32 Length:32`, then `Length` bytes of records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubBatch {
    /// 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (the clients' codes).
    pub compression: u8,
    pub records: u16,
    pub uncompressed_len: u32,
}

/// The commands of a publisher's life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishCommand {
    DeclarePublisher {
        correlation_id: u32,
        publisher_id: u8,
        reference: Option<String>,
        stream: String,
    },
    /// `filtered` selects version 2, which carries each message's filter value.
    Publish {
        publisher_id: u8,
        filtered: bool,
        messages: Vec<PublishedMessage>,
    },
    PublishConfirm {
        publisher_id: u8,
        publishing_ids: Vec<u64>,
    },
    /// Each error is a publishing id and a response code.
    PublishError {
        publisher_id: u8,
        errors: Vec<(u64, u16)>,
    },
    QueryPublisherSequenceRequest {
        correlation_id: u32,
        reference: String,
        stream: String,
    },
    QueryPublisherSequenceResponse {
        correlation_id: u32,
        code: u16,
        sequence: u64,
    },
    DeletePublisher {
        correlation_id: u32,
        publisher_id: u8,
    },
}

/// Whether this family owns the key.
pub(crate) fn owns(command_key: u16) -> bool {
    matches!(
        command_key,
        key::DECLARE_PUBLISHER
            | key::PUBLISH
            | key::PUBLISH_CONFIRM
            | key::PUBLISH_ERROR
            | key::QUERY_PUBLISHER_SEQUENCE
            | key::DELETE_PUBLISHER
    )
}

/// Decodes a frame whose key `owns` accepts; `Ok(None)` for an undefined pairing.
pub(crate) fn decode(frame: &Frame) -> Result<Option<PublishCommand>, DecodeError> {
    use PublishCommand as P;
    let mut r = Reader::new(frame.body.clone(), name(frame.key));
    let command = match (frame.key, frame.response, frame.version) {
        (key::PUBLISH, false, 1 | 2) => publish(&mut r, frame.version == 2)?,
        (_, _, version) if version != 1 => return Ok(None),
        (key::DECLARE_PUBLISHER, false, _) => P::DeclarePublisher {
            correlation_id: r.u32("correlation id")?,
            publisher_id: r.u8("publisher id")?,
            reference: r.opt_string("publisher reference")?,
            stream: r.string("stream")?,
        },
        (key::PUBLISH_CONFIRM, false, _) => {
            let publisher_id = r.u8("publisher id")?;
            let count = r.count("publishing ids", 8)?;
            let mut publishing_ids = Vec::with_capacity(count);
            for _ in 0..count {
                publishing_ids.push(r.u64("publishing id")?);
            }
            P::PublishConfirm {
                publisher_id,
                publishing_ids,
            }
        }
        (key::PUBLISH_ERROR, false, _) => {
            let publisher_id = r.u8("publisher id")?;
            let count = r.count("publishing errors", 10)?;
            let mut errors = Vec::with_capacity(count);
            for _ in 0..count {
                errors.push((r.u64("publishing id")?, r.u16("code")?));
            }
            P::PublishError {
                publisher_id,
                errors,
            }
        }
        (key::QUERY_PUBLISHER_SEQUENCE, false, _) => P::QueryPublisherSequenceRequest {
            correlation_id: r.u32("correlation id")?,
            reference: r.string("publisher reference")?,
            stream: r.string("stream")?,
        },
        (key::QUERY_PUBLISHER_SEQUENCE, true, _) => P::QueryPublisherSequenceResponse {
            correlation_id: r.u32("correlation id")?,
            code: r.u16("response code")?,
            sequence: r.u64("sequence")?,
        },
        (key::DELETE_PUBLISHER, false, _) => P::DeletePublisher {
            correlation_id: r.u32("correlation id")?,
            publisher_id: r.u8("publisher id")?,
        },
        _ => return Ok(None),
    };
    r.finish()?;
    Ok(Some(command))
}

fn publish(r: &mut Reader, filtered: bool) -> Result<PublishCommand, DecodeError> {
    let publisher_id = r.u8("publisher id")?;
    let count = r.count("published messages", MESSAGE_SIZE_MIN)?;
    let mut messages = Vec::with_capacity(count);
    for _ in 0..count {
        let publishing_id = r.u64("publishing id")?;
        let filter_value = if filtered {
            r.opt_string("filter value")?
        } else {
            None
        };
        let (message, sub_batch) = if r.peek_u8("message")? & SUB_BATCH_BIT != 0 {
            let flags = r.u8("sub-batch flags")?;
            let sub_batch = SubBatch {
                compression: (flags >> 4) & 0x07,
                records: r.u16("sub-batch records")?,
                uncompressed_len: r.u32("sub-batch uncompressed length")?,
            };
            let length = r.u32("sub-batch length")?;
            (r.fixed_bytes("sub-batch", length)?, Some(sub_batch))
        } else {
            (r.bytes("message")?, None)
        };
        messages.push(PublishedMessage {
            publishing_id,
            filter_value,
            message,
            sub_batch,
        });
    }
    debug_assert_eq!(messages.len(), count, "one message per counted entry");
    Ok(PublishCommand::Publish {
        publisher_id,
        filtered,
        messages,
    })
}

impl PublishCommand {
    /// The command key (without the response bit), whether this is a response, and the version.
    pub fn key(&self) -> (u16, bool, u16) {
        use PublishCommand as P;
        match self {
            P::DeclarePublisher { .. } => (key::DECLARE_PUBLISHER, false, 1),
            P::Publish { filtered, .. } => (key::PUBLISH, false, if *filtered { 2 } else { 1 }),
            P::PublishConfirm { .. } => (key::PUBLISH_CONFIRM, false, 1),
            P::PublishError { .. } => (key::PUBLISH_ERROR, false, 1),
            P::QueryPublisherSequenceRequest { .. } => (key::QUERY_PUBLISHER_SEQUENCE, false, 1),
            P::QueryPublisherSequenceResponse { .. } => (key::QUERY_PUBLISHER_SEQUENCE, true, 1),
            P::DeletePublisher { .. } => (key::DELETE_PUBLISHER, false, 1),
        }
    }

    /// Appends the whole frame (size prefix included) to `out`.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let (command_key, response, version) = self.key();
        encode_frame(out, command_key, response, version, |w| self.encode_body(w))
    }

    fn encode_body(&self, w: &mut Writer) -> Result<(), EncodeError> {
        use PublishCommand as P;
        match self {
            P::DeclarePublisher {
                correlation_id,
                publisher_id,
                reference,
                stream,
            } => {
                w.out.put_u32(*correlation_id);
                w.out.put_u8(*publisher_id);
                w.opt_string("publisher reference", reference.as_deref())?;
                w.string("stream", stream)?;
            }
            P::Publish {
                publisher_id,
                filtered,
                messages,
            } => {
                w.out.put_u8(*publisher_id);
                w.count("published messages", messages.len())?;
                for message in messages {
                    w.out.put_u64(message.publishing_id);
                    if *filtered {
                        w.opt_string("filter value", message.filter_value.as_deref())?;
                    }
                    match message.sub_batch {
                        None => w.opt_bytes("message", Some(&message.message))?,
                        Some(sub_batch) => put_sub_batch(w, &sub_batch, &message.message)?,
                    }
                }
            }
            P::PublishConfirm {
                publisher_id,
                publishing_ids,
            } => {
                w.out.put_u8(*publisher_id);
                w.count("publishing ids", publishing_ids.len())?;
                publishing_ids.iter().for_each(|id| w.out.put_u64(*id));
            }
            P::PublishError {
                publisher_id,
                errors,
            } => {
                w.out.put_u8(*publisher_id);
                w.count("publishing errors", errors.len())?;
                for (publishing_id, code) in errors {
                    w.out.put_u64(*publishing_id);
                    w.out.put_u16(*code);
                }
            }
            _ => return self.encode_rest(w),
        }
        Ok(())
    }

    /// The second half of `encode_body`, split to keep functions short.
    fn encode_rest(&self, w: &mut Writer) -> Result<(), EncodeError> {
        use PublishCommand as P;
        match self {
            P::QueryPublisherSequenceRequest {
                correlation_id,
                reference,
                stream,
            } => {
                w.out.put_u32(*correlation_id);
                w.string("publisher reference", reference)?;
                w.string("stream", stream)?;
            }
            P::QueryPublisherSequenceResponse {
                correlation_id,
                code,
                sequence,
            } => {
                w.out.put_u32(*correlation_id);
                w.out.put_u16(*code);
                w.out.put_u64(*sequence);
            }
            P::DeletePublisher {
                correlation_id,
                publisher_id,
            } => {
                w.out.put_u32(*correlation_id);
                w.out.put_u8(*publisher_id);
            }
            _ => {}
        }
        Ok(())
    }
}

fn put_sub_batch(w: &mut Writer, sub_batch: &SubBatch, data: &[u8]) -> Result<(), EncodeError> {
    let length = u32::try_from(data.len()).map_err(|_| EncodeError::TooLong {
        command: "publish",
        field: "sub-batch",
        length: data.len(),
        max: u64::from(u32::MAX),
    })?;
    w.out
        .put_u8(SUB_BATCH_BIT | ((sub_batch.compression & 0x07) << 4));
    w.out.put_u16(sub_batch.records);
    w.out.put_u32(sub_batch.uncompressed_len);
    w.out.put_u32(length);
    w.out.extend_from_slice(data);
    Ok(())
}
