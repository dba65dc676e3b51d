//! `/api/bindings` and the binding lists of queues and exchanges.
//!
//! A binding is named in paths by its properties key, as RabbitMQ does: the routing key
//! (`~` when empty), followed by `~` and a hash of the arguments when there are any.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Value as Json_};
use warren_core::access::{Perm, ResourceKind};
use warren_core::binding::{Binding, Destination};
use warren_core::value::Table;
use warren_core::vhost::VHost;

use super::exchanges::{core_name, exists};
use super::permit::{Permit, Via};
use super::{body_object, listed_vhosts, vhost, API_CONNECTION};
use crate::auth::AuthUser;
use crate::convert::{self, table_to_json};
use crate::error::{ApiError, ApiResult};
use crate::query::{self, Params};
use crate::ApiState;

/// Characters a properties key keeps unescaped (RabbitMQ escapes with `url_encode`).
const KEY_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

pub(crate) fn properties_key(routing_key: &str, arguments: &Table) -> String {
    let key = if routing_key.is_empty() {
        "~".to_string()
    } else {
        utf8_percent_encode(routing_key, KEY_SET).to_string()
    };
    if arguments.is_empty() {
        return key;
    }
    // FNV-1a over the arguments' canonical (sorted) JSON: stable across restarts.
    let text = table_to_json(arguments).to_string();
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{key}~{hash:016x}")
}

fn binding_json(vhost: &str, binding: &Binding) -> Json_ {
    let (kind, destination) = match &binding.destination {
        Destination::Queue(name) => ("queue", name),
        Destination::Exchange(name) => ("exchange", name),
    };
    json!({
        "source": binding.source.as_ref(),
        "vhost": vhost,
        "destination": destination.as_ref(),
        "destination_type": kind,
        "routing_key": binding.routing_key.as_ref(),
        "arguments": table_to_json(&binding.arguments),
        "properties_key": properties_key(&binding.routing_key, &binding.arguments),
    })
}

/// Every binding of the vhost, with the default exchange's implicit one per queue first.
fn all_of(vhost: &VHost) -> Vec<Json_> {
    let name = vhost.name();
    let mut items: Vec<Json_> = vhost
        .queue_handles()
        .iter()
        .filter(|q| !q.name().starts_with("amq.rabbitmq.reply-to."))
        .map(|q| {
            binding_json(
                name,
                &Binding {
                    source: Arc::from(""),
                    destination: Destination::Queue(q.name().clone()),
                    routing_key: q.name().clone(),
                    arguments: Table::new(),
                },
            )
        })
        .collect();
    items.extend(vhost.bindings().iter().map(|b| binding_json(name, b)));
    items
}

fn answer(items: Vec<Json_>, params: &Params) -> ApiResult<Json<Json_>> {
    Ok(Json(query::list(items, params, &[])?))
}

pub async fn list(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = listed_vhosts(&state, &user)
        .iter()
        .flat_map(|vhost| all_of(vhost))
        .collect();
    answer(items, &params)
}

pub async fn list_in(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(vhost_name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    answer(all_of(&vhost), &params)
}

fn matching(vhost: &VHost, keep: impl Fn(&Json_) -> bool) -> Vec<Json_> {
    all_of(vhost).into_iter().filter(|b| keep(b)).collect()
}

pub async fn of_queue(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, queue)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    super::queues::find(&vhost, &queue)?;
    let items = matching(&vhost, |b| {
        b["destination_type"] == "queue" && b["destination"] == queue.as_str()
    });
    answer(items, &params)
}

pub async fn of_source(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, exchange)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    if !exists(&vhost, &exchange) {
        return Err(ApiError::not_found());
    }
    let source = core_name(&exchange).to_string();
    answer(
        matching(&vhost, |b| b["source"] == source.as_str()),
        &params,
    )
}

pub async fn of_exchange_destination(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, exchange)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    if !exists(&vhost, &exchange) {
        return Err(ApiError::not_found());
    }
    let items = matching(&vhost, |b| {
        b["destination_type"] == "exchange" && b["destination"] == exchange.as_str()
    });
    answer(items, &params)
}

/// `q` or `e` in a binding path.
fn destination(kind: &str, name: &str) -> ApiResult<Destination> {
    match kind {
        "q" => Ok(Destination::Queue(Arc::from(name))),
        "e" => Ok(Destination::Exchange(Arc::from(name))),
        _ => Err(ApiError::not_found()),
    }
}

fn check_ends(vhost: &VHost, source: &str, destination: &Destination) -> ApiResult<()> {
    let found = exists(vhost, source)
        && match destination {
            Destination::Queue(name) => vhost.snapshot().queue(name).is_some(),
            Destination::Exchange(name) => exists(vhost, name),
        };
    if found {
        Ok(())
    } else {
        Err(ApiError::not_found())
    }
}

