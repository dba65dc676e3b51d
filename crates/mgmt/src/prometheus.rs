//! Prometheus text exposition on its own listener (RabbitMQ's `rabbitmq_prometheus`, port
//! 15692): `/metrics` aggregates across objects; `/metrics/per-object` gives the queue
//! metrics (same names) as one series per queue labelled `vhost` and `queue`, as RabbitMQ's
//! does; `/metrics/detailed` serves the families asked for (`prometheus_detailed.rs`). Names
//! and labels are RabbitMQ's wherever Warren has the concept.
//!
//! Formatted by hand: the format is a few lines of text per metric, and every figure is read
//! at scrape time from the registry, queue stats and alarms, so a metrics registry would only
//! hold copies.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use warren_core::alarm::Resource;
use warren_core::queue::QueueStatsSnapshot;
use warren_core::registry::GlobalCounters;

use crate::ApiState;

pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        .route("/metrics", get(aggregated))
        .route("/metrics/per-object", get(per_object))
        .route(
            "/metrics/detailed",
            get(crate::prometheus_detailed::detailed),
        )
        .with_state(state)
}

async fn aggregated(State(state): State<Arc<ApiState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        render(&state, false),
    )
}

async fn per_object(State(state): State<Arc<ApiState>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], render(&state, true))
}

/// One metric family: `# HELP`, `# TYPE` and its samples.
pub(crate) struct Family<'a> {
    pub(crate) out: &'a mut String,
}

impl Family<'_> {
    pub(crate) fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# TYPE {name} {kind}\n# HELP {name} {help}");
    }

    pub(crate) fn sample(&mut self, name: &str, labels: &str, value: impl std::fmt::Display) {
        if labels.is_empty() {
            let _ = writeln!(self.out, "{name} {value}");
        } else {
            let _ = writeln!(self.out, "{name}{{{labels}}} {value}");
        }
    }

    fn single(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.header(name, kind, help);
        self.sample(name, "", value);
    }
}

/// Escapes a label value (backslash, double quote, newline).
pub(crate) fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

pub fn render(state: &ApiState, per_object: bool) -> String {
    let mut out = String::with_capacity(8 * 1024);
    let mut f = Family { out: &mut out };
    let queues = queue_stats(state);
    render_resources(state, &mut f);
    render_identity(state, &mut f);
    render_process(state, &mut f);
    render_objects(state, &mut f, queues.len());
    render_global(state, &mut f);
    render_delivery_totals(state, &mut f, &queues);
    crate::prometheus_stream::render(state, &mut f, per_object);
    if per_object {
        render_per_queue(&mut f, &queues);
    } else {
        render_queue_totals(&mut f, &queues);
    }
    out
}

fn queue_stats(state: &ApiState) -> Vec<(String, String, QueueStatsSnapshot)> {
    let mut all = Vec::new();
    for vhost_name in state.broker.vhost_names() {
        if let Some(vhost) = state.broker.vhost(&vhost_name) {
            for queue in vhost.queue_handles() {
                all.push((vhost_name.clone(), queue.name().to_string(), queue.stats()));
            }
        }
    }
    all.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    all
}

/// Memory and disk against their limits, and the resource alarms they raise.
fn render_resources(state: &ApiState, f: &mut Family<'_>) {
    let sample = state.broker.alarms().sample();
    let alarms = state.broker.alarms().current();
    f.single(
        "rabbitmq_process_resident_memory_bytes",
        "gauge",
        "Memory used in bytes",
        sample.rss_bytes,
    );
    f.single(
        "rabbitmq_resident_memory_limit_bytes",
        "gauge",
        "Memory high watermark in bytes",
        sample.memory_limit_bytes,
    );
    f.single(
        "rabbitmq_disk_space_available_bytes",
        "gauge",
        "Disk space available in bytes",
        sample.disk_free_bytes,
    );
    f.single(
        "rabbitmq_disk_space_available_limit_bytes",
        "gauge",
        "Free disk space low watermark in bytes",
        sample.disk_free_limit_bytes,
    );
    f.single(
        "rabbitmq_alarms_memory_used_watermark",
        "gauge",
        "is 1 if VM memory watermark alarm is in effect",
        u8::from(alarms.contains(Resource::Memory)),
    );
    f.single(
        "rabbitmq_alarms_free_disk_space_watermark",
        "gauge",
        "is 1 if free disk space watermark alarm is in effect",
        u8::from(alarms.contains(Resource::Disk)),
    );
    f.single(
        "rabbitmq_alarms_file_descriptor_limit",
        "gauge",
        "is 1 if file descriptor limit alarm is in effect",
        0,
    );
}

