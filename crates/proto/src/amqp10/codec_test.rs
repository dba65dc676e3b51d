#![allow(clippy::indexing_slicing, clippy::panic)]
//! Round trips for every primitive, compound, performative, SASL frame and section, the
//! encodings the spec fixes byte for byte, and truncated or corrupt input (never a panic).

use bytes::{Bytes, BytesMut};

use super::frame::{decode_frame, encode_empty_frame, encode_frame, encode_sasl_frame};
use super::message::{encode_simple, Body, Header, Properties, Sections};
use super::*;

fn round_trip(value: &Value) -> Value {
    let mut out = BytesMut::new();
    value.encode(&mut out);
    let bytes = out.freeze();
    let (back, used) = Value::decode(&bytes).unwrap();
    assert_eq!(used, bytes.len(), "{value:?}");
    back
}

fn samples() -> Vec<Value> {
    vec![
        Value::Null,
        Value::Bool(true),
        Value::Bool(false),
        Value::Ubyte(200),
        Value::Ushort(65000),
        Value::Uint(0),
        Value::Uint(7),
        Value::Uint(70000),
        Value::Ulong(0),
        Value::Ulong(9),
        Value::Ulong(1 << 40),
        Value::Byte(-5),
        Value::Short(-300),
        Value::Int(-7),
        Value::Int(1 << 20),
        Value::Long(-1),
        Value::Long(1 << 50),
        Value::Float(1.5),
        Value::Double(-2.25),
        Value::Decimal32([1, 2, 3, 4]),
        Value::Decimal64([1; 8]),
        Value::Decimal128([2; 16]),
        Value::Char('é'),
        Value::Timestamp(1_700_000_000_000),
        Value::Uuid([7; 16]),
        Value::Binary(Bytes::from_static(b"\x00\x01")),
        Value::Binary(Bytes::from(vec![9u8; 300])),
        Value::string("hello"),
        Value::String(Bytes::from("x".repeat(1000))),
        Value::symbol("amqp:accepted:list"),
        Value::described(0x24, Value::List(vec![])),
        Value::List(vec![Value::Uint(1), Value::string("a"), Value::Null]),
        Value::List((0..300).map(Value::Uint).collect()),
        Value::Map(vec![(Value::symbol("k"), Value::Int(3))]),
        Value::Array(vec![Value::symbol("a"), Value::symbol("bc")]),
        Value::Array(vec![Value::Uint(1), Value::Uint(100_000)]),
        Value::Array(vec![Value::string(&"s".repeat(300))]),
        Value::Array(vec![Value::List(vec![Value::Bool(true)])]),
        Value::Array(vec![
            Value::described(0x24, Value::List(vec![])),
            Value::described(0x24, Value::List(vec![Value::Null])),
        ]),
    ]
}

#[test]
fn every_primitive_and_compound_round_trips() {
    for value in samples() {
        assert_eq!(round_trip(&value), value);
    }
}

#[test]
fn smallest_encodings_are_chosen() {
    let encoded = |v: Value| {
        let mut out = BytesMut::new();
        v.encode(&mut out);
        out.to_vec()
    };
    assert_eq!(encoded(Value::Uint(0)), [0x43]);
    assert_eq!(encoded(Value::Uint(5)), [0x52, 5]);
    assert_eq!(encoded(Value::Ulong(0x10)), [0x53, 0x10]);
    assert_eq!(encoded(Value::List(vec![])), [0x45]);
    assert_eq!(encoded(Value::symbol("ab")), [0xa3, 2, b'a', b'b']);
    assert_eq!(
        encoded(Value::described(0x24, Value::List(vec![]))),
        [0x00, 0x53, 0x24, 0x45]
    );
}

