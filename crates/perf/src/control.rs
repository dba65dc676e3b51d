//! `Control`: what the run's conductor tells every producer and consumer task while they run:
//! stop, and (for sweeps) the current publish rate.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Shared by the conductor and every task.
#[derive(Debug, Default)]
pub struct Control {
    stop: AtomicBool,
    /// Publish rate per producer channel in milli-messages per second; 0: unlimited.
    rate_millis: AtomicU64,
    /// Bumped whenever the rate changes, so producers re-anchor their limiters.
    rate_epoch: AtomicU64,
}

impl Control {
    /// A control with the run's initial rate per producer channel (`None`: unlimited).
    pub fn new(rate: Option<f64>) -> Control {
        let control = Control::default();
        control.set_rate(rate);
        control
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Changes the rate of every producer channel.
    pub fn set_rate(&self, rate: Option<f64>) {
        let millis = rate.map_or(0, |r| ((r * 1000.0).round() as u64).max(1));
        self.rate_millis.store(millis, Ordering::Release);
        self.rate_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// The current rate and its epoch.
    pub fn rate(&self) -> (Option<f64>, u64) {
        let epoch = self.rate_epoch.load(Ordering::Acquire);
        let millis = self.rate_millis.load(Ordering::Acquire);
        let rate = (millis > 0).then(|| millis as f64 / 1000.0);
        (rate, epoch)
    }
}
