//! Publishing: assembling method + header + body frames into a message, routing it through
//! the vhost's snapshot, batching it per target queue, and mandatory returns. Confirms and the
//! end of the turn are in `confirm.rs`, transactions in `tx.rs`.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use warren_core::access::{Perm, ResourceKind};
use warren_core::message::{Body, Format, Message};
use warren_core::queue::QueueHandle;
use warren_core::routing::MessageFields;
use warren_core::stats::add_owned;
use warren_proto::amqp091::{
    self as wire, reply_code, BasicProperties, BasicPublish, BasicReturn, ContentHeader, Method,
};

use super::annotations;
use super::confirm::TAG_SEQ_BITS;
use super::connection::Connection;
use super::convert::message_fields;
use super::fault::{Cause, Fault};
use crate::connection::publish_batch::NO_TAG;

const BASIC_CLASS_ID: u16 = 60;
const PUBLISH_CAUSE: Cause = Cause {
    class_id: 60,
    method_id: 40,
};
pub const REPLY_TO_PSEUDO_QUEUE: &str = "amq.rabbitmq.reply-to";

/// A publish whose content is still arriving.
pub struct Assembly {
    publish: BasicPublish,
    header: Option<ContentHeader>,
    /// The body's first frame, and any after it (most bodies fit one frame: no allocation).
    first_chunk: Bytes,
    more_chunks: Vec<Bytes>,
    received: u64,
}

/// Distinct exchanges a turn counts locally; publishes to more go to the vhost's table
/// directly (a client publishing to that many exchanges in one read is rare).
const EXCHANGES_PER_TURN_MAX: usize = 8;

impl Connection {
    pub(super) fn on_publish(&mut self, id: u16, publish: BasicPublish) -> Result<(), Fault> {
        if publish.immediate {
            // As RabbitMQ 3.x: the immediate flag was dropped from the protocol's practice.
            return Err(Fault::connection(
                reply_code::NOT_IMPLEMENTED,
                "immediate=true",
                PUBLISH_CAUSE,
            ));
        }
        let exchange = publish.exchange.as_str();
        self.check(Perm::Write, ResourceKind::Exchange, exchange)
            .and_then(|()| self.check_topic(Perm::Write, exchange, &publish.routing_key))
            .map_err(|error| Fault::broker(id, error, PUBLISH_CAUSE))?;
        let channel = self
            .channels
            .get_mut(&id)
            .expect("invariant: caller checked the channel");
        channel.assembly = Some(Assembly {
            publish,
            header: None,
            first_chunk: Bytes::new(),
            more_chunks: Vec::new(),
            received: 0,
        });
        Ok(())
    }

    pub(super) fn on_header(&mut self, id: u16, header: ContentHeader) -> Result<(), Fault> {
        let max_size = self.shared.config.max_message_size;
        let Some(channel) = self.channels.get_mut(&id) else {
            return Err(unexpected_content());
        };
        if channel.closing {
            return Ok(());
        }
        let Some(assembly) = channel.assembly.as_mut().filter(|a| a.header.is_none()) else {
            return Err(unexpected_content());
        };
        if header.class_id != BASIC_CLASS_ID {
            return Err(Fault::connection(
                reply_code::UNEXPECTED_FRAME,
                format!(
                    "expected content header for class {BASIC_CLASS_ID}, got one for class {} \
                     instead",
                    header.class_id
                ),
                PUBLISH_CAUSE,
            ));
        }
        if header.body_size > max_size {
            channel.assembly = None;
            return Err(Fault::new(
                id,
                reply_code::PRECONDITION_FAILED,
                format!(
                    "message size {} is larger than configured max size {max_size}",
                    header.body_size
                ),
                PUBLISH_CAUSE,
            ));
        }
        let empty = header.body_size == 0;
        assembly.header = Some(header);
        if empty {
            self.complete_publish(id)?;
        }
        Ok(())
    }

