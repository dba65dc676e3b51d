#![allow(clippy::indexing_slicing, clippy::panic)]

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;

use super::super::test_support::{any_method, basic_properties};
use super::super::{
    peek_delivery_mode, reply_code, BasicAck, BasicDeliver, BasicProperties, BasicPublish,
    ConnectionTune, FieldTable, FieldValue, ShortStr,
};
use super::*;

/// A publish: method, content header with properties, and a two-frame body.
fn publish_frames() -> BytesMut {
    let mut out = BytesMut::new();
    let publish = BasicPublish {
        exchange: ShortStr::from_static("amq.direct"),
        routing_key: ShortStr::from_static("orders"),
        mandatory: true,
        ..BasicPublish::default()
    };
    encode_method_frame(1, &publish.into(), &mut out);
    let mut raw = BytesMut::new();
    let mut headers = FieldTable::default();
    headers.insert("x-id", FieldValue::I64(42));
    BasicProperties {
        delivery_mode: Some(2),
        headers: Some(headers),
        ..Default::default()
    }
    .encode(&mut raw);
    encode_content_header(1, 60, 5, &raw, &mut out);
    encode_body_frame(1, b"hel", &mut out);
    encode_body_frame(1, b"lo", &mut out);
    encode_heartbeat(&mut out);
    out
}

fn decode_all(buf: &mut BytesMut) -> Vec<Frame> {
    let mut frames = Vec::new();
    while let Some(frame) = decode_frame(buf, FRAME_MIN_SIZE).unwrap() {
        frames.push(frame);
    }
    frames
}

#[test]
fn publish_sequence_round_trips() {
    let mut buf = publish_frames();
    let frames = decode_all(&mut buf);
    assert!(buf.is_empty());
    assert_eq!(frames.len(), 5);
    let Frame::Header { channel: 1, header } = &frames[1] else {
        panic!("{:?}", frames[1])
    };
    assert_eq!((header.class_id, header.body_size), (60, 5));
    assert_eq!(peek_delivery_mode(&header.properties), Some(2));
    let properties = BasicProperties::decode(&header.properties).unwrap();
    assert_eq!(
        properties.headers.unwrap().get("x-id"),
        Some(&FieldValue::I64(42))
    );
    assert_eq!(
        frames[2],
        Frame::Body {
            channel: 1,
            payload: Bytes::from_static(b"hel")
        }
    );
    assert_eq!(frames[4], Frame::Heartbeat { channel: 0 });
}

#[test]
fn bodies_are_slices_of_the_read_buffer() {
    let mut buf = BytesMut::new();
    encode_body_frame(5, &[7; 1000], &mut buf);
    let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
    let Ok(Some(Frame::Body {
        channel: 5,
        payload,
    })) = decode_frame(&mut buf, 0)
    else {
        panic!("expected a body frame");
    };
    assert_eq!(payload.len(), 1000);
    assert!(range.contains(&(payload.as_ptr() as usize)), "no copy");
}

#[test]
fn reply_codes_come_from_the_spec() {
    assert_eq!(reply_code::NOT_FOUND, 404);
    assert_eq!(reply_code::REPLY_SUCCESS, 200);
    assert_eq!(
        reply_code::name(reply_code::PRECONDITION_FAILED),
        "PRECONDITION_FAILED"
    );
    assert_eq!(reply_code::name(999), "UNKNOWN");
    assert!(reply_code::is_hard_error(reply_code::FRAME_ERROR));
    assert!(reply_code::is_hard_error(reply_code::CONNECTION_FORCED));
    assert!(!reply_code::is_hard_error(reply_code::NOT_FOUND));
    assert!(!reply_code::is_hard_error(reply_code::REPLY_SUCCESS));
    let hard = [320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541];
    let soft = [311, 312, 313, 403, 404, 405, 406];
    assert!(hard
        .iter()
        .all(|&c| reply_code::is_hard_error(c) && reply_code::name(c) != "UNKNOWN"));
    assert!(soft
        .iter()
        .all(|&c| !reply_code::is_hard_error(c) && reply_code::name(c) != "UNKNOWN"));
}

#[test]
fn heartbeat_bytes_are_exact() {
    let mut out = BytesMut::new();
    encode_heartbeat(&mut out);
    assert_eq!(&out[..], &[8, 0, 0, 0, 0, 0, 0, 0xCE]);
}

#[test]
fn incomplete_at_every_split_point() {
    let all = publish_frames();
    let expected = decode_all(&mut all.clone());
    for split in 0..=all.len() {
        let mut buf = BytesMut::from(&all[..split]);
        let mut frames = decode_all(&mut buf);
        let consumed = split - buf.len();
        let leftover = buf.clone();
        buf.extend_from_slice(&all[split..]);
        frames.extend(decode_all(&mut buf));
        assert_eq!(frames, expected, "split at {split}");
        // What was left unconsumed is the start of an undecoded frame, untouched.
        assert_eq!(&leftover[..], &all[consumed..split]);
    }
}

