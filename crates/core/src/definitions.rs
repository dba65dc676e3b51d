//! Durable definitions of one vhost on disk: exchanges, queues and bindings, as one JSON
//! document replaced atomically (write a temporary file, fsync, rename, fsync the directory),
//! so a `kill -9` at any moment leaves either the old or the new document. This is the
//! snapshot the metadata store (`metadata::file`) compacts its journal into.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::binding::Binding;
use crate::exchange::ExchangeDef;
use crate::value::Table;

const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueRecord {
    pub name: Arc<str>,
    pub auto_delete: bool,
    pub arguments: Table,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct VHostDefinitions {
    pub format_version: u32,
    pub vhost: String,
    pub exchanges: Vec<ExchangeDef>,
    pub queues: Vec<QueueRecord>,
    pub bindings: Vec<Binding>,
}

/// The file holding one vhost's definitions under `data_dir`.
pub fn path_for(data_dir: &Path, vhost: &str) -> PathBuf {
    let encoded: String = vhost.bytes().map(|b| format!("{b:02x}")).collect();
    data_dir
        .join("definitions")
        .join(format!("vhost-{encoded}.json"))
}

pub fn load(path: &Path) -> std::io::Result<Option<VHostDefinitions>> {
    let text = match fs::read(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let definitions: VHostDefinitions = serde_json::from_slice(&text).map_err(|error| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is corrupt: {error}", path.display()),
        )
    })?;
    if definitions.format_version != FORMAT_VERSION {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} has format version {}, this build reads {FORMAT_VERSION}",
                path.display(),
                definitions.format_version
            ),
        ));
    }
    Ok(Some(definitions))
}

/// Replaces the vhost's snapshot with `definitions`; returns its size in bytes.
pub fn save(path: &Path, mut definitions: VHostDefinitions) -> std::io::Result<u64> {
    definitions.format_version = FORMAT_VERSION;
    let bytes = serde_json::to_vec_pretty(&definitions).map_err(std::io::Error::other)?;
    write_atomically(path, &bytes)?;
    Ok(bytes.len() as u64)
}

/// Replaces `path` with `bytes` so that a crash leaves the old or the new file: write a
/// temporary file, fsync, rename, fsync the directory.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    warren_store::private_dir_all(dir)?;
    let tmp = path.with_extension("json.tmp");
    // A leftover from a crash would keep the mode it was created with.
    let _ = fs::remove_file(&tmp);
    {
        // Password hashes and definitions: readable by the broker's user only.
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(warren_store::FILE_MODE)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    fs::File::open(dir)?.sync_all()
}

/// Removes a vhost's definitions file (the vhost was deleted).
pub fn remove(path: &Path) -> std::io::Result<()> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}
