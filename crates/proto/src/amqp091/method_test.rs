#![allow(clippy::indexing_slicing, clippy::panic)]

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;

use super::super::test_support::{any_method, every_method};
use super::super::{decode_frame, encode_method_frame, reply_code, Frame};
use super::*;

fn encode(method: &Method) -> Bytes {
    let mut out = BytesMut::new();
    method.encode(&mut out);
    out.freeze()
}

fn frame_round_trip(channel: u16, method: &Method) -> Method {
    let mut buf = BytesMut::new();
    encode_method_frame(channel, method, &mut buf);
    match decode_frame(&mut buf, 0) {
        Ok(Some(Frame::Method { channel: c, method })) if c == channel => {
            assert!(buf.is_empty(), "the whole frame was consumed");
            method
        }
        other => panic!("expected a method frame on channel {channel}, got {other:?}"),
    }
}

#[test]
fn every_method_round_trips_with_defaults() {
    let methods = every_method();
    assert_eq!(methods.len(), 66);
    for method in methods {
        assert_eq!(
            Method::decode(encode(&method)),
            Ok(method.clone()),
            "{}",
            method.name()
        );
        assert_eq!(frame_round_trip(7, &method), method);
        assert_eq!(
            method_name(method.class_id(), method.method_id()),
            Some(method.name())
        );
    }
}

#[test]
fn ids_names_and_content_come_from_the_spec() {
    let publish = Method::from(BasicPublish::default());
    assert_eq!((publish.class_id(), publish.method_id()), (60, 40));
    assert_eq!(publish.name(), "basic.publish");
    assert!(publish.has_content());
    assert!(Method::from(BasicDeliver::default()).has_content());
    assert!(Method::from(BasicGetOk::default()).has_content());
    assert!(Method::from(BasicReturn::default()).has_content());
    assert!(!Method::from(BasicAck::default()).has_content());
    assert_eq!(Method::from(ExchangeUnbindOk).method_id(), 51);
    assert_eq!(ConfirmSelect::CLASS_ID, 85);
    assert_eq!(BasicRecoverAsync::NAME, "basic.recover-async");
    assert_eq!(method_name(60, 41), None);
}

#[test]
fn bits_pack_lowest_first_in_one_octet() {
    let declare = QueueDeclare {
        queue: ShortStr::from_static("q"),
        passive: true,
        auto_delete: true,
        nowait: true,
        ..QueueDeclare::default()
    };
    let bytes = encode(&declare.into());
    // class, method, ticket, queue "q", bits, empty table
    let expected = [0, 50, 0, 10, 0, 0, 1, b'q', 0b1_1001, 0, 0, 0, 0];
    assert_eq!(&bytes[..], &expected[..]);
}

#[test]
fn hot_path_strings_are_slices_of_the_payload() {
    let deliver = BasicDeliver {
        consumer_tag: ShortStr::from_static("ctag"),
        delivery_tag: 9,
        redelivered: true,
        exchange: ShortStr::from_static("amq.topic"),
        routing_key: ShortStr::from_static("a.b.c"),
    };
    let payload = encode(&deliver.clone().into());
    let range = payload.as_ptr() as usize..payload.as_ptr() as usize + payload.len();
    let Ok(Method::BasicDeliver(decoded)) = Method::decode(payload.clone()) else {
        panic!("expected basic.deliver");
    };
    assert_eq!(decoded, deliver);
    assert!(range.contains(&(decoded.routing_key.as_bytes().as_ptr() as usize)));
}

#[test]
fn unknown_method_is_540() {
    for (class_id, method_id) in [(60, 41), (61, 10), (0, 0), (10, 12)] {
        let mut payload = BytesMut::new();
        payload.put_u16(class_id);
        payload.put_u16(method_id);
        let err = Method::decode(payload.freeze()).unwrap_err();
        assert_eq!(
            err,
            DecodeError::UnknownMethod {
                class_id,
                method_id
            }
        );
        assert_eq!(err.reply_code(), reply_code::NOT_IMPLEMENTED);
    }
}

#[test]
fn truncated_arguments_are_502_at_every_length() {
    let publish = BasicPublish {
        ticket: 0,
        exchange: ShortStr::from_static("x"),
        routing_key: ShortStr::from_static("rk"),
        mandatory: true,
        immediate: false,
    };
    let full = encode(&publish.into());
    for len in 0..full.len() {
        let err = Method::decode(full.slice(..len)).unwrap_err();
        assert_eq!(err.reply_code(), reply_code::SYNTAX_ERROR, "{err}");
        assert!(matches!(err, DecodeError::Truncated { .. }), "{err}");
    }
    let err = Method::decode(full.slice(..7)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "basic.publish: field 'exchange' is truncated at offset 7: needs 1 byte(s), 0 remain"
    );
}

#[test]
fn trailing_bytes_and_bad_utf8_are_502() {
    let mut payload = BytesMut::from(&encode(&BasicAck::default().into())[..]);
    payload.put_u8(0);
    let err = Method::decode(payload.freeze()).unwrap_err();
    assert!(
        matches!(err, DecodeError::TrailingBytes { extra: 1, .. }),
        "{err}"
    );
    assert_eq!(err.reply_code(), reply_code::SYNTAX_ERROR);

    let bad = Bytes::from_static(&[0, 60, 0, 40, 0, 0, 1, 0xFF, 0, 0]);
    let err = Method::decode(bad).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::InvalidUtf8 {
                field: "exchange",
                offset: 7,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.reply_code(), reply_code::SYNTAX_ERROR);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn any_method_round_trips(method in any_method(), channel in any::<u16>()) {
        prop_assert_eq!(encode(&method).len(), method.encoded_len());
        prop_assert_eq!(Method::decode(encode(&method)), Ok(method.clone()));
        prop_assert_eq!(frame_round_trip(channel, &method), method);
    }
}
