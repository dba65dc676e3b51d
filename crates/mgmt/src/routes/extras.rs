//! RabbitMQ 4.x routes served from what Warren already keeps: users bulk-delete and
//! without-permissions, runtime and global parameters (read-only), a vhost's definitions,
//! queue actions, password hashing.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde_json::{json, Map, Value as Json_};
use warren_core::access::format::Definitions;
use warren_core::access::password::{hash_password, HashingAlgorithm};

use super::access::{require, user_json, ADMINISTRATOR};
use super::{body_object, queues, vhost};
use crate::auth::AuthUser;
use crate::error::{ApiError, ApiResult};
use crate::query::{self, Params};
use crate::ApiState;

/// `POST /api/users/bulk-delete` `{"users": [...]}`: deletes each user that exists (RabbitMQ
/// ignores the others), 204.
pub async fn bulk_delete_users(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    let body = body_object(&body)?;
    let Some(Json_::Array(users)) = body.get("users") else {
        return Err(ApiError::bad_request(
            "[{key_missing,users}]: the body must be {\"users\": [\"name\", ...]}",
        ));
    };
    let names: Vec<&str> = users.iter().filter_map(Json_::as_str).collect();
    if names.len() != users.len() {
        return Err(ApiError::bad_request("users must be a list of user names"));
    }
    let access = state.broker.access();
    for name in names {
        if access.user(name).is_some() {
            access.delete_user(name).await?;
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/users/without-permissions`: users with no permissions in any vhost.
pub async fn users_without_permissions(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    require(&auth, ADMINISTRATOR)?;
    let access = state.broker.access();
    let permitted: Vec<String> = access.permissions().into_iter().map(|p| p.user).collect();
    let items = access
        .users()
        .iter()
        .filter(|user| !permitted.contains(&user.name))
        .map(user_json)
        .collect();
    Ok(Json(query::list(items, &params, &["name"])?))
}

/// The runtime parameters Warren has (vhost limits and operator policies, as RabbitMQ's
/// `vhost-limits` and `operator_policy` components), optionally of one component and vhost.
fn parameters_of(state: &ApiState, component: Option<&str>, vhost: Option<&str>) -> Vec<Json_> {
    state
        .broker
        .export_definitions()
        .parameters
        .into_iter()
        .filter(|p| component.is_none_or(|c| p.component == c))
        .filter(|p| vhost.is_none_or(|v| p.vhost == v))
        .map(|p| json!({"vhost": p.vhost, "component": p.component, "name": p.name, "value": p.value}))
        .collect()
}

/// `GET /api/parameters[/{component}[/{vhost}]]` (policymakers and administrators).
pub async fn parameters(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    path: Option<Path<Vec<String>>>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    require(&auth, &["administrator", "policymaker"])?;
    let segments = path.map(|Path(s)| s).unwrap_or_default();
    let (component, vhost_name) = (segments.first(), segments.get(1));
    if let Some(name) = vhost_name {
        vhost(&state, &auth, name)?;
    }
    let items = parameters_of(
        &state,
        component.map(String::as_str),
        vhost_name.map(String::as_str),
    );
    Ok(Json(query::list(items, &params, &["vhost", "name"])?))
}

/// `GET /api/parameters/{component}/{vhost}/{name}`.
pub async fn parameter(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((component, vhost_name, name)): Path<(String, String, String)>,
) -> ApiResult<Json<Json_>> {
    require(&auth, &["administrator", "policymaker"])?;
    vhost(&state, &auth, &vhost_name)?;
    parameters_of(&state, Some(&component), Some(&vhost_name))
        .into_iter()
        .find(|p| p["name"] == name.as_str())
        .map(Json)
        .ok_or_else(ApiError::not_found)
}

fn global_parameters_of(state: &ApiState) -> Vec<Json_> {
    let identity = state.broker.identity();
    vec![json!({"name": "cluster_name", "value": identity.cluster_name()})]
}

/// `GET /api/global-parameters`: RabbitMQ keeps the cluster name there.
pub async fn global_parameters(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    require(&auth, &["administrator", "policymaker"])?;
    Ok(Json(query::list(
        global_parameters_of(&state),
        &params,
        &["name"],
    )?))
}

/// `GET /api/global-parameters/{name}`.
pub async fn global_parameter(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
) -> ApiResult<Json<Json_>> {
    require(&auth, &["administrator", "policymaker"])?;
    global_parameters_of(&state)
        .into_iter()
        .find(|p| p["name"] == name.as_str())
        .map(Json)
        .ok_or_else(ApiError::not_found)
}

/// The parts of a definitions document that belong to one vhost.
const VHOST_PARTS: [&str; 5] = ["parameters", "policies", "queues", "exchanges", "bindings"];

/// `GET /api/definitions/{vhost}`: the vhost's parameters, policies, queues, exchanges and
/// bindings, without their `vhost` field (RabbitMQ's per-vhost export).
pub async fn export_vhost_definitions(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
) -> ApiResult<Json<Json_>> {
    require(&auth, ADMINISTRATOR)?;
    vhost(&state, &auth, &name)?;
    let identity = state.broker.identity();
    let all = serde_json::to_value(state.broker.export_definitions())
        .map_err(|e| ApiError::bad_request(format!("cannot export definitions: {e}")))?;
    let mut out = Map::new();
    out.insert("rabbit_version".into(), json!(identity.version()));
    out.insert("rabbitmq_version".into(), json!(identity.version()));
    out.insert("product_name".into(), json!(identity.product()));
    out.insert("product_version".into(), json!(identity.version()));
    for part in VHOST_PARTS {
        let items: Vec<Json_> = all[part]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|item| item["vhost"] == name.as_str())
            .cloned()
            .map(|mut item| {
                if let Some(object) = item.as_object_mut() {
                    object.remove("vhost");
                }
                item
            })
            .collect();
        out.insert(part.into(), Json_::Array(items));
    }
    Ok(Json(Json_::Object(out)))
}

/// `POST /api/definitions/{vhost}`: imports a document's vhost parts into that vhost (their
/// own `vhost` fields are replaced); users, vhosts and permissions are refused.
pub async fn import_vhost_definitions(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    vhost(&state, &auth, &name)?;
    let mut document = body_object(&body)?;
    for part in ["users", "vhosts", "permissions", "topic_permissions"] {
        if document
            .get(part)
            .is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty()))
        {
            return Err(ApiError::bad_request(format!(
                "a vhost's definitions cannot hold {part}: import them with POST /api/definitions"
            )));
        }
    }
    for part in VHOST_PARTS {
        for item in document
            .get_mut(part)
            .and_then(Json_::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(object) = item.as_object_mut() {
                object.insert("vhost".into(), json!(name));
            }
        }
    }
    let definitions: Definitions = serde_json::from_value(Json_::Object(document))
        .map_err(|error| ApiError::bad_request(format!("bad definitions document: {error}")))?;
    state.broker.import_definitions(&definitions).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/queues/{vhost}/{queue}/actions`: RabbitMQ 4.x has no queue actions left (sync
/// and cancel_sync went with classic mirroring): any action is 400, as there.
pub async fn queue_actions(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost_name, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    let vhost = vhost(&state, &auth, &vhost_name)?;
    queues::find(&vhost, &name)?;
    let body = body_object(&body)?;
    match body.get("action") {
        None => Err(ApiError::bad_request("[{key_missing,action}]")),
        Some(action) => Err(ApiError::bad_request(format!(
            "{{unknown,{action}}}: RabbitMQ 4.x and Warren have no queue actions"
        ))),
    }
}

/// `GET /api/auth/hash_password/{password}`: `{"ok": hash}`, a salted SHA-256 hash as
/// `password_hash` in definitions holds it.
pub async fn hash(Path(password): Path<String>) -> Json<Json_> {
    Json(json!({"ok": hash_password(HashingAlgorithm::default(), &password)}))
}
