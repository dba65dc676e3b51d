//! `--sweep`: how latency grows with load. The run first publishes unthrottled for one step to
//! measure the maximum rate, then paces the producers to 10%, 20%, ... 110% of it, one step
//! each, recording per step the rates achieved and the latency percentiles. The connections stay
//! open throughout; only the rate changes (`Control::set_rate`).
//!
//! Each step's first interval is a warm-up (it straddles the rate change, and a backlog from
//! the step before drains in it) and is left out of the step's figures.

use std::io::Write;
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::driver::Driver;
use crate::error::PerfError;
use crate::options::RunOptions;
use crate::report::{Counts, Report, Sample, SweepStep};
use crate::run::{drive, random_routing_key, say, shape, Fleet, Stop};
use crate::stats::{new_histogram, percentiles, Collector};
use crate::topology::Topology;

/// Percent of the maximum rate at each step.
pub const STEP_PERCENTS: [u32; 11] = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110];

/// One step's figures, warm-up interval left out.
struct Measure {
    counts: Counts,
    seconds: f64,
    consumer: Histogram<u64>,
    confirm: Histogram<u64>,
}

impl Measure {
    fn new() -> Measure {
        Measure {
            counts: Counts::default(),
            seconds: 0.0,
            consumer: new_histogram(),
            confirm: new_histogram(),
        }
    }

    fn add(&mut self, sample: &Sample, collector: &Collector) {
        self.counts.add(&sample.counts);
        self.seconds += sample.interval_s;
        self.consumer
            .add(&collector.interval_consumer)
            .expect("invariant: every latency histogram has the same bounds");
        self.confirm
            .add(&collector.interval_confirm)
            .expect("invariant: every latency histogram has the same bounds");
    }
}

/// Runs the calibration and the steps.
pub async fn run<D: Driver>(
    driver: &D,
    options: &RunOptions,
    step: Duration,
    out: &mut (dyn Write + Send),
    report: &mut Report,
) -> Result<(), PerfError> {
    let topology = Topology::new(options, &random_routing_key(&options.id));
    driver.prepare(&topology).await?;
    let mut fleet = Fleet::start(driver, options, &topology, None, out).await?;
    let result = steps(&mut fleet, options, step, out, report).await;
    let stopped_at = Instant::now();
    fleet.control.stop();
    let summary = fleet.summary(stopped_at, shape(options));
    fleet.shut_down().await;
    result?;
    for line in summary.lines(&options.id) {
        say(out, &line);
    }
    report.summary = summary;
    Ok(())
}

async fn steps(
    fleet: &mut Fleet,
    options: &RunOptions,
    step: Duration,
    out: &mut (dyn Write + Send),
    report: &mut Report,
) -> Result<(), PerfError> {
    let id = &options.id;
    say(
        out,
        &format!(
            "id: {id}, sweep: measuring the maximum rate for {} s",
            step.as_secs()
        ),
    );
    let (calibration, stop) = measure(fleet, options, step, out, report).await?;
    let max_rate = calibration.counts.rates(calibration.seconds).received;
    if stop == Stop::Interrupted {
        return Ok(());
    }
    if max_rate == 0 {
        return Err(PerfError::Broker(format!(
            "sweep: nothing was received in {} s of unthrottled publishing, so there is no \
             maximum rate to step from (are the consumers bound to what the producers send?)",
            step.as_secs()
        )));
    }
    report.sweep_max_rate = Some(max_rate);
    say(
        out,
        &format!("id: {id}, sweep: maximum receive rate {max_rate} msg/s"),
    );
    let producer_channels = f64::from(options.producer_agents().max(1));
    for (index, percent) in STEP_PERCENTS.iter().enumerate() {
        let target = max_rate * u64::from(*percent) / 100;
        fleet
            .control
            .set_rate(Some((target as f64 / producer_channels).max(0.001)));
        let (measured, stop) = measure(fleet, options, step, out, report).await?;
        let rates = measured.counts.rates(measured.seconds);
        let result = SweepStep {
            target_percent: *percent,
            target_rate: target,
            sent_rate: rates.sent,
            received_rate: rates.received,
            consumer_latency_us: percentiles(&measured.consumer),
            confirm_latency_us: options.confirm.map(|_| percentiles(&measured.confirm)),
        };
        say(out, &result.line(id, index, STEP_PERCENTS.len()));
        report.sweep.push(result);
        if stop == Stop::Interrupted {
            break;
        }
    }
    Ok(())
}

/// Drives one step of `length`, adding up every interval after the first.
async fn measure(
    fleet: &mut Fleet,
    options: &RunOptions,
    length: Duration,
    out: &mut (dyn Write + Send),
    report: &mut Report,
) -> Result<(Measure, Stop), PerfError> {
    let mut measured = Measure::new();
    let mut warm_up = true;
    let until = Instant::now() + length;
    let mut on_sample = |sample: &Sample, collector: &Collector| {
        if warm_up {
            warm_up = false;
        } else {
            measured.add(sample, collector);
        }
    };
    let stop = drive(fleet, options, until, false, out, report, &mut on_sample).await?;
    Ok((measured, stop))
}
