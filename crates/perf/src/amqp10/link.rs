//! A minimal AMQP 1.0 client for load: SASL PLAIN, one session, one link. Frames are built
//! with warren-proto's codec, except the transfer, whose bytes are pre-encoded once and
//! patched per message (delivery id, tag and the body's stamp).

use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Interval;
use warren_proto::amqp10::frame::{encode_empty_frame, encode_frame, encode_sasl_frame};
use warren_proto::amqp10::performative::{
    AmqpError, Attach, Begin, Close, Disposition, Flow, Open, Performative, Terminus,
    ROLE_RECEIVER, ROLE_SENDER, SND_SETTLED, SND_UNSETTLED,
};
use warren_proto::amqp10::types::Value;
use warren_proto::amqp10::{decode_frame, Frame, FrameBody, SaslFrame, AMQP_HEADER, SASL_HEADER};

use crate::error::PerfError;
use crate::uri::Endpoint;

/// How long one handshake step may take.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest frame this client accepts.
pub const MAX_FRAME: u32 = 1024 * 1024;
/// Our session windows: large, so that only link credit limits the flow.
pub const WINDOW: u32 = 1 << 30;

/// An open connection with one session (channel 0) and one attached link (handle 0).
pub struct Link {
    pub stream: TcpStream,
    pub read: BytesMut,
    pub write: BytesMut,
    /// The peer's max frame size.
    pub peer_max_frame: u32,
    /// The peer's idle time-out, ms (0: none); we write at least every half of it.
    pub peer_idle_ms: u32,
    /// The peer session's next-outgoing-id from its begin (our first incoming transfer id).
    pub peer_next_outgoing_id: u32,
    /// The peer's session incoming window, as last stated.
    pub peer_incoming_window: u32,
    /// The peer's product and version from its open properties ("RabbitMQ", "3.10.8").
    pub peer_product: String,
    pub peer_version: String,
    /// The link's delivery-count + link-credit from a flow that came during the attach.
    pub credit_limit: u32,
    pub what: String,
    /// When `pump` last wrote: a heartbeat goes out after half the peer's idle time-out.
    last_write: Instant,
    /// WARREN_PERF_AMQP10_TRACE set: every frame received goes to stderr.
    trace: bool,
}

/// What `Link::pump` waited for.
enum Event {
    Read(std::io::Result<usize>),
    Wrote(std::io::Result<usize>),
    Tick,
}

fn protocol(what: &str, why: impl std::fmt::Display) -> PerfError {
    PerfError::Protocol(format!("{what}: {why}"))
}

impl Link {
    /// Connects, authenticates with SASL PLAIN and opens the connection and session.
    pub async fn connect(endpoint: &Endpoint, container: &str) -> Result<Link, PerfError> {
        let what = format!("the AMQP 1.0 connection to {}", endpoint.address());
        let stream = tokio::time::timeout(STEP_TIMEOUT, TcpStream::connect(endpoint.address()))
            .await
            .map_err(|_| PerfError::Connect(format!("{what}: connect timed out")))?
            .map_err(|e| PerfError::Connect(format!("{what}: {e}")))?;
        stream.set_nodelay(true).ok();
        let mut link = Link {
            stream,
            read: BytesMut::with_capacity(256 * 1024),
            write: BytesMut::with_capacity(256 * 1024),
            peer_max_frame: 512,
            peer_idle_ms: 0,
            peer_next_outgoing_id: 0,
            peer_incoming_window: 0,
            peer_product: String::new(),
            peer_version: String::new(),
            credit_limit: 0,
            what,
            last_write: Instant::now(),
            trace: std::env::var_os("WARREN_PERF_AMQP10_TRACE").is_some(),
        };
        tokio::time::timeout(STEP_TIMEOUT * 2, link.handshake(endpoint, container))
            .await
            .map_err(|_| {
                PerfError::Connect(format!("{}: handshake timed out", link_what(endpoint)))
            })??;
        Ok(link)
    }

    async fn handshake(&mut self, endpoint: &Endpoint, container: &str) -> Result<(), PerfError> {
        self.write.put_slice(&SASL_HEADER);
        self.flush().await?;
        let header = self.read_header().await?;
        if header != SASL_HEADER {
            return Err(protocol(
                &self.what,
                format!(
                    "the peer answered the SASL header with {header:?}; is this an AMQP 1.0 \
                     broker (RabbitMQ 3.x needs the rabbitmq_amqp1_0 plugin)?"
                ),
            ));
        }
        self.sasl_plain(endpoint).await?;
        self.open_session(endpoint, container).await
    }

