//! The message store: one log of segment files shared by every queue of the node, so one
//! fsync covers every message that arrived meanwhile, from every connection and queue.
//!
//! Writers (queue tasks) append a batch with one `write` under a short lock: once it returns
//! the records survive the broker process being killed. A batch that needs a publisher
//! confirm leaves a waiter, handed with the segments written to the [`GroupCommit`], which
//! fsyncs them once for every waiter that gathered and then runs the waiters. Segments are
//! reached only through [`Io`], so tests run the store on a disk that fails on purpose.
//! A failed write or fsync poisons the store: every later append and confirm fails.
//!
//! Each segment counts its live enqueue records. Segments are deleted oldest first once the
//! oldest holds none: acks live in later segments, so a segment is only removed when nothing
//! older could be brought back by losing its acks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::error::StoreError;
use crate::group_commit::{GroupCommit, GroupConfig};
use crate::io::{write_all_at, FsIo, Io, LogFile};
use crate::record::{self, Location, RecordBatch, Waiter, INDEX_MAGIC, SEGMENT_MAGIC};
use crate::recovery::{self, Recovered};

/// Records further apart than this (other queues' records between them) are read apart.
const READ_RUN_GAP_MAX_BYTES: u64 = 4096;
/// The most one read of `read_many` takes in.
const READ_RUN_MAX_BYTES: u64 = 1024 * 1024;

fn record_end(location: Location) -> u64 {
    u64::from(location.offset) + u64::from(location.len.get())
}

/// The message store's group commit: two sync threads, so that a group that forms while one
/// fsync runs starts its own at once (each waits only for the fsync that covers it); a
/// group of fewer than 16 messages waits for the running fsync instead.
fn group_config() -> GroupConfig {
    GroupConfig {
        name: "message store",
        items: "messages",
        thread_name: "store-sync",
        threads: 2,
        overlap_min_items: 16,
        report_interval: Duration::from_secs(5),
    }
}

#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The store's directory (`<data_dir>/store`).
    pub dir: PathBuf,
    /// A segment is closed and a new one started once it would grow past this size.
    pub segment_bytes: u64,
}

/// A handle to the node's message store; cheap to clone.
#[derive(Clone)]
pub struct Store(Arc<Shared>);

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.0.dir.display())
    }
}

struct Shared {
    dir: PathBuf,
    io: Arc<dyn Io>,
    segment_bytes: u64,
    writer: Mutex<Writer>,
    /// Open segments by number, for reads.
    files: RwLock<BTreeMap<u32, Arc<dyn LogFile>>>,
    commit: GroupCommit<Waiter>,
    /// Set by `close`: appends are refused from then on.
    closed: AtomicBool,
}

struct Writer {
    active: u32,
    file: Arc<dyn LogFile>,
    len: u64,
    /// Bytes of the active segment already written with zeros ahead of the data: writing
    /// into them changes no file size, so an fdatasync needs no journal commit.
    allocated: u64,
    /// Live enqueue records per segment.
    live: BTreeMap<u32, u64>,
    /// The active segment's index (see `record`), written when it is sealed.
    index: Vec<u8>,
    index_records: u64,
}

impl Writer {
    /// The active segment's offsets: its data starts after the magic and ends inside the
    /// preallocated part (`len <= allocated`), so the next record is written over zeros.
    fn check_offsets(&self) {
        debug_assert!(
            self.len >= SEGMENT_MAGIC.len() as u64,
            "invariant: a segment's records start after its magic"
        );
        debug_assert!(
            self.len <= self.allocated,
            "invariant: written {} <= allocated {} in segment {}",
            self.len,
            self.allocated,
            self.active
        );
        debug_assert!(
            self.live.contains_key(&self.active),
            "invariant: the active segment has a live count"
        );
    }
}

/// Figures since the store opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub fsyncs: u64,
    pub synced_messages: u64,
    pub bytes_written: u64,
    pub segments: u64,
}

impl Store {
    /// Opens (creating if needed) the store on the real filesystem, reads every segment
    /// back and returns what the queues must recover. Writing starts in a fresh segment.
    pub fn open(config: StoreConfig) -> Result<(Store, Recovered), StoreError> {
        Store::open_on(Arc::new(FsIo), config)
    }

