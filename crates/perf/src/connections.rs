//! `--connections N`: opens N connections with 2 channels each, holds them idle for `-z`
//! seconds (60 by default) and closes them: what a broker's memory per idle connection and its
//! connection-setup rate look like. At most `OPEN_CONCURRENCY` handshakes are in flight at once,
//! and a line a second says how many are open (while opening, holding and closing).
//!
//! Tens of thousands of connections need as many file descriptors (the tool raises its soft
//! limit to the hard one, `open_files`) and, past one address's ephemeral ports, more than one
//! client address (`sources`). Each idle connection keeps buffers of a few hundred bytes, so
//! the tool itself stays small.

use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

use crate::driver::Driver;
use crate::error::PerfError;
use crate::open_files::OpenFiles;
use crate::options::RunOptions;
use crate::report::{ConnectionsReport, Report};
use crate::run::say;
use crate::sources::SourceAddresses;

pub use crate::sources::SOURCE_ADDRESSES_MAX;

/// Channels opened on each idle connection.
pub const CHANNELS_PER_CONNECTION: u16 = 2;
/// Handshakes (or closes) in flight at once.
const OPEN_CONCURRENCY: usize = 32;

/// Opens, holds and closes the connections.
pub async fn run<D: Driver + Clone>(
    driver: &D,
    options: &RunOptions,
    count: u32,
    source_addresses: Option<u8>,
    out: &mut (dyn Write + Send),
    report: &mut Report,
) -> Result<(), PerfError> {
    let id = &options.id;
    if let Some(warning) = OpenFiles::raise().check(count) {
        eprintln!("warren perf: {warning}");
    }
    let target = resolve(&options.endpoint.address()).await;
    let sources = SourceAddresses::plan(source_addresses, count, target)?;
    if let Some(addresses) = sources.describe() {
        say(
            out,
            &format!("id: {id}, connecting from {addresses} in turn (--source-addresses)"),
        );
    }
    let started = Instant::now();
    let (idle, failure) = open_all(driver, count, sources, options, out, started).await;
    let open_s = started.elapsed().as_secs_f64();
    let opened = idle.len() as u32;
    let channels = CHANNELS_PER_CONNECTION;
    say(
        out,
        &format!(
            "id: {id}, opened {opened} connections with {channels} channels each in {open_s:.3} s"
        ),
    );
    let held_from = Instant::now();
    let mut idle = idle;
    if failure.is_none() {
        hold(driver, &mut idle, options, out, held_from).await;
    }
    let held_s = held_from.elapsed().as_secs_f64();
    let closed = close_all(driver, idle, options, out).await;
    say(
        out,
        &format!("id: {id}, held {held_s:.1} s, closed {closed} connections"),
    );
    report.connections = Some(ConnectionsReport {
        requested: count,
        opened,
        channels_per_connection: CHANNELS_PER_CONNECTION,
        source_addresses: sources.count(),
        open_s,
        held_s,
        closed,
    });
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// The broker's first address, to choose source addresses for (`None`: unresolved; the
/// connections then report why).
async fn resolve(address: &str) -> Option<IpAddr> {
    let lookup = tokio::net::lookup_host(address);
    let mut addresses = tokio::time::timeout(crate::amqp091::STEP_TIMEOUT, lookup)
        .await
        .ok()?
        .ok()?;
    addresses.next().map(|address| address.ip())
}

/// Opens up to `count` idle connections; stops at the first failure and returns it, at
/// Ctrl-C, or when the run's time is up.
async fn open_all<D: Driver + Clone>(
    driver: &D,
    count: u32,
    sources: SourceAddresses,
    options: &RunOptions,
    out: &mut (dyn Write + Send),
    started: Instant,
) -> (Vec<D::Idle>, Option<PerfError>) {
    let permits = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let mut tasks = JoinSet::new();
    let mut idle = Vec::with_capacity(count as usize);
    let mut failure = None;
    let mut ticker = progress_ticker(started, options);
    let deadline = tokio::time::sleep_until(started + options.max_time);
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(deadline, interrupt);
    let mut next = 0;
    while failure.is_none() && (next < count || !tasks.is_empty()) {
        tokio::select! {
            permit = permits.clone().acquire_owned(), if next < count => {
                let Ok(permit) = permit else { break };
                let driver = driver.clone();
                let source = sources.for_connection(next);
                next += 1;
                tasks.spawn(async move {
                    let result = driver.open_idle(CHANNELS_PER_CONNECTION, source).await;
                    drop(permit);
                    result
                });
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                collect(done, &mut idle, &mut failure);
            }
            _ = ticker.tick() => {
                let elapsed = started.elapsed().as_secs_f64();
                let open = idle.len();
                say(
                    out,
                    &format!("id: {}, time {elapsed:.3} s, connections open: {open}", options.id),
                );
            }
            () = &mut deadline => break,
            _ = &mut interrupt => break,
        }
    }
    // Handshakes under way end within the driver's step timeouts.
    while let Some(done) = tasks.join_next().await {
        collect(done, &mut idle, &mut failure);
    }
    (idle, failure)
}

/// Ticks once per interval from `from + interval` on; a slow turn delays rather than bunches
/// the lines.
fn progress_ticker(from: Instant, options: &RunOptions) -> tokio::time::Interval {
    let mut ticker = tokio::time::interval_at(from + options.interval, options.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker
}

fn collect<I>(
    done: Result<Result<I, PerfError>, tokio::task::JoinError>,
    idle: &mut Vec<I>,
    failure: &mut Option<PerfError>,
) {
    match done {
        Ok(Ok(connection)) => idle.push(connection),
        Ok(Err(error)) => {
            failure.get_or_insert(error);
        }
        Err(error) => {
            failure.get_or_insert(PerfError::Protocol(format!(
                "opening a connection failed: {error}"
            )));
        }
    }
}

/// Holds the connections for the run time, tending each once per interval (heartbeats, and
/// noticing the broker closing one) and printing how many are still open.
async fn hold<D: Driver>(
    driver: &D,
    idle: &mut Vec<D::Idle>,
    options: &RunOptions,
    out: &mut (dyn Write + Send),
    from: Instant,
) {
    let until = from + options.run_time();
    let mut next = from + options.interval;
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    while next <= until {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = &mut interrupt => return,
        }
        let mut index = 0;
        while index < idle.len() {
            if driver.tend_idle(&mut idle[index]).await.is_ok() {
                index += 1;
            } else {
                drop(idle.swap_remove(index));
            }
        }
        let elapsed = from.elapsed().as_secs_f64();
        let open = idle.len();
        say(
            out,
            &format!(
                "id: {}, time {elapsed:.3} s, connections open: {open}",
                options.id
            ),
        );
        next += options.interval;
    }
    tokio::time::sleep_until(until).await;
}

/// Closes every connection, `OPEN_CONCURRENCY` at a time, with a line per interval; returns
/// how many closed cleanly.
async fn close_all<D: Driver + Clone>(
    driver: &D,
    idle: Vec<D::Idle>,
    options: &RunOptions,
    out: &mut (dyn Write + Send),
) -> u32 {
    let started = Instant::now();
    let permits = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let mut tasks = JoinSet::new();
    let mut ticker = progress_ticker(started, options);
    let mut waiting = idle.into_iter();
    let mut closed = 0;
    let mut ended = 0;
    let total = waiting.len();
    while ended < total {
        tokio::select! {
            permit = permits.clone().acquire_owned(), if waiting.len() > 0 => {
                let (Ok(permit), Some(connection)) = (permit, waiting.next()) else { break };
                let driver = driver.clone();
                tasks.spawn(async move {
                    let result = driver.close_idle(connection).await;
                    drop(permit);
                    result.is_ok()
                });
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                ended += 1;
                if matches!(done, Ok(true)) {
                    closed += 1;
                }
            }
            _ = ticker.tick() => {
                let elapsed = started.elapsed().as_secs_f64();
                say(
                    out,
                    &format!("id: {}, time {elapsed:.3} s, connections closed: {closed}", options.id),
                );
            }
        }
    }
    closed
}
