//! Connection negotiation, as RabbitMQ 4.x does it: PeerProperties (the broker's identity),
//! SaslHandshake and SaslAuthenticate (PLAIN; ANONYMOUS for loopback clients, logged in as
//! `default_user` as for AMQP 1.0), the server's Tune and the client's answer, then Open with
//! the vhost, answered with the advertised host and port clients compare with Metadata.
//!
//! A refused login or vhost is answered with its code and the connection then closes without
//! a Close (RabbitMQ's `silent_close`); a heartbeat before the Open is ignored.

use warren_proto::stream::{
    decode_command, decode_frame, response_code, Command, ConnectionCommand,
};

use super::connection::Connection;
use super::fault::Fault;

/// The mechanisms the stream protocol implements, in the order `auth_mechanisms` may list
/// them.
const MECHANISMS: [&str; 2] = ["PLAIN", "ANONYMOUS"];

impl Connection {
    pub(super) async fn handshake(&mut self) -> Result<(), Fault> {
        loop {
            match self.read_connection_command().await? {
                ConnectionCommand::PeerPropertiesRequest {
                    correlation_id,
                    properties,
                } => {
                    self.client_properties = properties;
                    let properties = self.shared.broker.identity().properties();
                    let response = ConnectionCommand::PeerPropertiesResponse {
                        correlation_id,
                        code: response_code::OK,
                        properties,
                    };
                    self.send(&Command::Connection(response));
                }
                ConnectionCommand::SaslHandshakeRequest { correlation_id } => {
                    let mechanisms = self.mechanisms().iter().map(|m| (*m).to_owned()).collect();
                    let response = ConnectionCommand::SaslHandshakeResponse {
                        correlation_id,
                        code: response_code::OK,
                        mechanisms,
                    };
                    self.send(&Command::Connection(response));
                }
                ConnectionCommand::SaslAuthenticateRequest {
                    correlation_id,
                    mechanism,
                    data,
                } => self.authenticate(correlation_id, &mechanism, data.as_deref())?,
                // Some clients (the Rust one) send their Tune without the response bit;
                // RabbitMQ takes either.
                ConnectionCommand::Tune {
                    frame_max,
                    heartbeat,
                    ..
                } => self.negotiate(frame_max, heartbeat),
                ConnectionCommand::OpenRequest {
                    correlation_id,
                    virtual_host,
                } => return self.open(correlation_id, &virtual_host).await,
                ConnectionCommand::Heartbeat => {}
                other => {
                    return Err(Fault::Gone(format!(
                        "unexpected {:?} before the connection is open",
                        other.key()
                    )))
                }
            }
            self.flush().await?;
        }
    }

    /// Reads until one whole connection command is buffered. Any other command before the
    /// Open ends the connection, as RabbitMQ's pre-auth handler does.
    async fn read_connection_command(&mut self) -> Result<ConnectionCommand, Fault> {
        loop {
            match decode_frame(self.rbuf.bytes(), self.shared.config.stream_frame_max) {
                Ok(Some(frame)) => {
                    return match decode_command(&frame) {
                        Ok(Command::Connection(command)) => Ok(command),
                        Ok(_) => Err(Fault::Gone(format!(
                            "command 0x{:04x} before the connection is open",
                            frame.key
                        ))),
                        Err(error) => {
                            tracing::warn!(peer = %self.peer, %error, "malformed stream frame");
                            Err(Fault::Gone(error.to_string()))
                        }
                    };
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(peer = %self.peer, %error, "malformed stream frame");
                    return Err(Fault::Gone(error.to_string()));
                }
            }
            self.rbuf.read_more().await?;
        }
    }

