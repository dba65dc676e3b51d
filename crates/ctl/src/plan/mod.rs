//! From the parsed command line to the HTTP requests of RabbitMQ's management API, and how
//! their answer is shown. Pure: no network, so every mapping is unit-tested.
//!
//! This module holds the plan's types and the commands that are one request each;
//! `columns` says what `list` shows, `declare` and `delete` map those two families of
//! subcommands.

use std::path::PathBuf;

use serde_json::{json, Map, Value};

use crate::cli::{
    AckMode, BindingArgs, Cli, Command, DestinationType, LimitName, ListKind, Purge, TrackingType,
};

mod columns;
mod declare;
mod delete;
#[cfg(test)]
mod tests;

pub use columns::{LISTENERS, MESSAGES, TRACKING};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Put,
    Post,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: Method,
    /// Path and query, starting with /api/, segments percent-encoded.
    pub path: String,
    pub body: Option<Value>,
}

impl Request {
    fn new(method: Method, path: String, body: Option<Value>) -> Request {
        Request { method, path, body }
    }
    fn get(path: String) -> Request {
        Request::new(Method::Get, path, None)
    }
}

/// A table column: its header and the field it shows (dots walk into objects).
pub type Column = (&'static str, &'static str);

#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A JSON array shown as a table with these columns.
    Table(&'static [Column]),
    /// GET /api/overview.
    Status,
    /// GET /api/health/checks/alarms (503 is an answer here, not an error).
    Alarms,
    /// A change: this line is printed when it succeeds.
    Done(String),
    /// Publish: {"routed": bool}.
    Routed,
    /// Get: an array of messages.
    Messages,
    /// A stream's tracking: `{"offsets": {...}, "writers": {...}}`.
    Tracking,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    Call {
        request: Request,
        output: Output,
    },
    /// List the bindings between source and destination (`list`), then DELETE `list.path`/
    /// properties_key of the one with this routing key.
    DeleteBinding {
        list: Request,
        routing_key: String,
    },
    Export {
        request: Request,
        file: Option<PathBuf>,
    },
    /// POST /api/definitions with the file's JSON.
    Import {
        file: PathBuf,
    },
}

/// Percent-encodes one path segment: everything but RFC 3986's unreserved characters.
pub fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Parses a flag's JSON object (`--arguments`, `--definition`, `--properties`).
pub fn json_object(flag: &str, text: Option<&str>) -> Result<Map<String, Value>, String> {
    let Some(text) = text else {
        return Ok(Map::new());
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(format!("--{flag}: not a JSON object: {text}")),
        Err(error) => Err(format!("--{flag}: not JSON ({error}): {text}")),
    }
}

/// The plan of a parsed command line.
pub fn plan(cli: &Cli) -> Result<Plan, String> {
    let vhost = cli.vhost.as_str();
    let vh = encode(vhost);
    Ok(match &cli.command {
        Command::Status => Plan::Call {
            request: Request::get("/api/overview".to_string()),
            output: Output::Status,
        },
        Command::Alarms => Plan::Call {
            request: Request::get("/api/health/checks/alarms".to_string()),
            output: Output::Alarms,
        },
        Command::List {
            what: ListKind::StreamTracking,
            all_vhosts,
            stream,
            tracking_type,
        } => plan_stream_tracking(vhost, *all_vhosts, stream.as_deref(), *tracking_type)?,
        Command::List {
            what, all_vhosts, ..
        } => {
            let (path, columns) = columns::list(*what, vhost, *all_vhosts);
            Plan::Call {
                request: Request::get(path),
                output: Output::Table(columns),
            }
        }
        Command::Declare(declare) => declare::plan_declare(declare, vhost)?,
        Command::Delete(delete) => delete::plan_delete(delete, vhost),
        Command::Purge(Purge::Queue { name }) => done(
            Request::new(
                Method::Delete,
                format!("/api/queues/{vh}/{}/contents", encode(name)),
                None,
            ),
            format!("queue '{name}' purged"),
        ),
        Command::Publish {
            exchange,
            routing_key,
            payload,
            properties,
        } => plan_publish(vhost, exchange, routing_key, payload, properties.as_deref())?,
        Command::Get {
            queue,
            count,
            ackmode: mode,
        } => Plan::Call {
            request: Request::new(
                Method::Post,
                format!("/api/queues/{vh}/{}/get", encode(queue)),
                Some(json!({"count": count, "ackmode": ackmode(*mode), "encoding": "auto"})),
            ),
            output: Output::Messages,
        },
        Command::Export { file } => Plan::Export {
            request: Request::get("/api/definitions".to_string()),
            file: file.clone(),
        },
        Command::Import { file } => Plan::Import { file: file.clone() },
    })
}

