#![allow(clippy::indexing_slicing, clippy::panic)]

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;

use super::super::reply_code;
use super::super::test_support::field_table;
use super::*;

fn encode(table: &FieldTable) -> Bytes {
    let mut out = BytesMut::new();
    table.encode(&mut out);
    out.freeze()
}

fn decode(raw: &Bytes) -> Result<FieldTable, DecodeError> {
    let mut c = Cursor::new(raw, "test");
    let table = decode_table(raw, &mut c, "arguments", FIELD_DEPTH_MAX)?;
    c.finish()?;
    Ok(table)
}

fn skip(raw: &[u8]) -> Result<(), DecodeError> {
    let mut c = Cursor::new(raw, "test");
    skip_table(&mut c, "arguments", FIELD_DEPTH_MAX)?;
    c.finish()
}

/// A table holding `depth - 1` arrays nested inside each other (`depth` levels in all).
fn nested(depth: usize) -> FieldTable {
    let mut value = FieldValue::Array(Vec::new());
    for _ in 2..depth {
        value = FieldValue::Array(vec![value]);
    }
    FieldTable(vec![(ShortStr::from_static("deep"), value)])
}

#[test]
fn rabbitmq_type_tags() {
    let table: FieldTable = [
        ("i32", FieldValue::I32(-1)),
        ("u32", FieldValue::U32(1)),
        ("i64", FieldValue::I64(-2)),
        ("str", FieldValue::LongStr(Bytes::from_static(b"v"))),
    ]
    .into_iter()
    .collect();
    let raw = encode(&table);
    let tags: Vec<u8> = [8, 17, 26, 39].iter().map(|&i| raw[i]).collect();
    assert_eq!(tags, b"IilS");
    assert_eq!(decode(&raw), Ok(table.clone()));
    assert_eq!(table.get("i64").and_then(FieldValue::as_i64), Some(-2));
    assert_eq!(table.get("str").and_then(FieldValue::as_str), Some("v"));
    assert_eq!(table.get("missing"), None);
}

#[test]
fn insert_replaces_the_first_entry() {
    let mut table = FieldTable::default();
    table.insert("a", FieldValue::Bool(false));
    table.insert("b", FieldValue::Void);
    table.insert("a", FieldValue::Bool(true));
    assert_eq!(table.len(), 2);
    assert_eq!(table.get("a").and_then(FieldValue::as_bool), Some(true));
    assert_eq!(table.iter().next().map(|(k, _)| k.as_str()), Some("a"));
}

#[test]
fn nesting_is_limited() {
    let ok = encode(&nested(FIELD_DEPTH_MAX));
    assert!(decode(&ok).is_ok());
    assert_eq!(skip(&ok), Ok(()));
    let deep = encode(&nested(FIELD_DEPTH_MAX + 1));
    let err = decode(&deep).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::NestingTooDeep {
                limit: FIELD_DEPTH_MAX,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.reply_code(), reply_code::SYNTAX_ERROR);
    assert_eq!(skip(&deep), Err(err));
}

#[test]
fn hostile_nesting_does_not_overflow_the_stack() {
    // 100k nested array headers, each claiming the rest of the input.
    let levels = 100_000usize;
    let mut raw = BytesMut::new();
    raw.put_u32(u32::try_from(levels * 5 + 2).unwrap());
    raw.put_u8(1);
    raw.put_u8(b'k');
    for level in 0..levels {
        raw.put_u8(b'A');
        raw.put_u32(u32::try_from((levels - level - 1) * 5).unwrap());
    }
    let raw = raw.freeze();
    assert!(matches!(
        decode(&raw),
        Err(DecodeError::NestingTooDeep { .. })
    ));
    assert!(matches!(
        skip(&raw),
        Err(DecodeError::NestingTooDeep { .. })
    ));
}

#[test]
fn unknown_tags_and_lying_lengths_are_502() {
    let raw = Bytes::from_static(&[0, 0, 0, 3, 1, b'k', b'U']);
    let err = decode(&raw).unwrap_err();
    assert_eq!(
        err,
        DecodeError::UnknownFieldType {
            context: "test",
            field: "arguments",
            tag: b'U',
            offset: 6
        }
    );
    assert_eq!(err.reply_code(), reply_code::SYNTAX_ERROR);
    let lying = Bytes::from_static(&[0xFF, 0xFF, 0xFF, 0xFF, 1, b'k', b'V']);
    assert!(matches!(decode(&lying), Err(DecodeError::Truncated { .. })));
    // A value that runs past the table's own length.
    let overrun = Bytes::from_static(&[0, 0, 0, 4, 1, b'k', b'u', 0, 0]);
    assert!(matches!(
        decode(&overrun),
        Err(DecodeError::Truncated { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn tables_round_trip(table in field_table()) {
        let raw = encode(&table);
        prop_assert_eq!(raw.len(), table.encoded_len());
        prop_assert_eq!(skip(&raw), Ok(()));
        prop_assert_eq!(decode(&raw), Ok(table));
    }

    #[test]
    fn skip_agrees_with_decode(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
        let raw = Bytes::from(raw);
        prop_assert_eq!(skip(&raw), decode(&raw).map(drop));
    }
}
