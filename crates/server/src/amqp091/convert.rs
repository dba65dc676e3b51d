//! Conversion of AMQP 0.9.1 field tables to core's protocol-neutral values.

use warren_core::routing::MessageFields;
use warren_core::value::{Table, Value};
use warren_proto::amqp091::{BasicProperties, FieldTable, FieldValue};

/// What routing may read of a message (headers, consistent-hash on a property), from its
/// AMQP 0.9.1 properties.
pub fn message_fields(properties: BasicProperties) -> MessageFields {
    MessageFields {
        headers: properties.headers.as_ref().map(table_to_core),
        message_id: properties.message_id.map(|v| v.as_str().to_owned()),
        correlation_id: properties.correlation_id.map(|v| v.as_str().to_owned()),
        timestamp: properties.timestamp,
    }
}

pub fn table_to_core(table: &FieldTable) -> Table {
    table
        .iter()
        .map(|(key, value)| (key.as_str().to_owned(), value_to_core(value)))
        .collect()
}

pub fn value_to_core(value: &FieldValue) -> Value {
    match value {
        FieldValue::Bool(v) => Value::Bool(*v),
        FieldValue::I8(v) => Value::Int(i64::from(*v)),
        FieldValue::U8(v) => Value::Int(i64::from(*v)),
        FieldValue::I16(v) => Value::Int(i64::from(*v)),
        FieldValue::U16(v) => Value::Int(i64::from(*v)),
        FieldValue::I32(v) => Value::Int(i64::from(*v)),
        FieldValue::U32(v) => Value::Int(i64::from(*v)),
        FieldValue::I64(v) => Value::Int(*v),
        FieldValue::F32(v) => Value::Float(f64::from(*v)),
        FieldValue::F64(v) => Value::Float(*v),
        FieldValue::Decimal { scale, value } => Value::Decimal {
            scale: *scale,
            value: *value,
        },
        FieldValue::LongStr(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => Value::Str(text.to_owned()),
            Err(_) => Value::Bytes(bytes.to_vec()),
        },
        FieldValue::Array(values) => Value::Array(values.iter().map(value_to_core).collect()),
        FieldValue::Timestamp(v) => Value::Timestamp(*v),
        FieldValue::Table(table) => Value::Table(table_to_core(table)),
        FieldValue::Void => Value::Void,
        FieldValue::Bytes(bytes) => Value::Bytes(bytes.to_vec()),
    }
}
