//! `Consumer`: a consumer connection's fast path. Deliveries are decoded from large reads (many
//! frames per syscall); each channel assembles basic.deliver, its content header and body frames,
//! keeping only the body's first 16 bytes (the stamp). Acks are buffered and written together
//! before the next read.

use bytes::Bytes;
use tokio::time::Instant;
use warren_proto::amqp091::{
    encode_method_frame, BasicAck, BasicConsume, BasicQos, ChannelOpen, FieldTable, FieldValue,
    Frame, Method, QueueBind, QueueDeclare, ShortStr,
};

use super::connection::Connection;
use super::publisher::channel_number;
use crate::body::STAMP_WITH_PRODUCER_BYTES;
use crate::driver::{ConsumerLink, ConsumerSetup, Delivery};
use crate::error::PerfError;
use crate::options::ArgValue;
use crate::topology::Source;

/// A delivery whose content is still arriving.
#[derive(Clone, Copy, Default)]
struct Pending {
    tag: u64,
    /// Body bytes still to come; `None` until the content header says.
    body_left: Option<u64>,
    head: [u8; STAMP_WITH_PRODUCER_BYTES],
    head_len: usize,
}

/// A consumer connection with one or more consuming channels.
pub struct Consumer {
    connection: Connection,
    /// Per channel: the delivery being assembled.
    pending: Vec<Option<Pending>>,
}

impl Consumer {
    /// Opens each channel, sets its prefetch, declares and binds a server-named queue where
    /// the source asks for one, then starts every consumer. basic.consume is sent on all
    /// channels before any answer is read, so that deliveries on one channel never arrive in
    /// the middle of another channel's setup; consume-ok is read by the fast path.
    pub async fn open(
        mut connection: Connection,
        setup: &ConsumerSetup,
    ) -> Result<Self, PerfError> {
        let mut queues = Vec::with_capacity(setup.sources.len());
        for (index, source) in setup.sources.iter().enumerate() {
            let channel = channel_number(index)?;
            let what = format!("opening consumer channel {channel}");
            connection
                .call(channel, &Method::ChannelOpen(ChannelOpen::default()), &what)
                .await?;
            if setup.prefetch > 0 && !setup.autoack {
                let qos = Method::BasicQos(BasicQos {
                    prefetch_size: 0,
                    prefetch_count: setup.prefetch,
                    global: false,
                });
                connection
                    .call(channel, &qos, "setting the prefetch (basic.qos)")
                    .await?;
            }
            queues.push(queue_of(&mut connection, channel, source, setup).await?);
        }
        for (index, queue) in queues.into_iter().enumerate() {
            let consume = Method::BasicConsume(BasicConsume {
                ticket: 0,
                queue,
                consumer_tag: ShortStr::default(),
                no_local: false,
                no_ack: setup.autoack,
                exclusive: false,
                nowait: false,
                arguments: field_table(&setup.arguments),
            });
            connection.send(channel_number(index)?, &consume);
        }
        connection.flush_all().await?;
        connection.use_large_buffers();
        Ok(Consumer {
            connection,
            pending: vec![None; setup.sources.len()],
        })
    }

    /// Takes one frame; returns the delivery it completes, if any.
    fn on_frame(&mut self, frame: Frame) -> Result<Option<(usize, Pending)>, PerfError> {
        match frame {
            Frame::Method { channel, method } => self.on_method(channel, method),
            Frame::Header { channel, header } => {
                let slot = self.slot(channel)?;
                let Some(pending) = slot else {
                    return Err(self.out_of_order(channel, "content header"));
                };
                pending.body_left = Some(header.body_size);
                Ok(self.complete(channel))
            }
            Frame::Body { channel, payload } => {
                let slot = self.slot(channel)?;
                let Some(Pending {
                    body_left: Some(left),
                    head,
                    head_len,
                    ..
                }) = slot
                else {
                    return Err(self.out_of_order(channel, "body frame"));
                };
                keep_head(head, head_len, &payload);
                *left = left.saturating_sub(payload.len() as u64);
                Ok(self.complete(channel))
            }
            Frame::Heartbeat { .. } => Ok(None),
        }
    }

    fn on_method(
        &mut self,
        channel: u16,
        method: Method,
    ) -> Result<Option<(usize, Pending)>, PerfError> {
        match method {
            Method::BasicDeliver(deliver) => {
                *self.slot(channel)? = Some(Pending {
                    tag: deliver.delivery_tag,
                    ..Pending::default()
                });
                Ok(None)
            }
            Method::BasicConsumeOk(_)
            | Method::ConnectionBlocked(_)
            | Method::ConnectionUnblocked(_) => Ok(None),
            Method::BasicCancel(_) => Err(PerfError::Broker(format!(
                "the broker at {} cancelled the consumer on channel {channel} (queue deleted?)",
                self.connection.address
            ))),
            Method::ChannelClose(close) => Err(super::broker_closed(
                "consuming",
                channel,
                close.reply_code,
                &close.reply_text,
            )),
            Method::ConnectionClose(close) => Err(super::broker_closed(
                "consuming",
                0,
                close.reply_code,
                &close.reply_text,
            )),
            other => Err(PerfError::Protocol(format!(
                "unexpected {} on consumer channel {channel} from {}",
                other.name(),
                self.connection.address
            ))),
        }
    }

