//! Feeds arbitrary bytes to the AMQP 1.0 `decode_frame`, split at a point the fuzzer chooses so
//! that incomplete frames are exercised; every decoded performative and SASL frame must survive
//! an encode -> decode round trip, and every transfer payload goes through the message-section
//! decoder.
//!
//! Input layout: byte 0 picks the split point (scaled to the input length), byte 1 picks
//! `max_frame_size`, the rest is the stream of frames.
#![no_main]

mod split_feed;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use warren_proto::amqp10::frame::{encode_frame, encode_sasl_frame, MIN_MAX_FRAME_SIZE};
use warren_proto::amqp10::message::Sections;
use warren_proto::amqp10::{decode_frame, Frame, FrameBody};

fuzz_target!(|data: &[u8]| {
    split_feed::feed(data, [MIN_MAX_FRAME_SIZE, 131_072, u32::MAX], drain);
});

/// Decodes frames until the buffer runs dry (`true`) or an error (`false`).
fn drain(buf: &mut BytesMut, max_frame_size: u32) -> bool {
    loop {
        let before = buf.clone();
        match decode_frame(buf, max_frame_size) {
            Ok(Some(frame)) => {
                assert!(buf.len() < before.len(), "a decoded frame consumes bytes");
                check_round_trip(&frame);
            }
            Ok(None) => {
                assert_eq!(*buf, before, "an incomplete frame leaves the buffer untouched");
                return true;
            }
            Err(e) => {
                assert!(e.condition().starts_with("amqp:"), "{e}");
                return false;
            }
        }
    }
}

fn check_round_trip(frame: &Frame) {
    let mut encoded = BytesMut::new();
    match &frame.body {
        FrameBody::Empty => return,
        FrameBody::Amqp {
            performative,
            payload,
        } => {
            // The broker's publish path checks with `decode_kept`: it must accept exactly
            // what `decode` accepts, with the same offsets.
            let full = Sections::decode(payload);
            let kept = Sections::decode_kept(payload);
            assert_eq!(full.is_ok(), kept.is_ok(), "decode and decode_kept disagree");
            if let (Ok(full), Ok(kept)) = (full, kept) {
                assert_eq!(
                    (full.annotations_at, full.bare_at, full.body_at, full.body_end),
                    (kept.annotations_at, kept.bare_at, kept.body_at, kept.body_end)
                );
            }
            encode_frame(&mut encoded, frame.channel, performative, payload);
        }
        FrameBody::Sasl(sasl) => encode_sasl_frame(&mut encoded, sasl),
    }
    let first = encoded.clone();
    let Ok(Some(decoded)) = decode_frame(&mut encoded, u32::MAX) else {
        panic!("our own encoding of {frame:?} does not decode");
    };
    assert!(encoded.is_empty());
    let mut again = BytesMut::new();
    match &decoded.body {
        FrameBody::Amqp {
            performative,
            payload,
        } => encode_frame(&mut again, decoded.channel, performative, payload),
        FrameBody::Sasl(sasl) => encode_sasl_frame(&mut again, sasl),
        FrameBody::Empty => panic!("a frame with a body decoded as empty"),
    }
    assert_eq!(again, first, "encode is a fixed point after one round trip");
}
