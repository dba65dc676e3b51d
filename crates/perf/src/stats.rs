//! Counting and latency histograms.
//!
//! Each producer or consumer task owns an `AgentStats`: counters it bumps once per batch and
//! HdrHistograms it records into under an uncontended lock, once per batch. Once per interval
//! the reporter's `Collector` reads the counters, moves each agent's histogram into the
//! interval's, and adds that to the run's totals.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::report::{Counts, Percentiles};

/// Highest latency the histograms track, µs (one hour); longer ones count as one hour.
pub const LATENCY_MAX_US: u64 = 3_600_000_000;
/// Three significant digits: percentiles are exact to 0.1%.
const SIGNIFICANT_DIGITS: u8 = 3;

/// An empty latency histogram (µs, 1 µs to one hour).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_MAX_US, SIGNIFICANT_DIGITS)
        .expect("invariant: 1 µs to one hour at 3 digits are valid bounds")
}

/// min/median/75th/95th/99th/max of a histogram; zeros when it is empty (as PerfTest prints).
pub fn percentiles(histogram: &Histogram<u64>) -> Percentiles {
    if histogram.is_empty() {
        return Percentiles::default();
    }
    Percentiles {
        min: histogram.min(),
        median: histogram.value_at_quantile(0.5),
        p75: histogram.value_at_quantile(0.75),
        p95: histogram.value_at_quantile(0.95),
        p99: histogram.value_at_quantile(0.99),
        max: histogram.max(),
        count: histogram.len(),
    }
}

/// What one producer or consumer connection has done so far.
pub struct AgentStats {
    pub sent: AtomicU64,
    pub returned: AtomicU64,
    pub confirmed: AtomicU64,
    pub nacked: AtomicU64,
    pub received: AtomicU64,
    consumer_latency: Option<Mutex<Histogram<u64>>>,
    confirm_latency: Option<Mutex<Histogram<u64>>>,
}

impl AgentStats {
    /// A producer's: a confirm-latency histogram only with confirms.
    pub fn producer(confirms: bool) -> Arc<AgentStats> {
        Arc::new(AgentStats::new(
            None,
            confirms.then(|| Mutex::new(new_histogram())),
        ))
    }

    pub fn consumer() -> Arc<AgentStats> {
        Arc::new(AgentStats::new(Some(Mutex::new(new_histogram())), None))
    }

    fn new(
        consumer_latency: Option<Mutex<Histogram<u64>>>,
        confirm_latency: Option<Mutex<Histogram<u64>>>,
    ) -> AgentStats {
        AgentStats {
            sent: AtomicU64::new(0),
            returned: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            nacked: AtomicU64::new(0),
            received: AtomicU64::new(0),
            consumer_latency,
            confirm_latency,
        }
    }

    /// Records a batch of consumer latencies (µs).
    pub fn record_consumer_latencies(&self, latencies_us: &[u64]) {
        record(self.consumer_latency.as_ref(), latencies_us);
    }

    /// Records a batch of confirm latencies (µs).
    pub fn record_confirm_latencies(&self, latencies_us: &[u64]) {
        record(self.confirm_latency.as_ref(), latencies_us);
    }

    fn counts(&self) -> Counts {
        Counts {
            sent: self.sent.load(Ordering::Relaxed),
            returned: self.returned.load(Ordering::Relaxed),
            confirmed: self.confirmed.load(Ordering::Relaxed),
            nacked: self.nacked.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
        }
    }
}

fn record(histogram: Option<&Mutex<Histogram<u64>>>, values: &[u64]) {
    if values.is_empty() {
        return;
    }
    if let Some(histogram) = histogram {
        let mut histogram = histogram.lock();
        for &value in values {
            histogram.saturating_record(value);
        }
    }
}

/// Moves `from`'s counts into `into` and empties `from`.
fn drain_into(from: Option<&Mutex<Histogram<u64>>>, into: &mut Histogram<u64>) {
    if let Some(from) = from {
        let mut from = from.lock();
        if !from.is_empty() {
            into.add(&*from)
                .expect("invariant: every latency histogram has the same bounds");
            from.reset();
        }
    }
}

