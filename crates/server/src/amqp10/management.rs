//! The HTTP-over-AMQP management node RabbitMQ 4 exposes at `/management` (its AMQP 1.0
//! clients' `Management` API): a request is a message on a link to `/management` whose
//! `subject` is the HTTP method, `to` the path and body an amqp-value map; the response goes
//! back on the link from `/management` of the same session, with `correlation-id` = the
//! request's `message-id`, `subject` = the HTTP status code and an amqp-value body.
//!
//! Paths: `/queues/:queue` (PUT declare, GET, DELETE), `/queues/:queue/messages` (DELETE:
//! purge), `/exchanges/:exchange` (PUT, DELETE), `/bindings` (POST) and
//! `/bindings/src=:s;dstq=:q;key=:k;args=` or `dste=:e` (DELETE).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use warren_core::access::{Perm, ResourceKind};
use warren_core::binding::Destination;
use warren_core::value::{Table, Value as CoreValue};
use warren_core::vhost::{ExchangeDeclare, QueueDeclare};
use warren_core::{BrokerError, ErrorKind};
use warren_proto::amqp10::message::{Body, Properties, Sections};
use warren_proto::amqp10::Value;

use super::address;
use super::connection::Connection;

pub const MANAGEMENT_ADDRESS: &str = "/management";

/// A management request taken off the wire, answered in `flush_pending`.
pub struct Request {
    pub channel: u16,
    pub raw: Bytes,
}

/// An HTTP status and the amqp-value body of a response.
type Response = (u16, Value);

impl Connection {
    /// Answers the collected management requests.
    pub(super) async fn answer_management(&mut self, requests: Vec<Request>) {
        for request in requests {
            let (message_id, response) = match Sections::decode_any_order(&request.raw) {
                Ok(sections) => {
                    let id = sections
                        .properties
                        .as_ref()
                        .and_then(|p| p.message_id.clone());
                    (id, self.handle_request(&sections).await)
                }
                Err(error) => (
                    None,
                    (400, Value::string(&format!("malformed request: {error}"))),
                ),
            };
            let message = response_message(message_id, response);
            self.send_management_response(request.channel, message);
        }
    }

    async fn handle_request(&mut self, sections: &Sections) -> Response {
        let properties = sections.properties.clone().unwrap_or_default();
        let method = properties
            .subject
            .as_deref()
            .unwrap_or_default()
            .to_ascii_uppercase();
        let path = properties.to.as_deref().unwrap_or_default().to_owned();
        let body = match &sections.body {
            Body::Value(value, _) => value.clone(),
            _ => Value::Null,
        };
        let segments: Vec<String> = path
            .split('/')
            .skip(1)
            .map(|s| address::percent_decode(s).unwrap_or_default())
            .collect();
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let result = match (method.as_str(), segments.as_slice()) {
            ("PUT", ["queues", queue]) => self.declare_queue(queue, &body).await,
            ("GET", ["queues", queue]) => self.queue_info(queue).await,
            ("DELETE", ["queues", queue]) => {
                let count = match self.permit(Perm::Configure, ResourceKind::Queue, queue) {
                    Ok(()) => {
                        self.vhost()
                            .delete_queue(queue, false, false, self.id)
                            .await
                    }
                    Err(error) => Err(error),
                };
                count.map(|n| {
                    (
                        200,
                        map(vec![("message_count", Value::Ulong(u64::from(n)))]),
                    )
                })
            }
            ("DELETE", ["queues", queue, "messages"]) => {
                let count = match self.permit(Perm::Read, ResourceKind::Queue, queue) {
                    Ok(()) => self.vhost().purge_queue(queue, self.id).await,
                    Err(error) => Err(error),
                };
                count.map(|n| {
                    (
                        200,
                        map(vec![("message_count", Value::Ulong(u64::from(n)))]),
                    )
                })
            }
            ("PUT", ["exchanges", exchange]) => self.declare_exchange(exchange, &body).await,
            ("DELETE", ["exchanges", exchange]) => {
                match self.permit(Perm::Configure, ResourceKind::Exchange, exchange) {
                    Ok(()) => self.vhost().delete_exchange(exchange, false).await,
                    Err(error) => Err(error),
                }
                .map(|()| (204, Value::Null))
            }
            ("POST", ["bindings"]) => self.bind(&body).await,
            ("DELETE", ["bindings", spec]) => self.unbind(spec).await,
            _ => Ok((
                400,
                Value::string(&format!("unsupported request {method} {path}")),
            )),
        };
        result.unwrap_or_else(|error| (status_of(&error), Value::string(&error.text)))
    }

