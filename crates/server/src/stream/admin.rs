//! The commands that are neither publishing nor subscribing: Create, Delete, Metadata,
//! StreamStats, StoreOffset, QueryOffset, ResolveOffsetSpec, ExchangeCommandVersions, Close
//! and Heartbeat; the dispatch of every decoded command; and the refusal of the super-stream
//! commands, which the next stream issue implements.
//!
//! A stream is a durable queue of type stream in the connection's vhost: Create declares one
//! (the protocol's arguments become RabbitMQ's `x-` queue arguments), Delete deletes it, with
//! AMQP's permissions (configure to create or delete, read to subscribe or query).

use bytes::{Buf, BufMut, Bytes};
use warren_core::access::Perm;
use warren_core::error::ErrorKind;
use warren_core::queue::stream::StreamHandle;
use warren_core::value::{Table, Value};
use warren_core::vhost::QueueDeclare;
use warren_proto::stream::{
    key, response_code, AdminCommand, Broker, Command, CommandVersion, ConnectionCommand,
    OffsetSpec, StreamMetadata, SubscribeCommand, RESPONSE_BIT,
};

use super::connection::Connection;
use super::fault::Fault;
use super::subscription::read_start;

/// The longest stream name (a queue name: a short string).
const STREAM_NAME_BYTES_MAX: usize = 255;
/// The Metadata broker reference of this node.
const THIS_BROKER: u16 = 0;

/// What ExchangeCommandVersions answers: RabbitMQ 4.x's list without the super-stream
/// commands, and Publish at version 1 only, so that clients refuse filtering up front.
const COMMAND_VERSIONS: [(u16, u16, u16); 16] = [
    (key::DECLARE_PUBLISHER, 1, 1),
    (key::PUBLISH, 1, 1),
    (key::QUERY_PUBLISHER_SEQUENCE, 1, 1),
    (key::DELETE_PUBLISHER, 1, 1),
    (key::SUBSCRIBE, 1, 1),
    (key::CREDIT, 1, 1),
    (key::STORE_OFFSET, 1, 1),
    (key::QUERY_OFFSET, 1, 1),
    (key::UNSUBSCRIBE, 1, 1),
    (key::CREATE, 1, 1),
    (key::DELETE, 1, 1),
    (key::METADATA, 1, 1),
    (key::CLOSE, 1, 1),
    (key::HEARTBEAT, 1, 1),
    (key::STREAM_STATS, 1, 1),
    (key::RESOLVE_OFFSET_SPEC, 1, 1),
];

impl Connection {
    /// Every decoded command but Publish frames (see `on_read`).
    pub(super) async fn on_command(&mut self, command: Command) -> Result<(), Fault> {
        match command {
            Command::Publish(command) => self.on_publish(command).await,
            Command::Subscribe(command) => {
                if matches!(command, SubscribeCommand::StoreOffset { .. }) {
                    return self.store_offset(command).await;
                }
                if matches!(command, SubscribeCommand::QueryOffsetRequest { .. }) {
                    self.query_offset(command).await;
                    return Ok(());
                }
                self.on_subscribe_command(command);
                Ok(())
            }
            Command::Admin(command) => self.on_admin(command).await,
            Command::Connection(command) => self.on_connection_command(command).await,
            // Answers to requests the server never sends (the client's Close response is read
            // by `close_with`).
            Command::Response(_) => Ok(()),
        }
    }

    async fn on_connection_command(&mut self, command: ConnectionCommand) -> Result<(), Fault> {
        match command {
            ConnectionCommand::Heartbeat => Ok(()),
            ConnectionCommand::CloseRequest {
                correlation_id,
                code,
                reason,
            } => {
                tracing::debug!(connection = self.id, code, ?reason, "stream client closed");
                Err(self.on_client_close(correlation_id).await)
            }
            ConnectionCommand::ExchangeCommandVersionsRequest {
                correlation_id,
                versions,
            } => {
                self.deliver_v2 = versions
                    .iter()
                    .any(|v| v.key == key::DELIVER && v.max_version >= 2);
                let response = ConnectionCommand::ExchangeCommandVersionsResponse {
                    correlation_id,
                    code: response_code::OK,
                    versions: COMMAND_VERSIONS
                        .iter()
                        .map(|&(key, min_version, max_version)| CommandVersion {
                            key,
                            min_version,
                            max_version,
                        })
                        .collect(),
                };
                self.send(&Command::Connection(response));
                Ok(())
            }
            ConnectionCommand::SaslAuthenticateRequest { correlation_id, .. } => {
                tracing::warn!(
                    connection = self.id,
                    "SaslAuthenticate on an open stream connection refused: Warren does not \
                     implement updating a connection's credentials"
                );
                let response = ConnectionCommand::SaslAuthenticateResponse {
                    correlation_id,
                    code: response_code::SASL_ERROR,
                    data: None,
                };
                self.send(&Command::Connection(response));
                Ok(())
            }
            other => Err(Fault::close(
                response_code::UNKNOWN_FRAME,
                format!("unexpected {:?} on an open connection", other.key()),
            )),
        }
    }