    /// SASL PLAIN with the URL's user and password, up to a successful outcome.
    async fn sasl_plain(&mut self, endpoint: &Endpoint) -> Result<(), PerfError> {
        loop {
            match self.next_frame().await?.body {
                FrameBody::Sasl(SaslFrame::Mechanisms(mechanisms)) => {
                    if !mechanisms.iter().any(|m| m == "PLAIN") {
                        return Err(PerfError::Connect(format!(
                            "{}: the broker offers SASL {mechanisms:?}, not PLAIN",
                            self.what
                        )));
                    }
                    let mut response = vec![0u8];
                    response.extend_from_slice(endpoint.user.as_bytes());
                    response.push(0);
                    response.extend_from_slice(endpoint.password.as_bytes());
                    let init = SaslFrame::Init {
                        mechanism: "PLAIN".to_owned(),
                        initial_response: Some(Bytes::from(response)),
                        hostname: Some(endpoint.host.clone()),
                    };
                    encode_sasl_frame(&mut self.write, &init);
                    self.flush().await?;
                }
                FrameBody::Sasl(SaslFrame::Outcome { code: 0, .. }) => break,
                FrameBody::Sasl(SaslFrame::Outcome { code, .. }) => {
                    return Err(PerfError::Connect(format!(
                        "{}: SASL PLAIN as user '{}' failed (outcome code {code}); check the \
                         user and password in the URL",
                        self.what, endpoint.user
                    )))
                }
                other => {
                    let why = format!("unexpected {other:?} during SASL");
                    return Err(protocol(&self.what, why));
                }
            }
        }
        Ok(())
    }

    /// Sends the AMQP header, open and begin, and waits for the peer's open and begin.
    async fn open_session(
        &mut self,
        endpoint: &Endpoint,
        container: &str,
    ) -> Result<(), PerfError> {
        self.write.put_slice(&AMQP_HEADER);
        let open = Open {
            container_id: container.to_owned(),
            hostname: Some(if endpoint.vhost == "/" {
                endpoint.host.clone()
            } else {
                format!("vhost:{}", endpoint.vhost)
            }),
            max_frame_size: Some(MAX_FRAME),
            channel_max: Some(0),
            ..Default::default()
        };
        self.send(&Performative::Open(Box::new(open)));
        let begin = Begin {
            next_outgoing_id: 0,
            incoming_window: WINDOW,
            outgoing_window: WINDOW,
            handle_max: Some(0),
            ..Default::default()
        };
        self.send(&Performative::Begin(begin));
        self.flush().await?;
        let header = self.read_header().await?;
        if header != AMQP_HEADER {
            return Err(protocol(
                &self.what,
                format!("the peer answered the AMQP header with {header:?}"),
            ));
        }
        let mut opened = false;
        loop {
            let frame = self.next_frame().await?;
            match frame.body {
                FrameBody::Amqp {
                    performative: Performative::Open(open),
                    ..
                } => {
                    self.note_open(&open);
                    opened = true;
                }
                FrameBody::Amqp {
                    performative: Performative::Begin(begin),
                    ..
                } if opened => {
                    self.peer_next_outgoing_id = begin.next_outgoing_id;
                    self.peer_incoming_window = begin.incoming_window;
                    return Ok(());
                }
                FrameBody::Amqp {
                    performative: Performative::Close(close),
                    ..
                } => return Err(self.refused("the connection", close.error.as_ref())),
                FrameBody::Empty => {}
                other => {
                    return Err(protocol(
                        &self.what,
                        format!("unexpected {other:?} while opening"),
                    ))
                }
            }
        }
    }

    /// Keeps what the peer's open says: its max frame size, idle time-out, product and version.
    fn note_open(&mut self, open: &Open) {
        self.peer_max_frame = open.max_frame_size.unwrap_or(u32::MAX);
        self.peer_idle_ms = open.idle_time_out.unwrap_or(0);
        for (key, value) in open.properties.iter().flatten() {
            match (key.as_str(), value.as_str()) {
                (Some("product"), Some(v)) => self.peer_product = v.to_owned(),
                (Some("version"), Some(v)) => self.peer_version = v.to_owned(),
                _ => {}
            }
        }
    }

