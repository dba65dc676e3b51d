//! The frame layer and the spec's corner cases: frame_max, the response bit, hand-built frames
//! checked byte for byte, null strings, empty arrays, forged counts and unknown keys.

use bytes::{BufMut, Bytes, BytesMut};

use super::*;

/// A frame built by hand: size prefix, raw key, version, body.
fn raw_frame(raw_key: u16, version: u16, body: &[u8]) -> BytesMut {
    let mut buf = BytesMut::new();
    buf.put_u32(u32::try_from(body.len() + 4).unwrap());
    buf.put_u16(raw_key);
    buf.put_u16(version);
    buf.put_slice(body);
    buf
}

fn decode_raw(raw_key: u16, version: u16, body: &[u8]) -> Result<Command, DecodeError> {
    let mut buf = raw_frame(raw_key, version, body);
    let frame = decode_frame(&mut buf, 0)?.expect("a whole frame");
    decode_command(&frame)
}

#[test]
fn size_above_frame_max_is_refused_from_the_prefix_alone() {
    let mut buf = BytesMut::from(&[0u8, 0, 0x10, 0][..]); // size 4096, nothing after it
    let err = decode_frame(&mut buf, 4095).unwrap_err();
    assert_eq!(
        err,
        DecodeError::FrameTooLarge {
            size: 4096,
            frame_max: 4095
        }
    );
    assert_eq!(err.response_code(), response_code::FRAME_TOO_LARGE);
    let mut buf = BytesMut::from(&[0u8, 0, 0x10, 0][..]);
    assert_eq!(
        decode_frame(&mut buf, 4096),
        Ok(None),
        "at the limit it waits for the rest"
    );
    let mut buf = BytesMut::from(&[0xffu8, 0xff, 0xff, 0xff][..]);
    assert_eq!(decode_frame(&mut buf, 0), Ok(None), "0 means no limit");
}

#[test]
fn size_below_a_header_is_refused() {
    let mut buf = BytesMut::from(&[0u8, 0, 0, 3, 0, 0, 0][..]);
    assert_eq!(
        decode_frame(&mut buf, 0),
        Err(DecodeError::FrameTooSmall { size: 3 })
    );
}

#[test]
fn response_bit_is_kept_apart_from_the_key() {
    let mut buf = raw_frame(0x8006, 1, &[0, 0, 0, 9, 0, 1]);
    buf.put_slice(&[0, 0]); // the start of the next frame stays in the buffer
    let frame = decode_frame(&mut buf, 0).unwrap().unwrap();
    assert_eq!(
        (frame.key, frame.response, frame.version),
        (key::DELETE_PUBLISHER, true, 1)
    );
    assert_eq!(frame.body.as_ref(), &[0, 0, 0, 9, 0, 1]);
    assert_eq!(buf.as_ref(), &[0, 0]);
    let expected = SimpleResponse {
        key: key::DELETE_PUBLISHER,
        correlation_id: 9,
        code: 1,
    };
    assert_eq!(decode_command(&frame), Ok(Command::Response(expected)));
}

#[test]
fn publish_v1_matches_the_spec_byte_for_byte() {
    let mut body = vec![7u8]; // publisher id
    body.extend_from_slice(&1i32.to_be_bytes()); // one message
    body.extend_from_slice(&5u64.to_be_bytes()); // publishing id
    body.extend_from_slice(&2i32.to_be_bytes());
    body.extend_from_slice(b"hi");
    let expected = raw_frame(key::PUBLISH, 1, &body);
    let command = Command::Publish(PublishCommand::Publish {
        publisher_id: 7,
        filtered: false,
        messages: vec![PublishedMessage {
            publishing_id: 5,
            filter_value: None,
            message: Bytes::from_static(b"hi"),
            sub_batch: None,
        }],
    });
    let mut out = BytesMut::new();
    command.encode(&mut out).unwrap();
    assert_eq!(out, expected);
    assert_eq!(decode_raw(key::PUBLISH, 1, &body), Ok(command));
}

