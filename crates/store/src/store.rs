//! The message store: one log of segment files shared by every queue of the node, so one
//! fsync covers every message that arrived meanwhile, from every connection and queue.
//!
//! Writers (queue tasks) append a batch with one `write` under a short lock: once it returns
//! the records survive the broker process being killed. A batch that needs a publisher
//! confirm leaves a waiter; the sync thread takes all waiters, fsyncs the segments written
//! since the last round, and runs them (group commit). While it syncs, the next group gathers.
//!
//! Each segment counts its live enqueue records. Segments are deleted oldest first once the
//! oldest holds none: acks live in later segments, so a segment is only removed when nothing
//! older could be brought back by losing its acks.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::record::{self, Location, RecordBatch, Waiter, INDEX_MAGIC, SEGMENT_MAGIC};
use crate::recovery::{self, Recovered};

/// Records further apart than this (other queues' records between them) are read apart.
const READ_RUN_GAP_MAX_BYTES: u64 = 4096;
/// The most one read of `read_many` takes in.
const READ_RUN_MAX_BYTES: u64 = 1024 * 1024;

fn record_end(location: Location) -> u64 {
    u64::from(location.offset) + u64::from(location.len.get())
}

/// Threads that fsync: a group that forms while one fsync runs starts its own at once
/// instead of waiting for it (each waits only for the fsync that covers its records).
const SYNC_THREADS: usize = 2;
/// Messages a group needs before it gets an fsync of its own while another runs.
const SYNC_OVERLAP_MIN_MESSAGES: u64 = 16;
/// How often the sync thread logs its figures while busy.
const STATS_INTERVAL: Duration = Duration::from_secs(5);

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
    segment_bytes: u64,
    writer: Mutex<Writer>,
    /// Open segments by number, for reads.
    files: RwLock<BTreeMap<u32, Arc<File>>>,
    sync: Mutex<SyncState>,
    sync_wake: Condvar,
    failed: AtomicBool,
    /// Set by `close`: appends are refused from then on.
    closed: AtomicBool,
    stats: Stats,
}