/// One interval as the collector saw it.
pub struct Interval {
    /// Counts during the interval.
    pub delta: Counts,
    /// Seconds the interval lasted.
    pub seconds: f64,
    /// Seconds since the run started, at the interval's end.
    pub elapsed: f64,
}

/// Reads every agent once per interval.
pub struct Collector {
    agents: Vec<Arc<AgentStats>>,
    started: Instant,
    last_at: Instant,
    last: Counts,
    /// Latencies of the last interval taken.
    pub interval_consumer: Histogram<u64>,
    pub interval_confirm: Histogram<u64>,
    /// Latencies of the whole run.
    pub total_consumer: Histogram<u64>,
    pub total_confirm: Histogram<u64>,
}

impl Collector {
    pub fn new(agents: Vec<Arc<AgentStats>>, started: Instant) -> Collector {
        Collector {
            agents,
            started,
            last_at: started,
            last: Counts::default(),
            interval_consumer: new_histogram(),
            interval_confirm: new_histogram(),
            total_consumer: new_histogram(),
            total_confirm: new_histogram(),
        }
    }

    /// Ends the current interval at `now`: its counts, and its latencies in `interval_*`.
    pub fn take(&mut self, now: Instant) -> Interval {
        self.interval_consumer.reset();
        self.interval_confirm.reset();
        let mut total = Counts::default();
        for agent in &self.agents {
            total.add(&agent.counts());
            drain_into(agent.consumer_latency.as_ref(), &mut self.interval_consumer);
            drain_into(agent.confirm_latency.as_ref(), &mut self.interval_confirm);
        }
        self.total_consumer
            .add(&self.interval_consumer)
            .expect("invariant: every latency histogram has the same bounds");
        self.total_confirm
            .add(&self.interval_confirm)
            .expect("invariant: every latency histogram has the same bounds");
        let delta = total.minus(&self.last);
        let seconds = now.duration_since(self.last_at).as_secs_f64();
        self.last = total;
        self.last_at = now;
        Interval {
            delta,
            seconds,
            elapsed: now.duration_since(self.started).as_secs_f64(),
        }
    }

    /// When the current interval started.
    pub fn last_at(&self) -> Instant {
        self.last_at
    }

    /// Counts since the run started, as of the last `take`.
    pub fn totals(&self) -> Counts {
        self.last
    }

    /// Counts right now, without ending the interval.
    pub fn peek(&self) -> Counts {
        let mut total = Counts::default();
        for agent in &self.agents {
            total.add(&agent.counts());
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_move_latencies_into_the_totals() {
        let consumer = AgentStats::consumer();
        let producer = AgentStats::producer(true);
        let start = Instant::now();
        let mut collector = Collector::new(vec![consumer.clone(), producer.clone()], start);
        consumer.received.fetch_add(3, Ordering::Relaxed);
        consumer.record_consumer_latencies(&[100, 200, 300]);
        producer.sent.fetch_add(4, Ordering::Relaxed);
        producer.record_confirm_latencies(&[50]);
        let first = collector.take(start + std::time::Duration::from_secs(1));
        assert_eq!((first.delta.received, first.delta.sent), (3, 4));
        assert_eq!(percentiles(&collector.interval_consumer).median, 200);
        consumer.received.fetch_add(1, Ordering::Relaxed);
        consumer.record_consumer_latencies(&[400]);
        let second = collector.take(start + std::time::Duration::from_secs(2));
        assert_eq!(second.delta.received, 1);
        assert_eq!(percentiles(&collector.interval_consumer).min, 400);
        assert_eq!(collector.total_consumer.len(), 4);
        assert_eq!(collector.total_confirm.len(), 1);
        assert_eq!(collector.totals().received, 4);
        assert!((second.elapsed - 2.0).abs() < 1e-9 && (second.seconds - 1.0).abs() < 1e-9);
    }

    #[test]
    fn empty_histograms_give_zeros_and_huge_values_saturate() {
        assert_eq!(percentiles(&new_histogram()), Percentiles::default());
        let agent = AgentStats::consumer();
        agent.record_consumer_latencies(&[u64::MAX]);
        let mut collector = Collector::new(vec![agent], Instant::now());
        collector.take(Instant::now());
        assert!(percentiles(&collector.interval_consumer).max >= LATENCY_MAX_US);
    }
}
