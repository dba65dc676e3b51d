//! What a run reports: the per-interval `Sample`s, the `Summary`, sweep steps, and the whole
//! `Report` that `--json` writes and `warren perf chart` reads back.
//!
//! The printed lines follow PerfTest 2.x word for word, so scripts that read PerfTest's output
//! read this tool's too (the first line is one line, wrapped here):
//!
//! ```text
//! id: test-163346-195, time 1.000 s, sent: 92004 msg/s, confirmed: 91904 msg/s, nacked: 0
//!   msg/s, received: 91904 msg/s, min/median/75th/95th/99th consumer latency:
//!   40/1241/1677/2917/5012 µs, confirm latency: 193/1189/1431/1913/3142 µs
//! id: test-163346-195, sending rate avg: 92004 msg/s
//! id: test-163346-195, receiving rate avg: 91904 msg/s
//! id: test-163346-195, consumer latency min/median/75th/95th/99th 40/1241/1677/2917/5012 µs
//! id: test-163346-195, confirm latency min/median/75th/95th/99th 193/1189/1431/1913/3142 µs
//! ```
//!
//! Every number printed is a field of the `Sample` or `Summary` it came from, so the lines and
//! the JSON file always agree.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::PerfError;

/// Message counts: since the start, or during one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub sent: u64,
    pub returned: u64,
    pub confirmed: u64,
    pub nacked: u64,
    pub received: u64,
}

impl Counts {
    pub fn add(&mut self, other: &Counts) {
        self.sent += other.sent;
        self.returned += other.returned;
        self.confirmed += other.confirmed;
        self.nacked += other.nacked;
        self.received += other.received;
    }

    pub fn minus(&self, earlier: &Counts) -> Counts {
        Counts {
            sent: self.sent.saturating_sub(earlier.sent),
            returned: self.returned.saturating_sub(earlier.returned),
            confirmed: self.confirmed.saturating_sub(earlier.confirmed),
            nacked: self.nacked.saturating_sub(earlier.nacked),
            received: self.received.saturating_sub(earlier.received),
        }
    }

    /// Each count over `seconds`, rounded to whole msg/s as PerfTest prints them.
    pub fn rates(&self, seconds: f64) -> Counts {
        let rate = |n: u64| {
            if seconds > 0.0 {
                (n as f64 / seconds).round() as u64
            } else {
                0
            }
        };
        Counts {
            sent: rate(self.sent),
            returned: rate(self.returned),
            confirmed: rate(self.confirmed),
            nacked: rate(self.nacked),
            received: rate(self.received),
        }
    }
}

/// Latency percentiles in µs, and how many latencies they summarise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    pub min: u64,
    pub median: u64,
    pub p75: u64,
    pub p95: u64,
    pub p99: u64,
    pub max: u64,
    pub count: u64,
}

impl Percentiles {
    /// `min/median/75th/95th/99th` as PerfTest prints them.
    pub fn slashed(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}",
            self.min, self.median, self.p75, self.p95, self.p99
        )
    }
}

/// Which optional fields a run's lines carry (as PerfTest: returned with `-f mandatory`,
/// confirmed and nacked with `-c`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub returned: bool,
    pub confirms: bool,
}

/// One reporting interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the run started, at the interval's end.
    pub time_s: f64,
    /// How long the interval lasted, seconds.
    pub interval_s: f64,
    /// Messages during the interval.
    pub counts: Counts,
    /// `counts` per second, rounded: the numbers printed.
    pub rates: Counts,
    pub consumer_latency_us: Percentiles,
    /// Only with confirms.
    pub confirm_latency_us: Option<Percentiles>,
}

impl Sample {
    /// The per-interval line.
    pub fn line(&self, id: &str, shape: Shape) -> String {
        let r = &self.rates;
        let mut line = format!(
            "id: {id}, time {:.3} s, sent: {} msg/s",
            self.time_s, r.sent
        );
        if shape.returned {
            line.push_str(&format!(", returned: {} msg/s", r.returned));
        }
        if shape.confirms {
            line.push_str(&format!(
                ", confirmed: {} msg/s, nacked: {} msg/s",
                r.confirmed, r.nacked
            ));
        }
        line.push_str(&format!(
            ", received: {} msg/s, min/median/75th/95th/99th consumer latency: {} µs",
            r.received,
            self.consumer_latency_us.slashed()
        ));
        if let Some(confirm) = &self.confirm_latency_us {
            line.push_str(&format!(", confirm latency: {} µs", confirm.slashed()));
        }
        line
    }
}

/// The whole run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// From the first publish to the stop, seconds.
    pub duration_s: f64,
    pub totals: Counts,
    pub sending_rate_avg: u64,
    pub receiving_rate_avg: u64,
    pub consumer_latency_us: Percentiles,
    pub confirm_latency_us: Option<Percentiles>,
    /// CPU seconds (user + system) this tool used, from /proc/self/stat; `None` off Linux.
    pub tool_cpu_s: Option<f64>,
}

impl Summary {
    /// PerfTest's summary lines.
    pub fn lines(&self, id: &str) -> Vec<String> {
        let mut lines = vec![
            format!(
                "id: {id}, sending rate avg: {} msg/s",
                self.sending_rate_avg
            ),
            format!(
                "id: {id}, receiving rate avg: {} msg/s",
                self.receiving_rate_avg
            ),
            format!(
                "id: {id}, consumer latency min/median/75th/95th/99th {} µs",
                self.consumer_latency_us.slashed()
            ),
        ];
        if let Some(confirm) = &self.confirm_latency_us {
            lines.push(format!(
                "id: {id}, confirm latency min/median/75th/95th/99th {} µs",
                confirm.slashed()
            ));
        }
        lines
    }
}

