//! Resource alarms on an AMQP 0.9.1 connection: RabbitMQ's `blocking` and `blocked` states.
//!
//! While a memory or disk alarm is in effect a connection is *blocking*: nothing changes until
//! it receives publish content. Then it is *blocked*: it handles the content frame it just
//! decoded, stops decoding and stops reading its socket (TCP pushes back on the client), and
//! sends `connection.blocked` with RabbitMQ's reason ("low on memory") if the client announced
//! the `connection.blocked` capability. Deliveries, confirms and heartbeats still go out, and
//! missed client heartbeats are not counted: the client's frames wait unread in the socket
//! (RabbitMQ pauses its heartbeat monitor the same way). When every alarm has cleared it sends
//! `connection.unblocked` (if it sent blocked), handles the frames it had buffered, and reads
//! again. A connection that only consumes never publishes content, so it is never blocked.
//!
//! Cost on the message path: one atomic load per socket read (has the alarm set changed?) and
//! one bool test per content frame.

use tokio::sync::watch;
use warren_core::alarm::AlarmSet;
use warren_proto::amqp091::{ConnectionBlocked, Method};

use super::connection::Connection;
use super::fault::Fault;

pub struct Throttle {
    alarms: watch::Receiver<AlarmSet>,
    /// An alarm was in effect when the current read batch started (`blocking`).
    blocking: bool,
    /// Not reading the socket until every alarm clears.
    blocked: bool,
    /// connection.blocked went out and connection.unblocked is owed.
    blocked_sent: bool,
}

impl Throttle {
    pub fn new(alarms: watch::Receiver<AlarmSet>) -> Throttle {
        let blocking = !alarms.borrow().is_empty();
        Throttle {
            alarms,
            blocking,
            blocked: false,
            blocked_sent: false,
        }
    }

    /// Called once per read batch: whether publish content in it blocks the connection. One
    /// atomic load (the channel's version) unless the alarms changed since the last look.
    pub fn refresh(&mut self) {
        if self.alarms.has_changed().unwrap_or(false) {
            self.blocking = !self.alarms.borrow_and_update().is_empty();
        }
    }

    pub fn is_blocking(&self) -> bool {
        self.blocking
    }

    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// Resolves when the alarms change (the connection waits on it only while blocked).
    pub async fn changed(&mut self) {
        if self.alarms.changed().await.is_err() {
            // The broker owns the sender and outlives every connection: unreachable, but
            // never spin on it.
            std::future::pending::<()>().await;
        }
    }
}

impl Connection {
    /// Publish content arrived while an alarm was in effect: stop reading. False when the
    /// alarm cleared meanwhile.
    pub(super) fn block(&mut self) -> bool {
        let alarms = *self.throttle.alarms.borrow_and_update();
        let Some(reason) = alarms.reason() else {
            self.throttle.blocking = false;
            return false;
        };
        self.throttle.blocked = true;
        if self.caps.connection_blocked && !self.throttle.blocked_sent {
            let blocked = ConnectionBlocked {
                reason: reason.into(),
            };
            self.out.method(0, &Method::ConnectionBlocked(blocked));
            self.throttle.blocked_sent = true;
        }
        tracing::debug!(connection = self.id, peer = %self.peer, reason, "connection blocked");
        true
    }

    /// The alarms changed while blocked: once none is left, resume.
    pub(super) async fn on_alarms_changed(&mut self) -> Result<(), Fault> {
        if !self.throttle.alarms.borrow_and_update().is_empty() {
            return Ok(()); // another alarm still holds, or this one came back
        }
        self.throttle.blocked = false;
        self.throttle.blocking = false;
        if std::mem::take(&mut self.throttle.blocked_sent) {
            self.out
                .method(0, &Method::ConnectionUnblocked(Default::default()));
        }
        tracing::debug!(connection = self.id, peer = %self.peer, "connection unblocked");
        self.read_idle_ticks = 0;
        // Frames that arrived with the blocking one are still buffered: handle them now, as
        // the socket may have nothing more to say.
        self.on_read().await
    }
}