    async fn on_admin(&mut self, command: AdminCommand) -> Result<(), Fault> {
        match command {
            AdminCommand::Create {
                correlation_id,
                stream,
                arguments,
            } => {
                let code = self.create(&stream, &arguments).await;
                self.respond(key::CREATE, correlation_id, code);
            }
            AdminCommand::Delete {
                correlation_id,
                stream,
            } => {
                let code = self.delete(&stream).await;
                self.respond(key::DELETE, correlation_id, code);
            }
            AdminCommand::MetadataRequest {
                correlation_id,
                streams,
            } => self.metadata(correlation_id, &streams),
            AdminCommand::StreamStatsRequest {
                correlation_id,
                stream,
            } => {
                let (code, stats) = self.stream_stats(&stream);
                let response = AdminCommand::StreamStatsResponse {
                    correlation_id,
                    code,
                    stats,
                };
                self.send(&Command::Admin(response));
            }
            other => {
                return Err(Fault::close(
                    response_code::UNKNOWN_FRAME,
                    format!("{:?} is sent by the server only", other.key()),
                ))
            }
        }
        Ok(())
    }

    /// The stream `name` of the connection's vhost, or the response code saying why not.
    pub(super) fn stream_handle(&self, name: &str) -> Result<StreamHandle, u16> {
        let vhost = self
            .vhost
            .as_ref()
            .expect("invariant: commands are handled only after Open");
        let queue = vhost
            .queue(name, self.id)
            .map_err(|_| response_code::STREAM_DOES_NOT_EXIST)?;
        queue
            .stream()
            .cloned()
            .ok_or(response_code::STREAM_DOES_NOT_EXIST)
    }

    /// Create: a durable queue of type stream, its arguments mapped to `x-` ones.
    async fn create(&mut self, stream: &str, arguments: &[(String, String)]) -> u16 {
        if stream.is_empty() || stream.len() > STREAM_NAME_BYTES_MAX {
            return response_code::PRECONDITION_FAILED;
        }
        if let Err(error) = self.check(Perm::Configure, stream) {
            tracing::info!(connection = self.id, "create refused: {}", error.text);
            return response_code::ACCESS_REFUSED;
        }
        let vhost = self.vhost.clone().expect("invariant: open");
        if let Ok(existing) = vhost.queue(stream, self.id) {
            return match existing.stream() {
                Some(_) => response_code::STREAM_ALREADY_EXISTS,
                None => response_code::PRECONDITION_FAILED,
            };
        }
        let arguments = match queue_arguments(arguments) {
            Ok(arguments) => arguments,
            Err(text) => {
                tracing::warn!(
                    connection = self.id,
                    "cannot create stream '{stream}': {text}"
                );
                return response_code::PRECONDITION_FAILED;
            }
        };
        let declare = QueueDeclare {
            name: stream.to_owned(),
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: false,
            arguments,
        };
        match vhost.declare_queue(declare, self.id).await {
            Ok(_) => response_code::OK,
            Err(error) => {
                tracing::warn!(
                    connection = self.id,
                    "cannot create stream '{stream}': {}",
                    error.text
                );
                match error.kind {
                    ErrorKind::AccessRefused => response_code::ACCESS_REFUSED,
                    ErrorKind::InternalError => response_code::INTERNAL_ERROR,
                    _ => response_code::PRECONDITION_FAILED,
                }
            }
        }
    }

