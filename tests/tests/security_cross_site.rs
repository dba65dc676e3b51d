//! What a page on another site can make a browser send with the broker's cached basic-auth
//! credentials (forms, fetches without a content type) changes nothing: bodies of
//! state-changing requests must be JSON. The UI and the API send the headers that keep them
//! out of frames and stop content sniffing.

use reqwest::header::{
    CONTENT_SECURITY_POLICY, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{json, Value};
use warren_tests::http::Api;
use warren_tests::{bounded, declare_queue, unique, TestBroker};

/// Definitions that would create an administrator.
fn administrator(name: &str) -> String {
    json!({"users": [{"name": name, "password": "pwned", "tags": "administrator"}]}).to_string()
}

async fn send(request: RequestBuilder) -> (StatusCode, String) {
    let response = bounded!(request.basic_auth("guest", Some("guest")).send()).unwrap();
    let status = response.status();
    (status, bounded!(response.text()).unwrap())
}

fn post(api: &Api, path: &str) -> RequestBuilder {
    api.http.post(format!("{}{path}", api.base))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_json_bodies_change_anything() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("Warren's content-type rule") {
        return;
    }
    let api = Api::new(&broker);
    let user = unique("mallory");
    for content_type in [
        Some("text/plain"),
        Some("text/plain; charset=utf-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        tracing::info!(?content_type, "a cross-site form or fetch");
        let mut request = post(&api, "/api/definitions").body(administrator(&user));
        if let Some(content_type) = content_type {
            request = request.header(CONTENT_TYPE, content_type);
        }
        let (status, body) = send(request).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
        let error: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error["error"], "unsupported_media_type");
        assert!(error["reason"]
            .as_str()
            .unwrap()
            .contains("application/json"));
        let (status, _) = api
            .send(Method::GET, &format!("/api/users/{user}"), None)
            .await;
        assert_eq!(
            status,
            StatusCode::NOT_FOUND,
            "{content_type:?} created the user"
        );
    }

    tracing::info!("the same definitions as JSON are imported");
    let request = post(&api, "/api/definitions")
        .header(CONTENT_TYPE, "application/json; charset=utf-8")
        .body(administrator(&user));
    let (status, body) = send(request).await;
    assert!(status.is_success(), "{status}: {body}");
    api.get(&format!("/api/users/{user}")).await;
    bodiless_requests_need_no_content_type(&broker, &api).await;
}

/// DELETE and POST without a body, as rabbitmqadmin and warren ctl send them.
async fn bodiless_requests_need_no_content_type(broker: &TestBroker, api: &Api) {
    let (_connection, channel) = broker.channel().await;
    let queue = unique("q-bodiless");
    declare_queue(&channel, &queue).await;
    let url = format!("{}/api/queues/%2F/{queue}/contents", api.base);
    let (status, body) = send(api.http.delete(url)).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let node = api.get("/api/overview").await["node"]
        .as_str()
        .unwrap()
        .to_string();
    let start = post(api, &format!("/api/vhosts/%2F/start/{node}")).header("content-length", "0");
    let (status, body) = send(start).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let url = format!("{}/api/queues/%2F/{queue}", api.base);
    let (status, body) = send(api.http.delete(url)).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_and_answers_carry_the_security_headers() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("Warren's headers") {
        return;
    }
    let api = Api::new(&broker);
    for page in ["/", "/index.html", "/app.js", "/app.css"] {
        tracing::info!(page, "the UI");
        let response = bounded!(api.http.get(format!("{}{page}", api.base)).send()).unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers();
        let policy = headers[CONTENT_SECURITY_POLICY].to_str().unwrap();
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(policy.contains(directive), "{page}: {policy}");
        }
        assert!(!policy.contains("unsafe"), "{page}: {policy}");
        assert_eq!(headers[X_FRAME_OPTIONS], "DENY");
        assert_eq!(headers[X_CONTENT_TYPE_OPTIONS], "nosniff");
    }

    tracing::info!("the API's answers, errors included, and Prometheus's");
    for path in ["/api/overview", "/api/no-such-route"] {
        let request = api.http.get(format!("{}{path}", api.base));
        let response = bounded!(request.basic_auth("guest", Some("guest")).send()).unwrap();
        let headers = response.headers();
        assert_eq!(headers[X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
        assert_eq!(headers[X_FRAME_OPTIONS], "DENY", "{path}");
        assert!(headers[CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .starts_with("default-src 'none'"));
    }
    let metrics = format!("{}/metrics", broker.prometheus_url());
    let response = bounded!(api.http.get(metrics).send()).unwrap();
    assert_eq!(response.headers()[X_CONTENT_TYPE_OPTIONS], "nosniff");
}
