//! The node and cluster routes beyond the overview: `/api/cluster-name`, `/api/version`,
//! `/api/extensions`, the deprecated `/api/healthchecks/node` and the health checks of
//! RabbitMQ 4.x that a single classic-queue node answers, and the HTTP contexts.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde_json::{json, Value as Json_};

use super::access::{require, ADMINISTRATOR};
use super::body_object;
use crate::auth::AuthUser;
use crate::error::{ApiError, ApiResult};
use crate::ApiState;

/// `GET /api/cluster-name`: `{"name": ...}`.
pub async fn cluster_name(State(state): State<Arc<ApiState>>) -> Json<Json_> {
    Json(json!({"name": state.broker.identity().cluster_name()}))
}

/// `PUT /api/cluster-name` (administrators): `{"name": ...}` renames the cluster everywhere
/// it is reported (overview, Prometheus, the AMQP `cluster_name` server property).
pub async fn put_cluster_name(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    require(&user, ADMINISTRATOR)?;
    let body = body_object(&body)?;
    let name = match body.get("name") {
        Some(Json_::String(name)) if !name.is_empty() => name.clone(),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "cluster name must be a non-empty string, got {other}"
            )))
        }
        None => return Err(ApiError::bad_request("[{key_missing,name}]")),
    };
    tracing::info!(%name, user = %user.name, "cluster name set through the management API");
    state.broker.identity().set_cluster_name(name);
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/version`: the reported RabbitMQ version, as a JSON string.
pub async fn version(State(state): State<Arc<ApiState>>) -> Json<Json_> {
    Json(json!(state.broker.identity().version()))
}

/// `GET /api/extensions`: the UI extensions of the enabled plugins; Warren has none.
pub async fn extensions() -> Json<Json_> {
    Json(json!([]))
}

/// `GET /api/healthchecks/node[/{node}]` (deprecated in RabbitMQ, still served by 4.x):
/// `{"status": "ok"}` while the node runs; another node's name is 404.
pub async fn healthcheck_node(
    State(state): State<Arc<ApiState>>,
    node: Option<Path<String>>,
) -> ApiResult<Json<Json_>> {
    if let Some(Path(node)) = node {
        if node != state.node {
            return Err(ApiError::not_found());
        }
    }
    Ok(Json(json!({"status": "ok"})))
}

/// The health checks whose answer on a single node with classic queues only is always ok:
/// the metadata store is initialised, no quorum queue lacks a leader and none is critical,
/// the node is in service, ready and its cluster has its target size (one).
pub async fn always_ok() -> Json<Json_> {
    Json(json!({"status": "ok"}))
}

/// `GET /api/health/checks/protocol-listener/{protocols}`: every protocol in the
/// comma-separated list has a listener (RabbitMQ's names and aliases: `amqp`, `amqp091`,
/// `amqp1.0`, `http`, `prometheus`, ...).
pub async fn protocol_listener(
    State(state): State<Arc<ApiState>>,
    Path(protocols): Path<String>,
) -> ApiResult<Json<Json_>> {
    let active: Vec<&str> = state.listeners.iter().map(|l| l.protocol).collect();
    let mut missing = Vec::new();
    for wanted in protocols
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let name = normalise_protocol(wanted);
        if !active.contains(&name.as_str()) {
            missing.push(name);
        }
    }
    if missing.is_empty() {
        return Ok(Json(json!({"status": "ok", "protocols": active})));
    }
    Err(ApiError::unavailable(format!(
        "No active listener for protocol(s) {}, listening for {}",
        missing.join(", "),
        active.join(", ")
    )))
}

/// RabbitMQ's `normalize_protocol`: the aliases tools send, as listeners name themselves.
fn normalise_protocol(protocol: &str) -> String {
    let lower = protocol.to_ascii_lowercase();
    match lower.as_str() {
        "amqp091" | "amqp0.9.1" | "amqp0-9-1" | "amqp1.0" | "amqp1" | "amqp10" => "amqp".into(),
        "amqps" | "amqp/ssl" | "amqp091/ssl" => "amqp/ssl".into(),
        "prometheus" | "http/prometheus" => "http/prometheus".into(),
        "management" | "http/management" => "http".into(),
        _ => lower,
    }
}

/// `GET /api/health/checks/certificate-expiration/{within}/{unit}`: ok unless a TLS
/// listener's certificate expires within the period (or is not valid yet, or unreadable):
/// then 503 `{"status": "failed", "reason": ..., "expired": [listener, ...]}`, as RabbitMQ.
pub async fn certificate_expiration(
    State(state): State<Arc<ApiState>>,
    Path((within, unit)): Path<(String, String)>,
) -> ApiResult<(StatusCode, Json<Json_>)> {
    let seconds = crate::certificate_expiration::period_seconds(&within, &unit)
        .map_err(ApiError::bad_request)?;
    let expired =
        crate::certificate_expiration::expiring(&state.listeners, &state.node, seconds).await;
    if expired.is_empty() {
        return Ok((StatusCode::OK, Json(json!({"status": "ok"}))));
    }
    let body = json!({"status": "failed", "reason": "Certificates expiring", "expired": expired});
    Ok((StatusCode::SERVICE_UNAVAILABLE, Json(body)))
}

/// `POST /api/vhosts/{vhost}/start/{node}`: a vhost of this node is running while the node
/// is, so starting it is done once the vhost and node exist.
pub async fn start_vhost(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost, node)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    require(&user, ADMINISTRATOR)?;
    if node != state.node || state.broker.vhost(&vhost).is_none() {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}

/// RabbitMQ's `contexts`: one per HTTP listener (the API and UI at `/`, Prometheus).
pub(crate) fn contexts(state: &ApiState) -> Json_ {
    let contexts: Vec<Json_> = state
        .listeners
        .iter()
        .filter(|listener| listener.protocol.starts_with("http"))
        .map(|listener| {
            let (protocol, addr) = (listener.protocol, listener.addr);
            let prometheus = protocol.ends_with("prometheus");
            json!({
                "ssl_opts": [],
                "node": state.node,
                "description": if prometheus { "Prometheus exporter" } else { "RabbitMQ Management" },
                "path": "/",
                "cowboy_opts": "[{sendfile,false}]",
                "ip": addr.ip().to_string(),
                "port": addr.port().to_string(),
                "protocol": protocol,
            })
        })
        .collect();
    Json_::Array(contexts)
}