    pub(super) fn on_body(&mut self, id: u16, payload: Bytes) -> Result<(), Fault> {
        let Some(channel) = self.channels.get_mut(&id) else {
            return Err(unexpected_content());
        };
        if channel.closing {
            return Ok(());
        }
        let Some(assembly) = channel.assembly.as_mut() else {
            return Err(unexpected_content());
        };
        let Some(header) = &assembly.header else {
            return Err(Fault::connection(
                reply_code::UNEXPECTED_FRAME,
                format!(
                    "expected content header for class {BASIC_CLASS_ID}, got non content \
                     header frame instead"
                ),
                PUBLISH_CAUSE,
            ));
        };
        assembly.received += payload.len() as u64;
        if assembly.received > header.body_size {
            return Err(Fault::connection(
                reply_code::FRAME_ERROR,
                "content body frame exceeds remaining content size",
                PUBLISH_CAUSE,
            ));
        }
        let done = assembly.received == header.body_size;
        if assembly.first_chunk.is_empty() && assembly.more_chunks.is_empty() {
            assembly.first_chunk = payload;
        } else {
            assembly.more_chunks.push(payload);
        }
        if done {
            self.complete_publish(id)?;
        }
        Ok(())
    }

    fn complete_publish(&mut self, id: u16) -> Result<(), Fault> {
        let channel = self
            .channels
            .get_mut(&id)
            .expect("invariant: caller checked the channel");
        let assembly = channel
            .assembly
            .take()
            .expect("invariant: a publish is being assembled");
        let header = assembly
            .header
            .expect("invariant: complete content has a header");
        let body = join(assembly.first_chunk, assembly.more_chunks);
        debug_assert_eq!(body.len() as u64, header.body_size);
        let publish = assembly.publish;
        self.check_user_id(id, &header.properties)?;
        let properties = self.rewrite_reply_to(id, header.properties)?;
        let (properties, cc) = sender_selected(properties)
            .map_err(|text| Fault::new(id, reply_code::PRECONDITION_FAILED, text, PUBLISH_CAUSE))?;
        let expiration_ms = annotations::expiration_ms(&properties)
            .map_err(|text| Fault::new(id, reply_code::PRECONDITION_FAILED, text, PUBLISH_CAUSE))?;
        let mut targets = std::mem::take(&mut self.pending.targets);
        self.route(id, &publish, &properties, &cc, &mut targets)?;
        let message = Arc::new(Message {
            format: Format::Amqp091,
            exchange: publish.exchange.into_bytes(),
            routing_key: publish.routing_key.into_bytes(),
            persistent: wire::peek_delivery_mode(&properties) == Some(2),
            priority: wire::peek_priority(&properties).unwrap_or(0),
            expiration_ms,
            deaths: None,
            properties,
            body,
        });
        self.pending.counts.received += 1;
        self.count_exchange(&message.exchange, targets.len());
        let channel = self
            .channels
            .get_mut(&id)
            .expect("invariant: checked above");
        add_owned(&channel.stats.publish, 1);
        if let Some(tx) = channel.tx.as_mut() {
            // The list goes with the transaction; the next publish starts a new one.
            tx.publishes.push((targets, message, publish.mandatory));
            return Ok(());
        }
        let mut tag = NO_TAG;
        if let Some(confirm) = channel.confirm.as_mut() {
            confirm.published += 1;
            tag = (u64::from(id) << TAG_SEQ_BITS) | confirm.published;
            if !self.pending.confirm_channels.contains(&id) {
                self.pending.confirm_channels.push(id);
            }
        }
        self.deliver_published(id, &targets, message, publish.mandatory, tag);
        targets.clear();
        self.pending.targets = targets;
        Ok(())
    }

    /// Counts a publish to `exchange` that reached `routed` queues, for the exchange's
    /// `publish_in` and `publish_out` (added to the vhost's table once per turn).
    fn count_exchange(&mut self, exchange: &Bytes, routed: usize) {
        let routed = routed as u64;
        let turn = &mut self.pending.exchanges;
        if let Some(entry) = turn.iter_mut().find(|(name, ..)| name == exchange) {
            entry.1 += 1;
            entry.2 += routed;
        } else if turn.len() < EXCHANGES_PER_TURN_MAX {
            turn.push((exchange.clone(), 1, routed));
        } else {
            self.vhost().exchange_stats().add(exchange, 1, routed);
        }
    }

