//! The `/api` routes, grouped by resource. Every route sits behind basic authentication.

mod access;
mod bindings;
pub(crate) mod cluster;
mod connections;
mod exchanges;
mod extras;
pub(crate) mod overview;
mod permit;
mod queues;
pub(crate) mod stream_tracking;
pub(crate) mod streams;
mod unsupported;

use std::sync::Arc;

use axum::routing::{delete, get, post};
use axum::{middleware, Router};
use serde_json::{Map, Value as Json_};
use warren_core::vhost::VHost;

use crate::auth::AuthUser;
use crate::error::{ApiError, ApiResult};
use crate::{auth, ApiState};

/// The connection id the API acts as: no client connection owns anything it declares.
pub(crate) const API_CONNECTION: u64 = 0;

/// Builds the API router; `extend` adds routes (behind the same authentication).
pub fn api_router(
    state: Arc<ApiState>,
    extend: impl FnOnce(Router<Arc<ApiState>>) -> Router<Arc<ApiState>>,
) -> Router {
    let api = Router::new();
    let api = overview_routes(stream_routes(connection_routes(api)));
    let api = binding_routes(queue_routes(exchange_routes(api)));
    let api = policy_routes(access_routes(api));
    let api = rabbitmq_4_extras(rabbitmq_4_health_checks(api));
    extend(unsupported::add(api))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_user,
        ))
        .with_state(state)
}

/// Overview, nodes and the health checks RabbitMQ 3.x had.
fn overview_routes(api: Router<Arc<ApiState>>) -> Router<Arc<ApiState>> {
    api.route("/api/overview", get(overview::overview))
        .route("/api/nodes", get(overview::nodes))
        .route("/api/nodes/{node}", get(overview::node))
        .route("/api/whoami", get(overview::whoami))
        .route("/api/health/checks/alarms", get(overview::alarms))
        .route("/api/health/checks/local-alarms", get(overview::alarms))
        .route(
            "/api/health/checks/port-listener/{port}",
            get(overview::port_listener),
        )
        .route(
            "/api/health/checks/virtual-hosts",
            get(overview::virtual_hosts),
        )
        .route("/api/aliveness-test/{vhost}", get(overview::aliveness))
}

/// Connections, channels and consumers: read, and a connection closed.
fn connection_routes(api: Router<Arc<ApiState>>) -> Router<Arc<ApiState>> {
    api.route("/api/connections", get(connections::list))
        .route(
            "/api/connections/{name}",
            get(connections::one).delete(connections::close),
        )
        .route(
            "/api/connections/{name}/channels",
            get(connections::channels_of),
        )
        .route("/api/channels", get(connections::channels))
        .route("/api/consumers", get(connections::consumers))
        .route("/api/consumers/{vhost}", get(connections::consumers_in))
}

/// The stream management plugin's routes: stream connections, publishers and consumers, and
/// a stream's tracking.
fn stream_routes(api: Router<Arc<ApiState>>) -> Router<Arc<ApiState>> {
    use streams::{list, Listed};
    let connection = get(streams::connection).delete(streams::close);
    api.route("/api/stream/connections", list(Listed::Connections))
        .route("/api/stream/connections/{vhost}", list(Listed::Connections))
        .route("/api/stream/connections/{vhost}/{name}", connection)
        .route(
            "/api/stream/connections/{vhost}/{name}/publishers",
            list(Listed::Publishers),
        )
        .route(
            "/api/stream/connections/{vhost}/{name}/consumers",
            list(Listed::Consumers),
        )
        .route("/api/stream/publishers", list(Listed::Publishers))
        .route("/api/stream/publishers/{vhost}", list(Listed::Publishers))
        .route(
            "/api/stream/publishers/{vhost}/{stream}",
            list(Listed::Publishers),
        )
        .route("/api/stream/consumers", list(Listed::Consumers))
        .route("/api/stream/consumers/{vhost}", list(Listed::Consumers))
        .route(
            "/api/stream/{vhost}/{queue}/tracking",
            get(stream_tracking::tracking),
        )
}

