//! `/api/users`, `/api/vhosts`, `/api/permissions`, `/api/topic-permissions`,
//! `/api/policies`, `/api/operator-policies`, `/api/vhost-limits` and `/api/definitions`:
//! the broker-wide definitions, with RabbitMQ's paths, bodies and tag rules (administrator
//! for users, vhosts, permissions, limits and definitions; policymaker or administrator to
//! read or change one policy; any management user lists the policies of their vhosts).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde_json::{json, Map, Value as Json_};
use warren_core::access::format::{
    parse_tags, Definitions, PermissionDef, TopicPermissionDef, UserDef, VHostLimits, VHostMetadata,
};
use warren_core::access::password::HashingAlgorithm;
use warren_core::access::policy::PolicyRecord;

use super::{body_object, visible_vhost};
use crate::auth::AuthUser;
use crate::error::{ApiError, ApiResult};
use crate::query::{self, Params};
use crate::ApiState;

pub(crate) const ADMINISTRATOR: &[&str] = &["administrator"];

/// Refuses a user whose tags include none of `tags`, as RabbitMQ does (401).
pub(crate) fn require(user: &AuthUser, tags: &[&str]) -> ApiResult<()> {
    if user.tags.iter().any(|t| tags.contains(&t.as_str())) {
        return Ok(());
    }
    Err(ApiError::not_authorised(format!(
        "Not {} user",
        match tags {
            [only] => (*only).to_string(),
            _ => tags.join(" or "),
        }
    )))
}

fn created(existed: bool) -> StatusCode {
    if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    }
}

fn string_field(body: &Map<String, Json_>, key: &str) -> ApiResult<Option<String>> {
    match body.get(key) {
        None | Some(Json_::Null) => Ok(None),
        Some(Json_::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ApiError::bad_request(format!(
            "{key} must be a string, got {other}"
        ))),
    }
}

fn tags_field(body: &Map<String, Json_>) -> ApiResult<Vec<String>> {
    match body.get("tags") {
        None | Some(Json_::Null) => Ok(Vec::new()),
        Some(Json_::String(s)) => Ok(parse_tags(s)),
        Some(Json_::Array(items)) => items
            .iter()
            .map(|t| {
                t.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::bad_request("tags must be strings"))
            })
            .collect(),
        Some(other) => Err(ApiError::bad_request(format!(
            "tags must be a string or a list, got {other}"
        ))),
    }
}

// ---- users ----

pub(crate) fn user_json(user: &UserDef) -> Json_ {
    json!({
        "name": user.name,
        "password_hash": user.password_hash,
        "hashing_algorithm": user.hashing_algorithm,
        "tags": user.tags,
        "limits": user.limits,
    })
}

pub async fn users(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    require(&auth, ADMINISTRATOR)?;
    let items = state
        .broker
        .access()
        .users()
        .iter()
        .map(user_json)
        .collect();
    Ok(Json(query::list(items, &params, &["name"])?))
}

pub async fn user(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
) -> ApiResult<Json<Json_>> {
    require(&auth, ADMINISTRATOR)?;
    let user = state
        .broker
        .access()
        .user(&name)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(user_json(&user)))
}

/// PUT `{"password": "..", "tags": "administrator"}` or with `password_hash` (and
/// `hashing_algorithm`) instead of `password`.
pub async fn put_user(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    let body = body_object(&body)?;
    let password = string_field(&body, "password")?;
    let hash = string_field(&body, "password_hash")?;
    let algorithm = match body.get("hashing_algorithm") {
        None | Some(Json_::Null) => HashingAlgorithm::default(),
        Some(value) => serde_json::from_value(value.clone()).map_err(|_| {
            ApiError::bad_request(format!(
                "unknown hashing_algorithm {value}: use rabbit_password_hashing_sha256, \
                 rabbit_password_hashing_sha512 or rabbit_password_hashing_md5"
            ))
        })?,
    };
    let access = state.broker.access();
    let existed = access.user(&name).is_some();
    if !existed && password.is_none() && hash.is_none() {
        return Err(ApiError::bad_request(
            "Must specify either password or password_hash",
        ));
    }
    access
        .put_user(
            &name,
            password.as_deref(),
            hash.as_deref().map(|h| (h, algorithm)),
            tags_field(&body)?,
        )
        .await?;
    Ok(created(existed))
}