/// The build and identity info series: constant 1, the facts are in the labels.
fn render_identity(state: &ApiState, f: &mut Family<'_>) {
    f.header(
        "rabbitmq_build_info",
        "untyped",
        "RabbitMQ & Erlang/OTP version info",
    );
    let identity = state.broker.identity();
    f.sample(
        "rabbitmq_build_info",
        &format!(
            "rabbitmq_version=\"{}\",prometheus_plugin_version=\"{}\",prometheus_client_version=\"none\",erlang_version=\"none\",product_name=\"{}\",product_version=\"{}\"",
            label(identity.version()),
            label(identity.version()),
            label(identity.product()),
            label(identity.version())
        ),
        1,
    );
    f.header(
        "rabbitmq_identity_info",
        "untyped",
        "RabbitMQ node & cluster identity info",
    );
    let cluster = identity.cluster_name();
    f.sample(
        "rabbitmq_identity_info",
        &format!(
            "rabbitmq_node=\"{}\",rabbitmq_cluster=\"{}\",rabbitmq_cluster_permanent_id=\"{}\"",
            label(&identity.node_name),
            label(&cluster),
            label(&identity.node_name)
        ),
        1,
    );
}

/// The process: open file descriptors against their limit, and uptime.
fn render_process(state: &ApiState, f: &mut Family<'_>) {
    let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count());
    let max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(0);
    f.single(
        "rabbitmq_process_open_fds",
        "gauge",
        "Open file descriptors",
        open_fds,
    );
    f.single(
        "rabbitmq_process_max_fds",
        "gauge",
        "Open file descriptors limit",
        max_fds,
    );
    f.single(
        "rabbitmq_erlang_uptime_seconds",
        "gauge",
        "Node uptime",
        state.started.elapsed().as_secs(),
    );
}

fn render_objects(state: &ApiState, f: &mut Family<'_>, queue_count: usize) {
    let connections = state.broker.registry().connections();
    let channels: usize = connections.iter().map(|c| c.channel_count()).sum();
    let consumers: usize = connections.iter().map(|c| c.consumer_count()).sum();
    f.single(
        "rabbitmq_connections",
        "gauge",
        "Connections currently open",
        connections.len(),
    );
    f.single(
        "rabbitmq_channels",
        "gauge",
        "Channels currently open",
        channels,
    );
    f.single(
        "rabbitmq_consumers",
        "gauge",
        "Consumers currently connected",
        consumers,
    );
    f.single("rabbitmq_queues", "gauge", "Queues available", queue_count);
    let c = state.broker.registry().counters();
    for (name, help, value) in [
        (
            "rabbitmq_connections_opened_total",
            "Total number of connections opened",
            &c.connections_opened,
        ),
        (
            "rabbitmq_connections_closed_total",
            "Total number of connections closed or terminated",
            &c.connections_closed,
        ),
        (
            "rabbitmq_channels_opened_total",
            "Total number of channels opened",
            &c.channels_opened,
        ),
        (
            "rabbitmq_channels_closed_total",
            "Total number of channels closed",
            &c.channels_closed,
        ),
    ] {
        f.single(name, "counter", help, GlobalCounters::get(value));
    }
}

