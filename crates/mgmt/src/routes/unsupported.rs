//! The routes of RabbitMQ 4.x's management API (`rabbit_mgmt_dispatcher`) that need what
//! Warren does not have (quorum queues, feature flags, OAuth 2, ...). Each answers 501 with
//! RabbitMQ's error shape and a reason naming the route, rather than a bare 404 that tools
//! would read as "no such object".

use std::sync::Arc;

use axum::routing::{any, MethodRouter};
use axum::Router;

use crate::error::ApiError;
use crate::ApiState;

/// `(path, what it needs)`.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "/api/nodes/{node}/memory",
        "the per-process memory breakdown",
    ),
    (
        "/api/nodes/{node}/memory/relative",
        "the per-process memory breakdown",
    ),
    (
        "/api/nodes/{node}/memory/ets",
        "ETS tables (an Erlang runtime feature)",
    ),
    (
        "/api/nodes/{node}/memory/ets/relative",
        "ETS tables (an Erlang runtime feature)",
    ),
    (
        "/api/nodes/{node}/memory/ets/{filter}",
        "ETS tables (an Erlang runtime feature)",
    ),
    (
        "/api/nodes/{node}/memory/ets/{filter}/relative",
        "ETS tables (an Erlang runtime feature)",
    ),
    (
        "/api/connections/{connection}/sessions",
        "listing AMQP 1.0 sessions",
    ),
    (
        "/api/queues/quorum/{vhost}/{queue}/replicas/add",
        "quorum queues",
    ),
    (
        "/api/queues/quorum/{vhost}/{queue}/replicas/delete",
        "quorum queues",
    ),
    (
        "/api/queues/quorum/replicas/on/{node}/grow",
        "quorum queues",
    ),
    (
        "/api/queues/quorum/replicas/on/{node}/shrink",
        "quorum queues",
    ),
    ("/api/queues/quorum/{vhost}/{queue}/status", "quorum queues"),
    (
        "/api/vhosts/{vhost}/deletion/protection",
        "vhost deletion protection",
    ),
    ("/api/users/{user}/queues", "listing a user's queues"),
    ("/api/user-limits", "user limits"),
    ("/api/user-limits/{user}", "user limits"),
    ("/api/user-limits/{user}/{name}", "user limits"),
    ("/api/feature-flags", "feature flags"),
    ("/api/feature-flags/{name}/enable", "feature flags"),
    ("/api/deprecated-features", "deprecated features"),
    ("/api/deprecated-features/used", "deprecated features"),
    ("/api/reset", "resetting statistics"),
    ("/api/reset/{node}", "resetting statistics"),
    (
        "/api/rebalance/queues",
        "queue leader rebalancing (a cluster feature)",
    ),
    (
        "/api/auth/attempts/{node}",
        "authentication attempt statistics",
    ),
    (
        "/api/auth/attempts/{node}/source",
        "authentication attempt statistics",
    ),
    ("/api/login", "OAuth 2 login"),
    ("/api/stream/super-streams/{vhost}/{name}", "super streams"),
    (
        "/api/config/effective",
        "the effective configuration (an Erlang application environment)",
    ),
];

/// Adds every unsupported route, for every method.
pub fn add(mut router: Router<Arc<ApiState>>) -> Router<Arc<ApiState>> {
    for (path, what) in UNSUPPORTED {
        router = router.route(path, refuse(path, what));
    }
    router
}

/// A 501 for any method on `path`, naming it and what it needs.
pub fn refuse(path: &'static str, what: &'static str) -> MethodRouter<Arc<ApiState>> {
    any(move || async move {
        ApiError::not_implemented(format!(
            "{path} needs {what}, which Warren does not support yet"
        ))
    })
}
