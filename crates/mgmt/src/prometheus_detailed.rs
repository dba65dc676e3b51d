//! `/metrics/detailed` (RabbitMQ's detailed endpoint): per-object series of only the metric
//! families asked for with `family=` (repeatable; none by default), named `rabbitmq_detailed_*`.
//! Queue and exchange families keep the vhosts named by `vhost=` (repeatable; unknown ones are
//! ignored, as RabbitMQ does) and the queues whose names match the `queue=` regex (one only).
//!
//! Connection and channel series are labelled `channel="…"`, as RabbitMQ labels them; RabbitMQ
//! puts the Erlang process id there, Warren the name the management API lists the connection
//! or channel under.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use percent_encoding::percent_decode_str;
use regex::Regex;
use warren_core::queue::QueueStatsSnapshot;
use warren_core::registry::{ChannelDetails, ConnectionEntry};
use warren_core::stats::{read, ChannelStats, ConnectionStats};

use crate::prometheus::{label, Family, CONTENT_TYPE};
use crate::ApiState;

/// RabbitMQ's longest `queue` regex.
const QUEUE_FILTER_BYTES_MAX: usize = 2000;
const PREFIX: &str = "rabbitmq_detailed_";

pub(crate) async fn detailed(
    State(state): State<Arc<ApiState>>,
    RawQuery(query): RawQuery,
) -> Response {
    match Filter::parse(&state, query.as_deref().unwrap_or("")) {
        Ok(filter) => (
            [(header::CONTENT_TYPE, CONTENT_TYPE)],
            render(&state, &filter),
        )
            .into_response(),
        Err(reason) => (StatusCode::BAD_REQUEST, reason).into_response(),
    }
}

/// What a request asks for.
struct Filter {
    families: Vec<String>,
    /// `None`: every vhost.
    vhosts: Option<Vec<String>>,
    queue: Option<Regex>,
}

impl Filter {
    fn parse(state: &ApiState, query: &str) -> Result<Filter, String> {
        let mut filter = Filter {
            families: Vec::new(),
            vhosts: None,
            queue: None,
        };
        let mut queue_patterns = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = decode(value);
            match decode(key).as_str() {
                "family" => filter.families.push(value),
                "vhost" => {
                    let vhosts = filter.vhosts.get_or_insert_with(Vec::new);
                    if state.broker.vhost(&value).is_some() {
                        vhosts.push(value);
                    }
                }
                "queue" if !value.is_empty() => queue_patterns.push(value),
                _ => {}
            }
        }
        filter.queue = match queue_patterns.as_slice() {
            [] => None,
            [pattern] if pattern.len() > QUEUE_FILTER_BYTES_MAX => {
                return Err("'queue' regex too long".into())
            }
            [pattern] => Some(
                regex::RegexBuilder::new(pattern)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|error| format!("Invalid 'queue' regex: {error}"))?,
            ),
            _ => return Err("Only one 'queue' query parameter is allowed".into()),
        };
        Ok(filter)
    }

    fn wants(&self, family: &str) -> bool {
        self.families.iter().any(|f| f == family)
    }

    fn keeps(&self, vhost: &str, queue: Option<&str>) -> bool {
        let vhost_kept = self
            .vhosts
            .as_ref()
            .is_none_or(|v| v.iter().any(|v| v == vhost));
        let queue_kept = match (queue, &self.queue) {
            (Some(name), Some(regex)) => regex.is_match(name),
            _ => true,
        };
        vhost_kept && queue_kept
    }
}

