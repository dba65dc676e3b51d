//! quiver's output: a progress line a second under a Sender/Receiver head, then the RESULTS
//! block; also a one-line summary for scripts and the JSON file.

use std::io::Write;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::options::Amqp10Options;
use crate::error::PerfError;

pub const PROGRESS_HEAD: &str = "\
---------------------- Sender -----------------------  --------------------- Receiver ----------------------  --------
Time [s]      Count [m]  Rate [m/s]   Accepted [m]      Time [s]      Count [m]  Rate [m/s]                     Lat [ms]
-----------------------------------------------------  -----------------------------------------------------  --------";

pub fn progress_line(
    time_s: f64,
    sent: u64,
    sent_rate: u64,
    accepted: u64,
    received: u64,
    received_rate: u64,
    latency_ms: f64,
) -> String {
    format!(
        "{time_s:>8.1} {:>14} {:>11} {:>14}  {time_s:>12.1} {:>14} {:>11} {:>18}  {latency_ms:>8.1}",
        thousands(sent),
        thousands(sent_rate),
        thousands(accepted),
        thousands(received),
        thousands(received_rate),
        ""
    )
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Latency percentiles, ms.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latencies {
    pub p0: f64,
    pub p25: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub p99_99: f64,
    pub p100: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Amqp10Report {
    pub address: String,
    pub body_size: usize,
    pub credit: u32,
    pub durable: bool,
    pub presettled: bool,
    pub sent: u64,
    pub accepted: u64,
    /// Rejected, released or modified by the broker.
    pub refused: u64,
    pub received: u64,
    pub complete: bool,
    /// From the first send to the last receive, s.
    pub duration_s: f64,
    pub sender_rate: f64,
    pub receiver_rate: f64,
    pub end_to_end_rate: f64,
    pub latency_ms: Latencies,
}

fn rate(count: u64, from: Option<Instant>, to: Instant) -> f64 {
    match from {
        Some(from) if to > from => count as f64 / (to - from).as_secs_f64(),
        _ => 0.0,
    }
}

impl Amqp10Report {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        options: &Amqp10Options,
        sent: u64,
        accepted: u64,
        refused: u64,
        received: u64,
        complete: bool,
        start: Instant,
        first_sent: Option<Instant>,
        last_settled: Instant,
        first_received: Option<Instant>,
        last_received: Instant,
        histogram: &Histogram<u64>,
    ) -> Amqp10Report {
        let begin = first_sent.unwrap_or(start);
        let end = last_received.max(last_settled).max(begin);
        let duration_s = (end - begin).as_secs_f64();
        let ms = |q: f64| {
            if histogram.is_empty() {
                0.0
            } else {
                histogram.value_at_quantile(q) as f64 / 1000.0
            }
        };
        Amqp10Report {
            address: options.address.clone(),
            body_size: options.body_size,
            credit: options.credit,
            durable: options.durable,
            presettled: options.presettled,
            sent,
            accepted,
            refused,
            received,
            complete,
            duration_s,
            sender_rate: rate(sent, first_sent, last_settled),
            receiver_rate: rate(received, first_received, last_received),
            end_to_end_rate: if duration_s > 0.0 {
                received as f64 / duration_s
            } else {
                0.0
            },
            latency_ms: Latencies {
                p0: if histogram.is_empty() {
                    0.0
                } else {
                    histogram.min() as f64 / 1000.0
                },
                p25: ms(0.25),
                p50: ms(0.5),
                p90: ms(0.9),
                p99: ms(0.99),
                p99_9: ms(0.999),
                p99_99: ms(0.9999),
                p100: if histogram.is_empty() {
                    0.0
                } else {
                    histogram.max() as f64 / 1000.0
                },
            },
        }
    }

    /// The RESULTS block, then the one-line summary.
    pub fn write_results(&self, out: &mut impl Write) {
        let line = |label: &str, value: String, unit: &str| {
            let dots = 52usize.saturating_sub(label.len() + value.len() + 2);
            format!("{label} {} {value} {unit}", ".".repeat(dots))
        };
        let l = &self.latency_ms;
        let mut text = String::new();
        text.push_str("\nRESULTS\n\n");
        for (label, value, unit) in [
            ("Count", thousands(self.received), "messages"),
            ("Duration", format!("{:.1}", self.duration_s), "seconds"),
            (
                "Sender rate",
                thousands(self.sender_rate as u64),
                "messages/s",
            ),
            (
                "Receiver rate",
                thousands(self.receiver_rate as u64),
                "messages/s",
            ),
            (
                "End-to-end rate",
                thousands(self.end_to_end_rate as u64),
                "messages/s",
            ),
        ] {
            text.push_str(&line(label, value, unit));
            text.push('\n');
        }
        text.push_str("\nLatencies by percentile:\n\n");
        for ((a, va), (b, vb)) in [
            (("0%", l.p0), ("90.00%", l.p90)),
            (("25%", l.p25), ("99.00%", l.p99)),
            (("50%", l.p50), ("99.90%", l.p99_9)),
            (("100%", l.p100), ("99.99%", l.p99_99)),
        ] {
            text.push_str(&format!(
                "{a:>12} {} {va:>7.3} ms    {b:>8} {} {vb:>7.3} ms\n",
                ".".repeat(8),
                ".".repeat(8)
            ));
        }
        text.push('\n');
        text.push_str(&self.summary_line());
        text.push('\n');
        out.write_all(text.as_bytes()).ok();
        out.flush().ok();
    }

    /// One line for scripts: `key=value` pairs.
    pub fn summary_line(&self) -> String {
        let l = &self.latency_ms;
        format!(
            "amqp10-summary count={} sent={} accepted={} refused={} received={} complete={} duration_s={:.3} sender_rate={:.0} receiver_rate={:.0} end_to_end_rate={:.0} latency_ms_p50={:.3} latency_ms_p90={:.3} latency_ms_p99={:.3} latency_ms_p99_9={:.3} latency_ms_max={:.3}",
            self.received,
            self.sent,
            self.accepted,
            self.refused,
            self.received,
            self.complete,
            self.duration_s,
            self.sender_rate,
            self.receiver_rate,
            self.end_to_end_rate,
            l.p50,
            l.p90,
            l.p99,
            l.p99_9,
            l.p100
        )
    }

    /// `--json FILE` and `--output DIR/summary.json`.
    pub fn write_files(&self, options: &Amqp10Options) -> Result<(), PerfError> {
        let json = serde_json::to_string_pretty(self)
            .map_err(|e| PerfError::Io(format!("encoding the summary: {e}")))?;
        let mut paths = Vec::new();
        if let Some(path) = &options.json {
            paths.push(path.clone());
        }
        if let Some(dir) = &options.output {
            std::fs::create_dir_all(dir)
                .map_err(|e| PerfError::io(&dir.display().to_string(), &e))?;
            paths.push(dir.join("summary.json"));
        }
        for path in paths {
            std::fs::write(&path, &json)
                .map_err(|e| PerfError::io(&path.display().to_string(), &e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_000_000), "1,000,000");
    }
}
