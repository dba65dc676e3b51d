//! `/api/overview`, `/api/nodes`, `/api/whoami` and the health checks.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde_json::{json, Value as Json_};
use warren_core::alarm::Resource;
use warren_core::registry::GlobalCounters;

use super::{rate, vhost};
use crate::auth::AuthUser;
use crate::error::{ApiError, ApiResult};
use crate::query::{self, Params};
use crate::ApiState;

/// The RabbitMQ release whose management API Warren answers as.
pub(crate) const RABBITMQ_VERSION: &str = "3.10.8";

pub async fn overview(
    State(state): State<Arc<ApiState>>,
    Query(params): Query<Params>,
) -> Json<Json_> {
    let totals = state.rates.total();
    let publishers = state.rates.publishers();
    let (mut ready, mut unacked, mut delivered, mut acked, mut queues) =
        (0u64, 0u64, 0u64, 0u64, 0usize);
    let mut exchanges = 0;
    for name in state.broker.vhost_names() {
        let Some(vhost) = state.broker.vhost(&name) else {
            continue;
        };
        exchanges += vhost.exchanges().len() + 1; // and the default exchange
        for queue in vhost.queue_handles() {
            let stats = queue.stats();
            ready += stats.messages_ready;
            unacked += stats.messages_unacknowledged;
            delivered += stats.delivered_total;
            acked += stats.acknowledged_total;
            queues += 1;
        }
    }
    let registry = state.broker.registry();
    let connections = registry.connections();
    let channels: usize = connections.iter().map(|c| c.channel_count()).sum();
    let consumers: usize = connections.iter().map(|c| c.consumers().len()).sum();
    let counters = registry.counters();
    let received = GlobalCounters::get(&counters.received);
    let confirmed = GlobalCounters::get(&counters.confirmed);
    let listeners: Vec<Json_> = state
        .listeners
        .iter()
        .map(|(protocol, addr)| {
            json!({"node": state.node, "protocol": protocol,
                   "ip_address": addr.ip().to_string(), "port": addr.port(), "socket_opts": {}})
        })
        .collect();
    let body = json!({
        "management_version": RABBITMQ_VERSION,
        "rabbitmq_version": RABBITMQ_VERSION,
        "product_name": "Warren",
        "product_version": env!("CARGO_PKG_VERSION"),
        "erlang_version": "none (Warren is written in Rust)",
        "cluster_name": state.node,
        "node": state.node,
        "rates_mode": "basic",
        "exchange_types": exchange_types(),
        "message_stats": {
            "publish": received, "publish_details": rate(publishers.publish),
            "confirm": confirmed, "confirm_details": rate(publishers.confirm),
            "drop_unroutable": GlobalCounters::get(&counters.unroutable_dropped),
            "return_unroutable": GlobalCounters::get(&counters.unroutable_returned),
            "deliver_get": delivered, "deliver_get_details": rate(totals.deliver_get),
            "ack": acked, "ack_details": rate(totals.ack),
        },
        "queue_totals": {
            "messages": ready + unacked, "messages_details": rate(totals.messages),
            "messages_ready": ready, "messages_ready_details": rate(totals.messages_ready),
            "messages_unacknowledged": unacked,
            "messages_unacknowledged_details": rate(totals.messages_unacknowledged),
        },
        "object_totals": {
            "connections": connections.len(), "channels": channels, "consumers": consumers,
            "exchanges": exchanges, "queues": queues,
        },
        "listeners": listeners,
        "contexts": [],
        "statistics_db_event_queue": 0,
        "disable_stats": false,
        "enable_queue_totals": true,
        "sample_retention_policies": {"global": [600, 3600, 28800, 86400],
                                      "basic": [600, 3600], "detailed": [600]},
        "churn_rates": {
            "connection_created": GlobalCounters::get(&counters.connections_opened),
            "connection_closed": GlobalCounters::get(&counters.connections_closed),
            "channel_created": GlobalCounters::get(&counters.channels_opened),
            "channel_closed": GlobalCounters::get(&counters.channels_closed),
        },
    });
    Json(query::project_one(body, &params))
}

