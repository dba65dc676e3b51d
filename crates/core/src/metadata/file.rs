//! The metadata store on local files, written by one thread (`warren-metadata`) off the async
//! workers and off every lock a client holds.
//!
//! Layout under `<data_dir>/definitions/`:
//! - `broker.json`: users, vhosts, permissions, policies, limits (RabbitMQ's definitions
//!   format), replaced whole and atomically when it changes.
//! - `vhost-<hex name>.json`: a vhost's exchanges, queues and bindings (`definitions.rs`),
//!   the snapshot, replaced atomically by a compaction.
//! - `vhost-<hex name>.journal`: the changes made since that snapshot. It starts with the
//!   magic `WMDJ` and a `u32` version; each record is `[u32 length][u32 crc32c][JSON of one
//!   VHostChange]`, little-endian. A record is acknowledged only after the fsync that follows
//!   it, so a torn or corrupt tail was never acknowledged and is dropped at start.
//!
//! The writer takes every request waiting (up to `METADATA_BATCH_REQUESTS_MAX`), appends
//! their records to each vhost's journal with one fsync per vhost, and then completes them
//! all: a thousand declares from ten connections cost a few hundred fsyncs, not two thousand
//! rewrites of the whole vhost. Once a journal outgrows its snapshot the next batch writes a
//! new snapshot instead (amortised: each compaction is paid for by as many bytes of journal).
//! A failed write fails the whole batch and changes nothing in the image; the next batch
//! then writes a fresh snapshot rather than appending after a tail that may be torn (a failed
//! fsync is never retried on the same file).

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use super::{completion, Change, Completer, Completion, MetadataStore, VHostChange, VHostImage};
use crate::access::format::Definitions;
use crate::definitions::{self, VHostDefinitions};
use crate::limits::{METADATA_BATCH_REQUESTS_MAX, METADATA_JOURNAL_BYTES_MIN};

const JOURNAL_MAGIC: &[u8; 4] = b"WMDJ";
const JOURNAL_VERSION: u32 = 1;
const JOURNAL_HEADER_BYTES: usize = 8;
const RECORD_HEADER_BYTES: usize = 8;

pub struct FileStore {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    data_dir: PathBuf,
    inbox: Mutex<Inbox>,
    wake: Condvar,
    vhosts: Mutex<HashMap<Arc<str>, VHostFiles>>,
}

#[derive(Default)]
struct Inbox {
    requests: VecDeque<Request>,
    closed: bool,
}

struct Request {
    changes: Vec<Change>,
    completer: Completer,
}

/// What the writer knows of one vhost's files.
#[derive(Default)]
struct VHostFiles {
    image: VHostImage,
    journal_bytes: u64,
    snapshot_bytes: u64,
    /// The journal's tail is not known good (a write failed): write a snapshot next.
    compact: bool,
}

enum Op<'a> {
    Change(&'a VHostChange),
    Drop,
}

impl FileStore {
    /// Starts the writer thread for the definitions under `data_dir`.
    pub fn open(data_dir: &Path) -> std::io::Result<Arc<FileStore>> {
        let shared = Arc::new(Shared {
            data_dir: data_dir.to_path_buf(),
            inbox: Mutex::new(Inbox::default()),
            wake: Condvar::new(),
            vhosts: Mutex::new(HashMap::new()),
        });
        let writer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("warren-metadata".into())
                .spawn(move || shared.run())?
        };
        Ok(Arc::new(FileStore {
            shared,
            writer: Mutex::new(Some(writer)),
        }))
    }

    /// Writes what is waiting and stops the writer; later submits fail.
    pub fn close(&self) {
        self.shared.inbox.lock().closed = true;
        self.shared.wake.notify_all();
        if let Some(writer) = self.writer.lock().take() {
            if writer.join().is_err() {
                tracing::error!("the metadata writer panicked");
            }
        }
    }

    fn access_path(&self) -> PathBuf {
        access_path(&self.shared.data_dir)
    }
}