#[test]
fn wide_encodings_decode() {
    // list32 holding one uint32, and a str32.
    let list = Bytes::from_static(&[0xd0, 0, 0, 0, 9, 0, 0, 0, 1, 0x70, 0, 0, 0, 42]);
    assert_eq!(
        Value::decode(&list).unwrap().0,
        Value::List(vec![Value::Uint(42)])
    );
    let text = Bytes::from_static(&[0xb1, 0, 0, 0, 2, b'h', b'i']);
    assert_eq!(Value::decode(&text).unwrap().0, Value::string("hi"));
    let symbolic = Bytes::from_static(b"\x00\xa3\x12amqp:accepted:list\x45");
    let (value, _) = Value::decode(&symbolic).unwrap();
    assert!(matches!(
        DeliveryState::from_value(value),
        Ok(DeliveryState::Accepted)
    ));
}

#[test]
fn malformed_values_are_errors() {
    for bad in [
        &[0x01][..],                                 // unknown format code
        &[0xa1, 2, 0xff, 0xfe],                      // invalid UTF-8
        &[0xc0, 1, 5],                               // count larger than the size
        &[0xc1, 2, 1, 0x40],                         // map with an odd count
        &[0xd0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1], // size beyond the input
        &[0xb0, 0, 0, 0, 9, 1],                      // truncated binary
    ] {
        assert!(
            Value::decode(&Bytes::copy_from_slice(bad)).is_err(),
            "{bad:?}"
        );
    }
    let mut deep = vec![0x00u8; 200];
    deep.push(0x40);
    assert!(matches!(
        Value::decode(&Bytes::from(deep)),
        Err(DecodeError::TooDeep { .. })
    ));
}

/// One of each performative, with fields set to values that are not their defaults.
fn performatives() -> Vec<Performative> {
    let mut all = link_performatives();
    all.extend(delivery_performatives());
    all
}

/// The performatives that open and grant: open, begin, attach, flow.
fn link_performatives() -> Vec<Performative> {
    vec![
        Performative::Open(Box::new(Open {
            container_id: "c1".into(),
            hostname: Some("localhost".into()),
            max_frame_size: Some(65536),
            channel_max: Some(10),
            idle_time_out: Some(30000),
            offered_capabilities: vec!["ANONYMOUS-RELAY".into()],
            desired_capabilities: vec![],
            properties: Some(vec![(Value::symbol("product"), Value::string("x"))]),
        })),
        Performative::Begin(Begin {
            remote_channel: Some(1),
            next_outgoing_id: 0,
            incoming_window: 100,
            outgoing_window: 200,
            handle_max: Some(3),
            ..Default::default()
        }),
        Performative::Attach(Box::new(Attach {
            name: "link".into(),
            handle: 2,
            role: ROLE_RECEIVER,
            snd_settle_mode: Some(SND_MIXED),
            source: Some(Terminus {
                address: Some("/queues/q".into()),
                durable: Some(2),
                dynamic: false,
                rest: vec![Value::Uint(2)],
                coordinator: false,
            }),
            target: Some(Terminus::default()),
            initial_delivery_count: Some(0),
            max_message_size: Some(1 << 20),
            ..Default::default()
        })),
        Performative::Flow(Flow {
            next_incoming_id: Some(1),
            incoming_window: 5,
            next_outgoing_id: 6,
            outgoing_window: 7,
            handle: Some(0),
            delivery_count: Some(3),
            link_credit: Some(200),
            drain: true,
            ..Default::default()
        }),
    ]
}

/// The performatives that move and settle messages, and those that end: transfer,
/// disposition, detach, end, close.
fn delivery_performatives() -> Vec<Performative> {
    vec![
        Performative::Transfer(Transfer {
            handle: 0,
            delivery_id: Some(9),
            delivery_tag: Some(Bytes::from_static(b"t")),
            message_format: Some(0),
            settled: Some(false),
            more: true,
            state: Some(DeliveryState::Received {
                section_number: 1,
                section_offset: 2,
            }),
            ..Default::default()
        }),
        Performative::Disposition(Disposition {
            role: ROLE_SENDER,
            first: 1,
            last: Some(4),
            settled: true,
            state: Some(DeliveryState::Modified {
                delivery_failed: true,
                undeliverable_here: false,
                message_annotations: None,
            }),
            batchable: false,
        }),
        Performative::Disposition(Disposition {
            role: ROLE_RECEIVER,
            first: 1,
            state: Some(DeliveryState::Rejected {
                error: Some(AmqpError::new(condition::NOT_FOUND, "gone")),
            }),
            ..Default::default()
        }),
        Performative::Detach(Detach {
            handle: 1,
            closed: true,
            error: Some(AmqpError::new(condition::NOT_FOUND, "no queue")),
        }),
        Performative::End(End { error: None }),
        Performative::Close(Close {
            error: Some(AmqpError::new(condition::DECODE_ERROR, "bad")),
        }),
    ]
}

