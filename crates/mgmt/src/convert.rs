//! Conversions between core's argument values and JSON, as RabbitMQ's management API shows
//! them (`{"x-max-length": 10}`), and between JSON and AMQP 0.9.1 message properties.

use base64::Engine;
use serde_json::{json, Map, Value as Json};
use warren_core::message::{Format, Message};
use warren_core::value::{Table, Value};
use warren_proto::amqp091::{BasicProperties, FieldTable, FieldValue};

use crate::error::ApiError;

pub fn table_to_json(table: &Table) -> Json {
    Json::Object(
        table
            .iter()
            .map(|(key, value)| (key.clone(), value_to_json(value)))
            .collect(),
    )
}

pub fn value_to_json(value: &Value) -> Json {
    match value {
        Value::Bool(v) => json!(v),
        Value::Int(v) => json!(v),
        Value::Float(v) => json!(v),
        Value::Str(v) => json!(v),
        Value::Bytes(v) => json!(String::from_utf8_lossy(v)),
        Value::Decimal { scale, value } => json!(f64::from(*value) / 10f64.powi(i32::from(*scale))),
        Value::Timestamp(v) => json!(v),
        Value::Array(values) => Json::Array(values.iter().map(value_to_json).collect()),
        Value::Table(table) => table_to_json(table),
        Value::Void => Json::Null,
    }
}

/// JSON `arguments` of a declaration or binding; `null` or absent is empty.
pub fn json_to_table(json: Option<&Json>) -> Result<Table, ApiError> {
    match json {
        None | Some(Json::Null) => Ok(Table::new()),
        Some(Json::Object(map)) => Ok(map
            .iter()
            .map(|(key, value)| (key.clone(), json_to_value(value)))
            .collect()),
        Some(other) => Err(ApiError::bad_request(format!(
            "arguments must be an object, got {other}"
        ))),
    }
}

fn json_to_value(json: &Json) -> Value {
    match json {
        Json::Null => Value::Void,
        Json::Bool(v) => Value::Bool(*v),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        Json::String(s) => Value::Str(s.clone()),
        Json::Array(values) => Value::Array(values.iter().map(json_to_value).collect()),
        Json::Object(map) => Value::Table(
            map.iter()
                .map(|(key, value)| (key.clone(), json_to_value(value)))
                .collect(),
        ),
    }
}

/// A boolean field that RabbitMQ's clients send as `true` or as `"true"`.
pub fn flag(body: &Map<String, Json>, key: &str, default: bool) -> Result<bool, ApiError> {
    match body.get(key) {
        None | Some(Json::Null) => Ok(default),
        Some(Json::Bool(v)) => Ok(*v),
        Some(Json::String(s)) if s == "true" => Ok(true),
        Some(Json::String(s)) if s == "false" => Ok(false),
        Some(other) => Err(ApiError::bad_request(format!(
            "{key} must be true or false, got {other}"
        ))),
    }
}

/// A string field, empty when absent.
pub fn text<'a>(body: &'a Map<String, Json>, key: &str) -> &'a str {
    body.get(key).and_then(Json::as_str).unwrap_or("")
}

/// The body's `routing_key`: at most 255 bytes, as AMQP's shortstr allows (the same key over
/// AMQP could not be sent at all).
pub fn routing_key(body: &Map<String, Json>) -> Result<&str, crate::error::ApiError> {
    let key = text(body, "routing_key");
    if key.len() > usize::from(u8::MAX) {
        return Err(crate::error::ApiError::bad_request(format!(
            "routing_key is {} bytes long: the longest AMQP allows is 255",
            key.len()
        )));
    }
    Ok(key)
}

/// A queued message's properties as `/api/queues/.../get` shows them (the AMQP 0.9.1 form, as
/// RabbitMQ's, whose API gets messages over AMQP 0.9.1), and its body in that form.
pub fn message_to_json(message: &Message) -> (Json, bytes::Bytes) {
    match message.format {
        Format::Amqp091 => {
            let json = BasicProperties::decode(&message.properties)
                .map_or_else(|_| json!({}), |p| properties_to_json(&p));
            // The HTTP API shows the body whole: joined here if it came in several frames.
            (json, message.body.to_bytes())
        }
        Format::Amqp10 => {
            let (p, body) = warren_proto::convert::kept_to_amqp091(
                message.persistent,
                message.priority,
                message.expiration_ms,
                &message.properties,
                &message.body.to_bytes(),
            );
            (properties_to_json(&p), body)
        }
    }
}

