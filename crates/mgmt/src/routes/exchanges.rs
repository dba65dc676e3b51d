//! `/api/exchanges`: list, declare, delete and publish.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use base64::Engine;
use bytes::BytesMut;
use serde_json::{json, Value as Json_};
use warren_core::access::{check_user_id, Perm, ResourceKind};
use warren_core::exchange::ExchangeDef;
use warren_core::message::Message;
use warren_core::queue::QueueCmd;
use warren_core::registry::GlobalCounters;
use warren_core::routing::snapshot::MessageFields;
use warren_core::stats::EXCHANGE_STATS;
use warren_core::vhost::{ExchangeDeclare, VHost};

use super::permit::{Permit, Via};
use super::{body_object, listed_vhosts, message_stats, vhost};
use crate::auth::AuthUser;
use crate::convert::{self, flag, table_to_json};
use crate::error::{ApiError, ApiResult};
use crate::query::{self, Params};
use crate::ApiState;

/// The management API's name of the default exchange in paths.
pub(crate) const DEFAULT_EXCHANGE: &str = "amq.default";

/// An exchange's `message_stats`: what was published to it and routed on.
fn exchange_stats(state: &ApiState, vhost: &VHost, name: &str) -> Json_ {
    let counts = vhost.exchange_stats().get(name);
    let rates = state.rates.exchange(vhost.name(), name);
    Json_::Object(message_stats(&EXCHANGE_STATS, &counts, &rates))
}

fn exchange_json(state: &ApiState, vhost: &VHost, def: &ExchangeDef) -> Json_ {
    json!({
        "message_stats": exchange_stats(state, vhost, &def.name),
        "name": def.name.as_ref(),
        "vhost": def.vhost.as_ref(),
        "type": def.kind.as_str(),
        "durable": def.durable,
        "auto_delete": def.auto_delete,
        "internal": def.internal,
        "arguments": table_to_json(&def.arguments),
        "user_who_performed_action": "rmq-internal",
    })
}

fn default_exchange_json(state: &ApiState, vhost: &VHost) -> Json_ {
    json!({
        "message_stats": exchange_stats(state, vhost, ""),
        "name": "", "vhost": vhost.name().as_ref(), "type": "direct", "durable": true, "auto_delete": false,
        "internal": false, "arguments": {}, "user_who_performed_action": "rmq-internal",
    })
}

fn exchanges_of(state: &ApiState, vhosts: &[Arc<VHost>]) -> Vec<Json_> {
    let mut items = Vec::new();
    for vhost in vhosts {
        items.push(default_exchange_json(state, vhost));
        items.extend(
            vhost
                .exchanges()
                .iter()
                .map(|def| exchange_json(state, vhost, def)),
        );
    }
    items
}

pub async fn list(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    Ok(Json(query::list(
        exchanges_of(&state, &listed_vhosts(&state, &user)),
        &params,
        &["vhost", "name"],
    )?))
}

pub async fn list_in(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(vhost_name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = exchanges_of(&state, &[vhost(&state, &user, &vhost_name)?]);
    Ok(Json(query::list(items, &params, &["vhost", "name"])?))
}

/// The exchange's name as core knows it (`amq.default` is the default exchange, "").
pub(crate) fn core_name(name: &str) -> &str {
    if name == DEFAULT_EXCHANGE {
        ""
    } else {
        name
    }
}

pub(crate) fn exists(vhost: &VHost, name: &str) -> bool {
    let name = core_name(name);
    name.is_empty() || vhost.snapshot().exchange(name).is_some()
}

pub async fn one(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    let name = core_name(&name);
    let item = if name.is_empty() {
        default_exchange_json(&state, &vhost)
    } else {
        let snapshot = vhost.snapshot();
        let def = snapshot.exchange(name).ok_or_else(ApiError::not_found)?;
        exchange_json(&state, &vhost, def)
    };
    Ok(Json(query::project_one(item, &params)))
}

pub async fn declare(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    let body = body_object(&body)?;
    let kind = convert::text(&body, "type");
    if kind.is_empty() {
        return Err(ApiError::bad_request("key_missing: type"));
    }
    let arguments = convert::json_to_table(body.get("arguments"))?;
    let permit = Permit::new(&state, &user, &vhost, Via::DirectRequest);
    permit.check(Perm::Configure, ResourceKind::Exchange, &name)?;
    let ae = arguments.get("alternate-exchange");
    if let Some(ae) = ae.and_then(warren_core::value::Value::as_str) {
        permit.check(Perm::Write, ResourceKind::Exchange, ae)?;
        permit.check(Perm::Read, ResourceKind::Exchange, &name)?;
    }
    let existed = exists(&vhost, &name);
    vhost
        .declare_exchange(ExchangeDeclare {
            name,
            kind: kind.to_string(),
            passive: false,
            durable: flag(&body, "durable", true)?,
            auto_delete: flag(&body, "auto_delete", false)?,
            internal: flag(&body, "internal", false)?,
            arguments,
        })
        .await
        .map_err(|error| permit.refusal(error))?;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    })
}

