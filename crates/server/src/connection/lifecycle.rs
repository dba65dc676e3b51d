//! The life of a connection, the same for both AMQP versions: the handshake within the
//! client's deadline (a broker shutting down drops a client that is not open yet), the
//! connection counted as open, its main loop, the close that the fault which ended it calls
//! for, the release of everything it held, and, after a close the client started, a short
//! wait for the client to close the socket (as RabbitMQ, it is the client that does).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::read_buffer::ReadBuffer;
use super::Shared;

/// How long a connection waits for the client's close or close-ok after sending its own, and
/// for the client to close the socket after a close the client started.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(3);

/// One protocol's connection, as `serve` drives it through its life.
pub trait Lifecycle: Send {
    /// What ends the connection; an I/O error is one that leaves nothing to send to the
    /// client.
    type Fault: Send + From<std::io::Error>;

    fn shared(&self) -> &Shared;

    /// Negotiates the connection, up to and including its open.
    fn handshake(&mut self) -> impl Future<Output = Result<(), Self::Fault>> + Send;

    /// Called once the handshake succeeded, before `run`.
    fn opened(&mut self) {}

    /// The main loop, until a fault ends it.
    fn run(&mut self) -> impl Future<Output = Result<(), Self::Fault>> + Send;

    /// Tells the client why the connection ends (when there is something to tell) and waits
    /// briefly for its answer.
    fn close_with(&mut self, fault: Self::Fault) -> impl Future<Output = ()> + Send;

    /// Releases everything the connection held: consumers, unacked messages, exclusive
    /// queues.
    fn teardown(&mut self) -> impl Future<Output = ()> + Send;

    /// Called after teardown, once the connection no longer counts as open.
    fn closed(&mut self) {}

    /// Whether the client closed the connection (then it closes the socket too).
    fn closed_by_client(&self) -> bool;

    fn input(&mut self) -> &mut ReadBuffer;
}

/// Drives `conn` through its life (see the module doc); the handshake must be done by
/// `deadline`.
pub async fn serve<C: Lifecycle>(conn: &mut C, deadline: Instant) {
    let shutdown = conn.shared().shutdown.clone();
    let handshake = tokio::time::timeout_at(deadline, conn.handshake());
    // Boxed: it runs once, and the connection future, which every idle connection holds, is
    // as large as its largest await.
    let handshake = Box::pin(crate::unless_shutdown(shutdown, handshake))
        .await
        .unwrap_or_else(|| Ok(Err(gone("broker shutting down"))));
    let open = matches!(handshake, Ok(Ok(()))).then(|| conn.shared().broker.open_connection());
    let outcome = match handshake {
        Ok(Ok(())) => {
            conn.opened();
            conn.run().await
        }
        Ok(Err(fault)) => Err(fault),
        Err(_) => Err(gone("handshake timeout")),
    };
    if let Err(fault) = outcome {
        conn.close_with(fault).await;
    }
    Box::pin(conn.teardown()).await;
    drop(open);
    conn.closed();
    if conn.closed_by_client() {
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, conn.input().discard_until_eof()).await;
    }
}

/// A fault that ends a connection with nothing to send to the client.
fn gone<F: From<std::io::Error>>(reason: &str) -> F {
    F::from(std::io::Error::other(reason))
}