    /// Delete: the stream must exist and be a stream.
    async fn delete(&mut self, stream: &str) -> u16 {
        if let Err(error) = self.check(Perm::Configure, stream) {
            tracing::info!(connection = self.id, "delete refused: {}", error.text);
            return response_code::ACCESS_REFUSED;
        }
        if let Err(code) = self.stream_handle(stream) {
            return code;
        }
        let vhost = self.vhost.clone().expect("invariant: open");
        match vhost.delete_queue(stream, false, false, self.id).await {
            Ok(_) => response_code::OK,
            Err(error) if error.kind == ErrorKind::NotFound => response_code::STREAM_DOES_NOT_EXIST,
            Err(error) => {
                tracing::warn!(
                    connection = self.id,
                    "cannot delete stream '{stream}': {}",
                    error.text
                );
                response_code::INTERNAL_ERROR
            }
        }
    }

    /// Metadata: this node leads every stream of the vhost and has no replicas; it is listed
    /// as a broker only when some requested stream exists, as RabbitMQ does.
    fn metadata(&mut self, correlation_id: u32, streams: &[String]) {
        let metadata: Vec<StreamMetadata> = streams
            .iter()
            .map(|stream| {
                let found = self.stream_handle(stream);
                StreamMetadata {
                    stream: stream.clone(),
                    code: found
                        .as_ref()
                        .map_or_else(|code| *code, |_| response_code::OK),
                    leader: if found.is_ok() { THIS_BROKER } else { u16::MAX },
                    replicas: Vec::new(),
                }
            })
            .collect();
        let brokers = if metadata.iter().any(|m| m.code == response_code::OK) {
            let (host, port) = self.advertised();
            vec![Broker {
                reference: THIS_BROKER,
                host,
                port: u32::from(port),
            }]
        } else {
            Vec::new()
        };
        let response = AdminCommand::MetadataResponse {
            correlation_id,
            brokers,
            streams: metadata,
        };
        self.send(&Command::Admin(response));
    }

    /// StreamStats: first, last and committed chunk ids (-1 for an empty stream).
    fn stream_stats(&self, stream: &str) -> (u16, Vec<(String, i64)>) {
        if self.check(Perm::Read, stream).is_err() {
            return (response_code::ACCESS_REFUSED, Vec::new());
        }
        let handle = match self.stream_handle(stream) {
            Ok(handle) => handle,
            Err(code) => return (code, Vec::new()),
        };
        let view = handle.view();
        let as_stat = |offset: Option<u64>| offset.map_or(-1, |o| i64::try_from(o).unwrap_or(-1));
        let last = view.last_chunk_offset();
        let first = last.map(|_| view.first_offset());
        let stats = vec![
            ("first_chunk_id".to_owned(), as_stat(first)),
            ("last_chunk_id".to_owned(), as_stat(last)),
            ("committed_chunk_id".to_owned(), as_stat(last)),
        ];
        (response_code::OK, stats)
    }

    /// StoreOffset has no response: a refusal is only logged, as RabbitMQ does.
    async fn store_offset(&mut self, command: SubscribeCommand) -> Result<(), Fault> {
        let SubscribeCommand::StoreOffset {
            reference,
            stream,
            offset,
        } = command
        else {
            return Ok(());
        };
        if let Err(error) = self.check(Perm::Read, &stream) {
            tracing::info!(connection = self.id, "store offset refused: {}", error.text);
            return Ok(());
        }
        let Ok(handle) = self.stream_handle(&stream) else {
            tracing::info!(connection = self.id, "store offset: no stream '{stream}'");
            return Ok(());
        };
        if let Err(error) = handle.store_offset(&reference, offset).await {
            tracing::warn!(connection = self.id, "store offset failed: {}", error.text);
        }
        Ok(())
    }

    async fn query_offset(&mut self, command: SubscribeCommand) {
        let SubscribeCommand::QueryOffsetRequest {
            correlation_id,
            reference,
            stream,
        } = command
        else {
            return;
        };
        let (code, offset) = if self.check(Perm::Read, &stream).is_err() {
            (response_code::ACCESS_REFUSED, 0)
        } else {
            match self.stream_handle(&stream) {
                Err(code) => (code, 0),
                Ok(handle) => match handle.query_offset(&reference).await {
                    Ok(Some(offset)) => (response_code::OK, offset),
                    Ok(None) => (response_code::NO_OFFSET, 0),
                    Err(_) => (response_code::STREAM_NOT_AVAILABLE, 0),
                },
            }
        };
        let response = SubscribeCommand::QueryOffsetResponse {
            correlation_id,
            code,
            offset,
        };
        self.send(&Command::Subscribe(response));
    }

