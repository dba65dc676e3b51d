//! Recovers the message store from arbitrary files: a segment and, when the first byte says
//! so, an index beside it, on an in-memory disk (`FaultyIo`). Recovery may report damage
//! but never panic, and every message it returns must read back or fail with an error.
#![no_main]

use std::path::Path;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use warren_store::{write_all_at, FaultyIo, Io, Store, StoreConfig};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    // The low bit asks for an index file; the other bits say where the segment ends.
    let split = if selector & 1 == 1 {
        (usize::from(selector >> 1) * rest.len() / 128).min(rest.len())
    } else {
        rest.len()
    };
    let (segment, index) = rest.split_at(split);
    let io = FaultyIo::new();
    let dir = Path::new("/fuzz/store");
    let files = [
        (dir.join("00000000000000000001.seg"), segment),
        (dir.join("00000000000000000001.idx"), index),
    ];
    for (path, bytes) in files {
        if bytes.is_empty() && path.extension().is_some_and(|e| e == "idx") {
            continue;
        }
        let file = io.create(&path).expect("the in-memory disk creates files");
        write_all_at(&*file, bytes, 0).expect("the in-memory disk takes writes");
    }
    let config = StoreConfig {
        dir: dir.to_path_buf(),
        segment_bytes: 1 << 20,
    };
    let (store, recovered) = Store::open_on(Arc::new(io), config).expect("recovery never fails");
    let _ = recovered.damage();
    for queue in recovered.into_queues() {
        for message in queue.messages {
            let _ = store.read(message.location);
        }
    }
});