fn between_items(vhost: &VHost, source: &str, destination: &Destination) -> Vec<Json_> {
    let (kind, name) = match destination {
        Destination::Queue(n) => ("queue", n),
        Destination::Exchange(n) => ("exchange", n),
    };
    let source = core_name(source);
    matching(vhost, |b| {
        b["source"] == source && b["destination_type"] == kind && b["destination"] == name.as_ref()
    })
}

pub async fn between(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, source, kind, dest)): Path<(String, String, String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    let destination = destination(&kind, &dest)?;
    check_ends(&vhost, &source, &destination)?;
    answer(between_items(&vhost, &source, &destination), &params)
}

/// The permissions queue.bind and exchange.bind (and their unbinds) need: write on the
/// destination, read on the source exchange, and topic read on the binding key when the
/// source is a topic exchange.
fn check_binding(
    permit: &Permit,
    source: &str,
    destination: &Destination,
    routing_key: &str,
) -> ApiResult<()> {
    let (kind, name) = match destination {
        Destination::Queue(name) => (ResourceKind::Queue, name),
        Destination::Exchange(name) => (ResourceKind::Exchange, name),
    };
    permit.check(Perm::Write, kind, name)?;
    permit.check(Perm::Read, ResourceKind::Exchange, source)?;
    permit.check_topic(Perm::Read, source, routing_key)
}

/// POST: creates a binding; answers 201 with its location, as RabbitMQ. Permissions are
/// checked before the ends are looked up, as in RabbitMQ's `binding_action_with_checks`.
pub async fn create(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, source, kind, dest)): Path<(String, String, String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    let destination = destination(&kind, &dest)?;
    let body = body_object(&body)?;
    let routing_key = convert::routing_key(&body)?.to_string();
    let arguments = convert::json_to_table(body.get("arguments"))?;
    let permit = Permit::new(&state, &user, &vhost, Via::DirectRequest);
    check_binding(&permit, core_name(&source), &destination, &routing_key)?;
    check_ends(&vhost, &source, &destination)?;
    if core_name(&source).is_empty() {
        return Err(ApiError::bad_request("cannot bind to the default exchange"));
    }
    let key = properties_key(&routing_key, &arguments);
    vhost
        .bind(
            &source,
            destination,
            &routing_key,
            arguments,
            API_CONNECTION,
        )
        .await
        .map_err(|error| permit.refusal(error))?;
    let location = utf8_percent_encode(&key, NON_ALPHANUMERIC).to_string();
    Ok((StatusCode::CREATED, [(header::LOCATION, location)]).into_response())
}

fn find_one(
    vhost: &VHost,
    source: &str,
    destination: &Destination,
    props: &str,
) -> ApiResult<Json_> {
    check_ends(vhost, source, destination)?;
    between_items(vhost, source, destination)
        .into_iter()
        .find(|b| b["properties_key"] == props)
        .ok_or_else(ApiError::not_found)
}

pub async fn one(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, source, kind, dest, props)): Path<(String, String, String, String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    let destination = destination(&kind, &dest)?;
    let item = find_one(&vhost, &source, &destination, &props)?;
    Ok(Json(query::project_one(item, &params)))
}

pub async fn delete(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, source, kind, dest, props)): Path<(String, String, String, String, String)>,
) -> ApiResult<StatusCode> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    let destination = destination(&kind, &dest)?;
    check_ends(&vhost, &source, &destination)?;
    let source = core_name(&source);
    let binding = vhost
        .bindings()
        .into_iter()
        .find(|b| {
            b.source.as_ref() == source
                && b.destination == destination
                && properties_key(&b.routing_key, &b.arguments) == props
        })
        .ok_or_else(ApiError::not_found)?;
    let permit = Permit::new(&state, &user, &vhost, Via::DirectRequest);
    check_binding(&permit, source, &binding.destination, &binding.routing_key)?;
    vhost
        .unbind(
            source,
            binding.destination,
            &binding.routing_key,
            binding.arguments,
            API_CONNECTION,
        )
        .await
        .map_err(|error| permit.refusal(error))?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use warren_core::value::Value;

    use super::*;

    #[test]
    fn properties_keys_are_rabbitmq_shaped_and_stable() {
        assert_eq!(properties_key("", &Table::new()), "~");
        assert_eq!(properties_key("a.b-c_d", &Table::new()), "a.b-c_d");
        assert_eq!(properties_key("a b/#", &Table::new()), "a%20b%2F%23");
        let args = Table::from([("x-match".to_string(), Value::Str("all".into()))]);
        let key = properties_key("k", &args);
        assert!(key.starts_with("k~") && key.len() == 2 + 16, "{key}");
        assert_eq!(key, properties_key("k", &args.clone()));
        assert_ne!(key, properties_key("k", &Table::new()));
    }
}