    fn refused(&self, what: &str, error: Option<&AmqpError>) -> PerfError {
        match error {
            Some(e) => PerfError::Broker(format!(
                "{}: the broker closed {what}: {}: {}",
                self.what,
                e.condition,
                e.description.as_deref().unwrap_or("")
            )),
            None => PerfError::Broker(format!("{}: the broker closed {what}", self.what)),
        }
    }

    /// Attaches link handle 0 as a sender to `address` or as a receiver from it, and waits for
    /// the peer's attach; a refused attach (null terminus, then detach) names the address.
    pub async fn attach(
        &mut self,
        name: &str,
        sender: bool,
        address: &str,
        presettled: bool,
        durable: bool,
    ) -> Result<(), PerfError> {
        let attach = attach_performative(name, sender, address, presettled, durable);
        self.send(&Performative::Attach(Box::new(attach)));
        self.flush().await?;
        tokio::time::timeout(STEP_TIMEOUT, self.await_attach(address, sender))
            .await
            .map_err(|_| {
                PerfError::Broker(format!(
                    "{}: no answer to attaching address '{address}'",
                    self.what
                ))
            })?
    }

    /// Waits for the peer's attach, keeping the credit and window of flows that come first.
    async fn await_attach(&mut self, address: &str, sender: bool) -> Result<(), PerfError> {
        let mut attached_null = false;
        loop {
            let frame = self.next_frame().await?;
            let performative = match frame.body {
                FrameBody::Amqp { performative, .. } => performative,
                FrameBody::Empty => continue,
                other => {
                    return Err(protocol(
                        &self.what,
                        format!("unexpected {other:?} while attaching"),
                    ))
                }
            };
            if let Some(error) = peer_ended(&performative, address, sender) {
                return Err(error);
            }
            match performative {
                Performative::Attach(peer) => {
                    let terminus = if sender { &peer.target } else { &peer.source };
                    if terminus.is_some() {
                        return Ok(());
                    }
                    attached_null = true;
                }
                Performative::Flow(flow) => {
                    let (window_limit, credit_limit) = send_limits(&flow);
                    self.peer_incoming_window = window_limit;
                    if let Some(credit_limit) = credit_limit {
                        self.credit_limit = credit_limit;
                    }
                }
                other => {
                    let when = if attached_null {
                        "after a refused attach"
                    } else {
                        "while attaching"
                    };
                    return Err(protocol(&self.what, format!("unexpected {other:?} {when}")));
                }
            }
        }
    }

    /// Waits for one of: bytes to read, room to write what is queued, or `tick`. With
    /// `prefer_write` a ready write goes before a ready read (the receiver's flows and
    /// dispositions free the sender), else a read goes first (the sender's credit). A tick
    /// with nothing written for half the peer's idle time-out queues a heartbeat.
    pub async fn pump(&mut self, tick: &mut Interval, prefer_write: bool) -> Result<(), PerfError> {
        let (mut reader, mut writer) = self.stream.split();
        let pending = !self.write.is_empty();
        let event = if prefer_write {
            tokio::select! {
                biased;
                n = writer.write(&self.write), if pending => Event::Wrote(n),
                n = reader.read_buf(&mut self.read) => Event::Read(n),
                _ = tick.tick() => Event::Tick,
            }
        } else {
            tokio::select! {
                biased;
                n = reader.read_buf(&mut self.read) => Event::Read(n),
                n = writer.write(&self.write), if pending => Event::Wrote(n),
                _ = tick.tick() => Event::Tick,
            }
        };
        match event {
            Event::Read(n) => {
                if n.map_err(|e| PerfError::io(&self.what, &e))? == 0 {
                    return Err(PerfError::Broker(format!(
                        "{}: the broker closed the socket",
                        self.what
                    )));
                }
            }
            Event::Wrote(n) => {
                let n = n.map_err(|e| PerfError::io(&self.what, &e))?;
                self.write.advance(n);
                self.last_write = Instant::now();
            }
            Event::Tick => {
                let idle = Duration::from_millis(u64::from(self.peer_idle_ms / 2).max(1));
                if self.peer_idle_ms > 0
                    && self.last_write.elapsed() >= idle
                    && self.write.is_empty()
                {
                    self.send_heartbeat();
                }
            }
        }
        Ok(())
    }

