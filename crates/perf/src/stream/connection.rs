//! A minimal stream-protocol client for load: PeerProperties, SASL PLAIN, Tune, Open, then
//! the requests a run needs (Create, Delete, DeclarePublisher, Subscribe, Close), each
//! encoded and decoded with warren-proto's `stream` codec.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_proto::stream::{
    decode_command, decode_frame, key, response_code, AdminCommand, Command, ConnectionCommand,
    Frame, OffsetSpec, PublishCommand, SimpleResponse, SubscribeCommand,
};

use crate::error::PerfError;
use crate::uri::Endpoint;

/// How long one handshake step or request may take.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest frame this client asks for in Tune.
pub const FRAME_MAX: u32 = 1024 * 1024;
/// The largest frame this client reads: a Deliver carries a whole chunk, which the broker may
/// build from several publish frames, so it may exceed the tuned frame_max.
pub const READ_FRAME_MAX: u32 = 64 * 1024 * 1024;
/// Read buffer: many Deliver or PublishConfirm frames per read.
pub const READ_BUFFER_BYTES: usize = 1024 * 1024;

/// An open, tuned connection.
pub struct StreamConnection {
    pub socket: TcpStream,
    pub read: BytesMut,
    pub write: BytesMut,
    /// The frame_max both sides agreed on (0: none).
    pub frame_max: u32,
    /// Seconds; 0: no heartbeats.
    pub heartbeat_s: u32,
    /// "the stream connection to HOST:PORT", for error texts.
    pub what: String,
    next_correlation: u32,
}

/// What `create_stream` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Created {
    New,
    Existed,
    /// It exists with other arguments (the broker answered precondition failed).
    ExistedOtherwise,
}

/// The spec's name for a response code, for error texts.
pub fn code_name(code: u16) -> &'static str {
    use response_code as r;
    match code {
        r::OK => "ok",
        r::STREAM_DOES_NOT_EXIST => "stream does not exist",
        r::SUBSCRIPTION_ID_ALREADY_EXISTS => "subscription id already exists",
        r::SUBSCRIPTION_ID_DOES_NOT_EXIST => "subscription id does not exist",
        r::STREAM_ALREADY_EXISTS => "stream already exists",
        r::STREAM_NOT_AVAILABLE => "stream not available",
        r::SASL_MECHANISM_NOT_SUPPORTED => "sasl mechanism not supported",
        r::AUTHENTICATION_FAILURE => "authentication failure",
        r::SASL_ERROR => "sasl error",
        r::SASL_CHALLENGE => "sasl challenge",
        r::SASL_AUTHENTICATION_FAILURE_LOOPBACK => "sasl authentication failure loopback",
        r::VIRTUAL_HOST_ACCESS_FAILURE => "virtual host access failure",
        r::UNKNOWN_FRAME => "unknown frame",
        r::FRAME_TOO_LARGE => "frame too large",
        r::INTERNAL_ERROR => "internal error",
        r::ACCESS_REFUSED => "access refused",
        r::PRECONDITION_FAILED => "precondition failed",
        r::PUBLISHER_DOES_NOT_EXIST => "publisher does not exist",
        r::NO_OFFSET => "no offset",
        _ => "unknown response code",
    }
}

/// The correlation id and response code of a response this client waits for.
fn response_of(command: &Command) -> Option<(u32, u16)> {
    use ConnectionCommand as C;
    match command {
        Command::Response(SimpleResponse {
            correlation_id,
            code,
            ..
        })
        | Command::Connection(
            C::PeerPropertiesResponse {
                correlation_id,
                code,
                ..
            }
            | C::SaslHandshakeResponse {
                correlation_id,
                code,
                ..
            }
            | C::SaslAuthenticateResponse {
                correlation_id,
                code,
                ..
            }
            | C::OpenResponse {
                correlation_id,
                code,
                ..
            },
        ) => Some((*correlation_id, *code)),
        _ => None,
    }
}

impl StreamConnection {
    /// Connects, authenticates with PLAIN, tunes and opens the endpoint's vhost.
    pub async fn connect(endpoint: &Endpoint, name: &str) -> Result<StreamConnection, PerfError> {
        let what = format!("the stream connection to {}", endpoint.address());
        let socket = tokio::time::timeout(STEP_TIMEOUT, TcpStream::connect(endpoint.address()))
            .await
            .map_err(|_| PerfError::Connect(format!("{what}: connect timed out")))?
            .map_err(|e| PerfError::Connect(format!("{what}: {e}")))?;
        socket.set_nodelay(true).ok();
        let mut connection = StreamConnection {
            socket,
            read: BytesMut::with_capacity(READ_BUFFER_BYTES),
            write: BytesMut::with_capacity(64 * 1024),
            frame_max: FRAME_MAX,
            heartbeat_s: 0,
            what,
            next_correlation: 1,
        };
        tokio::time::timeout(STEP_TIMEOUT * 2, connection.handshake(endpoint, name))
            .await
            .map_err(|_| {
                PerfError::Connect(format!("{}: handshake timed out", connection.what))
            })??;
        Ok(connection)
    }

