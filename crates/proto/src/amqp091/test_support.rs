//! Proptest strategies for the codec's types, and the generated `any_method`/`every_method`.
#![allow(clippy::indexing_slicing, clippy::panic)]

use bytes::Bytes;
use proptest::prelude::*;

use super::*;

include!(concat!(env!("OUT_DIR"), "/amqp091_method_strategies.rs"));

/// Short strings: mostly short and mixed Unicode, sometimes exactly 255 bytes.
pub(crate) fn short_str() -> impl Strategy<Value = ShortStr> {
    prop_oneof![
        8 => ".{0,16}",
        1 => "[a-z]{255}",
        1 => "[é]{127}x",
    ]
    .prop_map(|s: String| {
        assert!(s.len() <= 255);
        ShortStr::from(s)
    })
}

pub(crate) fn long_str() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..48).prop_map(Bytes::from)
}

fn leaf_value() -> impl Strategy<Value = FieldValue> {
    prop_oneof![
        any::<bool>().prop_map(FieldValue::Bool),
        any::<i8>().prop_map(FieldValue::I8),
        any::<u8>().prop_map(FieldValue::U8),
        any::<i16>().prop_map(FieldValue::I16),
        any::<u16>().prop_map(FieldValue::U16),
        any::<i32>().prop_map(FieldValue::I32),
        any::<u32>().prop_map(FieldValue::U32),
        any::<i64>().prop_map(FieldValue::I64),
        any::<f32>()
            .prop_filter("NaN != NaN", |f| !f.is_nan())
            .prop_map(FieldValue::F32),
        any::<f64>()
            .prop_filter("NaN != NaN", |f| !f.is_nan())
            .prop_map(FieldValue::F64),
        (any::<u8>(), any::<u32>()).prop_map(|(scale, value)| FieldValue::Decimal { scale, value }),
        long_str().prop_map(FieldValue::LongStr),
        any::<u64>().prop_map(FieldValue::Timestamp),
        Just(FieldValue::Void),
        long_str().prop_map(FieldValue::Bytes),
    ]
}

/// Field values, with arrays and tables nested up to 4 deep.
pub(crate) fn field_value() -> impl Strategy<Value = FieldValue> {
    leaf_value().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(FieldValue::Array),
            proptest::collection::vec((short_str(), inner), 0..6)
                .prop_map(|entries| FieldValue::Table(FieldTable(entries))),
        ]
    })
}

pub(crate) fn field_table() -> impl Strategy<Value = FieldTable> {
    proptest::collection::vec((short_str(), field_value()), 0..6).prop_map(FieldTable)
}

pub(crate) fn basic_properties() -> impl Strategy<Value = BasicProperties> {
    let strings = (
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
        proptest::option::of(short_str()),
    );
    let others = (
        proptest::option::of(field_table()),
        proptest::option::of(any::<u8>()),
        proptest::option::of(any::<u8>()),
        proptest::option::of(any::<u64>()),
    );
    (strings, others).prop_map(|(s, o)| BasicProperties {
        content_type: s.0,
        content_encoding: s.1,
        headers: o.0,
        delivery_mode: o.1,
        priority: o.2,
        correlation_id: s.2,
        reply_to: s.3,
        expiration: s.4,
        message_id: s.5,
        timestamp: o.3,
        kind: s.6,
        user_id: s.7,
        app_id: s.8,
        cluster_id: s.9,
    })
}
