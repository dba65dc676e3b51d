//! Feeds arbitrary bytes to `decode_frame`, split at a point the fuzzer chooses so that incomplete
//! frames are exercised, and checks that every decoded method and content header survives an
//! encode -> decode round trip.
//!
//! Input layout: byte 0 picks the split point (scaled to the input length), byte 1 picks
//! `frame_max`, the rest is the stream of frames.
#![no_main]

mod split_feed;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use warren_proto::amqp091::{
    decode_frame, encode_content_header, encode_method_frame, BasicProperties, ContentHeader,
    Frame, Method, FRAME_MIN_SIZE,
};

fuzz_target!(|data: &[u8]| {
    split_feed::feed(data, [0, FRAME_MIN_SIZE, 131_072], drain);
});

/// Decodes frames until the buffer runs dry (`true`) or an error (`false`).
fn drain(buf: &mut BytesMut, frame_max: u32) -> bool {
    loop {
        let before = buf.clone();
        match decode_frame(buf, frame_max) {
            Ok(Some(frame)) => {
                assert!(buf.len() < before.len(), "a decoded frame consumes bytes");
                check_round_trip(&frame);
            }
            Ok(None) => {
                assert_eq!(
                    *buf, before,
                    "an incomplete frame leaves the buffer untouched"
                );
                return true;
            }
            Err(e) => {
                assert!(matches!(e.reply_code(), 501 | 502 | 505 | 540), "{e}");
                return false;
            }
        }
    }
}

fn check_round_trip(frame: &Frame) {
    match frame {
        Frame::Method { channel, method } => check_method(*channel, method),
        Frame::Header { channel, header } => check_header(*channel, header),
        Frame::Body { .. } | Frame::Heartbeat { .. } => {}
    }
}

fn check_method(channel: u16, method: &Method) {
    let mut encoded = BytesMut::new();
    encode_method_frame(channel, method, &mut encoded);
    let mut copy = encoded.clone();
    let Ok(Some(Frame::Method {
        channel: c,
        method: decoded,
    })) = decode_frame(&mut copy, 0)
    else {
        panic!("our own encoding of {method:?} does not decode");
    };
    assert_eq!(c, channel);
    assert!(copy.is_empty());
    // NaN in a field table makes `==` false for equal values; the bytes still have to match.
    if method == &method.clone() {
        assert_eq!(&decoded, method);
    }
    let mut again = BytesMut::new();
    encode_method_frame(channel, &decoded, &mut again);
    assert_eq!(
        again, encoded,
        "encode is a fixed point after one round trip"
    );
}

fn check_header(channel: u16, header: &ContentHeader) {
    let properties = BasicProperties::decode(&header.properties)
        .expect("decode_frame validated these properties");
    let mut raw = BytesMut::new();
    properties.encode(&mut raw);
    let mut encoded = BytesMut::new();
    encode_content_header(
        channel,
        header.class_id,
        header.body_size,
        &raw,
        &mut encoded,
    );
    let Ok(Some(Frame::Header {
        header: decoded, ..
    })) = decode_frame(&mut encoded, 0)
    else {
        panic!("our own encoding of {properties:?} does not decode");
    };
    assert_eq!(decoded.body_size, header.body_size);
    assert_eq!(decoded.properties, raw.freeze());
    let again = BasicProperties::decode(&decoded.properties).expect("valid");
    if properties == properties.clone() {
        assert_eq!(again, properties);
    }
}