    /// [`Store::open`] on the disk `io` (tests use [`crate::FaultyIo`]).
    pub fn open_on(io: Arc<dyn Io>, config: StoreConfig) -> Result<(Store, Recovered), StoreError> {
        io.create_dir_all(&config.dir)
            .map_err(|error| StoreError::io("create", &config.dir, error))?;
        let scan = recovery::scan(&*io, &config.dir)?;
        let active = scan.last_segment + 1;
        let file = create_segment(&*io, &config.dir, active)?;
        let mut files = scan.files;
        files.insert(active, file.clone());
        let mut live = scan.live;
        live.insert(active, 0);
        let commit = GroupCommit::start(group_config())
            .map_err(|error| StoreError::io("start the sync threads of", &config.dir, error))?;
        let shared = Arc::new(Shared {
            dir: config.dir,
            io,
            segment_bytes: config.segment_bytes.max(4096),
            writer: Mutex::new(Writer {
                active,
                file,
                len: SEGMENT_MAGIC.len() as u64,
                allocated: SEGMENT_MAGIC.len() as u64,
                live,
                index: INDEX_MAGIC.to_vec(),
                index_records: 0,
            }),
            files: RwLock::new(files),
            commit,
            closed: AtomicBool::new(false),
        });
        let store = Store(shared);
        store.reclaim(&mut store.0.writer.lock());
        Ok((store, scan.recovered))
    }

    /// Writes the batch (one `write` per segment it spans) and accounts for it; fills
    /// `locations` with where each enqueue record went, in order. The batch is emptied.
    ///
    /// On error nothing of the batch counts as written and its waiters were told `false`;
    /// a write that failed poisons the store (every later append fails).
    pub fn append(
        &self,
        batch: &mut RecordBatch,
        locations: &mut Vec<Location>,
    ) -> Result<(), StoreError> {
        locations.clear();
        let result = if self.0.closed.load(Ordering::Acquire) {
            Err(StoreError::Closed)
        } else {
            self.write_batch(batch, locations)
        };
        if let Err(error) = &result {
            if !matches!(error, StoreError::Closed | StoreError::Poisoned { .. }) {
                self.0.commit.poison(error);
            }
            for waiter in batch.waiters.drain(..) {
                waiter(false);
            }
        }
        batch.clear();
        result
    }

    fn write_batch(
        &self,
        batch: &mut RecordBatch,
        locations: &mut Vec<Location>,
    ) -> Result<(), StoreError> {
        self.0.commit.check()?;
        batch.check_framing();
        let mut writer = self.0.writer.lock();
        writer.check_offsets();
        let mut written: Vec<(u64, Arc<dyn LogFile>)> = Vec::new();
        let mut start = 0;
        let mut record = 0;
        while record < batch.records.len() {
            let (end, end_offset) = self.fitting_records(&writer, batch, record, start);
            if end == record {
                self.rotate(&mut writer)?;
                continue;
            }
            let base = writer.len;
            preallocate(
                &mut writer,
                (end_offset - start) as u64,
                self.0.segment_bytes,
            )?;
            debug_assert!(
                base + (end_offset - start) as u64 <= writer.allocated,
                "invariant: a run is written inside the preallocated part of its segment"
            );
            batch.write_at(&*writer.file, start..end_offset, base)?;
            writer.len += (end_offset - start) as u64;
            let segment = writer.active;
            let mut offset = start;
            for &(record_end, enqueue) in &batch.records[record..end] {
                let at = base as usize + (offset - start);
                batch.index_entry(offset..record_end, at, &mut writer.index);
                writer.index_records += 1;
                if enqueue {
                    locations.push(Location::new(segment, at, record_end - offset));
                    *writer.live.entry(segment).or_default() += 1;
                }
                offset = record_end;
            }
            debug_assert_eq!(
                offset, end_offset,
                "the run's records end where the run does"
            );
            if !written.iter().any(|(s, _)| *s == u64::from(segment)) {
                written.push((u64::from(segment), writer.file.clone()));
            }
            start = end_offset;
            record = end;
        }
        assert_eq!(start, batch.len(), "invariant: the whole batch was written");
        let mut emptied = false;
        for &segment in &batch.dead {
            if let Some(count) = writer.live.get_mut(&segment) {
                *count = count.saturating_sub(1);
                emptied |= *count == 0;
            }
        }
        writer.check_offsets();
        let bytes = batch.len() as u64;
        self.0
            .commit
            .submit(&written, &mut batch.waiters, batch.durable_messages, bytes);
        if emptied {
            self.reclaim(&mut writer);
        }
        Ok(())
    }

