//! Subscriptions: Subscribe, Credit, Unsubscribe, the task that reads each subscription's
//! chunks, the Deliver frames written from them, and what happens when a stream the
//! connection uses is deleted (MetadataUpdate).
//!
//! Each subscription's task takes one credit per chunk (RabbitMQ counts credit in chunks),
//! reads the next committed chunk with one pread (`LogReader::next_chunk`), and hands it to the
//! connection through the bounded mailbox every subscription of the connection shares. When it
//! is caught up it waits for the stream to grow (`StreamHandle::wait_beyond`). The connection
//! writes the Deliver header and then the chunk's bytes as they were read: one vectored write
//! per turn, nothing done per message.
//!
//! A watcher task per stream in use learns of the stream's deletion; the connection then drops
//! that stream's publishers and subscriptions and sends MetadataUpdate (stream not available),
//! as RabbitMQ does.

use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use warren_core::access::Perm;
use warren_core::queue::stream::StreamHandle;
use warren_core::registry::StreamConsumerGuard;
use warren_proto::stream::{
    encode_deliver_header, key, response_code, AdminCommand, Command, OffsetSpec, Properties,
    SubscribeCommand,
};
use warren_store::{Chunk, LogReader, ReadStart};

use super::connection::Connection;

/// What subscription and watcher tasks tell their connection.
pub enum Event {
    /// A chunk for a subscription; `serial` tells a chunk of an ended subscription whose id
    /// was reused from one of the current subscription.
    Chunk {
        subscription_id: u8,
        serial: u64,
        chunk: Chunk,
        committed_chunk_id: u64,
    },
    /// The subscription's log could not be read; it has ended.
    ReadFailed {
        subscription_id: u8,
        serial: u64,
        error: String,
    },
    /// The stream was deleted.
    StreamGone { stream: Arc<str> },
}

/// A subscription of this connection.
pub struct Subscription {
    pub stream: Arc<str>,
    serial: u64,
    /// Chunks the client allows (Subscribe's initial credit, then Credit commands).
    credit: Arc<Semaphore>,
    task: JoinHandle<()>,
    /// Lists the subscription in the management API while it lives, and counts deliveries.
    listed: Option<StreamConsumerGuard>,
}

impl Connection {
    pub(super) fn on_subscribe_command(&mut self, command: SubscribeCommand) {
        match command {
            SubscribeCommand::Subscribe {
                correlation_id,
                subscription_id,
                stream,
                offset,
                credit,
                properties,
            } => {
                let code = self.subscribe(subscription_id, &stream, offset, credit, &properties);
                self.respond(key::SUBSCRIBE, correlation_id, code);
            }
            SubscribeCommand::Credit {
                subscription_id,
                credit,
            } => match self.subscriptions.get(&subscription_id) {
                Some(subscription) => subscription.credit.add_permits(usize::from(credit)),
                None => {
                    let response = SubscribeCommand::CreditResponse {
                        code: response_code::SUBSCRIPTION_ID_DOES_NOT_EXIST,
                        subscription_id,
                    };
                    self.send(&Command::Subscribe(response));
                }
            },
            SubscribeCommand::Unsubscribe {
                correlation_id,
                subscription_id,
            } => {
                let code = match self.subscriptions.remove(&subscription_id) {
                    Some(subscription) => {
                        subscription.task.abort();
                        self.unwatch_if_unused(&subscription.stream);
                        response_code::OK
                    }
                    None => response_code::SUBSCRIPTION_ID_DOES_NOT_EXIST,
                };
                self.respond(key::UNSUBSCRIBE, correlation_id, code);
            }
            other => self.on_offset_command(other),
        }
    }