pub async fn delete_user(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    state.broker.access().delete_user(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn user_permissions(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
) -> ApiResult<Json<Json_>> {
    require(&auth, ADMINISTRATOR)?;
    let access = state.broker.access();
    access.user(&name).ok_or_else(ApiError::not_found)?;
    Ok(json_array(access.permissions(), |p| p.user == name))
}

pub async fn user_topic_permissions(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
) -> ApiResult<Json<Json_>> {
    require(&auth, ADMINISTRATOR)?;
    let access = state.broker.access();
    access.user(&name).ok_or_else(ApiError::not_found)?;
    Ok(json_array(access.topic_permissions(), |p| p.user == name))
}

/// Grants of one kind (`permissions()` or `topic_permissions()`) that `keep` picks, as the
/// JSON array the per-user and per-vhost routes answer.
fn json_array<T: serde::Serialize>(items: Vec<T>, keep: impl Fn(&T) -> bool) -> Json<Json_> {
    Json(Json_::Array(
        items.into_iter().filter(keep).map(|p| json!(p)).collect(),
    ))
}

// ---- vhosts ----

fn vhost_json(state: &ApiState, name: &str) -> Option<Json_> {
    let record = state.broker.access().vhost_record(name)?;
    let metadata = &record.metadata;
    let mut item = json!({
        "name": record.name,
        "description": metadata.description,
        "tags": metadata.tags,
        "metadata": metadata,
        "tracing": false,
        "cluster_state": {state.node.clone(): "running"},
    });
    if let Some(default_queue_type) = &metadata.default_queue_type {
        item["default_queue_type"] = json!(default_queue_type);
    }
    if let Some(vhost) = state.broker.vhost(name) {
        item["connections"] = json!(vhost.connection_count());
    }
    Some(item)
}

/// The vhosts the user may know of: all for monitors, else those with permissions.
pub async fn vhosts(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    let items = state
        .broker
        .access()
        .vhost_records()
        .iter()
        .filter(|v| visible_vhost(&state, &auth, &v.name))
        .filter_map(|v| vhost_json(&state, &v.name))
        .collect();
    Ok(Json(query::list(items, &params, &["name"])?))
}

/// One vhost, for administrators (as RabbitMQ's `rabbit_mgmt_wm_vhost`).
pub async fn vhost(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
) -> ApiResult<Json<Json_>> {
    require(&auth, ADMINISTRATOR)?;
    vhost_json(&state, &name)
        .map(Json)
        .ok_or_else(ApiError::not_found)
}

/// PUT `{"description": "..", "tags": "a,b", "default_queue_type": "classic"}`.
pub async fn put_vhost(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    let body = body_object(&body)?;
    let existed = state.broker.vhost(&name).is_some();
    let metadata = VHostMetadata {
        description: string_field(&body, "description")?.unwrap_or_default(),
        tags: tags_field(&body)?,
        default_queue_type: string_field(&body, "default_queue_type")?,
    };
    state.broker.add_vhost(&name, metadata).await?;
    if !existed {
        grant_full_permissions(&state, &auth, &name).await?;
    }
    Ok(created(existed))
}

/// The user who creates a vhost gets full permissions in it, as RabbitMQ's `put_vhost`
/// (`maybe_grant_full_permissions`) does: resource permissions bind administrators too.
async fn grant_full_permissions(state: &ApiState, auth: &AuthUser, vhost: &str) -> ApiResult<()> {
    let all = || ".*".to_string();
    state
        .broker
        .access()
        .set_permissions(PermissionDef {
            user: auth.name.clone(),
            vhost: vhost.to_string(),
            configure: all(),
            write: all(),
            read: all(),
        })
        .await?;
    Ok(())
}

pub async fn delete_vhost(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    state.broker.delete_vhost(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn vhost_permissions(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
) -> ApiResult<Json<Json_>> {
    require(&auth, ADMINISTRATOR)?;
    state.broker.vhost(&name).ok_or_else(ApiError::not_found)?;
    Ok(json_array(state.broker.access().permissions(), |p| {
        p.vhost == name
    }))
}

pub async fn vhost_topic_permissions(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(name): Path<String>,
) -> ApiResult<Json<Json_>> {
    require(&auth, ADMINISTRATOR)?;
    state.broker.vhost(&name).ok_or_else(ApiError::not_found)?;
    Ok(json_array(state.broker.access().topic_permissions(), |p| {
        p.vhost == name
    }))
}

// ---- permissions ----

pub async fn permissions(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    require(&auth, ADMINISTRATOR)?;
    let items = state
        .broker
        .access()
        .permissions()
        .into_iter()
        .map(|p| json!(p))
        .collect();
    Ok(Json(query::list(items, &params, &["vhost", "user"])?))
}

pub async fn permission(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, user)): Path<(String, String)>,
) -> ApiResult<Json<Json_>> {
    require(&auth, ADMINISTRATOR)?;
    state
        .broker
        .access()
        .permissions()
        .into_iter()
        .find(|p| p.vhost == vhost && p.user == user)
        .map(|p| Json(json!(p)))
        .ok_or_else(ApiError::not_found)
}

/// PUT `{"configure": ".*", "write": ".*", "read": ".*"}`.
pub async fn put_permission(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, user)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    let body = body_object(&body)?;
    let field = |key: &str| -> ApiResult<String> {
        string_field(&body, key)?
            .ok_or_else(|| ApiError::bad_request(format!("missing field '{key}'")))
    };
    let access = state.broker.access();
    let existed = access
        .permissions()
        .iter()
        .any(|p| p.vhost == vhost && p.user == user);
    access
        .set_permissions(PermissionDef {
            configure: field("configure")?,
            write: field("write")?,
            read: field("read")?,
            user,
            vhost,
        })
        .await?;
    Ok(created(existed))
}

pub async fn delete_permission(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, user)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    state
        .broker
        .access()
        .clear_permissions(&user, &vhost)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- topic permissions ----

pub async fn topic_permissions(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    require(&auth, ADMINISTRATOR)?;
    let items = state
        .broker
        .access()
        .topic_permissions()
        .into_iter()
        .map(|p| json!(p))
        .collect();
    Ok(Json(query::list(items, &params, &["vhost", "user"])?))
}

pub async fn topic_permission(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, user)): Path<(String, String)>,
) -> ApiResult<Json<Json_>> {
    require(&auth, ADMINISTRATOR)?;
    let items: Vec<Json_> = state
        .broker
        .access()
        .topic_permissions()
        .into_iter()
        .filter(|p| p.vhost == vhost && p.user == user)
        .map(|p| json!(p))
        .collect();
    if items.is_empty() {
        return Err(ApiError::not_found());
    }
    Ok(Json(Json_::Array(items)))
}