#[test]
fn publish_v2_carries_a_filter_value_before_the_message() {
    let mut body = vec![7u8];
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&5u64.to_be_bytes());
    body.extend_from_slice(&2i16.to_be_bytes());
    body.extend_from_slice(b"eu");
    body.extend_from_slice(&0i32.to_be_bytes()); // an empty message
    let expected = PublishCommand::Publish {
        publisher_id: 7,
        filtered: true,
        messages: vec![PublishedMessage {
            publishing_id: 5,
            filter_value: Some("eu".into()),
            message: Bytes::new(),
            sub_batch: None,
        }],
    };
    assert_eq!(
        decode_raw(key::PUBLISH, 2, &body),
        Ok(Command::Publish(expected))
    );
}

#[test]
fn tune_and_heartbeat_carry_no_correlation_id() {
    let mut body = Vec::new();
    body.extend_from_slice(&1_048_576u32.to_be_bytes());
    body.extend_from_slice(&60u32.to_be_bytes());
    let tune = ConnectionCommand::Tune {
        response: true,
        frame_max: 1_048_576,
        heartbeat: 60,
    };
    assert_eq!(decode_raw(0x8014, 1, &body), Ok(Command::Connection(tune)));
    let heartbeat = Command::Connection(ConnectionCommand::Heartbeat);
    assert_eq!(decode_raw(key::HEARTBEAT, 1, &[]), Ok(heartbeat));
}

#[test]
fn null_string_is_kept_where_allowed_and_refused_where_required() {
    let mut body = vec![0, 0, 0, 1, 3]; // correlation id, publisher id
    body.extend_from_slice(&(-1i16).to_be_bytes()); // reference: null
    body.extend_from_slice(&(-1i16).to_be_bytes()); // stream: null
    let err = decode_raw(key::DECLARE_PUBLISHER, 1, &body).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::NullField {
                field: "stream",
                offset: 7,
                ..
            }
        ),
        "{err}"
    );
    body.truncate(7);
    body.extend_from_slice(&1i16.to_be_bytes());
    body.push(b's');
    let expected = PublishCommand::DeclarePublisher {
        correlation_id: 1,
        publisher_id: 3,
        reference: None,
        stream: "s".into(),
    };
    assert_eq!(
        decode_raw(key::DECLARE_PUBLISHER, 1, &body),
        Ok(Command::Publish(expected))
    );
}

#[test]
fn open_and_sasl_responses_may_stop_after_the_code() {
    let open = decode_raw(0x8015, 1, &[0, 0, 0, 4, 0, 0x0c]).unwrap();
    let expected = ConnectionCommand::OpenResponse {
        correlation_id: 4,
        code: response_code::VIRTUAL_HOST_ACCESS_FAILURE,
        properties: vec![],
    };
    assert_eq!(open, Command::Connection(expected));
    let sasl = decode_raw(0x8013, 1, &[0, 0, 0, 3, 0, 1]).unwrap();
    let expected = ConnectionCommand::SaslAuthenticateResponse {
        correlation_id: 3,
        code: 1,
        data: None,
    };
    assert_eq!(sasl, Command::Connection(expected));
}

#[test]
fn forged_array_count_fails_before_allocating() {
    let mut body = vec![0, 0, 0, 1]; // correlation id
    body.extend_from_slice(&i32::MAX.to_be_bytes()); // streams: 2^31 - 1 of them
    let err = decode_raw(key::METADATA, 1, &body).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::Truncated {
                field: "streams",
                ..
            }
        ),
        "{err}"
    );
    body.truncate(4);
    body.extend_from_slice(&(-2i32).to_be_bytes());
    let err = decode_raw(key::METADATA, 1, &body).unwrap_err();
    assert!(
        matches!(err, DecodeError::NegativeLength { length: -2, .. }),
        "{err}"
    );
}

#[test]
fn unknown_key_and_version_carry_what_the_server_answers_with() {
    for (raw_key, version) in [
        (0x0020, 1),
        (0x7fff, 1),
        (key::ROUTE, 1),
        (key::SUBSCRIBE, 2),
    ] {
        let err = decode_raw(raw_key, version, &[]).unwrap_err();
        let expected = DecodeError::UnknownCommand {
            key: raw_key,
            response: false,
            version,
        };
        assert_eq!(err, expected);
        assert_eq!(err.response_code(), response_code::UNKNOWN_FRAME);
    }
    let err = decode_raw(0x8017, 1, &[]).unwrap_err();
    assert!(matches!(
        err,
        DecodeError::UnknownCommand {
            key: 0x17,
            response: true,
            ..
        }
    ));
}