    /// Subscribe's checks, in RabbitMQ's order; the response code. On success the
    /// subscription's task starts reading.
    fn subscribe(
        &mut self,
        subscription_id: u8,
        stream: &str,
        offset: OffsetSpec,
        credit: u16,
        properties: &Properties,
    ) -> u16 {
        if let Some(feature) = unsupported_feature(properties) {
            tracing::warn!(
                connection = self.id,
                "subscription {subscription_id} to stream '{stream}' refused: Warren does not \
                 implement {feature} yet"
            );
            return response_code::PRECONDITION_FAILED;
        }
        if let Err(error) = self.check(Perm::Read, stream) {
            tracing::info!(connection = self.id, "subscribe refused: {}", error.text);
            return response_code::ACCESS_REFUSED;
        }
        if self.subscriptions.contains_key(&subscription_id) {
            return response_code::SUBSCRIPTION_ID_ALREADY_EXISTS;
        }
        let handle = match self.stream_handle(stream) {
            Ok(handle) => handle,
            Err(code) => return code,
        };
        let reader = match handle.view().reader(read_start(offset)) {
            Ok(reader) => reader,
            Err(error) => {
                tracing::warn!(connection = self.id, %error, "cannot read stream '{stream}'");
                return response_code::INTERNAL_ERROR;
            }
        };
        let stream: Arc<str> = Arc::from(stream);
        self.watch(&stream, &handle);
        self.subscription_serial += 1;
        let serial = self.subscription_serial;
        let credit = Arc::new(Semaphore::new(usize::from(credit)));
        let reading = Reading {
            handle,
            reader,
            credit: credit.clone(),
            subscription_id,
            serial,
            events_tx: self.events_tx.clone(),
        };
        let listed = self.registry_entry().map(|entry| {
            let listed = entry.add_stream_consumer(
                subscription_id,
                stream.clone(),
                properties.clone(),
                credit.clone(),
            );
            listed.starts_at(reading.reader.position());
            listed
        });
        let task = tokio::spawn(reading.run());
        let subscription = Subscription {
            stream,
            serial,
            credit,
            task,
            listed,
        };
        self.subscriptions.insert(subscription_id, subscription);
        response_code::OK
    }

    /// One event from the mailbox.
    pub(super) fn on_event(&mut self, event: super::subscription::Event) {
        match event {
            Event::Chunk {
                subscription_id,
                serial,
                chunk,
                committed_chunk_id,
            } => {
                let current = self.subscriptions.get(&subscription_id);
                if current.is_none_or(|s| s.serial != serial) {
                    return; // unsubscribed meanwhile
                }
                if let Some(listed) = current.and_then(|s| s.listed.as_ref()) {
                    let records = u64::from(chunk.num_records);
                    let last = chunk.first_offset + records.saturating_sub(1);
                    listed.delivered(records, last);
                }
                let committed = self.deliver_v2.then_some(committed_chunk_id);
                let bytes = std::slice::from_ref(&chunk.bytes);
                match encode_deliver_header(self.out.encode(), subscription_id, committed, bytes) {
                    Ok(()) => self.out.push_bytes(chunk.bytes),
                    Err(error) => tracing::error!(connection = self.id, %error, "chunk not sent"),
                }
            }
            Event::ReadFailed {
                subscription_id,
                serial,
                error,
            } => {
                tracing::error!(connection = self.id, subscription_id, %error, "stream read failed");
                if let Some(subscription) = self.subscriptions.get(&subscription_id) {
                    if subscription.serial == serial {
                        let stream = subscription.stream.clone();
                        self.subscriptions.remove(&subscription_id);
                        self.unwatch_if_unused(&stream);
                    }
                }
            }
            Event::StreamGone { stream } => self.stream_gone(stream),
        }
    }

    /// The stream was deleted: its publishers and subscriptions go, the client is told.
    fn stream_gone(&mut self, stream: Arc<str>) {
        if let Some(watcher) = self.watchers.remove(&stream) {
            watcher.abort();
        }
        let pending_publisher = self.pending.as_ref().map(|p| p.publisher_id());
        let pending_gone = pending_publisher
            .and_then(|id| self.publishers.get(&id))
            .is_some_and(|publisher| publisher.stream == stream);
        if pending_gone {
            self.pending = None;
        }
        self.publishers.retain(|_, p| p.stream != stream);
        self.subscriptions.retain(|_, s| {
            let keep = s.stream != stream;
            if !keep {
                s.task.abort();
            }
            keep
        });
        let update = AdminCommand::MetadataUpdate {
            code: response_code::STREAM_NOT_AVAILABLE,
            stream: stream.to_string(),
        };
        self.send(&Command::Admin(update));
    }

