//! Pictures of runs, drawn with plotters through `warren-plot`'s chart code (the same font
//! handling and style as the benchmark charts: DejaVu Sans from Debian's fonts-dejavu-core).
//!
//! - A load run: send/receive (and confirm) rates over time above, consumer latency
//!   percentiles over time below.
//! - A sweep: latency percentiles against the receive rate achieved at each step, each median
//!   point labelled with the step's target percent.
//! - `warren perf chart a.json b.json -o out.png`: the runs side by side, one column each, on
//!   the same scales (Warren against RabbitMQ).

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use warren_plot::chart::{draw_on, load_font, log_floor, plot_error, Axes, Layout};
use warren_plot::{Mark, Series};

use crate::error::PerfError;
use crate::report::{Percentiles, Report};

const COLUMN_WIDTH: u32 = 1100;
const HEIGHT: u32 = 1000;
const SWEEP_HEIGHT: u32 = 650;

/// `warren perf chart A.json [B.json ...] -o OUT.png [--font FILE]`.
pub fn command(args: &[String]) -> Result<(), PerfError> {
    let mut inputs = Vec::new();
    let mut out = None;
    let mut font = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-o" | "--out" => out = rest.next().map(PathBuf::from),
            "--font" => font = rest.next().map(PathBuf::from),
            "--help" => {
                println!(
                    "usage: warren perf chart A.json [B.json ...] -o OUT.png [--font FILE.ttf]"
                );
                return Ok(());
            }
            flag if flag.starts_with('-') => {
                return Err(PerfError::usage(format!(
                    "chart: unknown flag '{flag}' (takes -o OUT.png and --font FILE)"
                )))
            }
            input => inputs.push(PathBuf::from(input)),
        }
    }
    let Some(out) = out else {
        return Err(PerfError::usage(
            "chart: say where the picture goes with -o OUT.png",
        ));
    };
    if inputs.is_empty() {
        return Err(PerfError::usage(
            "chart: name one or more --json reports to draw",
        ));
    }
    let reports = inputs
        .iter()
        .map(|p| Report::read_json(p))
        .collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&Report> = reports.iter().collect();
    draw(&refs, &out, font.as_deref())?;
    println!(
        "warren perf: chart of {} run(s) in {}",
        refs.len(),
        out.display()
    );
    Ok(())
}

/// `--chart FILE.png`: the run just made.
pub fn draw_report(report: &Report, path: &Path) -> Result<(), PerfError> {
    draw(&[report], path, None)
}

/// Draws the reports side by side into a PNG.
pub fn draw(reports: &[&Report], path: &Path, font: Option<&Path>) -> Result<(), PerfError> {
    if let Some(report) = reports
        .iter()
        .find(|r| r.samples.is_empty() && r.sweep.is_empty())
    {
        return Err(PerfError::usage(format!(
            "run {} ({}) has no samples to chart (a --connections run, or one that ended within \
             its first interval)",
            report.id, report.mode
        )));
    }
    load_font(font).map_err(plot_failed)?;
    let sweep = reports.iter().all(|r| !r.sweep.is_empty());
    let height = if sweep { SWEEP_HEIGHT } else { HEIGHT };
    let width = COLUMN_WIDTH * reports.len() as u32;
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error).map_err(plot_failed)?;
    let columns = root.split_evenly((1, reports.len()));
    if sweep {
        draw_sweeps(reports, &columns)?;
    } else {
        draw_timelines(reports, &columns)?;
    }
    root.present()
        .map_err(plot_error)
        .map_err(|e| PerfError::Io(format!("writing {}: {e:#}", path.display())))
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