    /// Queues a performative for writing.
    pub fn send(&mut self, performative: &Performative) {
        encode_frame(&mut self.write, 0, performative, &[]);
    }

    pub fn send_flow(&mut self, flow: Flow) {
        self.send(&Performative::Flow(flow));
    }

    pub fn send_disposition(&mut self, disposition: Disposition) {
        self.send(&Performative::Disposition(disposition));
    }

    pub fn send_heartbeat(&mut self) {
        encode_empty_frame(&mut self.write);
    }

    pub async fn flush(&mut self) -> Result<(), PerfError> {
        if self.write.is_empty() {
            return Ok(());
        }
        self.stream
            .write_all(&self.write)
            .await
            .map_err(|e| PerfError::io(&self.what, &e))?;
        self.write.clear();
        Ok(())
    }

    async fn read_header(&mut self) -> Result<[u8; 8], PerfError> {
        while self.read.len() < 8 {
            self.read_more().await?;
        }
        let mut header = [0u8; 8];
        self.read.copy_to_slice(&mut header);
        Ok(header)
    }

    pub async fn read_more(&mut self) -> Result<(), PerfError> {
        self.read.reserve(64 * 1024);
        let n = self
            .stream
            .read_buf(&mut self.read)
            .await
            .map_err(|e| PerfError::io(&self.what, &e))?;
        if n == 0 {
            return Err(PerfError::Broker(format!(
                "{}: the broker closed the socket",
                self.what
            )));
        }
        Ok(())
    }

    /// The next whole frame from the read buffer, if there is one.
    pub fn decode_buffered(&mut self) -> Result<Option<Frame>, PerfError> {
        let frame = decode_frame(&mut self.read, MAX_FRAME).map_err(|e| protocol(&self.what, e))?;
        if self.trace {
            if let Some(frame) = &frame {
                eprintln!("{} <- {:?}", self.what, frame);
            }
        }
        Ok(frame)
    }

    pub async fn next_frame(&mut self) -> Result<Frame, PerfError> {
        loop {
            if let Some(frame) = self.decode_buffered()? {
                return Ok(frame);
            }
            self.read_more().await?;
        }
    }

