//! `/api/connections`, `/api/channels` and `/api/consumers`, from the broker's registry.
//! `/api/consumers` lists stream subscriptions too, as RabbitMQ does.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use serde_json::{json, Value as Json_};
use warren_core::registry::{ChannelDetails, ConnectionEntry, ConsumerDetails};
use warren_core::stats::CHANNEL_STATS;

use super::{message_stats, rate, streams};
use crate::auth::AuthUser;
use crate::convert::{self, table_to_json};
use crate::error::{ApiError, ApiResult};
use crate::query::{self, Params};
use crate::ApiState;

pub(crate) fn connection_json(state: &ApiState, entry: &ConnectionEntry) -> Json_ {
    let d = &entry.details;
    let [recv_oct, recv_cnt, send_oct, send_cnt] = entry.stats.snapshot();
    let [recv_rate, _, send_rate, _] = state.rates.connection(d.id);
    let mut body = json!({
        "recv_oct": recv_oct, "recv_oct_details": rate(recv_rate), "recv_cnt": recv_cnt,
        "send_oct": send_oct, "send_oct_details": rate(send_rate), "send_cnt": send_cnt,
        "send_pend": 0,
        "name": entry.name(),
        "node": state.node,
        "type": "network",
        "state": "running",
        "protocol": d.protocol,
        "auth_mechanism": d.auth_mechanism,
        "user": d.user,
        "user_who_performed_action": d.user,
        "vhost": &*d.vhost,
        "host": d.local.ip().to_string(),
        "port": d.local.port(),
        "peer_host": d.peer.ip().to_string(),
        "peer_port": d.peer.port(),
        "ssl": d.tls.is_some(),
        "channels": entry.channel_count(),
        "channel_max": d.channel_max,
        "frame_max": d.frame_max,
        "timeout": d.heartbeat,
        "connected_at": d.connected_at_ms,
        "client_properties": convert::client_properties_to_json(&d.client_properties),
    });
    if let Some(tls) = &d.tls {
        // RabbitMQ's `ssl_info` and `cert_info` items; absent for a plain connection.
        body["ssl_protocol"] = json!(tls.protocol);
        body["ssl_cipher"] = json!(tls.cipher);
        body["peer_cert_subject"] = json!(tls.peer_cert_subject);
        body["peer_cert_issuer"] = json!(tls.peer_cert_issuer);
        body["peer_cert_validity"] = json!(tls.peer_cert_validity);
    }
    body
}

fn channel_json(
    state: &ApiState,
    entry: &ConnectionEntry,
    channel: &ChannelDetails,
    consumers: usize,
) -> Json_ {
    let d = &entry.details;
    let counts = channel.stats.snapshot();
    let rates = state.rates.channel((d.id, channel.number));
    let mut stats = message_stats(&CHANNEL_STATS, &counts, &rates);
    // RabbitMQ's sum of deliver, deliver_no_ack, get and get_no_ack (indices 4 to 7).
    let deliver_get: u64 = counts.iter().skip(4).take(4).sum();
    let deliver_get_rate: f64 = rates.iter().skip(4).take(4).sum();
    stats.insert("deliver_get".into(), json!(deliver_get));
    stats.insert("deliver_get_details".into(), rate(deliver_get_rate));
    let [unacked, unconfirmed, uncommitted, acks_uncommitted] = channel.stats.gauges();
    json!({
        "message_stats": stats,
        "messages_unacknowledged": unacked,
        "messages_unconfirmed": unconfirmed,
        "messages_uncommitted": uncommitted,
        "acks_uncommitted": acks_uncommitted,
        "name": format!("{} ({})", entry.name(), channel.number),
        "number": channel.number,
        "node": state.node,
        "user": d.user,
        "user_who_performed_action": d.user,
        "vhost": &*d.vhost,
        "state": "running",
        "prefetch_count": channel.prefetch_count,
        "global_prefetch_count": channel.global_prefetch_count,
        "confirm": channel.confirm,
        "transactional": channel.transactional,
        "consumer_count": consumers,
        "connection_details": {
            "name": entry.name(),
            "peer_host": d.peer.ip().to_string(),
            "peer_port": d.peer.port(),
        },
    })
}