struct Writer {
    active: u32,
    file: Arc<File>,
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

#[derive(Default)]
struct SyncState {
    waiters: Vec<Waiter>,
    /// Segments written since the last fsync.
    dirty: Vec<(u32, Arc<File>)>,
    durable_messages: u64,
    /// fsyncs running now.
    in_flight: usize,
    shutdown: bool,
}

impl SyncState {
    /// Whether a sync thread should start an fsync for the waiting group now: when none runs,
    /// or when the group is large enough to be worth a second fsync beside the running one
    /// (small groups wait and join the next, so a trickle of publishes does not turn into a
    /// storm of fsyncs).
    fn group_ready(&self) -> bool {
        !self.waiters.is_empty()
            && (self.in_flight == 0 || self.durable_messages >= SYNC_OVERLAP_MIN_MESSAGES)
    }
}

#[derive(Default)]
struct Stats {
    fsyncs: AtomicU64,
    synced_messages: AtomicU64,
    bytes_written: AtomicU64,
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
    /// Opens (creating if needed) the store, reads every segment back and returns what the
    /// queues must recover. Writing starts in a fresh segment.
    pub fn open(config: StoreConfig) -> io::Result<(Store, Recovered)> {
        private_dir_all(&config.dir).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("cannot create {}: {error}", config.dir.display()),
            )
        })?;
        let scan = recovery::scan(&config.dir)?;
        let active = scan.last_segment + 1;
        let file = Arc::new(create_segment(&config.dir, active)?);
        let mut files = scan.files;
        files.insert(active, file.clone());
        let mut live = scan.live;
        live.insert(active, 0);
        let shared = Arc::new(Shared {
            dir: config.dir,
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
            sync: Mutex::new(SyncState::default()),
            sync_wake: Condvar::new(),
            failed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            stats: Stats::default(),
        });
        let store = Store(shared);
        for n in 0..SYNC_THREADS {
            let syncer = store.0.clone();
            thread::Builder::new()
                .name(format!("warren-store-sync-{n}"))
                .spawn(move || sync_loop(&syncer, n == 0))?;
        }
        store.reclaim(&mut store.0.writer.lock());
        Ok((store, scan.recovered))
    }

    /// Writes the batch (one `write` per segment it spans) and accounts for it; fills
    /// `locations` with where each enqueue record went, in order. The batch is emptied.
    ///
    /// On error nothing of the batch counts as written and its waiters were told `false`.
    pub fn append(&self, batch: &mut RecordBatch, locations: &mut Vec<Location>) -> io::Result<()> {
        locations.clear();
        if self.0.closed.load(Ordering::Acquire) {
            for waiter in batch.waiters.drain(..) {
                waiter(false);
            }
            batch.clear();
            return Err(io::Error::other(
                "the message store is closed (broker shutting down)",
            ));
        }
        let result = self.write_batch(batch, locations);
        if let Err(error) = &result {
            self.fail(&format!(
                "write to {} failed: {error}",
                self.0.dir.display()
            ));
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
    ) -> io::Result<()> {
        if self.0.failed.load(Ordering::Acquire) {
            return Err(io::Error::other(
                "the message store stopped after an earlier write or fsync error; restart the broker",
            ));
        }
        let mut writer = self.0.writer.lock();
        let mut written = Vec::new();
        let mut start = 0;
        let mut record = 0;
        while record < batch.records.len() {
            // The records that fit the active segment, at least one.
            let mut end = record;
            let mut end_offset = start;
            while end < batch.records.len() {
                let next = batch.records[end].0;
                let fits = writer.len + (next - start) as u64 <= self.0.segment_bytes;
                if end > record && !fits {
                    break;
                }
                if end == record && !fits && writer.len > SEGMENT_MAGIC.len() as u64 {
                    break; // rotate first; a record larger than a segment gets one alone
                }
                end_offset = next;
                end += 1;
            }
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
            batch.write_at(&writer.file, start..end_offset, base)?;
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
            if !written.iter().any(|(s, _)| *s == segment) {
                written.push((segment, writer.file.clone()));
            }
            start = end_offset;
            record = end;
        }
        let mut emptied = false;
        for &segment in &batch.dead {
            if let Some(count) = writer.live.get_mut(&segment) {
                *count = count.saturating_sub(1);
                emptied |= *count == 0;
            }
        }
        self.0
            .stats
            .bytes_written
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        if !batch.waiters.is_empty() || !written.is_empty() {
            let mut sync = self.0.sync.lock();
            for (segment, file) in written {
                if !sync.dirty.iter().any(|(s, _)| *s == segment) {
                    sync.dirty.push((segment, file));
                }
            }
            if !batch.waiters.is_empty() {
                sync.waiters.append(&mut batch.waiters);
                sync.durable_messages += batch.durable_messages;
                self.0.sync_wake.notify_one();
            }
        }
        if emptied {
            self.reclaim(&mut writer);
        }
        Ok(())
    }

    fn rotate(&self, writer: &mut Writer) -> io::Result<()> {
        self.seal(writer)?;
        let next = writer.active + 1;
        let file = Arc::new(create_segment(&self.0.dir, next)?);
        File::open(&self.0.dir)?.sync_all()?; // the new name survives a power loss
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
    fn seal(&self, writer: &mut Writer) -> io::Result<()> {
        writer.file.set_len(writer.len)?;
        let mut index = std::mem::replace(&mut writer.index, INDEX_MAGIC.to_vec());
        record::index_end(std::mem::take(&mut writer.index_records), &mut index);
        if let Err(error) = write_index_file(&self.0.dir, writer.active, &index) {
            // Not fatal: recovery reads the segment itself instead.
            tracing::warn!(
                "message store: cannot write the index of segment {}: {error}",
                writer.active
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
            let _ = fs::remove_file(index_path(&self.0.dir, segment));
            let path = segment_path(&self.0.dir, segment);
            match fs::remove_file(&path) {
                Ok(()) => tracing::debug!(path = %path.display(), "message store: segment reclaimed"),
                Err(error) => tracing::warn!(
                    "message store: cannot delete {}: {error}; it will be read again at the next start",
                    path.display()
                ),
            }
        }
    }

    /// Reads back the message bytes of the enqueue records at `locations`, as `read` does
    /// for each, with one read per run of records that lie close together in one segment
    /// (what a queue wrote in one turn usually does): paged-out messages come back at a
    /// syscall per run instead of one each.
    pub fn read_many(&self, locations: &[Location]) -> Vec<io::Result<Bytes>> {
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
        out
    }

    /// One read covering `run` (records in offset order, ending at `run_end`), then each
    /// record checked and sliced out of it.
    fn read_run(&self, run: &[Location], run_end: u64, out: &mut Vec<io::Result<Bytes>>) {
        let first = run[0];
        let mut buf = vec![0; (run_end - u64::from(first.offset)) as usize];
        let read = self
            .segment_file(first.segment)
            .and_then(|file| file.read_exact_at(&mut buf, u64::from(first.offset)));
        if let Err(error) = read {
            out.extend(
                run.iter()
                    .map(|_| Err(io::Error::new(error.kind(), error.to_string()))),
            );
            return;
        }
        let buf = Bytes::from(buf);
        for location in run {
            let at = (location.offset - first.offset) as usize;
            let record = buf.slice(at..at + location.len.get() as usize);
            out.push(self.check_enqueue(location, record));
        }
    }

    fn segment_file(&self, segment: u32) -> io::Result<Arc<File>> {
        self.0.files.read().get(&segment).cloned().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("segment {segment} is gone"),
            )
        })
    }

    /// The message bytes of an enqueue record read from `location`, checksum checked.
    fn check_enqueue(&self, location: &Location, record: Bytes) -> io::Result<Bytes> {
        match record::decode(&record, 0) {
            Ok((record::Record::Enqueue { message, .. }, _)) => Ok(record.slice(message)),
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not an enqueue record",
            )),
            Err(error) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} at offset {}: {error}",
                    segment_path(&self.0.dir, location.segment).display(),
                    location.offset
                ),
            )),
        }
    }

    /// Reads back the message bytes of the enqueue record at `location`, checking its checksum.
    pub fn read(&self, location: Location) -> io::Result<Bytes> {
        let file = self.segment_file(location.segment)?;
        let mut buf = vec![0; location.len.get() as usize];
        file.read_exact_at(&mut buf, u64::from(location.offset))?;
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
        let stats = &self.0.stats;
        StoreStats {
            fsyncs: stats.fsyncs.load(Ordering::Relaxed),
            synced_messages: stats.synced_messages.load(Ordering::Relaxed),
            bytes_written: stats.bytes_written.load(Ordering::Relaxed),
            segments: self.0.files.read().len() as u64,
        }
    }

    fn fail(&self, what: &str) {
        if !self.0.failed.swap(true, Ordering::AcqRel) {
            tracing::error!(
                "message store: {what}; publishes to durable queues are nacked from now on, restart the broker once the disk is fixed"
            );
        }
    }

    /// Refuses further appends and stops the sync thread once it ran every waiter.
    pub fn close(&self) {
        // Taking the writer lock waits for an append in progress.
        let mut writer = self.0.writer.lock();
        if !self.0.closed.swap(true, Ordering::AcqRel) {
            let _ = self.seal(&mut writer); // a clean stop leaves every segment indexed
        }
        self.0.sync.lock().shutdown = true;
        self.0.sync_wake.notify_all();
    }
}

