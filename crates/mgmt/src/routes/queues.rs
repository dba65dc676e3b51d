//! `/api/queues`: list, declare, delete, purge and get.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde_json::{json, Map, Value as Json_};
use warren_core::access::{Perm, ResourceKind};
use warren_core::queue::stream::StreamHandle;
use warren_core::queue::{QueueCmd, QueueHandle, SettleOp};
use warren_core::vhost::{QueueDeclare, VHost};

use super::permit::{Permit, Via};
use super::{body_object, listed_vhosts, rate, vhost, API_CONNECTION};
use crate::auth::AuthUser;
use crate::convert::{self, flag, message_to_json, payload_to_json, table_to_json};
use crate::error::{ApiError, ApiResult};
use crate::query::{self, Params};
use crate::ApiState;

/// Most messages one `/get` request takes.
const GET_COUNT_MAX: u64 = 10_000;

pub(crate) fn queue_json(state: &ApiState, queue: &QueueHandle) -> Json_ {
    let def = queue.def();
    let stats = queue.stats();
    let rates = state.rates.queue(&def.vhost, &def.name);
    let messages = stats.messages_ready + stats.messages_unacknowledged;
    let mut body = json!({
        "name": def.name.as_ref(),
        "vhost": def.vhost.as_ref(),
        "type": queue.kind().name(),
        "durable": def.durable,
        "auto_delete": def.auto_delete,
        "exclusive": def.exclusive_owner.is_some(),
        "arguments": table_to_json(&def.arguments),
        "node": state.node,
        "state": "running",
        "policy": null,
        "operator_policy": null,
        "effective_policy_definition": {},
        "exclusive_consumer_tag": null,
        "single_active_consumer_tag": null,
        "head_message_timestamp": null,
        "recoverable_slaves": null,
        "consumers": stats.consumers,
        "messages": messages,
        "messages_details": rate(rates.messages),
        "messages_ready": stats.messages_ready,
        "messages_ready_details": rate(rates.messages_ready),
        "messages_unacknowledged": stats.messages_unacknowledged,
        "messages_unacknowledged_details": rate(rates.messages_unacknowledged),
        "message_bytes_ready": stats.message_bytes_ready,
        "memory": stats.memory_bytes,
        "message_stats": {
            "publish": stats.published_total, "publish_details": rate(rates.publish),
            "deliver_get": stats.delivered_total, "deliver_get_details": rate(rates.deliver_get),
            "ack": stats.acknowledged_total, "ack_details": rate(rates.ack),
            "redeliver": stats.redelivered_total, "redeliver_details": rate(rates.redeliver),
        },
    });
    if let Some(stream) = queue.stream() {
        stream_figures(&mut body, stream);
        // Stream-protocol subscriptions read the log without the queue knowing of them;
        // RabbitMQ counts them among the stream's consumers.
        let registry = state.broker.registry();
        let subscriptions = registry.stream_subscriptions(&def.vhost, &def.name);
        body["consumers"] = json!(stats.consumers + subscriptions as u64);
    }
    body
}

/// A stream's figures, read from its log: RabbitMQ's stream queue info items (`messages`,
/// `committed_offset`, `committed_chunk_id`, `segments`, `first_timestamp`, -1 when the
/// stream is empty as osiris' counters say) and Warren's `first_offset` and the log's size in
/// `message_bytes`. A stream has nothing unacknowledged: every record stays readable.
fn stream_figures(body: &mut Json_, stream: &StreamHandle) {
    let log = stream.view().stats();
    let messages = log.next_offset.saturating_sub(log.first_offset);
    let last_offset = log
        .next_offset
        .checked_sub(1)
        .map_or(-1, |o| i64::try_from(o).unwrap_or(i64::MAX));
    let last_chunk = stream
        .view()
        .last_chunk_offset()
        .map_or(-1, |o| i64::try_from(o).unwrap_or(i64::MAX));
    let figures = json!({
        "messages": messages,
        "messages_ready": messages,
        "messages_unacknowledged": 0,
        "message_bytes": log.bytes,
        "segments": log.segments,
        "first_offset": log.first_offset,
        "committed_offset": last_offset,
        "committed_chunk_id": last_chunk,
        "first_timestamp": log.first_timestamp_ms.unwrap_or(-1),
    });
    if let (Some(body), Json_::Object(figures)) = (body.as_object_mut(), figures) {
        body.extend(figures);
    }
}