fn properties_to_json(p: &BasicProperties) -> Json {
    let mut out = Map::new();
    let mut put = |key: &str, value: Option<Json>| {
        if let Some(value) = value {
            out.insert(key.to_string(), value);
        }
    };
    let s = |v: &Option<warren_proto::amqp091::ShortStr>| v.as_ref().map(|v| json!(v.as_str()));
    put("content_type", s(&p.content_type));
    put("content_encoding", s(&p.content_encoding));
    put("delivery_mode", p.delivery_mode.map(|v| json!(v)));
    put("priority", p.priority.map(|v| json!(v)));
    put("correlation_id", s(&p.correlation_id));
    put("reply_to", s(&p.reply_to));
    put("expiration", s(&p.expiration));
    put("message_id", s(&p.message_id));
    put("timestamp", p.timestamp.map(|v| json!(v)));
    put("type", s(&p.kind));
    put("user_id", s(&p.user_id));
    put("app_id", s(&p.app_id));
    put("cluster_id", s(&p.cluster_id));
    if let Some(headers) = &p.headers {
        let table: Map<String, Json> = headers
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), field_to_json(v)))
            .collect();
        out.insert("headers".to_string(), Json::Object(table));
    }
    Json::Object(out)
}

/// A connection's client properties (an AMQP 0.9.1 field table body) as JSON.
pub fn client_properties_to_json(encoded: &bytes::Bytes) -> Json {
    match warren_proto::amqp091::decode_table_body(encoded.clone()) {
        Ok(table) => Json::Object(
            table
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), field_to_json(v)))
                .collect(),
        ),
        Err(_) => json!({}),
    }
}

/// Message headers as core's values (for headers-exchange routing).
pub fn field_table_to_core(table: &FieldTable) -> Table {
    table
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), json_to_value(&field_to_json(v))))
        .collect()
}

fn field_to_json(value: &FieldValue) -> Json {
    match value {
        FieldValue::Bool(v) => json!(v),
        FieldValue::LongStr(bytes) | FieldValue::Bytes(bytes) => {
            json!(String::from_utf8_lossy(bytes))
        }
        FieldValue::F32(v) => json!(v),
        FieldValue::F64(v) => json!(v),
        FieldValue::Timestamp(v) => json!(v),
        FieldValue::Array(values) => Json::Array(values.iter().map(field_to_json).collect()),
        FieldValue::Table(table) => Json::Object(
            table
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), field_to_json(v)))
                .collect(),
        ),
        FieldValue::Void => Json::Null,
        other => other.as_i64().map_or(Json::Null, |v| json!(v)),
    }
}

/// The `properties` of a `/publish` request as encoded basic properties.
pub fn json_to_properties(json: Option<&Json>) -> Result<BasicProperties, ApiError> {
    let mut p = BasicProperties::default();
    let Some(Json::Object(map)) = json else {
        return Ok(p);
    };
    let short = |key: &str| map.get(key).and_then(Json::as_str).map(|v| v.into());
    let number = |key: &str| -> Option<u64> {
        map.get(key).and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
    };
    p.content_type = short("content_type");
    p.content_encoding = short("content_encoding");
    p.correlation_id = short("correlation_id");
    p.reply_to = short("reply_to");
    p.expiration = short("expiration");
    p.message_id = short("message_id");
    p.kind = short("type");
    p.user_id = short("user_id");
    p.app_id = short("app_id");
    p.cluster_id = short("cluster_id");
    p.timestamp = number("timestamp");
    p.delivery_mode = number("delivery_mode").and_then(|v| u8::try_from(v).ok());
    p.priority = number("priority").and_then(|v| u8::try_from(v).ok());
    if let Some(Json::Object(headers)) = map.get("headers") {
        let table: FieldTable = headers
            .iter()
            .map(|(k, v)| (k.as_str(), json_to_field(v)))
            .collect();
        p.headers = Some(table);
    }
    Ok(p)
}

fn json_to_field(json: &Json) -> FieldValue {
    match json {
        Json::Null => FieldValue::Void,
        Json::Bool(v) => FieldValue::Bool(*v),
        Json::Number(n) => match n.as_i64() {
            Some(i) => FieldValue::I64(i),
            None => FieldValue::F64(n.as_f64().unwrap_or(0.0)),
        },
        Json::String(s) => FieldValue::LongStr(bytes::Bytes::from(s.clone())),
        Json::Array(values) => FieldValue::Array(values.iter().map(json_to_field).collect()),
        Json::Object(map) => FieldValue::Table(
            map.iter()
                .map(|(k, v)| (k.as_str(), json_to_field(v)))
                .collect(),
        ),
    }
}

/// A body as `/get` returns it: text when it is UTF-8 and `encoding` is `auto`, else base64.
pub fn payload_to_json(body: &[u8], encoding: &str) -> (Json, &'static str) {
    if encoding != "base64" {
        if let Ok(text) = std::str::from_utf8(body) {
            return (json!(text), "string");
        }
    }
    let encoded = base64::engine::general_purpose::STANDARD.encode(body);
    (json!(encoded), "base64")
}
