use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ConnectInfo;
use axum::routing::{get, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::time::Instant;

use super::*;

/// The connection's peer as the handlers should see it.
const PEER: &str = "192.0.2.7:40000";

fn router() -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
        )
        .route("/echo", post(|body: Bytes| async move { body }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(500)).await;
                "done"
            }),
        )
}

/// A connection served over an in-memory pipe; the client end, and the shutdown that must
/// outlive the test (dropping it shuts the connection down).
fn connect() -> (DuplexStream, GracefulShutdown) {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let graceful = GracefulShutdown::new();
    let peer = PEER.parse().unwrap();
    tokio::spawn(serve_http(server, peer, router(), graceful.watcher()));
    (client, graceful)
}

/// Reads until the server closes; what it sent and when it closed. Panics when the server
/// keeps the connection beyond twice the longest limit (in paused time, so at once).
async fn until_closed(client: &mut DuplexStream) -> (String, Duration) {
    let started = Instant::now();
    let mut received = Vec::new();
    let read = client.read_to_end(&mut received);
    tokio::time::timeout(IDLE_TIMEOUT * 2, read)
        .await
        .expect("the server closes the connection")
        .unwrap();
    (
        String::from_utf8_lossy(&received).into_owned(),
        started.elapsed(),
    )
}

fn within(elapsed: Duration, limit: Duration) -> bool {
    elapsed >= limit && elapsed < limit + Duration::from_secs(1)
}

#[tokio::test(start_paused = true)]
async fn a_silent_connection_is_closed_after_the_request_timeout() {
    tracing::info!("a client that connects and sends nothing");
    let (mut client, _graceful) = connect();
    let (received, elapsed) = until_closed(&mut client).await;
    assert!(within(elapsed, REQUEST_TIMEOUT), "closed after {elapsed:?}");
    assert_eq!(received, "");
}

#[tokio::test(start_paused = true)]
async fn a_half_sent_head_is_closed_after_the_request_timeout() {
    tracing::info!("a request line and one header, then silence");
    let (mut client, _graceful) = connect();
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (_, elapsed) = until_closed(&mut client).await;
    assert!(within(elapsed, REQUEST_TIMEOUT), "closed after {elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_is_closed_after_the_request_timeout() {
    tracing::info!("one request answered, then no next request");
    let (mut client, _graceful) = connect();
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (received, elapsed) = until_closed(&mut client).await;
    assert!(received.starts_with("HTTP/1.1 200"), "{received}");
    assert!(received.ends_with("ok"), "{received}");
    assert!(within(elapsed, REQUEST_TIMEOUT), "closed after {elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn a_stalled_body_is_closed_after_the_idle_timeout() {
    tracing::info!("a whole head, then 3 of the 10 body bytes it announces");
    let (mut client, _graceful) = connect();
    let head = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc";
    client.write_all(head.as_bytes()).await.unwrap();
    let (_, elapsed) = until_closed(&mut client).await;
    assert!(within(elapsed, IDLE_TIMEOUT), "closed after {elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn handlers_see_the_peer() {
    let (mut client, _graceful) = connect();
    let request = "GET /peer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    client.write_all(request.as_bytes()).await.unwrap();
    let (received, _) = until_closed(&mut client).await;
    assert!(received.ends_with(PEER), "{received}");
}

#[tokio::test]
async fn shutdown_lets_requests_in_flight_finish() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let endpoint = Endpoint {
        listener,
        router: router(),
        tls: None,
        what: "test",
    };
    let server = tokio::spawn(run(endpoint, shutdown_rx));
    tracing::info!("a slow request is in flight when shutdown is signalled");
    let mut client = TcpStream::connect(addr).await.unwrap();
    let request = "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n";
    client.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    shutdown_tx.send(true).unwrap();
    let mut received = Vec::new();
    let read = client.read_to_end(&mut received);
    tokio::time::timeout(Duration::from_secs(3), read)
        .await
        .unwrap()
        .unwrap();
    let received = String::from_utf8_lossy(&received);
    assert!(received.starts_with("HTTP/1.1 200"), "{received}");
    assert!(received.ends_with("done"), "{received}");
    tracing::info!("then the listener is gone");
    tokio::time::timeout(Duration::from_secs(3), server)
        .await
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(addr).await.is_err());
}
