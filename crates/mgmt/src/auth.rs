//! HTTP basic authentication against the broker's users.
//!
//! One function decides who may use the API, so that user tags (administrator, monitoring,
//! management, policymaker) can be enforced here once warren-core has them.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use warren_core::Broker;

use crate::error::ApiError;
use crate::ApiState;

/// The authenticated user of a request (a request extension, see `whoami`).
#[derive(Debug, Clone)]
pub struct AuthUser {
    pub name: String,
    /// RabbitMQ's user tags (administrator, monitoring, management, policymaker...).
    pub tags: Vec<String>,
}

impl AuthUser {
    fn has_any(&self, tags: &[&str]) -> bool {
        self.tags.iter().any(|t| tags.contains(&t.as_str()))
    }

    /// Administrators see and manage every vhost's objects (RabbitMQ's `is_admin`).
    pub fn is_admin(&self) -> bool {
        self.has_any(&["administrator"])
    }

    /// Monitors see every vhost, connection and channel (RabbitMQ's `is_monitor`).
    pub fn is_monitor(&self) -> bool {
        self.has_any(&["administrator", "monitoring"])
    }

    /// Policymakers manage the policies of the vhosts they may use.
    pub fn is_policymaker(&self) -> bool {
        self.has_any(&["administrator", "policymaker"])
    }

    /// Whether the user has permissions in `vhost` (RabbitMQ's `check_vhost_access`).
    pub fn can_access(&self, broker: &Broker, vhost: &str) -> bool {
        broker.access().grant(&self.name, vhost).is_some()
    }
}

/// The tags that let a user use the management API at all, as in RabbitMQ.
const MANAGEMENT_TAGS: [&str; 4] = ["administrator", "monitoring", "policymaker", "management"];

/// Checks `user`/`password` as an AMQP PLAIN login would, then that the user may use the
/// management API. Finer per-route rules (monitoring sees every connection, administrator
/// manages users...) hang off the tags returned here.
pub fn authenticate(
    broker: &Broker,
    user: &str,
    password: &str,
    from_loopback: bool,
) -> Result<AuthUser, ApiError> {
    match broker
        .access()
        .authenticate("PLAIN", user, password, from_loopback)
    {
        Ok(auth) => {
            let tags: Vec<String> = auth.tags.iter().cloned().collect();
            if !tags.iter().any(|t| MANAGEMENT_TAGS.contains(&t.as_str())) {
                return Err(ApiError::not_authorised("Not management user"));
            }
            Ok(AuthUser {
                name: auth.name.to_string(),
                tags,
            })
        }
        Err(text) if text.contains("loopback") => Err(ApiError::not_authorised(text)),
        Err(_) => Err(ApiError::unauthorized("Login failed")),
    }
}

/// Middleware: rejects requests without valid basic credentials with 401.
pub async fn require_user(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some((user, password)) = basic_credentials(&request) else {
        return ApiError::unauthorized("Not_Authorized").into_response();
    };
    match authenticate(
        &state.broker,
        &user,
        &password,
        peer.ip().to_canonical().is_loopback(),
    ) {
        Ok(auth) => {
            request.extensions_mut().insert(auth);
            next.run(request).await
        }
        Err(error) => {
            tracing::warn!(%peer, %user, "HTTP access denied: {}", error.reason);
            error.into_response()
        }
    }
}

fn basic_credentials(request: &Request) -> Option<(String, String)> {
    let value = request.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let encoded = value
        .strip_prefix("Basic ")
        .or_else(|| value.strip_prefix("basic "))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}