    /// The records from `record` (whose bytes start at `start`) that fit the active segment,
    /// at least one unless the segment must rotate first: the end record index and the end
    /// offset in the batch. A record larger than a segment gets a fresh segment alone.
    fn fitting_records(
        &self,
        writer: &Writer,
        batch: &RecordBatch,
        record: usize,
        start: usize,
    ) -> (usize, usize) {
        let mut end = record;
        let mut end_offset = start;
        while end < batch.records.len() {
            let next = batch.records[end].0;
            let fits = writer.len + (next - start) as u64 <= self.0.segment_bytes;
            if end > record && !fits {
                break;
            }
            if end == record && !fits && writer.len > SEGMENT_MAGIC.len() as u64 {
                break; // rotate first
            }
            end_offset = next;
            end += 1;
        }
        (end, end_offset)
    }

    fn rotate(&self, writer: &mut Writer) -> Result<(), StoreError> {
        self.seal(writer)?;
        let next = writer.active + 1;
        let file = create_segment(&*self.0.io, &self.0.dir, next)?;
        self.0
            .io
            .sync_dir(&self.0.dir) // the new name survives a power loss
            .map_err(|error| StoreError::io("sync the directory", &self.0.dir, error))?;
        self.0.files.write().insert(next, file.clone());
        writer.live.insert(next, 0);
        writer.active = next;
        writer.file = file;
        writer.len = SEGMENT_MAGIC.len() as u64;
        writer.allocated = writer.len;
        tracing::debug!(segment = next, "message store: new segment");
        Ok(())
    }

    /// Finishes the active segment: drops its unused preallocated zeros and writes its index.
    fn seal(&self, writer: &mut Writer) -> Result<(), StoreError> {
        writer
            .file
            .truncate(writer.len)
            .map_err(|error| StoreError::io("truncate", writer.file.path(), error))?;
        let mut index = std::mem::replace(&mut writer.index, INDEX_MAGIC.to_vec());
        record::index_end(std::mem::take(&mut writer.index_records), &mut index);
        let path = index_path(&self.0.dir, writer.active);
        if let Err(error) = self.0.io.replace_whole(&path, &index) {
            // Not fatal: recovery reads the segment itself instead.
            tracing::warn!(
                "message store: cannot write the index {}: {error}",
                path.display()
            );
        }
        Ok(())
    }