    /// ResolveOffsetSpec and the subscription commands that are not Subscribe, Credit or
    /// Unsubscribe.
    pub(super) fn on_offset_command(&mut self, command: SubscribeCommand) {
        let SubscribeCommand::ResolveOffsetSpecRequest {
            correlation_id,
            stream,
            offset,
            ..
        } = command
        else {
            tracing::debug!(
                connection = self.id,
                "ignored {:?} from the client",
                command.key()
            );
            return;
        };
        let (code, resolved) = if self.check(Perm::Read, &stream).is_err() {
            (response_code::ACCESS_REFUSED, 0)
        } else {
            match self.stream_handle(&stream) {
                Err(code) => (code, 0),
                Ok(handle) if handle.view().last_chunk_offset().is_none() => {
                    (response_code::NO_OFFSET, 0)
                }
                Ok(handle) => (response_code::OK, handle.view().resolve(read_start(offset))),
            }
        };
        let response = SubscribeCommand::ResolveOffsetSpecResponse {
            correlation_id,
            code,
            offset: OffsetSpec::Offset(resolved),
        };
        self.send(&Command::Subscribe(response));
    }

    /// A request the codec does not know. The super-stream commands get their response with
    /// a refusal (Warren has no super streams yet: none exists, none can be created); any
    /// other key closes the connection with unknown frame, as RabbitMQ does.
    pub(super) fn on_unsupported(&mut self, command_key: u16, body: &Bytes) -> Result<(), Fault> {
        let (code, array) = match command_key {
            key::ROUTE | key::PARTITIONS => (response_code::STREAM_DOES_NOT_EXIST, true),
            key::DELETE_SUPER_STREAM => (response_code::STREAM_DOES_NOT_EXIST, false),
            key::CREATE_SUPER_STREAM => (response_code::PRECONDITION_FAILED, false),
            _ => {
                tracing::warn!(
                    connection = self.id, peer = %self.peer,
                    "unknown stream command 0x{command_key:04x}, closing"
                );
                return Err(Fault::close(response_code::UNKNOWN_FRAME, "unknown frame"));
            }
        };
        let Some(correlation_id) = body.get(..4).map(|mut id| id.get_u32()) else {
            return Err(Fault::close(
                response_code::UNKNOWN_FRAME,
                "truncated request",
            ));
        };
        tracing::warn!(
            connection = self.id,
            "super-stream command 0x{command_key:04x} refused: Warren does not implement super \
             streams yet"
        );
        // Correlation id, code, and for Route and Partitions an empty list of streams.
        let size: u32 = 4 + 4 + 2 + if array { 4 } else { 0 };
        let out = self.out.encode();
        out.put_u32(size);
        out.put_u16(command_key | RESPONSE_BIT);
        out.put_u16(1);
        out.put_u32(correlation_id);
        out.put_u16(code);
        if array {
            out.put_i32(0);
        }
        Ok(())
    }
}

/// The protocol's Create arguments as RabbitMQ maps them to queue arguments; any other
/// argument is ignored, as RabbitMQ does.
fn queue_arguments(arguments: &[(String, String)]) -> Result<Table, String> {
    let mut table = Table::new();
    table.insert("x-queue-type".into(), Value::Str("stream".into()));
    for (name, value) in arguments {
        let integer = || {
            value
                .parse::<i64>()
                .map(Value::Int)
                .map_err(|_| format!("argument '{name}' = '{value}' is not an integer"))
        };
        let (queue_argument, value) = match name.as_str() {
            "max-length-bytes" => ("x-max-length-bytes", integer()?),
            "max-age" => ("x-max-age", Value::Str(value.clone())),
            "stream-max-segment-size-bytes" => ("x-stream-max-segment-size-bytes", integer()?),
            "initial-cluster-size" => ("x-initial-cluster-size", integer()?),
            "queue-leader-locator" => ("x-queue-leader-locator", Value::Str(value.clone())),
            "stream-filter-size-bytes" => ("x-stream-filter-size-bytes", integer()?),
            _ => continue,
        };
        table.insert(queue_argument.into(), value);
    }
    Ok(table)
}
