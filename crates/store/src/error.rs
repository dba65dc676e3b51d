//! What went wrong in the store, said so that an operator can act on it: which file, which
//! offset, and whether the store stopped for good ([`StoreError::Poisoned`]).

use std::io;
use std::path::{Path, PathBuf};

/// An error of the store's API.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A call on a file failed.
    #[error("cannot {action} {}: {source}", file.display())]
    Io {
        action: &'static str,
        file: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A write stopped part way: the file ends in a partial record.
    #[error(
        "short write to {} at offset {offset}: {written} of {wanted} bytes written ({source})",
        file.display()
    )]
    ShortWrite {
        file: PathBuf,
        offset: u64,
        wanted: u64,
        written: u64,
        #[source]
        source: io::Error,
    },
    /// Bytes on disk are not what was written there (checksum, framing, a file cut short).
    #[error("{} at offset {offset}: {what}", file.display())]
    Corrupt {
        file: PathBuf,
        offset: u64,
        what: String,
    },
    /// An earlier write or fsync failed, so nothing written since can be trusted to be on
    /// disk; the store refuses every write and confirm until the broker restarts (a failed
    /// fsync is never retried: the kernel may have dropped the unsynced pages already).
    #[error(
        "the message store stopped after an earlier failure ({cause}); nothing more is \
         confirmed: fix the disk, then restart the broker"
    )]
    Poisoned { cause: String },
    /// The store was closed (the broker is shutting down).
    #[error("the message store is closed (broker shutting down)")]
    Closed,
    /// A call the stream log cannot serve as asked (an offset past its end, a compressed
    /// sub-batch read record by record); the text names the thing and what to do instead.
    #[error("{what}")]
    Refused { what: String },
    /// A read named a segment that was deleted (every message in it was done with).
    #[error("segment {segment} of the message store is gone (its messages were all acked)")]
    Gone { segment: u32 },
}

impl StoreError {
    pub(crate) fn io(action: &'static str, file: &Path, source: io::Error) -> StoreError {
        StoreError::Io {
            action,
            file: file.to_path_buf(),
            source,
        }
    }
}

/// For callers whose own errors are `io::Error` (the broker's startup).
impl From<StoreError> for io::Error {
    fn from(error: StoreError) -> io::Error {
        let kind = match &error {
            StoreError::Io { source, .. } => source.kind(),
            StoreError::ShortWrite { .. } => io::ErrorKind::WriteZero,
            StoreError::Corrupt { .. } => io::ErrorKind::InvalidData,
            StoreError::Gone { .. } => io::ErrorKind::NotFound,
            StoreError::Refused { .. } => io::ErrorKind::InvalidInput,
            StoreError::Poisoned { .. } | StoreError::Closed => io::ErrorKind::Other,
        };
        io::Error::new(kind, error)
    }
}
