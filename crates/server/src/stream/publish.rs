//! Publishing: DeclarePublisher, Publish (v1 and v2), the PublishConfirm and PublishError
//! frames written from the stream's outcomes, QueryPublisherSequence and DeletePublisher.
//!
//! The messages of the Publish frames one read brought, publisher by publisher, go to the
//! stream as one `StreamPublish` whose bodies are slices of the read buffer. Handing it over
//! waits while the stream's mailbox is full; meanwhile the connection reads nothing, which is
//! the back-pressure TCP carries to the client. Outcomes come back later through the
//! connection's `ConfirmInbox` (see `Connection::write_outcomes`).

use std::sync::Arc;

use warren_core::access::{Perm, ResourceKind};
use warren_core::queue::stream::{StreamHandle, StreamOutcome, StreamPublish};
use warren_core::registry::StreamPublisherGuard;
use warren_proto::stream::{key, response_code, Command, PublishCommand, PublishedMessage};
use warren_store::Entry;

use super::connection::Connection;
use super::fault::Fault;

/// Messages in one batch handed to a stream; a publisher sending more in one read is handed
/// over in several batches.
const PUBLISH_BATCH_MAX: usize = 8192;
/// Publishing ids in one PublishConfirm or PublishError frame (far below any frame_max).
const OUTCOME_IDS_MAX: usize = 4096;
/// The longest publisher reference (the spec's "max 256 characters").
const REFERENCE_BYTES_MAX: usize = 256;

/// A declared publisher.
pub struct Publisher {
    pub stream: Arc<str>,
    pub reference: Option<Arc<str>>,
    pub handle: StreamHandle,
    /// Lists the publisher in the management API while it lives, and counts its messages.
    pub listed: Option<StreamPublisherGuard>,
}

/// A publisher's messages not yet handed to its stream.
pub struct Pending {
    handle: StreamHandle,
    batch: StreamPublish,
}

impl Pending {
    pub fn publisher_id(&self) -> u8 {
        self.batch.publisher_id
    }
}

impl Connection {
    /// Publish frames (the hot path) and the other publishing commands.
    pub(super) async fn on_publish(&mut self, command: PublishCommand) -> Result<(), Fault> {
        match command {
            PublishCommand::Publish {
                publisher_id,
                messages,
                ..
            } => self.publish(publisher_id, messages).await,
            PublishCommand::DeclarePublisher {
                correlation_id,
                publisher_id,
                reference,
                stream,
            } => {
                let code = self.declare_publisher(publisher_id, reference, &stream);
                self.respond(key::DECLARE_PUBLISHER, correlation_id, code);
                Ok(())
            }
            PublishCommand::QueryPublisherSequenceRequest {
                correlation_id,
                reference,
                stream,
            } => {
                let (code, sequence) = self.query_publisher_sequence(&reference, &stream).await;
                let response = PublishCommand::QueryPublisherSequenceResponse {
                    correlation_id,
                    code,
                    sequence,
                };
                self.send(&Command::Publish(response));
                Ok(())
            }
            PublishCommand::DeletePublisher {
                correlation_id,
                publisher_id,
            } => {
                self.hand_over_pending().await?;
                let code = match self.publishers.remove(&publisher_id) {
                    Some(publisher) => {
                        self.unwatch_if_unused(&publisher.stream);
                        response_code::OK
                    }
                    None => response_code::PUBLISHER_DOES_NOT_EXIST,
                };
                self.respond(key::DELETE_PUBLISHER, correlation_id, code);
                Ok(())
            }
            other => Err(Fault::close(
                response_code::UNKNOWN_FRAME,
                format!("{:?} is sent by the server only", other.key()),
            )),
        }
    }

    /// Adds a Publish frame's messages to the publisher's pending batch.
    async fn publish(
        &mut self,
        publisher_id: u8,
        messages: Vec<PublishedMessage>,
    ) -> Result<(), Fault> {
        let Some(publisher) = self.publishers.get(&publisher_id) else {
            let ids = messages.iter().map(|m| m.publishing_id).collect();
            self.publish_error(publisher_id, ids, response_code::PUBLISHER_DOES_NOT_EXIST);
            return Ok(());
        };
        if let Some(listed) = &publisher.listed {
            listed.published(messages.len() as u64);
        }
        let (handle, reference) = (publisher.handle.clone(), publisher.reference.clone());
        let same = self
            .pending
            .as_ref()
            .is_some_and(|p| p.batch.publisher_id == publisher_id);
        if !same {
            self.hand_over_pending().await?;
        }
        let mut filtered = Vec::new();
        for message in messages {
            if message.filter_value.is_some() {
                filtered.push(message.publishing_id);
                continue;
            }
            let pending = self.pending.get_or_insert_with(|| Pending {
                handle: handle.clone(),
                batch: StreamPublish {
                    publisher_id,
                    reference: reference.clone(),
                    messages: Vec::new(),
                    confirms: self.confirms.clone(),
                },
            });
            pending
                .batch
                .messages
                .push((message.publishing_id, entry(message)));
            if pending.batch.messages.len() >= PUBLISH_BATCH_MAX {
                self.hand_over_pending().await?;
            }
        }
        if !filtered.is_empty() {
            tracing::warn!(
                connection = self.id,
                "publish with filter values refused: Warren does not implement stream filtering yet"
            );
            self.publish_error(publisher_id, filtered, response_code::PRECONDITION_FAILED);
        }
        Ok(())
    }

