//! Errors as RabbitMQ's management API returns them: `{"error": ..., "reason": ...}`.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use warren_core::{BrokerError, ErrorKind};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub error: &'static str,
    pub reason: String,
}

impl ApiError {
    pub fn not_found() -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            error: "Object Not Found",
            reason: "Not Found".to_string(),
        }
    }

    pub fn bad_request(reason: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            error: "bad_request",
            reason: reason.into(),
        }
    }

    pub fn unauthorized(reason: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            error: "not_authorized",
            reason: reason.into(),
        }
    }

    /// An authenticated user refused an object or a vhost: 401 `not_authorised` without a
    /// challenge, as RabbitMQ's `not_authorised` (only failed logins ask for credentials).
    pub fn not_authorised(reason: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            error: "not_authorised",
            reason: reason.into(),
        }
    }

    /// A route or feature of RabbitMQ's API that Warren does not have (501); the reason names
    /// it and says that Warren does not support it yet.
    pub fn not_implemented(reason: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_IMPLEMENTED,
            error: "not_implemented",
            reason: reason.into(),
        }
    }

    pub fn unavailable(reason: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            error: "failed",
            reason: reason.into(),
        }
    }
}

impl From<BrokerError> for ApiError {
    fn from(error: BrokerError) -> ApiError {
        match error.kind {
            ErrorKind::NotFound => ApiError::not_found(),
            ErrorKind::AccessRefused => ApiError {
                status: StatusCode::FORBIDDEN,
                error: "access_refused",
                reason: error.text,
            },
            ErrorKind::InternalError => ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                error: "internal_error",
                reason: error.text,
            },
            _ => ApiError::bad_request(error.text),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({"error": self.error, "reason": self.reason}));
        if self.status == StatusCode::UNAUTHORIZED && self.error == "not_authorized" {
            let challenge = [(
                header::WWW_AUTHENTICATE,
                "Basic realm=\"RabbitMQ Management\"",
            )];
            return (self.status, challenge, body).into_response();
        }
        (self.status, body).into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