    /// Queues `message` for its targets, or returns it to the publisher when mandatory and
    /// unroutable (the return is written before the confirm, as the spec orders).
    pub(super) fn deliver_published(
        &mut self,
        id: u16,
        targets: &[QueueHandle],
        message: Arc<Message>,
        mandatory: bool,
        tag: u64,
    ) {
        if targets.is_empty() {
            let stats = self.channels.get(&id).map(|c| &c.stats);
            if mandatory {
                self.pending.counts.unroutable_returned += 1;
                if let Some(stats) = stats {
                    add_owned(&stats.return_unroutable, 1);
                }
                let method = Method::BasicReturn(BasicReturn {
                    reply_code: reply_code::NO_ROUTE,
                    reply_text: "NO_ROUTE".into(),
                    exchange: exchange_of(&message),
                    routing_key: routing_key_of(&message),
                });
                let frame_max = self.tuning.frame_max;
                self.out
                    .content(id, &method, &message.properties, &message.body, frame_max);
            } else {
                self.pending.counts.unroutable_dropped += 1;
                if let Some(stats) = stats {
                    add_owned(&stats.drop_unroutable, 1);
                }
            }
            return;
        }
        self.pending.counts.routed += 1;
        for queue in targets {
            self.pending.batches.publish(queue, message.clone(), tag);
        }
    }

    /// Routes on the message's routing key and its sender-selected keys (`cc`: the `CC` and
    /// `BCC` headers' routing keys, usually none).
    fn route(
        &mut self,
        id: u16,
        publish: &BasicPublish,
        properties: &Bytes,
        cc: &[String],
        targets: &mut Vec<QueueHandle>,
    ) -> Result<(), Fault> {
        let vhost = self.vhost();
        let exchange = publish.exchange.as_str();
        let routing_key = publish.routing_key.as_str();
        let mut fields = || -> MessageFields {
            BasicProperties::decode(properties)
                .map_or_else(|_| MessageFields::default(), message_fields)
        };
        let snapshot = vhost.snapshot();
        let routed = if cc.is_empty() {
            let keys = std::slice::from_ref(&routing_key);
            snapshot.route(exchange, keys, &mut fields, targets)
        } else {
            let mut keys = Vec::with_capacity(cc.len() + 1);
            keys.push(routing_key);
            keys.extend(cc.iter().map(String::as_str));
            snapshot.route(exchange, &keys, &mut fields, targets)
        };
        routed.map_err(|error| Fault::broker(id, error, PUBLISH_CAUSE))
    }

    /// As RabbitMQ: a `user_id` property must name the authenticated user.
    fn check_user_id(&self, id: u16, raw: &Bytes) -> Result<(), Fault> {
        const USER_ID_FLAG: u8 = 0x10; // bit 4 of the first flags word
        if raw.get(1).is_none_or(|low| low & USER_ID_FLAG == 0) {
            return Ok(());
        }
        let Ok(properties) = BasicProperties::decode(raw) else {
            return Ok(()); // validated when the frame was decoded
        };
        let Some(user_id) = properties.user_id else {
            return Ok(());
        };
        // RabbitMQ's `check_user_id`: the user's own name, or any name for an impersonator.
        let (user, impersonator) = (&self.user, self.impersonator);
        warren_core::access::check_user_id_as(user_id.as_str(), user, impersonator).map_err(
            |error| {
                Fault::new(
                    id,
                    reply_code::PRECONDITION_FAILED,
                    error.text,
                    PUBLISH_CAUSE,
                )
            },
        )
    }