#[test]
fn trailing_bytes_bad_utf8_and_offset_type_are_errors() {
    let err = decode_raw(key::HEARTBEAT, 1, &[0]).unwrap_err();
    assert_eq!(
        err,
        DecodeError::TrailingBytes {
            command: "heartbeat",
            extra: 1
        }
    );
    let err = decode_raw(key::OPEN, 1, &[0, 0, 0, 1, 0, 1, 0xff]).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::InvalidUtf8 {
                field: "virtual host",
                ..
            }
        ),
        "{err}"
    );
    let mut body = vec![0, 0, 0, 1, 0, 1, b's'];
    body.extend_from_slice(&9u16.to_be_bytes());
    let err = decode_raw(key::RESOLVE_OFFSET_SPEC, 1, &body).unwrap_err();
    assert!(
        matches!(err, DecodeError::UnknownOffsetType { offset_type: 9, .. }),
        "{err}"
    );
    assert_eq!(err.response_code(), response_code::PRECONDITION_FAILED);
}

#[test]
fn deliver_header_frames_a_chunk_given_in_slices() {
    let parts = [Bytes::from_static(b"osiris "), Bytes::from_static(b"chunk")];
    let mut out = BytesMut::new();
    encode_deliver_header(&mut out, 4, Some(9), &parts).unwrap();
    assert_eq!(out.len(), SIZE_PREFIX_LEN + FRAME_HEADER_LEN + 1 + 8);
    parts.iter().for_each(|part| out.extend_from_slice(part));
    let frame = decode_frame(&mut out, 0).unwrap().unwrap();
    let expected = SubscribeCommand::Deliver {
        subscription_id: 4,
        committed_chunk_id: Some(9),
        chunk: Bytes::from_static(b"osiris chunk"),
    };
    assert_eq!(decode_command(&frame), Ok(Command::Subscribe(expected)));
    assert!(out.is_empty());
}

#[test]
fn too_long_string_is_an_encode_error_and_leaves_out_unchanged() {
    let command = Command::Admin(AdminCommand::Delete {
        correlation_id: 1,
        stream: "x".repeat(usize::from(u16::MAX)),
    });
    let mut out = BytesMut::from(&b"kept"[..]);
    let err = command.encode(&mut out).unwrap_err();
    assert!(
        matches!(
            err,
            EncodeError::TooLong {
                field: "stream",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(out.as_ref(), b"kept");
}

#[test]
fn publish_carries_a_sub_batch_as_the_client_packed_it() {
    // Publishing id, then 0x80 | compression << 4, records, uncompressed and packed lengths.
    let mut body = vec![7u8];
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&9u64.to_be_bytes());
    body.push(0x80 | (1 << 4));
    body.extend_from_slice(&3u16.to_be_bytes());
    body.extend_from_slice(&100u32.to_be_bytes());
    body.extend_from_slice(&4u32.to_be_bytes());
    body.extend_from_slice(b"gzip");
    let command = Command::Publish(PublishCommand::Publish {
        publisher_id: 7,
        filtered: false,
        messages: vec![PublishedMessage {
            publishing_id: 9,
            filter_value: None,
            message: Bytes::from_static(b"gzip"),
            sub_batch: Some(SubBatch {
                compression: 1,
                records: 3,
                uncompressed_len: 100,
            }),
        }],
    });
    assert_eq!(decode_raw(key::PUBLISH, 1, &body), Ok(command.clone()));
    let mut out = BytesMut::new();
    command.encode(&mut out).unwrap();
    assert_eq!(out, raw_frame(key::PUBLISH, 1, &body));
    // A sub-batch longer than the frame is truncated, not read past the end.
    body.truncate(body.len() - 1);
    assert!(matches!(
        decode_raw(key::PUBLISH, 1, &body),
        Err(DecodeError::Truncated {
            field: "sub-batch",
            ..
        })
    ));
}
