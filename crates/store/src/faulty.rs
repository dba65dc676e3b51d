//! A disk that fails on purpose, for tests (feature `testkit`, and this crate's own tests).
//!
//! [`FaultyIo`] is an in-memory filesystem behind the [`Io`] trait that keeps, per file,
//! what is durable (the content as of its last successful fsync) apart from what was only
//! written. Tests arm faults on it:
//! - [`FaultyIo::fail_next_syncs`]: fsyncs fail with EIO, and the writes they should have
//!   covered never become durable (Linux marks the pages clean after a failed writeback);
//! - [`FaultyIo::fill_disk_after`]: once so many more bytes were written, a write is cut
//!   short and later ones fail, as on a full disk;
//! - [`FaultyIo::flip_on_read`]: a byte of a file reads back with a bit flipped;
//! - [`FaultyIo::crash`]: the machine stops. The old disk refuses every call from then on;
//!   the returned one holds what was durable plus, per file, a torn prefix of what was not.
//!
//! File names are durable as soon as they are created, replaced or removed, and whole-file
//! replaces (index files) are durable at once: the store checks and rebuilds indexes, and
//! the faults that matter are in the logs.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::io::{DirEntry, Io, LogFile};

/// An in-memory disk with faults on demand; clones share the disk.
#[derive(Debug, Clone, Default)]
pub struct FaultyIo {
    disk: Arc<Mutex<Disk>>,
}

#[derive(Debug, Default)]
struct Disk {
    names: BTreeMap<PathBuf, u64>,
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    crashed: bool,
    failing_syncs: u64,
    /// Bytes writes may still take before the disk is full; `None`: no limit.
    space: Option<u64>,
    flips: Vec<(PathBuf, u64)>,
    syncs: u64,
}

#[derive(Debug, Default, Clone)]
struct Inode {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// Changes since the last fsync, oldest first.
    pending: Vec<Change>,
}

#[derive(Debug, Clone)]
enum Change {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

fn apply(content: &mut Vec<u8>, change: &Change) {
    match change {
        Change::Write { offset, bytes } => {
            let start = *offset as usize;
            let end = start + bytes.len();
            if content.len() < end {
                content.resize(end, 0);
            }
            content[start..end].copy_from_slice(bytes);
        }
        Change::SetLen(len) => content.resize(*len as usize, 0),
    }
}

fn crashed_error() -> io::Error {
    io::Error::other("the test disk crashed (FaultyIo::crash); open the returned disk")
}

impl Disk {
    fn check(&self) -> io::Result<()> {
        if self.crashed {
            return Err(crashed_error());
        }
        Ok(())
    }

    fn inode(&mut self, inode: u64) -> io::Result<&mut Inode> {
        self.check()?;
        self.inodes
            .get_mut(&inode)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "file removed"))
    }

    fn new_inode(&mut self, path: &Path, inode: Inode) -> u64 {
        let number = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(number, inode);
        self.names.insert(path.to_path_buf(), number);
        number
    }
}

impl FaultyIo {
    pub fn new() -> FaultyIo {
        FaultyIo::default()
    }

    /// The next `count` fsyncs fail with EIO; what they should have made durable is lost.
    pub fn fail_next_syncs(&self, count: u64) {
        self.disk.lock().failing_syncs = count;
    }

    /// Writes take `bytes` more bytes, then the disk is full: the write that crosses the
    /// limit is cut short and every later one fails.
    pub fn fill_disk_after(&self, bytes: u64) {
        self.disk.lock().space = Some(bytes);
    }

    /// Every read of the byte at `offset` of `path` returns it with its lowest bit flipped.
    pub fn flip_on_read(&self, path: &Path, offset: u64) {
        self.disk.lock().flips.push((path.to_path_buf(), offset));
    }

    /// Successful fsyncs so far.
    pub fn syncs(&self) -> u64 {
        self.disk.lock().syncs
    }

