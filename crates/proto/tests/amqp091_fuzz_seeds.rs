//! The committed fuzz seeds are still valid frame streams (the fuzzer starts from them, so a seed
//! that no longer decodes would waste its first mutations). Regenerate them with
//! `cargo run -p warren-proto --example amqp091_fuzz_seeds`.

use std::path::PathBuf;

use bytes::BytesMut;
use warren_proto::amqp091::{decode_frame, Frame};

#[test]
fn seeds_decode_completely() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/amqp091_frame");
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).expect("the seed directory exists") {
        let path = entry.expect("readable directory").path();
        let data = std::fs::read(&path).expect("readable seed");
        // Two selector bytes (split point, frame_max), then frames.
        let mut buf = BytesMut::from(&data[2..]);
        let mut frames = Vec::new();
        while let Some(frame) = decode_frame(&mut buf, 4096).expect("a valid seed") {
            frames.push(frame);
        }
        assert!(buf.is_empty(), "{} has trailing bytes", path.display());
        assert!(!frames.is_empty());
        assert!(frames
            .iter()
            .all(|f| !matches!(f, Frame::Body { channel: 0, .. })));
        seeds += 1;
    }
    assert!(seeds >= 5, "found {seeds} seeds in {}", dir.display());
}