/// Exchanges: list, declare, delete, publish, and the bindings they take part in.
fn exchange_routes(api: Router<Arc<ApiState>>) -> Router<Arc<ApiState>> {
    api.route("/api/exchanges", get(exchanges::list))
        .route("/api/exchanges/{vhost}", get(exchanges::list_in))
        .route(
            "/api/exchanges/{vhost}/{name}",
            get(exchanges::one)
                .put(exchanges::declare)
                .delete(exchanges::delete),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/publish",
            post(exchanges::publish),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/source",
            get(bindings::of_source),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/destination",
            get(bindings::of_exchange_destination),
        )
}

/// Queues: list, declare, delete, purge, get, and their bindings.
fn queue_routes(api: Router<Arc<ApiState>>) -> Router<Arc<ApiState>> {
    api.route("/api/queues", get(queues::list))
        .route("/api/queues/{vhost}", get(queues::list_in))
        .route(
            "/api/queues/{vhost}/{name}",
            get(queues::one).put(queues::declare).delete(queues::delete),
        )
        .route(
            "/api/queues/{vhost}/{name}/contents",
            axum::routing::delete(queues::purge),
        )
        .route("/api/queues/{vhost}/{name}/get", post(queues::get_messages))
        .route(
            "/api/queues/{vhost}/{name}/bindings",
            get(bindings::of_queue),
        )
}

/// Bindings: list, create between a source and a destination, delete one.
fn binding_routes(api: Router<Arc<ApiState>>) -> Router<Arc<ApiState>> {
    api.route("/api/bindings", get(bindings::list))
        .route("/api/bindings/{vhost}", get(bindings::list_in))
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}",
            get(bindings::between).post(bindings::create),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
            get(bindings::one).delete(bindings::delete),
        )
}

/// Users, vhosts, permissions and topic permissions.
fn access_routes(api: Router<Arc<ApiState>>) -> Router<Arc<ApiState>> {
    api.route("/api/users", get(access::users))
        .route(
            "/api/users/{name}",
            get(access::user)
                .put(access::put_user)
                .delete(access::delete_user),
        )
        .route(
            "/api/users/{name}/permissions",
            get(access::user_permissions),
        )
        .route(
            "/api/users/{name}/topic-permissions",
            get(access::user_topic_permissions),
        )
        .route("/api/vhosts", get(access::vhosts))
        .route(
            "/api/vhosts/{name}",
            get(access::vhost)
                .put(access::put_vhost)
                .delete(access::delete_vhost),
        )
        .route(
            "/api/vhosts/{name}/permissions",
            get(access::vhost_permissions),
        )
        .route("/api/vhosts/{vhost}/connections", get(connections::list_in))
        .route(
            "/api/vhosts/{vhost}/channels",
            get(connections::channels_in),
        )
        .route(
            "/api/vhosts/{name}/topic-permissions",
            get(access::vhost_topic_permissions),
        )
        .route("/api/permissions", get(access::permissions))
        .route(
            "/api/permissions/{vhost}/{user}",
            get(access::permission)
                .put(access::put_permission)
                .delete(access::delete_permission),
        )
        .route("/api/topic-permissions", get(access::topic_permissions))
        .route(
            "/api/topic-permissions/{vhost}/{user}",
            get(access::topic_permission)
                .put(access::put_topic_permission)
                .delete(access::delete_topic_permission),
        )
}

