//! `warren-loopback`: the least CPU this machine spends to pass bytes through a process over
//! loopback TCP, the floor under any broker's CPU per MiB for large messages.
//!
//! ```text
//! warren-loopback --seconds 10 --chunk-kib 1024
//! ```
//!
//! Three threads: a source writes `--chunk-kib` chunks to a relay, which reads each into one
//! buffer and writes it on to a sink, which reads and drops it. The relay does what a broker
//! must do for a large message and nothing else: one read from the publisher's socket and one
//! write to the consumer's. No protocol, no copy in user space. Prints the MiB/s of each second,
//! then the rate and each thread's CPU (utime + stime of /proc/thread-self/stat) per MiB.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use clap::Parser;

#[derive(Parser)]
#[command(name = "warren-loopback", version)]
struct Cli {
    /// How long the source writes, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Size of each write and of the relay's read buffer, in KiB.
    #[arg(long, default_value_t = 1024)]
    chunk_kib: usize,
}

/// CPU seconds this thread has used (utime + stime, clock ticks of 10 ms).
fn thread_cpu_s() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").context("reading thread stat")?;
    // Fields after the command's closing parenthesis; utime and stime are the 14th and 15th.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((ticks(11) + ticks(12)) / 100.0)
}

/// Copies `from` to `to` through one buffer until `from` ends; returns (bytes, CPU seconds).
fn pump(
    mut from: TcpStream,
    mut to: Option<TcpStream>,
    buf: &mut [u8],
    moved: &AtomicU64,
) -> anyhow::Result<(u64, f64)> {
    let start = thread_cpu_s()?;
    let mut total = 0u64;
    loop {
        let n = from.read(buf).context("reading")?;
        if n == 0 {
            break;
        }
        if let Some(to) = to.as_mut() {
            to.write_all(&buf[..n]).context("writing")?;
        }
        total += n as u64;
        moved.fetch_add(n as u64, Ordering::Relaxed);
    }
    Ok((total, thread_cpu_s()? - start))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    ensure!(
        cli.seconds > 0 && cli.chunk_kib > 0,
        "--seconds and --chunk-kib must be above 0"
    );
    let chunk = cli.chunk_kib << 10;
    let to_relay = TcpListener::bind("127.0.0.1:0").context("binding the relay's listener")?;
    let to_sink = TcpListener::bind("127.0.0.1:0").context("binding the sink's listener")?;
    let (relay_addr, sink_addr) = (to_relay.local_addr()?, to_sink.local_addr()?);
    let sunk = Arc::new(AtomicU64::new(0));
    let sink = {
        let sunk = sunk.clone();
        thread::spawn(move || {
            let (from, _) = to_sink.accept().context("sink accept")?;
            pump(from, None, &mut vec![0u8; chunk], &sunk)
        })
    };
    let relay = thread::spawn(move || {
        let (from, _) = to_relay.accept().context("relay accept")?;
        let to = TcpStream::connect(sink_addr).context("relay connect")?;
        pump(from, Some(to), &mut vec![0u8; chunk], &AtomicU64::new(0))
    });
    let seconds = cli.seconds;
    let source = thread::spawn(move || -> anyhow::Result<f64> {
        let mut to = TcpStream::connect(relay_addr).context("source connect")?;
        let data = vec![7u8; chunk];
        let (start, cpu) = (Instant::now(), thread_cpu_s()?);
        while start.elapsed() < Duration::from_secs(seconds) {
            to.write_all(&data).context("source write")?;
        }
        Ok(thread_cpu_s()? - cpu)
    });
    let started = Instant::now();
    let mut last = 0;
    while !source.is_finished() {
        thread::sleep(Duration::from_secs(1));
        let now = sunk.load(Ordering::Relaxed);
        println!(
            "loopback: {:>3} s {:>6} MiB/s",
            started.elapsed().as_secs(),
            (now - last) >> 20
        );
        last = now;
    }
    let source_cpu = source
        .join()
        .map_err(|_| anyhow::anyhow!("source panicked"))??;
    let (_, relay_cpu) = relay
        .join()
        .map_err(|_| anyhow::anyhow!("relay panicked"))??;
    let (bytes, sink_cpu) = sink
        .join()
        .map_err(|_| anyhow::anyhow!("sink panicked"))??;
    let wall = started.elapsed().as_secs_f64();
    let mib = bytes as f64 / f64::from(1 << 20);
    let per_mib = |cpu: f64| cpu * 1000.0 / mib;
    println!(
        "loopback: {:.0} MiB/s over {wall:.1} s, {} KiB chunks; CPU per MiB: relay {:.3} ms, \
         source {:.3} ms, sink {:.3} ms",
        mib / wall,
        cli.chunk_kib,
        per_mib(relay_cpu),
        per_mib(source_cpu),
        per_mib(sink_cpu)
    );
    Ok(())
}
