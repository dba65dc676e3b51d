//! What `list KIND` shows: the GET path of each kind and the columns of its table.

use super::{encode, Column};
use crate::cli::ListKind;

const QUEUES: &[Column] = &[
    ("vhost", "vhost"),
    ("name", "name"),
    ("type", "type"),
    ("durable", "durable"),
    ("auto_delete", "auto_delete"),
    ("messages", "messages"),
    ("ready", "messages_ready"),
    ("unacked", "messages_unacknowledged"),
    ("consumers", "consumers"),
    ("state", "state"),
];
const EXCHANGES: &[Column] = &[
    ("vhost", "vhost"),
    ("name", "name"),
    ("type", "type"),
    ("durable", "durable"),
    ("auto_delete", "auto_delete"),
    ("internal", "internal"),
];
const BINDINGS: &[Column] = &[
    ("vhost", "vhost"),
    ("source", "source"),
    ("destination", "destination"),
    ("destination_type", "destination_type"),
    ("routing_key", "routing_key"),
    ("arguments", "arguments"),
];
const CONNECTIONS: &[Column] = &[
    ("name", "name"),
    ("user", "user"),
    ("vhost", "vhost"),
    ("state", "state"),
    ("channels", "channels"),
    ("protocol", "protocol"),
    ("peer_host", "peer_host"),
    ("peer_port", "peer_port"),
];
const CHANNELS: &[Column] = &[
    ("name", "name"),
    ("user", "user"),
    ("vhost", "vhost"),
    ("number", "number"),
    ("consumers", "consumer_count"),
    ("unacked", "messages_unacknowledged"),
    ("prefetch", "prefetch_count"),
    ("state", "state"),
];
const CONSUMERS: &[Column] = &[
    ("vhost", "queue.vhost"),
    ("queue", "queue.name"),
    ("consumer_tag", "consumer_tag"),
    ("channel", "channel_details.name"),
    ("ack_required", "ack_required"),
    ("prefetch", "prefetch_count"),
    ("active", "active"),
];
const STREAM_CONNECTIONS: &[Column] = &[
    ("name", "name"),
    ("user", "user"),
    ("vhost", "vhost"),
    ("state", "state"),
    ("peer_host", "peer_host"),
    ("peer_port", "peer_port"),
    ("frame_max", "frame_max"),
    ("heartbeat", "timeout"),
];
const STREAM_PUBLISHERS: &[Column] = &[
    ("vhost", "queue.vhost"),
    ("stream", "queue.name"),
    ("publisher_id", "publisher_id"),
    ("reference", "reference"),
    ("published", "published"),
    ("confirmed", "confirmed"),
    ("errored", "errored"),
    ("connection", "connection_details.name"),
];
const STREAM_CONSUMERS: &[Column] = &[
    ("vhost", "queue.vhost"),
    ("stream", "queue.name"),
    ("subscription_id", "subscription_id"),
    ("credits", "credits"),
    ("consumed", "consumed"),
    ("offset", "offset"),
    ("offset_lag", "offset_lag"),
    ("connection", "connection_details.name"),
];
const USERS: &[Column] = &[("name", "name"), ("tags", "tags")];
const VHOSTS: &[Column] = &[
    ("name", "name"),
    ("description", "description"),
    ("tags", "tags"),
    ("messages", "messages"),
];
const PERMISSIONS: &[Column] = &[
    ("user", "user"),
    ("vhost", "vhost"),
    ("configure", "configure"),
    ("write", "write"),
    ("read", "read"),
];
const TOPIC_PERMISSIONS: &[Column] = &[
    ("user", "user"),
    ("vhost", "vhost"),
    ("exchange", "exchange"),
    ("write", "write"),
    ("read", "read"),
];
const POLICIES: &[Column] = &[
    ("vhost", "vhost"),
    ("name", "name"),
    ("pattern", "pattern"),
    ("apply_to", "apply-to"),
    ("priority", "priority"),
    ("definition", "definition"),
];
const VHOST_LIMITS: &[Column] = &[("vhost", "vhost"), ("limits", "value")];
pub const MESSAGES: &[Column] = &[
    ("routing_key", "routing_key"),
    ("exchange", "exchange"),
    ("message_count", "message_count"),
    ("redelivered", "redelivered"),
    ("payload_bytes", "payload_bytes"),
    ("payload_encoding", "payload_encoding"),
    ("payload", "payload"),
];
/// The rows `render::tracking` makes of a stream's tracking.
pub const TRACKING: &[Column] = &[
    ("reference", "reference"),
    ("type", "type"),
    ("value", "value"),
];
pub const LISTENERS: &[Column] = &[
    ("node", "node"),
    ("protocol", "protocol"),
    ("ip_address", "ip_address"),
    ("port", "port"),
];

/// GET path and columns of `list KIND`.
pub(super) fn list(kind: ListKind, vhost: &str, all_vhosts: bool) -> (String, &'static [Column]) {
    let vh = encode(vhost);
    // (per-vhost path, all-vhosts path, columns)
    let (scoped, all, columns) = match kind {
        ListKind::Queues => (format!("/api/queues/{vh}"), "/api/queues", QUEUES),
        ListKind::Exchanges => (format!("/api/exchanges/{vh}"), "/api/exchanges", EXCHANGES),
        ListKind::Bindings => (format!("/api/bindings/{vh}"), "/api/bindings", BINDINGS),
        ListKind::Connections => (
            format!("/api/vhosts/{vh}/connections"),
            "/api/connections",
            CONNECTIONS,
        ),
        ListKind::Channels => (
            format!("/api/vhosts/{vh}/channels"),
            "/api/channels",
            CHANNELS,
        ),
        ListKind::Consumers => (format!("/api/consumers/{vh}"), "/api/consumers", CONSUMERS),
        ListKind::Users => ("/api/users".to_string(), "/api/users", USERS),
        ListKind::Vhosts => ("/api/vhosts".to_string(), "/api/vhosts", VHOSTS),
        ListKind::Permissions => (
            format!("/api/vhosts/{vh}/permissions"),
            "/api/permissions",
            PERMISSIONS,
        ),
        ListKind::TopicPermissions => (
            format!("/api/vhosts/{vh}/topic-permissions"),
            "/api/topic-permissions",
            TOPIC_PERMISSIONS,
        ),
        ListKind::Policies => (format!("/api/policies/{vh}"), "/api/policies", POLICIES),
        ListKind::OperatorPolicies => (
            format!("/api/operator-policies/{vh}"),
            "/api/operator-policies",
            POLICIES,
        ),
        ListKind::VhostLimits => (
            format!("/api/vhost-limits/{vh}"),
            "/api/vhost-limits",
            VHOST_LIMITS,
        ),
        ListKind::StreamConnections => (
            format!("/api/stream/connections/{vh}"),
            "/api/stream/connections",
            STREAM_CONNECTIONS,
        ),
        ListKind::StreamPublishers => (
            format!("/api/stream/publishers/{vh}"),
            "/api/stream/publishers",
            STREAM_PUBLISHERS,
        ),
        ListKind::StreamConsumers => (
            format!("/api/stream/consumers/{vh}"),
            "/api/stream/consumers",
            STREAM_CONSUMERS,
        ),
        ListKind::StreamTracking => {
            unreachable!("invariant: plan() maps list stream-tracking itself")
        }
    };
    if all_vhosts {
        (all.to_string(), columns)
    } else {
        (scoped, columns)
    }
}
