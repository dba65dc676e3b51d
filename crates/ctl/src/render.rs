//! What the commands print from the API's answers (pure: JSON in, text out).

use serde_json::Value;

use crate::plan::{LISTENERS, TRACKING};
use crate::table::{cell, field, format_items, format_table};

/// `status`: GET /api/overview as a key/value table and the listeners.
pub fn status(overview: &Value) -> String {
    let text = |path: &str| cell(field(overview, path));
    let mut product = match (text("product_name"), text("product_version")) {
        (name, version) if !name.is_empty() => format!("{name} {version}"),
        _ => format!("RabbitMQ {}", text("rabbitmq_version")),
    };
    // Warren reports RabbitMQ's product and names itself in `warren_product`/`warren_version`.
    if let ("Warren", version) = (text("warren_product").as_str(), text("warren_version")) {
        product = format!("{product} (Warren {version})");
    }
    let totals = |prefix: &str, keys: &[&str]| {
        keys.iter()
            .map(|key| {
                let value = text(&format!("{prefix}.{key}"));
                format!("{key}={}", if value.is_empty() { "0" } else { &value })
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let rows = vec![
        vec!["product".to_string(), product],
        vec!["management".to_string(), text("management_version")],
        vec!["erlang".to_string(), text("erlang_version")],
        vec!["node".to_string(), text("node")],
        vec!["cluster".to_string(), text("cluster_name")],
        vec![
            "messages".to_string(),
            totals(
                "queue_totals",
                &["messages", "messages_ready", "messages_unacknowledged"],
            ),
        ],
        vec![
            "objects".to_string(),
            totals(
                "object_totals",
                &[
                    "connections",
                    "channels",
                    "exchanges",
                    "queues",
                    "consumers",
                ],
            ),
        ],
    ];
    let mut out = format_table(&["key", "value"], &rows);
    out.push_str("listeners:\n");
    out.push_str(&format_items(
        overview.get("listeners").unwrap_or(&Value::Null),
        LISTENERS,
    ));
    out
}

/// `alarms`: the text and whether an alarm is in effect. RabbitMQ answers 200
/// {"status":"ok"} or 503 {"status":"failed","reason":...,"alarms":[{"node","resource"}]}.
pub fn alarms(status: u16, answer: &Value) -> (String, bool) {
    let ok = (200..300).contains(&status)
        && answer.get("status").and_then(Value::as_str).unwrap_or("ok") == "ok";
    if ok {
        return ("no alarms in effect\n".to_string(), false);
    }
    let mut out = String::from("alarms in effect");
    if let Some(reason) = answer.get("reason").and_then(Value::as_str) {
        out.push_str(&format!(": {reason}"));
    }
    out.push('\n');
    if let Some(alarms) = answer.get("alarms").filter(|a| a.is_array()) {
        out.push_str(&format_items(
            alarms,
            &[("node", "node"), ("resource", "resource")],
        ));
    }
    (out, true)
}

/// `publish`: whether the message was routed.
pub fn routed(answer: &Value) -> String {
    match answer.get("routed").and_then(Value::as_bool) {
        Some(routed) => format!("routed: {routed}\n"),
        None => format!("unexpected answer: {answer}\n"),
    }
}

/// `list stream-tracking`: one row per tracked reference, consumer offsets first, each sorted
/// by reference; "No items" for a stream that tracks nothing.
pub fn tracking(answer: &Value) -> String {
    let mut rows = Vec::new();
    for (key, kind) in [("offsets", "offset"), ("writers", "writer")] {
        let Some(Value::Object(map)) = answer.get(key) else {
            continue;
        };
        let mut references: Vec<(&String, &Value)> = map.iter().collect();
        references.sort_by(|a, b| a.0.cmp(b.0));
        rows.extend(references.into_iter().map(|(reference, value)| {
            serde_json::json!({"reference": reference, "type": kind, "value": value})
        }));
    }
    format_items(&Value::Array(rows), TRACKING)
}
