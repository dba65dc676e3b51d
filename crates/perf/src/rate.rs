//! `RateLimiter`: paces one producer or consumer channel to a rate (`-r`, `-R`, sweep steps).
//!
//! Message n (from 0) is due `n / rate` seconds after the limiter's anchor, so the long-run rate
//! is exact and a tick that wakes late sends what fell due meanwhile in one burst. A debt of more
//! than one tick's worth (`BURST_TICK`, at least one message) is forgiven: after a stall (the
//! broker pushing back) the limiter re-anchors instead of catching up with a flood.

use std::time::Duration;

use tokio::time::Instant;

/// The longest burst: what falls due in this long.
pub const BURST_TICK: Duration = Duration::from_millis(10);

#[derive(Clone, Debug)]
pub struct RateLimiter {
    /// Messages per second, above 0.
    rate: f64,
    anchor: Instant,
    /// Messages granted since `anchor`.
    granted: u64,
    burst: u64,
}

impl RateLimiter {
    pub fn new(rate: f64, now: Instant) -> RateLimiter {
        assert!(
            rate.is_finite() && rate > 0.0,
            "invariant: a rate is positive"
        );
        let burst = ((rate * BURST_TICK.as_secs_f64()).ceil() as u64).max(1);
        RateLimiter {
            rate,
            anchor: now,
            granted: 0,
            burst,
        }
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// How many messages may go now (they must then be `take`n).
    pub fn allowance(&mut self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.anchor).as_secs_f64();
        let due = (elapsed * self.rate).floor() as u64 + 1;
        let owed = due.saturating_sub(self.granted);
        if owed > self.burst {
            // fell behind by more than a burst: forgive the rest
            let back = Duration::from_secs_f64((self.burst - 1) as f64 / self.rate);
            self.anchor = now.checked_sub(back).unwrap_or(now);
            self.granted = 0;
            return self.burst;
        }
        owed
    }

    pub fn take(&mut self, messages: u64) {
        self.granted += messages;
    }

    /// When the next message after those granted falls due.
    pub fn next_due(&self) -> Instant {
        self.anchor + Duration::from_secs_f64(self.granted as f64 / self.rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paces_to_the_rate_and_bursts_at_most_a_tick() {
        let start = Instant::now();
        let mut limiter = RateLimiter::new(1000.0, start);
        assert_eq!(limiter.allowance(start), 1);
        limiter.take(1);
        assert_eq!(limiter.allowance(start), 0);
        assert_eq!(limiter.next_due(), start + Duration::from_millis(1));
        let later = start + Duration::from_micros(5_500);
        assert_eq!(limiter.allowance(later), 5);
        limiter.take(5);
        // a stall of one second: at most a burst (10 ms at 1000/s) goes at once
        let stalled = start + Duration::from_secs(1);
        assert_eq!(limiter.allowance(stalled), 10);
        limiter.take(10);
        assert_eq!(limiter.allowance(stalled), 0);
        let next = limiter.allowance(stalled + Duration::from_millis(1));
        assert_eq!(next, 1);
    }

    #[test]
    fn slow_rates_send_one_at_a_time() {
        let start = Instant::now();
        let mut limiter = RateLimiter::new(2.0, start);
        assert_eq!(limiter.allowance(start), 1);
        limiter.take(1);
        assert_eq!(limiter.allowance(start + Duration::from_millis(400)), 0);
        assert_eq!(limiter.allowance(start + Duration::from_millis(500)), 1);
    }
}