    /// Starts watching `stream` for its deletion, unless the connection already does.
    pub(super) fn watch(&mut self, stream: &Arc<str>, handle: &StreamHandle) {
        if self.watchers.contains_key(stream) {
            return;
        }
        let (handle, events_tx, name) = (handle.clone(), self.events_tx.clone(), stream.clone());
        let watcher = tokio::spawn(async move {
            // The committed end never moves past u64::MAX: this resolves only with the
            // stream's deletion.
            if handle.wait_beyond(u64::MAX).await.is_err() {
                let _ = events_tx.send(Event::StreamGone { stream: name }).await;
            }
        });
        self.watchers.insert(stream.clone(), watcher);
    }

    /// Stops watching `stream` once no publisher or subscription uses it.
    pub(super) fn unwatch_if_unused(&mut self, stream: &Arc<str>) {
        let used = self.publishers.values().any(|p| p.stream == *stream)
            || self.subscriptions.values().any(|s| s.stream == *stream);
        if !used {
            if let Some(watcher) = self.watchers.remove(stream) {
                watcher.abort();
            }
        }
    }

    /// Ends every subscription and watcher (teardown).
    pub(super) fn end_subscriptions(&mut self) {
        for (_, subscription) in self.subscriptions.drain() {
            subscription.task.abort();
        }
        for (_, watcher) in self.watchers.drain() {
            watcher.abort();
        }
    }
}

/// A subscription's task: reads chunks while it has credit, waits for the stream when caught
/// up.
struct Reading {
    handle: StreamHandle,
    reader: LogReader,
    credit: Arc<Semaphore>,
    subscription_id: u8,
    serial: u64,
    events_tx: mpsc::Sender<Event>,
}

impl Reading {
    async fn run(mut self) {
        loop {
            let Ok(permit) = self.credit.acquire().await else {
                return;
            };
            let end = self.handle.view().next_offset();
            match self.reader.next_chunk() {
                Ok(Some(chunk)) => {
                    permit.forget();
                    let committed_chunk_id = self
                        .handle
                        .view()
                        .last_chunk_offset()
                        .unwrap_or(chunk.first_offset);
                    let event = Event::Chunk {
                        subscription_id: self.subscription_id,
                        serial: self.serial,
                        chunk,
                        committed_chunk_id,
                    };
                    if self.events_tx.send(event).await.is_err() {
                        return;
                    }
                }
                Ok(None) => {
                    drop(permit);
                    // Deletion is the watcher's to report.
                    let caught_up = end.max(self.reader.position());
                    if self.handle.wait_beyond(caught_up).await.is_err() {
                        return;
                    }
                }
                Err(error) => {
                    let event = Event::ReadFailed {
                        subscription_id: self.subscription_id,
                        serial: self.serial,
                        error: error.to_string(),
                    };
                    let _ = self.events_tx.send(event).await;
                    return;
                }
            }
        }
    }
}

/// Where a reader from `offset` starts.
pub fn read_start(offset: OffsetSpec) -> ReadStart {
    match offset {
        OffsetSpec::First => ReadStart::First,
        OffsetSpec::Last => ReadStart::Last,
        OffsetSpec::Next => ReadStart::Next,
        OffsetSpec::Offset(offset) => ReadStart::Offset(offset),
        OffsetSpec::Timestamp(timestamp_ms) => ReadStart::Timestamp(timestamp_ms),
    }
}

/// A subscription property asking for what Warren does not implement yet: single active
/// consumer, super streams, filtering.
fn unsupported_feature(properties: &Properties) -> Option<&'static str> {
    properties
        .iter()
        .find_map(|(name, value)| match name.as_str() {
            "single-active-consumer" if value == "true" => Some("single active consumer"),
            "super-stream" => Some("super streams"),
            name if name.starts_with("filter.") => Some("stream filtering"),
            _ => None,
        })
}
