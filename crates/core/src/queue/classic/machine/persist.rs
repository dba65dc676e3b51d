//! The classic queue's side of the message store: recovery of what a durable queue had on
//! disk, the records a turn writes (`flush_store`: enqueues, acks, the `delivered` mark), the
//! accounting of messages that are done with (`forget`), and reading paged-out messages back
//! (`load`, `read_ahead`).
//!
//! A persistent message to a durable queue is written when published and acked when settled;
//! a message beyond the memory budget is written (transient ones too) and keeps only its
//! location in memory. The `delivered` mark goes out before deliveries do, so after a crash a
//! message a consumer may have seen comes back redelivered.

use std::sync::Arc;

use warren_store::{Location, RecordBatch, RecoveredQueue, Store};

use super::super::ready::{Ready, Stored};
use super::super::Storage;
use super::ClassicQueue;
use crate::message::Message;

/// Paged-out messages read back at once ahead of a dispatch pass.
const READ_AHEAD_MAX: usize = 256;

/// The queue's side of the message store.
pub(super) struct Persist {
    pub(super) store: Store,
    /// The store's identity of this queue.
    pub(super) id: u64,
    /// Persistent messages are written and survive restarts (durable, non-exclusive queue).
    pub(super) durable: bool,
    pub(super) memory_budget: usize,
    /// Records of this turn, written by `flush_store`.
    pub(super) batch: RecordBatch,
    /// Messages of this turn to be written, in sequence order. Their records are made by
    /// `flush_store`, so one that is done with before then (delivered to a no-ack consumer,
    /// dropped) is never written at all.
    pub(super) enqueued: Vec<Unwritten>,
    pub(super) acks: Vec<u64>,
    pub(super) locations: Vec<Location>,
    /// Highest sequence number a `delivered` record covers.
    pub(super) delivered_written: u64,
    /// A failed write was logged (the store logs the cause; the queue says it once).
    pub(super) failure_logged: bool,
}

/// A message enqueued this turn whose record `flush_store` writes unless it is done with first.
pub(super) struct Unwritten {
    pub(super) seq: u64,
    pub(super) flags: u8,
    pub(super) message: Arc<Message>,
    pub(super) deadline: Option<u64>,
    /// Beyond the memory budget: the message leaves memory once written.
    pub(super) page_out: bool,
    /// Done with before it was written: no record, no ack.
    pub(super) done: bool,
}

impl Persist {
    /// After `flush_store`: the turn's records were written (or failed and were dropped),
    /// so nothing of this turn waits for a location or an ack record.
    pub(super) fn check_flushed(&self) {
        assert!(
            self.batch.is_empty(),
            "invariant: the turn's records went out"
        );
        assert!(
            self.enqueued.is_empty(),
            "invariant: every enqueue got its location"
        );
        assert!(self.acks.is_empty(), "invariant: the turn's acks went out");
    }
}

impl ClassicQueue {
    /// Connects the queue to the message store and takes what it had on disk.
    pub(in crate::queue::classic) fn attach_store(
        &mut self,
        storage: Storage,
        recovered: Option<RecoveredQueue>,
    ) {
        let def = self.handle.def();
        self.persist = Some(Persist {
            store: storage.store,
            id: warren_store::queue_id(&def.vhost, &def.name),
            durable: def.durable && def.exclusive_owner.is_none(),
            // `x-queue-mode=lazy`: keep no message bodies in memory beyond what is delivered.
            memory_budget: if self.args.lazy {
                0
            } else {
                storage.memory_budget
            },
            batch: RecordBatch::new(),
            enqueued: Vec::new(),
            acks: Vec::new(),
            locations: Vec::new(),
            delivered_written: 0,
            failure_logged: false,
        });
        let Some(recovered) = recovered else {
            return;
        };
        self.next_seq = self.next_seq.max(recovered.next_seq);
        // Priority levels and TTL deadlines live in the stored messages: a queue that orders
        // or expires by them reads each one back once (others learn a message's deadline when
        // it is read for delivery).
        let read_back = self.args.max_priority.is_some() || self.args.message_ttl_ms.is_some();
        for m in recovered.messages {
            let mut level = 0;
            if read_back {
                if let Some((message, deadline)) = self.read_stored(m.location) {
                    level = self.args.level(message.priority);
                    if let Some(deadline) = deadline {
                        self.expiry.insert(m.seq, deadline);
                    }
                }
            }
            let stored = Stored {
                message: None,
                location: Some(m.location),
                redelivered: m.redelivered,
                gone: false,
            };
            self.ready.push(level, Ready { seq: m.seq, stored });
        }
        tracing::info!(
            "{}: recovered {} messages from the message store",
            self.handle.def().resource(),
            self.ready.len()
        );
    }