#[test]
fn oversize_frame_is_501_before_its_payload_arrives() {
    let mut buf = BytesMut::new();
    buf.put_u8(3);
    buf.put_u16(1);
    // A payload of frame_max passes (RabbitMQ's FRAME_SIZE_FUDGE); one byte more does not.
    buf.put_u32(FRAME_MIN_SIZE + 1);
    let err = decode_frame(&mut buf, FRAME_MIN_SIZE).unwrap_err();
    assert_eq!(
        err,
        DecodeError::FrameTooLarge {
            frame_type: 3,
            channel: 1,
            payload_size: FRAME_MIN_SIZE + 1,
            frame_max: FRAME_MIN_SIZE
        }
    );
    assert_eq!(err.reply_code(), reply_code::FRAME_ERROR);
    assert_eq!(buf.len(), 7, "nothing consumed");
    // A whole frame of frame_max, and a payload of frame_max, are fine (and incomplete here);
    // 0 means no limit.
    let mut exact = BytesMut::from(&[3, 0, 1, 0, 0, 0x0F, 0xF8][..]);
    assert_eq!(decode_frame(&mut exact, FRAME_MIN_SIZE), Ok(None));
    let mut fudged = BytesMut::from(&[3, 0, 1, 0, 0, 0x10, 0x00][..]);
    assert_eq!(decode_frame(&mut fudged, FRAME_MIN_SIZE), Ok(None));
    let mut huge = BytesMut::from(&[3, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF][..]);
    assert_eq!(decode_frame(&mut huge, 0), Ok(None));
}

#[test]
fn bad_frame_end_is_501() {
    let mut buf = BytesMut::new();
    encode_method_frame(
        2,
        &BasicAck {
            delivery_tag: 1,
            multiple: false,
        }
        .into(),
        &mut buf,
    );
    let last = buf.len() - 1;
    buf[last] = 0xCD;
    let err = decode_frame(&mut buf, 0).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::BadFrameEnd {
                found: 0xCD,
                channel: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.reply_code(), reply_code::FRAME_ERROR);
    assert_eq!(buf.len(), last + 1, "nothing consumed");
}

#[test]
fn unknown_frame_type_and_bad_heartbeat_are_501() {
    let mut buf = BytesMut::from(&[4, 0, 0, 0, 0, 0, 0, 0xCE][..]);
    let err = decode_frame(&mut buf, 0).unwrap_err();
    assert_eq!(
        err,
        DecodeError::UnknownFrameType {
            frame_type: 4,
            channel: 0
        }
    );
    assert_eq!(err.reply_code(), reply_code::FRAME_ERROR);
    let mut buf = BytesMut::from(&[8, 0, 0, 0, 0, 0, 1, 0, 0xCE][..]);
    let err = decode_frame(&mut buf, 0).unwrap_err();
    assert_eq!(
        err,
        DecodeError::BadHeartbeat {
            channel: 0,
            payload_size: 1
        }
    );
    assert_eq!(err.reply_code(), reply_code::FRAME_ERROR);
}

#[test]
fn content_header_checks() {
    type Check = fn(&DecodeError) -> bool;
    let raw = [0u8, 0];
    let cases: [(u16, u16, Check); 2] = [
        (10, 0, |e| {
            matches!(e, DecodeError::UnknownContentClass { class_id: 10 })
        }),
        (60, 1, |e| {
            matches!(e, DecodeError::BadHeaderWeight { weight: 1, .. })
        }),
    ];
    for (class_id, weight, expected) in cases {
        let mut buf = BytesMut::new();
        buf.put_slice(&[2, 0, 1, 0, 0, 0, 14]);
        buf.put_u16(class_id);
        buf.put_u16(weight);
        buf.put_u64(0);
        buf.put_slice(&raw);
        buf.put_u8(FRAME_END);
        let err = decode_frame(&mut buf, 0).unwrap_err();
        assert!(expected(&err), "{err}");
    }
    let mut buf = BytesMut::new();
    encode_content_header(1, 60, 0, &[0, 1], &mut buf);
    let err = decode_frame(&mut buf, 0).unwrap_err();
    assert_eq!(err.reply_code(), reply_code::SYNTAX_ERROR);
}