    async fn handshake(&mut self, endpoint: &Endpoint, name: &str) -> Result<(), PerfError> {
        let properties = vec![
            ("product".to_owned(), "warren perf".to_owned()),
            ("version".to_owned(), env!("CARGO_PKG_VERSION").to_owned()),
            ("connection_name".to_owned(), name.to_owned()),
        ];
        self.request("peer properties", |correlation_id| {
            Command::Connection(ConnectionCommand::PeerPropertiesRequest {
                correlation_id,
                properties,
            })
        })
        .await?;
        let mechanisms = match self
            .request("sasl handshake", |correlation_id| {
                Command::Connection(ConnectionCommand::SaslHandshakeRequest { correlation_id })
            })
            .await?
        {
            Command::Connection(ConnectionCommand::SaslHandshakeResponse {
                mechanisms, ..
            }) => mechanisms,
            _ => Vec::new(),
        };
        if !mechanisms.iter().any(|m| m == "PLAIN") {
            return Err(PerfError::Connect(format!(
                "{}: the broker offers SASL {mechanisms:?}, not PLAIN",
                self.what
            )));
        }
        let data = format!("\0{}\0{}", endpoint.user, endpoint.password);
        self.request("sasl authenticate", |correlation_id| {
            Command::Connection(ConnectionCommand::SaslAuthenticateRequest {
                correlation_id,
                mechanism: "PLAIN".to_owned(),
                data: Some(data.into_bytes().into()),
            })
        })
        .await?;
        self.tune().await?;
        let virtual_host = endpoint.vhost.clone();
        self.request("open", |correlation_id| {
            Command::Connection(ConnectionCommand::OpenRequest {
                correlation_id,
                virtual_host,
            })
        })
        .await?;
        Ok(())
    }

    /// Takes the server's Tune and answers with the smaller frame_max and its heartbeat.
    async fn tune(&mut self) -> Result<(), PerfError> {
        loop {
            let frame = self.next_frame().await?;
            if let Command::Connection(ConnectionCommand::Tune {
                response: false,
                frame_max,
                heartbeat,
            }) = self.decode(&frame)?
            {
                self.frame_max = if frame_max == 0 {
                    FRAME_MAX
                } else {
                    frame_max.min(FRAME_MAX)
                };
                self.heartbeat_s = heartbeat;
                let answer = ConnectionCommand::Tune {
                    response: true,
                    frame_max: self.frame_max,
                    heartbeat,
                };
                return self.send(&Command::Connection(answer)).await;
            }
        }
    }

    /// Creates a stream; a stream that exists already (with these arguments or others, as
    /// stream-perf-test allows) is not an error.
    pub async fn create_stream(
        &mut self,
        stream: &str,
        arguments: Vec<(String, String)>,
    ) -> Result<Created, PerfError> {
        let stream_name = stream.to_owned();
        let what = format!("create stream '{stream}'");
        let command = |correlation_id| {
            Command::Admin(AdminCommand::Create {
                correlation_id,
                stream: stream_name,
                arguments,
            })
        };
        match self.request_code(&what, command).await? {
            response_code::OK => Ok(Created::New),
            response_code::STREAM_ALREADY_EXISTS => Ok(Created::Existed),
            response_code::PRECONDITION_FAILED => Ok(Created::ExistedOtherwise),
            code => Err(self.refused(&what, code)),
        }
    }

    pub async fn delete_stream(&mut self, stream: &str) -> Result<(), PerfError> {
        let stream_name = stream.to_owned();
        self.request(&format!("delete stream '{stream}'"), |correlation_id| {
            Command::Admin(AdminCommand::Delete {
                correlation_id,
                stream: stream_name,
            })
        })
        .await
        .map(|_| ())
    }

    pub async fn declare_publisher(&mut self, id: u8, stream: &str) -> Result<(), PerfError> {
        let stream_name = stream.to_owned();
        let what = format!("declare publisher {id} on stream '{stream}'");
        self.request(&what, |correlation_id| {
            Command::Publish(PublishCommand::DeclarePublisher {
                correlation_id,
                publisher_id: id,
                // an empty reference is "none" to every RabbitMQ; 3.10 cannot read a null one
                reference: Some(String::new()),
                stream: stream_name,
            })
        })
        .await
        .map(|_| ())
    }

    pub async fn subscribe(
        &mut self,
        id: u8,
        stream: &str,
        offset: OffsetSpec,
        credit: u16,
    ) -> Result<(), PerfError> {
        let stream_name = stream.to_owned();
        let what = format!("subscribe {id} to stream '{stream}'");
        self.request(&what, |correlation_id| {
            Command::Subscribe(SubscribeCommand::Subscribe {
                correlation_id,
                subscription_id: id,
                stream: stream_name,
                offset,
                credit,
                properties: Vec::new(),
            })
        })
        .await
        .map(|_| ())
    }

