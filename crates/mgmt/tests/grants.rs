//! The per-user and per-vhost permission lists of the HTTP API (`/api/users/{user}/permissions`,
//! `/api/vhosts/{vhost}/permissions` and their topic-permission twins), end to end on loopback:
//! each lists the grants of its user or vhost, and only those.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use warren_core::broker::StorageConfig;
use warren_core::{Bootstrap, Broker};
use warren_mgmt::{Mgmt, MgmtConfig};

const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// `guest:guest`, which may log in from loopback.
const GUEST: &str = "Basic Z3Vlc3Q6Z3Vlc3Q=";

async fn start(dir: &tempfile::TempDir) -> (Mgmt, watch::Sender<bool>) {
    let storage = StorageConfig {
        segment_bytes: 1 << 20,
        queue_memory_budget: 1 << 20,
        queue_credit: 400,
        stream_fsync: false,
        stream_encoding: None,
    };
    let data_dir = dir.path().join("data");
    let broker = Broker::open(&data_dir, &Bootstrap::default(), storage).unwrap();
    let config = MgmtConfig {
        http: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        https: None,
        prometheus: None,
        prometheus_https: None,
        protocol_listeners: Vec::new(),
        data_dir,
    };
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mgmt = warren_mgmt::start(broker, config, shutdown_rx)
        .await
        .unwrap();
    (mgmt, shutdown)
}

/// One request as guest: the status and the body parsed as JSON (null when empty).
async fn call(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let exchange = async {
        let mut socket = TcpStream::connect(addr).await.unwrap();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: {GUEST}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n\
             {body}",
            body.len()
        );
        socket.write_all(request.as_bytes()).await.unwrap();
        let mut received = Vec::new();
        socket.read_to_end(&mut received).await.unwrap();
        String::from_utf8(received).unwrap()
    };
    let text = tokio::time::timeout(STEP_TIMEOUT, exchange).await.unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = if body.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(body).unwrap_or_else(|error| panic!("{path}: {error}: {body}"))
    };
    (status, body)
}

/// The (user, vhost) pairs of a permission list, sorted.
fn pairs(list: &Value) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = list
        .as_array()
        .expect("a JSON array")
        .iter()
        .map(|grant| {
            let field = |name: &str| grant[name].as_str().unwrap().to_string();
            (field("user"), field("vhost"))
        })
        .collect();
    pairs.sort();
    pairs
}

fn pair(user: &str, vhost: &str) -> (String, String) {
    (user.to_string(), vhost.to_string())
}

#[tokio::test]
async fn permission_lists_show_their_user_or_vhost_only() {
    let dir = tempfile::tempdir().unwrap();
    let (mgmt, _shutdown) = start(&dir).await;
    let addr = mgmt.http_addr().expect("an HTTP listener");
    let user = json!({"password": "s3cret", "tags": ""});
    assert_eq!(call(addr, "PUT", "/api/users/ann", Some(user)).await.0, 201);
    assert_eq!(call(addr, "PUT", "/api/vhosts/other", None).await.0, 201);
    let all = json!({"configure": ".*", "write": ".*", "read": ".*"});
    let (status, _) = call(addr, "PUT", "/api/permissions/other/ann", Some(all)).await;
    assert_eq!(status, 201);

    let (status, ann) = call(addr, "GET", "/api/users/ann/permissions", None).await;
    assert_eq!((status, pairs(&ann)), (200, vec![pair("ann", "other")]));
    let (_, guest) = call(addr, "GET", "/api/users/guest/permissions", None).await;
    assert_eq!(
        pairs(&guest),
        vec![pair("guest", "/"), pair("guest", "other")]
    );
    let (_, other) = call(addr, "GET", "/api/vhosts/other/permissions", None).await;
    assert_eq!(
        pairs(&other),
        vec![pair("ann", "other"), pair("guest", "other")]
    );
    let (_, root) = call(addr, "GET", "/api/vhosts/%2F/permissions", None).await;
    assert_eq!(pairs(&root), vec![pair("guest", "/")]);
    assert_eq!(
        call(addr, "GET", "/api/users/nobody/permissions", None)
            .await
            .0,
        404
    );
    assert_eq!(
        call(addr, "GET", "/api/vhosts/none/permissions", None)
            .await
            .0,
        404
    );

    let topic = json!({"exchange": "amq.topic", "write": "^a", "read": "^b"});
    let (status, _) = call(addr, "PUT", "/api/topic-permissions/other/ann", Some(topic)).await;
    assert_eq!(status, 201);
    let (_, ann) = call(addr, "GET", "/api/users/ann/topic-permissions", None).await;
    assert_eq!(pairs(&ann), vec![pair("ann", "other")]);
    assert_eq!(ann[0]["exchange"], "amq.topic");
    let (_, guest) = call(addr, "GET", "/api/users/guest/topic-permissions", None).await;
    assert_eq!(pairs(&guest), vec![]);
    let (_, other) = call(addr, "GET", "/api/vhosts/other/topic-permissions", None).await;
    assert_eq!(pairs(&other), vec![pair("ann", "other")]);
    let (_, root) = call(addr, "GET", "/api/vhosts/%2F/topic-permissions", None).await;
    assert_eq!(pairs(&root), vec![]);
}
