//! `/api/stream/...`: the stream management plugin's routes (RabbitMQ's
//! `rabbitmq_stream_management`): stream-protocol connections, and their publishers and
//! consumers, from the broker's registry.
//!
//! Permissions are the plugin's: the connection routes are those of `/api/connections`
//! (a user sees their own connections, monitors see all; closing takes an administrator or
//! the owner), and the publisher and consumer lists show a user only those of their own
//! connections unless they are a monitor (its `filter_user`).
//!
//! The nine list routes are one handler ([`list`]): what they list ([`Listed`]) times the
//! path segments they have ([`Scope`]). A stream's tracking is in `stream_tracking.rs`.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, MethodRouter};
use axum::{Extension, Json};
use serde::Deserialize;
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
        "properties": properties_json(consumer),
        "node": state.node,
    })
}

/// Subscribe's properties, as a JSON object of strings.
fn properties_json(consumer: &StreamConsumerDetails) -> Json_ {
    let properties: serde_json::Map<String, Json_> = consumer
        .properties
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    Json_::Object(properties)
}

/// A subscription as `/api/consumers` and a queue's `consumer_details` show it. RabbitMQ's
/// stream plugin reports every subscription to core metrics as a consumer (its
/// `rabbit_stream_metrics:consumer_created`): tag `stream.subid-<id>`, no acks, no
/// prefetch, Subscribe's properties as its arguments; its "channel" is the connection itself,
/// which the management plugin shows as a channel with an empty name and number 0.
pub(crate) fn subscription_as_consumer_json(
    state: &ApiState,
    entry: &ConnectionEntry,
    consumer: &StreamConsumerDetails,
) -> Json_ {
    let d = &entry.details;
    json!({
        "consumer_tag": format!("stream.subid-{}", consumer.subscription_id),
        "queue": {"name": &*consumer.stream, "vhost": &*d.vhost},
        "ack_required": false,
        "exclusive": false,
        "prefetch_count": 0,
        "arguments": properties_json(consumer),
        "active": true,
        "activity_status": "up",
        "channel_details": {
            "name": "",
            "number": 0,
            "connection_name": entry.name(),
            "peer_host": d.peer.ip().to_string(),
            "peer_port": d.peer.port(),
            "user": d.user,
            "node": state.node,
        },
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

/// What one of the plugin's list routes lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listed {
    Connections,
    Publishers,
    Consumers,
}

impl Listed {
    /// The field a list is sorted by when the request names none.
    fn sort_key(self) -> &'static str {
        match self {
            Listed::Connections => "name",
            Listed::Publishers => "publisher_id",
            Listed::Consumers => "subscription_id",
        }
    }
}

/// The path segments a list route may have; each route has some of them.
#[derive(Debug, Deserialize)]
pub(crate) struct Scope {
    vhost: Option<String>,
    /// A connection's name: the list is that connection's.
    name: Option<String>,
    /// A stream's name: the list is of that stream (404 when it does not exist).
    stream: Option<String>,
}

/// Every list route of the plugin, as one handler: `GET /api/stream/connections`,
/// `/api/stream/publishers` and `/api/stream/consumers`, each also `/{vhost}`;
/// `/api/stream/publishers/{vhost}/{stream}`; and one connection's
/// `/api/stream/connections/{vhost}/{name}/publishers` and `.../consumers`.
pub(crate) fn list(listed: Listed) -> MethodRouter<Arc<ApiState>> {
    get(
        move |State(state): State<Arc<ApiState>>,
              Extension(user): Extension<AuthUser>,
              Path(scope): Path<Scope>,
              Query(params): Query<Params>| async move {
            let items = list_items(&state, &user, &scope, listed)?;
            ApiResult::Ok(Json(query::list(items, &params, &[listed.sort_key()])?))
        },
    )
}

fn list_items(
    state: &ApiState,
    user: &AuthUser,
    scope: &Scope,
    listed: Listed,
) -> ApiResult<Vec<Json_>> {
    let vhost = scope.vhost.as_deref();
    let stream = scope.stream.as_deref();
    if let (Some(vhost), Some(stream)) = (vhost, stream) {
        let exists = state
            .broker
            .vhost(vhost)
            .is_some_and(|v| v.snapshot().queue(stream).is_some());
        if !exists {
            return Err(ApiError::not_found());
        }
    }
    let connections = match (&scope.name, listed) {
        (Some(name), _) => {
            let vhost = vhost.unwrap_or_default();
            vec![stream_connection(state, user, vhost, name, false)?]
        }
        (None, Listed::Connections) => {
            let mut connections = connections_for(state, user, vhost)?;
            connections.retain(|c| is_stream(c));
            connections
        }
        (None, Listed::Publishers | Listed::Consumers) => visible(state, user, vhost)?,
    };
    let of_stream = |name: &str| stream.is_none_or(|s| name == s);
    let mut items = Vec::new();
    for entry in &connections {
        match listed {
            Listed::Connections => items.push(connection_json(state, entry)),
            Listed::Publishers => {
                let publishers = entry.stream_publishers();
                let rows = publishers.iter().filter(|p| of_stream(&p.stream));
                items.extend(rows.map(|p| publisher_json(state, entry, p)));
            }
            Listed::Consumers => {
                let subscriptions = entry.stream_consumers();
                let rows = subscriptions.iter().filter(|c| of_stream(&c.stream));
                items.extend(rows.map(|c| consumer_json(state, entry, c)));
            }
        }
    }
    Ok(items)
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