/// Policies, operator policies, vhost limits and definitions.
fn policy_routes(api: Router<Arc<ApiState>>) -> Router<Arc<ApiState>> {
    api.route("/api/policies", get(access::policies::<false>))
        .route(
            "/api/policies/{vhost}",
            get(access::policies_in_vhost::<false>),
        )
        .route(
            "/api/policies/{vhost}/{name}",
            get(access::policy::<false>)
                .put(access::put_policy::<false>)
                .delete(access::delete_policy::<false>),
        )
        .route("/api/operator-policies", get(access::policies::<true>))
        .route(
            "/api/operator-policies/{vhost}",
            get(access::policies_in_vhost::<true>),
        )
        .route(
            "/api/operator-policies/{vhost}/{name}",
            get(access::policy::<true>)
                .put(access::put_policy::<true>)
                .delete(access::delete_policy::<true>),
        )
        .route("/api/vhost-limits", get(access::vhost_limits))
        .route("/api/vhost-limits/{vhost}", get(access::vhost_limits_of))
        .route(
            "/api/vhost-limits/{vhost}/{name}",
            axum::routing::put(access::put_vhost_limit).delete(access::delete_vhost_limit),
        )
        .route(
            "/api/definitions",
            get(access::export_definitions).post(access::import_definitions),
        )
}

/// RabbitMQ 4.x's cluster, version and health-check routes; a single node answers the
/// quorum and cluster checks as healthy.
fn rabbitmq_4_health_checks(api: Router<Arc<ApiState>>) -> Router<Arc<ApiState>> {
    api.route(
        "/api/cluster-name",
        get(cluster::cluster_name).put(cluster::put_cluster_name),
    )
    .route("/api/version", get(cluster::version))
    .route("/api/extensions", get(cluster::extensions))
    .route("/api/healthchecks/node", get(cluster::healthcheck_node))
    .route(
        "/api/healthchecks/node/{node}",
        get(cluster::healthcheck_node),
    )
    .route(
        "/api/health/checks/protocol-listener/{protocols}",
        get(cluster::protocol_listener),
    )
    .route(
        "/api/health/checks/certificate-expiration/{within}/{unit}",
        get(cluster::certificate_expiration),
    )
    .route(
        "/api/health/checks/metadata-store/initialized",
        get(cluster::always_ok),
    )
    .route(
        "/api/health/checks/metadata-store/initialized/with-data",
        get(cluster::always_ok),
    )
    .route(
        "/api/health/checks/quorum-queues-without-elected-leaders/all-vhosts",
        get(cluster::always_ok),
    )
    .route(
        "/api/health/checks/quorum-queues-without-elected-leaders/vhost/{vhost}",
        get(cluster::always_ok),
    )
    .route(
        "/api/health/checks/quorum-queues-without-elected-leaders/all-vhosts/pattern/{pattern}",
        get(cluster::always_ok),
    )
    .route(
        "/api/health/checks/quorum-queues-without-elected-leaders/vhost/{vhost}/pattern/{pattern}",
        get(cluster::always_ok),
    )
    .route(
        "/api/health/checks/node-is-quorum-critical",
        get(cluster::always_ok),
    )
    .route("/api/health/checks/is-in-service", get(cluster::always_ok))
    .route(
        "/api/health/checks/below-node-connection-limit",
        get(cluster::always_ok),
    )
    .route(
        "/api/health/checks/ready-to-serve-clients",
        get(cluster::always_ok),
    )
    .route(
        "/api/health/checks/reached-target-cluster-size",
        get(cluster::always_ok),
    )
    .route(
        "/api/vhosts/{vhost}/start/{node}",
        post(cluster::start_vhost),
    )
}

/// The other routes RabbitMQ 4.x added or kept beyond the core set: bulk user deletion,
/// runtime parameters (read-only), per-vhost definitions, queue actions and lookups by name.
fn rabbitmq_4_extras(api: Router<Arc<ApiState>>) -> Router<Arc<ApiState>> {
    api.route("/api/users/bulk-delete", post(extras::bulk_delete_users))
        .route(
            "/api/users/without-permissions",
            get(extras::users_without_permissions),
        )
        .route("/api/parameters", get(extras::parameters))
        .route("/api/parameters/{component}", get(extras::parameters))
        .route(
            "/api/parameters/{component}/{vhost}",
            get(extras::parameters),
        )
        .route(
            "/api/parameters/{component}/{vhost}/{name}",
            get(extras::parameter)
                .put(refuse_parameter)
                .delete(refuse_parameter),
        )
        .route("/api/global-parameters", get(extras::global_parameters))
        .route(
            "/api/global-parameters/{name}",
            get(extras::global_parameter),
        )
        .route(
            "/api/definitions/{vhost}",
            get(extras::export_vhost_definitions).post(extras::import_vhost_definitions),
        )
        .route(
            "/api/all-configuration",
            get(access::export_definitions).post(access::import_definitions),
        )
        .route("/api/queues/detailed", get(queues::list))
        .route(
            "/api/queues/{vhost}/{name}/actions",
            post(extras::queue_actions),
        )
        .route("/api/auth/hash_password/{password}", get(extras::hash))
        .route(
            "/api/topic-permissions/{vhost}/{user}/{exchange}",
            delete(access::delete_topic_permission_of),
        )
        .route(
            "/api/connections/username/{username}",
            get(connections::of_user).delete(connections::close_of_user),
        )
        .route("/api/channels/{channel}", get(connections::channel))
}