fn consumer_json(state: &ApiState, entry: &ConnectionEntry, consumer: &ConsumerDetails) -> Json_ {
    let d = &entry.details;
    json!({
        "consumer_tag": consumer.consumer_tag,
        "queue": {"name": consumer.queue, "vhost": &*d.vhost},
        "ack_required": consumer.ack_required,
        "exclusive": consumer.exclusive,
        "prefetch_count": consumer.prefetch_count,
        "arguments": table_to_json(&consumer.arguments),
        "active": true,
        "activity_status": "up",
        "channel_details": {
            "name": format!("{} ({})", entry.name(), consumer.channel),
            "number": consumer.channel,
            "connection_name": entry.name(),
            "peer_host": d.peer.ip().to_string(),
            "peer_port": d.peer.port(),
            "user": d.user,
            "node": state.node,
        },
    })
}

/// The connections a user sees (RabbitMQ's `filter_conn_ch_list`): those of one vhost when
/// `vhost` names one (404 when it does not exist, 401 without permissions in it), and only
/// the user's own unless they are a monitor.
pub(crate) fn connections_for(
    state: &ApiState,
    user: &AuthUser,
    vhost: Option<&str>,
) -> ApiResult<Vec<Arc<ConnectionEntry>>> {
    if let Some(name) = vhost {
        super::vhost(state, user, name)?;
    }
    let mut connections = state.broker.registry().connections();
    connections.retain(|c| {
        vhost.is_none_or(|v| *c.details.vhost == *v) && (user.is_monitor() || owns(user, c))
    });
    Ok(connections)
}

fn owns(user: &AuthUser, connection: &ConnectionEntry) -> bool {
    connection.details.user == user.name
}

fn connections_json(
    state: &ApiState,
    user: &AuthUser,
    vhost: Option<&str>,
) -> ApiResult<Vec<Json_>> {
    let connections = connections_for(state, user, vhost)?;
    Ok(connections
        .iter()
        .map(|c| connection_json(state, c))
        .collect())
}

fn channels_json(state: &ApiState, user: &AuthUser, vhost: Option<&str>) -> ApiResult<Vec<Json_>> {
    let connections = connections_for(state, user, vhost)?;
    Ok(connections
        .iter()
        .flat_map(|c| channels_of_entry(state, c))
        .collect())
}

pub async fn list(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = connections_json(&state, &user, None)?;
    Ok(Json(query::list(items, &params, &["name"])?))
}

/// `/api/vhosts/{vhost}/connections`.
pub async fn list_in(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = connections_json(&state, &user, Some(&vhost))?;
    Ok(Json(query::list(items, &params, &["name"])?))
}

/// `/api/vhosts/{vhost}/channels`.
pub async fn channels_in(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = channels_json(&state, &user, Some(&vhost))?;
    Ok(Json(query::list(items, &params, &["name"])?))
}

/// One connection, for its owner, and for monitors (GET) or administrators (DELETE), as
/// RabbitMQ's `is_authorized_user`.
pub(crate) fn find(
    state: &ApiState,
    user: &AuthUser,
    name: &str,
    deleting: bool,
) -> ApiResult<Arc<ConnectionEntry>> {
    let entry = state
        .broker
        .registry()
        .connection_by_name(name)
        .ok_or_else(ApiError::not_found)?;
    let by_tag = if deleting {
        user.is_admin()
    } else {
        user.is_monitor()
    };
    if by_tag || owns(user, &entry) {
        Ok(entry)
    } else {
        Err(ApiError::not_authorised(
            "User not authorised to access object",
        ))
    }
}

pub async fn one(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let entry = find(&state, &user, &name, false)?;
    Ok(Json(query::project_one(
        connection_json(&state, &entry),
        &params,
    )))
}

/// DELETE: closes the connection with 320 CONNECTION_FORCED; the `X-Reason` header gives
/// the text, as in RabbitMQ.
pub async fn close(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    let entry = find(&state, &user, &name, true)?;
    let reason = close_reason(&headers);
    tracing::info!(connection = %name, %reason, "closing connection on management API request");
    entry.request_close(reason);
    Ok(StatusCode::NO_CONTENT)
}

fn channels_of_entry(state: &ApiState, entry: &ConnectionEntry) -> Vec<Json_> {
    let consumers = entry.consumers();
    entry
        .channels()
        .iter()
        .map(|channel| {
            let count = consumers
                .iter()
                .filter(|c| c.channel == channel.number)
                .count();
            channel_json(state, entry, channel, count)
        })
        .collect()
}

pub async fn channels_of(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let entry = find(&state, &user, &name, false)?;
    let items = channels_of_entry(&state, &entry);
    Ok(Json(query::list(items, &params, &["name"])?))
}

