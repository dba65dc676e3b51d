//! The stream families of `/metrics` and `/metrics/per-object`, with RabbitMQ's names:
//! `rabbitmq_global_publishers` and `rabbitmq_global_consumers` for `protocol="stream"` (the
//! stream protocol's publishers and subscriptions now), `rabbitmq_stream_segments` (segment
//! files of the stream logs) and `rabbitmq_stream_consumer_max_offset_lag` (the highest
//! subscription offset lag). Aggregated they are one sample each; per object the last two
//! are one series per stream, labelled `vhost` and `queue`.

use std::collections::BTreeMap;

use crate::prometheus::{label, Family};
use crate::routes::streams::offset_lag;
use crate::ApiState;

/// Per stream (vhost, name): its segment count and its consumers' highest offset lag.
type PerStream = BTreeMap<(String, String), (u64, u64)>;

/// A stream family: name, type, help, the figure it shows, and whether `/metrics` gives the
/// highest (rather than the sum) over the streams.
type StreamFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&(u64, u64)) -> u64,
    bool,
);

pub(crate) fn render(state: &ApiState, f: &mut Family<'_>, per_object: bool) {
    let (publishers, consumers, mut streams) = registry_figures(state);
    add_segments(state, &mut streams);
    let protocol = "protocol=\"stream\"";
    f.header(
        "rabbitmq_global_publishers",
        "gauge",
        "Current number of publishers",
    );
    f.sample("rabbitmq_global_publishers", protocol, publishers);
    f.header(
        "rabbitmq_global_consumers",
        "gauge",
        "Current number of consumers",
    );
    f.sample("rabbitmq_global_consumers", protocol, consumers);
    let families: [StreamFamily; 2] = [
        (
            "rabbitmq_stream_segments",
            "counter",
            "Total number of stream segment files",
            |s| s.0,
            false,
        ),
        (
            "rabbitmq_stream_consumer_max_offset_lag",
            "gauge",
            "Highest consumer offset lag",
            |s| s.1,
            true,
        ),
    ];
    for (name, kind, help, pick, max) in families {
        f.header(name, kind, help);
        if per_object {
            for ((vhost, queue), figures) in &streams {
                let labels = format!("vhost=\"{}\",queue=\"{}\"", label(vhost), label(queue));
                f.sample(name, &labels, pick(figures));
            }
        } else if max {
            f.sample(name, "", streams.values().map(pick).max().unwrap_or(0));
        } else {
            f.sample(name, "", streams.values().map(pick).sum::<u64>());
        }
    }
}

/// Stream publishers and consumers now, and each consumed stream's highest offset lag.
fn registry_figures(state: &ApiState) -> (usize, usize, PerStream) {
    let (mut publishers, mut consumers) = (0, 0);
    let mut streams = PerStream::new();
    for entry in state.broker.registry().connections() {
        publishers += entry.stream_publishers().len();
        for consumer in entry.stream_consumers() {
            consumers += 1;
            let [consumed, offset] = consumer.counters.snapshot();
            let lag = offset_lag(state, &entry, &consumer, consumed, offset);
            let key = (entry.details.vhost.to_string(), consumer.stream.to_string());
            let figures = streams.entry(key).or_default();
            figures.1 = figures.1.max(lag);
        }
    }
    (publishers, consumers, streams)
}

/// Every stream of every vhost, with its segment count.
fn add_segments(state: &ApiState, streams: &mut PerStream) {
    for vhost_name in state.broker.vhost_names() {
        let Some(vhost) = state.broker.vhost(&vhost_name) else {
            continue;
        };
        for queue in vhost.queue_handles() {
            if let Some(stream) = queue.stream() {
                let key = (vhost_name.clone(), queue.name().to_string());
                streams.entry(key).or_default().0 = u64::from(stream.view().stats().segments);
            }
        }
    }
}
