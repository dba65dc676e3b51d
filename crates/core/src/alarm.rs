//! Resource alarms (RabbitMQ's `rabbit_alarm`): the memory high watermark and the disk free
//! limit.
//!
//! A monitor outside core samples the broker's memory and the data directory's free space
//! (about once a second, never on the message path) and reports the figures here. `Alarms`
//! compares them with the limits, logs each alarm as it is set and cleared, and publishes the
//! set of alarms in effect on a watch channel. Every protocol connection holds a receiver: a
//! connection that publishes while the set is not empty stops reading its socket until the set
//! is empty again; connections that only consume are never blocked.
//!
//! The limits change at runtime (`Broker::set_memory_high_watermark`, `set_disk_free_limit`:
//! what `rabbitmqctl set_vm_memory_high_watermark` and `set_disk_free_limit` do); the monitor
//! watches them and samples again at once.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

/// RabbitMQ's default memory high watermark: 40% of RAM.
pub const MEMORY_HIGH_WATERMARK_DEFAULT: f64 = 0.4;
/// RabbitMQ's default disk free limit: 50 MB.
pub const DISK_FREE_LIMIT_DEFAULT_BYTES: u64 = 50_000_000;

/// A resource that can raise an alarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Memory,
    Disk,
}

/// The alarms in effect. Empty when publishers may publish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlarmSet {
    memory: bool,
    disk: bool,
}

impl AlarmSet {
    pub fn is_empty(self) -> bool {
        !self.memory && !self.disk
    }

    pub fn contains(self, resource: Resource) -> bool {
        match resource {
            Resource::Memory => self.memory,
            Resource::Disk => self.disk,
        }
    }

    fn set(&mut self, resource: Resource, on: bool) {
        match resource {
            Resource::Memory => self.memory = on,
            Resource::Disk => self.disk = on,
        }
    }

    /// The reason `connection.blocked` carries, in RabbitMQ's words (`rabbit_reader`
    /// formats `"low on " ++ join(resources, " & ")`). `None` when no alarm is in effect.
    pub fn reason(self) -> Option<&'static str> {
        match (self.memory, self.disk) {
            (true, true) => Some("low on memory & disk"),
            (true, false) => Some("low on memory"),
            (false, true) => Some("low on disk"),
            (false, false) => None,
        }
    }
}

/// The memory high watermark: above it, publishers are blocked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoryWatermark {
    /// A fraction of the memory available to the broker (RAM, or the cgroup limit if lower),
    /// as RabbitMQ's `vm_memory_high_watermark.relative`. 0 blocks every publisher.
    Relative(f64),
    /// Bytes, as `vm_memory_high_watermark.absolute`; capped at the memory available.
    Absolute(u64),
}

impl Default for MemoryWatermark {
    fn default() -> Self {
        MemoryWatermark::Relative(MEMORY_HIGH_WATERMARK_DEFAULT)
    }
}

impl MemoryWatermark {
    /// The limit in bytes, given the memory available to the broker.
    pub fn limit_bytes(self, total_memory_bytes: u64) -> u64 {
        match self {
            MemoryWatermark::Relative(fraction) => fraction_of(total_memory_bytes, fraction),
            MemoryWatermark::Absolute(bytes) => bytes.min(total_memory_bytes),
        }
    }
}

/// The disk free limit: below it, publishers are blocked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DiskFreeLimit {
    /// Bytes, as RabbitMQ's `disk_free_limit.absolute`.
    Absolute(u64),
    /// A multiple of the memory available to the broker, as `disk_free_limit.relative`
    /// (`{mem_relative, N}`).
    MemRelative(f64),
}

impl Default for DiskFreeLimit {
    fn default() -> Self {
        DiskFreeLimit::Absolute(DISK_FREE_LIMIT_DEFAULT_BYTES)
    }
}

impl DiskFreeLimit {
    /// The limit in bytes, given the memory available to the broker.
    pub fn limit_bytes(self, total_memory_bytes: u64) -> u64 {
        match self {
            DiskFreeLimit::Absolute(bytes) => bytes,
            DiskFreeLimit::MemRelative(factor) => fraction_of(total_memory_bytes, factor),
        }
    }
}

/// Both limits, as set at startup or since.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    pub memory_high_watermark: MemoryWatermark,
    pub disk_free_limit: DiskFreeLimit,
}

/// The broker's alarms and their limits.
pub struct Alarms {
    alarms_tx: watch::Sender<AlarmSet>,
    limits_tx: watch::Sender<Limits>,
    /// The monitor's last figures, for the management API and metrics.
    sample: Sample,
}

/// What the resource monitor last reported, in bytes (0 until it first has).
#[derive(Debug, Default)]
struct Sample {
    rss: AtomicU64,
    memory_limit: AtomicU64,
    disk_free: AtomicU64,
    disk_free_limit: AtomicU64,
}

