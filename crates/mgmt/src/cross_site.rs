//! Defences against cross-site requests from a browser that holds the broker's basic-auth
//! credentials.
//!
//! A page on another site can make the browser send a form (`text/plain`,
//! `application/x-www-form-urlencoded`, `multipart/form-data`) or a `fetch` without a
//! content type to the API, with the cached credentials and without asking the API first
//! (no CORS preflight). A request that changes something therefore needs
//! `Content-Type: application/json` whenever it has a body, which only a same-origin page (or
//! a non-browser client) can send; other bodies get 415, as RabbitMQ's `content_types_accepted`
//! answers its definitions import. Bodiless requests (`DELETE`, `POST .../start/...`) need no
//! content type, so `rabbitmqadmin` and `warren ctl` keep working.
//!
//! Every answer also carries `X-Content-Type-Options: nosniff`, `X-Frame-Options: DENY` and a
//! Content-Security-Policy: the UI's own (`ui.rs`) or, for the API, one that allows nothing.

use axum::extract::Request;
use axum::http::header::{
    CONTENT_LENGTH, CONTENT_SECURITY_POLICY, CONTENT_TYPE, TRANSFER_ENCODING,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::error::ApiError;

/// The policy of answers that are not the UI's pages: JSON loads nothing and is framed by
/// nothing.
const API_CSP: &str = "default-src 'none'; frame-ancestors 'none'";

/// The only media type a state-changing request's body may have (parameters such as
/// `charset` aside).
const JSON: &str = "application/json";

/// Adds the content-type rule and the security headers to every route of `router`.
pub fn protect(router: Router) -> Router {
    router
        .layer(middleware::from_fn(require_json_body))
        .layer(SetResponseHeaderLayer::if_not_present(
            CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(API_CSP),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        .layer(nosniff())
}

/// `X-Content-Type-Options: nosniff`, for the Prometheus listener too.
pub fn nosniff() -> SetResponseHeaderLayer<HeaderValue> {
    SetResponseHeaderLayer::overriding(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"))
}

/// Refuses a body that is not JSON on a request that is not safe (`POST`, `PUT`, `DELETE`,
/// `PATCH`) with 415 before it is authenticated or read.
pub async fn require_json_body(request: Request, next: Next) -> Response {
    if request.method().is_safe() || !has_body(request.headers()) {
        return next.run(request).await;
    }
    let content_type = request.headers().get(CONTENT_TYPE);
    if content_type.is_some_and(is_json) {
        return next.run(request).await;
    }
    let got = match content_type {
        None => "none".to_string(),
        Some(value) => String::from_utf8_lossy(value.as_bytes()).into_owned(),
    };
    let (method, uri) = (request.method(), request.uri());
    tracing::debug!(%method, %uri, %got, "a request body that is not JSON refused");
    unsupported_media_type(&got).into_response()
}

/// HTTP/1.1's rule (RFC 9112 6.3): a request has a body when it has a `Transfer-Encoding`
/// or a non-zero `Content-Length`.
fn has_body(headers: &HeaderMap) -> bool {
    if headers.contains_key(TRANSFER_ENCODING) {
        return true;
    }
    headers.get_all(CONTENT_LENGTH).iter().any(|length| {
        let length = length
            .to_str()
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok());
        length != Some(0)
    })
}

fn is_json(value: &HeaderValue) -> bool {
    let Ok(text) = value.to_str() else {
        return false;
    };
    let essence = text.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case(JSON)
}

fn unsupported_media_type(got: &str) -> ApiError {
    ApiError {
        status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
        error: "unsupported_media_type",
        reason: format!(
            "a request body must be JSON: send Content-Type: {JSON} (got Content-Type: {got})"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn json_with_parameters_is_json() {
        tracing::info!("the media type's essence decides, parameters and case aside");
        for json in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
        ] {
            assert!(is_json(&HeaderValue::from_static(json)), "{json}");
        }
        tracing::info!("what a cross-site form or fetch can send is not");
        for other in [
            "text/plain",
            "text/plain; charset=application/json",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
        ] {
            assert!(!is_json(&HeaderValue::from_static(other)), "{other}");
        }
    }

    #[test]
    fn a_body_is_announced_by_its_length_or_encoding() {
        assert!(!has_body(&headers(&[])));
        assert!(!has_body(&headers(&[("content-length", "0")])));
        assert!(has_body(&headers(&[("content-length", "2")])));
        assert!(has_body(&headers(&[("transfer-encoding", "chunked")])));
    }
}