fn render_global(state: &ApiState, f: &mut Family<'_>) {
    let c = state.broker.registry().counters();
    let get = GlobalCounters::get;
    // The stream protocol's series sit beside AMQP's in the families RabbitMQ gives them:
    // received and confirmed; it routes nothing and has no unroutable messages.
    let families: [(&str, &str, u64, Option<u64>); 5] = [
        ("rabbitmq_global_messages_received_total",
         "Total number of messages received from publishers", get(&c.received),
         Some(get(&c.stream_received))),
        ("rabbitmq_global_messages_routed_total",
         "Total number of messages routed to queues or streams", get(&c.routed), None),
        ("rabbitmq_global_messages_unroutable_dropped_total",
         "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
         get(&c.unroutable_dropped), None),
        ("rabbitmq_global_messages_unroutable_returned_total",
         "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
         get(&c.unroutable_returned), None),
        ("rabbitmq_global_messages_confirmed_total",
         "Total number of messages confirmed to publishers", get(&c.confirmed),
         Some(get(&c.stream_confirmed))),
    ];
    for (name, help, amqp, stream) in families {
        f.header(name, "counter", help);
        f.sample(name, AMQP091, amqp);
        if let Some(stream) = stream {
            f.sample(name, STREAM, stream);
        }
    }
}

const AMQP091: &str = "protocol=\"amqp091\"";
const STREAM: &str = "protocol=\"stream\"";

fn render_delivery_totals(
    state: &ApiState,
    f: &mut Family<'_>,
    queues: &[(String, String, QueueStatsSnapshot)],
) {
    let sum = |pick: fn(&QueueStatsSnapshot) -> u64| -> u64 {
        queues.iter().map(|(_, _, s)| pick(s)).sum()
    };
    let stream_delivered =
        GlobalCounters::get(&state.broker.registry().counters().stream_delivered);
    for (name, help, value, stream) in [
        (
            "rabbitmq_global_messages_delivered_total",
            "Total number of messages delivered to consumers",
            sum(|s| s.delivered_total),
            Some(stream_delivered),
        ),
        (
            "rabbitmq_global_messages_acknowledged_total",
            "Total number of messages acknowledged by consumers",
            sum(|s| s.acknowledged_total),
            None,
        ),
        (
            "rabbitmq_global_messages_redelivered_total",
            "Total number of messages redelivered to consumers",
            sum(|s| s.redelivered_total),
            None,
        ),
    ] {
        f.header(name, "counter", help);
        f.sample(name, AMQP091, value);
        if let Some(stream) = stream {
            f.sample(name, STREAM, stream);
        }
    }
}

/// The queue metrics summed over every queue (`/metrics`).
fn render_queue_totals(f: &mut Family<'_>, queues: &[(String, String, QueueStatsSnapshot)]) {
    for (name, kind, help, pick) in QUEUE_FAMILIES {
        let total: u64 = queues.iter().map(|(_, _, s)| pick(s)).sum();
        f.single(name, kind, help, total);
    }
}

/// A queue metric: name, type, help, and the figure it shows.
type QueueFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&QueueStatsSnapshot) -> u64,
);

const QUEUE_FAMILIES: [QueueFamily; 6] = [
    (
        "rabbitmq_queue_messages_ready",
        "gauge",
        "Messages ready to be delivered to consumers",
        |s| s.messages_ready,
    ),
    (
        "rabbitmq_queue_messages_unacked",
        "gauge",
        "Messages delivered to consumers but not yet acknowledged",
        |s| s.messages_unacknowledged,
    ),
    (
        "rabbitmq_queue_messages",
        "gauge",
        "Sum of ready and unacknowledged messages - total queue depth",
        |s| s.messages_ready + s.messages_unacknowledged,
    ),
    (
        "rabbitmq_queue_messages_ready_bytes",
        "gauge",
        "Size in bytes of ready messages",
        |s| s.message_bytes_ready,
    ),
    (
        "rabbitmq_queue_consumers",
        "gauge",
        "Consumers on a queue",
        |s| s.consumers,
    ),
    (
        "rabbitmq_queue_messages_published_total",
        "counter",
        "Total number of messages published to queues",
        |s| s.published_total,
    ),
];

/// One series per queue (`/metrics/per-object`).
fn render_per_queue(f: &mut Family<'_>, queues: &[(String, String, QueueStatsSnapshot)]) {
    for (name, kind, help, pick) in QUEUE_FAMILIES {
        f.header(name, kind, help);
        for (vhost, queue, stats) in queues {
            let labels = format!("vhost=\"{}\",queue=\"{}\"", label(vhost), label(queue));
            f.sample(name, &labels, pick(stats));
        }
    }
}