fn exchange_types() -> Json_ {
    let kinds = [
        "direct",
        "fanout",
        "topic",
        "headers",
        "x-consistent-hash",
        "x-modulus-hash",
        "x-local-random",
    ];
    Json_::Array(
        kinds
            .iter()
            .map(|k| json!({"name": k, "description": "", "enabled": true}))
            .collect(),
    )
}

fn node_json(state: &ApiState) -> Json_ {
    let sample = state.broker.alarms().sample();
    let alarms = state.broker.alarms().current();
    let fd_total = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(0);
    json!({
        "name": state.node,
        "type": "disc",
        "running": true,
        "os_pid": std::process::id().to_string(),
        "mem_used": sample.rss_bytes,
        "mem_limit": sample.memory_limit_bytes,
        "mem_alarm": alarms.contains(Resource::Memory),
        "disk_free": sample.disk_free_bytes,
        "disk_free_limit": sample.disk_free_limit_bytes,
        "disk_free_alarm": alarms.contains(Resource::Disk),
        "processors": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "uptime": u64::try_from(state.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "run_queue": 0,
        "partitions": [],
        "applications": [],
        "enabled_plugins": ["rabbitmq_management", "rabbitmq_prometheus"],
        "rates_mode": "basic",
        "mem_calculation_strategy": "rss",
        "fd_used": std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count()),
        "fd_total": fd_total,
        "sockets_used": state.broker.connection_count(),
        "sockets_total": fd_total,
        "exchange_types": exchange_types(),
        "auth_mechanisms": [
            {"name": "PLAIN", "description": "SASL PLAIN authentication mechanism", "enabled": true},
            {"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": true},
        ],
    })
}

pub async fn nodes(
    State(state): State<Arc<ApiState>>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    Ok(Json(query::list(
        vec![node_json(&state)],
        &params,
        &["name"],
    )?))
}

pub async fn node(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    if name != state.node {
        return Err(ApiError::not_found());
    }
    Ok(Json(query::project_one(node_json(&state), &params)))
}

pub async fn whoami(Extension(user): Extension<AuthUser>) -> Json<Json_> {
    Json(json!({"name": user.name, "tags": user.tags}))
}

pub async fn alarms(State(state): State<Arc<ApiState>>) -> ApiResult<Json<Json_>> {
    let alarms = state.broker.alarms().current();
    if alarms.is_empty() {
        return Ok(Json(json!({"status": "ok"})));
    }
    let mut list = Vec::new();
    for (resource, name) in [(Resource::Memory, "memory"), (Resource::Disk, "disk")] {
        if alarms.contains(resource) {
            list.push(json!({"node": state.node, "resource": name}));
        }
    }
    Err(ApiError::unavailable(format!(
        "resource alarm(s) in effect: {}",
        json!(list)
    )))
}

pub async fn port_listener(
    State(state): State<Arc<ApiState>>,
    Path(port): Path<String>,
) -> ApiResult<Json<Json_>> {
    let port: u16 = port
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid port {port}")))?;
    let ports: Vec<u16> = state.listeners.iter().map(|(_, a)| a.port()).collect();
    if ports.contains(&port) {
        Ok(Json(json!({"status": "ok", "port": port})))
    } else {
        Err(ApiError::unavailable(format!(
            "No active listener on port {port}, listening on {ports:?}"
        )))
    }
}

pub async fn virtual_hosts(State(state): State<Arc<ApiState>>) -> Json<Json_> {
    // Every vhost of a single node is running while the broker is.
    let _ = state.broker.vhost_names();
    Json(json!({"status": "ok"}))
}

/// Declares `aliveness-test` in the vhost, publishes to it and gets the message back.
pub async fn aliveness(
    State(state): State<Arc<ApiState>>,
    Path(vhost_name): Path<String>,
) -> ApiResult<Json<Json_>> {
    let vhost = vhost(&state, &vhost_name)?;
    let ok = super::queues::aliveness(&state, &vhost).await?;
    if ok {
        Ok(Json(json!({"status": "ok"})))
    } else {
        Err(ApiError::unavailable(
            "aliveness test message did not come back",
        ))
    }
}