    /// Writes the records of this turn and notes where the enqueued messages went. A message
    /// already done with (delivered to a no-ack consumer in the same turn) is not written: its
    /// publisher's confirm, if any, still waits for this turn's fsync.
    pub fn flush_store(&mut self) {
        let Some(persist) = self.persist.as_mut() else {
            return;
        };
        persist.enqueued.retain(|m| !m.done);
        for m in &persist.enqueued {
            persist.batch.enqueue_with_body(
                persist.id,
                m.seq,
                m.flags,
                |out| m.message.encode_stored_head(out, m.deadline),
                m.message.body.chunks(),
            );
        }
        if !persist.acks.is_empty() {
            persist.batch.ack(persist.id, &mut persist.acks);
            persist.acks.clear();
        }
        if persist.batch.is_empty() {
            return;
        }
        let result = persist
            .store
            .append(&mut persist.batch, &mut persist.locations);
        if let Err(error) = result {
            if !persist.failure_logged {
                persist.failure_logged = true;
                tracing::error!(
                    "{}: message store write failed: {error}; messages stay in memory",
                    self.handle.def().resource()
                );
            }
            persist.enqueued.clear();
            return;
        }
        // The turn's messages are where dispatch left them: still ready or unacked.
        for (m, location) in persist.enqueued.drain(..).zip(persist.locations.drain(..)) {
            if self.ready.set_location(m.seq, location, m.page_out) {
                continue;
            }
            let stored = self.unacked.get_mut(&m.seq);
            debug_assert!(
                stored.is_some(),
                "invariant: a message not done with is ready or unacked"
            );
            if let Some(stored) = stored {
                stored.location = Some(location);
            }
        }
    }

    /// Marks a stored message as done with on disk (acked, dropped, purged).
    pub(super) fn forget(&mut self, seq: u64, stored: &Stored) {
        let Some(persist) = self.persist.as_mut() else {
            return;
        };
        let written = match stored.location {
            Some(location) => {
                persist.batch.forget(location);
                true
            }
            None => {
                // Enqueued this turn: its record is not written at all.
                if let Ok(at) = persist.enqueued.binary_search_by_key(&seq, |m| m.seq) {
                    persist.enqueued[at].done = true;
                }
                false
            }
        };
        if written && persist.durable {
            persist.acks.push(seq); // a paged-out transient message needs no ack record
        }
    }

    /// The queue is gone for good: its records are void.
    pub(super) fn erase_from_store(&mut self) {
        self.flush_store(); // the turn's records first, so every message has its location
        let Some(persist) = self.persist.as_mut() else {
            return;
        };
        persist.acks.clear();
        persist.batch.queue_deleted(persist.id);
        let stored = self
            .ready
            .iter()
            .map(|r| &r.stored)
            .chain(self.unacked.values());
        for location in stored.filter_map(|s| s.location) {
            persist.batch.forget(location);
        }
        self.flush_store();
    }

    fn read_stored(&self, location: Location) -> Option<(Message, Option<u64>)> {
        let persist = self.persist.as_ref()?;
        let read = persist.store.read(location).map_err(std::io::Error::from);
        let read = read.and_then(|bytes| {
            Message::decode_stored(bytes).ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "not a stored message")
            })
        });
        match read {
            Ok(read) => Some(read),
            Err(error) => {
                tracing::error!(
                    "{}: cannot read stored message at {location:?}: {error}",
                    self.handle.def().resource(),
                );
                None
            }
        }
    }

    /// The message of a ready entry, read back from the store when it was paged out. `None`
    /// when the stored copy is unreadable (logged; the message is dropped and forgotten).
    pub(super) fn load(&mut self, ready: &mut Ready) -> Option<Arc<Message>> {
        if let Some(message) = &ready.stored.message {
            return Some(message.clone());
        }
        let read = match self.read_ahead.remove(&ready.seq) {
            Some(read) => Some(read),
            None => ready
                .stored
                .location
                .and_then(|at| self.read_stored(at))
                .map(|(message, deadline)| (Arc::new(message), deadline)),
        };
        let Some((message, deadline)) = read else {
            let stored = ready.stored.clone();
            self.forget(ready.seq, &stored);
            self.expiry.remove(ready.seq);
            return None;
        };
        if let (Some(deadline), None) = (deadline, self.expiry.get(ready.seq)) {
            self.expiry.insert(ready.seq, deadline); // recovered: its deadline came with it
        }
        ready.stored.message = Some(message.clone());
        Some(message)
    }

    /// Before a dispatch pass takes up to `count` messages: when the next ones were paged
    /// out, reads them back together (`Store::read_many`: a read per run of neighbouring
    /// records) instead of one read each. What fails here is read again, and reported, by
    /// `load`.
    pub(super) fn read_ahead(&mut self, count: usize) {
        let Some(persist) = self.persist.as_ref() else {
            return;
        };
        let paged = self.ready.next_paged_out(count.min(READ_AHEAD_MAX));
        if paged.len() < 2 {
            return;
        }
        if self.read_ahead.len() > READ_AHEAD_MAX * 4 {
            self.read_ahead.clear(); // left behind by messages that went another way
        }
        let locations: Vec<Location> = paged.iter().map(|&(_, at)| at).collect();
        let reads = persist.store.read_many(&locations);
        for ((seq, _), read) in paged.into_iter().zip(reads) {
            if let Some((message, deadline)) = read.ok().and_then(Message::decode_stored) {
                self.read_ahead.insert(seq, (Arc::new(message), deadline));
            }
        }
    }

    /// Writes the `delivered` mark for what this pass handed out (before it leaves the queue).
    pub(super) fn mark_delivered(&mut self) {
        let Some(persist) = self.persist.as_mut() else {
            return;
        };
        if persist.durable && self.delivered_max > persist.delivered_written {
            persist.batch.delivered(persist.id, self.delivered_max);
            persist.delivered_written = self.delivered_max;
        }
        self.flush_store();
    }
}