fn sync_loop(shared: &Arc<Shared>, reports: bool) {
    let mut last_report = Instant::now();
    let mut reported = (0u64, 0u64, 0u64);
    loop {
        let (waiters, dirty, messages) = {
            let mut sync = shared.sync.lock();
            if !sync.group_ready() && !sync.shutdown {
                shared.sync_wake.wait_for(&mut sync, STATS_INTERVAL);
            }
            if sync.shutdown && sync.waiters.is_empty() {
                return;
            }
            if !sync.group_ready() && !sync.shutdown {
                (Vec::new(), Vec::new(), 0)
            } else {
                sync.in_flight += 1;
                (
                    std::mem::take(&mut sync.waiters),
                    std::mem::take(&mut sync.dirty),
                    std::mem::take(&mut sync.durable_messages),
                )
            }
        };
        if !waiters.is_empty() {
            let mut ok = !shared.failed.load(Ordering::Acquire);
            for (segment, file) in &dirty {
                if !ok {
                    break;
                }
                if let Err(error) = file.sync_data() {
                    ok = false;
                    let path = segment_path(&shared.dir, *segment);
                    Store(shared.clone())
                        .fail(&format!("fsync of {} failed: {error}", path.display()));
                }
            }
            shared.sync.lock().in_flight -= 1;
            shared.sync_wake.notify_one(); // the group that waited for this one
            let count = waiters.len();
            shared.stats.fsyncs.fetch_add(1, Ordering::Relaxed);
            shared
                .stats
                .synced_messages
                .fetch_add(messages, Ordering::Relaxed);
            for waiter in waiters {
                waiter(ok);
            }
            tracing::trace!(waiters = count, messages, "message store: fsync");
        }
        let elapsed = last_report.elapsed();
        if reports && elapsed >= STATS_INTERVAL {
            report(shared, elapsed, &mut reported);
            last_report = Instant::now();
        }
    }
}

