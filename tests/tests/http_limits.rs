//! The management and Prometheus listeners' limits, on raw sockets: a client that sends no
//! request, half a request, or no next request on a keep-alive connection is closed within
//! the request timeout; past the connection cap new clients wait, and AMQP still accepts.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_mgmt::serve::{CONNECTIONS_MAX, REQUEST_TIMEOUT};
use warren_tests::{bounded, TestBroker};

/// How much later than its limit the broker may close a socket (a loaded machine).
const SLACK: Duration = Duration::from_secs(2);

/// `guest:guest`.
const GUEST: &str = "Basic Z3Vlc3Q6Z3Vlc3Q=";

fn host_port(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// The API's and Prometheus's `host:port`.
fn ports(broker: &TestBroker) -> [String; 2] {
    [
        host_port(&broker.http_url()),
        host_port(&broker.prometheus_url()),
    ]
}

/// Reads until the broker closes `socket`, which must happen within the request timeout
/// (and the slack) from `since`; what the broker sent.
async fn closed_in_time(mut socket: TcpStream, since: Instant) -> String {
    let limit = REQUEST_TIMEOUT + SLACK;
    let mut received = Vec::new();
    let read = socket.read_to_end(&mut received);
    let left = limit.saturating_sub(since.elapsed());
    match tokio::time::timeout(left, read).await {
        // An EOF or a reset: closed either way.
        Ok(_) => String::from_utf8_lossy(&received).into_owned(),
        Err(_) => panic!("the broker kept the socket open for {limit:?}"),
    }
}

/// Connects to each address and sends its request (perhaps nothing); each socket must be
/// closed in time. What each received.
async fn each_closed_in_time(requests: &[(&str, &str)]) -> Vec<String> {
    let mut waits = Vec::new();
    for (addr, request) in requests {
        let mut socket = bounded!(TcpStream::connect(addr)).unwrap();
        let since = Instant::now();
        socket.write_all(request.as_bytes()).await.unwrap();
        waits.push(tokio::spawn(closed_in_time(socket, since)));
    }
    let mut received = Vec::new();
    for wait in waits {
        received.push(wait.await.unwrap());
    }
    received
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_are_closed() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("Warren's limits") {
        return;
    }
    let [api, prometheus] = ports(&broker);
    let received = each_closed_in_time(&[(&api, ""), (&prometheus, "")]).await;
    assert_eq!(received, ["", ""]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_closed() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("Warren's limits") {
        return;
    }
    let [api, prometheus] = ports(&broker);
    tracing::info!("a request line and some headers, never the blank line that ends them");
    let overview =
        format!("GET /api/overview HTTP/1.1\r\nHost: localhost\r\nAuthorization: {GUEST}\r\n");
    let metrics = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n";
    for received in each_closed_in_time(&[(&api, &overview), (&prometheus, metrics)]).await {
        assert!(!received.contains(" 200 "), "{received}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_are_closed() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("Warren's limits") {
        return;
    }
    let [api, prometheus] = ports(&broker);
    tracing::info!("one request each, answered; then the connection idles");
    let overview =
        format!("GET /api/overview HTTP/1.1\r\nHost: localhost\r\nAuthorization: {GUEST}\r\n\r\n");
    let metrics = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
    for received in each_closed_in_time(&[(&api, &overview), (&prometheus, metrics)]).await {
        assert!(received.starts_with("HTTP/1.1 200"), "{received}");
    }
}

/// Sends one keep-alive `GET /` (the UI's page, no login) and reads its whole answer, so the
/// broker has accepted the socket and holds it open.
async fn held_open(addr: String) -> TcpStream {
    let mut socket = bounded!(TcpStream::connect(&addr)).unwrap();
    socket
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut received = Vec::new();
    let mut buffer = [0_u8; 16 * 1024];
    loop {
        let read = bounded!(socket.read(&mut buffer)).unwrap();
        assert!(read > 0, "closed before the answer ended");
        received.extend_from_slice(&buffer[..read]);
        if let Some(length) = complete_length(&received) {
            assert_eq!(received.len(), length);
            return socket;
        }
    }
}

/// The length of a whole HTTP answer with a `content-length`, once it is all in `received`.
fn complete_length(received: &[u8]) -> Option<usize> {
    let text = String::from_utf8_lossy(received);
    let (head, _) = text.split_once("\r\n\r\n")?;
    let length: usize = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })?;
    let whole = head.len() + 4 + length;
    (received.len() >= whole).then_some(whole)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_new_clients_wait_and_amqp_still_accepts() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("Warren's limits") {
        return;
    }
    let [api, _] = ports(&broker);
    tracing::info!("{CONNECTIONS_MAX} keep-alive connections, each answered once");
    let mut holders = Vec::new();
    for _ in 0..CONNECTIONS_MAX {
        holders.push(tokio::spawn(held_open(api.clone())));
    }
    let mut held = Vec::new();
    for holder in holders {
        held.push(holder.await.unwrap());
    }
    let full_since = Instant::now();

    tracing::info!("one more client is not served while the cap is reached");
    let mut waiting = bounded!(TcpStream::connect(&api)).unwrap();
    let request = "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    waiting.write_all(request.as_bytes()).await.unwrap();
    let mut first = [0_u8; 1];
    let early = tokio::time::timeout(Duration::from_secs(1), waiting.read(&mut first)).await;
    assert!(early.is_err(), "answered past the cap: {early:?}");

    tracing::info!("AMQP clients still connect");
    let (connection, _channel) = broker.channel().await;
    bounded!(connection.close(200, "bye".into())).unwrap();

    tracing::info!("once the idle connections time out, the waiting client is served");
    let received = closed_in_time(waiting, full_since).await;
    assert!(received.starts_with("HTTP/1.1 200"), "{received}");
    drop(held);
}
