//! Stream administration commands: Create, Delete, Metadata (with brokers and per-stream
//! leader and replicas), MetadataUpdate and StreamStats.

use bytes::{BufMut, BytesMut};

use super::codes::{key, name};
use super::error::{DecodeError, EncodeError};
use super::frame::{encode_frame, Frame};
use super::wire::{Properties, Reader, Writer};

/// A node in a Metadata response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broker {
    pub reference: u16,
    pub host: String,
    pub port: u32,
}

/// One stream in a Metadata response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamMetadata {
    pub stream: String,
    pub code: u16,
    /// A `Broker::reference`.
    pub leader: u16,
    pub replicas: Vec<u16>,
}

/// The commands that create, delete and describe streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminCommand {
    Create {
        correlation_id: u32,
        stream: String,
        arguments: Properties,
    },
    Delete {
        correlation_id: u32,
        stream: String,
    },
    MetadataRequest {
        correlation_id: u32,
        streams: Vec<String>,
    },
    MetadataResponse {
        correlation_id: u32,
        brokers: Vec<Broker>,
        streams: Vec<StreamMetadata>,
    },
    MetadataUpdate {
        code: u16,
        stream: String,
    },
    StreamStatsRequest {
        correlation_id: u32,
        stream: String,
    },
    StreamStatsResponse {
        correlation_id: u32,
        code: u16,
        stats: Vec<(String, i64)>,
    },
}

/// Whether this family owns the key.
pub(crate) fn owns(command_key: u16) -> bool {
    matches!(
        command_key,
        key::CREATE | key::DELETE | key::METADATA | key::METADATA_UPDATE | key::STREAM_STATS
    )
}

/// Decodes a frame whose key `owns` accepts; `Ok(None)` for an undefined pairing.
pub(crate) fn decode(frame: &Frame) -> Result<Option<AdminCommand>, DecodeError> {
    use AdminCommand as A;
    if frame.version != 1 {
        return Ok(None);
    }
    let mut r = Reader::new(frame.body.clone(), name(frame.key));
    let command = match (frame.key, frame.response) {
        (key::CREATE, false) => A::Create {
            correlation_id: r.u32("correlation id")?,
            stream: r.string("stream")?,
            arguments: r.properties("arguments")?,
        },
        (key::DELETE, false) => A::Delete {
            correlation_id: r.u32("correlation id")?,
            stream: r.string("stream")?,
        },
        (key::METADATA, false) => A::MetadataRequest {
            correlation_id: r.u32("correlation id")?,
            streams: r.strings("streams")?,
        },
        (key::METADATA, true) => A::MetadataResponse {
            correlation_id: r.u32("correlation id")?,
            brokers: brokers(&mut r)?,
            streams: stream_metadata(&mut r)?,
        },
        (key::METADATA_UPDATE, false) => A::MetadataUpdate {
            code: r.u16("code")?,
            stream: r.string("stream")?,
        },
        (key::STREAM_STATS, false) => A::StreamStatsRequest {
            correlation_id: r.u32("correlation id")?,
            stream: r.string("stream")?,
        },
        (key::STREAM_STATS, true) => {
            let correlation_id = r.u32("correlation id")?;
            let code = r.u16("response code")?;
            let count = r.count("stats", 10)?;
            let mut stats = Vec::with_capacity(count);
            for _ in 0..count {
                stats.push((r.string("statistic")?, r.i64("value")?));
            }
            A::StreamStatsResponse {
                correlation_id,
                code,
                stats,
            }
        }
        _ => return Ok(None),
    };
    r.finish()?;
    Ok(Some(command))
}

fn brokers(r: &mut Reader) -> Result<Vec<Broker>, DecodeError> {
    let count = r.count("brokers", 8)?;
    let mut brokers = Vec::with_capacity(count);
    for _ in 0..count {
        brokers.push(Broker {
            reference: r.u16("broker reference")?,
            host: r.string("host")?,
            port: r.u32("port")?,
        });
    }
    Ok(brokers)
}

fn stream_metadata(r: &mut Reader) -> Result<Vec<StreamMetadata>, DecodeError> {
    let count = r.count("stream metadata", 10)?;
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        let stream = r.string("stream")?;
        let code = r.u16("response code")?;
        let leader = r.u16("leader reference")?;
        let replica_count = r.count("replicas references", 2)?;
        let mut replicas = Vec::with_capacity(replica_count);
        for _ in 0..replica_count {
            replicas.push(r.u16("replica reference")?);
        }
        streams.push(StreamMetadata {
            stream,
            code,
            leader,
            replicas,
        });
    }
    Ok(streams)
}

impl AdminCommand {
    /// The command key (without the response bit) and whether this is a response.
    pub fn key(&self) -> (u16, bool) {
        use AdminCommand as A;
        match self {
            A::Create { .. } => (key::CREATE, false),
            A::Delete { .. } => (key::DELETE, false),
            A::MetadataRequest { .. } => (key::METADATA, false),
            A::MetadataResponse { .. } => (key::METADATA, true),
            A::MetadataUpdate { .. } => (key::METADATA_UPDATE, false),
            A::StreamStatsRequest { .. } => (key::STREAM_STATS, false),
            A::StreamStatsResponse { .. } => (key::STREAM_STATS, true),
        }
    }

    /// Appends the whole frame (size prefix included) to `out`.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let (command_key, response) = self.key();
        encode_frame(out, command_key, response, 1, |w| self.encode_body(w))
    }

    fn encode_body(&self, w: &mut Writer) -> Result<(), EncodeError> {
        use AdminCommand as A;
        match self {
            A::Create {
                correlation_id,
                stream,
                arguments,
            } => {
                w.out.put_u32(*correlation_id);
                w.string("stream", stream)?;
                w.properties("arguments", arguments)?;
            }
            A::Delete {
                correlation_id,
                stream,
            }
            | A::StreamStatsRequest {
                correlation_id,
                stream,
            } => {
                w.out.put_u32(*correlation_id);
                w.string("stream", stream)?;
            }
            A::MetadataRequest {
                correlation_id,
                streams,
            } => {
                w.out.put_u32(*correlation_id);
                w.strings("streams", streams)?;
            }
            A::MetadataResponse {
                correlation_id,
                brokers,
                streams,
            } => {
                w.out.put_u32(*correlation_id);
                put_metadata(w, brokers, streams)?;
            }
            A::MetadataUpdate { code, stream } => {
                w.out.put_u16(*code);
                w.string("stream", stream)?;
            }
            A::StreamStatsResponse {
                correlation_id,
                code,
                stats,
            } => {
                w.out.put_u32(*correlation_id);
                w.out.put_u16(*code);
                w.count("stats", stats.len())?;
                for (statistic, value) in stats {
                    w.string("statistic", statistic)?;
                    w.out.put_i64(*value);
                }
            }
        }
        Ok(())
    }
}

fn put_metadata(
    w: &mut Writer,
    brokers: &[Broker],
    streams: &[StreamMetadata],
) -> Result<(), EncodeError> {
    w.count("brokers", brokers.len())?;
    for broker in brokers {
        w.out.put_u16(broker.reference);
        w.string("host", &broker.host)?;
        w.out.put_u32(broker.port);
    }
    w.count("stream metadata", streams.len())?;
    for stream in streams {
        w.string("stream", &stream.stream)?;
        w.out.put_u16(stream.code);
        w.out.put_u16(stream.leader);
        w.count("replicas references", stream.replicas.len())?;
        stream
            .replicas
            .iter()
            .for_each(|replica| w.out.put_u16(*replica));
    }
    Ok(())
}
