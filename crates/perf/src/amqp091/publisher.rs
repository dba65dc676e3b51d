//! `Publisher`: a producer connection's fast path.
//!
//! Each channel has a template: the basic.publish method frame, the content header and the body
//! frames of one message, encoded once at setup. `publish` copies the template to the end of the
//! write buffer and writes the stamp over the body's first bytes: one copy per message, no
//! allocation. `flush` writes the buffer with non-blocking writes, reading confirms whenever the
//! socket is readable, so a broker that stops reading while it sends confirms cannot deadlock
//! the two ends.

use std::future::Future;
use std::io::ErrorKind;
use std::task::Poll;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, Interest};
use tokio::time::Instant;
use warren_proto::amqp091::{
    encode_body_frame, encode_content_header, encode_method_frame, BasicProperties, BasicPublish,
    ChannelOpen, ConfirmSelect, Frame, Method, ShortStr,
};

use super::connection::Connection;
use crate::body::{Stamp, STAMP_WITH_PRODUCER_BYTES};
use crate::driver::{Confirm, PublisherEvents, PublisherLink, PublisherSetup};
use crate::error::PerfError;

const CLASS_BASIC: u16 = 60;
const DELIVERY_MODE_PERSISTENT: u8 = 2;

/// One message of a channel, encoded once.
struct Template {
    frames: Vec<u8>,
    /// Where in `frames` the body's first byte is.
    body_at: usize,
    /// How many body bytes the stamp may cover (the first body frame's length, at most 16).
    stamp_len: usize,
    /// With `-K`: where in `frames` the routing key's bytes are, rewritten for each message.
    random_key_at: Option<usize>,
}

/// The length of PerfTest's random routing keys (`UUID.randomUUID().toString()`).
const RANDOM_KEY_BYTES: usize = 36;

/// A producer connection with one or more publishing channels.
pub struct Publisher {
    connection: Connection,
    templates: Vec<Template>,
    /// Content frames of a basic.return still to skip: (channel, body bytes left).
    returning: Option<(u16, u64)>,
}

impl Publisher {
    /// Opens the channels (numbered from 1), selects confirms if asked, and encodes templates.
    pub async fn open(
        mut connection: Connection,
        setup: &PublisherSetup,
    ) -> Result<Self, PerfError> {
        let mut templates = Vec::with_capacity(setup.routing_keys.len());
        for (index, routing_key) in setup.routing_keys.iter().enumerate() {
            let channel = channel_number(index)?;
            let what = format!("opening producer channel {channel}");
            connection
                .call(channel, &Method::ChannelOpen(ChannelOpen::default()), &what)
                .await?;
            if setup.confirm {
                let select = Method::ConfirmSelect(ConfirmSelect { nowait: false });
                connection
                    .call(channel, &select, "enabling publisher confirms")
                    .await?;
            }
            templates.push(template(channel, routing_key, setup, connection.frame_max));
        }
        connection.use_large_buffers();
        Ok(Publisher {
            connection,
            templates,
            returning: None,
        })
    }

    /// Decodes every whole frame in the read buffer into `events`.
    fn take_frames(&mut self, events: &mut PublisherEvents) -> Result<(), PerfError> {
        while let Some(frame) = self.connection.decode_buffered()? {
            self.on_frame(frame, events)?;
        }
        Ok(())
    }

    fn on_frame(&mut self, frame: Frame, events: &mut PublisherEvents) -> Result<(), PerfError> {
        match frame {
            Frame::Method { channel, method } => self.on_method(channel, method, events),
            Frame::Header { channel, header } => {
                self.returning = Some((channel, header.body_size));
                self.finish_return(events);
                Ok(())
            }
            Frame::Body { payload, .. } => {
                if let Some((_, left)) = &mut self.returning {
                    *left = left.saturating_sub(payload.len() as u64);
                }
                self.finish_return(events);
                Ok(())
            }
            Frame::Heartbeat { .. } => Ok(()),
        }
    }