#[test]
fn performatives_round_trip_through_frames() {
    for performative in performatives() {
        let mut out = BytesMut::new();
        encode_frame(&mut out, 3, &performative, b"payload");
        let frame = decode_frame(&mut out, 1 << 20).unwrap().unwrap();
        assert!(out.is_empty());
        assert_eq!(frame.channel, 3);
        let FrameBody::Amqp {
            performative: back,
            payload,
        } = frame.body
        else {
            panic!("not an AMQP frame");
        };
        assert_eq!(back, performative);
        assert_eq!(&payload[..], b"payload");
    }
}

#[test]
fn sasl_frames_and_heartbeats_round_trip() {
    for sasl in [
        SaslFrame::Mechanisms(vec!["PLAIN".into(), "ANONYMOUS".into()]),
        SaslFrame::Init {
            mechanism: "PLAIN".into(),
            initial_response: Some(Bytes::from_static(b"\0guest\0guest")),
            hostname: None,
        },
        SaslFrame::Outcome {
            code: condition::SASL_AUTH,
            additional_data: None,
        },
    ] {
        let mut out = BytesMut::new();
        encode_sasl_frame(&mut out, &sasl);
        let frame = decode_frame(&mut out, 512).unwrap().unwrap();
        assert_eq!(frame.body, FrameBody::Sasl(sasl));
    }
    let mut out = BytesMut::new();
    encode_empty_frame(&mut out);
    assert_eq!(
        decode_frame(&mut out, 512).unwrap().unwrap().body,
        FrameBody::Empty
    );
}

#[test]
fn frames_wait_for_their_bytes_and_check_limits() {
    let mut whole = BytesMut::new();
    encode_frame(&mut whole, 0, &performatives()[0], b"");
    for cut in 0..whole.len() {
        let mut part = BytesMut::from(&whole[..cut]);
        assert_eq!(decode_frame(&mut part, 1 << 20), Ok(None));
    }
    let mut big = whole.clone();
    assert!(matches!(
        decode_frame(&mut big, 16),
        Err(DecodeError::FrameTooLarge { .. })
    ));
    let mut bad_doff = BytesMut::from(&[0u8, 0, 0, 8, 1, 0, 0, 0][..]);
    assert!(decode_frame(&mut bad_doff, 512).is_err());
    let mut bad_type = BytesMut::from(&[0u8, 0, 0, 9, 2, 7, 0, 0, 0x40][..]);
    assert!(decode_frame(&mut bad_type, 512).is_err());
}

#[test]
fn corrupt_frames_never_panic() {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for performative in performatives() {
        let mut whole = BytesMut::new();
        encode_frame(&mut whole, 1, &performative, b"xy");
        for i in 8..whole.len() {
            for _ in 0..4 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let mut copy = whole.clone();
                copy[i] = rng as u8;
                let _ = decode_frame(&mut copy, 1 << 20);
            }
        }
    }
}

#[test]
fn message_sections_decode_with_zero_copy_data() {
    let header = Header {
        durable: true,
        priority: Some(5),
        ttl: Some(1000),
        ..Default::default()
    };
    let properties = Properties {
        message_id: Some(Value::string("m1")),
        to: Some("/queues/q".into()),
        content_type: Some("text/plain".into()),
        creation_time: Some(1_700_000_000_000),
        ..Default::default()
    };
    let mut out = BytesMut::new();
    encode_simple(&mut out, Some(&header), Some(&properties), b"body bytes");
    let bytes = out.freeze();
    let sections = Sections::decode(&bytes).unwrap();
    assert_eq!(sections.header, Some(header));
    assert_eq!(sections.properties, Some(properties));
    let Body::Data(chunks) = &sections.body else {
        panic!("expected data");
    };
    assert_eq!(&chunks[0][..], b"body bytes");
    // The data section is a slice of the message, not a copy.
    let start = bytes.as_ptr() as usize;
    let chunk = chunks[0].as_ptr() as usize;
    assert!(chunk >= start && chunk < start + bytes.len());
    assert!(sections.bare_at > 0);
}