    /// The bytes of a file as a reader sees them now (flips aside), if it exists.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = self.disk.lock();
        let inode = disk.names.get(path)?;
        disk.inodes.get(inode).map(|i| i.data.clone())
    }

    /// The machine stops now. This disk fails every later call; the returned disk is what a
    /// restart finds: each file's durable content plus the first `torn_bytes` bytes of the
    /// writes it had not synced (a torn tail), in the order they were written.
    pub fn crash(&self, torn_bytes: u64) -> FaultyIo {
        let mut disk = self.disk.lock();
        disk.crashed = true;
        let mut after = Disk {
            next_inode: disk.next_inode,
            ..Disk::default()
        };
        for (path, number) in &disk.names {
            let Some(inode) = disk.inodes.get(number) else {
                continue;
            };
            let mut content = inode.durable.clone();
            let mut budget = torn_bytes;
            for change in &inode.pending {
                match change {
                    Change::Write { offset, bytes } if budget > 0 => {
                        let keep = bytes.len().min(budget as usize);
                        budget -= keep as u64;
                        let torn = Change::Write {
                            offset: *offset,
                            bytes: bytes[..keep].to_vec(),
                        };
                        apply(&mut content, &torn);
                    }
                    Change::SetLen(_) if budget > 0 => apply(&mut content, change),
                    _ => break,
                }
            }
            let survivor = Inode {
                durable: content.clone(),
                data: content,
                pending: Vec::new(),
            };
            after.inodes.insert(*number, survivor);
            after.names.insert(path.clone(), *number);
        }
        FaultyIo {
            disk: Arc::new(Mutex::new(after)),
        }
    }

    fn file(&self, path: &Path, inode: u64) -> Arc<dyn LogFile> {
        Arc::new(FaultyFile {
            disk: self.disk.clone(),
            inode,
            path: path.to_path_buf(),
        })
    }
}

impl Io for FaultyIo {
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        self.disk.lock().check()
    }

    fn create(&self, path: &Path) -> io::Result<Arc<dyn LogFile>> {
        let mut disk = self.disk.lock();
        disk.check()?;
        if disk.names.contains_key(path) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "file exists"));
        }
        let inode = disk.new_inode(path, Inode::default());
        Ok(self.file(path, inode))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn LogFile>> {
        let disk = self.disk.lock();
        disk.check()?;
        let inode = *disk
            .names
            .get(path)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
        Ok(self.file(path, inode))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let disk = self.disk.lock();
        disk.check()?;
        let entries = disk
            .names
            .iter()
            .filter(|(path, _)| path.parent() == Some(dir))
            .filter_map(|(path, inode)| {
                Some(DirEntry {
                    name: path.file_name()?.to_str()?.to_owned(),
                    len: disk.inodes.get(inode)?.data.len() as u64,
                })
            })
            .collect();
        Ok(entries)
    }

    fn read_whole(&self, path: &Path) -> io::Result<Vec<u8>> {
        let disk = self.disk.lock();
        disk.check()?;
        disk.names
            .get(path)
            .and_then(|inode| disk.inodes.get(inode))
            .map(|inode| inode.data.clone())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))
    }

    fn replace_whole(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut disk = self.disk.lock();
        disk.check()?;
        let inode = Inode {
            data: bytes.to_vec(),
            durable: bytes.to_vec(),
            pending: Vec::new(),
        };
        disk.new_inode(path, inode);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.lock();
        disk.check()?;
        disk.names
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        self.disk.lock().check()
    }
}

/// An open file of a [`FaultyIo`] disk.
#[derive(Debug)]
struct FaultyFile {
    disk: Arc<Mutex<Disk>>,
    inode: u64,
    path: PathBuf,
}

impl LogFile for FaultyFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let mut disk = self.disk.lock();
        disk.check()?;
        let take = match disk.space {
            Some(0) if !buf.is_empty() => {
                return Err(io::Error::other("no space left on device (FaultyIo)"))
            }
            Some(space) => buf.len().min(space as usize),
            None => buf.len(),
        };
        if let Some(space) = disk.space.as_mut() {
            *space -= take as u64;
        }
        let inode = disk.inode(self.inode)?;
        let change = Change::Write {
            offset,
            bytes: buf[..take].to_vec(),
        };
        apply(&mut inode.data, &change);
        inode.pending.push(change);
        Ok(take)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut disk = self.disk.lock();
        let n = {
            let data = &disk.inode(self.inode)?.data;
            let start = (offset as usize).min(data.len());
            let n = buf.len().min(data.len() - start);
            buf[..n].copy_from_slice(&data[start..start + n]);
            n
        };
        for (path, at) in &disk.flips {
            if *path == self.path && *at >= offset && *at < offset + n as u64 {
                buf[(*at - offset) as usize] ^= 1;
            }
        }
        Ok(n)
    }

    fn sync(&self) -> io::Result<()> {
        let mut disk = self.disk.lock();
        disk.check()?;
        let failing = disk.failing_syncs > 0;
        if failing {
            disk.failing_syncs -= 1;
        } else {
            disk.syncs += 1;
        }
        let inode = disk.inode(self.inode)?;
        let pending = std::mem::take(&mut inode.pending);
        if failing {
            return Err(io::Error::other(
                "input/output error (FaultyIo failed fsync)",
            ));
        }
        for change in &pending {
            apply(&mut inode.durable, change);
        }
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.disk.lock().inode(self.inode)?.data.len() as u64)
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        let mut disk = self.disk.lock();
        let inode = disk.inode(self.inode)?;
        let change = Change::SetLen(len);
        apply(&mut inode.data, &change);
        inode.pending.push(change);
        Ok(())
    }
}
