//! The store's view of the disk: a small trait, so that tests can make the disk fail on
//! purpose ([`crate::FaultyIo`]) and every log this crate keeps (the message store today, a
//! quorum WAL and a stream log later) reads and writes the same way.
//!
//! [`Io`] names files by path (create, open, list, whole-file reads and replaces, remove,
//! directory sync); [`LogFile`] is one open file written and read at offsets, as `pwrite`
//! and `pread` do, and synced with `fdatasync`. [`FsIo`] is the real filesystem.
//! [`write_all_at`] and [`read_exact_at`] turn the syscall-shaped calls into the store's
//! errors, so a short write or read names its file, offset and byte counts.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::StoreError;

/// Permissions of every file the broker creates: read and write for its own user only.
pub const FILE_MODE: u32 = 0o600;
/// Permissions of every directory the broker creates.
pub const DIR_MODE: u32 = 0o700;

/// A file name in a directory listing, with its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub len: u64,
}

/// Files by path.
pub trait Io: Send + Sync + fmt::Debug + 'static {
    /// `create_dir_all` whose new directories are private to the broker's user.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Creates a new, empty file for reading and writing; fails if it exists.
    fn create(&self, path: &Path) -> io::Result<Arc<dyn LogFile>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn LogFile>>;
    /// The regular files of `dir`, in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>>;
    /// A whole (small) file.
    fn read_whole(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Replaces a whole (small) file: a reader sees the old content or the new, never a mix.
    fn replace_whole(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the names in `dir` (files created, removed) survive a power loss.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// One open file, written and read at offsets; shared between threads.
pub trait LogFile: Send + Sync + fmt::Debug {
    /// The path it was opened at, for errors.
    fn path(&self) -> &Path;
    /// Writes some of `buf` at `offset`, as `pwrite`: returns how many bytes it wrote.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// Writes some of `bufs`, one after the other, at `offset`, as `pwritev`: returns how
    /// many bytes it wrote. The default writes the first non-empty slice only.
    fn write_vectored_at(&self, bufs: &[io::IoSlice<'_>], offset: u64) -> io::Result<usize> {
        match bufs.iter().find(|buf| !buf.is_empty()) {
            Some(buf) => self.write_at(buf, offset),
            None => Ok(0),
        }
    }
    /// Reads into `buf` from `offset`, as `pread`: returns how many bytes it read (0 at the
    /// end of the file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Makes every byte written so far durable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Cuts (or extends with zeros) the file to `len` bytes.
    fn truncate(&self, len: u64) -> io::Result<()>;
}

/// Writes all of `buf` at `offset`. A write that stops part way (the disk filled, an I/O
/// error after some bytes) is a [`StoreError::ShortWrite`]: the file now holds a partial
/// record, which only recovery may cut.
pub fn write_all_at(file: &dyn LogFile, buf: &[u8], offset: u64) -> Result<(), StoreError> {
    write_all_vectored_at(file, &mut [io::IoSlice::new(buf)], offset)
}

/// `iovec`s handed to one `pwritev` (Linux's `IOV_MAX` is 1024).
const IOVECS_MAX: usize = 1024;

/// Writes all of `bufs`, one after the other, at `offset`, in as few vectored writes as the
/// kernel allows; a write that stops part way is a [`StoreError::ShortWrite`], as in
/// [`write_all_at`].
pub fn write_all_vectored_at(
    file: &dyn LogFile,
    bufs: &mut [io::IoSlice<'_>],
    offset: u64,
) -> Result<(), StoreError> {
    let wanted: usize = bufs.iter().map(|buf| buf.len()).sum();
    let mut bufs = bufs;
    let mut written = 0;
    while !bufs.is_empty() {
        let take = bufs.len().min(IOVECS_MAX);
        let at = offset + written as u64;
        let failure = match file.write_vectored_at(bufs.get(..take).unwrap_or_default(), at) {
            Ok(0) if bufs.iter().all(|buf| buf.is_empty()) => break,
            Ok(0) => io::Error::new(io::ErrorKind::WriteZero, "the write took no bytes"),
            Ok(n) => {
                debug_assert!(n <= wanted - written, "a write cannot take more than asked");
                written += n;
                io::IoSlice::advance_slices(&mut bufs, n);
                continue;
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => error,
        };
        if written == 0 {
            return Err(StoreError::io("write", file.path(), failure));
        }
        return Err(StoreError::ShortWrite {
            file: file.path().to_path_buf(),
            offset,
            wanted: wanted as u64,
            written: written as u64,
            source: failure,
        });
    }
    Ok(())
}

/// Fills `buf` from `offset`; the file ending first is an error naming the file and offset.
pub fn read_exact_at(file: &dyn LogFile, buf: &mut [u8], offset: u64) -> Result<(), StoreError> {
    let mut read = 0;
    while read < buf.len() {
        match file.read_at(&mut buf[read..], offset + read as u64) {
            Ok(0) => {
                return Err(StoreError::Corrupt {
                    file: file.path().to_path_buf(),
                    offset: offset + read as u64,
                    what: format!("the file ends {} bytes early", buf.len() - read),
                })
            }
            Ok(n) => read += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(StoreError::io("read", file.path(), error)),
        }
    }
    Ok(())
}

/// The real filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct FsIo;

impl Io for FsIo {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        private_dir_all(dir)
    }

    fn create(&self, path: &Path) -> io::Result<Arc<dyn LogFile>> {
        // Messages are private to the broker's user, as the definitions are.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(path)?;
        Ok(Arc::new(FsFile {
            file,
            path: path.to_path_buf(),
        }))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn LogFile>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Arc::new(FsFile {
            file,
            path: path.to_path_buf(),
        }))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let mut entries = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let metadata = entry.metadata()?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue; // not a name the store writes
            };
            if metadata.is_file() {
                entries.push(DirEntry {
                    name,
                    len: metadata.len(),
                });
            }
        }
        Ok(entries)
    }

    fn read_whole(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn replace_whole(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        fs::write(&tmp, bytes)?;
        fs::rename(&tmp, path)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// A file of [`FsIo`].
#[derive(Debug)]
struct FsFile {
    file: File,
    path: PathBuf,
}

impl LogFile for FsFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.file.write_at(buf, offset)
    }

    fn write_vectored_at(&self, bufs: &[io::IoSlice<'_>], offset: u64) -> io::Result<usize> {
        Ok(rustix::io::pwritev(&self.file, bufs, offset)?)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
}

/// `create_dir_all` whose new directories get [`DIR_MODE`] (existing ones keep theirs).
pub fn private_dir_all(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
}