/// A message with every section kind: header, message annotations, properties, application
/// properties (with nested values) and two data sections.
fn every_section_message() -> Vec<u8> {
    let mut out = BytesMut::new();
    Header {
        durable: true,
        ..Default::default()
    }
    .to_value()
    .encode(&mut out);
    let annotations = vec![(Value::symbol("x-opt-a"), Value::List(vec![Value::Ulong(7)]))];
    crate::amqp10::message::encode_map_section(&mut out, 0x72, &annotations);
    Properties {
        message_id: Some(Value::string("m1")),
        ..Default::default()
    }
    .to_value()
    .encode(&mut out);
    let application = vec![
        (Value::string("k"), Value::symbol("v")),
        (Value::string("big"), Value::Ulong(u64::MAX)),
        (
            Value::string("arr"),
            Value::Array(vec![Value::Int(1), Value::Int(2)]),
        ),
        (
            Value::string("map"),
            Value::Map(vec![(Value::string("a"), Value::Char('é'))]),
        ),
    ];
    crate::amqp10::message::encode_map_section(&mut out, 0x74, &application);
    crate::amqp10::message::encode_data_head(&mut out, 5);
    out.extend_from_slice(b"hello");
    crate::amqp10::message::encode_data_head(&mut out, 2);
    out.extend_from_slice(b"!!");
    out.to_vec()
}

/// Asserts that `decode_kept` and `decode` agree on `bytes`: both fail, or both succeed with the
/// same header, properties and section offsets.
fn assert_kept_agrees(bytes: Vec<u8>) {
    let bytes = Bytes::from(bytes);
    let (full, kept) = (Sections::decode(&bytes), Sections::decode_kept(&bytes));
    assert_eq!(full.is_ok(), kept.is_ok(), "{bytes:?}: {full:?} / {kept:?}");
    if let (Ok(full), Ok(kept)) = (full, kept) {
        assert_eq!(kept.header, full.header);
        assert_eq!(kept.properties, full.properties);
        assert_eq!(
            (
                full.annotations_at,
                full.bare_at,
                full.body_at,
                full.body_end
            ),
            (
                kept.annotations_at,
                kept.bare_at,
                kept.body_at,
                kept.body_end
            )
        );
    }
}

/// `decode_kept` (the broker's publish path) accepts exactly what `decode` accepts, with the
/// same offsets, on a message with every section kind and on every truncation and one-byte
/// corruption of it.
#[test]
fn decode_kept_agrees_with_decode() {
    let whole = every_section_message();
    assert!(Sections::decode_kept(&Bytes::from(whole.clone())).is_ok());
    for cut in 0..whole.len() {
        assert_kept_agrees(whole[..cut].to_vec());
    }
    for i in 0..whole.len() {
        for byte in [
            0x00,
            0x40,
            0x45,
            0xa1,
            0xb3,
            0xc1,
            0xd0,
            0xe0,
            0xff,
            whole[i] ^ 0x80,
        ] {
            let mut copy = whole.clone();
            copy[i] = byte;
            assert_kept_agrees(copy);
        }
    }
}

#[test]
fn a_coordinator_target_decodes_as_such() {
    let attach = Value::described(
        code::ATTACH,
        Value::List(vec![
            Value::string("txn"),
            Value::Uint(0),
            Value::Bool(false),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::described(code::COORDINATOR, Value::List(vec![])),
        ]),
    );
    let Performative::Attach(attach) = Performative::from_value(attach).unwrap() else {
        panic!("not an attach");
    };
    assert!(attach.target.unwrap().coordinator);
}