    /// Direct reply-to: `reply_to = amq.rabbitmq.reply-to` becomes the channel's private
    /// reply queue, so the responder's publish to that name reaches this channel's consumer.
    fn rewrite_reply_to(&mut self, id: u16, raw: Bytes) -> Result<Bytes, Fault> {
        let marker = REPLY_TO_PSEUDO_QUEUE.as_bytes();
        if !raw.windows(marker.len()).any(|w| w == marker) {
            return Ok(raw);
        }
        let Ok(mut properties) = BasicProperties::decode(&raw) else {
            return Ok(raw);
        };
        if properties.reply_to.as_deref() != Some(REPLY_TO_PSEUDO_QUEUE) {
            return Ok(raw);
        }
        let channel = self
            .channels
            .get(&id)
            .expect("invariant: caller checked the channel");
        let Some(queue) = &channel.reply_queue else {
            return Err(Fault::new(
                id,
                reply_code::PRECONDITION_FAILED,
                "fast reply consumer does not exist",
                PUBLISH_CAUSE,
            ));
        };
        properties.reply_to = Some(queue.name().as_ref().into());
        let mut out = BytesMut::with_capacity(raw.len() + 32);
        properties.encode(&mut out);
        Ok(out.freeze())
    }
}

/// The exchange a stored message was published to, as a short string again (checked UTF-8
/// when it was decoded, so the fallback is unreachable).
pub(super) fn exchange_of(message: &Message) -> wire::ShortStr {
    wire::ShortStr::from_utf8(message.exchange.clone()).unwrap_or_default()
}

pub(super) fn routing_key_of(message: &Message) -> wire::ShortStr {
    wire::ShortStr::from_utf8(message.routing_key.clone()).unwrap_or_default()
}

/// `bytes` when they make a short string (UTF-8, at most 255 bytes), else none: what
/// `exchange_of` and `routing_key_of` give, without taking a reference.
pub(super) fn short_str_bytes(bytes: &Bytes) -> &[u8] {
    if wire::ShortStr::fits(bytes) {
        bytes
    } else {
        &[]
    }
}

/// Sender-selected distribution: the routing keys in the `CC` and `BCC` headers (arrays of
/// strings), with `BCC` removed from the properties. Only properties whose bytes contain a `CC`
/// or `BCC` table key are decoded, and only those with a `BCC` header are re-encoded: every
/// other message passes through untouched. A `CC`/`BCC` header that is not an array is refused
/// (406), as RabbitMQ refuses it ("unacceptable type in header").
fn sender_selected(raw: Bytes) -> Result<(Bytes, Vec<String>), String> {
    const HEADERS_FLAG: u8 = 0x20; // bit 13 of the flags word: headers present
    const MARKERS: [&[u8]; 2] = [b"\x02CC", b"\x03BCC"]; // the keys as short strings
    if raw.first().is_none_or(|high| high & HEADERS_FLAG == 0)
        || !MARKERS
            .iter()
            .any(|m| raw.windows(m.len()).any(|w| w == *m))
    {
        return Ok((raw, Vec::new()));
    }
    let Ok(mut properties) = BasicProperties::decode(&raw) else {
        return Ok((raw, Vec::new())); // validated when the frame was decoded
    };
    let Some(headers) = properties.headers.as_mut() else {
        return Ok((raw, Vec::new()));
    };
    let mut keys = Vec::new();
    let mut bcc = false;
    for name in ["CC", "BCC"] {
        match headers.get(name) {
            None => {}
            Some(wire::FieldValue::Array(values)) => {
                bcc |= name == "BCC";
                keys.extend(values.iter().filter_map(|v| v.as_str()).map(str::to_owned));
            }
            Some(other) => {
                return Err(format!(
                    "invalid message: unacceptable type in header {name}: expected an array \
                     of longstr, got type '{}'",
                    char::from(other.tag())
                ))
            }
        }
    }
    if !bcc {
        return Ok((raw, keys));
    }
    headers.0.retain(|(key, _)| key.as_str() != "BCC");
    let mut out = BytesMut::with_capacity(raw.len());
    properties.encode(&mut out);
    Ok((out.freeze(), keys))
}

/// The body of a publish: its frames' payloads as they are, slices of the read buffers.
fn join(first: Bytes, mut more: Vec<Bytes>) -> Body {
    if more.is_empty() {
        return Body::from(first);
    }
    more.insert(0, first);
    Body::from_chunks(more)
}

/// A content frame where a method frame is due (RabbitMQ's `rabbit_command_assembler`).
fn unexpected_content() -> Fault {
    Fault::connection(
        reply_code::UNEXPECTED_FRAME,
        "expected method frame, got non method frame instead",
        PUBLISH_CAUSE,
    )
}