fn queues_of(state: &ApiState, vhosts: &[Arc<VHost>]) -> Vec<Json_> {
    vhosts
        .iter()
        .flat_map(|v| v.queue_handles())
        .filter(|q| !q.name().starts_with("amq.rabbitmq.reply-to."))
        .map(|q| queue_json(state, &q))
        .collect()
}

pub async fn list(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = queues_of(&state, &listed_vhosts(&state, &user));
    Ok(Json(query::list(items, &params, &["vhost", "name"])?))
}

pub async fn list_in(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path(vhost_name): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = queues_of(&state, &[vhost(&state, &user, &vhost_name)?]);
    Ok(Json(query::list(items, &params, &["vhost", "name"])?))
}

pub(crate) fn find(vhost: &VHost, name: &str) -> ApiResult<QueueHandle> {
    vhost
        .snapshot()
        .queue(name)
        .cloned()
        .ok_or_else(ApiError::not_found)
}

pub async fn one(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    let queue = find(&vhost, &name)?;
    let mut item = queue_json(&state, &queue);
    let consumers = super::connections::consumers_of_queue(&state, &vhost_name, &name);
    item["consumer_details"] = Json_::Array(consumers);
    Ok(Json(query::project_one(item, &params)))
}

pub async fn declare(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    let body = body_object(&body)?;
    let mut arguments = convert::json_to_table(body.get("arguments"))?;
    add_queue_type(&body, &mut arguments)?;
    let permit = Permit::new(&state, &user, &vhost, Via::DirectRequest);
    permit.check(Perm::Configure, ResourceKind::Queue, &name)?;
    let dlx = arguments.get("x-dead-letter-exchange");
    if let Some(dlx) = dlx.and_then(warren_core::value::Value::as_str) {
        permit.check(Perm::Write, ResourceKind::Exchange, dlx)?;
        permit.check(Perm::Read, ResourceKind::Queue, &name)?;
    }
    let existed = vhost.snapshot().queue(&name).is_some();
    vhost
        .declare_queue(
            QueueDeclare {
                name,
                passive: false,
                durable: flag(&body, "durable", true)?,
                exclusive: false,
                auto_delete: flag(&body, "auto_delete", false)?,
                arguments,
            },
            API_CONNECTION,
        )
        .await
        .map_err(|error| permit.refusal(error))?;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    })
}

/// The request's `queue_type` (as rabbitmqadmin sends it) as an `x-queue-type` argument, when
/// the arguments name none: which types exist is core's decision (`QueueType`), so a type
/// Warren lacks gets the same refusal here as over AMQP (400 `bad_request` with RabbitMQ's
/// 406 text, as RabbitMQ's API answers a refused declare).
fn add_queue_type(
    body: &Map<String, Json_>,
    arguments: &mut warren_core::value::Table,
) -> ApiResult<()> {
    if arguments.contains_key("x-queue-type") {
        return Ok(());
    }
    match body.get("queue_type") {
        None | Some(Json_::Null) => Ok(()),
        Some(Json_::String(kind)) => {
            arguments.insert(
                "x-queue-type".into(),
                warren_core::value::Value::Str(kind.clone()),
            );
            Ok(())
        }
        Some(other) => Err(ApiError::bad_request(format!(
            "queue_type must be a string, got {other}"
        ))),
    }
}

