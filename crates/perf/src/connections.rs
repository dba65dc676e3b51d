//! `--connections N`: opens N connections with 2 channels each, holds them idle for `-z`
//! seconds (60 by default) and closes them: what a broker's memory per idle connection and its
//! connection-setup rate look like. At most `OPEN_CONCURRENCY` handshakes are in flight at once.

use std::io::Write;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::driver::Driver;
use crate::error::PerfError;
use crate::options::RunOptions;
use crate::report::{ConnectionsReport, Report};
use crate::run::say;

/// Channels opened on each idle connection.
pub const CHANNELS_PER_CONNECTION: u16 = 2;
/// Handshakes (or closes) in flight at once.
const OPEN_CONCURRENCY: usize = 32;

/// Opens, holds and closes the connections.
pub async fn run<D: Driver + Clone>(
    driver: &D,
    options: &RunOptions,
    count: u32,
    out: &mut (dyn Write + Send),
    report: &mut Report,
) -> Result<(), PerfError> {
    let id = &options.id;
    let started = Instant::now();
    let (idle, failure) = open_all(driver, count, options, out, started).await;
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
    let closed = close_all(driver, idle).await;
    say(
        out,
        &format!("id: {id}, held {held_s:.1} s, closed {closed} connections"),
    );
    report.connections = Some(ConnectionsReport {
        requested: count,
        opened,
        channels_per_connection: CHANNELS_PER_CONNECTION,
        open_s,
        held_s,
        closed,
    });
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// Opens up to `count` idle connections; stops at the first failure and returns it.
async fn open_all<D: Driver + Clone>(
    driver: &D,
    count: u32,
    options: &RunOptions,
    out: &mut (dyn Write + Send),
    started: Instant,
) -> (Vec<D::Idle>, Option<PerfError>) {
    let permits = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let mut tasks = JoinSet::new();
    let mut idle = Vec::with_capacity(count as usize);
    let mut failure = None;
    let mut next_report = started + options.interval;
    for _ in 0..count {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let driver = driver.clone();
        tasks.spawn(async move {
            let result = driver.open_idle(CHANNELS_PER_CONNECTION).await;
            drop(permit);
            result
        });
        while let Some(done) = tasks.try_join_next() {
            collect(done, &mut idle, &mut failure);
        }
        if failure.is_some() {
            break;
        }
        if Instant::now() >= next_report {
            next_report += options.interval;
            let elapsed = started.elapsed().as_secs_f64();
            say(
                out,
                &format!(
                    "id: {}, time {elapsed:.3} s, connections open: {}",
                    options.id,
                    idle.len()
                ),
            );
        }
    }
    while let Some(done) = tasks.join_next().await {
        collect(done, &mut idle, &mut failure);
    }
    (idle, failure)
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

/// Closes every connection, `OPEN_CONCURRENCY` at a time; returns how many closed cleanly.
async fn close_all<D: Driver + Clone>(driver: &D, idle: Vec<D::Idle>) -> u32 {
    let permits = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let mut tasks = JoinSet::new();
    for connection in idle {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let driver = driver.clone();
        tasks.spawn(async move {
            let result = driver.close_idle(connection).await;
            drop(permit);
            result.is_ok()
        });
    }
    let mut closed = 0;
    while let Some(done) = tasks.join_next().await {
        if matches!(done, Ok(true)) {
            closed += 1;
        }
    }
    closed
}
