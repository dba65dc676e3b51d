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
    /// RabbitMQ's user tags; until core has them every user acts as an administrator.
    pub tags: Vec<String>,
}

/// Checks `user`/`password` as an AMQP PLAIN login would.
pub fn authenticate(
    broker: &Broker,
    user: &str,
    password: &str,
    from_loopback: bool,
) -> Result<AuthUser, ApiError> {
    match broker.authenticate("PLAIN", user, password, from_loopback) {
        Ok(()) => Ok(AuthUser {
            name: user.to_string(),
            tags: vec!["administrator".to_string()],
        }),
        Err(text) if text.contains("loopback") => Err(ApiError::unauthorized(text)),
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
    match authenticate(&state.broker, &user, &password, peer.ip().is_loopback()) {
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
