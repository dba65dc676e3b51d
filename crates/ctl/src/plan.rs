//! From the parsed command line to the HTTP requests of RabbitMQ's management API, and how
//! their answer is shown. Pure: no network, so every mapping is unit-tested.

use std::path::PathBuf;

use serde_json::{json, Map, Value};

use crate::cli::{
    AckMode, ApplyTo, BindingArgs, Cli, Command, Declare, Delete, DestinationType, LimitName,
    ListKind, PolicyArgs, Purge, QueueType,
};

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

const QUEUES: &[Column] = &[
    ("vhost", "vhost"),
    ("name", "name"),
    ("type", "type"),
    ("durable", "durable"),
    ("auto_delete", "auto_delete"),
    ("messages", "messages"),
    ("ready", "messages_ready"),
    ("unacked", "messages_unacknowledged"),
    ("consumers", "consumers"),
    ("state", "state"),
];
const EXCHANGES: &[Column] = &[
    ("vhost", "vhost"),
    ("name", "name"),
    ("type", "type"),
    ("durable", "durable"),
    ("auto_delete", "auto_delete"),
    ("internal", "internal"),
];
const BINDINGS: &[Column] = &[
    ("vhost", "vhost"),
    ("source", "source"),
    ("destination", "destination"),
    ("destination_type", "destination_type"),
    ("routing_key", "routing_key"),
    ("arguments", "arguments"),
];
const CONNECTIONS: &[Column] = &[
    ("name", "name"),
    ("user", "user"),
    ("vhost", "vhost"),
    ("state", "state"),
    ("channels", "channels"),
    ("protocol", "protocol"),
    ("peer_host", "peer_host"),
    ("peer_port", "peer_port"),
];
const CHANNELS: &[Column] = &[
    ("name", "name"),
    ("user", "user"),
    ("vhost", "vhost"),
    ("number", "number"),
    ("consumers", "consumer_count"),
    ("unacked", "messages_unacknowledged"),
    ("prefetch", "prefetch_count"),
    ("state", "state"),
];
const CONSUMERS: &[Column] = &[
    ("vhost", "queue.vhost"),
    ("queue", "queue.name"),
    ("consumer_tag", "consumer_tag"),
    ("channel", "channel_details.name"),
    ("ack_required", "ack_required"),
    ("prefetch", "prefetch_count"),
    ("active", "active"),
];
const USERS: &[Column] = &[("name", "name"), ("tags", "tags")];
const VHOSTS: &[Column] = &[
    ("name", "name"),
    ("description", "description"),
    ("tags", "tags"),
    ("messages", "messages"),
];
const PERMISSIONS: &[Column] = &[
    ("user", "user"),
    ("vhost", "vhost"),
    ("configure", "configure"),
    ("write", "write"),
    ("read", "read"),
];
const TOPIC_PERMISSIONS: &[Column] = &[
    ("user", "user"),
    ("vhost", "vhost"),
    ("exchange", "exchange"),
    ("write", "write"),
    ("read", "read"),
];
const POLICIES: &[Column] = &[
    ("vhost", "vhost"),
    ("name", "name"),
    ("pattern", "pattern"),
    ("apply_to", "apply-to"),
    ("priority", "priority"),
    ("definition", "definition"),
];
const VHOST_LIMITS: &[Column] = &[("vhost", "vhost"), ("limits", "value")];
pub const MESSAGES: &[Column] = &[
    ("routing_key", "routing_key"),
    ("exchange", "exchange"),
    ("message_count", "message_count"),
    ("redelivered", "redelivered"),
    ("payload_bytes", "payload_bytes"),
    ("payload_encoding", "payload_encoding"),
    ("payload", "payload"),
];
pub const LISTENERS: &[Column] = &[
    ("node", "node"),
    ("protocol", "protocol"),
    ("ip_address", "ip_address"),
    ("port", "port"),
];