pub async fn channels(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = channels_json(&state, &user, None)?;
    Ok(Json(query::list(items, &params, &["name"])?))
}

/// `GET /api/channels/{channel}`: one channel by its name (`<connection> (<number>)`).
pub async fn channel(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    channels_json(&state, &user, None)?
        .into_iter()
        .find(|c| c["name"] == name.as_str())
        .map(|c| Json(query::project_one(c, &params)))
        .ok_or_else(ApiError::not_found)
}

/// The connections of user `name`, for an administrator or monitor (`deleting`: an
/// administrator) or that user.
fn of_user_checked(
    state: &ApiState,
    user: &AuthUser,
    name: &str,
    deleting: bool,
) -> ApiResult<Vec<Arc<ConnectionEntry>>> {
    let by_tag = if deleting {
        user.is_admin()
    } else {
        user.is_monitor()
    };
    if !by_tag && user.name != name {
        return Err(ApiError::not_authorised(
            "User not authorised to access object",
        ));
    }
    let mut connections = state.broker.registry().connections();
    connections.retain(|c| c.details.user == name);
    Ok(connections)
}

/// `GET /api/connections/username/{username}`.
pub async fn of_user(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = of_user_checked(&state, &user, &name, false)?
        .iter()
        .map(|c| connection_json(&state, c))
        .collect();
    Ok(Json(query::list(items, &params, &["name"])?))
}

/// `DELETE /api/connections/username/{username}`: closes each of the user's connections.
pub async fn close_of_user(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    let reason = close_reason(&headers);
    for entry in of_user_checked(&state, &user, &name, true)? {
        tracing::info!(connection = %entry.name(), %reason, "closing connection on management API request");
        entry.request_close(reason.clone());
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `X-Reason`, else RabbitMQ's text; the protocol side writes the reply code's name before
/// it (`CONNECTION_FORCED - ...`).
pub(crate) fn close_reason(headers: &HeaderMap) -> String {
    headers
        .get("x-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("Closed via management plugin")
        .to_string()
}

/// A connection's consumers as `/api/consumers` lists them, of one queue when `queue` names
/// one: its AMQP consumers, then its stream subscriptions.
fn consumers_of_connection(
    state: &ApiState,
    entry: &ConnectionEntry,
    queue: Option<&str>,
) -> Vec<Json_> {
    let of_queue = |name: &str| queue.is_none_or(|q| name == q);
    let amqp = entry
        .consumers()
        .iter()
        .filter(|c| of_queue(&c.queue))
        .map(|c| consumer_json(state, entry, c))
        .collect::<Vec<_>>();
    let subscriptions = entry
        .stream_consumers()
        .iter()
        .filter(|c| of_queue(&c.stream))
        .map(|c| streams::subscription_as_consumer_json(state, entry, c))
        .collect::<Vec<_>>();
    [amqp, subscriptions].concat()
}

/// The consumers of one queue (a single queue's `consumer_details`).
pub(crate) fn consumers_of_queue(state: &ApiState, vhost: &str, queue: &str) -> Vec<Json_> {
    let connections = state.broker.registry().connections();
    connections
        .iter()
        .filter(|c| &*c.details.vhost == vhost)
        .flat_map(|c| consumers_of_connection(state, c, Some(queue)))
        .collect()
}

/// The consumers a user sees: of one vhost or all, and only those on the user's own
/// connections unless they are a monitor (RabbitMQ's `filter_user`).
fn consumers_where(state: &ApiState, user: &AuthUser, vhost: Option<&str>) -> Vec<Json_> {
    let connections = state.broker.registry().connections();
    connections
        .iter()
        .filter(|c| vhost.is_none_or(|v| &*c.details.vhost == v))
        .filter(|c| user.is_monitor() || owns(user, c))
        .flat_map(|c| consumers_of_connection(state, c, None))
        .collect()
}

pub async fn consumers(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    Ok(Json(query::list(
        consumers_where(&state, &user, None),
        &params,
        &["consumer_tag"],
    )?))
}

pub async fn consumers_in(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(vhost_name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    // As the vhost's other lists (RabbitMQ's `is_authorized_vhost`): 404 for a missing
    // vhost, 401 for one the user has no permissions in (administrators see all).
    super::vhost(&state, &user, &vhost_name)?;
    let items = consumers_where(&state, &user, Some(&vhost_name));
    Ok(Json(query::list(items, &params, &["consumer_tag"])?))
}