/// The monitor's last figures, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceSample {
    pub rss_bytes: u64,
    pub memory_limit_bytes: u64,
    pub disk_free_bytes: u64,
    pub disk_free_limit_bytes: u64,
}

impl Default for Alarms {
    fn default() -> Self {
        Alarms::new(Limits::default())
    }
}

impl Alarms {
    pub fn new(limits: Limits) -> Alarms {
        Alarms {
            alarms_tx: watch::Sender::new(AlarmSet::default()),
            limits_tx: watch::Sender::new(limits),
            sample: Sample::default(),
        }
    }

    /// A receiver of the alarm set: `changed()` wakes on every set and clear.
    pub fn subscribe(&self) -> watch::Receiver<AlarmSet> {
        self.alarms_tx.subscribe()
    }

    pub fn current(&self) -> AlarmSet {
        *self.alarms_tx.borrow()
    }

    /// The memory and disk figures last reported (management API, metrics).
    pub fn sample(&self) -> ResourceSample {
        let relaxed = Ordering::Relaxed;
        ResourceSample {
            rss_bytes: self.sample.rss.load(relaxed),
            memory_limit_bytes: self.sample.memory_limit.load(relaxed),
            disk_free_bytes: self.sample.disk_free.load(relaxed),
            disk_free_limit_bytes: self.sample.disk_free_limit.load(relaxed),
        }
    }

    pub fn limits(&self) -> Limits {
        *self.limits_tx.borrow()
    }

    /// A receiver of the limits, for the monitor: it samples again when they change.
    pub fn subscribe_limits(&self) -> watch::Receiver<Limits> {
        self.limits_tx.subscribe()
    }

    pub fn set_memory_high_watermark(&self, watermark: MemoryWatermark) {
        self.limits_tx
            .send_modify(|limits| limits.memory_high_watermark = watermark);
    }

    pub fn set_disk_free_limit(&self, limit: DiskFreeLimit) {
        self.limits_tx
            .send_modify(|limits| limits.disk_free_limit = limit);
    }

    /// The broker's resident set size, and the memory available to it: sets the memory alarm
    /// when the RSS is above the watermark, clears it when it is not.
    pub fn report_memory(&self, rss_bytes: u64, total_memory_bytes: u64) {
        let limit = self
            .limits()
            .memory_high_watermark
            .limit_bytes(total_memory_bytes);
        let on = rss_bytes > limit;
        self.sample.rss.store(rss_bytes, Ordering::Relaxed);
        self.sample.memory_limit.store(limit, Ordering::Relaxed);
        if !self.switch(Resource::Memory, on) {
            return;
        }
        let (rss, limit) = (mib(rss_bytes), mib(limit));
        if on {
            tracing::warn!(
                "memory alarm set: RSS {rss} MiB above high watermark {limit} MiB; \
                 publishers blocked"
            );
        } else {
            tracing::info!("memory alarm cleared: RSS {rss} MiB within high watermark {limit} MiB");
        }
    }

    /// The free space on the data directory's file system: sets the disk alarm when it is
    /// below the limit, clears it when it is not.
    pub fn report_disk_free(&self, free_bytes: u64, total_memory_bytes: u64) {
        let limit = self
            .limits()
            .disk_free_limit
            .limit_bytes(total_memory_bytes);
        let on = free_bytes < limit;
        self.sample.disk_free.store(free_bytes, Ordering::Relaxed);
        self.sample.disk_free_limit.store(limit, Ordering::Relaxed);
        if !self.switch(Resource::Disk, on) {
            return;
        }
        let (free, limit) = (mib(free_bytes), mib(limit));
        if on {
            tracing::warn!(
                "disk alarm set: {free} MiB free, below the disk free limit of {limit} MiB; \
                 publishers blocked"
            );
        } else {
            tracing::info!("disk alarm cleared: {free} MiB free, disk free limit {limit} MiB");
        }
    }

    /// Sets or clears one alarm; true when that changed anything. Receivers wake only then.
    fn switch(&self, resource: Resource, on: bool) -> bool {
        self.alarms_tx.send_if_modified(|set| {
            let changed = set.contains(resource) != on;
            set.set(resource, on);
            changed
        })
    }
}

/// `total * fraction`, saturating; a negative or NaN fraction counts as 0.
fn fraction_of(total: u64, fraction: f64) -> u64 {
    // `as` from f64 saturates at the integer bounds and maps NaN to 0.
    (total as f64 * fraction) as u64
}

/// Bytes as MiB with one decimal, for log lines.
fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