/// GET path and columns of `list KIND`.
fn list(kind: ListKind, vhost: &str, all_vhosts: bool) -> (String, &'static [Column]) {
    let vh = encode(vhost);
    // (per-vhost path, all-vhosts path, columns)
    let (scoped, all, columns) = match kind {
        ListKind::Queues => (format!("/api/queues/{vh}"), "/api/queues", QUEUES),
        ListKind::Exchanges => (format!("/api/exchanges/{vh}"), "/api/exchanges", EXCHANGES),
        ListKind::Bindings => (format!("/api/bindings/{vh}"), "/api/bindings", BINDINGS),
        ListKind::Connections => (
            format!("/api/vhosts/{vh}/connections"),
            "/api/connections",
            CONNECTIONS,
        ),
        ListKind::Channels => (
            format!("/api/vhosts/{vh}/channels"),
            "/api/channels",
            CHANNELS,
        ),
        ListKind::Consumers => (format!("/api/consumers/{vh}"), "/api/consumers", CONSUMERS),
        ListKind::Users => ("/api/users".to_string(), "/api/users", USERS),
        ListKind::Vhosts => ("/api/vhosts".to_string(), "/api/vhosts", VHOSTS),
        ListKind::Permissions => (
            format!("/api/vhosts/{vh}/permissions"),
            "/api/permissions",
            PERMISSIONS,
        ),
        ListKind::TopicPermissions => (
            format!("/api/vhosts/{vh}/topic-permissions"),
            "/api/topic-permissions",
            TOPIC_PERMISSIONS,
        ),
        ListKind::Policies => (format!("/api/policies/{vh}"), "/api/policies", POLICIES),
        ListKind::OperatorPolicies => (
            format!("/api/operator-policies/{vh}"),
            "/api/operator-policies",
            POLICIES,
        ),
        ListKind::VhostLimits => (
            format!("/api/vhost-limits/{vh}"),
            "/api/vhost-limits",
            VHOST_LIMITS,
        ),
    };
    if all_vhosts {
        (all.to_string(), columns)
    } else {
        (scoped, columns)
    }
}

fn queue_type(kind: QueueType) -> &'static str {
    match kind {
        QueueType::Classic => "classic",
        QueueType::Quorum => "quorum",
        QueueType::Stream => "stream",
    }
}

fn ackmode(mode: AckMode) -> &'static str {
    match mode {
        AckMode::AckRequeueTrue => "ack_requeue_true",
        AckMode::AckRequeueFalse => "ack_requeue_false",
        AckMode::RejectRequeueTrue => "reject_requeue_true",
        AckMode::RejectRequeueFalse => "reject_requeue_false",
    }
}

fn apply_to(to: ApplyTo) -> &'static str {
    match to {
        ApplyTo::All => "all",
        ApplyTo::Queues => "queues",
        ApplyTo::Exchanges => "exchanges",
        ApplyTo::ClassicQueues => "classic_queues",
        ApplyTo::QuorumQueues => "quorum_queues",
        ApplyTo::Streams => "streams",
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
        Command::List { what, all_vhosts } => {
            let (path, columns) = list(*what, vhost, *all_vhosts);
            Plan::Call {
                request: Request::get(path),
                output: Output::Table(columns),
            }
        }
        Command::Declare(declare) => plan_declare(declare, vhost)?,
        Command::Delete(delete) => plan_delete(delete, vhost),
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
        } => {
            let exchange = if exchange.is_empty() {
                "amq.default"
            } else {
                exchange
            };
            let properties = json_object("properties", properties.as_deref())?;
            let body = json!({
                "properties": properties,
                "routing_key": routing_key,
                "payload": payload,
                "payload_encoding": "string",
            });
            Plan::Call {
                request: Request::new(
                    Method::Post,
                    format!("/api/exchanges/{vh}/{}/publish", encode(exchange)),
                    Some(body),
                ),
                output: Output::Routed,
            }
        }
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

