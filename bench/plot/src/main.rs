//! `warren-plot`: a PNG line chart from a CSV file of Warren's benchmarks.
//!
//! ```text
//! warren-plot --csv bench/results/lazy-queue-X.csv --x second --y rss_mib \
//!     --series broker --marks phase --title "RSS" --out rss.png
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use warren_plot::chart::{self, Axes, Layout};
use warren_plot::{Columns, Table};

/// Draws a CSV file (header row first) as a PNG line chart: one line per value of the
/// series column. Text needs a TrueType font: DejaVu Sans from Debian's fonts-dejavu-core
/// by default, or --font.
#[derive(Parser)]
#[command(name = "warren-plot", version)]
struct Args {
    /// CSV file to read.
    #[arg(long, value_name = "FILE")]
    csv: PathBuf,
    /// Column for the x axis (numbers).
    #[arg(long, value_name = "COLUMN")]
    x: String,
    /// Column for the y axis (numbers; rows where it is empty are skipped).
    #[arg(long, value_name = "COLUMN")]
    y: String,
    /// Column whose values split the rows into lines (one per value, with a legend).
    #[arg(long, value_name = "COLUMN")]
    series: Option<String>,
    /// Column of labels (such as a phase) marked on each line where its value changes.
    #[arg(long, value_name = "COLUMN")]
    marks: Option<String>,
    /// Chart title [default: "Y over X"].
    #[arg(long)]
    title: Option<String>,
    /// x axis label [default: the x column's name].
    #[arg(long, value_name = "TEXT")]
    x_label: Option<String>,
    /// y axis label [default: the y column's name].
    #[arg(long, value_name = "TEXT")]
    y_label: Option<String>,
    /// PNG file to write.
    #[arg(long, value_name = "FILE.png")]
    out: PathBuf,
    /// A logarithmic y axis, for values that span decades (ratios, latencies); values at or
    /// below zero are drawn at the axis' bottom.
    #[arg(long)]
    log_y: bool,
    /// Width in pixels.
    #[arg(long, default_value_t = 1200)]
    width: u32,
    /// Height in pixels.
    #[arg(long, default_value_t = 700)]
    height: u32,
    /// TrueType/OpenType font file for all text [default: DejaVuSans.ttf of
    /// fonts-dejavu-core].
    #[arg(long, value_name = "FILE")]
    font: Option<PathBuf>,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("warren-plot: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.csv)
        .with_context(|| format!("cannot read {}", args.csv.display()))?;
    let table = Table::parse(&text).with_context(|| format!("{}", args.csv.display()))?;
    let series = table
        .series(Columns {
            x: &args.x,
            y: &args.y,
            series: args.series.as_deref(),
            marks: args.marks.as_deref(),
        })
        .with_context(|| format!("{}", args.csv.display()))?;
    chart::load_font(args.font.as_deref())?;
    let layout = Layout {
        title: args
            .title
            .unwrap_or_else(|| format!("{} over {}", args.y, args.x)),
        x_label: args.x_label.unwrap_or_else(|| args.x.clone()),
        y_label: args.y_label.unwrap_or_else(|| args.y.clone()),
        width: args.width,
        height: args.height,
    };
    let axes = Axes {
        log_y: args.log_y,
        ..Axes::default()
    };
    chart::draw_png(&args.out, &layout, &series, &axes)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    let points: usize = series.iter().map(|s| s.points.len()).sum();
    eprintln!(
        "warren-plot: {} ({} lines, {points} points)",
        args.out.display(),
        series.len()
    );
    Ok(())
}