/// One step of a `--sweep`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepStep {
    /// Percent of the measured maximum that was asked for.
    pub target_percent: u32,
    /// msg/s asked for, all producers together.
    pub target_rate: u64,
    /// msg/s achieved over the step (after its first interval, a warm-up).
    pub sent_rate: u64,
    pub received_rate: u64,
    pub consumer_latency_us: Percentiles,
    pub confirm_latency_us: Option<Percentiles>,
}

impl SweepStep {
    pub fn line(&self, id: &str, index: usize, steps: usize) -> String {
        format!(
            "id: {id}, sweep step {}/{steps}: target {}% = {} msg/s, sent: {} msg/s, received: \
             {} msg/s, min/median/75th/95th/99th consumer latency: {} µs",
            index + 1,
            self.target_percent,
            self.target_rate,
            self.sent_rate,
            self.received_rate,
            self.consumer_latency_us.slashed()
        )
    }
}

/// A `--connections` run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionsReport {
    pub requested: u32,
    pub opened: u32,
    pub channels_per_connection: u16,
    /// Client addresses the connections were spread over (127.0.0.2 on); 0: not bound.
    #[serde(default)]
    pub source_addresses: u8,
    /// How long opening all of them took, seconds.
    pub open_s: f64,
    pub held_s: f64,
    pub closed: u32,
}

/// Everything `--json` writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub tool: String,
    pub version: String,
    pub id: String,
    /// Name of the run in charts (`--label`, else the broker's host:port).
    pub label: String,
    pub protocol: String,
    /// The broker, without the password.
    pub uri: String,
    /// `load`, `sweep` or `connections`.
    pub mode: String,
    pub command_line: Vec<String>,
    pub shape: Shape,
    pub samples: Vec<Sample>,
    pub summary: Summary,
    /// Highest receive rate measured before a sweep's steps.
    pub sweep_max_rate: Option<u64>,
    pub sweep: Vec<SweepStep>,
    pub connections: Option<ConnectionsReport>,
}

impl Report {
    pub fn write_json(&self, path: &Path) -> Result<(), PerfError> {
        let text = serde_json::to_string_pretty(self)
            .map_err(|error| PerfError::Io(format!("encoding the report as JSON: {error}")))?;
        std::fs::write(path, text + "\n")
            .map_err(|error| PerfError::io(&format!("writing {}", path.display()), &error))
    }

    pub fn read_json(path: &Path) -> Result<Report, PerfError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| PerfError::io(&format!("reading {}", path.display()), &error))?;
        serde_json::from_str(&text).map_err(|error| {
            PerfError::Usage(format!(
                "{} is not a warren perf --json report: {error}",
                path.display()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn percentiles(base: u64) -> Percentiles {
        Percentiles {
            min: base,
            median: base * 2,
            p75: base * 3,
            p95: base * 4,
            p99: base * 5,
            max: base * 6,
            count: 10,
        }
    }

    #[test]
    fn lines_match_perftest() {
        let sample = Sample {
            time_s: 1.0004,
            interval_s: 1.0004,
            counts: Counts::default(),
            rates: Counts {
                sent: 92004,
                returned: 0,
                confirmed: 91904,
                nacked: 0,
                received: 91904,
            },
            consumer_latency_us: percentiles(40),
            confirm_latency_us: Some(percentiles(193)),
        };
        let shape = Shape {
            returned: false,
            confirms: true,
        };
        assert_eq!(
            sample.line("test-163346-195", shape),
            "id: test-163346-195, time 1.000 s, sent: 92004 msg/s, confirmed: 91904 msg/s, \
             nacked: 0 msg/s, received: 91904 msg/s, min/median/75th/95th/99th consumer \
             latency: 40/80/120/160/200 µs, confirm latency: 193/386/579/772/965 µs"
        );
        let plain = Sample {
            confirm_latency_us: None,
            ..sample
        };
        assert_eq!(
            plain.line(
                "x",
                Shape {
                    returned: true,
                    confirms: false
                }
            ),
            "id: x, time 1.000 s, sent: 92004 msg/s, returned: 0 msg/s, received: 91904 msg/s, \
             min/median/75th/95th/99th consumer latency: 40/80/120/160/200 µs"
        );
    }

    #[test]
    fn summary_lines_match_perftest() {
        let summary = Summary {
            sending_rate_avg: 27474,
            receiving_rate_avg: 27459,
            consumer_latency_us: percentiles(1),
            confirm_latency_us: Some(percentiles(2)),
            ..Default::default()
        };
        assert_eq!(
            summary.lines("test-104559-435"),
            vec![
                "id: test-104559-435, sending rate avg: 27474 msg/s",
                "id: test-104559-435, receiving rate avg: 27459 msg/s",
                "id: test-104559-435, consumer latency min/median/75th/95th/99th 1/2/3/4/5 µs",
                "id: test-104559-435, confirm latency min/median/75th/95th/99th 2/4/6/8/10 µs",
            ]
        );
    }

    #[test]
    fn rates_round_to_whole_messages_per_second() {
        let counts = Counts {
            sent: 1001,
            received: 999,
            ..Default::default()
        };
        let rates = counts.rates(1.001);
        assert_eq!((rates.sent, rates.received), (1000, 998));
        assert_eq!(counts.rates(0.0), Counts::default());
    }
}
