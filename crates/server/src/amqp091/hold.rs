//! Holding deliveries back: a turn that only brought queue deliveries may leave them unflushed
//! for up to `delivery_hold_ms`, to be written with the next ones (see
//! `Connection::hold_deliveries` for when).

use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::connection::Connection;

/// Deliveries held back to be written with later ones (see `Connection::hold_deliveries`)
/// wait at most `delivery_hold_ms` (rounded up to the timer's millisecond), and no longer
/// once this many deliveries or bytes wait. 256 small deliveries are about a millisecond of
/// PerfTest's autoack stream: with 64, a consumer woken only when its hold fills (see
/// `Outbox::quiet_for`) wrote three times as often, and the broker spent about a third more
/// CPU per message there.
const HOLD_DELIVERIES_MAX: u32 = 256;
const HOLD_BYTES_MAX: usize = 64 * 1024;
/// A client that sent anything this recently may be waiting on what it is sent: no hold.
const HOLD_CLIENT_QUIET: Duration = Duration::from_millis(10);

/// A consumer connection's record for holding deliveries back.
pub(super) struct Hold {
    /// When the client last sent anything (since this record was made).
    last_read: Instant,
    /// When queue deliveries last came.
    last_deliveries: Instant,
    /// Held deliveries are due then.
    until: Option<Instant>,
    /// The timer fired: the flush that follows ends this hold (see `hold_next_window`).
    due: bool,
    timer: Pin<Box<Sleep>>,
}

/// Resolves when held deliveries are due.
pub(super) async fn hold_elapsed(hold: &mut Option<Box<Hold>>) {
    match hold {
        Some(hold) => hold.timer.as_mut().await,
        None => std::future::pending().await,
    }
}

impl Connection {
    /// Whether the deliveries this turn wrote wait for more instead of being flushed now.
    ///
    /// A consumer connection fed in small batches (a publisher's round split over many
    /// queues, or a publisher read a few messages at a time) would otherwise write a few
    /// deliveries per `send` and wake its client as often: the syscall and the wake-up cost
    /// more than the deliveries. In a steady stream they wait for the next ones, at most
    /// `delivery_hold_ms` after the first, while all of this holds:
    /// - everything written since the last flush is deliveries to consumers that need nothing
    ///   more to go on (`ConsumerState::may_wait`);
    /// - the client sent nothing for `HOLD_CLIENT_QUIET`: one that publishes or acknowledges
    ///   may be waiting on what it is sent (a request-reply client, a consumer at its
    ///   prefetch limit);
    /// - deliveries came less than `delivery_hold_ms` before (a stream, not a lone message);
    /// - fewer than `HOLD_DELIVERIES_MAX` deliveries and `HOLD_BYTES_MAX` bytes wait.
    ///
    /// Any other turn (the client sent something, a heartbeat, a confirm) flushes at once.
    pub(super) fn hold_deliveries(&mut self) -> bool {
        let hold_ms = self.shared.config.delivery_hold_ms;
        if hold_ms == 0 || !self.may_hold || self.out.is_empty() {
            return false;
        }
        let now = Instant::now();
        let Some(hold) = self.hold.as_deref_mut() else {
            // The first deliveries: nothing known of the stream yet.
            self.hold = Some(Box::new(Hold {
                last_read: now,
                last_deliveries: now,
                until: None,
                due: false,
                timer: Box::pin(tokio::time::sleep_until(now)),
            }));
            return false;
        };
        let previous = std::mem::replace(&mut hold.last_deliveries, now);
        if self.unflushed_deliveries >= HOLD_DELIVERIES_MAX
            || self.out.len() >= HOLD_BYTES_MAX
            || now.duration_since(hold.last_read) < HOLD_CLIENT_QUIET
        {
            return false;
        }
        let holding = match hold.until {
            Some(until) => now < until,
            None => {
                let limit = Duration::from_millis(hold_ms);
                if now.duration_since(previous) >= limit {
                    return false;
                }
                hold.until = Some(now + limit);
                hold.timer.as_mut().reset(now + limit);
                true
            }
        };
        if holding {
            // The hold timer wakes this connection: deliveries that keep the hold going need
            // not wake it before (one queue task turn less per batch, not one per queue).
            let deliveries =
                (HOLD_DELIVERIES_MAX - self.unflushed_deliveries).min(self.waiting_room());
            self.outbox
                .quiet_for(deliveries, HOLD_BYTES_MAX - self.out.len());
        }
        holding
    }

    /// Starts the next hold right after held deliveries went out: their stream likely goes
    /// on, and its next deliveries then need not wake this connection either. Without this
    /// a stream woke it twice per hold, once for the deliveries that start the hold and once
    /// for its timer; a hold with nothing in it when the timer fires ends the stream's run.
    /// `wrote`: the flush that ended the hold wrote deliveries.
    pub(super) fn hold_next_window(&mut self, wrote: bool) {
        let hold_ms = self.shared.config.delivery_hold_ms;
        let Some(hold) = self.hold.as_deref_mut() else {
            return;
        };
        let now = Instant::now();
        if !std::mem::take(&mut hold.due)
            || !wrote
            || hold_ms == 0
            || now.duration_since(hold.last_read) < HOLD_CLIENT_QUIET
        {
            return;
        }
        let room = self.waiting_room();
        if room == 0 {
            return;
        }
        let Some(hold) = self.hold.as_deref_mut() else {
            return;
        };
        let until = now + Duration::from_millis(hold_ms);
        hold.until = Some(until);
        hold.timer.as_mut().reset(until);
        self.outbox
            .quiet_for(HOLD_DELIVERIES_MAX.min(room), HOLD_BYTES_MAX);
    }

    /// Whether held deliveries wait for their timer.
    pub(super) fn holding(&self) -> bool {
        self.hold.as_ref().is_some_and(|h| h.until.is_some())
    }

    /// The hold timer fired: held deliveries are due, and those that came meanwhile count as
    /// a stream.
    pub(super) fn hold_due(&mut self) {
        if let Some(hold) = self.hold.as_deref_mut() {
            hold.last_deliveries = Instant::now();
            hold.due = true;
        }
    }

    /// The client sent something: deliveries it may be waiting on are not held.
    pub(super) fn note_client_read(&mut self) {
        if let Some(hold) = self.hold.as_deref_mut() {
            hold.last_read = Instant::now();
        }
    }

    /// A flush ends any hold (see `hold_deliveries`).
    pub(super) fn end_hold(&mut self) {
        if let Some(hold) = self.hold.as_deref_mut() {
            hold.until = None;
        }
        self.may_hold = true;
        self.unflushed_deliveries = 0;
    }
}
