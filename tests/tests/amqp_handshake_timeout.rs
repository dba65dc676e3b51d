//! The AMQP port's handshake timeout (RabbitMQ's `handshake_timeout`, 10 s) counts from the
//! accept, protocol header included: a silent socket, and one that sent the first bytes of an
//! AMQP 1.0 header and stopped, are closed 10 s after they connected. Before, telling the
//! protocols apart had a 10 s budget of its own, so such a socket stayed 20 s.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_tests::TestBroker;

/// The broker's handshake timeout, and the slack allowed for a loaded machine.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const SLACK: Duration = Duration::from_secs(3);

/// Connects, sends `start`, and returns how long the broker kept the socket open.
async fn kept_open(broker: &TestBroker, start: &[u8]) -> Duration {
    let connected = Instant::now();
    let mut socket = TcpStream::connect(broker.addr()).await.unwrap();
    socket.write_all(start).await.unwrap();
    let mut scratch = [0u8; 64];
    let closed = async { while matches!(socket.read(&mut scratch).await, Ok(n) if n > 0) {} };
    tokio::time::timeout(HANDSHAKE_TIMEOUT * 3, closed)
        .await
        .expect("the broker closes a socket that never finishes its handshake");
    connected.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_that_never_finishes_its_protocol_header_is_closed_after_10_s() {
    let broker = TestBroker::start().await;
    if broker.skip_if_external("times Warren's handshake timeout") {
        return;
    }
    let (silent, partial_amqp10, partial_amqp091) = tokio::join!(
        kept_open(&broker, b""),
        kept_open(&broker, b"AMQP\x03"),
        kept_open(&broker, b"AMQP\x00\x00"),
    );
    for (what, kept) in [
        ("silent", silent),
        ("half an AMQP 1.0 header", partial_amqp10),
        ("half an AMQP 0.9.1 header", partial_amqp091),
    ] {
        assert!(
            kept >= HANDSHAKE_TIMEOUT - Duration::from_millis(500)
                && kept <= HANDSHAKE_TIMEOUT + SLACK,
            "{what}: kept open {kept:?}, expected about {HANDSHAKE_TIMEOUT:?}"
        );
    }
}