    fn on_method(
        &mut self,
        channel: u16,
        method: Method,
        events: &mut PublisherEvents,
    ) -> Result<(), PerfError> {
        let index = usize::from(channel).saturating_sub(1);
        match method {
            Method::BasicAck(ack) => events.confirms.push(Confirm {
                channel: index,
                sequence: ack.delivery_tag,
                multiple: ack.multiple,
                acked: true,
            }),
            Method::BasicNack(nack) => events.confirms.push(Confirm {
                channel: index,
                sequence: nack.delivery_tag,
                multiple: nack.multiple,
                acked: false,
            }),
            // its content header and body follow
            Method::BasicReturn(_) => {}
            Method::ConnectionBlocked(_) | Method::ConnectionUnblocked(_) => {}
            Method::ChannelClose(close) => {
                return Err(super::broker_closed(
                    "publishing",
                    channel,
                    close.reply_code,
                    &close.reply_text,
                ))
            }
            Method::ConnectionClose(close) => {
                return Err(super::broker_closed(
                    "publishing",
                    0,
                    close.reply_code,
                    &close.reply_text,
                ))
            }
            other => {
                return Err(PerfError::Protocol(format!(
                    "unexpected {} on producer channel {channel} from {}",
                    other.name(),
                    self.connection.address
                )))
            }
        }
        Ok(())
    }

    /// Counts a returned message once all of its body has arrived.
    fn finish_return(&mut self, events: &mut PublisherEvents) {
        if let Some((_, 0)) = self.returning {
            self.returning = None;
            events.returned += 1;
        }
    }

    /// Reads whatever the socket has without waiting.
    ///
    /// Each read is one poll of tokio's `read_buf`, not a `try_read`: a read that leaves room
    /// in the buffer has drained the socket, and tokio then clears its readiness, so the next
    /// read (here, or after `flush`) waits for the socket instead of making a system call
    /// that finds nothing. That saved call sat on every confirm round trip.
    async fn read_ready(&mut self, events: &mut PublisherEvents) -> Result<(), PerfError> {
        loop {
            let connection = &mut self.connection;
            if connection.read_buf.capacity() - connection.read_buf.len() < 4096 {
                connection
                    .read_buf
                    .reserve(super::connection::READ_BUFFER_BYTES);
            }
            let mut read = std::pin::pin!(connection.socket.read_buf(&mut connection.read_buf));
            let read = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
            match read {
                Poll::Pending => return Ok(()),
                Poll::Ready(Ok(0)) => {
                    return Err(PerfError::Connect(format!(
                        "the broker at {} closed the connection",
                        connection.address
                    )))
                }
                Poll::Ready(Ok(_)) => self.take_frames(events)?,
                Poll::Ready(Err(error)) => return Err(connection.io_error(&error)),
            }
        }
    }
}

impl PublisherLink for Publisher {
    fn publish(&mut self, channel: usize, stamp: &Stamp) {
        let template = &self.templates[channel];
        let out = &mut self.connection.write_buf;
        let start = out.len();
        out.extend_from_slice(&template.frames);
        if let Some(key_at) = template.random_key_at {
            if let Some(key) = out.get_mut(start + key_at..start + key_at + RANDOM_KEY_BYTES) {
                random_uuid_text(key);
            }
        }
        let body_start = start + template.body_at;
        if let Some(head) = out.get_mut(body_start..body_start + template.stamp_len) {
            stamp.write(head);
        }
    }

    fn buffered_bytes(&self) -> usize {
        self.connection.write_buf.len()
    }

    async fn flush(&mut self, events: &mut PublisherEvents) -> Result<(), PerfError> {
        let now = Instant::now();
        self.connection.heartbeat_if_due(now);
        while !self.connection.write_buf.is_empty() {
            let connection = &mut self.connection;
            match connection.socket.try_write(&connection.write_buf) {
                Ok(n) => connection.write_buf.advance(n),
                Err(error) if error.kind() == ErrorKind::WouldBlock => {
                    let interest = Interest::WRITABLE | Interest::READABLE;
                    let ready = connection.socket.ready(interest).await;
                    let ready = ready.map_err(|error| connection.io_error(&error))?;
                    if ready.is_readable() {
                        self.read_ready(events).await?;
                    }
                }
                Err(error) => return Err(connection.io_error(&error)),
            }
        }
        self.connection.write_buf.clear();
        self.connection.wrote(now);
        self.read_ready(events).await
    }

