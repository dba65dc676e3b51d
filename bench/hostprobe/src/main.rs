//! `warren-hostprobe`: how steady is this machine, with no broker running?
//!
//! ```text
//! warren-hostprobe --seconds 180 --mib 16 --json host.json
//! ```
//!
//! One thread walks a buffer of `--mib` MiB over and over, reading and rewriting one byte of
//! every cache line, and counts the walks completed in each second. The work per walk never
//! changes, so any change in walks per second is the machine's: CPU steal, and the speed of
//! caches and memory shared with other tenants. A broker running flat out touches memory the
//! same way, so this is the reference for judging its per-second rates (bench/overload.sh).
//!
//! Prints a line per second and a summary: the median of the seconds after `--warm-up`, how
//! many fall outside ±`--band` of it and the worst deviation. `--json` writes the samples.

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use clap::Parser;

const CACHE_LINE: usize = 64;

/// Walks a buffer of a fixed size for a fixed time and counts the walks of each second.
#[derive(Parser)]
#[command(name = "warren-hostprobe", version)]
struct Cli {
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u32,
    /// Size of the buffer walked, in MiB (16: past a core's L2, within the shared L3).
    #[arg(long, default_value_t = 16)]
    mib: usize,
    /// Seconds at the start left out of the summary.
    #[arg(long, default_value_t = 10)]
    warm_up: u32,
    /// Relative band around the median that a steady second stays within.
    #[arg(long, default_value_t = 0.15)]
    band: f64,
    /// Write the per-second samples and the summary here as JSON.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    ensure!(
        cli.seconds > cli.warm_up,
        "--seconds ({}) must be above --warm-up ({})",
        cli.seconds,
        cli.warm_up
    );
    ensure!(cli.mib > 0, "--mib must be at least 1");
    let mut buffer = vec![1u8; cli.mib << 20];
    let walks = walk_for(&mut buffer, cli.seconds);
    let summary = Summary::of(&walks[cli.warm_up as usize..], cli.band);
    println!(
        "host probe: {} MiB walk: median {} walks/s; {} of {} seconds outside ±{:.0}% (worst {:+.1}%)",
        cli.mib,
        summary.median,
        summary.outside,
        walks.len() - cli.warm_up as usize,
        cli.band * 100.0,
        summary.worst * 100.0
    );
    if let Some(path) = &cli.json {
        let report = serde_json::json!({
            "tool": "warren-hostprobe",
            "mib": cli.mib,
            "warm_up_s": cli.warm_up,
            "band": cli.band,
            "walks_per_second": walks,
            "median": summary.median,
            "outside": summary.outside,
            "worst": summary.worst,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Walks `buffer` until `seconds` have passed; returns the walks completed in each second.
fn walk_for(buffer: &mut [u8], seconds: u32) -> Vec<u64> {
    let start = Instant::now();
    let mut walks = Vec::with_capacity(seconds as usize);
    let mut next = start + Duration::from_secs(1);
    let mut count = 0u64;
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    while walks.len() < seconds as usize {
        hash = walk(buffer, hash);
        count += 1;
        let now = Instant::now();
        if now >= next {
            println!("second {}: {count} walks", walks.len() + 1);
            walks.push(count);
            count = 0;
            next += Duration::from_secs(1);
        }
    }
    black_box(hash);
    walks
}

/// One walk: reads and rewrites one byte per cache line, each depending on the last.
fn walk(buffer: &mut [u8], mut hash: u64) -> u64 {
    for line in buffer.chunks_exact_mut(CACHE_LINE) {
        hash = (hash ^ u64::from(line[0])).wrapping_mul(0x0100_0000_01b3);
        line[0] = hash as u8;
    }
    black_box(hash)
}

struct Summary {
    median: u64,
    outside: usize,
    worst: f64,
}

impl Summary {
    fn of(walks: &[u64], band: f64) -> Summary {
        let mut sorted = walks.to_vec();
        sorted.sort_unstable();
        let middle = sorted.len() / 2;
        let median = if sorted.len().is_multiple_of(2) {
            (sorted[middle - 1] + sorted[middle]) / 2
        } else {
            sorted[middle]
        }
        .max(1);
        let deviations = walks.iter().map(|&w| w as f64 / median as f64 - 1.0);
        let outside = deviations.clone().filter(|d| d.abs() > band).count();
        let worst = deviations.fold(
            0.0,
            |worst: f64, d| if d.abs() > worst.abs() { d } else { worst },
        );
        Summary {
            median,
            outside,
            worst,
        }
    }
}
