//! CPU time of this process, for the report: a load generator that uses a whole core may be
//! what limits the rate, and on a shared machine that is worth knowing.

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on every Linux port
/// that Warren runs on).
const USER_HZ: f64 = 100.0;

/// User plus system CPU seconds used by this process so far; `None` where `/proc` is absent.
pub fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    stat_cpu_seconds(&stat)
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line, in seconds.
fn stat_cpu_seconds(stat: &str) -> Option<f64> {
    // the command name (field 2) is in parentheses and may contain spaces
    let after_name = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // after the name, field 3 (state) is index 0, so field n is index n - 3
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime() {
        let line = "42 (warren perf) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0";
        assert_eq!(stat_cpu_seconds(line), Some(3.0));
        assert!(process_cpu_seconds().is_some_and(|s| s >= 0.0));
    }
}