fn plan_declare(declare: &Declare, vhost: &str) -> Result<Plan, String> {
    let vh = encode(vhost);
    Ok(match declare {
        Declare::Queue {
            name,
            durable,
            auto_delete,
            queue_type: kind,
            arguments,
        } => {
            let mut arguments = json_object("arguments", arguments.as_deref())?;
            if let Some(kind) = kind {
                arguments.insert("x-queue-type".to_string(), json!(queue_type(*kind)));
            }
            let body =
                json!({"durable": durable, "auto_delete": auto_delete, "arguments": arguments});
            done(
                Request::new(
                    Method::Put,
                    format!("/api/queues/{vh}/{}", encode(name)),
                    Some(body),
                ),
                format!("queue '{name}' declared"),
            )
        }
        Declare::Exchange {
            name,
            exchange_type,
            durable,
            auto_delete,
            internal,
            arguments,
        } => {
            let arguments = json_object("arguments", arguments.as_deref())?;
            let body = json!({
                "type": exchange_type,
                "durable": durable,
                "auto_delete": auto_delete,
                "internal": internal,
                "arguments": arguments,
            });
            done(
                Request::new(
                    Method::Put,
                    format!("/api/exchanges/{vh}/{}", encode(name)),
                    Some(body),
                ),
                format!("exchange '{name}' declared"),
            )
        }
        Declare::Binding(binding) => {
            let arguments = json_object("arguments", binding.arguments.as_deref())?;
            let body = json!({"routing_key": binding.routing_key, "arguments": arguments});
            done(
                Request::new(Method::Post, bindings_path(vhost, binding), Some(body)),
                format!(
                    "binding '{}' -> '{}' declared",
                    binding.source, binding.destination
                ),
            )
        }
        Declare::User {
            name,
            password,
            password_hash,
            hashing_algorithm,
            tags,
        } => {
            let mut body = Map::new();
            if let Some(password) = password {
                body.insert("password".to_string(), json!(password));
            } else {
                body.insert(
                    "password_hash".to_string(),
                    json!(password_hash.as_deref().unwrap_or("")),
                );
                if let Some(algorithm) = hashing_algorithm {
                    body.insert("hashing_algorithm".to_string(), json!(algorithm));
                }
            }
            body.insert("tags".to_string(), json!(tags));
            done(
                Request::new(
                    Method::Put,
                    format!("/api/users/{}", encode(name)),
                    Some(Value::Object(body)),
                ),
                format!("user '{name}' declared"),
            )
        }
        Declare::Vhost {
            name,
            description,
            tags,
        } => {
            let mut body = Map::new();
            if let Some(description) = description {
                body.insert("description".to_string(), json!(description));
            }
            if let Some(tags) = tags {
                body.insert("tags".to_string(), json!(tags));
            }
            done(
                Request::new(
                    Method::Put,
                    format!("/api/vhosts/{}", encode(name)),
                    Some(Value::Object(body)),
                ),
                format!("vhost '{name}' declared"),
            )
        }
        Declare::Permission {
            user,
            configure,
            write,
            read,
        } => done(
            Request::new(
                Method::Put,
                format!("/api/permissions/{vh}/{}", encode(user)),
                Some(json!({"configure": configure, "write": write, "read": read})),
            ),
            format!("permissions of '{user}' in vhost '{vhost}' declared"),
        ),
        Declare::TopicPermission {
            user,
            exchange,
            write,
            read,
        } => done(
            Request::new(
                Method::Put,
                format!("/api/topic-permissions/{vh}/{}", encode(user)),
                Some(json!({"exchange": exchange, "write": write, "read": read})),
            ),
            format!("topic permissions of '{user}' on '{exchange}' in vhost '{vhost}' declared"),
        ),
        Declare::Policy(policy) => declare_policy("policies", "policy", policy, vhost)?,
        Declare::OperatorPolicy(policy) => {
            declare_policy("operator-policies", "operator policy", policy, vhost)?
        }
        Declare::VhostLimit { name, value } => done(
            Request::new(
                Method::Put,
                format!("/api/vhost-limits/{vh}/{}", limit_name(*name)),
                Some(json!({ "value": value })),
            ),
            format!(
                "limit {} of vhost '{vhost}' set to {value}",
                limit_name(*name)
            ),
        ),
    })
}

fn declare_policy(
    collection: &str,
    what: &str,
    policy: &PolicyArgs,
    vhost: &str,
) -> Result<Plan, String> {
    let definition = json_object("definition", Some(&policy.definition))?;
    let body = json!({
        "pattern": policy.pattern,
        "definition": definition,
        "priority": policy.priority,
        "apply-to": apply_to(policy.apply_to),
    });
    Ok(done(
        Request::new(
            Method::Put,
            format!(
                "/api/{collection}/{}/{}",
                encode(vhost),
                encode(&policy.name)
            ),
            Some(body),
        ),
        format!("{what} '{}' declared", policy.name),
    ))
}