    fn mechanisms(&self) -> Vec<&'static str> {
        let loopback = self.peer.ip().is_loopback();
        crate::sasl::offered(&self.shared.config, &MECHANISMS, false, loopback)
    }

    /// SaslAuthenticate: on success the answer and the server's Tune; a refusal is answered
    /// with its code and ends the connection once written.
    fn authenticate(
        &mut self,
        correlation_id: u32,
        mechanism: &str,
        data: Option<&[u8]>,
    ) -> Result<(), Fault> {
        let loopback = self.peer.ip().is_loopback();
        let access = self.shared.broker.access();
        let offered = self.mechanisms();
        let outcome = match offered.iter().find(|m| **m == mechanism) {
            Some(&"PLAIN") => match data.and_then(crate::sasl::parse_plain) {
                Some((user, password)) => access
                    .authenticate("PLAIN", &user, &password, loopback)
                    .map(|user| user.name.to_string())
                    .map_err(|text| (response_code::AUTHENTICATION_FAILURE, text)),
                None => Err((response_code::SASL_ERROR, "malformed PLAIN response".into())),
            },
            Some(_) => Ok(self.shared.config.default_user.clone()),
            None => Err((
                response_code::SASL_MECHANISM_NOT_SUPPORTED,
                format!("authentication mechanism '{mechanism}' is not offered to this client"),
            )),
        };
        let (code, text) = match outcome {
            Ok(user) => {
                self.user = user;
                self.auth_mechanism = if mechanism == "PLAIN" {
                    "PLAIN"
                } else {
                    "ANONYMOUS"
                };
                self.authenticated(correlation_id);
                return Ok(());
            }
            Err((_, text)) if text.contains("loopback") => {
                (response_code::SASL_AUTHENTICATION_FAILURE_LOOPBACK, text)
            }
            Err(refusal) => refusal,
        };
        tracing::warn!(peer = %self.peer, "stream {mechanism} login refused: {text}");
        let response = ConnectionCommand::SaslAuthenticateResponse {
            correlation_id,
            code,
            data: None,
        };
        self.send(&Command::Connection(response));
        Err(Fault::Gone("authentication failed".into()))
    }

    /// The login succeeded: answer, then propose frame_max and heartbeat.
    fn authenticated(&mut self, correlation_id: u32) {
        let response = ConnectionCommand::SaslAuthenticateResponse {
            correlation_id,
            code: response_code::OK,
            data: None,
        };
        self.send(&Command::Connection(response));
        let tune = ConnectionCommand::Tune {
            response: false,
            frame_max: self.shared.config.stream_frame_max,
            heartbeat: self.shared.config.stream_heartbeat,
        };
        self.send(&Command::Connection(tune));
    }

    /// The client's Tune: 0 on either side means no limit (RabbitMQ's `negotiate_frame_max`);
    /// the heartbeat is the client's.
    fn negotiate(&mut self, frame_max: u32, heartbeat: u32) {
        let server = self.shared.config.stream_frame_max;
        self.frame_max = match (frame_max, server) {
            (0, server) => server,
            (client, 0) => client,
            (client, server) => client.min(server),
        };
        self.heartbeat = heartbeat;
    }

    /// Open: the vhost must exist and the user have permissions in it.
    async fn open(&mut self, correlation_id: u32, virtual_host: &str) -> Result<(), Fault> {
        let entered = self.shared.broker.enter_vhost(&self.user, virtual_host);
        let (connection, grant) = match entered {
            Ok(entered) => entered,
            Err(error) => {
                tracing::warn!(
                    peer = %self.peer, user = %self.user, vhost = virtual_host,
                    "stream open refused: {}", error.text
                );
                let response = ConnectionCommand::OpenResponse {
                    correlation_id,
                    code: response_code::VIRTUAL_HOST_ACCESS_FAILURE,
                    properties: Vec::new(),
                };
                self.send(&Command::Connection(response));
                let _ = self.flush().await;
                return Err(Fault::Gone("vhost access refused".into()));
            }
        };
        self.vhost = Some(connection.vhost().clone());
        self.vhost_connection = Some(connection);
        self.grant = Some(grant);
        let (host, port) = self.advertised();
        let response = ConnectionCommand::OpenResponse {
            correlation_id,
            code: response_code::OK,
            properties: vec![
                ("advertised_host".into(), host),
                ("advertised_port".into(), port.to_string()),
            ],
        };
        self.send(&Command::Connection(response));
        self.flush().await?;
        tracing::debug!(
            connection = self.id, peer = %self.peer, user = %self.user, vhost = virtual_host,
            "stream connection open"
        );
        Ok(())
    }

    /// The host and port clients are told to use (`stream.advertised_*`, else the address
    /// this client connected to).
    pub(super) fn advertised(&self) -> (String, u16) {
        let config = &self.shared.config;
        let host = config
            .stream_advertised_host
            .clone()
            .unwrap_or_else(|| self.local.ip().to_canonical().to_string());
        let port = config.stream_advertised_port.unwrap_or(self.local.port());
        (host, port)
    }
}
