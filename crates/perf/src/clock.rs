//! The clock that latency is measured with: nanoseconds since the Unix epoch, read from the
//! wall clock once, when this process first asks, and advanced by the monotonic clock from then
//! on. Producers write it into each body and consumers subtract it from their own reading.
//! Within one process it never goes backwards, whatever the wall clock does; two processes on
//! one machine agree to within the wall clock's reading at their starts, so a consumer run
//! after a publishing run (a backlog, `bench/backlog.sh`) measures each message's age.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The monotonic instant of the first reading and the wall clock then, ns since the Unix epoch.
static EPOCH: OnceLock<(Instant, u64)> = OnceLock::new();

/// Nanoseconds since the Unix epoch, monotonic within the process.
pub fn now_ns() -> u64 {
    let (start, start_ns) = EPOCH.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        // u64 nanoseconds since 1970 last until 2554
        (Instant::now(), u64::try_from(wall.as_nanos()).unwrap_or(0))
    });
    let elapsed = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    start_ns.saturating_add(elapsed).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_moves_forward_from_the_wall_clock() {
        let a = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = now_ns();
        assert!(b > a + 1_000_000, "{a} then {b}");
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let wall_ns = u64::try_from(wall.as_nanos()).unwrap();
        assert!(wall_ns.abs_diff(b) < 1_000_000_000, "{wall_ns} vs {b}");
    }
}
