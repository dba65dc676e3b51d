//! Connection negotiation: protocol header, start/start-ok (PLAIN, AMQPLAIN), tune/tune-ok,
//! open/open-ok.

use bytes::Bytes;
use warren_proto::amqp091::{
    self as wire, reply_code, ConnectionOpenOk, ConnectionStart, ConnectionStartOk, ConnectionTune,
    ConnectionTuneOk, FieldTable, FieldValue, Frame, Method, ProtocolHeader, FRAME_MIN_SIZE,
    PROTOCOL_HEADER,
};

use warren_core::identity::Identity;

use super::connection::Connection;
use super::fault::{Cause, Fault};

/// The mechanisms AMQP 0.9.1 implements, in the order `auth_mechanisms` may list them.
const MECHANISMS: [&str; 3] = ["PLAIN", "AMQPLAIN", "EXTERNAL"];

impl Connection {
    pub(super) async fn handshake(&mut self) -> Result<(), Fault> {
        self.protocol_header().await?;
        let mechanisms = self.mechanisms().join(" ");
        self.out.method(
            0,
            &Method::ConnectionStart(server_start(self.shared.broker.identity(), mechanisms)),
        );
        self.flush().await?;
        let start_ok = match self.read_frame().await? {
            Frame::Method {
                channel: 0,
                method: Method::ConnectionStartOk(start_ok),
            } => start_ok,
            other => return Err(unexpected("connection.start-ok", &other)),
        };
        self.authenticate(&start_ok).await?;
        let tune = ConnectionTune {
            channel_max: self.tuning.channel_max,
            frame_max: self.tuning.frame_max,
            heartbeat: self.tuning.heartbeat,
        };
        self.out.method(0, &Method::ConnectionTune(tune));
        self.flush().await?;
        let tune_ok = match self.read_frame().await? {
            Frame::Method {
                channel: 0,
                method: Method::ConnectionTuneOk(tune_ok),
            } => tune_ok,
            other => return Err(unexpected("connection.tune-ok", &other)),
        };
        self.negotiate(&tune_ok)?;
        self.open().await
    }

    async fn protocol_header(&mut self) -> Result<(), Fault> {
        loop {
            // The listener has read the header's first bytes already.
            match wire::check_protocol_header(self.rbuf.bytes()) {
                ProtocolHeader::Incomplete => {
                    self.rbuf.read_more().await?;
                }
                ProtocolHeader::Valid => {
                    self.consume_bytes(PROTOCOL_HEADER.len());
                    return Ok(());
                }
                ProtocolHeader::Mismatch => {
                    // As the spec asks: answer with the header we speak, then close.
                    self.out.raw(&PROTOCOL_HEADER);
                    let _ = self.flush().await;
                    return Err(Fault::Gone("protocol header mismatch".into()));
                }
            }
        }
    }

    /// The client's capabilities, and its properties kept for the management API.
    fn note_client_properties(&mut self, start_ok: &ConnectionStartOk) {
        if let Some(FieldValue::Table(caps)) = start_ok.client_properties.get("capabilities") {
            let flag = |name: &str| caps.get(name).and_then(|v| v.as_bool()).unwrap_or(false);
            self.caps.consumer_cancel_notify = flag("consumer_cancel_notify");
            self.caps.authentication_failure_close = flag("authentication_failure_close");
            self.caps.connection_blocked = flag("connection.blocked");
        }
        let properties = &start_ok.client_properties;
        let mut encoded = bytes::BytesMut::with_capacity(properties.encoded_len());
        properties.encode(&mut encoded);
        // Without the length prefix; a fresh allocation, not a slice of the read buffer.
        self.client_properties = encoded.freeze().slice(4..);
    }