    async fn declare_queue(&mut self, name: &str, body: &Value) -> Result<Response, BrokerError> {
        let request = QueueDeclare {
            name: name.to_owned(),
            passive: false,
            durable: field(body, "durable")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            exclusive: field(body, "exclusive")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            auto_delete: field(body, "auto_delete")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            arguments: field(body, "arguments").map(table).unwrap_or_default(),
        };
        self.permit(Perm::Configure, ResourceKind::Queue, name)?;
        self.vhost().declare_queue(request, self.id).await?;
        self.queue_info(name).await
    }

    async fn queue_info(&mut self, name: &str) -> Result<Response, BrokerError> {
        let queue = self.vhost().queue(name, self.id)?;
        let info = queue.info().await?;
        let def = queue.def();
        let node = self.shared.broker.identity().node_name.as_str();
        Ok((
            200,
            map(vec![
                ("name", Value::string(name)),
                ("vhost", Value::string(&def.vhost)),
                ("durable", Value::Bool(def.durable)),
                ("auto_delete", Value::Bool(def.auto_delete)),
                ("exclusive", Value::Bool(def.exclusive_owner.is_some())),
                ("type", Value::string(queue.kind().name())),
                ("arguments", amqp10_table(&def.arguments)),
                // A classic queue lives on this node; RabbitMQ's clients read both keys.
                ("leader", Value::string(node)),
                ("replicas", Value::List(vec![Value::string(node)])),
                ("message_count", Value::Ulong(u64::from(info.messages))),
                ("consumer_count", Value::Uint(info.consumers)),
            ]),
        ))
    }

    async fn declare_exchange(&self, name: &str, body: &Value) -> Result<Response, BrokerError> {
        let request = ExchangeDeclare {
            name: name.to_owned(),
            kind: field(body, "type")
                .and_then(Value::as_str)
                .unwrap_or("direct")
                .to_owned(),
            passive: false,
            durable: field(body, "durable")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            auto_delete: field(body, "auto_delete")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            internal: field(body, "internal")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            arguments: field(body, "arguments").map(table).unwrap_or_default(),
        };
        self.permit(Perm::Configure, ResourceKind::Exchange, name)?;
        self.vhost().declare_exchange(request).await?;
        Ok((204, Value::Null))
    }

    async fn bind(&self, body: &Value) -> Result<Response, BrokerError> {
        let text = |key| field(body, key).and_then(Value::as_str).map(str::to_owned);
        let source = text("source").unwrap_or_default();
        let destination = match (text("destination_queue"), text("destination_exchange")) {
            (Some(queue), _) => Destination::Queue(Arc::from(queue)),
            (None, Some(exchange)) => Destination::Exchange(Arc::from(exchange)),
            (None, None) => {
                return Err(BrokerError::new(
                    ErrorKind::PreconditionFailed,
                    "a binding needs destination_queue or destination_exchange",
                ))
            }
        };
        let key = text("binding_key").unwrap_or_default();
        let arguments = field(body, "arguments").map(table).unwrap_or_default();
        self.permit_binding(&source, &destination)?;
        self.vhost()
            .bind(&source, destination, &key, arguments, self.id)
            .await?;
        Ok((204, Value::Null))
    }

    /// `src=:s;dstq=:q;key=:k;args=` (or `dste=:e`); binding arguments are not matched.
    async fn unbind(&self, spec: &str) -> Result<Response, BrokerError> {
        let mut source = String::new();
        let mut destination = None;
        let mut key = String::new();
        for part in spec.split(';') {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            let value = address::percent_decode(value).unwrap_or_default();
            match name {
                "src" => source = value,
                "dstq" => destination = Some(Destination::Queue(Arc::from(value))),
                "dste" => destination = Some(Destination::Exchange(Arc::from(value))),
                "key" => key = value,
                _ => {}
            }
        }
        let Some(destination) = destination else {
            return Err(BrokerError::new(
                ErrorKind::PreconditionFailed,
                "a binding path needs dstq or dste",
            ));
        };
        self.permit_binding(&source, &destination)?;
        self.vhost()
            .unbind(&source, destination, &key, Table::default(), self.id)
            .await?;
        Ok((204, Value::Null))
    }
}

