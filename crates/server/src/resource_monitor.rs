//! The resource monitor (RabbitMQ's `vm_memory_monitor` and `rabbit_disk_monitor` in one):
//! once a second it samples the broker's memory and the free space on the data directory's
//! file system and reports both to core's alarms, which block publishers while either is over
//! its limit.
//!
//! Memory is the process's resident set size (RabbitMQ's default strategy on Linux), from
//! `/proc/self/statm`. The memory available to the broker is RAM (`MemTotal` in
//! `/proc/meminfo`) or the cgroup memory limit when that is lower; it is read at start and
//! again whenever the limits change, as RabbitMQ re-reads it on `set_vm_memory_high_watermark`.
//! Free disk space is what `statvfs` says unprivileged users may still write.
//!
//! One task, never on the message path. A sample is two small reads from procfs and one
//! `statvfs`, microseconds each, so it runs inline rather than on the blocking pool.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use warren_core::alarm::Limits;
use warren_core::Broker;

/// How often memory and disk are sampled.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

pub struct ResourceMonitor {
    broker: Arc<Broker>,
    data_dir: PathBuf,
    /// Memory available to the broker; `None` when it cannot be read, which turns the memory
    /// alarm off (a relative watermark of an unknown amount means nothing).
    total_memory_bytes: Option<u64>,
    /// Whether the last sample failed, so that a failure is logged once, not every second.
    memory_failed: bool,
    disk_failed: bool,
}

impl ResourceMonitor {
    /// Reads the memory available and logs both limits.
    pub fn new(broker: Arc<Broker>, data_dir: PathBuf) -> ResourceMonitor {
        let mut monitor = ResourceMonitor {
            broker,
            data_dir,
            total_memory_bytes: None,
            memory_failed: false,
            disk_failed: false,
        };
        monitor.read_total_memory();
        monitor.log_limits();
        monitor
    }

    /// Samples every second, and at once when the limits change, until shutdown.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut limits = self.broker.alarms().subscribe_limits();
        let mut ticker = tokio::time::interval(SAMPLE_INTERVAL);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                changed = limits.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    self.read_total_memory();
                    self.log_limits();
                }
                _ = shutdown.changed() => return,
            }
            self.sample();
        }
    }

    /// One sample of memory and disk, reported to the alarms.
    pub fn sample(&mut self) {
        let alarms = self.broker.alarms();
        let total = self.total_memory_bytes;
        if let Some(total) = total {
            match rss_bytes() {
                Ok(rss) => {
                    self.memory_failed = false;
                    alarms.report_memory(rss, total);
                }
                Err(error) => {
                    if !std::mem::replace(&mut self.memory_failed, true) {
                        tracing::warn!(%error, "cannot read the broker's memory use");
                    }
                }
            }
        }
        match free_disk_bytes(&self.data_dir) {
            Ok(free) => {
                self.disk_failed = false;
                alarms.report_disk_free(free, total.unwrap_or(0));
            }
            Err(error) => {
                if !std::mem::replace(&mut self.disk_failed, true) {
                    tracing::warn!(
                        %error,
                        data_dir = %self.data_dir.display(),
                        "cannot read the free disk space of the data directory"
                    );
                }
            }
        }
    }

    fn read_total_memory(&mut self) {
        match total_memory_bytes() {
            Ok(total) => self.total_memory_bytes = Some(total),
            Err(error) => {
                if self.total_memory_bytes.is_none() {
                    tracing::warn!(%error, "cannot read the memory available: memory alarm off");
                }
            }
        }
    }

    fn log_limits(&self) {
        let limits: Limits = self.broker.alarms().limits();
        let total = self.total_memory_bytes.unwrap_or(0);
        if self.total_memory_bytes.is_some() {
            let watermark = limits.memory_high_watermark.limit_bytes(total);
            tracing::info!(
                "memory high watermark set to {} MiB ({watermark} bytes) of {} MiB total",
                watermark >> 20,
                total >> 20
            );
        }
        let disk = limits.disk_free_limit.limit_bytes(total);
        tracing::info!(
            data_dir = %self.data_dir.display(),
            "disk free limit set to {} MB ({disk} bytes)",
            disk / 1_000_000
        );
    }
}

/// The process's resident set size: the second field of `/proc/self/statm`, in pages.
fn rss_bytes() -> io::Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .ok_or_else(|| malformed("/proc/self/statm"))?;
    let page_bytes = u64::try_from(rustix::param::page_size()).unwrap_or(4096);
    Ok(pages.saturating_mul(page_bytes))
}

/// RAM, or the cgroup memory limit when lower.
fn total_memory_bytes() -> io::Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    let ram_kib: u64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse().ok())
        .ok_or_else(|| malformed("/proc/meminfo"))?;
    let ram = ram_kib.saturating_mul(1024);
    Ok(cgroup_memory_limit().map_or(ram, |limit| limit.min(ram)))
}

/// The memory limit of the cgroup the process is in (v2 `memory.max`, v1
/// `memory.limit_in_bytes`); `None` when there is none ("max") or it cannot be read. Inside a
/// container the cgroup path may be "/" while the limit sits at the mount's root, so the root
/// is tried too.
fn cgroup_memory_limit() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut candidates = Vec::new();
    for line in cgroups.lines() {
        // "0::/path" (v2) or "4:memory:/path" (v1).
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let path = path.trim_end_matches('/');
        if controllers.is_empty() {
            candidates.push(format!("/sys/fs/cgroup{path}/memory.max"));
            candidates.push("/sys/fs/cgroup/memory.max".to_owned());
        } else if controllers.split(',').any(|c| c == "memory") {
            candidates.push(format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"));
            candidates.push("/sys/fs/cgroup/memory/memory.limit_in_bytes".to_owned());
        }
    }
    candidates
        .iter()
        .filter_map(|file| std::fs::read_to_string(file).ok())
        .filter_map(|text| text.trim().parse::<u64>().ok())
        .min()
}

/// Bytes an unprivileged user may still write on the file system holding `dir`.
fn free_disk_bytes(dir: &Path) -> io::Result<u64> {
    let stat = rustix::fs::statvfs(dir)?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

fn malformed(file: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("unexpected format of {file}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_plausible() {
        tracing::info!("RSS is some memory, less than the memory available");
        let rss = rss_bytes().unwrap();
        let total = total_memory_bytes().unwrap();
        assert!(rss > 1 << 20, "{rss}");
        assert!(rss < total, "{rss} >= {total}");
        tracing::info!("the temp dir's file system has some free space");
        let free = free_disk_bytes(&std::env::temp_dir()).unwrap();
        assert!(free > 0);
        tracing::info!("a directory that does not exist is an error, not a panic");
        assert!(free_disk_bytes(Path::new("/nonexistent/warren")).is_err());
    }
}