fn plan_delete(delete: &Delete, vhost: &str) -> Plan {
    let vh = encode(vhost);
    let delete_path =
        |path: String, message: String| done(Request::new(Method::Delete, path, None), message);
    match delete {
        Delete::Queue {
            name,
            if_empty,
            if_unused,
        } => {
            let mut query = Vec::new();
            if *if_empty {
                query.push("if-empty=true");
            }
            if *if_unused {
                query.push("if-unused=true");
            }
            let query = if query.is_empty() {
                String::new()
            } else {
                format!("?{}", query.join("&"))
            };
            delete_path(
                format!("/api/queues/{vh}/{}{query}", encode(name)),
                format!("queue '{name}' deleted"),
            )
        }
        Delete::Exchange { name, if_unused } => delete_path(
            format!(
                "/api/exchanges/{vh}/{}{}",
                encode(name),
                if *if_unused { "?if-unused=true" } else { "" }
            ),
            format!("exchange '{name}' deleted"),
        ),
        Delete::Binding(binding) => Plan::DeleteBinding {
            list: Request::get(bindings_path(vhost, binding)),
            routing_key: binding.routing_key.clone(),
        },
        Delete::User { name } => delete_path(
            format!("/api/users/{}", encode(name)),
            format!("user '{name}' deleted"),
        ),
        Delete::Vhost { name } => delete_path(
            format!("/api/vhosts/{}", encode(name)),
            format!("vhost '{name}' deleted"),
        ),
        Delete::Permission { user } => delete_path(
            format!("/api/permissions/{vh}/{}", encode(user)),
            format!("permissions of '{user}' in vhost '{vhost}' deleted"),
        ),
        Delete::TopicPermission { user } => delete_path(
            format!("/api/topic-permissions/{vh}/{}", encode(user)),
            format!("topic permissions of '{user}' in vhost '{vhost}' deleted"),
        ),
        Delete::Policy { name } => delete_path(
            format!("/api/policies/{vh}/{}", encode(name)),
            format!("policy '{name}' deleted"),
        ),
        Delete::OperatorPolicy { name } => delete_path(
            format!("/api/operator-policies/{vh}/{}", encode(name)),
            format!("operator policy '{name}' deleted"),
        ),
        Delete::VhostLimit { name } => delete_path(
            format!("/api/vhost-limits/{vh}/{}", limit_name(*name)),
            format!("limit {} of vhost '{vhost}' deleted", limit_name(*name)),
        ),
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

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::json;

    use super::*;

    fn plan_of(args: &str) -> Plan {
        let cli = Cli::try_parse_from(std::iter::once("warren ctl").chain(args.split(' ')))
            .unwrap_or_else(|error| panic!("{args}: {error}"));
        plan(&cli).unwrap()
    }

    /// (method, path, body) of a one-request command.
    fn request_of(args: &str) -> (Method, String, Option<Value>) {
        match plan_of(args) {
            Plan::Call { request, .. } => (request.method, request.path, request.body),
            other => panic!("{args}: {other:?}"),
        }
    }

    fn get(path: &str) -> (Method, String, Option<Value>) {
        (Method::Get, path.to_string(), None)
    }

    #[test]
    fn encode_escapes_all_but_unreserved() {
        assert_eq!(encode("/"), "%2F");
        assert_eq!(encode("a b/c%d"), "a%20b%2Fc%25d");
        assert_eq!(encode("Az09-._~"), "Az09-._~");
        assert_eq!(encode("é"), "%C3%A9");
    }

    #[test]
    fn lists_are_vhost_scoped_unless_all_vhosts() {
        assert_eq!(request_of("list queues"), get("/api/queues/%2F"));
        assert_eq!(request_of("list queues --all-vhosts"), get("/api/queues"));
        assert_eq!(
            request_of("list exchanges --vhost dev"),
            get("/api/exchanges/dev")
        );
        assert_eq!(
            request_of("--vhost v/1 list bindings"),
            get("/api/bindings/v%2F1")
        );
        assert_eq!(
            request_of("list connections"),
            get("/api/vhosts/%2F/connections")
        );
        assert_eq!(
            request_of("list channels --all-vhosts"),
            get("/api/channels")
        );
        assert_eq!(request_of("list consumers"), get("/api/consumers/%2F"));
        assert_eq!(request_of("list users"), get("/api/users"));
        assert_eq!(request_of("list vhosts"), get("/api/vhosts"));
        assert_eq!(
            request_of("list permissions"),
            get("/api/vhosts/%2F/permissions")
        );
        assert_eq!(
            request_of("list topic-permissions --all-vhosts"),
            get("/api/topic-permissions")
        );
        assert_eq!(request_of("list policies"), get("/api/policies/%2F"));
        assert_eq!(
            request_of("list operator-policies"),
            get("/api/operator-policies/%2F")
        );
        assert_eq!(
            request_of("list vhost-limits"),
            get("/api/vhost-limits/%2F")
        );
        assert_eq!(request_of("status"), get("/api/overview"));
        assert_eq!(request_of("alarms"), get("/api/health/checks/alarms"));
    }

    #[test]
    fn declare_queue() {
        assert_eq!(
            request_of("declare queue --name q1"),
            (
                Method::Put,
                "/api/queues/%2F/q1".to_string(),
                Some(json!({"durable": true, "auto_delete": false, "arguments": {}}))
            )
        );
        assert_eq!(
            request_of(
                "declare queue --name q/2 --vhost dev --type quorum --durable true \
                 --arguments {\"x-max-length\":10}"
            ),
            (
                Method::Put,
                "/api/queues/dev/q%2F2".to_string(),
                Some(json!({"durable": true, "auto_delete": false,
                    "arguments": {"x-max-length": 10, "x-queue-type": "quorum"}}))
            )
        );
        let (_, _, body) = request_of("declare queue --name t --durable false --auto-delete");
        assert_eq!(
            body,
            Some(json!({"durable": false, "auto_delete": true, "arguments": {}}))
        );
    }

    #[test]
    fn bad_json_flags_are_errors() {
        let cli = Cli::try_parse_from([
            "warren ctl",
            "declare",
            "queue",
            "--name",
            "q",
            "--arguments",
            "[1]",
        ])
        .unwrap();
        assert!(plan(&cli).unwrap_err().contains("not a JSON object"));
        let cli = Cli::try_parse_from([
            "warren ctl",
            "declare",
            "policy",
            "--name",
            "p",
            "--pattern",
            ".*",
            "--definition",
            "{oops",
        ])
        .unwrap();
        assert!(plan(&cli).unwrap_err().contains("--definition: not JSON"));
    }

    #[test]
    fn declare_exchange_and_binding() {
        assert_eq!(
            request_of("declare exchange --name ex --type topic"),
            (
                Method::Put,
                "/api/exchanges/%2F/ex".to_string(),
                Some(
                    json!({"type": "topic", "durable": true, "auto_delete": false,
                    "internal": false, "arguments": {}})
                )
            )
        );
        assert_eq!(
            request_of("declare binding --source ex --destination q1 --routing-key a.b"),
            (
                Method::Post,
                "/api/bindings/%2F/e/ex/q/q1".to_string(),
                Some(json!({"routing_key": "a.b", "arguments": {}}))
            )
        );
        let (_, path, _) =
            request_of("declare binding --source ex --destination ex2 --destination-type exchange");
        assert_eq!(path, "/api/bindings/%2F/e/ex/e/ex2");
    }

    #[test]
    fn declare_users_vhosts_permissions() {
        assert_eq!(
            request_of("declare user --name bob --password s3cret --tags administrator,monitoring"),
            (
                Method::Put,
                "/api/users/bob".to_string(),
                Some(json!({"password": "s3cret", "tags": "administrator,monitoring"}))
            )
        );
        let (_, _, body) = request_of(
            "declare user --name h --password-hash abc= --hashing-algorithm \
             rabbit_password_hashing_sha256",
        );
        assert_eq!(
            body,
            Some(json!({"password_hash": "abc=", "tags": "",
                "hashing_algorithm": "rabbit_password_hashing_sha256"}))
        );
        assert!(Cli::try_parse_from(["warren ctl", "declare", "user", "--name", "x"]).is_err());
        assert_eq!(
            request_of("declare vhost --name dev --description testing --tags a,b"),
            (
                Method::Put,
                "/api/vhosts/dev".to_string(),
                Some(json!({"description": "testing", "tags": "a,b"}))
            )
        );
        assert_eq!(
            request_of(
                "declare permission --user bob --vhost dev --configure .* --write .* --read ^r"
            ),
            (
                Method::Put,
                "/api/permissions/dev/bob".to_string(),
                Some(json!({"configure": ".*", "write": ".*", "read": "^r"}))
            )
        );
        assert_eq!(
            request_of(
                "declare topic-permission --user bob --exchange amq.topic --write ^a --read .*"
            ),
            (
                Method::Put,
                "/api/topic-permissions/%2F/bob".to_string(),
                Some(json!({"exchange": "amq.topic", "write": "^a", "read": ".*"}))
            )
        );
    }

    #[test]
    fn declare_policies_and_limits() {
        assert_eq!(
            request_of(
                "declare policy --name p1 --pattern ^q --definition {\"max-length\":5} \
                 --priority 3 --apply-to quorum_queues"
            ),
            (
                Method::Put,
                "/api/policies/%2F/p1".to_string(),
                Some(
                    json!({"pattern": "^q", "definition": {"max-length": 5}, "priority": 3,
                    "apply-to": "quorum_queues"})
                )
            )
        );
        let (_, path, body) =
            request_of("declare operator-policy --name op --pattern .* --definition {}");
        assert_eq!(path, "/api/operator-policies/%2F/op");
        assert_eq!(body.unwrap()["apply-to"], "all");
        assert_eq!(
            request_of("declare vhost-limit --name max-queues --value 10"),
            (
                Method::Put,
                "/api/vhost-limits/%2F/max-queues".to_string(),
                Some(json!({"value": 10}))
            )
        );
        let (_, _, body) = request_of("declare vhost-limit --name max-connections --value -1");
        assert_eq!(body, Some(json!({"value": -1})));
    }

    #[test]
    fn deletes() {
        let delete = |path: &str| (Method::Delete, path.to_string(), None);
        assert_eq!(
            request_of("delete queue --name q1"),
            delete("/api/queues/%2F/q1")
        );
        assert_eq!(
            request_of("delete queue --name q1 --if-empty --if-unused"),
            delete("/api/queues/%2F/q1?if-empty=true&if-unused=true")
        );
        assert_eq!(
            request_of("delete exchange --name ex --if-unused"),
            delete("/api/exchanges/%2F/ex?if-unused=true")
        );
        assert_eq!(
            request_of("delete user --name bob"),
            delete("/api/users/bob")
        );
        assert_eq!(
            request_of("delete vhost --name dev"),
            delete("/api/vhosts/dev")
        );
        assert_eq!(
            request_of("delete permission --user bob"),
            delete("/api/permissions/%2F/bob")
        );
        assert_eq!(
            request_of("delete topic-permission --user bob"),
            delete("/api/topic-permissions/%2F/bob")
        );
        assert_eq!(
            request_of("delete policy --name p"),
            delete("/api/policies/%2F/p")
        );
        assert_eq!(
            request_of("delete operator-policy --name p"),
            delete("/api/operator-policies/%2F/p")
        );
        assert_eq!(
            request_of("delete vhost-limit --name max-connections"),
            delete("/api/vhost-limits/%2F/max-connections")
        );
        assert_eq!(
            request_of("purge queue --name q1"),
            delete("/api/queues/%2F/q1/contents")
        );
        assert_eq!(
            plan_of("delete binding --source ex --destination q1 --routing-key k"),
            Plan::DeleteBinding {
                list: Request::get("/api/bindings/%2F/e/ex/q/q1".to_string()),
                routing_key: "k".to_string()
            }
        );
    }

    #[test]
    fn binding_props_key_picks_the_routing_key() {
        let bindings = json!([
            {"routing_key": "a", "properties_key": "a"},
            {"routing_key": "b", "properties_key": "b~XyZ"},
            {"routing_key": 5},
        ]);
        assert_eq!(binding_props_key(&bindings, "b"), Some("b~XyZ"));
        assert_eq!(binding_props_key(&bindings, "c"), None);
        assert_eq!(binding_props_key(&json!({"odd": 1}), "a"), None);
    }

    #[test]
    fn publish_get_export_import() {
        assert_eq!(
            request_of("publish --routing-key q1 --payload hello"),
            (
                Method::Post,
                "/api/exchanges/%2F/amq.default/publish".to_string(),
                Some(
                    json!({"properties": {}, "routing_key": "q1", "payload": "hello",
                    "payload_encoding": "string"})
                )
            )
        );
        let (_, path, body) = request_of(
            "publish --exchange ex --routing-key k --payload x --properties {\"delivery_mode\":2}",
        );
        assert_eq!(path, "/api/exchanges/%2F/ex/publish");
        assert_eq!(body.unwrap()["properties"], json!({"delivery_mode": 2}));
        assert_eq!(
            request_of("get --queue q1 --count 3 --ackmode ack_requeue_false"),
            (
                Method::Post,
                "/api/queues/%2F/q1/get".to_string(),
                Some(json!({"count": 3, "ackmode": "ack_requeue_false", "encoding": "auto"}))
            )
        );
        assert_eq!(
            plan_of("export"),
            Plan::Export {
                request: Request::get("/api/definitions".to_string()),
                file: None
            }
        );
        assert_eq!(
            plan_of("import defs.json"),
            Plan::Import {
                file: PathBuf::from("defs.json")
            }
        );
    }
}