    /// Closes the connection politely, waiting briefly for the peer's close.
    pub async fn close(mut self) {
        self.send(&Performative::Close(Close::default()));
        if self.flush().await.is_err() {
            return;
        }
        let wait = async {
            loop {
                match self.next_frame().await {
                    Ok(Frame {
                        body:
                            FrameBody::Amqp {
                                performative: Performative::Close(_),
                                ..
                            },
                        ..
                    })
                    | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), wait).await;
    }
}

fn link_what(endpoint: &Endpoint) -> String {
    format!("the AMQP 1.0 connection to {}", endpoint.address())
}

/// Our attach of link handle 0: the far end's terminus names `address`, ours the link.
fn attach_performative(
    name: &str,
    sender: bool,
    address: &str,
    presettled: bool,
    durable: bool,
) -> Attach {
    let far = Terminus {
        address: Some(address.to_owned()),
        durable: Some(u32::from(durable)),
        ..Default::default()
    };
    let near = Terminus {
        address: Some(name.to_owned()),
        ..Default::default()
    };
    let (source, target) = if sender { (near, far) } else { (far, near) };
    Attach {
        name: name.to_owned(),
        handle: 0,
        role: if sender { ROLE_SENDER } else { ROLE_RECEIVER },
        snd_settle_mode: Some(if presettled {
            SND_SETTLED
        } else {
            SND_UNSETTLED
        }),
        rcv_settle_mode: Some(0),
        source: Some(source),
        target: Some(target),
        initial_delivery_count: sender.then_some(0),
        ..Default::default()
    }
}

/// What a flow from the broker says of our sending limits: the session's (next-incoming-id +
/// incoming-window), and link 0's (delivery-count + link-credit) when it grants link 0 credit.
pub fn send_limits(flow: &Flow) -> (u32, Option<u32>) {
    let window_limit = match flow.next_incoming_id {
        Some(next) => next.wrapping_add(flow.incoming_window),
        None => flow.incoming_window,
    };
    let credit_limit = match (flow.handle, flow.link_credit) {
        // a null delivery-count: our initial one, 0 (transport.xml, flow)
        (Some(0), Some(credit)) => Some(flow.delivery_count.unwrap_or(0).wrapping_add(credit)),
        _ => None,
    };
    (window_limit, credit_limit)
}

/// The deliveries a disposition settles (first..=last).
pub fn settled_count(disposition: &Disposition) -> u64 {
    let last = disposition.last.unwrap_or(disposition.first);
    u64::from(last.wrapping_sub(disposition.first)) + 1
}

/// The error when the broker detaches the link, ends the session or closes the connection.
pub fn peer_ended(performative: &Performative, address: &str, sender: bool) -> Option<PerfError> {
    let error = match performative {
        Performative::Detach(detach) => detach.error.as_ref(),
        Performative::End(end) => end.error.as_ref(),
        Performative::Close(close) => close.error.as_ref(),
        _ => return None,
    };
    Some(address_refused(address, sender, error))
}

/// The error for an attach the broker refused: names the address and the fix.
pub fn address_refused(address: &str, sender: bool, error: Option<&AmqpError>) -> PerfError {
    let role = if sender {
        "sending to"
    } else {
        "receiving from"
    };
    let why = error.map_or_else(
        || "no reason given".to_owned(),
        |e| {
            format!(
                "{}: {}",
                e.condition,
                e.description.as_deref().unwrap_or("")
            )
        },
    );
    PerfError::Broker(format!(
        "the broker refused {role} address '{address}' ({why}). Use an address of an existing \
         queue: '/queues/NAME' for RabbitMQ 4 and Warren (declare the queue first, e.g. \
         `warren perf -u NAME -f persistent --auto-delete false -C 1 -D 1`), or \
         '/amq/queue/NAME' (or --address-v1) for RabbitMQ 3.x's rabbitmq_amqp1_0 plugin"
    ))
}

/// A pre-encoded transfer frame (handle 0) whose delivery id, tag, message id, send time and
/// body stamp are patched per message. Its message is shaped as quiver's: a header (durable), a
/// properties section whose message-id is the message's number as a string, application
/// properties `{"SendTime": <ms since the epoch>}`, then the body (one data section here, with
/// our stamp at its front, where quiver has an amqp-value string). So a broker sees a
/// different message-id and SendTime on every message, as it does under quiver.
pub struct TransferTemplate {
    pub bytes: Vec<u8>,
    /// Offsets of the 4-byte delivery id and the 4-byte delivery tag.
    id_at: usize,
    tag_at: usize,
    /// Offsets of the message-id's decimal digits and of the 8-byte SendTime.
    message_id_at: usize,
    send_time_at: usize,
    /// Offset of the body (its stamp goes at the front).
    pub body_at: usize,
}

/// Digits of a message's message-id (zero-padded: the template keeps one size).
const MESSAGE_ID_DIGITS: usize = 10;

impl TransferTemplate {
    pub fn new(body_size: usize, durable: bool, presettled: bool) -> TransferTemplate {
        let mut out: Vec<u8> = Vec::with_capacity(64 + body_size);
        // size (patched below); doff 2, type AMQP, channel 0
        out.extend_from_slice(&[0, 0, 0, 0, 2, 0, 0, 0]);
        // the transfer's descriptor, then a list8: handle, delivery-id, delivery-tag,
        // message-format, settled
        out.extend_from_slice(&[0x00, 0x53, 0x14]);
        let fields_at = out.len();
        out.extend_from_slice(&[0xc0, 0, 5]);
        out.push(0x43); // handle: uint0
        out.push(0x70); // delivery-id: uint
        let id_at = out.len();
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&[0xa0, 4]); // delivery-tag: vbin8 of 4 bytes
        let tag_at = out.len();
        out.extend_from_slice(&[0; 4]);
        out.push(0x43); // message-format 0
        out.push(if presettled { 0x41 } else { 0x42 });
        let list_size = out.len() - fields_at - 2;
        out[fields_at + 1] = u8::try_from(list_size).unwrap_or(u8::MAX);
        if durable {
            // header section: list8 [durable = true]
            out.extend_from_slice(&[0x00, 0x53, 0x70, 0xc0, 2, 1, 0x41]);
        }
        // properties section: list8 [message-id: str8 of MESSAGE_ID_DIGITS digits]
        out.extend_from_slice(&[0x00, 0x53, 0x73, 0xc0, 3 + MESSAGE_ID_DIGITS as u8, 1]);
        out.extend_from_slice(&[0xa1, MESSAGE_ID_DIGITS as u8]);
        let message_id_at = out.len();
        out.resize(message_id_at + MESSAGE_ID_DIGITS, b'0');
        // application-properties section: map8 {"SendTime": long}
        out.extend_from_slice(&[0x00, 0x53, 0x74, 0xc1, 20, 2, 0xa1, 8]);
        out.extend_from_slice(b"SendTime");
        out.push(0x81);
        let send_time_at = out.len();
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&[0x00, 0x53, 0x75]); // data
        if let Ok(len) = u8::try_from(body_size) {
            out.extend_from_slice(&[0xa0, len]);
        } else {
            out.push(0xb0);
            out.extend_from_slice(&u32::try_from(body_size).unwrap_or(u32::MAX).to_be_bytes());
        }
        let body_at = out.len();
        out.resize(body_at + body_size, 0);
        let size = u32::try_from(out.len()).unwrap_or(u32::MAX);
        out[..4].copy_from_slice(&size.to_be_bytes());
        TransferTemplate {
            bytes: out,
            id_at,
            tag_at,
            message_id_at,
            send_time_at,
            body_at,
        }
    }

    /// Appends one transfer to `out` with `delivery_id` (also the tag) and the body stamp.
    pub fn write(&self, out: &mut BytesMut, delivery_id: u32, stamp: &crate::body::Stamp) {
        let start = out.len();
        out.extend_from_slice(&self.bytes);
        let frame = &mut out[start..];
        frame[self.id_at..self.id_at + 4].copy_from_slice(&delivery_id.to_be_bytes());
        frame[self.tag_at..self.tag_at + 4].copy_from_slice(&delivery_id.to_be_bytes());
        let mut number = u64::from(stamp.sequence) + 1;
        for digit in frame[self.message_id_at..self.message_id_at + MESSAGE_ID_DIGITS]
            .iter_mut()
            .rev()
        {
            *digit = b'0' + (number % 10) as u8;
            number /= 10;
        }
        let sent_ms = i64::try_from(stamp.sent_ns / 1_000_000).unwrap_or(i64::MAX);
        frame[self.send_time_at..self.send_time_at + 8].copy_from_slice(&sent_ms.to_be_bytes());
        stamp.write(&mut frame[self.body_at..]);
    }
}