/// Runtime parameters are read-only: Warren's components have their own routes.
async fn refuse_parameter() -> ApiError {
    ApiError::not_implemented(
        "/api/parameters/{component}/{vhost}/{name}: Warren does not support setting runtime \
         parameters yet (vhost limits: /api/vhost-limits; operator policies: \
         /api/operator-policies)",
    )
}

/// The vhost named in a path, as RabbitMQ's `is_authorized_vhost`: 404 when it does not
/// exist, 401 when a user other than an administrator has no permissions in it.
pub(crate) fn vhost(state: &ApiState, user: &AuthUser, name: &str) -> ApiResult<Arc<VHost>> {
    let vhost = state.broker.vhost(name).ok_or_else(ApiError::not_found)?;
    if user.is_admin() || user.can_access(&state.broker, name) {
        Ok(vhost)
    } else {
        Err(ApiError::not_authorised(NOT_AUTHORISED_VHOST))
    }
}

pub(crate) const NOT_AUTHORISED_VHOST: &str = "User not authorised to access virtual host";

/// The vhosts whose queues, exchanges, bindings and policies a user's lists show (RabbitMQ's
/// `filter_vhost`): all of them for administrators, else those the user has permissions in.
pub(crate) fn listed_vhosts(state: &ApiState, user: &AuthUser) -> Vec<Arc<VHost>> {
    state
        .broker
        .vhost_names()
        .iter()
        .filter(|name| user.is_admin() || user.can_access(&state.broker, name))
        .filter_map(|name| state.broker.vhost(name))
        .collect()
}

/// The vhosts a user may know of (RabbitMQ's `list_visible_vhosts`): all of them for
/// monitors and administrators, else those the user has permissions in.
pub(crate) fn visible_vhost(state: &ApiState, user: &AuthUser, name: &str) -> bool {
    user.is_monitor() || user.can_access(&state.broker, name)
}

/// A request body that must be a JSON object (empty is an empty object). Parsed here rather
/// than by axum's `Json` so that a missing Content-Type is accepted, as RabbitMQ does.
pub(crate) fn body_object(body: &[u8]) -> ApiResult<Map<String, Json_>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice(body) {
        Ok(Json_::Object(map)) => Ok(map),
        Ok(other) => Err(ApiError::bad_request(format!(
            "expected a JSON object, got {other}"
        ))),
        Err(error) => Err(ApiError::bad_request(format!("malformed JSON: {error}"))),
    }
}

/// RabbitMQ's `message_stats` object: each count with its `*_details` rate.
pub(crate) fn message_stats(names: &[&str], counts: &[u64], rates: &[f64]) -> Map<String, Json_> {
    let mut stats = Map::new();
    for ((name, count), value) in names.iter().zip(counts).zip(rates) {
        stats.insert((*name).to_string(), Json_::from(*count));
        stats.insert(format!("{name}_details"), rate(*value));
    }
    stats
}

/// `{"rate": r}`, RabbitMQ's `*_details`.
pub(crate) fn rate(value: f64) -> Json_ {
    serde_json::json!({ "rate": (value * 10.0).round() / 10.0 })
}