/// PUT `{"exchange": "amq.topic", "write": "^a", "read": ".*"}`.
pub async fn put_topic_permission(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, user)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    let body = body_object(&body)?;
    let field = |key: &str| -> ApiResult<String> {
        string_field(&body, key)?
            .ok_or_else(|| ApiError::bad_request(format!("missing field '{key}'")))
    };
    state
        .broker
        .access()
        .set_topic_permissions(TopicPermissionDef {
            exchange: field("exchange")?,
            write: field("write")?,
            read: field("read")?,
            user,
            vhost,
        })
        .await?;
    Ok(StatusCode::CREATED)
}

#[derive(serde::Deserialize)]
pub struct ExchangeParam {
    exchange: Option<String>,
}

/// Clears the user's topic permissions in the vhost (one exchange's with `?exchange=`).
pub async fn delete_topic_permission(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, user)): Path<(String, String)>,
    Query(param): Query<ExchangeParam>,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    state
        .broker
        .access()
        .clear_topic_permissions(&user, &vhost, param.exchange.as_deref())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/topic-permissions/{vhost}/{user}/{exchange}`: one exchange's.
pub async fn delete_topic_permission_of(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, user, exchange)): Path<(String, String, String)>,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    state
        .broker
        .access()
        .clear_topic_permissions(&user, &vhost, Some(&exchange))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- policies and operator policies ----

fn policy_json(policy: &PolicyRecord) -> Json_ {
    json!(policy)
}

/// The policies of one vhost or of all the user's: administrators' lists show every vhost,
/// other users' the vhosts they have permissions in (RabbitMQ's `filter_vhost`).
fn policies_in(
    state: &ApiState,
    auth: &AuthUser,
    operator: bool,
    vhost: Option<&str>,
) -> Vec<Json_> {
    state
        .broker
        .access()
        .policies(operator)
        .iter()
        .filter(|p| vhost.is_none_or(|v| p.vhost == v))
        .filter(|p| auth.is_admin() || auth.can_access(&state.broker, &p.vhost))
        .map(policy_json)
        .collect()
}

/// Operator policies are the administrators'; policies the policymakers' too, in the vhosts
/// they have permissions in (RabbitMQ's `is_authorized_policies`: 401 otherwise).
fn require_policy_access(
    state: &ApiState,
    auth: &AuthUser,
    operator: bool,
    vhost: &str,
) -> ApiResult<()> {
    if operator {
        return require(auth, ADMINISTRATOR);
    }
    let exists = state.broker.vhost(vhost).is_some();
    let in_vhost = !exists || auth.can_access(&state.broker, vhost);
    if auth.is_admin() || (auth.is_policymaker() && in_vhost) {
        Ok(())
    } else {
        Err(ApiError::not_authorised(
            "User not authorised to access object",
        ))
    }
}

/// Lists are read-only and open to every management user, filtered by vhost, as in RabbitMQ.
async fn list_policies(
    state: Arc<ApiState>,
    auth: AuthUser,
    operator: bool,
    vhost: Option<String>,
    params: Params,
) -> ApiResult<Json<Json_>> {
    if let Some(name) = &vhost {
        super::vhost(&state, &auth, name)?;
    }
    let items = policies_in(&state, &auth, operator, vhost.as_deref());
    Ok(Json(query::list(items, &params, &["vhost", "name"])?))
}

async fn one_policy(
    state: Arc<ApiState>,
    auth: AuthUser,
    operator: bool,
    vhost: String,
    name: String,
) -> ApiResult<Json<Json_>> {
    require_policy_access(&state, &auth, operator, &vhost)?;
    state
        .broker
        .access()
        .policies(operator)
        .iter()
        .find(|p| p.vhost == vhost && p.name == name)
        .map(|p| Json(policy_json(p)))
        .ok_or_else(ApiError::not_found)
}

/// PUT `{"pattern": "^q", "definition": {"max-length": 10}, "priority": 0,
/// "apply-to": "queues"}`.
async fn put_one_policy(
    state: Arc<ApiState>,
    auth: AuthUser,
    operator: bool,
    vhost: String,
    name: String,
    body: Bytes,
) -> ApiResult<StatusCode> {
    require_policy_access(&state, &auth, operator, &vhost)?;
    let mut body = body_object(&body)?;
    body.insert("vhost".into(), json!(vhost));
    body.insert("name".into(), json!(name));
    if !body.contains_key("pattern") {
        return Err(ApiError::bad_request("missing field 'pattern'"));
    }
    let policy: PolicyRecord = serde_json::from_value(Json_::Object(body))
        .map_err(|error| ApiError::bad_request(format!("bad policy: {error}")))?;
    let existed = state
        .broker
        .access()
        .policies(operator)
        .iter()
        .any(|p| p.vhost == vhost && p.name == name);
    state.broker.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    state.broker.set_policy(policy, operator).await?;
    Ok(created(existed))
}

// The routes of `/api/policies` (`OPERATOR` false) and `/api/operator-policies` (true).

pub async fn policies<const OPERATOR: bool>(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    list_policies(state, auth, OPERATOR, None, params).await
}

pub async fn policies_in_vhost<const OPERATOR: bool>(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> ApiResult<Json<Json_>> {
    list_policies(state, auth, OPERATOR, Some(vhost), params).await
}

pub async fn policy<const OPERATOR: bool>(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<Json<Json_>> {
    one_policy(state, auth, OPERATOR, vhost, name).await
}

pub async fn put_policy<const OPERATOR: bool>(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    put_one_policy(state, auth, OPERATOR, vhost, name, body).await
}

pub async fn delete_policy<const OPERATOR: bool>(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    require_policy_access(&state, &auth, OPERATOR, &vhost)?;
    state.broker.clear_policy(&vhost, &name, OPERATOR).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- vhost limits ----

fn limits_json(vhost: &str, limits: VHostLimits) -> Json_ {
    json!({"vhost": vhost, "value": limits.to_json()})
}

pub async fn vhost_limits(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
) -> ApiResult<Json<Json_>> {
    let items: Vec<Json_> = state
        .broker
        .access()
        .vhost_records()
        .into_iter()
        .filter(|v| !v.limits.is_empty() && visible_vhost(&state, &auth, &v.name))
        .map(|v| limits_json(&v.name, v.limits))
        .collect();
    Ok(Json(Json_::Array(items)))
}

/// One vhost's limits, for administrators, monitors and users with permissions in it
/// (RabbitMQ's `is_authorized_vhost_visible`).
pub async fn vhost_limits_of(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path(vhost): Path<String>,
) -> ApiResult<Json<Json_>> {
    if state.broker.vhost(&vhost).is_some() && !visible_vhost(&state, &auth, &vhost) {
        return Err(ApiError::not_authorised(super::NOT_AUTHORISED_VHOST));
    }
    let record = state
        .broker
        .access()
        .vhost_record(&vhost)
        .ok_or_else(ApiError::not_found)?;
    let items = if record.limits.is_empty() {
        Vec::new()
    } else {
        vec![limits_json(&vhost, record.limits)]
    };
    Ok(Json(Json_::Array(items)))
}

fn set_limit(limits: &mut VHostLimits, name: &str, value: Option<i64>) -> ApiResult<()> {
    match name {
        "max-connections" => limits.max_connections = value,
        "max-queues" => limits.max_queues = value,
        other => {
            return Err(ApiError::bad_request(format!(
                "unknown vhost limit '{other}': use max-connections or max-queues"
            )))
        }
    }
    Ok(())
}

/// PUT `/api/vhost-limits/{vhost}/{name}` with `{"value": N}` (negative: no limit).
pub async fn put_vhost_limit(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    let body = body_object(&body)?;
    let value = body
        .get("value")
        .and_then(Json_::as_i64)
        .ok_or_else(|| ApiError::bad_request("the body must be {\"value\": <integer>}"))?;
    let mut limits = state
        .broker
        .access()
        .vhost_record(&vhost)
        .ok_or_else(ApiError::not_found)?
        .limits;
    set_limit(&mut limits, &name, (value >= 0).then_some(value))?;
    state.broker.set_vhost_limits(&vhost, limits).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn delete_vhost_limit(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    let mut limits = state
        .broker
        .access()
        .vhost_record(&vhost)
        .ok_or_else(ApiError::not_found)?
        .limits;
    set_limit(&mut limits, &name, None)?;
    state.broker.set_vhost_limits(&vhost, limits).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- definitions ----

pub async fn export_definitions(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
) -> ApiResult<Json<Definitions>> {
    require(&auth, ADMINISTRATOR)?;
    let mut definitions = state.broker.export_definitions();
    let identity = state.broker.identity();
    definitions.rabbit_version = Some(identity.version().to_string());
    definitions.rabbitmq_version = Some(identity.version().to_string());
    definitions.product_name = Some(identity.product().to_string());
    Ok(Json(definitions))
}

/// POST a RabbitMQ definitions document (as `rabbitmqadmin import` and the UI's upload do).
pub async fn import_definitions(
    State(state): State<Arc<ApiState>>,
    Extension(auth): Extension<AuthUser>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    require(&auth, ADMINISTRATOR)?;
    let definitions: Definitions = serde_json::from_slice(&body)
        .map_err(|error| ApiError::bad_request(format!("bad definitions document: {error}")))?;
    state.broker.import_definitions(&definitions).await?;
    Ok(StatusCode::NO_CONTENT)
}
