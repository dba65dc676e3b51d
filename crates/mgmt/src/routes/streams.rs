//! `/api/stream/...`: the stream management plugin's routes (RabbitMQ's
//! `rabbitmq_stream_management`): stream-protocol connections, and their publishers and
//! consumers, from the broker's registry.
//!
//! Permissions are the plugin's: the connection routes are those of `/api/connections`
//! (a user sees their own connections, monitors see all; closing takes an administrator or
//! the owner), and the publisher and consumer lists show a user only those of their own
//! connections unless they are a monitor (its `filter_user`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use serde_json::{json, Value as Json_};
use warren_core::registry::{ConnectionEntry, StreamConsumerDetails, StreamPublisherDetails};

use super::connections::{close_reason, connection_json, connections_for, find};
use crate::auth::AuthUser;
use crate::error::{ApiError, ApiResult};
use crate::query::{self, Params};
use crate::ApiState;

/// The protocol a stream connection reports, as RabbitMQ's stream reader does.
pub(crate) const STREAM_PROTOCOL: &str = "stream";

fn is_stream(entry: &ConnectionEntry) -> bool {
    entry.details.protocol == STREAM_PROTOCOL
}

/// `connection_details` of a publisher or consumer (RabbitMQ's `augment_connection_pid`).
fn connection_details(state: &ApiState, entry: &ConnectionEntry) -> Json_ {
    let d = &entry.details;
    json!({
        "name": entry.name(),
        "user": d.user,
        "node": state.node,
        "peer_port": d.peer.port(),
        "peer_host": d.peer.ip().to_string(),
    })
}

pub(crate) fn publisher_json(
    state: &ApiState,
    entry: &ConnectionEntry,
    publisher: &StreamPublisherDetails,
) -> Json_ {
    let [published, confirmed, errored] = publisher.counters.snapshot();
    json!({
        "connection_details": connection_details(state, entry),
        "queue": {"name": &*publisher.stream, "vhost": &*entry.details.vhost},
        "publisher_id": publisher.publisher_id,
        "reference": publisher.reference.as_deref().unwrap_or(""),
        "published": published,
        "confirmed": confirmed,
        "errored": errored,
        "node": state.node,
    })
}

pub(crate) fn consumer_json(
    state: &ApiState,
    entry: &ConnectionEntry,
    consumer: &StreamConsumerDetails,
) -> Json_ {
    let [consumed, offset] = consumer.counters.snapshot();
    let properties: serde_json::Map<String, Json_> = consumer
        .properties
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    json!({
        "connection_details": connection_details(state, entry),
        "queue": {"name": &*consumer.stream, "vhost": &*entry.details.vhost},
        "subscription_id": consumer.subscription_id,
        "credits": consumer.credits(),
        "consumed": consumed,
        "offset": offset,
        "offset_lag": offset_lag(state, entry, consumer, consumed, offset),
        "active": true,
        "activity_status": "up",
        "properties": properties,
        "node": state.node,
    })
}

/// How far the consumer is behind the stream's last committed record (RabbitMQ's
/// `offset_lag`). Before its first delivery `offset` is where it starts reading, so the lag
/// counts that record too; a stream that is gone or empty has no lag.
pub(crate) fn offset_lag(
    state: &ApiState,
    entry: &ConnectionEntry,
    consumer: &StreamConsumerDetails,
    consumed: u64,
    offset: u64,
) -> u64 {
    let Some(next_offset) = stream_next_offset(state, &entry.details.vhost, &consumer.stream)
    else {
        return 0;
    };
    if consumed == 0 {
        next_offset.saturating_sub(offset)
    } else {
        next_offset.saturating_sub(1).saturating_sub(offset)
    }
}

/// The offset the stream's next record will get; `None` when no such stream exists.
fn stream_next_offset(state: &ApiState, vhost: &str, stream: &str) -> Option<u64> {
    let vhost = state.broker.vhost(vhost)?;
    let snapshot = vhost.snapshot();
    let queue = snapshot.queue(stream)?;
    Some(queue.stream()?.view().next_offset())
}

/// The stream connections a user sees, of one vhost or all.
fn stream_connections(
    state: &ApiState,
    user: &AuthUser,
    vhost: Option<&str>,
) -> ApiResult<Vec<Arc<ConnectionEntry>>> {
    let mut connections = connections_for(state, user, vhost)?;
    connections.retain(|c| is_stream(c));
    Ok(connections)
}

/// `GET /api/stream/connections`.
pub async fn connections(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = stream_connections(&state, &user, None)?
        .iter()
        .map(|c| connection_json(&state, c))
        .collect();
    Ok(Json(query::list(items, &params, &["name"])?))
}

/// `GET /api/stream/connections/{vhost}`.
pub async fn connections_in(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = stream_connections(&state, &user, Some(&vhost))?
        .iter()
        .map(|c| connection_json(&state, c))
        .collect();
    Ok(Json(query::list(items, &params, &["name"])?))
}