impl Drop for FileStore {
    fn drop(&mut self) {
        self.close();
    }
}

impl MetadataStore for FileStore {
    fn load_vhost(&self, vhost: &str) -> std::io::Result<Option<VHostDefinitions>> {
        let snapshot_path = definitions::path_for(&self.shared.data_dir, vhost);
        let journal_path = journal_path(&snapshot_path);
        let saved = definitions::load(&snapshot_path)?;
        let found = saved.is_some();
        let mut files = VHostFiles {
            snapshot_bytes: fs::metadata(&snapshot_path).map_or(0, |m| m.len()),
            image: saved.map(VHostImage::from_definitions).unwrap_or_default(),
            ..VHostFiles::default()
        };
        let replayed = replay(&journal_path, &mut files.image)?;
        if let Some(records) = replayed {
            // Start from a snapshot holding everything, with no journal: a torn tail is gone
            // and appends start on a clean file.
            tracing::info!(vhost, records, "replayed the metadata journal");
            files.snapshot_bytes = save(&snapshot_path, &files.image, vhost)?;
            remove_if_present(&journal_path)?;
        }
        let definitions = (found || replayed.is_some()).then(|| files.image.to_definitions(vhost));
        self.shared.vhosts.lock().insert(Arc::from(vhost), files);
        Ok(definitions)
    }

    fn load_access(&self) -> std::io::Result<Option<Definitions>> {
        let path = self.access_path();
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error),
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|error| {
            std::io::Error::new(
                ErrorKind::InvalidData,
                format!("{} is corrupt: {error}", path.display()),
            )
        })
    }

    fn init_access(&self, definitions: &Definitions) -> std::io::Result<()> {
        write_access(&self.access_path(), definitions)
    }

    fn submit(&self, changes: Vec<Change>) -> Completion {
        let (completer, completion) = completion();
        let mut inbox = self.shared.inbox.lock();
        if inbox.closed {
            completer.complete(Err(Arc::from(
                "the broker is stopping; the change was not written",
            )));
            return completion;
        }
        inbox.requests.push_back(Request { changes, completer });
        drop(inbox);
        self.shared.wake.notify_one();
        completion
    }
}

impl Shared {
    fn run(&self) {
        while let Some(batch) = self.next_batch() {
            self.write_batch(batch);
        }
    }

    fn next_batch(&self) -> Option<Vec<Request>> {
        let mut inbox = self.inbox.lock();
        while inbox.requests.is_empty() {
            if inbox.closed {
                return None;
            }
            self.wake.wait(&mut inbox);
        }
        let count = inbox.requests.len().min(METADATA_BATCH_REQUESTS_MAX);
        Some(inbox.requests.drain(..count).collect())
    }

    /// Writes one batch: each vhost's changes with one fsync, the broker-wide definitions
    /// once (the last of them holds the others), then completes every request.
    fn write_batch(&self, batch: Vec<Request>) {
        let mut order: Vec<Arc<str>> = Vec::new();
        let mut ops: HashMap<Arc<str>, Vec<Op>> = HashMap::new();
        let mut access = None;
        for change in batch.iter().flat_map(|r| &r.changes) {
            let (vhost, op) = match change {
                Change::VHost { vhost, change } => (vhost, Op::Change(change)),
                Change::DropVHost { vhost } => (vhost, Op::Drop),
                Change::Access { definitions } => {
                    access = Some(definitions);
                    continue;
                }
            };
            ops.entry(vhost.clone())
                .or_insert_with(|| {
                    order.push(vhost.clone());
                    Vec::new()
                })
                .push(op);
        }
        let mut failed: HashMap<Arc<str>, Arc<str>> = HashMap::new();
        for vhost in &order {
            let vhost_ops = ops.remove(vhost).unwrap_or_default();
            if let Err(text) = self.write_vhost(vhost, &vhost_ops) {
                tracing::error!(%vhost, %text, "cannot write definitions");
                failed.insert(vhost.clone(), text);
            }
        }
        let access_failed = access.and_then(|definitions| {
            let path = access_path(&self.data_dir);
            write_access(&path, definitions).err().map(|error| {
                tracing::error!(%error, "cannot write {}", path.display());
                Arc::from(format!("cannot write {}: {error}", path.display()))
            })
        });
        for request in batch {
            let result = request
                .changes
                .iter()
                .find_map(|change| match change {
                    Change::VHost { vhost, .. } | Change::DropVHost { vhost } => {
                        failed.get(vhost).cloned()
                    }
                    Change::Access { .. } => access_failed.clone(),
                })
                .map_or(Ok(()), Err);
            request.completer.complete(result);
        }
    }

