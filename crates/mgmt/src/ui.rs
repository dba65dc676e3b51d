//! The management web UI: a single page (HTML, JavaScript, CSS) embedded in the binary and
//! served on the HTTP API's listener without authentication. The page asks for a user and
//! password and calls `/api` with basic auth itself.
//!
//! The pages carry a Content-Security-Policy that lets them load scripts, styles and data
//! from the broker only, and nothing inline: app.js sets computed styles through the CSSOM,
//! never in a `style` attribute. They cannot be framed (clickjacking).

use axum::extract::Request;
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::uri::PathAndQuery;
use axum::http::{HeaderValue, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tower::ServiceExt;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::error::ApiError;

const INDEX_HTML: &str = include_str!("../ui/index.html");
const APP_JS: &str = include_str!("../ui/app.js");
const APP_CSS: &str = include_str!("../ui/app.css");

/// The UI's Content-Security-Policy: its own script, stylesheet and API, the `data:` favicon,
/// no inline code or style, no plugins, no framing, and forms that submit nowhere (app.js
/// sends every form as JSON itself).
pub const CONTENT_SECURITY_POLICY_UI: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The header the UI's requests carry, so that a failed login does not make the browser pop
/// up its own basic-auth dialog (see [`no_browser_challenge`]).
pub const UI_HEADER: &str = "x-warren-ui";

/// Adds the UI's routes to the API router and the layer that keeps 401 answers to the UI
/// free of `WWW-Authenticate`. A path no route matches is tried once more without one
/// trailing `/` (Cowboy's router treats `/api/connections/` as `/api/connections`); what
/// still matches nothing is RabbitMQ's 404.
pub fn with_ui(api: Router) -> Router {
    let routes = api
        .merge(router())
        .layer(middleware::from_fn(no_browser_challenge));
    let retry = routes.clone().fallback(|| async { ApiError::not_found() });
    routes.fallback(move |request: Request| without_trailing_slash(retry, request))
}

async fn without_trailing_slash(retry: Router, mut request: Request) -> Response {
    let uri = request.uri();
    let path = uri.path();
    if path.len() < 2 || !path.ends_with('/') {
        return ApiError::not_found().into_response();
    }
    let stripped = match uri.query() {
        Some(query) => format!("{}?{query}", &path[..path.len() - 1]),
        None => path[..path.len() - 1].to_string(),
    };
    let Ok(path_and_query) = stripped.parse::<PathAndQuery>() else {
        return ApiError::not_found().into_response();
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query);
    match Uri::from_parts(parts) {
        Ok(uri) => *request.uri_mut() = uri,
        Err(_) => return ApiError::not_found().into_response(),
    }
    match retry.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// `/`, `/index.html`, `/app.js` and `/app.css`, with their Content-Security-Policy; no
/// authentication.
pub fn router() -> Router {
    Router::new()
        .route("/", get(index))
        .route("/index.html", get(index))
        .route("/app.js", get(app_js))
        .route("/app.css", get(app_css))
        .route_layer(SetResponseHeaderLayer::overriding(
            CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY_UI),
        ))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

pub async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

pub async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

/// A browser that sees `WWW-Authenticate` on a 401 to `fetch` shows its own login dialog;
/// the UI has its own form, so the challenge is dropped from answers to the UI's requests.
/// Other clients (rabbitmqadmin, curl) still get it.
pub async fn no_browser_challenge(request: Request, next: Next) -> Response {
    let from_ui = request.headers().contains_key(UI_HEADER);
    let mut response = next.run(request).await;
    if from_ui {
        response.headers_mut().remove(WWW_AUTHENTICATE);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(response: Response) -> (String, String) {
        let content_type = response.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_string();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (content_type, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn assets_are_served_with_their_types() {
        let (kind, html) = body_of(index().await).await;
        assert!(kind.starts_with("text/html"));
        assert!(html.contains("<script src=\"app.js\">"));
        assert!(html.contains("href=\"app.css\""));
        let (kind, js) = body_of(app_js().await).await;
        assert!(kind.starts_with("text/javascript"));
        assert!(js.contains("/api/overview"));
        let (kind, css) = body_of(app_css().await).await;
        assert!(kind.starts_with("text/css"));
        assert!(css.contains(".chart"));
    }

    #[test]
    fn ui_has_no_inline_code_or_style() {
        tracing::info!("the policy allows no inline script, handler or style attribute");
        for asset in [INDEX_HTML, APP_JS] {
            assert!(!asset.contains("style=\""), "a style attribute in an asset");
            assert!(
                !asset.contains("<style"),
                "an inline stylesheet in an asset"
            );
            assert!(
                !asset.contains(" onclick="),
                "an inline handler in an asset"
            );
        }
        assert_eq!(INDEX_HTML.matches("<script").count(), 1);
        assert!(INDEX_HTML.contains("<script src=\"app.js\"></script>"));
        assert!(!CONTENT_SECURITY_POLICY_UI.contains("unsafe"));
    }

    #[test]
    fn ui_loads_nothing_from_elsewhere() {
        for asset in [INDEX_HTML, APP_JS, APP_CSS] {
            assert!(!asset.contains("http://"), "absolute http URL in an asset");
            assert!(
                !asset.contains("https://"),
                "absolute https URL in an asset"
            );
        }
    }
}