/// Parses an amount of information the way RabbitMQ's config does: an integer of bytes, or an
/// integer with a unit. `k`, `K`, `Ki`, `KiB`, `kib` (and the same for M, G, T, P) are powers
/// of 1024; `kB`, `KB`, `MB`, `GB`, `TB`, `PB` (any case) are powers of 1000; `B` is bytes.
pub fn parse_information_unit(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().map_err(|_| {
        format!("'{text}' is not an amount of bytes (such as 50000000 or \"50MB\")")
    })?;
    let multiplier = unit_multiplier(unit.trim_start()).ok_or_else(|| {
        format!(
            "'{text}': unknown unit '{unit}' (use B, kB/MB/GB/TB/PB for powers of 1000, \
             or k/Ki/KiB .. P/Pi/PiB for powers of 1024)"
        )
    })?;
    number
        .checked_mul(multiplier)
        .ok_or_else(|| format!("'{text}' is more than {} bytes", u64::MAX))
}

fn unit_multiplier(unit: &str) -> Option<u64> {
    let lower = unit.to_ascii_lowercase();
    let mut chars = lower.chars();
    let Some(prefix) = chars.next() else {
        return Some(1);
    };
    if prefix == 'b' && chars.as_str().is_empty() {
        return Some(1);
    }
    let power = match prefix {
        'k' => 1,
        'm' => 2,
        'g' => 3,
        't' => 4,
        'p' => 5,
        _ => return None,
    };
    let base: u64 = match chars.as_str() {
        "" | "i" | "ib" => 1024,
        "b" => 1000,
        _ => return None,
    };
    Some(base.pow(power))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn information_units_as_rabbitmq_reads_them() {
        tracing::info!("plain bytes and decimal units");
        assert_eq!(parse_information_unit("50000000"), Ok(50_000_000));
        assert_eq!(parse_information_unit("50MB"), Ok(50_000_000));
        assert_eq!(parse_information_unit("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_information_unit("2kb"), Ok(2_000));
        assert_eq!(parse_information_unit("1PB"), Ok(1_000_000_000_000_000));
        assert_eq!(parse_information_unit("7B"), Ok(7));
        tracing::info!("binary units");
        assert_eq!(parse_information_unit("1024MiB"), Ok(1 << 30));
        assert_eq!(parse_information_unit("4Gi"), Ok(4 << 30));
        assert_eq!(parse_information_unit("2k"), Ok(2048));
        assert_eq!(parse_information_unit("1 Ti"), Ok(1 << 40));
        tracing::info!("rejected");
        for bad in ["", "MB", "-1", "1.5GB", "10 XB", "1GBB", "99999999999PB"] {
            assert!(parse_information_unit(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn limits_in_bytes() {
        let total = 8 << 30;
        assert_eq!(MemoryWatermark::Relative(0.5).limit_bytes(total), 4 << 30);
        assert_eq!(MemoryWatermark::Relative(0.0).limit_bytes(total), 0);
        assert_eq!(
            MemoryWatermark::Absolute(1 << 30).limit_bytes(total),
            1 << 30
        );
        assert_eq!(
            MemoryWatermark::Absolute(u64::MAX).limit_bytes(total),
            total
        );
        assert_eq!(DiskFreeLimit::Absolute(5).limit_bytes(total), 5);
        assert_eq!(DiskFreeLimit::MemRelative(1.5).limit_bytes(total), 12 << 30);
    }

    #[test]
    fn alarms_set_and_clear_and_wake_receivers_only_on_change() {
        let alarms = Alarms::new(Limits {
            memory_high_watermark: MemoryWatermark::Absolute(100),
            disk_free_limit: DiskFreeLimit::Absolute(10),
        });
        let mut rx = alarms.subscribe();
        tracing::info!("below the watermark: no alarm, no wake-up");
        alarms.report_memory(100, 1000);
        alarms.report_disk_free(10, 1000);
        assert!(alarms.current().is_empty());
        assert!(!rx.has_changed().unwrap());
        tracing::info!("memory above the watermark");
        alarms.report_memory(101, 1000);
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().reason(), Some("low on memory"));
        alarms.report_memory(150, 1000);
        assert!(!rx.has_changed().unwrap(), "still set: no wake-up");
        tracing::info!("disk too");
        alarms.report_disk_free(9, 1000);
        assert_eq!(
            rx.borrow_and_update().reason(),
            Some("low on memory & disk")
        );
        tracing::info!("a raised watermark clears the memory alarm at the next report");
        alarms.set_memory_high_watermark(MemoryWatermark::Relative(1.0));
        alarms.report_memory(150, 1000);
        assert_eq!(rx.borrow_and_update().reason(), Some("low on disk"));
        alarms.set_disk_free_limit(DiskFreeLimit::Absolute(0));
        alarms.report_disk_free(9, 1000);
        assert!(rx.borrow_and_update().is_empty());
    }
}