    fn write_vhost(&self, vhost: &Arc<str>, ops: &[Op]) -> Result<(), Arc<str>> {
        let snapshot_path = definitions::path_for(&self.data_dir, vhost);
        let journal_path = journal_path(&snapshot_path);
        let fail = |what: &Path, error: std::io::Error| {
            Arc::from(format!(
                "cannot write the definitions of vhost '{vhost}' to {}: {error}; fix the \
                 data directory (free space, permissions) and retry",
                what.display()
            ))
        };
        let mut vhosts = self.vhosts.lock();
        let files = vhosts.entry(vhost.clone()).or_default();
        let mut ops = ops;
        if let Some(last_drop) = ops.iter().rposition(|op| matches!(op, Op::Drop)) {
            definitions::remove(&snapshot_path).map_err(|e| fail(&snapshot_path, e))?;
            remove_if_present(&journal_path).map_err(|e| fail(&journal_path, e))?;
            *files = VHostFiles::default();
            ops = ops.get(last_drop + 1..).unwrap_or_default();
        }
        let changes: Vec<&VHostChange> = ops
            .iter()
            .filter_map(|op| match op {
                Op::Change(change) => Some(*change),
                Op::Drop => None,
            })
            .collect();
        if changes.is_empty() {
            return Ok(());
        }
        let journal_max = METADATA_JOURNAL_BYTES_MIN.max(2 * files.snapshot_bytes);
        if files.compact || files.journal_bytes > journal_max {
            let mut next = files.image.clone();
            changes.iter().for_each(|change| next.apply(change));
            let bytes = save(&snapshot_path, &next, vhost).map_err(|e| {
                files.compact = true;
                fail(&snapshot_path, e)
            })?;
            remove_if_present(&journal_path).map_err(|e| fail(&journal_path, e))?;
            *files = VHostFiles {
                image: next,
                snapshot_bytes: bytes,
                ..VHostFiles::default()
            };
            return Ok(());
        }
        let records = encode(&changes);
        if let Err(error) = append(&journal_path, &records) {
            files.compact = true;
            return Err(fail(&journal_path, error));
        }
        changes.iter().for_each(|change| files.image.apply(change));
        files.journal_bytes += records.len() as u64;
        Ok(())
    }
}

fn access_path(data_dir: &Path) -> PathBuf {
    data_dir.join("definitions").join("broker.json")
}

fn journal_path(snapshot_path: &Path) -> PathBuf {
    snapshot_path.with_extension("journal")
}

fn write_access(path: &Path, definitions: &Definitions) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(definitions).map_err(std::io::Error::other)?;
    definitions::write_atomically(path, &bytes)
}

/// Writes `image` as the vhost's snapshot; returns its size.
fn save(path: &Path, image: &VHostImage, vhost: &str) -> std::io::Result<u64> {
    definitions::save(path, image.to_definitions(vhost))
}

fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// The journal records of `changes`, one after the other.
fn encode(changes: &[&VHostChange]) -> Vec<u8> {
    let mut out = Vec::new();
    for change in changes {
        let payload = serde_json::to_vec(change).expect("invariant: a change serialises");
        let length = u32::try_from(payload.len()).expect("invariant: a change is under 4 GiB");
        out.extend_from_slice(&length.to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        out.extend_from_slice(&payload);
    }
    out
}

/// Appends `records` to the journal and fsyncs it; creates the journal (header, directory
/// fsync) when there is none. Opened by path each time, so a data directory that was
/// replaced or removed under the broker is noticed rather than written through a stale fd.
fn append(path: &Path, records: &[u8]) -> std::io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.append(true).mode(warren_store::FILE_MODE);
    match options.open(path) {
        Ok(mut file) => {
            file.write_all(records)?;
            file.sync_data()
        }
        Err(error) if error.kind() == ErrorKind::NotFound => {
            let dir = path.parent().unwrap_or(Path::new("."));
            warren_store::private_dir_all(dir)?;
            let mut file = options.create_new(true).open(path)?;
            let mut bytes = Vec::with_capacity(JOURNAL_HEADER_BYTES + records.len());
            bytes.extend_from_slice(JOURNAL_MAGIC);
            bytes.extend_from_slice(&JOURNAL_VERSION.to_le_bytes());
            bytes.extend_from_slice(records);
            file.write_all(&bytes)?;
            file.sync_all()?;
            fs::File::open(dir)?.sync_all()
        }
        Err(error) => Err(error),
    }
}

/// Replays a journal onto `image`; the number of records, or `None` without a journal. A torn
/// or corrupt tail ends the replay (it was never acknowledged); a bad header is an error.
fn replay(path: &Path, image: &mut VHostImage) -> std::io::Result<Option<usize>> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let invalid = |text: String| std::io::Error::new(ErrorKind::InvalidData, text);
    match bytes.get(..JOURNAL_HEADER_BYTES) {
        // Created but its header never reached the disk: nothing in it was acknowledged.
        None => return Ok(Some(0)),
        Some(header) if header.get(..4) != Some(JOURNAL_MAGIC.as_slice()) => {
            return Err(invalid(format!(
                "{} is not a Warren metadata journal (bad magic); move it away to start",
                path.display()
            )));
        }
        Some(header) => {
            let version = read_u32(header, 4);
            if version != Some(JOURNAL_VERSION) {
                return Err(invalid(format!(
                    "{} has journal version {version:?}, this build reads {JOURNAL_VERSION}",
                    path.display()
                )));
            }
        }
    }
    let mut offset = JOURNAL_HEADER_BYTES;
    let mut records = 0;
    while offset < bytes.len() {
        let Some(change) = next_record(&bytes, offset) else {
            tracing::warn!(
                "{}: torn or corrupt record at offset {offset}, dropped with what follows \
                 (never acknowledged)",
                path.display()
            );
            break;
        };
        let (change, length) = change.map_err(|error| {
            invalid(format!(
                "{}: record at offset {offset} has a good checksum but cannot be read: {error}",
                path.display()
            ))
        })?;
        image.apply(&change);
        offset += RECORD_HEADER_BYTES + length;
        records += 1;
    }
    debug_assert!(offset <= bytes.len());
    Ok(Some(records))
}

/// The record at `offset` and its payload length; `None` when torn or its checksum is wrong.
fn next_record(
    bytes: &[u8],
    offset: usize,
) -> Option<Result<(VHostChange, usize), serde_json::Error>> {
    let length = usize::try_from(read_u32(bytes, offset)?).ok()?;
    let crc = read_u32(bytes, offset + 4)?;
    let start = offset + RECORD_HEADER_BYTES;
    let payload = bytes.get(start..start.checked_add(length)?)?;
    if crc32c::crc32c(payload) != crc {
        return None;
    }
    Some(serde_json::from_slice(payload).map(|change| (change, length)))
}

fn read_u32(bytes: &[u8], offset: usize) -> Option<u32> {
    let field: [u8; 4] = bytes.get(offset..offset + 4)?.try_into().ok()?;
    Some(u32::from_le_bytes(field))
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