    async fn authenticate(&mut self, start_ok: &ConnectionStartOk) -> Result<(), Fault> {
        self.note_client_properties(start_ok);
        let mechanism = start_ok.mechanism.as_str();
        let Some(mechanism) = self.mechanisms().into_iter().find(|m| *m == mechanism) else {
            // RabbitMQ's `auth_mechanism_to_module`.
            let known = crate::config::AUTH_MECHANISMS.contains(&mechanism);
            let adjective = if known { "invalid" } else { "unknown" };
            return Err(Fault::connection(
                reply_code::COMMAND_INVALID,
                format!("{adjective} authentication mechanism '{mechanism}'"),
                Cause::default(),
            ));
        };
        let loopback = self.peer.ip().is_loopback();
        let access = self.shared.broker.access();
        let outcome = match mechanism {
            "EXTERNAL" => crate::sasl::certificate_name(&self.shared.config, self.tls.as_deref())
                .and_then(|user| access.authenticate_external(&user, loopback)),
            _ => {
                let credentials = match mechanism {
                    "PLAIN" => crate::sasl::parse_plain(&start_ok.response),
                    _ => parse_amqplain(&start_ok.response),
                };
                let Some((user, password)) = credentials else {
                    return Err(Fault::connection(
                        reply_code::ACCESS_REFUSED,
                        format!("malformed {mechanism} response"),
                        Cause::default(),
                    ));
                };
                access.authenticate(mechanism, &user, &password, loopback)
            }
        };
        let user = outcome.map_err(|text| self.refused(mechanism, text))?;
        self.auth_mechanism = mechanism;
        self.impersonator = warren_core::access::is_impersonator(&user.tags);
        let user = user.name.to_string();
        self.user = user;
        Ok(())
    }

    /// A refused login: logged with its reason; the client hears of it only with the
    /// `authentication_failure_close` capability (others expect the socket to just close).
    fn refused(&self, mechanism: &str, text: String) -> Fault {
        tracing::warn!(peer = %self.peer, "{mechanism} login refused: {text}");
        if !self.caps.authentication_failure_close {
            return Fault::Gone("authentication failed".into());
        }
        // As RabbitMQ's `auth_fail`: the reason is in the log, the client gets the safe text
        // (a loopback refusal names its rule, as RabbitMQ's does).
        let text = match text.strip_prefix("ACCESS_REFUSED - ") {
            Some(text) => text.to_owned(),
            None if text.contains("loopback") => text,
            None => format!(
                "Login was refused using authentication mechanism {mechanism}. For details see \
                 the broker logfile."
            ),
        };
        Fault::connection(reply_code::ACCESS_REFUSED, text, Cause::default())
    }

    /// The SASL mechanisms offered to this client.
    fn mechanisms(&self) -> Vec<&'static str> {
        let loopback = self.peer.ip().is_loopback();
        crate::sasl::offered(
            &self.shared.config,
            &MECHANISMS,
            self.tls.is_some(),
            loopback,
        )
    }

    /// Applies tune-ok: the client may lower our proposals, never raise them.
    fn negotiate(&mut self, tune_ok: &ConnectionTuneOk) -> Result<(), Fault> {
        let cause = Cause {
            class_id: 10,
            method_id: 31,
        };
        let server = self.tuning;
        // RabbitMQ's `validate_negotiated_integer_value`: 0 asks for no limit, which a server
        // with a limit refuses.
        negotiated(
            "frame_max",
            FRAME_MIN_SIZE,
            server.frame_max,
            tune_ok.frame_max,
        )
        .map_err(|text| Fault::connection(reply_code::NOT_ALLOWED, text, cause))?;
        negotiated(
            "channel_max",
            0,
            u32::from(server.channel_max),
            u32::from(tune_ok.channel_max),
        )
        .map_err(|text| Fault::connection(reply_code::NOT_ALLOWED, text, cause))?;
        let (frame_max, channel_max) = (tune_ok.frame_max, tune_ok.channel_max);
        self.tuning.frame_max = frame_max;
        self.tuning.channel_max = channel_max;
        self.tuning.heartbeat = tune_ok.heartbeat;
        Ok(())
    }

    async fn open(&mut self) -> Result<(), Fault> {
        let open = match self.read_frame().await? {
            Frame::Method {
                channel: 0,
                method: Method::ConnectionOpen(open),
            } => open,
            other => return Err(unexpected("connection.open", &other)),
        };
        let name = open.virtual_host.as_str();
        let (connection, grant) =
            self.shared
                .broker
                .enter_vhost(&self.user, name)
                .map_err(|error| {
                    tracing::warn!(
                        peer = %self.peer, user = %self.user, vhost = name,
                        "connection.open refused: {}", error.text
                    );
                    Fault::connection(
                        reply_code::NOT_ALLOWED,
                        error.text,
                        Cause {
                            class_id: 10,
                            method_id: 40,
                        },
                    )
                })?;
        self.vhost = Some(connection.vhost().clone());
        self.vhost_connection = Some(connection);
        self.grant = Some(grant);
        self.out
            .method(0, &Method::ConnectionOpenOk(ConnectionOpenOk::default()));
        self.flush().await?;
        tracing::debug!(
            connection = self.id, peer = %self.peer, user = %self.user, vhost = name,
            "connection open"
        );
        Ok(())
    }
}

