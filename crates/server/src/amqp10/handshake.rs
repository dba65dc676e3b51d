//! Connection negotiation: the SASL layer (PLAIN, EXTERNAL, ANONYMOUS; see the module doc of
//! `amqp10`), then the AMQP header and open, which picks the vhost.

use std::time::Duration;

use warren_core::identity::Identity;
use warren_proto::amqp10::condition;
use warren_proto::amqp10::frame::{AMQP_HEADER, MIN_MAX_FRAME_SIZE, SASL_HEADER};
use warren_proto::amqp10::{FrameBody, Open, Performative, SaslFrame, Value};

use super::connection::{Connection, Fault};

/// The container-id we open with.
const CONTAINER_ID: &str = "warren";

impl Connection {
    async fn read_header(&mut self) -> Result<[u8; 8], Fault> {
        while self.rbuf.bytes().len() < 8 {
            self.read_more().await?;
        }
        let header = self.rbuf.bytes().split_to(8);
        let mut out = [0u8; 8];
        out.copy_from_slice(&header);
        Ok(out)
    }

    pub(super) async fn handshake(&mut self) -> Result<(), Fault> {
        let header = self.read_header().await?;
        if header != SASL_HEADER {
            // We require SASL: answer with the header we want, as the spec says, and close.
            self.out.raw(&SASL_HEADER);
            let _ = self.flush().await;
            return Err(Fault::Gone(
                "client did not start with the SASL layer".into(),
            ));
        }
        self.out.raw(&SASL_HEADER);
        self.sasl().await?;
        let header = self.read_header().await?;
        if header != AMQP_HEADER {
            self.out.raw(&AMQP_HEADER);
            let _ = self.flush().await;
            return Err(Fault::Gone("protocol header mismatch after SASL".into()));
        }
        // Clients wait for our header before they send open.
        self.out.raw(&AMQP_HEADER);
        self.flush().await?;
        self.open().await
    }

    async fn sasl(&mut self) -> Result<(), Fault> {
        let loopback = self.peer.ip().is_loopback();
        let config = &self.shared.config;
        let offered = crate::sasl::offered(config, &MECHANISMS, self.tls.is_some(), loopback);
        let mechanisms = offered.iter().map(|m| (*m).to_owned()).collect();
        self.out.sasl(&SaslFrame::Mechanisms(mechanisms));
        self.flush().await?;
        let frame = self.read_frame().await?;
        let FrameBody::Sasl(SaslFrame::Init {
            mechanism,
            initial_response,
            ..
        }) = frame.body
        else {
            return Err(Fault::Gone("expected sasl-init".into()));
        };
        let access = self.shared.broker.access();
        let config = &self.shared.config;
        let outcome = match offered.iter().find(|m| **m == mechanism.as_str()) {
            Some(&"PLAIN") => match initial_response
                .as_deref()
                .and_then(crate::sasl::parse_plain)
            {
                Some((user, password)) => access
                    .authenticate("PLAIN", &user, &password, loopback)
                    .map(|_| user),
                None => Err("malformed PLAIN response".into()),
            },
            Some(&"EXTERNAL") => crate::sasl::certificate_name(config, self.tls.as_deref())
                .and_then(|user| access.authenticate_external(&user, loopback).map(|_| user)),
            Some(_) => Ok(config.default_user.clone()),
            None => Err(format!(
                "authentication mechanism '{mechanism}' is not offered to this client"
            )),
        };
        match outcome {
            Ok(user) => {
                self.user = user;
                self.out.sasl(&SaslFrame::Outcome {
                    code: condition::SASL_OK,
                    additional_data: None,
                });
                self.flush().await
            }
            Err(text) => {
                tracing::warn!(peer = %self.peer, "AMQP 1.0 authentication failed: {text}");
                self.out.sasl(&SaslFrame::Outcome {
                    code: condition::SASL_AUTH,
                    additional_data: None,
                });
                let _ = self.flush().await;
                Err(Fault::Gone("authentication failed".into()))
            }
        }
    }

    async fn open(&mut self) -> Result<(), Fault> {
        let frame = self.read_frame().await?;
        let FrameBody::Amqp {
            performative: Performative::Open(open),
            ..
        } = frame.body
        else {
            return Err(Fault::close(condition::ILLEGAL_STATE, "expected open"));
        };
        let reply = Open {
            container_id: CONTAINER_ID.into(),
            max_frame_size: Some(self.max_frame_size),
            channel_max: Some(self.channel_max),
            idle_time_out: (!self.idle_timeout.is_zero())
                .then(|| u32::try_from(self.idle_timeout.as_millis()).unwrap_or(u32::MAX)),
            offered_capabilities: vec!["ANONYMOUS-RELAY".into()],
            properties: Some(server_properties(self.shared.broker.identity())),
            ..Open::default()
        };
        self.out.frame(0, &Performative::Open(Box::new(reply)));
        self.peer_max_frame_size = open.max_frame_size.unwrap_or(u32::MAX);
        if self.peer_max_frame_size < MIN_MAX_FRAME_SIZE {
            return Err(Fault::close(
                condition::FRAME_SIZE_TOO_SMALL,
                format!(
                    "max-frame-size {} is below the minimum of {MIN_MAX_FRAME_SIZE}",
                    self.peer_max_frame_size
                ),
            ));
        }
        self.channel_max = self.channel_max.min(open.channel_max.unwrap_or(u16::MAX));
        self.peer_idle_timeout = Duration::from_millis(u64::from(open.idle_time_out.unwrap_or(0)));
        let name = match open
            .hostname
            .as_deref()
            .and_then(|h| h.strip_prefix("vhost:"))
        {
            Some(name) => name.to_owned(),
            None => self.shared.config.default_vhost.clone(),
        };
        let (connection, grant) =
            self.shared
                .broker
                .enter_vhost(&self.user, &name)
                .map_err(|error| {
                    tracing::warn!(
                        peer = %self.peer, user = %self.user, vhost = %name,
                        "AMQP 1.0 open refused: {}", error.text
                    );
                    let condition = if self.shared.broker.vhost(&name).is_none() {
                        condition::NOT_FOUND
                    } else {
                        condition::UNAUTHORIZED_ACCESS
                    };
                    Fault::close(condition, error.text)
                })?;
        self.vhost = Some(connection.vhost().clone());
        self.vhost_connection = Some(connection);
        self.grant = Some(grant);
        self.flush().await?;
        tracing::debug!(
            connection = self.id, peer = %self.peer, user = %self.user, vhost = %name,
            container = %open.container_id, "AMQP 1.0 connection open"
        );
        Ok(())
    }
}

/// The SASL mechanisms AMQP 1.0 implements; ANONYMOUS logs a loopback client in as
/// `default_user`, as RabbitMQ's `anonymous_login_user`.
const MECHANISMS: [&str; 3] = ["PLAIN", "EXTERNAL", "ANONYMOUS"];

/// The AMQP 1.0 open's properties: the broker's identity (see `warren_core::identity`).
/// RabbitMQ's AMQP 1.0 client libraries (Java, .NET, Python, Go) refuse a server whose
/// `product` is not `RabbitMQ` or whose `version` is below 4.0.0.
fn server_properties(identity: &Identity) -> Vec<(Value, Value)> {
    identity
        .properties()
        .into_iter()
        .map(|(key, value)| (Value::symbol(&key), Value::string(&value)))
        .collect()
}