pub async fn delete(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<StatusCode> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    if !exists(&vhost, &name) {
        return Err(ApiError::not_found());
    }
    let name = core_name(&name);
    let permit = Permit::new(&state, &user, &vhost, Via::DirectRequest);
    permit.check(Perm::Configure, ResourceKind::Exchange, name)?;
    let if_unused = params.get("if-unused").is_some_and(|v| v == "true");
    vhost
        .delete_exchange(name, if_unused)
        .await
        .map_err(|error| permit.refusal(error))?;
    Ok(StatusCode::NO_CONTENT)
}

/// POST `/publish`: `{"routing_key", "payload", "payload_encoding": "string"|"base64",
/// "properties"}`; answers `{"routed": bool}`.
pub async fn publish(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<Json_>> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    if !exists(&vhost, &name) {
        return Err(ApiError::not_found());
    }
    let body = body_object(&body)?;
    let payload = convert::text(&body, "payload");
    let payload = match convert::text(&body, "payload_encoding") {
        "" | "string" => Bytes::from(payload.to_string()),
        "base64" => Bytes::from(
            base64::engine::general_purpose::STANDARD
                .decode(payload)
                .map_err(|e| ApiError::bad_request(format!("payload is not base64: {e}")))?,
        ),
        other => {
            return Err(ApiError::bad_request(format!(
                "unknown payload_encoding {other}"
            )))
        }
    };
    let properties = convert::json_to_properties(body.get("properties"))?;
    let mut encoded = BytesMut::new();
    properties.encode(&mut encoded);
    let routing_key = convert::routing_key(&body)?;
    let exchange = core_name(&name);
    // In basic.publish's order: write on the exchange, topic permissions, then user_id.
    let permit = Permit::new(&state, &user, &vhost, Via::Publish);
    permit.check(Perm::Write, ResourceKind::Exchange, exchange)?;
    permit.check_topic(Perm::Write, exchange, routing_key)?;
    if let Some(user_id) = &properties.user_id {
        check_user_id(user_id.as_str(), &user.name, &user.tags)
            .map_err(|error| permit.refusal(error))?;
    }
    let routed = publish_message(
        state.broker.registry().counters(),
        &vhost,
        exchange,
        routing_key,
        encoded.freeze(),
        payload,
    )
    .await?;
    Ok(Json(json!({ "routed": routed })))
}

/// Routes one message and hands it to every queue it reaches; true when it reached one.
pub(crate) async fn publish_message(
    counters: &GlobalCounters,
    vhost: &VHost,
    exchange: &str,
    routing_key: &str,
    properties: Bytes,
    body: Bytes,
) -> ApiResult<bool> {
    let decoded = warren_proto::amqp091::BasicProperties::decode(&properties)
        .map_err(|e| ApiError::bad_request(format!("invalid properties: {e}")))?;
    let mut message = Message::new(
        Bytes::from(exchange.to_string()),
        Bytes::from(routing_key.to_string()),
        properties,
        body,
    );
    message.persistent = decoded.delivery_mode == Some(2);
    message.priority = decoded.priority.unwrap_or(0);
    message.expiration_ms = decoded
        .expiration
        .as_ref()
        .and_then(|e| e.as_str().parse().ok());
    let mut fields = || MessageFields {
        headers: decoded.headers.as_ref().map(convert::field_table_to_core),
        message_id: decoded.message_id.as_ref().map(|v| v.to_string()),
        correlation_id: decoded.correlation_id.as_ref().map(|v| v.to_string()),
        timestamp: decoded.timestamp,
    };
    let mut targets = Vec::new();
    vhost
        .snapshot()
        .route(exchange, &[routing_key], &mut fields, &mut targets)?;
    count_publish(counters, !targets.is_empty());
    vhost
        .exchange_stats()
        .add(exchange.as_bytes(), 1, targets.len() as u64);
    let message = Arc::new(message);
    for queue in &targets {
        queue
            .send(QueueCmd::Publish {
                messages: vec![message.clone()],
                confirm: None,
                tags: Vec::new(),
                credit: None,
            })
            .await?;
    }
    Ok(!targets.is_empty())
}

/// Counts an API publish in the broker's totals, as a publish over AMQP would be.
fn count_publish(counters: &GlobalCounters, routed: bool) {
    GlobalCounters::add(&counters.received, 1);
    if routed {
        GlobalCounters::add(&counters.routed, 1);
    } else {
        GlobalCounters::add(&counters.unroutable_dropped, 1);
    }
}