    async fn wait(
        &mut self,
        deadline: Instant,
        events: &mut PublisherEvents,
    ) -> Result<(), PerfError> {
        self.take_frames(events)?;
        if !events.confirms.is_empty() || events.returned > 0 {
            return Ok(());
        }
        self.connection.heartbeat_if_due(Instant::now());
        if !self.connection.write_buf.is_empty() {
            return self.flush(events).await;
        }
        let readable = self.connection.socket.readable();
        match tokio::time::timeout_at(deadline, readable).await {
            Ok(Ok(())) => self.read_ready(events).await,
            Ok(Err(error)) => Err(self.connection.io_error(&error)),
            Err(_) => Ok(()),
        }
    }

    async fn close(self) -> Result<(), PerfError> {
        self.connection.close().await
    }
}

/// Channel numbers start at 1; index 0 is channel 1.
pub(super) fn channel_number(index: usize) -> Result<u16, PerfError> {
    u16::try_from(index + 1).map_err(|_| {
        PerfError::usage(format!(
            "{} channels on one connection is too many",
            index + 1
        ))
    })
}

/// Encodes one whole message of `channel`: publish method, content header, body frames of
/// zeros (the body split so that each frame fits `frame_max`).
fn template(channel: u16, routing_key: &str, setup: &PublisherSetup, frame_max: u32) -> Template {
    let mut out = BytesMut::new();
    let placeholder = "k".repeat(RANDOM_KEY_BYTES);
    let routing_key = if setup.random_routing_key {
        placeholder.as_str()
    } else {
        routing_key
    };
    let publish = Method::BasicPublish(BasicPublish {
        ticket: 0,
        exchange: ShortStr::from(setup.exchange.as_str()),
        routing_key: ShortStr::from(routing_key),
        mandatory: setup.mandatory,
        immediate: false,
    });
    encode_method_frame(channel, &publish, &mut out);
    let properties = BasicProperties {
        delivery_mode: setup.persistent.then_some(DELIVERY_MODE_PERSISTENT),
        ..Default::default()
    };
    let mut raw = BytesMut::new();
    properties.encode(&mut raw);
    let body_size = setup.body_size as u64;
    encode_content_header(channel, CLASS_BASIC, body_size, &raw, &mut out);
    // a body frame carries frame_max minus 8 bytes of frame overhead
    let chunk = (frame_max as usize).saturating_sub(8).max(1);
    let body = vec![0u8; setup.body_size];
    let body_at = out.len() + warren_proto::amqp091::FRAME_HEADER_SIZE;
    for part in body.chunks(chunk) {
        encode_body_frame(channel, part, &mut out);
    }
    let stamp_len = setup.body_size.min(chunk).min(STAMP_WITH_PRODUCER_BYTES);
    assert!(
        stamp_len >= crate::body::STAMP_BYTES,
        "invariant: bodies and frames hold a stamp"
    );
    // frame header, class and method ids, ticket, exchange (length byte and bytes), then
    // the routing key's length byte
    let random_key_at = setup.random_routing_key.then(|| {
        let at = warren_proto::amqp091::FRAME_HEADER_SIZE + 4 + 2 + 1 + setup.exchange.len() + 1;
        debug_assert_eq!(&out[at..at + RANDOM_KEY_BYTES], placeholder.as_bytes());
        at
    });
    Template {
        frames: out.to_vec(),
        body_at,
        stamp_len,
        random_key_at,
    }
}

/// Writes a random key shaped like a UUID's text (`8-4-4-4-12` hex digits).
fn random_uuid_text(key: &mut [u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = if matches!(i, 8 | 13 | 18 | 23) {
            b'-'
        } else {
            HEX[fastrand::usize(..16)]
        };
    }
}
