//! `/api/overview`, `/api/nodes`, `/api/whoami` and the health checks.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde_json::{json, Value as Json_};
use warren_core::alarm::Resource;
use warren_core::identity::{WARREN_PRODUCT, WARREN_VERSION};
use warren_core::registry::GlobalCounters;

use super::{rate, vhost, visible_vhost};
use crate::auth::AuthUser;
use crate::error::{ApiError, ApiResult};
use crate::query::{self, Params};
use crate::ApiState;

/// What the overview sums over the queues of the vhosts the user may see.
#[derive(Default)]
struct QueueSums {
    ready: u64,
    unacked: u64,
    published: u64,
    delivered: u64,
    acked: u64,
    queues: usize,
    exchanges: usize,
    rates: crate::rates::MessageRates,
}

fn queue_sums(state: &ApiState, user: &AuthUser) -> QueueSums {
    let mut sums = QueueSums::default();
    for name in state.broker.vhost_names() {
        if !visible_vhost(state, user, &name) {
            continue;
        }
        let Some(vhost) = state.broker.vhost(&name) else {
            continue;
        };
        sums.exchanges += vhost.exchanges().len() + 1; // and the default exchange
        for queue in vhost.queue_handles() {
            let stats = queue.stats();
            sums.ready += stats.messages_ready;
            sums.unacked += stats.messages_unacknowledged;
            sums.published += stats.published_total;
            sums.delivered += stats.delivered_total;
            sums.acked += stats.acknowledged_total;
            sums.queues += 1;
            crate::rates::add(&mut sums.rates, &state.rates.queue(&name, queue.name()));
        }
    }
    sums
}

/// RabbitMQ's overview. Monitors and administrators see the whole broker; other users see
/// the totals of the vhosts they have permissions in and of their own connections, without
/// the node's listeners (RabbitMQ's `get_overview(User, Range)`). Their `publish` is what
/// their vhosts' queues took: Warren counts publishes per connection and broker-wide, not
/// per vhost.
pub async fn overview(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> Json<Json_> {
    let sums = queue_sums(&state, &user);
    let registry = state.broker.registry();
    let mut connections = registry.connections();
    connections.retain(|c| user.is_monitor() || c.details.user == user.name);
    let channels: usize = connections.iter().map(|c| c.channel_count()).sum();
    let counters = registry.counters();
    let identity = state.broker.identity();
    let mut body = json!({
        "management_version": identity.version(),
        "rabbitmq_version": identity.version(),
        "product_name": identity.product(),
        "product_version": identity.version(),
        "warren_product": WARREN_PRODUCT,
        "warren_version": WARREN_VERSION,
        "erlang_version": "none (Warren is written in Rust)",
        "cluster_name": identity.cluster_name(),
        "rates_mode": "basic",
        "exchange_types": exchange_types(),
        "message_stats": {
            "publish": sums.published, "publish_details": rate(sums.rates.publish),
            "deliver_get": sums.delivered, "deliver_get_details": rate(sums.rates.deliver_get),
            "ack": sums.acked, "ack_details": rate(sums.rates.ack),
        },
        "queue_totals": {
            "messages": sums.ready + sums.unacked, "messages_details": rate(sums.rates.messages),
            "messages_ready": sums.ready, "messages_ready_details": rate(sums.rates.messages_ready),
            "messages_unacknowledged": sums.unacked,
            "messages_unacknowledged_details": rate(sums.rates.messages_unacknowledged),
        },
        "object_totals": {
            "connections": connections.len(), "channels": channels,
            "exchanges": sums.exchanges, "queues": sums.queues,
        },
        "churn_rates": {
            "connection_created": GlobalCounters::get(&counters.connections_opened),
            "connection_closed": GlobalCounters::get(&counters.connections_closed),
            "channel_created": GlobalCounters::get(&counters.channels_opened),
            "channel_closed": GlobalCounters::get(&counters.channels_closed),
        },
        "statistics_db_event_queue": 0,
        "disable_stats": false,
        "enable_queue_totals": true,
        "sample_retention_policies": {"global": [600, 3600, 28800, 86400],
                                      "basic": [600, 3600], "detailed": [600]},
    });
    if user.is_monitor() {
        let consumers: usize = connections.iter().map(|c| c.consumer_count()).sum();
        body["object_totals"]["consumers"] = json!(consumers);
        add_node_wide(&state, &mut body);
    }
    Json(query::project_one(body, &params))
}

/// The overview's broker-wide parts, for monitors: publisher totals, consumers (RabbitMQ does
/// not filter them by user), listeners.
fn add_node_wide(state: &ApiState, body: &mut Json_) {
    let counters = state.broker.registry().counters();
    let publishers = state.rates.publishers();
    let stats = &mut body["message_stats"];
    stats["publish"] = json!(GlobalCounters::get(&counters.received));
    stats["publish_details"] = rate(publishers.publish);
    stats["confirm"] = json!(GlobalCounters::get(&counters.confirmed));
    stats["confirm_details"] = rate(publishers.confirm);
    stats["drop_unroutable"] = json!(GlobalCounters::get(&counters.unroutable_dropped));
    stats["return_unroutable"] = json!(GlobalCounters::get(&counters.unroutable_returned));
    let listeners: Vec<Json_> = state
        .listeners
        .iter()
        .map(|listener| {
            json!({"node": state.node, "protocol": listener.protocol,
                   "ip_address": listener.addr.ip().to_string(), "port": listener.addr.port(),
                   "socket_opts": {}})
        })
        .collect();
    body["node"] = json!(state.node);
    body["listeners"] = json!(listeners);
    body["contexts"] = super::cluster::contexts(state);
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
        "contexts": super::cluster::contexts(state),
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
    let ports: Vec<u16> = state.listeners.iter().map(|l| l.addr.port()).collect();
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
/// RabbitMQ 4.x only opens a channel here; Warren still makes the round trip, so it checks
/// what that needs (configure, write on the default exchange, read).
pub async fn aliveness(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(vhost_name): Path<String>,
) -> ApiResult<Json<Json_>> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    let ok = super::queues::aliveness(&state, &user, &vhost).await?;
    if ok {
        Ok(Json(json!({"status": "ok"})))
    } else {
        Err(ApiError::unavailable(
            "aliveness test message did not come back",
        ))
    }
}