    /// Sends Close and waits a moment for its answer; errors are ignored (the run is over).
    pub async fn close(&mut self) {
        let close = |correlation_id| {
            Command::Connection(ConnectionCommand::CloseRequest {
                correlation_id,
                code: response_code::OK,
                reason: Some("warren perf: run over".to_owned()),
            })
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), self.request("close", close)).await;
    }

    /// Sends a request and waits for its response; a response code other than OK is an error.
    async fn request(
        &mut self,
        what: &str,
        make: impl FnOnce(u32) -> Command,
    ) -> Result<Command, PerfError> {
        let (command, code) = self.request_raw(what, make).await?;
        if code != response_code::OK {
            return Err(self.refused(what, code));
        }
        Ok(command)
    }

    async fn request_code(
        &mut self,
        what: &str,
        make: impl FnOnce(u32) -> Command,
    ) -> Result<u16, PerfError> {
        Ok(self.request_raw(what, make).await?.1)
    }

    async fn request_raw(
        &mut self,
        what: &str,
        make: impl FnOnce(u32) -> Command,
    ) -> Result<(Command, u16), PerfError> {
        let correlation_id = self.next_correlation;
        self.next_correlation = self.next_correlation.wrapping_add(1);
        self.send(&make(correlation_id)).await?;
        let wait = async {
            loop {
                let frame = self.next_frame().await?;
                let command = self.decode(&frame)?;
                match response_of(&command) {
                    Some((id, code)) if id == correlation_id => return Ok((command, code)),
                    _ => self.on_other(&command).await?,
                }
            }
        };
        tokio::time::timeout(STEP_TIMEOUT, wait)
            .await
            .map_err(|_| PerfError::Broker(format!("{}: {what}: no answer", self.what)))?
    }

    /// A frame that is not the awaited response: heartbeats are answered, a Close is an error.
    async fn on_other(&mut self, command: &Command) -> Result<(), PerfError> {
        match command {
            Command::Connection(ConnectionCommand::Heartbeat) => {
                self.send(&Command::Connection(ConnectionCommand::Heartbeat))
                    .await
            }
            Command::Connection(ConnectionCommand::CloseRequest { code, reason, .. }) => {
                Err(PerfError::Broker(format!(
                    "{}: the broker closed it: {} ({code}) {}",
                    self.what,
                    code_name(*code),
                    reason.as_deref().unwrap_or("")
                )))
            }
            _ => Ok(()),
        }
    }

    fn refused(&self, what: &str, code: u16) -> PerfError {
        PerfError::Broker(format!(
            "{}: {what}: the broker answered {} (0x{code:02x})",
            self.what,
            code_name(code)
        ))
    }

    pub fn decode(&self, frame: &Frame) -> Result<Command, PerfError> {
        decode_command(frame).map_err(|e| PerfError::Protocol(format!("{}: {e}", self.what)))
    }

    async fn send(&mut self, command: &Command) -> Result<(), PerfError> {
        command
            .encode(&mut self.write)
            .map_err(|e| PerfError::Protocol(format!("{}: {e}", self.what)))?;
        self.flush().await
    }

    pub async fn flush(&mut self) -> Result<(), PerfError> {
        self.socket
            .write_all(&self.write)
            .await
            .map_err(|e| PerfError::io(&self.what, &e))?;
        self.write.clear();
        Ok(())
    }

    /// The next whole frame, reading as needed.
    pub async fn next_frame(&mut self) -> Result<Frame, PerfError> {
        loop {
            if let Some(frame) = self.buffered_frame()? {
                return Ok(frame);
            }
            read_more(&mut self.socket, &mut self.read, &self.what).await?;
        }
    }

    /// A frame already in the read buffer.
    pub fn buffered_frame(&mut self) -> Result<Option<Frame>, PerfError> {
        decode_frame(&mut self.read, READ_FRAME_MAX)
            .map_err(|e| PerfError::Protocol(format!("{}: {e}", self.what)))
    }
}

/// Reads what the socket has into `buffer`; the peer closing is an error.
pub async fn read_more<R: AsyncReadExt + Unpin>(
    socket: &mut R,
    buffer: &mut BytesMut,
    what: &str,
) -> Result<(), PerfError> {
    if buffer.capacity() - buffer.len() < READ_BUFFER_BYTES / 4 {
        buffer.reserve(READ_BUFFER_BYTES);
    }
    let read = socket
        .read_buf(buffer)
        .await
        .map_err(|e| PerfError::io(what, &e))?;
    if read == 0 {
        return Err(PerfError::Broker(format!(
            "{what}: the broker closed the socket"
        )));
    }
    Ok(())
}

/// Whether a frame is a heartbeat (answered by the run loops without decoding).
pub fn is_heartbeat(frame: &Frame) -> bool {
    frame.key == key::HEARTBEAT && !frame.response
}