/// A query string value: `+` is a space, then percent-decoding.
fn decode(value: &str) -> String {
    percent_decode_str(&value.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

fn render(state: &ApiState, filter: &Filter) -> String {
    let mut out = String::with_capacity(4 * 1024);
    let mut f = Family { out: &mut out };
    render_queues(state, filter, &mut f);
    if filter.wants("exchange_metrics") {
        render_exchanges(state, filter, &mut f);
    }
    let connections = state.broker.registry().connections();
    render_connections(filter, &connections, &mut f);
    render_channels(filter, &connections, &mut f);
    f.header(
        "rabbitmq_identity_info",
        "untyped",
        "RabbitMQ node & cluster identity info",
    );
    let node = label(&state.node);
    f.sample(
        "rabbitmq_identity_info",
        &format!(
            "rabbitmq_node=\"{node}\",rabbitmq_cluster=\"{node}\",\
             rabbitmq_cluster_permanent_id=\"{node}\",rabbitmq_endpoint=\"detailed\""
        ),
        1,
    );
    out
}

/// A per-object figure: name (without the prefix), type, help, and how to read it.
type Series<T> = (&'static str, &'static str, &'static str, fn(&T) -> u64);

const QUEUE_COARSE: [Series<QueueStatsSnapshot>; 3] = [
    (
        "queue_messages_ready",
        "gauge",
        "Messages ready to be delivered to consumers",
        |s| s.messages_ready,
    ),
    (
        "queue_messages_unacked",
        "gauge",
        "Messages delivered to consumers but not yet acknowledged",
        |s| s.messages_unacknowledged,
    ),
    (
        "queue_messages",
        "gauge",
        "Sum of ready and unacknowledged messages - total queue depth",
        |s| s.messages_ready + s.messages_unacknowledged,
    ),
];

const QUEUE_CONSUMERS: Series<QueueStatsSnapshot> =
    ("queue_consumers", "gauge", "Consumers on a queue", |s| {
        s.consumers
    });

const QUEUE_DETAILS: [Series<QueueStatsSnapshot>; 2] = [
    (
        "queue_process_memory_bytes",
        "gauge",
        "Memory in bytes used by the Erlang queue process",
        |s| s.memory_bytes,
    ),
    (
        "queue_messages_ready_bytes",
        "gauge",
        "Size in bytes of ready messages",
        |s| s.message_bytes_ready,
    ),
];

fn render_queues(state: &ApiState, filter: &Filter, f: &mut Family<'_>) {
    let coarse = filter.wants("queue_coarse_metrics");
    let details = filter.wants("queue_metrics");
    // `queue_consumer_count` is a subset of `queue_metrics`, skipped when both are asked.
    let consumers = details || filter.wants("queue_consumer_count");
    if !(coarse || consumers) {
        return;
    }
    let mut queues = Vec::new();
    for vhost_name in state.broker.vhost_names() {
        let Some(vhost) = state.broker.vhost(&vhost_name) else {
            continue;
        };
        for queue in vhost.queue_handles() {
            if filter.keeps(&vhost_name, Some(queue.name())) {
                let labels = format!(
                    "vhost=\"{}\",queue=\"{}\"",
                    label(&vhost_name),
                    label(queue.name())
                );
                queues.push((labels, queue.stats()));
            }
        }
    }
    queues.sort_by(|a, b| a.0.cmp(&b.0));
    let mut families: Vec<&Series<QueueStatsSnapshot>> = Vec::new();
    if coarse {
        families.extend(&QUEUE_COARSE);
    }
    if consumers {
        families.push(&QUEUE_CONSUMERS);
    }
    if details {
        families.extend(&QUEUE_DETAILS);
    }
    for (name, kind, help, pick) in families {
        emit(
            f,
            name,
            kind,
            help,
            queues.iter().map(|(l, s)| (l.as_str(), pick(s))),
        );
    }
}

/// One family: its header and a sample per object.
fn emit<'a>(
    f: &mut Family<'_>,
    name: &str,
    kind: &str,
    help: &str,
    samples: impl Iterator<Item = (&'a str, u64)>,
) {
    let full = format!("{PREFIX}{name}");
    f.header(&full, kind, help);
    for (labels, value) in samples {
        f.sample(&full, labels, value);
    }
}

fn render_exchanges(state: &ApiState, filter: &Filter, f: &mut Family<'_>) {
    let mut exchanges = Vec::new();
    for vhost_name in state.broker.vhost_names() {
        let Some(vhost) = state.broker.vhost(&vhost_name) else {
            continue;
        };
        if !filter.keeps(&vhost_name, None) {
            continue;
        }
        let named = vhost
            .exchanges()
            .into_iter()
            .map(|e| (e.name.to_string(), e.kind.as_str()));
        for (name, kind) in std::iter::once((String::new(), "direct")).chain(named) {
            let [published, _] = vhost.exchange_stats().get(&name);
            let labels = format!(
                "vhost=\"{}\",exchange=\"{}\",type=\"{kind}\"",
                label(&vhost_name),
                label(&name)
            );
            exchanges.push((labels, published));
        }
    }
    emit(
        f,
        "exchange_messages_published_total",
        "counter",
        "Total number of messages published to an exchange",
        exchanges.iter().map(|(l, v)| (l.as_str(), *v)),
    );
}

const CONNECTION_COARSE: [Series<ConnectionStats>; 2] = [
    (
        "connection_incoming_bytes_total",
        "counter",
        "Total number of bytes received on a connection",
        |s| read(&s.recv_oct),
    ),
    (
        "connection_outgoing_bytes_total",
        "counter",
        "Total number of bytes sent on a connection",
        |s| read(&s.send_oct),
    ),
];

const CONNECTION_PACKETS: [Series<ConnectionStats>; 2] = [
    (
        "connection_incoming_packets_total",
        "counter",
        "Total number of packets received on a connection",
        |s| read(&s.recv_cnt),
    ),
    (
        "connection_outgoing_packets_total",
        "counter",
        "Total number of packets sent on a connection",
        |s| read(&s.send_cnt),
    ),
];

fn render_connections(filter: &Filter, connections: &[Arc<ConnectionEntry>], f: &mut Family<'_>) {
    let labelled: Vec<(String, &ConnectionEntry)> = connections
        .iter()
        .map(|c| (format!("channel=\"{}\"", label(&c.name())), &**c))
        .collect();
    if filter.wants("connection_coarse_metrics") {
        for (name, kind, help, pick) in &CONNECTION_COARSE {
            emit(
                f,
                name,
                kind,
                help,
                labelled.iter().map(|(l, c)| (l.as_str(), pick(&c.stats))),
            );
        }
    }
    if filter.wants("connection_metrics") {
        for (name, kind, help, pick) in &CONNECTION_PACKETS {
            emit(
                f,
                name,
                kind,
                help,
                labelled.iter().map(|(l, c)| (l.as_str(), pick(&c.stats))),
            );
        }
        let pending = labelled.iter().map(|(l, _)| (l.as_str(), 0));
        emit(
            f,
            "connection_pending_packets",
            "gauge",
            "Number of packets waiting to be sent on a connection",
            pending,
        );
        let channels = labelled
            .iter()
            .map(|(l, c)| (l.as_str(), c.channel_count() as u64));
        emit(
            f,
            "connection_channels",
            "gauge",
            "Channels on a connection",
            channels,
        );
    }
}

/// A channel and how many consumers it has.
type ChannelRow = (String, ChannelDetails, u64);

const CHANNEL_GENERAL: [Series<ChannelRow>; 3] = [
    (
        "channel_consumers",
        "gauge",
        "Consumers on a channel",
        |c| c.2,
    ),
    (
        "consumer_prefetch",
        "gauge",
        "Limit of unacknowledged messages for each consumer",
        |c| u64::from(c.1.prefetch_count),
    ),
    (
        "channel_prefetch",
        "gauge",
        "Total limit of unacknowledged messages for all consumers on a channel",
        |c| u64::from(c.1.global_prefetch_count),
    ),
];

const CHANNEL_EXCHANGE: [Series<ChannelStats>; 4] = [
    ("channel_messages_published_total", "counter", "Total number of messages published into an exchange on a channel", |s| {
        read(&s.publish)
    }),
    ("channel_messages_confirmed_total", "counter", "Total number of messages published into an exchange and confirmed on the channel", |s| {
        read(&s.confirm)
    }),
    ("channel_messages_unroutable_returned_total", "counter", "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable", |s| {
        read(&s.return_unroutable)
    }),
    ("channel_messages_unroutable_dropped_total", "counter", "Total number of messages published as non-mandatory into an exchange and dropped as unroutable", |s| {
        read(&s.drop_unroutable)
    }),
];

const CHANNEL_QUEUE: [Series<ChannelStats>; 7] = [
    (
        "channel_get_ack_total",
        "counter",
        "Total number of messages fetched with basic.get in manual acknowledgement mode",
        |s| read(&s.get),
    ),
    (
        "channel_get_total",
        "counter",
        "Total number of messages fetched with basic.get in automatic acknowledgement mode",
        |s| read(&s.get_no_ack),
    ),
    (
        "channel_messages_delivered_ack_total",
        "counter",
        "Total number of messages delivered to consumers in manual acknowledgement mode",
        |s| read(&s.deliver),
    ),
    (
        "channel_messages_delivered_total",
        "counter",
        "Total number of messages delivered to consumers in automatic acknowledgement mode",
        |s| read(&s.deliver_no_ack),
    ),
    (
        "channel_messages_redelivered_total",
        "counter",
        "Total number of messages redelivered to consumers",
        |s| read(&s.redeliver),
    ),
    (
        "channel_messages_acked_total",
        "counter",
        "Total number of messages acknowledged by consumers",
        |s| read(&s.ack),
    ),
    (
        "channel_get_empty_total",
        "counter",
        "Total number of times basic.get operations fetched no message",
        |s| read(&s.get_empty),
    ),
];

fn render_channels(filter: &Filter, connections: &[Arc<ConnectionEntry>], f: &mut Family<'_>) {
    let general = filter.wants("channel_metrics");
    let exchange = filter.wants("channel_exchange_metrics");
    let queue = filter.wants("channel_queue_metrics");
    if !(general || exchange || queue) {
        return;
    }
    let mut rows: Vec<ChannelRow> = Vec::new();
    for connection in connections {
        let consumers = connection.consumers();
        for channel in connection.channels() {
            let name = format!("{} ({})", connection.name(), channel.number);
            let count = consumers
                .iter()
                .filter(|c| c.channel == channel.number)
                .count();
            rows.push((
                format!("channel=\"{}\"", label(&name)),
                channel,
                count as u64,
            ));
        }
    }
    if general {
        for (name, kind, help, pick) in &CHANNEL_GENERAL {
            emit(
                f,
                name,
                kind,
                help,
                rows.iter().map(|r| (r.0.as_str(), pick(r))),
            );
        }
    }
    let stats_families = exchange
        .then_some(&CHANNEL_EXCHANGE[..])
        .into_iter()
        .chain(queue.then_some(&CHANNEL_QUEUE[..]))
        .flatten();
    for (name, kind, help, pick) in stats_families {
        emit(
            f,
            name,
            kind,
            help,
            rows.iter().map(|r| (r.0.as_str(), pick(&r.1.stats))),
        );
    }
}