fn draw_timelines(reports: &[&Report], columns: &[Area<'_>]) -> Result<(), PerfError> {
    let rates: Vec<Vec<Series>> = reports.iter().map(|r| rate_series(r)).collect();
    let latencies: Vec<Vec<Series>> = reports.iter().map(|r| latency_series(r)).collect();
    let x_max = reports
        .iter()
        .filter_map(|r| r.samples.last().map(|s| s.time_s))
        .fold(1.0, f64::max);
    let rate_axes = Axes {
        x: Some((0.0, x_max)),
        y_max: Some(y_max(&rates)),
        y_min_log: None,
        log_y: false,
    };
    let latency_axes = Axes {
        x: Some((0.0, x_max)),
        y_max: Some(y_max(&latencies)),
        y_min_log: Some(shared_floor(&latencies)),
        log_y: true,
    };
    for (index, report) in reports.iter().enumerate() {
        let panels = columns[index].split_evenly((2, 1));
        let layout = |title: String, y_label: &str| Layout {
            title,
            x_label: "time (s)".into(),
            y_label: y_label.into(),
            width: COLUMN_WIDTH,
            height: HEIGHT / 2,
        };
        let top = layout(format!("{}: rates", report.label), "msg/s");
        draw_on(&panels[0], &top, &rates[index], &rate_axes).map_err(plot_failed)?;
        let bottom = layout(
            format!("{}: consumer latency", report.label),
            "latency (ms, log scale)",
        );
        draw_on(&panels[1], &bottom, &latencies[index], &latency_axes).map_err(plot_failed)?;
    }
    Ok(())
}

fn draw_sweeps(reports: &[&Report], columns: &[Area<'_>]) -> Result<(), PerfError> {
    let series: Vec<Vec<Series>> = reports.iter().map(|r| sweep_series(r)).collect();
    let x_max = series
        .iter()
        .flatten()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let axes = Axes {
        x: Some((0.0, x_max * 1.05)),
        y_max: Some(y_max(&series)),
        y_min_log: Some(shared_floor(&series)),
        log_y: true,
    };
    for (index, report) in reports.iter().enumerate() {
        let layout = Layout {
            title: format!("{}: latency against rate", report.label),
            x_label: "received (msg/s)".into(),
            y_label: "consumer latency (ms, log scale)".into(),
            width: COLUMN_WIDTH,
            height: SWEEP_HEIGHT,
        };
        draw_on(&columns[index], &layout, &series[index], &axes).map_err(plot_failed)?;
    }
    Ok(())
}

fn rate_series(report: &Report) -> Vec<Series> {
    let mut lines = vec![
        timeline(report, "sent", |s| s.rates.sent as f64),
        timeline(report, "received", |s| s.rates.received as f64),
    ];
    if report.shape.confirms {
        lines.push(timeline(report, "confirmed", |s| s.rates.confirmed as f64));
    }
    lines
}

fn latency_series(report: &Report) -> Vec<Series> {
    let ms = |us: u64| us as f64 / 1000.0;
    vec![
        timeline(report, "median", |s| ms(s.consumer_latency_us.median)),
        timeline(report, "75th", |s| ms(s.consumer_latency_us.p75)),
        timeline(report, "95th", |s| ms(s.consumer_latency_us.p95)),
        timeline(report, "99th", |s| ms(s.consumer_latency_us.p99)),
    ]
}

fn timeline(report: &Report, name: &str, y: impl Fn(&crate::report::Sample) -> f64) -> Series {
    let points: Vec<(f64, f64)> = report.samples.iter().map(|s| (s.time_s, y(s))).collect();
    let x_extent = extent(&points);
    Series {
        name: name.into(),
        points,
        x_extent,
        marks: Vec::new(),
    }
}

/// Median, 95th and 99th against the received rate; the median's points carry the step's
/// target percent.
fn sweep_series(report: &Report) -> Vec<Series> {
    let line = |name: &str, pick: fn(&Percentiles) -> u64, labelled: bool| {
        // in step order: past the maximum the achieved rate falls back while latency climbs
        let steps: Vec<_> = report.sweep.iter().collect();
        let point = |s: &crate::report::SweepStep| {
            (
                s.received_rate as f64,
                pick(&s.consumer_latency_us) as f64 / 1000.0,
            )
        };
        let points: Vec<(f64, f64)> = steps.iter().map(|s| point(s)).collect();
        let marks = steps
            .iter()
            .filter(|_| labelled)
            .map(|s| {
                let (x, y) = point(s);
                Mark {
                    x,
                    y,
                    label: format!("{}%", s.target_percent),
                }
            })
            .collect();
        Series {
            name: name.into(),
            x_extent: extent(&points),
            points,
            marks,
        }
    };
    vec![
        line("median", |p| p.median, true),
        line("95th", |p| p.p95, false),
        line("99th", |p| p.p99, false),
    ]
}

fn extent(points: &[(f64, f64)]) -> (f64, f64) {
    points
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
            (lo.min(p.0), hi.max(p.0))
        })
}

fn y_max(panels: &[Vec<Series>]) -> f64 {
    panels
        .iter()
        .flatten()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1.0)
}

/// One bottom for the log axes of every column, so that they share their scale.
fn shared_floor(panels: &[Vec<Series>]) -> f64 {
    panels
        .iter()
        .map(|series| log_floor(series))
        .fold(f64::INFINITY, f64::min)
}

fn plot_failed(error: impl std::fmt::Display) -> PerfError {
    PerfError::Io(format!("drawing the chart: {error:#}"))
}