#[test]
fn protocol_header() {
    assert_eq!(check_protocol_header(b""), ProtocolHeader::Incomplete);
    assert_eq!(check_protocol_header(b"AMQP"), ProtocolHeader::Incomplete);
    assert_eq!(
        check_protocol_header(&PROTOCOL_HEADER),
        ProtocolHeader::Valid
    );
    assert_eq!(
        check_protocol_header(b"AMQP\x00\x00\x09\x01\x01"),
        ProtocolHeader::Valid
    );
    assert_eq!(
        check_protocol_header(b"AMQP\x01\x01\x00\x0a"),
        ProtocolHeader::Mismatch
    );
    assert_eq!(
        check_protocol_header(b"GET / HTTP/1.1"),
        ProtocolHeader::Mismatch
    );
    assert_eq!(check_protocol_header(b"H"), ProtocolHeader::Mismatch);
}

#[test]
fn method_frame_sizes_are_patched() {
    let mut out = BytesMut::from(&b"prefix"[..]);
    let tune = ConnectionTune {
        channel_max: 2047,
        frame_max: 131_072,
        heartbeat: 60,
    };
    encode_method_frame(0, &tune.into(), &mut out);
    assert_eq!(&out[6..13], &[1, 0, 0, 0, 0, 0, 12]);
    assert_eq!(out.len(), 6 + 8 + 12);
}

/// Decodes until error or exhaustion; must never panic and must always make progress.
fn drain(buf: &mut BytesMut, frame_max: u32) {
    loop {
        let before = buf.len();
        match decode_frame(buf, frame_max) {
            Ok(Some(_)) => assert!(buf.len() < before),
            Ok(None) => {
                assert_eq!(buf.len(), before);
                return;
            }
            Err(e) => {
                assert!(matches!(e.reply_code(), 501 | 502 | 505 | 540), "{e}");
                assert!(!e.to_string().is_empty());
                return;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn random_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        max in 0u32..512,
    ) {
        drain(&mut BytesMut::from(&bytes[..]), max);
    }

    #[test]
    fn random_frame_payloads_never_panic(
        frame_type in prop_oneof![Just(1u8), Just(2), Just(3), Just(8)],
        payload in proptest::collection::vec(any::<u8>(), 0..128),
    ) {
        let mut buf = BytesMut::new();
        buf.put_u8(frame_type);
        buf.put_u16(0);
        buf.put_u32(u32::try_from(payload.len()).unwrap());
        buf.put_slice(&payload);
        buf.put_u8(FRAME_END);
        drain(&mut buf, 0);
    }

    #[test]
    fn mutated_frames_never_panic(
        method in any_method(),
        properties in basic_properties(),
        cut in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 0..4),
    ) {
        let mut buf = BytesMut::new();
        encode_method_frame(3, &method, &mut buf);
        let mut raw = BytesMut::new();
        properties.encode(&mut raw);
        encode_content_header(3, 60, 1, &raw, &mut buf);
        for (index, bit) in flips {
            let i = index.index(buf.len());
            buf[i] ^= 1 << bit;
        }
        let len = cut.index(buf.len() + 1);
        buf.truncate(len);
        drain(&mut buf, 0);
        drain(&mut buf, FRAME_MIN_SIZE);
    }

    #[test]
    fn content_headers_round_trip(properties in basic_properties(), body_size in any::<u64>()) {
        let mut raw = BytesMut::new();
        properties.encode(&mut raw);
        let mut buf = BytesMut::new();
        encode_content_header(9, 60, body_size, &raw, &mut buf);
        let frame = decode_frame(&mut buf, 0).unwrap().unwrap();
        let header = ContentHeader { class_id: 60, body_size, properties: raw.freeze() };
        prop_assert_eq!(frame, Frame::Header { channel: 9, header });
    }
}

#[test]
fn deliver_frame_matches_the_method_encoder() {
    let cases = [
        ("ctag-1", 1, false, "", "orders"),
        ("amq.ctag-xyz", u64::MAX, true, "amq.direct", "a.b.c"),
        ("", 42, false, "x", &"é".repeat(127)),
    ];
    for (tag, delivery_tag, redelivered, exchange, routing_key) in cases {
        let method = Method::BasicDeliver(BasicDeliver {
            consumer_tag: ShortStr::from(tag),
            delivery_tag,
            redelivered,
            exchange: ShortStr::from(exchange),
            routing_key: ShortStr::from(routing_key),
        });
        let mut expected = BytesMut::new();
        encode_method_frame(7, &method, &mut expected);
        let mut got = BytesMut::new();
        let consumer_tag = ShortStr::from(tag);
        let args = DeliverArgs {
            consumer_tag: &consumer_tag,
            delivery_tag,
            redelivered,
            exchange: exchange.as_bytes(),
            routing_key: routing_key.as_bytes(),
        };
        encode_deliver_frame(7, &args, &mut got);
        assert_eq!(got, expected, "{tag} {exchange} {routing_key}");
    }
}