    /// Deletes the oldest segments while they hold no live message.
    fn reclaim(&self, writer: &mut Writer) {
        while let Some((&segment, &live)) = writer.live.first_key_value() {
            if live > 0 || segment == writer.active {
                break;
            }
            writer.live.remove(&segment);
            self.0.files.write().remove(&segment);
            let _ = self.0.io.remove(&index_path(&self.0.dir, segment));
            let path = segment_path(&self.0.dir, segment);
            match self.0.io.remove(&path) {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), "message store: segment reclaimed");
                }
                Err(error) => tracing::warn!(
                    "message store: cannot delete {}: {error}; it is read again at the next start",
                    path.display()
                ),
            }
        }
    }

    /// Reads back the message bytes of the enqueue records at `locations`, as `read` does
    /// for each, with one read per run of records that lie close together in one segment
    /// (what a queue wrote in one turn usually does): paged-out messages come back at a
    /// syscall per run instead of one each.
    pub fn read_many(&self, locations: &[Location]) -> Vec<Result<Bytes, StoreError>> {
        let mut out = Vec::with_capacity(locations.len());
        let mut start = 0;
        while start < locations.len() {
            let first = locations[start];
            let mut end = start + 1;
            let mut run_end = record_end(first);
            while let Some(next) = locations.get(end) {
                let gap_ok = next.segment == first.segment
                    && u64::from(next.offset) >= run_end
                    && u64::from(next.offset) - run_end <= READ_RUN_GAP_MAX_BYTES;
                if !gap_ok || record_end(*next) - u64::from(first.offset) > READ_RUN_MAX_BYTES {
                    break;
                }
                run_end = record_end(*next);
                end += 1;
            }
            if end - start == 1 {
                out.push(self.read(first));
            } else {
                self.read_run(&locations[start..end], run_end, &mut out);
            }
            start = end;
        }
        debug_assert_eq!(out.len(), locations.len(), "one result per location");
        out
    }

    /// One read covering `run` (records in offset order, ending at `run_end`), then each
    /// record checked and sliced out of it.
    fn read_run(&self, run: &[Location], run_end: u64, out: &mut Vec<Result<Bytes, StoreError>>) {
        let first = run[0];
        let mut buf = vec![0; (run_end - u64::from(first.offset)) as usize];
        let read = self
            .segment_file(first.segment)
            .and_then(|file| crate::io::read_exact_at(&*file, &mut buf, u64::from(first.offset)));
        if read.is_err() {
            // Each record again on its own: each gets its own error, naming its offset.
            out.extend(run.iter().map(|location| self.read(*location)));
            return;
        }
        let buf = Bytes::from(buf);
        for location in run {
            let at = (location.offset - first.offset) as usize;
            let record = buf.slice(at..at + location.len.get() as usize);
            out.push(self.check_enqueue(location, record));
        }
    }

    fn segment_file(&self, segment: u32) -> Result<Arc<dyn LogFile>, StoreError> {
        self.0
            .files
            .read()
            .get(&segment)
            .cloned()
            .ok_or(StoreError::Gone { segment })
    }

    /// The message bytes of an enqueue record read from `location`, checksum checked.
    fn check_enqueue(&self, location: &Location, record: Bytes) -> Result<Bytes, StoreError> {
        let what = match record::decode(&record, 0) {
            Ok((record::Record::Enqueue { message, .. }, len)) if len == record.len() => {
                return Ok(record.slice(message))
            }
            Ok(_) => "not the enqueue record the queue wrote there".to_owned(),
            Err(error) => error.to_string(),
        };
        Err(StoreError::Corrupt {
            file: segment_path(&self.0.dir, location.segment),
            offset: u64::from(location.offset),
            what,
        })
    }

    /// Reads back the message bytes of the enqueue record at `location`, checking its checksum.
    pub fn read(&self, location: Location) -> Result<Bytes, StoreError> {
        let file = self.segment_file(location.segment)?;
        let mut buf = vec![0; location.len.get() as usize];
        crate::io::read_exact_at(&*file, &mut buf, u64::from(location.offset))?;
        self.check_enqueue(&location, Bytes::from(buf))
    }

    /// Drops recovered messages no queue claimed (their queue is gone or was not durable).
    pub fn forget_unclaimed(&self, recovered: Recovered) {
        let mut batch = RecordBatch::new();
        let mut count = 0u64;
        for queue in recovered.into_queues() {
            for message in queue.messages {
                batch.forget(message.location);
                count += 1;
            }
        }
        if count > 0 {
            tracing::info!("message store: {count} stored messages belong to no queue; dropped");
            let _ = self.append(&mut batch, &mut Vec::new());
        }
    }

    pub fn stats(&self) -> StoreStats {
        let commit = self.0.commit.stats();
        StoreStats {
            fsyncs: commit.fsyncs,
            synced_messages: commit.synced_items,
            bytes_written: commit.bytes_written,
            segments: self.0.files.read().len() as u64,
        }
    }

    /// `Err(Poisoned)` once a write or fsync failed: nothing is confirmed any more.
    pub fn check(&self) -> Result<(), StoreError> {
        self.0.commit.check()
    }

    /// Refuses further appends and stops the sync threads once they told every waiter.
    pub fn close(&self) {
        // Taking the writer lock waits for an append in progress.
        let mut writer = self.0.writer.lock();
        if !self.0.closed.swap(true, Ordering::AcqRel) && self.0.commit.check().is_ok() {
            let _ = self.seal(&mut writer); // a clean stop leaves every segment indexed
        }
        self.0.commit.shutdown();
    }
}

/// Zeros written ahead of the data at a time.
const PREALLOCATE_STEP: u64 = 4 << 20;

/// Makes sure `need` bytes after the data are allocated, writing zeros a step at a time (the
/// file size changes once per step, not once per batch).
fn preallocate(writer: &mut Writer, need: u64, segment_bytes: u64) -> Result<(), StoreError> {
    static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
    let want = writer.len + need;
    if want <= writer.allocated {
        return Ok(());
    }
    let target = (writer.allocated + PREALLOCATE_STEP)
        .min(segment_bytes.max(want))
        .max(want);
    let mut at = writer.allocated;
    while at < target {
        let n = (target - at).min(ZEROS.len() as u64) as usize;
        write_all_at(&*writer.file, &ZEROS[..n], at)?;
        at += n as u64;
    }
    writer.allocated = target;
    Ok(())
}

pub(crate) fn index_path(dir: &Path, segment: u32) -> PathBuf {
    dir.join(format!("{segment:020}.idx"))
}

pub(crate) fn segment_path(dir: &Path, segment: u32) -> PathBuf {
    dir.join(format!("{segment:020}.seg"))
}

fn create_segment(io: &dyn Io, dir: &Path, segment: u32) -> Result<Arc<dyn LogFile>, StoreError> {
    let path = segment_path(dir, segment);
    let file = io
        .create(&path)
        .map_err(|error| StoreError::io("create", &path, error))?;
    write_all_at(&*file, SEGMENT_MAGIC, 0)?;
    Ok(file)
}

#[cfg(test)]
#[path = "store_test.rs"]
mod tests;

#[cfg(test)]
#[path = "store_fault_test.rs"]
mod fault_tests;