pub async fn delete(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<StatusCode> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    find(&vhost, &name)?;
    let permit = Permit::new(&state, &user, &vhost, Via::DirectRequest);
    permit.check(Perm::Configure, ResourceKind::Queue, &name)?;
    let if_empty = params.get("if-empty").is_some_and(|v| v == "true");
    let if_unused = params.get("if-unused").is_some_and(|v| v == "true");
    vhost
        .delete_queue(&name, if_unused, if_empty, API_CONNECTION)
        .await
        .map_err(|error| permit.refusal(error))?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn purge(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    find(&vhost, &name)?;
    let permit = Permit::new(&state, &user, &vhost, Via::DirectRequest);
    permit.check(Perm::Read, ResourceKind::Queue, &name)?;
    vhost
        .purge_queue(&name, API_CONNECTION)
        .await
        .map_err(|error| permit.refusal(error))?;
    Ok(StatusCode::NO_CONTENT)
}

/// POST `/get`: takes up to `count` messages, then acks, requeues or rejects them all
/// (`ackmode`), so that one request sees `count` different messages.
pub async fn get_messages(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<Json_>> {
    let vhost = vhost(&state, &user, &vhost_name)?;
    let queue = find(&vhost, &name)?;
    let body = body_object(&body)?;
    let count = match body.get("count") {
        None => 1,
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .ok_or_else(|| ApiError::bad_request("count must be a positive integer"))?,
    }
    .min(GET_COUNT_MAX);
    let settle = match convert::text(&body, "ackmode") {
        "ack_requeue_false" => SettleOp::Ack,
        "reject_requeue_false" => SettleOp::Discard,
        "ack_requeue_true" | "reject_requeue_true" | "" => SettleOp::Requeue,
        other => return Err(ApiError::bad_request(format!("unknown ackmode {other}"))),
    };
    let encoding = match convert::text(&body, "encoding") {
        "" | "auto" => "auto",
        "base64" => "base64",
        other => return Err(ApiError::bad_request(format!("unknown encoding {other}"))),
    };
    let truncate = body
        .get("truncate")
        .and_then(Json_::as_u64)
        .and_then(|t| usize::try_from(t).ok());
    Permit::new(&state, &user, &vhost, Via::Channel).check(
        Perm::Read,
        ResourceKind::Queue,
        &name,
    )?;
    // In its own task: a client that goes away mid-request must not leave the messages it
    // took unacknowledged for good.
    let taking = tokio::spawn(take_messages(queue, count, settle, encoding, truncate));
    let out = taking
        .await
        .map_err(|error| ApiError::bad_request(format!("get failed: {error}")))??;
    Ok(Json(Json_::Array(out)))
}

/// Gets up to `count` messages, then settles them all with `settle`.
async fn take_messages(
    queue: QueueHandle,
    count: u64,
    settle: SettleOp,
    encoding: &'static str,
    truncate: Option<usize>,
) -> ApiResult<Vec<Json_>> {
    let mut out = Vec::new();
    let mut seqs = Vec::new();
    for _ in 0..count {
        let reply = queue
            .request(|reply| QueueCmd::Get {
                channel: 0,
                no_ack: false,
                reply,
            })
            .await;
        let Ok(Some(got)) = reply else { break };
        let delivery = got.delivery;
        seqs.push(delivery.seq);
        out.push(message_json(&delivery, got.remaining, encoding, truncate));
    }
    if !seqs.is_empty() {
        queue.send(QueueCmd::Settle { op: settle, seqs }).await?;
    }
    Ok(out)
}

fn message_json(
    delivery: &warren_core::consumer::Delivery,
    remaining: u32,
    encoding: &str,
    truncate: Option<usize>,
) -> Json_ {
    let message = &delivery.message;
    let (properties, body) = message_to_json(message);
    let payload_bytes = body.len();
    let body = &body[..body.len().min(truncate.unwrap_or(usize::MAX))];
    let (payload, payload_encoding) = payload_to_json(body, encoding);
    json!({
        "payload_bytes": payload_bytes,
        "redelivered": delivery.redelivered,
        "exchange": String::from_utf8_lossy(&message.exchange),
        "routing_key": String::from_utf8_lossy(&message.routing_key),
        "message_count": remaining,
        "properties": properties,
        "payload": payload,
        "payload_encoding": payload_encoding,
    })
}

/// RabbitMQ's aliveness test: declare `aliveness-test`, publish a message to it, get it,
/// each with the permission it needs over AMQP, as RabbitMQ's test did on a channel opened
/// as the user (`with_channel`).
pub(crate) async fn aliveness(
    state: &ApiState,
    user: &AuthUser,
    vhost: &Arc<VHost>,
) -> ApiResult<bool> {
    const QUEUE: &str = "aliveness-test";
    let permit = Permit::new(state, user, vhost, Via::Channel);
    permit.check(Perm::Configure, ResourceKind::Queue, QUEUE)?;
    permit.check(Perm::Write, ResourceKind::Exchange, "")?;
    permit.check(Perm::Read, ResourceKind::Queue, QUEUE)?;
    let queue = vhost
        .declare_queue(
            QueueDeclare {
                name: QUEUE.into(),
                passive: false,
                durable: false,
                exclusive: false,
                auto_delete: false,
                arguments: Default::default(),
            },
            API_CONNECTION,
        )
        .await?;
    let properties = Bytes::from_static(&[0, 0]);
    super::exchanges::publish_message(
        state.broker.registry().counters(),
        vhost,
        "",
        QUEUE,
        properties,
        Bytes::from_static(b"test_message"),
    )
    .await?;
    let reply = queue
        .request(|reply| QueueCmd::Get {
            channel: 0,
            no_ack: true,
            reply,
        })
        .await?;
    Ok(reply.is_some_and(|got| got.delivery.message.body == b"test_message"[..]))
}