/// Reads a symbol/string map key (for open properties).
pub fn key_is(value: &Value, key: &str) -> bool {
    value.as_str() == Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::Stamp;
    use warren_proto::amqp10::message::{Body, Sections};

    #[test]
    fn the_transfer_template_decodes() {
        for (size, durable) in [(12, true), (12, false), (1000, true)] {
            let template = TransferTemplate::new(size, durable, false);
            let mut out = BytesMut::new();
            let stamp = Stamp {
                sequence: 3,
                sent_ns: 99,
                producer: 0,
            };
            template.write(&mut out, 0x0102_0304, &stamp);
            let frame = decode_frame(&mut out, MAX_FRAME).unwrap().unwrap();
            let FrameBody::Amqp {
                performative: Performative::Transfer(t),
                payload,
            } = frame.body
            else {
                panic!("not a transfer");
            };
            assert_eq!(t.delivery_id, Some(0x0102_0304));
            assert_eq!(t.settled, Some(false));
            let sections = Sections::decode(&payload).unwrap();
            assert_eq!(sections.header.is_some(), durable);
            let properties = sections.properties.expect("properties");
            assert_eq!(
                properties
                    .message_id
                    .and_then(|id| id.as_str().map(str::to_owned)),
                Some("0000000004".to_owned())
            );
            let application = sections
                .application_properties
                .expect("application properties");
            assert!(
                format!("{application:?}").contains("SendTime"),
                "{application:?}"
            );
            let Body::Data(chunks) = sections.body else {
                panic!("no data")
            };
            assert_eq!(chunks[0].len(), size);
            assert_eq!(Stamp::read(&chunks[0]).unwrap().sent_ns, 99);
        }
    }
}