    /// Hands the pending batch to its stream, waiting for room in the stream's mailbox. A
    /// stream that is gone fails the batch's messages.
    pub(super) async fn hand_over_pending(&mut self) -> Result<(), Fault> {
        let Some(Pending { handle, batch }) = self.pending.take() else {
            return Ok(());
        };
        debug_assert!(
            !batch.messages.is_empty(),
            "invariant: a pending batch has messages"
        );
        let publisher_id = batch.publisher_id;
        let ids: Vec<u64> = batch.messages.iter().map(|(id, _)| *id).collect();
        if let Err(error) = handle.publish(batch).await {
            tracing::debug!(connection = self.id, error = %error.text, "stream publish failed");
            self.publish_error(publisher_id, ids, response_code::STREAM_NOT_AVAILABLE);
        }
        Ok(())
    }

    /// Writes one outcome the stream reported.
    pub(super) fn write_outcome(&mut self, outcome: StreamOutcome) {
        match outcome {
            StreamOutcome::Confirmed { publisher_id, ids } => {
                if let Some(listed) = self.listed_publisher(publisher_id) {
                    listed.confirmed(ids.len() as u64);
                }
                for ids in ids.chunks(OUTCOME_IDS_MAX) {
                    let confirm = PublishCommand::PublishConfirm {
                        publisher_id,
                        publishing_ids: ids.to_vec(),
                    };
                    self.send(&Command::Publish(confirm));
                }
            }
            StreamOutcome::Failed {
                publisher_id,
                ids,
                code,
            } => self.publish_error(publisher_id, ids, code),
        }
    }

    fn publish_error(&mut self, publisher_id: u8, ids: Vec<u64>, code: u16) {
        if let Some(listed) = self.listed_publisher(publisher_id) {
            listed.errored(ids.len() as u64);
        }
        for ids in ids.chunks(OUTCOME_IDS_MAX) {
            let error = PublishCommand::PublishError {
                publisher_id,
                errors: ids.iter().map(|id| (*id, code)).collect(),
            };
            self.send(&Command::Publish(error));
        }
    }

    /// DeclarePublisher's checks, in RabbitMQ's order; the response code.
    fn declare_publisher(
        &mut self,
        publisher_id: u8,
        reference: Option<String>,
        stream: &str,
    ) -> u16 {
        if !self.alarms_now().is_empty() {
            tracing::info!(
                connection = self.id,
                "cannot create publisher {publisher_id} on stream '{stream}': the connection is \
                 blocked by a resource alarm"
            );
            return response_code::PRECONDITION_FAILED;
        }
        if let Err(error) = self.check(Perm::Write, stream) {
            tracing::info!(
                connection = self.id,
                "declare publisher refused: {}",
                error.text
            );
            return response_code::ACCESS_REFUSED;
        }
        let reference = reference.filter(|r| !r.is_empty());
        if reference
            .as_ref()
            .is_some_and(|r| r.len() > REFERENCE_BYTES_MAX)
        {
            return response_code::PRECONDITION_FAILED;
        }
        let taken = self.publishers.values().any(|p| {
            &*p.stream == stream
                && p.reference.as_deref() == reference.as_deref()
                && reference.is_some()
        });
        if taken || self.publishers.contains_key(&publisher_id) {
            tracing::warn!(
                connection = self.id,
                "publisher {publisher_id} on stream '{stream}' refused: its id or reference is \
                 already taken on this connection"
            );
            return response_code::PRECONDITION_FAILED;
        }
        let handle = match self.stream_handle(stream) {
            Ok(handle) => handle,
            Err(code) => return code,
        };
        let stream: Arc<str> = Arc::from(stream);
        self.watch(&stream, &handle);
        let reference: Option<Arc<str>> = reference.map(Arc::from);
        let listed = self
            .registry_entry()
            .map(|e| e.add_stream_publisher(publisher_id, stream.clone(), reference.clone()));
        let publisher = Publisher {
            stream,
            reference,
            handle,
            listed,
        };
        self.publishers.insert(publisher_id, publisher);
        response_code::OK
    }

    /// The management API's record of a publisher, to count its outcomes.
    fn listed_publisher(&self, publisher_id: u8) -> Option<&StreamPublisherGuard> {
        self.publishers.get(&publisher_id)?.listed.as_ref()
    }

    /// QueryPublisherSequence: the last publishing id stored for `reference` (0 for none).
    async fn query_publisher_sequence(&mut self, reference: &str, stream: &str) -> (u16, u64) {
        if self.check(Perm::Read, stream).is_err() {
            return (response_code::ACCESS_REFUSED, 0);
        }
        let handle = match self.stream_handle(stream) {
            Ok(handle) => handle,
            Err(code) => return (code, 0),
        };
        match handle.query_publisher_sequence(reference).await {
            Ok(sequence) => (response_code::OK, sequence),
            Err(error) => {
                tracing::debug!(connection = self.id, error = %error.text, "query failed");
                (response_code::STREAM_NOT_AVAILABLE, 0)
            }
        }
    }

    /// Checks one permission on the stream `name` (a queue) of the connection's vhost.
    pub(super) fn check(&self, perm: Perm, name: &str) -> Result<(), warren_core::BrokerError> {
        self.grant
            .as_deref()
            .expect("invariant: commands are handled only after Open")
            .check(perm, ResourceKind::Queue, name)
    }
}

/// The log entry a published message becomes: a simple entry, or the sub-batch the client
/// made (kept as it came, compressed or not).
fn entry(message: PublishedMessage) -> Entry {
    match message.sub_batch {
        None => Entry::Simple(message.message),
        Some(sub_batch) => Entry::SubBatch {
            compression: sub_batch.compression,
            records: sub_batch.records,
            uncompressed_len: sub_batch.uncompressed_len,
            data: message.message,
        },
    }
}