fn unexpected(expected: &str, got: &Frame) -> Fault {
    let got = match got {
        Frame::Method { method, .. } => method.name().to_string(),
        Frame::Header { .. } => "a content header".into(),
        Frame::Body { .. } => "a content body".into(),
        Frame::Heartbeat { .. } => "a heartbeat".into(),
    };
    Fault::connection(
        reply_code::COMMAND_INVALID,
        format!("expected '{expected}', got {got}"),
        Cause::default(),
    )
}

/// Checks a value the client's tune-ok settled on against the server's limit, in RabbitMQ's
/// words: `negotiated frame_max = 200000 is higher than the maximum allowed value (131072)`.
fn negotiated(field: &str, min: u32, server: u32, client: u32) -> Result<(), String> {
    let detail = if field == "channel_max" && client == 0 {
        " (no limit)"
    } else {
        ""
    };
    if client != 0 && client < min {
        return Err(format!(
            "negotiated {field} = {client}{detail} is lower than the minimum allowed value \
             ({min})"
        ));
    }
    if server != 0 && (client == 0 || client > server) {
        return Err(format!(
            "negotiated {field} = {client}{detail} is higher than the maximum allowed value \
             ({server})"
        ));
    }
    Ok(())
}

/// AMQPLAIN: a field table (without its length prefix) with LOGIN and PASSWORD.
fn parse_amqplain(response: &Bytes) -> Option<(String, String)> {
    let table = wire::decode_table_body(response.clone()).ok()?;
    let user = table.get("LOGIN")?.as_str()?.to_owned();
    let password = table.get("PASSWORD")?.as_str()?.to_owned();
    Some((user, password))
}

/// connection.start: RabbitMQ's capabilities and the broker's identity (see
/// `warren_core::identity`).
fn server_start(identity: &Identity, mechanisms: String) -> ConnectionStart {
    let mut caps = FieldTable::default();
    for capability in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "consumer_priorities",
        "authentication_failure_close",
        "per_consumer_qos",
        "direct_reply_to",
    ] {
        caps.insert(capability, FieldValue::Bool(true));
    }
    let mut props = FieldTable::default();
    props.insert("capabilities", FieldValue::Table(caps));
    for (key, value) in identity.properties() {
        if key.len() <= usize::from(u8::MAX) {
            props.insert(key.as_str(), FieldValue::LongStr(Bytes::from(value)));
        }
    }
    ConnectionStart {
        version_major: 0,
        version_minor: 9,
        server_properties: props,
        mechanisms: Bytes::from(mechanisms),
        locales: Bytes::from_static(b"en_US"),
    }
}
