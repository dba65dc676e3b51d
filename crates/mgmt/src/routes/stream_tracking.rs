//! `GET /api/stream/{vhost}/{queue}/tracking`: the consumer offsets and writer sequences a
//! stream keeps in its log, as RabbitMQ's stream management plugin answers it
//! (`rabbit_stream_tracking_mgmt`):
//!
//! ```text
//! {"offsets": {"<consumer reference>": <offset>, ...},
//!  "writers": {"<producer reference>": <last publishing id>, ...}}
//! ```
//!
//! `?type=offset` keeps only `offsets`, `?type=writer` only `writers`; `all`, no `type`, or
//! any other value answers both, as RabbitMQ's `tracking_type/1` does. Access is RabbitMQ's:
//! the vhost's (404 for no such vhost, 401 without permissions in it), then read permission
//! on the stream (401 `Access refused.`, administrators included: permissions decide). A
//! queue that does not exist or is not a stream is 404.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde_json::{Map, Value as Json_};
use warren_core::access::{Perm, ResourceKind};

use super::permit::{Permit, Via};
use crate::auth::AuthUser;
use crate::error::{ApiError, ApiResult};
use crate::query::Params;
use crate::ApiState;

pub async fn tracking(
    State(state): State<Arc<ApiState>>,
    Extension(user): Extension<AuthUser>,
    Path((vhost_name, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let vhost = super::vhost(&state, &user, &vhost_name)?;
    let queue = super::queues::find(&vhost, &name)?;
    Permit::new(&state, &user, &vhost, Via::DirectRequest).check(
        Perm::Read,
        ResourceKind::Queue,
        &name,
    )?;
    let stream = queue.stream().ok_or_else(ApiError::not_found)?;
    // The stream may be deleted between the lookup and the question: then it is not found.
    let snapshot = stream.tracking().await.map_err(|_| ApiError::not_found())?;
    let (offsets, writers) = match params.get("type").map(String::as_str) {
        Some("offset") => (true, false),
        Some("writer") => (false, true),
        _ => (true, true),
    };
    let mut body = Map::new();
    if offsets {
        body.insert("offsets".into(), by_reference(snapshot.offsets));
    }
    if writers {
        body.insert("writers".into(), by_reference(snapshot.writers));
    }
    Ok(Json(Json_::Object(body)))
}

/// `{"<reference>": value, ...}`.
fn by_reference(pairs: Vec<(String, u64)>) -> Json_ {
    Json_::Object(
        pairs
            .into_iter()
            .map(|(reference, value)| (reference, Json_::from(value)))
            .collect(),
    )
}