/// `list stream-tracking`: the stream management plugin's tracking of one stream.
fn plan_stream_tracking(
    vhost: &str,
    all_vhosts: bool,
    stream: Option<&str>,
    tracking_type: TrackingType,
) -> Result<Plan, String> {
    if all_vhosts {
        return Err("list stream-tracking shows one stream: give --vhost, not --all-vhosts".into());
    }
    let stream = stream.ok_or("list stream-tracking needs --stream NAME")?;
    let kind = match tracking_type {
        TrackingType::Offset => "offset",
        TrackingType::Writer => "writer",
        TrackingType::All => "all",
    };
    Ok(Plan::Call {
        request: Request::get(format!(
            "/api/stream/{}/{}/tracking?type={kind}",
            encode(vhost),
            encode(stream)
        )),
        output: Output::Tracking,
    })
}

/// `publish`: POST to the exchange's publish endpoint; the empty name is the default exchange,
/// which the API spells `amq.default`.
fn plan_publish(
    vhost: &str,
    exchange: &str,
    routing_key: &str,
    payload: &str,
    properties: Option<&str>,
) -> Result<Plan, String> {
    let exchange = if exchange.is_empty() {
        "amq.default"
    } else {
        exchange
    };
    let properties = json_object("properties", properties)?;
    let body = json!({
        "properties": properties,
        "routing_key": routing_key,
        "payload": payload,
        "payload_encoding": "string",
    });
    Ok(Plan::Call {
        request: Request::new(
            Method::Post,
            format!(
                "/api/exchanges/{}/{}/publish",
                encode(vhost),
                encode(exchange)
            ),
            Some(body),
        ),
        output: Output::Routed,
    })
}

fn ackmode(mode: AckMode) -> &'static str {
    match mode {
        AckMode::AckRequeueTrue => "ack_requeue_true",
        AckMode::AckRequeueFalse => "ack_requeue_false",
        AckMode::RejectRequeueTrue => "reject_requeue_true",
        AckMode::RejectRequeueFalse => "reject_requeue_false",
    }
}

fn limit_name(name: LimitName) -> &'static str {
    match name {
        LimitName::MaxConnections => "max-connections",
        LimitName::MaxQueues => "max-queues",
    }
}

/// /api/bindings/{vhost}/e/{source}/{q|e}/{destination}
fn bindings_path(vhost: &str, binding: &BindingArgs) -> String {
    let kind = match binding.destination_type {
        DestinationType::Queue => "q",
        DestinationType::Exchange => "e",
    };
    format!(
        "/api/bindings/{}/e/{}/{kind}/{}",
        encode(vhost),
        encode(&binding.source),
        encode(&binding.destination)
    )
}

fn done(request: Request, message: String) -> Plan {
    Plan::Call {
        request,
        output: Output::Done(message),
    }
}

/// The binding to delete among those listed between a source and a destination: the
/// properties_key of the first with the routing key.
pub fn binding_props_key<'a>(bindings: &'a Value, routing_key: &str) -> Option<&'a str> {
    bindings.as_array()?.iter().find_map(|binding| {
        if binding.get("routing_key")?.as_str()? == routing_key {
            binding.get("properties_key")?.as_str()
        } else {
            None
        }
    })
}
