//! A stream's AMQP 0.9.1 and 1.0 consumers: each reads the log through its own `LogReader`,
//! one chunk at a time as its credit allows (a consumer from `first` never holds more than a
//! chunk of a long stream), and hands decoded messages to its connection's outbox. A
//! delivery's `seq` is the record's offset; acknowledging only returns credit (the
//! connection's `Credit`), since a stream keeps its messages.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use warren_store::{LogReader, LogView, ReadStart};

use super::StreamEncoding;
use crate::consumer::{Consumer, ConsumerId, Delivery, Event};
use crate::error::BrokerError;
use crate::queue::{Action, ConsumeStart, QueueHandle};

/// One consumer and where it is in the log.
struct Reader {
    consumer: Consumer,
    credit: u32,
    log: LogReader,
    /// Records below this offset are not delivered: a consumer from offset N starts in the
    /// middle of the chunk that holds N, one from `next` at the committed end.
    from_offset: u64,
    /// Records of the chunk being delivered, not delivered yet.
    pending: VecDeque<(u64, Bytes)>,
}

/// Every AMQP consumer of one stream.
#[derive(Default)]
pub struct Readers {
    readers: Vec<Reader>,
    /// Deliveries made and acknowledgements received (statistics).
    pub delivered_total: u64,
    pub acknowledged_total: u64,
}

/// Where a consumer's reader starts: osiris's offset spec (RabbitMQ's default is `next`).
fn read_start(start: Option<ConsumeStart>) -> ReadStart {
    match start.unwrap_or(ConsumeStart::Next) {
        ConsumeStart::First => ReadStart::First,
        ConsumeStart::Last => ReadStart::Last,
        ConsumeStart::Next => ReadStart::Next,
        ConsumeStart::Offset(offset) => ReadStart::Offset(offset),
        ConsumeStart::Timestamp { ms } => ReadStart::Timestamp(ms),
    }
}

impl Readers {
    pub fn len(&self) -> usize {
        self.readers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.readers.is_empty()
    }

    /// Adds a consumer at its start (`Err` when the log cannot be read).
    pub fn add(&mut self, consumer: Consumer, view: &LogView) -> Result<(), BrokerError> {
        let start = read_start(consumer.start);
        let log = view.reader(start).map_err(|error| {
            BrokerError::internal(format!("cannot read the stream's log: {error}"))
        })?;
        let from_offset = match start {
            ReadStart::Offset(offset) => offset,
            ReadStart::Next => view.next_offset(),
            _ => 0,
        };
        self.readers.push(Reader {
            credit: consumer.credit,
            consumer,
            log,
            from_offset,
            pending: VecDeque::new(),
        });
        Ok(())
    }

    /// Removes a consumer; `false` when it was not there.
    pub fn remove(&mut self, id: ConsumerId) -> bool {
        let before = self.readers.len();
        self.readers.retain(|reader| reader.consumer.id != id);
        self.readers.len() != before
    }

    pub fn grant(&mut self, id: ConsumerId, credit: u32) {
        if let Some(reader) = self.readers.iter_mut().find(|r| r.consumer.id == id) {
            reader.credit = reader.credit.saturating_add(credit);
        }
    }

    /// Delivers to every consumer what its credit allows of what is committed.
    pub fn deliver(&mut self, queue: &QueueHandle, encoding: &dyn StreamEncoding) {
        let mut delivered = 0;
        for reader in &mut self.readers {
            let mut events = Vec::new();
            reader.fill(queue, encoding, &mut events);
            if events.is_empty() {
                continue;
            }
            delivered += events.len() as u64;
            let outbox = reader.consumer.outbox.clone();
            let _ = Action::Deliver { outbox, events }.apply();
        }
        self.delivered_total += delivered;
    }

    /// Tells every consumer it was cancelled (the stream was deleted).
    pub fn cancel_all(&mut self) {
        for reader in self.readers.drain(..) {
            let consumer = reader.consumer;
            consumer.outbox.push(Event::ConsumerCancelled {
                channel: consumer.channel,
                consumer: consumer.id,
                consumer_tag: consumer.tag.clone(),
            });
        }
    }
}

impl Reader {
    fn fill(
        &mut self,
        queue: &QueueHandle,
        encoding: &dyn StreamEncoding,
        events: &mut Vec<Event>,
    ) {
        while self.credit > 0 {
            let Some((offset, record)) = self.next_record() else {
                return;
            };
            let message = match encoding.decode(offset, record) {
                Ok(message) => message,
                Err(error) => {
                    tracing::warn!(
                        "{}: the record at offset {offset} is not delivered to consumer \
                         '{}': {error}",
                        queue.def().resource(),
                        self.consumer.tag
                    );
                    continue;
                }
            };
            self.credit -= 1;
            events.push(Event::Deliver(Delivery {
                channel: self.consumer.channel,
                consumer: self.consumer.id,
                consumer_tag: self.consumer.tag.clone(),
                queue: queue.clone(),
                seq: offset,
                message: Arc::new(message),
                redelivered: false,
            }));
        }
    }

    /// The next record to deliver: from the chunk being delivered, or the next committed
    /// chunk; `None` when caught up (or the log cannot be read, which is logged).
    fn next_record(&mut self) -> Option<(u64, Bytes)> {
        loop {
            if let Some(record) = self.pending.pop_front() {
                return Some(record);
            }
            let chunk = match self.log.next_chunk() {
                Ok(Some(chunk)) => chunk,
                Ok(None) => return None,
                Err(error) => {
                    tracing::warn!(
                        "stream consumer '{}' cannot read on: {error}",
                        self.consumer.tag
                    );
                    return None;
                }
            };
            for record in chunk.records() {
                match record {
                    Ok((offset, data)) if offset >= self.from_offset => {
                        self.pending.push_back((offset, data));
                    }
                    Ok(_) => {}
                    Err(error) => tracing::warn!(
                        "stream consumer '{}': records of the chunk at offset {} are not \
                         delivered: {error}",
                        self.consumer.tag,
                        chunk.first_offset
                    ),
                }
            }
        }
    }
}
