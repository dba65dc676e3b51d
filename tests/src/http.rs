//! A client for the management HTTP API of the broker under test (reqwest, basic auth).

use std::time::Duration;

use reqwest::{Client, Method, StatusCode};
use serde_json::Value;

use crate::{bounded, TestBroker};

/// How long one HTTP request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// A client for one broker's API, as guest or another user.
pub struct Api {
    /// The HTTP client, for requests the helpers below do not make (other credentials).
    pub http: Client,
    /// `http://host:port` of the API.
    pub base: String,
    user: String,
    password: String,
}

impl Api {
    pub fn new(broker: &TestBroker) -> Api {
        let http = Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("build an HTTP client");
        Api {
            http,
            base: broker.http_url(),
            user: "guest".into(),
            password: "guest".into(),
        }
    }

    /// The same broker's API as another user.
    pub fn as_user(&self, user: &str, password: &str) -> Api {
        Api {
            http: self.http.clone(),
            base: self.base.clone(),
            user: user.into(),
            password: password.into(),
        }
    }

    /// Status and JSON body (`Null` when empty); panics on a body that is not JSON.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let (status, text) = self.request(method, path, body).await;
        let json = parse(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        (status, json)
    }

    /// Status and body: JSON, or a JSON string holding a body that is not JSON (the UI's
    /// pages and scripts).
    pub async fn send_any(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let (status, text) = self.request(method, path, body).await;
        let json = parse(&text).unwrap_or(Value::String(text));
        (status, json)
    }

    /// GET that must answer 200 with JSON.
    pub async fn get(&self, path: &str) -> Value {
        let (status, json) = self.send(Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {json}");
        json
    }

    /// GET that must answer 200, whatever the body.
    pub async fn get_any(&self, path: &str) -> Value {
        let (status, json) = self.send_any(Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {json}");
        json
    }

    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, String) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .basic_auth(&self.user, Some(&self.password));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = bounded!(request.send()).expect("HTTP request");
        let status = response.status();
        (status, bounded!(response.text()).expect("HTTP body"))
    }
}

/// A response body as JSON; an empty one is `Null`.
fn parse(text: &str) -> serde_json::Result<Value> {
    if text.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(text)
}
