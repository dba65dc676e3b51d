//! Feeds arbitrary bytes to the stream protocol's `decode_frame`, split at a point the fuzzer
//! chooses so that incomplete frames are exercised, decodes every complete frame with
//! `decode_command`, and checks that every decoded command survives an encode -> decode
//! round trip.
//!
//! Input layout: byte 0 picks the split point (scaled to the input length), byte 1 picks
//! `frame_max`, the rest is the stream of frames.
#![no_main]

mod split_feed;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use warren_proto::stream::{decode_command, decode_frame, response_code, Command};

fuzz_target!(|data: &[u8]| {
    // 8192 is RabbitMQ's frame_max before Open completes.
    split_feed::feed(data, [0, 8192, 1_048_576], drain);
});

/// Decodes frames until the buffer runs dry (`true`) or a frame-level error (`false`).
fn drain(buf: &mut BytesMut, frame_max: u32) -> bool {
    loop {
        let before = buf.clone();
        match decode_frame(buf, frame_max) {
            Ok(Some(frame)) => {
                assert!(buf.len() < before.len(), "a decoded frame consumes bytes");
                match decode_command(&frame) {
                    Ok(command) => check_round_trip(&command),
                    Err(e) => assert!(
                        matches!(
                            e.response_code(),
                            response_code::UNKNOWN_FRAME | response_code::PRECONDITION_FAILED
                        ),
                        "{e}"
                    ),
                }
            }
            Ok(None) => {
                assert_eq!(
                    *buf, before,
                    "an incomplete frame leaves the buffer untouched"
                );
                return true;
            }
            Err(e) => {
                assert!(
                    matches!(
                        e.response_code(),
                        response_code::FRAME_TOO_LARGE | response_code::UNKNOWN_FRAME
                    ),
                    "{e}"
                );
                return false;
            }
        }
    }
}

fn check_round_trip(command: &Command) {
    let mut encoded = BytesMut::new();
    command
        .encode(&mut encoded)
        .expect("invariant: a command decoded from a frame fits in one");
    let frame = decode_frame(&mut encoded, 0)
        .expect("our own encoding has a valid size prefix")
        .expect("our own encoding is a whole frame");
    assert!(
        encoded.is_empty(),
        "our own encoding of {command:?} is one frame"
    );
    let decoded = decode_command(&frame).expect("our own encoding decodes");
    assert_eq!(&decoded, command);
}
