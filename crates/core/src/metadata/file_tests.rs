//! The file store against its files: journal replay, a torn tail, a failed write.

use std::sync::Arc;

use super::*;
use crate::definitions::QueueRecord;

fn put_queue(name: &str) -> Change {
    Change::VHost {
        vhost: Arc::from("/"),
        change: VHostChange::PutQueue {
            queue: QueueRecord {
                name: Arc::from(name),
                auto_delete: false,
                arguments: Default::default(),
            },
        },
    }
}

fn queue_names(definitions: &VHostDefinitions) -> Vec<&str> {
    definitions.queues.iter().map(|q| &*q.name).collect()
}

#[tokio::test]
async fn changes_come_back_from_the_journal_and_a_torn_tail_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    assert!(store.load_vhost("/").unwrap().is_none());
    store.submit(vec![put_queue("a")]).wait().await.unwrap();
    store
        .submit(vec![put_queue("b"), put_queue("c")])
        .wait()
        .await
        .unwrap();
    drop(store);
    let snapshot = definitions::path_for(dir.path(), "/");
    let journal = journal_path(&snapshot);
    assert!(
        !snapshot.exists(),
        "changes go to the journal, not a rewrite"
    );
    // A record whose bytes never all reached the disk: it was never acknowledged.
    let mut file = fs::OpenOptions::new().append(true).open(&journal).unwrap();
    file.write_all(&[200, 0, 0, 0, 1, 2, 3]).unwrap();
    drop(file);

    let store = FileStore::open(dir.path()).unwrap();
    let loaded = store.load_vhost("/").unwrap().expect("definitions");
    assert_eq!(queue_names(&loaded), ["a", "b", "c"]);
    assert!(
        !journal.exists(),
        "a replayed journal is compacted into the snapshot"
    );
    let saved = definitions::load(&snapshot).unwrap().expect("a snapshot");
    assert_eq!(
        queue_names(&saved),
        ["a", "b", "c"],
        "the old loader reads it"
    );
}

#[tokio::test]
async fn a_failed_write_changes_nothing_and_the_next_write_is_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    store.load_vhost("/").unwrap();
    store.submit(vec![put_queue("a")]).wait().await.unwrap();
    let definitions_dir = dir.path().join("definitions");
    let moved = dir.path().join("moved");
    fs::rename(&definitions_dir, &moved).unwrap();
    fs::write(&definitions_dir, b"a file where a directory was").unwrap();
    let error = store.submit(vec![put_queue("b")]).wait().await.unwrap_err();
    assert!(
        error
            .text
            .contains("cannot write the definitions of vhost '/'"),
        "{}",
        error.text
    );
    fs::remove_file(&definitions_dir).unwrap();
    fs::rename(&moved, &definitions_dir).unwrap();
    store.submit(vec![put_queue("c")]).wait().await.unwrap();
    let snapshot = definitions::path_for(dir.path(), "/");
    assert!(
        !journal_path(&snapshot).exists(),
        "written as a snapshot after a failure"
    );
    drop(store);
    let store = FileStore::open(dir.path()).unwrap();
    let loaded = store.load_vhost("/").unwrap().expect("definitions");
    assert_eq!(queue_names(&loaded), ["a", "c"]);
}