fn report(shared: &Shared, elapsed: Duration, last: &mut (u64, u64, u64)) {
    let stats = &shared.stats;
    let now = (
        stats.fsyncs.load(Ordering::Relaxed),
        stats.synced_messages.load(Ordering::Relaxed),
        stats.bytes_written.load(Ordering::Relaxed),
    );
    let fsyncs = now.0 - last.0;
    let messages = now.1 - last.1;
    let bytes = now.2 - last.2;
    *last = now;
    if fsyncs == 0 {
        return;
    }
    let secs = elapsed.as_secs_f64();
    tracing::info!(
        "message store: {:.0} fsyncs/s, {:.1} messages per fsync, {:.1} MiB/s written",
        fsyncs as f64 / secs,
        messages as f64 / fsyncs as f64,
        bytes as f64 / secs / (1024.0 * 1024.0)
    );
}

/// Zeros written ahead of the data at a time.
const PREALLOCATE_STEP: u64 = 4 << 20;

/// Makes sure `need` bytes after the data are allocated, writing zeros a step at a time (the
/// file size changes once per step, not once per batch).
fn preallocate(writer: &mut Writer, need: u64, segment_bytes: u64) -> io::Result<()> {
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
        writer.file.write_all_at(&ZEROS[..n], at)?;
        at += n as u64;
    }
    writer.allocated = target;
    Ok(())
}

pub(crate) fn index_path(dir: &Path, segment: u32) -> PathBuf {
    dir.join(format!("{segment:020}.idx"))
}

/// Writes an index file whole (temporary name, then rename): a reader sees all of it or none.
pub(crate) fn write_index_file(dir: &Path, segment: u32, bytes: &[u8]) -> io::Result<()> {
    let path = index_path(dir, segment);
    let tmp = path.with_extension("idx.tmp");
    fs::write(&tmp, bytes)?;
    fs::rename(&tmp, &path)
}

/// Permissions of every file the broker creates: read and write for its own user only.
pub const FILE_MODE: u32 = 0o600;
/// Permissions of every directory the broker creates.
pub const DIR_MODE: u32 = 0o700;

/// `create_dir_all` whose new directories get [`DIR_MODE`] (existing ones keep theirs).
pub fn private_dir_all(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
}

pub(crate) fn segment_path(dir: &Path, segment: u32) -> PathBuf {
    dir.join(format!("{segment:020}.seg"))
}

fn create_segment(dir: &Path, segment: u32) -> io::Result<File> {
    let path = segment_path(dir, segment);
    // Messages are private to the broker's user, as the definitions are.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(&path)
        .map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("cannot create {}: {error}", path.display()),
            )
        })?;
    file.write_all_at(SEGMENT_MAGIC, 0)?;
    Ok(file)
}

#[cfg(test)]
#[path = "store_test.rs"]
mod tests;