    fn slot(&mut self, channel: u16) -> Result<&mut Option<Pending>, PerfError> {
        let address = &self.connection.address;
        let index = usize::from(channel).wrapping_sub(1);
        self.pending.get_mut(index).ok_or_else(|| {
            PerfError::Protocol(format!(
                "frame for unknown channel {channel} from {address}"
            ))
        })
    }

    /// The delivery on `channel`, once its whole body has arrived.
    fn complete(&mut self, channel: u16) -> Option<(usize, Pending)> {
        let index = usize::from(channel).wrapping_sub(1);
        let slot = self.pending.get_mut(index)?;
        if let Some(Pending {
            body_left: Some(0), ..
        }) = slot
        {
            return slot.take().map(|pending| (index, pending));
        }
        None
    }

    fn out_of_order(&self, channel: u16, what: &str) -> PerfError {
        PerfError::Protocol(format!(
            "{what} without basic.deliver on channel {channel} from {}",
            self.connection.address
        ))
    }
}

impl ConsumerLink for Consumer {
    async fn receive<F>(
        &mut self,
        max: usize,
        deadline: Instant,
        sink: &mut F,
    ) -> Result<usize, PerfError>
    where
        F: FnMut(Delivery<'_>) + Send,
    {
        debug_assert!(max > 0, "invariant: callers ask for at least one delivery");
        let mut handed = 0;
        loop {
            while handed < max {
                let Some(frame) = self.connection.decode_buffered()? else {
                    break;
                };
                if let Some((channel, pending)) = self.on_frame(frame)? {
                    let head = pending.head.get(..pending.head_len).unwrap_or_default();
                    sink(Delivery {
                        channel,
                        tag: pending.tag,
                        head,
                    });
                    handed += 1;
                }
            }
            if handed > 0 {
                return Ok(handed);
            }
            self.flush().await?;
            match tokio::time::timeout_at(deadline, self.connection.read_more()).await {
                Ok(result) => result?,
                Err(_) => return Ok(0),
            }
        }
    }

    fn settle(&mut self, channel: usize, tag: u64, multiple: bool) {
        let ack = Method::BasicAck(BasicAck {
            delivery_tag: tag,
            multiple,
        });
        let number = u16::try_from(channel + 1).unwrap_or(u16::MAX);
        encode_method_frame(number, &ack, &mut self.connection.write_buf);
    }

    async fn flush(&mut self) -> Result<(), PerfError> {
        self.connection.heartbeat_if_due(Instant::now());
        self.connection.flush_all().await
    }

    async fn close(self) -> Result<(), PerfError> {
        self.connection.close().await
    }
}

/// Keeps the first bytes of the body, across body frames.
fn keep_head(head: &mut [u8; STAMP_WITH_PRODUCER_BYTES], head_len: &mut usize, payload: &Bytes) {
    let room = STAMP_WITH_PRODUCER_BYTES - *head_len;
    let take = room.min(payload.len());
    if let (Some(to), Some(from)) = (
        head.get_mut(*head_len..*head_len + take),
        payload.get(..take),
    ) {
        to.copy_from_slice(from);
        *head_len += take;
    }
}

/// The queue a channel consumes from: a named one, or a server-named exclusive queue declared
/// and bound on this connection.
async fn queue_of(
    connection: &mut Connection,
    channel: u16,
    source: &Source,
    setup: &ConsumerSetup,
) -> Result<ShortStr, PerfError> {
    let (exchange, routing_key) = match source {
        Source::Named(name) => return Ok(ShortStr::from(name.as_str())),
        Source::ServerNamed {
            exchange,
            routing_key,
        } => (exchange, routing_key),
    };
    let declare = Method::QueueDeclare(QueueDeclare {
        exclusive: true,
        auto_delete: true,
        arguments: field_table(&setup.queue_arguments),
        ..Default::default()
    });
    let queue = match connection
        .call(channel, &declare, "declaring a server-named queue")
        .await?
    {
        Method::QueueDeclareOk(ok) => ok.queue,
        other => {
            return Err(PerfError::Protocol(format!(
                "expected queue.declare-ok, got {}",
                other.name()
            )))
        }
    };
    let bind = Method::QueueBind(QueueBind {
        queue: queue.clone(),
        exchange: ShortStr::from(exchange.as_str()),
        routing_key: ShortStr::from(routing_key.as_str()),
        ..Default::default()
    });
    let what = format!("binding queue '{queue}' to exchange '{exchange}'");
    connection.call(channel, &bind, &what).await?;
    Ok(queue)
}

/// `-qa`/`-ca` arguments as a field table: integers as signed 64-bit (`l`), as RabbitMQ's Java
/// client sends a Long.
pub fn field_table(arguments: &[(String, ArgValue)]) -> FieldTable {
    let mut table = FieldTable::default();
    for (key, value) in arguments {
        let value = match value {
            ArgValue::Int(n) => FieldValue::I64(*n),
            ArgValue::Bool(b) => FieldValue::Bool(*b),
            ArgValue::Text(s) => FieldValue::LongStr(Bytes::from(s.clone())),
        };
        table.insert(key.as_str(), value);
    }
    table
}
