//! `declare KIND`: one PUT or POST per object, with the body the management API expects.

use serde_json::{json, Map, Value};

use super::{bindings_path, done, encode, json_object, limit_name, Method, Plan, Request};
use crate::cli::{
    ApplyTo, BindingArgs, Declare, ExchangeArgs, PolicyArgs, QueueArgs, QueueType, UserArgs,
    VhostArgs,
};

/// The plan of `declare KIND`.
pub(super) fn plan_declare(declare: &Declare, vhost: &str) -> Result<Plan, String> {
    let vh = encode(vhost);
    Ok(match declare {
        Declare::Queue(queue) => declare_queue(queue, vhost)?,
        Declare::Exchange(exchange) => declare_exchange(exchange, vhost)?,
        Declare::Binding(binding) => declare_binding(binding, vhost)?,
        Declare::User(user) => declare_user(user),
        Declare::Vhost(declared) => declare_vhost(declared),
        Declare::Permission {
            user,
            configure,
            write,
            read,
        } => put(
            format!("/api/permissions/{vh}/{}", encode(user)),
            json!({"configure": configure, "write": write, "read": read}),
            format!("permissions of '{user}' in vhost '{vhost}' declared"),
        ),
        Declare::TopicPermission {
            user,
            exchange,
            write,
            read,
        } => put(
            format!("/api/topic-permissions/{vh}/{}", encode(user)),
            json!({"exchange": exchange, "write": write, "read": read}),
            format!("topic permissions of '{user}' on '{exchange}' in vhost '{vhost}' declared"),
        ),
        Declare::Policy(policy) => declare_policy("policies", "policy", policy, vhost)?,
        Declare::OperatorPolicy(policy) => {
            declare_policy("operator-policies", "operator policy", policy, vhost)?
        }
        Declare::VhostLimit { name, value } => put(
            format!("/api/vhost-limits/{vh}/{}", limit_name(*name)),
            json!({ "value": value }),
            format!(
                "limit {} of vhost '{vhost}' set to {value}",
                limit_name(*name)
            ),
        ),
    })
}

/// A PUT of `body` to `path` that prints `message` when it succeeds.
fn put(path: String, body: Value, message: String) -> Plan {
    done(Request::new(Method::Put, path, Some(body)), message)
}

/// `declare queue`: `--type` becomes the x-queue-type argument, as RabbitMQ's API expects.
fn declare_queue(queue: &QueueArgs, vhost: &str) -> Result<Plan, String> {
    let mut arguments = json_object("arguments", queue.arguments.as_deref())?;
    if let Some(kind) = queue.queue_type {
        arguments.insert("x-queue-type".to_string(), json!(queue_type(kind)));
    }
    let body = json!({
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "arguments": arguments,
    });
    let name = &queue.name;
    Ok(put(
        format!("/api/queues/{}/{}", encode(vhost), encode(name)),
        body,
        format!("queue '{name}' declared"),
    ))
}

fn declare_exchange(exchange: &ExchangeArgs, vhost: &str) -> Result<Plan, String> {
    let arguments = json_object("arguments", exchange.arguments.as_deref())?;
    let body = json!({
        "type": exchange.exchange_type,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": arguments,
    });
    let name = &exchange.name;
    Ok(put(
        format!("/api/exchanges/{}/{}", encode(vhost), encode(name)),
        body,
        format!("exchange '{name}' declared"),
    ))
}

/// `declare binding`: a POST, since the API names a binding by a key the server derives.
fn declare_binding(binding: &BindingArgs, vhost: &str) -> Result<Plan, String> {
    let arguments = json_object("arguments", binding.arguments.as_deref())?;
    let body = json!({"routing_key": binding.routing_key, "arguments": arguments});
    Ok(done(
        Request::new(Method::Post, bindings_path(vhost, binding), Some(body)),
        format!(
            "binding '{}' -> '{}' declared",
            binding.source, binding.destination
        ),
    ))
}

/// `declare user`: a clear password, or else a hash (clap requires one of the two).
fn declare_user(user: &UserArgs) -> Plan {
    let mut body = Map::new();
    if let Some(password) = &user.password {
        body.insert("password".to_string(), json!(password));
    } else {
        body.insert(
            "password_hash".to_string(),
            json!(user.password_hash.as_deref().unwrap_or("")),
        );
        if let Some(algorithm) = &user.hashing_algorithm {
            body.insert("hashing_algorithm".to_string(), json!(algorithm));
        }
    }
    body.insert("tags".to_string(), json!(user.tags));
    let name = &user.name;
    put(
        format!("/api/users/{}", encode(name)),
        Value::Object(body),
        format!("user '{name}' declared"),
    )
}

/// `declare vhost`: only the fields given are sent, so an update keeps the others.
fn declare_vhost(vhost: &VhostArgs) -> Plan {
    let mut body = Map::new();
    if let Some(description) = &vhost.description {
        body.insert("description".to_string(), json!(description));
    }
    if let Some(tags) = &vhost.tags {
        body.insert("tags".to_string(), json!(tags));
    }
    let name = &vhost.name;
    put(
        format!("/api/vhosts/{}", encode(name)),
        Value::Object(body),
        format!("vhost '{name}' declared"),
    )
}

/// `declare policy` and `declare operator-policy`: the same body under two collections.
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
    Ok(put(
        format!(
            "/api/{collection}/{}/{}",
            encode(vhost),
            encode(&policy.name)
        ),
        body,
        format!("{what} '{}' declared", policy.name),
    ))
}

fn queue_type(kind: QueueType) -> &'static str {
    match kind {
        QueueType::Classic => "classic",
        QueueType::Quorum => "quorum",
        QueueType::Stream => "stream",
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
