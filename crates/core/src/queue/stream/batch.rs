//! What one turn of a stream's writer collects into one chunk: the entries, the producer
//! references they advance, and whom to tell once the chunk is durable.
//!
//! Deduplication follows RabbitMQ: a publisher that names a producer reference numbers its
//! messages with increasing publishing ids, and a message whose id is not above the last one
//! stored for the reference (in the log, or earlier in this batch) is confirmed and not
//! stored. The log keeps the last id of each reference in the chunk it writes, so the
//! decision survives restarts.

use std::sync::Arc;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use warren_store::Entry;

use super::handle::{ConfirmInbox, StreamOutcome, StreamPublish};
use crate::confirm::ConfirmTicket;

/// Entries in one chunk at most: osiris counts a chunk's entries in 16 bits.
pub const CHUNK_ENTRIES_MAX: usize = u16::MAX as usize;
/// A batch this large is written before more is taken in (a chunk of a few MiB keeps a
/// reader's one read, and a consumer's memory, bounded).
pub const CHUNK_ENTRIES_SOFT_MAX: usize = 16_384;
pub const CHUNK_BYTES_SOFT_MAX: usize = 4 * 1024 * 1024;

/// A stream publisher's ids to confirm once the chunk is durable.
pub struct StreamConfirm {
    pub inbox: Arc<ConfirmInbox>,
    pub publisher_id: u8,
    pub ids: Vec<u64>,
}

/// One chunk in the making (see the module doc).
#[derive(Default)]
pub struct Batch {
    pub entries: Vec<Entry>,
    bytes: usize,
    /// The last publishing id of each producer reference this batch advances.
    writers: FxHashMap<Arc<str>, u64>,
    pub tickets: Vec<ConfirmTicket>,
    pub confirms: Vec<StreamConfirm>,
    /// Messages taken from AMQP publishers (statistics).
    pub published: u64,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.tickets.is_empty() && self.confirms.is_empty()
    }

    /// Whether the batch should be written before it takes more.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= CHUNK_ENTRIES_SOFT_MAX || self.bytes >= CHUNK_BYTES_SOFT_MAX
    }

    /// Whether `more` entries would overflow a chunk: the batch is written first.
    pub fn would_overflow(&self, more: usize) -> bool {
        self.entries.len() + more > CHUNK_ENTRIES_MAX
    }

    /// An AMQP publish: its messages, already encoded, and its ticket.
    pub fn add_records(&mut self, records: Vec<Bytes>, ticket: Option<ConfirmTicket>) {
        self.published += records.len() as u64;
        for record in records {
            self.bytes += record.len();
            self.entries.push(Entry::Simple(record));
        }
        self.tickets.extend(ticket);
    }

    /// A stream publisher's batch, deduplicated by its reference against `stored` (the last
    /// id the log holds for a reference) and what this batch already took.
    pub fn add_stream(&mut self, publish: StreamPublish, stored: impl Fn(&str) -> Option<u64>) {
        let StreamPublish {
            publisher_id,
            reference,
            messages,
            confirms: inbox,
        } = publish;
        let mut ids = Vec::with_capacity(messages.len());
        let mut last = reference
            .as_ref()
            .and_then(|r| self.writers.get(r).copied().or_else(|| stored(r)));
        for (id, entry) in messages {
            ids.push(id);
            if reference.is_some() {
                if last.is_some_and(|last| id <= last) {
                    continue; // a duplicate: confirmed, not stored
                }
                last = Some(id);
            }
            self.bytes += entry_bytes(&entry);
            self.entries.push(entry);
        }
        if let (Some(reference), Some(last)) = (reference, last) {
            self.writers.insert(reference, last);
        }
        self.confirms.push(StreamConfirm {
            inbox,
            publisher_id,
            ids,
        });
    }

    /// The (producer reference, last publishing id) pairs the chunk records.
    pub fn writers(&self) -> Vec<(Bytes, u64)> {
        self.writers
            .iter()
            .map(|(reference, id)| (Bytes::copy_from_slice(reference.as_bytes()), *id))
            .collect()
    }

    /// Takes what is to be told once the chunk is durable, leaving an empty batch.
    pub fn take_outcomes(&mut self) -> Outcomes {
        self.entries.clear();
        self.bytes = 0;
        self.writers.clear();
        self.published = 0;
        Outcomes {
            tickets: std::mem::take(&mut self.tickets),
            confirms: std::mem::take(&mut self.confirms),
        }
    }
}

fn entry_bytes(entry: &Entry) -> usize {
    match entry {
        Entry::Simple(data) | Entry::SubBatch { data, .. } => data.len(),
    }
}

/// Whom to tell that a chunk is durable (or never will be).
pub struct Outcomes {
    tickets: Vec<ConfirmTicket>,
    confirms: Vec<StreamConfirm>,
}

/// The stream protocol's response code for an error the broker cannot describe better
/// (`internal_error`).
const INTERNAL_ERROR: u16 = 0x0f;

impl Outcomes {
    /// Settles every ticket and tells every stream publisher: confirmed when `ok`.
    pub fn settle(self, ok: bool) {
        for ticket in self.tickets {
            ticket.settle(ok);
        }
        for confirm in self.confirms {
            let StreamConfirm {
                inbox,
                publisher_id,
                ids,
            } = confirm;
            inbox.push(if ok {
                StreamOutcome::Confirmed { publisher_id, ids }
            } else {
                StreamOutcome::Failed {
                    publisher_id,
                    ids,
                    code: INTERNAL_ERROR,
                }
            });
        }
    }
}

/// The stream protocol's `stream_does_not_exist`.
const STREAM_DOES_NOT_EXIST: u16 = 0x02;

/// A publish that reached a stream being deleted: none of its messages is stored.
pub fn fail_deleted(publish: StreamPublish) {
    publish.confirms.push(StreamOutcome::Failed {
        publisher_id: publish.publisher_id,
        ids: publish.messages.iter().map(|(id, _)| *id).collect(),
        code: STREAM_DOES_NOT_EXIST,
    });
}

#[cfg(test)]
#[path = "batch_test.rs"]
mod tests;
