#![allow(clippy::indexing_slicing, clippy::panic)]

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::super::test_support::{basic_properties, field_table};
use super::super::{reply_code, FieldValue};
use super::*;

fn encode(properties: &BasicProperties) -> Bytes {
    let mut out = BytesMut::new();
    properties.encode(&mut out);
    out.freeze()
}

#[test]
fn empty_properties_are_a_zero_flags_word() {
    let raw = encode(&BasicProperties::default());
    assert_eq!(&raw[..], &[0, 0]);
    assert_eq!(
        BasicProperties::decode(&raw),
        Ok(BasicProperties::default())
    );
    assert_eq!(peek_delivery_mode(&raw), None);
}

#[test]
fn flags_follow_the_spec_order() {
    let properties = BasicProperties {
        content_type: Some(ShortStr::from_static("t")),
        delivery_mode: Some(2),
        cluster_id: Some(ShortStr::from_static("c")),
        ..BasicProperties::default()
    };
    let raw = encode(&properties);
    assert_eq!(&raw[..], &[0b1001_0000, 0b0000_0100, 1, b't', 2, 1, b'c']);
    assert_eq!(peek_delivery_mode(&raw), Some(2));
    assert_eq!(peek_priority(&raw), None);
}

#[test]
fn peeks_skip_headers_tables() {
    let mut headers = FieldTable::default();
    headers.insert("x-nested", FieldValue::Table(FieldTable::default()));
    let properties = BasicProperties {
        content_encoding: Some(ShortStr::from_static("gzip")),
        headers: Some(headers),
        delivery_mode: Some(1),
        priority: Some(9),
        ..BasicProperties::default()
    };
    let raw = encode(&properties);
    assert_eq!(peek_delivery_mode(&raw), Some(1));
    assert_eq!(peek_priority(&raw), Some(9));
    assert_eq!(peek_priority(&raw[..raw.len() - 1]), None);
}

#[test]
fn reserved_and_continuation_flags_are_502() {
    for raw in [&[0u8, 1][..], &[0, 2], &[0x80, 3, 0]] {
        let err = validate_properties(raw).unwrap_err();
        assert!(matches!(err, DecodeError::BadPropertyFlags { .. }), "{err}");
        assert_eq!(err.reply_code(), reply_code::SYNTAX_ERROR);
        assert_eq!(
            BasicProperties::decode(&Bytes::copy_from_slice(raw)),
            Err(err)
        );
    }
}

#[test]
fn truncated_and_trailing_properties_are_502() {
    let raw = encode(&BasicProperties {
        message_id: Some(ShortStr::from_static("m-1")),
        timestamp: Some(7),
        ..BasicProperties::default()
    });
    for len in 0..raw.len() {
        let err = validate_properties(&raw[..len]).unwrap_err();
        assert!(matches!(err, DecodeError::Truncated { .. }), "{err}");
        assert_eq!(BasicProperties::decode(&raw.slice(..len)), Err(err));
    }
    let mut longer = BytesMut::from(&raw[..]);
    longer.extend_from_slice(&[0]);
    let err = validate_properties(&longer).unwrap_err();
    assert!(
        matches!(err, DecodeError::TrailingBytes { extra: 1, .. }),
        "{err}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn properties_round_trip(properties in basic_properties()) {
        let raw = encode(&properties);
        prop_assert_eq!(validate_properties(&raw), Ok(()));
        prop_assert_eq!(peek_delivery_mode(&raw), properties.delivery_mode);
        prop_assert_eq!(peek_priority(&raw), properties.priority);
        prop_assert_eq!(BasicProperties::decode(&raw), Ok(properties));
    }

    #[test]
    fn validate_agrees_with_decode_on_any_bytes(raw in prop::collection::vec(any::<u8>(), 0..64)) {
        let raw = Bytes::from(raw);
        prop_assert_eq!(validate_properties(&raw), BasicProperties::decode(&raw).map(drop));
    }

    #[test]
    fn validate_agrees_with_decode_on_mutated_properties(
        properties in basic_properties(),
        headers in field_table(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..4),
    ) {
        let properties = BasicProperties { headers: Some(headers), ..properties };
        let mut raw = BytesMut::new();
        properties.encode(&mut raw);
        for (index, bit) in flips {
            let i = index.index(raw.len());
            raw[i] ^= 1 << bit;
        }
        let raw = raw.freeze();
        // Both must agree on validity and on the reply code; the walker and the decoder may
        // name different offsets inside a nested table that both reject.
        let validated = validate_properties(&raw).map_err(|e| e.reply_code());
        let decoded = BasicProperties::decode(&raw).map(drop).map_err(|e| e.reply_code());
        prop_assert_eq!(validated, decoded);
    }
}