/// One stream connection of a vhost: another protocol's, or one of another vhost, is 404.
fn stream_connection(
    state: &ApiState,
    user: &AuthUser,
    vhost: &str,
    name: &str,
    deleting: bool,
) -> ApiResult<Arc<ConnectionEntry>> {
    let entry = find(state, user, name, deleting)?;
    if is_stream(&entry) && &*entry.details.vhost == vhost {
        Ok(entry)
    } else {
        Err(ApiError::not_found())
    }
}

/// `GET /api/stream/connections/{vhost}/{name}`.
pub async fn connection(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let entry = stream_connection(&state, &user, &vhost, &name, false)?;
    let item = connection_json(&state, &entry);
    Ok(Json(query::project_one(item, &params)))
}

/// `DELETE /api/stream/connections/{vhost}/{name}`: the connection closes with
/// CONNECTION_FORCED and the `X-Reason` text, as `/api/connections/{name}` does.
pub async fn close(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    let entry = stream_connection(&state, &user, &vhost, &name, true)?;
    let reason = close_reason(&headers);
    tracing::info!(connection = %name, %reason, "closing stream connection on management API request");
    entry.request_close(reason);
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/stream/connections/{vhost}/{name}/publishers`.
pub async fn connection_publishers(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let entry = stream_connection(&state, &user, &vhost, &name, false)?;
    let items = entry
        .stream_publishers()
        .iter()
        .map(|p| publisher_json(&state, &entry, p))
        .collect();
    Ok(Json(query::list(items, &params, &["publisher_id"])?))
}

/// `GET /api/stream/connections/{vhost}/{name}/consumers`.
pub async fn connection_consumers(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let entry = stream_connection(&state, &user, &vhost, &name, false)?;
    let items = entry
        .stream_consumers()
        .iter()
        .map(|c| consumer_json(&state, &entry, c))
        .collect();
    Ok(Json(query::list(items, &params, &["subscription_id"])?))
}

/// The stream connections whose publishers and consumers a user sees: of one vhost (404
/// when it does not exist) or all, the user's own unless they are a monitor.
fn visible(
    state: &ApiState,
    user: &AuthUser,
    vhost: Option<&str>,
) -> ApiResult<Vec<Arc<ConnectionEntry>>> {
    if let Some(name) = vhost {
        state.broker.vhost(name).ok_or_else(ApiError::not_found)?;
    }
    let mut connections = state.broker.registry().connections();
    connections.retain(|c| {
        is_stream(c)
            && vhost.is_none_or(|v| *c.details.vhost == *v)
            && (user.is_monitor() || c.details.user == user.name)
    });
    Ok(connections)
}

/// The publishers of the visible connections, of one stream when `stream` names one.
pub(crate) fn publishers_where(
    state: &ApiState,
    user: &AuthUser,
    vhost: Option<&str>,
    stream: Option<&str>,
) -> ApiResult<Vec<Json_>> {
    let mut items = Vec::new();
    for entry in visible(state, user, vhost)? {
        for publisher in entry.stream_publishers() {
            if stream.is_none_or(|s| *publisher.stream == *s) {
                items.push(publisher_json(state, &entry, &publisher));
            }
        }
    }
    Ok(items)
}

/// The consumers of the visible connections.
pub(crate) fn consumers_where(
    state: &ApiState,
    user: &AuthUser,
    vhost: Option<&str>,
) -> ApiResult<Vec<Json_>> {
    let mut items = Vec::new();
    for entry in visible(state, user, vhost)? {
        for consumer in entry.stream_consumers() {
            items.push(consumer_json(state, &entry, &consumer));
        }
    }
    Ok(items)
}

/// `GET /api/stream/publishers`.
pub async fn publishers(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = publishers_where(&state, &user, None, None)?;
    Ok(Json(query::list(items, &params, &["publisher_id"])?))
}

/// `GET /api/stream/publishers/{vhost}`.
pub async fn publishers_in(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = publishers_where(&state, &user, Some(&vhost), None)?;
    Ok(Json(query::list(items, &params, &["publisher_id"])?))
}

/// `GET /api/stream/publishers/{vhost}/{stream}`: 404 when the stream does not exist.
pub async fn publishers_of(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, stream)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let exists = state
        .broker
        .vhost(&vhost)
        .is_some_and(|v| v.snapshot().queue(&stream).is_some());
    if !exists {
        return Err(ApiError::not_found());
    }
    let items = publishers_where(&state, &user, Some(&vhost), Some(&stream))?;
    Ok(Json(query::list(items, &params, &["publisher_id"])?))
}

/// `GET /api/stream/consumers`.
pub async fn consumers(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = consumers_where(&state, &user, None)?;
    Ok(Json(query::list(items, &params, &["subscription_id"])?))
}

/// `GET /api/stream/consumers/{vhost}`.
pub async fn consumers_in(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = consumers_where(&state, &user, Some(&vhost))?;
    Ok(Json(query::list(items, &params, &["subscription_id"])?))
}
