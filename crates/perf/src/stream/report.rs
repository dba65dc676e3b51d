//! stream-perf-test's lines: one a second, then the summary; after it, PerfTest's closing
//! lines (which bench/compare.sh reads) and one `stream-summary key=value` line for scripts.
//!
//! ```text
//! 1, published 1,013,146 msg/s, confirmed 1,010,442 msg/s, consumed 1,009,913 msg/s,
//!   latency min/median/75th/95th/99th 1,180/9,457/12,063/16,319/20,271 µs, chunk size 1,041
//! Summary: published 1,011,002 msg/s, confirmed 1,010,034 msg/s, consumed 1,009,750 msg/s,
//!   latency 95th 16,319 µs, chunk size 1,050
//! ```

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::amqp10::thousands;
use crate::error::PerfError;
use crate::report::{Counts, Percentiles};
use crate::stats::Interval;

/// One second of the run.
#[derive(Clone, Debug, Serialize)]
pub struct IntervalLine {
    pub time_s: f64,
    pub rates: Counts,
    pub latency_us: Percentiles,
    /// Records per chunk consumed in the interval.
    pub chunk_size: u64,
}

impl IntervalLine {
    pub fn new(interval: &Interval, latency_us: Percentiles, chunks: u64) -> IntervalLine {
        IntervalLine {
            time_s: interval.elapsed,
            rates: interval.delta.rates(interval.seconds),
            latency_us,
            chunk_size: interval.delta.received.checked_div(chunks).unwrap_or(0),
        }
    }

    pub fn text(&self) -> String {
        let l = &self.latency_us;
        format!(
            "{}, published {} msg/s, confirmed {} msg/s, consumed {} msg/s, latency \
             min/median/75th/95th/99th {}/{}/{}/{}/{} µs, chunk size {}",
            self.time_s.round() as u64,
            thousands(self.rates.sent),
            thousands(self.rates.confirmed),
            thousands(self.rates.received),
            thousands(l.min),
            thousands(l.median),
            thousands(l.p75),
            thousands(l.p95),
            thousands(l.p99),
            thousands(self.chunk_size)
        )
    }
}

/// The whole run, as the summary prints it and `--json` writes it.
#[derive(Clone, Debug, Serialize)]
pub struct StreamReport {
    pub totals: Counts,
    pub chunks: u64,
    pub elapsed_s: f64,
    /// Averages over the run, msg/s.
    pub published_rate: u64,
    pub confirmed_rate: u64,
    pub consumed_rate: u64,
    pub errors: u64,
    pub latency_us: Percentiles,
    pub chunk_size: u64,
    /// This tool's CPU over the run (user + system), seconds.
    pub cpu_s: Option<f64>,
    pub lines: Vec<IntervalLine>,
}

impl StreamReport {
    pub fn new(
        totals: Counts,
        chunks: u64,
        elapsed_s: f64,
        latency_us: Percentiles,
        cpu_s: Option<f64>,
        lines: Vec<IntervalLine>,
    ) -> StreamReport {
        let rates = totals.rates(elapsed_s);
        StreamReport {
            totals,
            chunks,
            elapsed_s,
            published_rate: rates.sent,
            confirmed_rate: rates.confirmed,
            consumed_rate: rates.received,
            errors: totals.nacked,
            latency_us,
            chunk_size: totals.received.checked_div(chunks).unwrap_or(0),
            cpu_s,
            lines,
        }
    }

    pub fn summary_text(&self) -> String {
        format!(
            "Summary: published {} msg/s, confirmed {} msg/s, consumed {} msg/s, latency 95th \
             {} µs, chunk size {}",
            thousands(self.published_rate),
            thousands(self.confirmed_rate),
            thousands(self.consumed_rate),
            thousands(self.latency_us.p95),
            thousands(self.chunk_size)
        )
    }

    /// The summary, PerfTest's closing lines, and the `stream-summary` line.
    pub fn write_summary(&self, out: &mut (dyn Write + Send)) {
        let l = &self.latency_us;
        let cpu = self.cpu_s.map_or("?".to_owned(), |s| format!("{s:.2}"));
        let text = format!(
            "{}\nid: stream, sending rate avg: {} msg/s\nid: stream, receiving rate avg: {} msg/s\n\
             id: stream, consumer latency min/median/75th/95th/99th {} µs\n\
             stream-summary elapsed_s={:.3} published={} confirmed={} errors={} consumed={} \
             published_rate={} confirmed_rate={} consumed_rate={} latency_us_p50={} \
             latency_us_p95={} latency_us_p99={} chunk_size={} tool_cpu_s={cpu}\n",
            self.summary_text(),
            self.published_rate,
            self.consumed_rate,
            l.slashed(),
            self.elapsed_s,
            self.totals.sent,
            self.totals.confirmed,
            self.errors,
            self.totals.received,
            self.published_rate,
            self.confirmed_rate,
            self.consumed_rate,
            l.median,
            l.p95,
            l.p99,
            self.chunk_size
        );
        out.write_all(text.as_bytes()).ok();
        out.flush().ok();
    }

    pub fn write_json(&self, path: &Path) -> Result<(), PerfError> {
        let json = serde_json::to_string_pretty(self)
            .map_err(|e| PerfError::Io(format!("encoding the report: {e}")))?;
        std::fs::write(path, json).map_err(|e| PerfError::io(&path.display().to_string(), &e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_as_stream_perf_tests() {
        let interval = Interval {
            delta: Counts {
                sent: 2_000_000,
                confirmed: 1_999_000,
                received: 1_998_000,
                ..Counts::default()
            },
            seconds: 1.0,
            elapsed: 3.0004,
        };
        let latency = Percentiles {
            min: 100,
            median: 1500,
            p75: 2000,
            p95: 3000,
            p99: 4000,
            max: 9000,
            count: 10,
        };
        let line = IntervalLine::new(&interval, latency, 1998);
        assert_eq!(
            line.text(),
            "3, published 2,000,000 msg/s, confirmed 1,999,000 msg/s, consumed 1,998,000 \
             msg/s, latency min/median/75th/95th/99th 100/1,500/2,000/3,000/4,000 µs, chunk \
             size 1,000"
        );
        let report = StreamReport::new(interval.delta, 1998, 2.0, latency, Some(1.5), vec![line]);
        assert_eq!(report.published_rate, 1_000_000);
        let mut out = Vec::new();
        report.write_summary(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(
            "Summary: published 1,000,000 msg/s, confirmed 999,500 msg/s, consumed 999,000 \
             msg/s, latency 95th 3,000 µs, chunk size 1,000\n"
        ));
        assert!(text.contains("id: stream, sending rate avg: 1000000 msg/s\n"));
        assert!(text.contains("receiving rate avg: 999000 msg/s\n"));
        assert!(text.contains("min/median/75th/95th/99th 100/1500/2000/3000/4000 µs\n"));
        assert!(text.contains("consumed_rate=999000 latency_us_p50=1500"));
    }
}