/// Transfers and dispositions in many shapes, for the fast paths' differential test.
fn hot_performatives() -> Vec<Performative> {
    let states = [
        None,
        Some(DeliveryState::Accepted),
        Some(DeliveryState::Released),
        Some(DeliveryState::Received {
            section_number: 1,
            section_offset: 2,
        }),
        Some(DeliveryState::Rejected { error: None }),
    ];
    let mut out = Vec::new();
    for (i, state) in states.iter().enumerate() {
        for uint in [0u32, 7, 255, 256, 70_000, u32::MAX] {
            for flags in [false, true] {
                for tag_len in [0usize, 4, 32, 33] {
                    out.push(Performative::Transfer(Transfer {
                        handle: uint,
                        delivery_id: flags.then_some(uint),
                        delivery_tag: (tag_len > 0 || flags)
                            .then(|| Bytes::from(vec![i as u8; tag_len])),
                        message_format: (!flags).then_some(0),
                        settled: if flags { Some(i % 2 == 0) } else { None },
                        more: flags,
                        rcv_settle_mode: flags.then_some(1),
                        state: state.clone(),
                        resume: flags && i == 1,
                        aborted: false,
                        batchable: flags && i == 2,
                    }));
                }
                out.push(Performative::Transfer(Transfer {
                    handle: uint,
                    ..Transfer::default()
                }));
                out.push(Performative::Disposition(Disposition {
                    role: flags,
                    first: uint,
                    last: flags.then_some(uint.wrapping_add(3)),
                    settled: !flags,
                    state: state.clone(),
                    batchable: flags,
                }));
            }
        }
    }
    out
}

#[test]
fn hot_fast_paths_match_the_general_codec() {
    let (mut encoded, mut decoded_fast) = (0, 0);
    for p in hot_performatives() {
        let mut general = BytesMut::new();
        p.to_value().encode(&mut general);
        let mut fast = BytesMut::new();
        if super::fast::encode_hot(&p, &mut fast) {
            encoded += 1;
            assert_eq!(fast, general, "{p:?}");
        }
        assert_eq!(super::frame::frame_head_len(&p), 8 + general.len(), "{p:?}");
        // Decoding: the general encoding plus a payload, and the same with wide encodings.
        let mut body = general.clone();
        body.extend_from_slice(b"payload");
        let body = body.freeze();
        if let Some((decoded, used)) = super::fast::decode_hot(&body) {
            decoded_fast += 1;
            assert_eq!(decoded, p, "{p:?}");
            assert_eq!(used, general.len());
        }
        let mut frame = BytesMut::new();
        encode_frame(&mut frame, 5, &p, b"payload");
        let decoded = decode_frame(&mut frame, u32::MAX).unwrap().unwrap();
        assert_eq!(
            decoded.body,
            FrameBody::Amqp {
                performative: p.clone(),
                payload: Bytes::from_static(b"payload"),
            }
        );
    }
    assert!(
        encoded > 100 && decoded_fast > 100,
        "{encoded} {decoded_fast}"
    );
    // Truncations and corruptions: the fast decoder never disagrees with the general one.
    for p in hot_performatives().into_iter().take(60) {
        let mut general = BytesMut::new();
        p.to_value().encode(&mut general);
        let bytes = general.freeze();
        for cut in 0..bytes.len() {
            let short = bytes.slice(..cut);
            if let Some((decoded, used)) = super::fast::decode_hot(&short) {
                let (value, n) = Value::decode(&short).unwrap();
                assert_eq!(Performative::from_value(value).unwrap(), decoded);
                assert_eq!(n, used);
            }
        }
        for at in 0..bytes.len() {
            for b in [0x00u8, 0x40, 0x41, 0x45, 0x52, 0x70, 0xa0, 0xc0, 0xff] {
                let mut v = bytes.to_vec();
                v[at] = b;
                let v = Bytes::from(v);
                if let Some((decoded, used)) = super::fast::decode_hot(&v) {
                    let (value, n) = Value::decode(&v).unwrap();
                    assert_eq!(Performative::from_value(value).unwrap(), decoded);
                    assert_eq!(n, used);
                }
            }
        }
    }
}
