//! The clock that latency is measured with: nanoseconds of the monotonic clock since the first
//! time this process read it. Producers write it into each body and consumers subtract it from
//! their own reading, so both ends must be in the same process (as PerfTest's producers and
//! consumers share one JVM).

use std::sync::OnceLock;
use std::time::Instant;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since the process epoch. Never decreases; starts near 0.
pub fn now_ns() -> u64 {
    let epoch = EPOCH.get_or_init(Instant::now);
    // u64 nanoseconds last 584 years.
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_moves_forward() {
        let a = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = now_ns();
        assert!(b > a + 1_000_000, "{a} then {b}");
    }
}
