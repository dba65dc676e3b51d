//! Files holding password hashes, definitions and messages are private to the broker's user:
//! every file the broker creates is 0600 and every directory 0700.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use warren_tests::{bounded, confirm_channel, unique, TestBroker};

fn walk(dir: &Path, found: &mut Vec<(std::path::PathBuf, u32, bool)>) {
    for entry in std::fs::read_dir(dir).expect("read the data dir") {
        let entry = entry.expect("a directory entry");
        let metadata = entry.metadata().expect("metadata");
        let mode = metadata.permissions().mode() & 0o777;
        found.push((entry.path(), mode, metadata.is_dir()));
        if metadata.is_dir() {
            walk(&entry.path(), found);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_files_are_0600_and_directories_0700() {
    let broker = TestBroker::start().await;
    let Some(data_dir) = broker.data_dir().map(Path::to_path_buf) else {
        return; // an external broker's files are not ours to check
    };
    let connection = broker.connect().await;
    let channel = confirm_channel(&connection).await;
    let queue = unique("q-private");
    let options = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    bounded!(channel.queue_declare(queue.as_str().into(), options, FieldTable::default()))
        .expect("declare a durable queue");
    let publish = channel.basic_publish(
        "".into(),
        queue.as_str().into(),
        BasicPublishOptions::default(),
        b"secret",
        BasicProperties::default().with_delivery_mode(2),
    );
    bounded!(bounded!(publish).expect("publish")).expect("confirmed");
    let mut found = Vec::new();
    walk(&data_dir, &mut found);
    let files = found.iter().filter(|(_, _, dir)| !dir).count();
    assert!(
        files >= 2,
        "definitions and a store segment exist: {found:?}"
    );
    for (path, mode, is_dir) in &found {
        let expected = if *is_dir { 0o700 } else { 0o600 };
        assert_eq!(*mode, expected, "{} has mode {mode:o}", path.display());
    }
}