impl Connection {
    /// As AMQP 0.9.1's queue.bind: write on the destination, read on the source.
    fn permit_binding(&self, source: &str, destination: &Destination) -> Result<(), BrokerError> {
        let (kind, name) = match destination {
            Destination::Queue(name) => (ResourceKind::Queue, name),
            Destination::Exchange(name) => (ResourceKind::Exchange, name),
        };
        self.permit(Perm::Write, kind, name)?;
        self.permit(Perm::Read, ResourceKind::Exchange, source)
    }
}

fn status_of(error: &BrokerError) -> u16 {
    match error.kind {
        ErrorKind::NotFound => 404,
        ErrorKind::AccessRefused => 403,
        ErrorKind::PreconditionFailed | ErrorKind::ResourceLocked => 409,
        ErrorKind::InternalError => 500,
        _ => 400,
    }
}

/// The response message: properties (correlation-id, subject) and an amqp-value body.
fn response_message(message_id: Option<Value>, (status, body): Response) -> Bytes {
    let properties = Properties {
        correlation_id: message_id,
        subject: Some(status.to_string()),
        ..Properties::default()
    };
    let mut out = BytesMut::new();
    properties.to_value().encode(&mut out);
    Value::described(warren_proto::amqp10::message::code::AMQP_VALUE, body).encode(&mut out);
    out.freeze()
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::Map(
        pairs
            .into_iter()
            .map(|(k, v)| (Value::string(k), v))
            .collect(),
    )
}

fn field<'a>(body: &'a Value, key: &str) -> Option<&'a Value> {
    let Value::Map(pairs) = body else {
        return None;
    };
    pairs
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

fn table(value: &Value) -> Table {
    let Value::Map(pairs) = value else {
        return Table::default();
    };
    pairs
        .iter()
        .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), core_value(v)?)))
        .collect()
}

/// Queue arguments as an AMQP 1.0 map with string keys (the reverse of `table`).
fn amqp10_table(table: &Table) -> Value {
    Value::Map(
        table
            .iter()
            .map(|(k, v)| (Value::string(k), amqp10_value(v)))
            .collect(),
    )
}

fn amqp10_value(value: &CoreValue) -> Value {
    match value {
        CoreValue::Void => Value::Null,
        CoreValue::Bool(v) => Value::Bool(*v),
        CoreValue::Int(v) => Value::Long(*v),
        CoreValue::Float(v) => Value::Double(*v),
        CoreValue::Str(v) => Value::string(v),
        CoreValue::Bytes(v) => Value::Binary(v.clone().into()),
        CoreValue::Decimal { value, .. } => Value::Long(i64::from(*value)),
        CoreValue::Timestamp(s) => {
            Value::Timestamp(i64::try_from(*s).unwrap_or(i64::MAX).saturating_mul(1000))
        }
        CoreValue::Array(items) => Value::List(items.iter().map(amqp10_value).collect()),
        CoreValue::Table(table) => amqp10_table(table),
    }
}

fn core_value(value: &Value) -> Option<CoreValue> {
    Some(match value {
        Value::Null => CoreValue::Void,
        Value::Bool(v) => CoreValue::Bool(*v),
        Value::String(_) | Value::Symbol(_) => CoreValue::Str(value.as_str()?.to_owned()),
        Value::Binary(b) => CoreValue::Bytes(b.to_vec()),
        Value::Float(v) => CoreValue::Float(f64::from(*v)),
        Value::Double(v) => CoreValue::Float(*v),
        Value::Timestamp(ms) => CoreValue::Timestamp(u64::try_from(*ms / 1000).ok()?),
        Value::List(items) | Value::Array(items) => {
            CoreValue::Array(items.iter().filter_map(core_value).collect())
        }
        Value::Map(_) => CoreValue::Table(table(value)),
        Value::Byte(v) => CoreValue::Int(i64::from(*v)),
        Value::Short(v) => CoreValue::Int(i64::from(*v)),
        Value::Int(v) => CoreValue::Int(i64::from(*v)),
        Value::Long(v) => CoreValue::Int(*v),
        Value::Ubyte(v) => CoreValue::Int(i64::from(*v)),
        Value::Ushort(v) => CoreValue::Int(i64::from(*v)),
        Value::Uint(v) => CoreValue::Int(i64::from(*v)),
        Value::Ulong(v) => CoreValue::Int(i64::try_from(*v).ok()?),
        _ => return None,
    })
}
