//! The producer task, the same for every protocol: per channel it decides how many messages may
//! go now (rate limit, confirm window, `-C`), stamps and appends them to the link's buffer, then
//! flushes once. It waits only when no channel may send: for a confirm, the next rate tick, or at
//! most `WAIT_MAX`, so it notices a stop quickly.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::body::Stamp;
use crate::clock;
use crate::confirm::ConfirmTracker;
use crate::control::Control;
use crate::driver::{PublisherEvents, PublisherLink};
use crate::error::PerfError;
use crate::rate::RateLimiter;
use crate::stats::AgentStats;

/// A flush goes out once this much is buffered (many messages per write).
pub const FLUSH_BYTES: usize = 128 * 1024;
/// Longest wait between looks at the stop flag.
pub const WAIT_MAX: Duration = Duration::from_millis(50);

/// What one producer connection does.
#[derive(Clone, Debug)]
pub struct ProducerPlan {
    /// Producer id of the first channel; channel i gets `first_id + i` (in bodies of 16+ bytes).
    pub first_id: u32,
    pub channels: usize,
    /// Messages per channel; 0 is unlimited (`-C`).
    pub messages: u64,
    /// Most unconfirmed messages per channel (`-c`).
    pub confirm_window: Option<u32>,
}

struct ChannelState {
    id: u32,
    sequence: u32,
    sent: u64,
    confirms: Option<ConfirmTracker>,
    limiter: Option<RateLimiter>,
}

impl ChannelState {
    /// How many messages may go now.
    fn allowance(&mut self, plan: &ProducerPlan, now: Instant) -> u64 {
        let mut allowed = u64::MAX;
        if plan.messages > 0 {
            allowed = plan.messages.saturating_sub(self.sent);
        }
        if let (Some(window), Some(confirms)) = (plan.confirm_window, &self.confirms) {
            allowed = allowed.min(u64::from(window).saturating_sub(confirms.outstanding()));
        }
        if allowed > 0 {
            if let Some(limiter) = &mut self.limiter {
                allowed = allowed.min(limiter.allowance(now));
            }
        }
        allowed
    }

    /// Sent everything it was asked to and every confirm is in.
    fn finished(&self, plan: &ProducerPlan) -> bool {
        plan.messages > 0
            && self.sent >= plan.messages
            && self.confirms.as_ref().is_none_or(|c| c.outstanding() == 0)
    }
}

/// Runs one producer connection until the run stops or every channel has finished.
pub async fn run<P: PublisherLink>(
    mut link: P,
    plan: ProducerPlan,
    control: Arc<Control>,
    stats: Arc<AgentStats>,
) -> Result<(), PerfError> {
    assert!(plan.channels > 0, "invariant: a producer has a channel");
    let mut channels: Vec<ChannelState> = (0..plan.channels)
        .map(|i| ChannelState {
            id: plan.first_id + i as u32,
            sequence: 0,
            sent: 0,
            confirms: plan.confirm_window.map(ConfirmTracker::new),
            limiter: None,
        })
        .collect();
    let mut rate_epoch = None;
    let mut events = PublisherEvents::default();
    let mut latencies = Vec::with_capacity(4096);
    while !control.stopped() {
        let now = Instant::now();
        follow_rate(&control, &mut rate_epoch, &mut channels, now);
        let published = publish_round(&mut link, &plan, &mut channels, now);
        if published > 0 {
            link.flush(&mut events).await?;
            // counted once written: a broker pushing back holds the flush, not the count
            stats.sent.fetch_add(published, Ordering::Relaxed);
            // a socket that always takes the whole buffer never makes the flush wait, and a
            // task that never waits starves the others on its worker thread
            tokio::task::yield_now().await;
        }
        settle(&mut events, &mut channels, &stats, &mut latencies);
        if channels.iter().all(|c| c.finished(&plan)) {
            break;
        }
        if published == 0 {
            let next_due = channels
                .iter()
                .filter_map(|c| c.limiter.as_ref().map(RateLimiter::next_due));
            let deadline = next_due.fold(now + WAIT_MAX, Instant::min);
            link.wait(deadline, &mut events).await?;
            settle(&mut events, &mut channels, &stats, &mut latencies);
        }
    }
    // the broker may be gone at the end of a run; closing is best effort
    let _ = link.close().await;
    Ok(())
}

/// Re-creates the limiters when the conductor changed the rate.
fn follow_rate(
    control: &Control,
    seen: &mut Option<u64>,
    channels: &mut [ChannelState],
    now: Instant,
) {
    let (rate, epoch) = control.rate();
    if *seen == Some(epoch) {
        return;
    }
    *seen = Some(epoch);
    for channel in channels {
        channel.limiter = rate.map(|r| RateLimiter::new(r, now));
    }
}

/// Appends what each channel may send now, until `FLUSH_BYTES` are buffered. Returns how many.
fn publish_round<P: PublisherLink>(
    link: &mut P,
    plan: &ProducerPlan,
    channels: &mut [ChannelState],
    now: Instant,
) -> u64 {
    let sent_ns = clock::now_ns();
    let mut published = 0;
    for (index, channel) in channels.iter_mut().enumerate() {
        let allowed = channel.allowance(plan, now);
        let mut count = 0;
        while count < allowed && link.buffered_bytes() < FLUSH_BYTES {
            // 0 for the channel's first message, as PerfTest numbers its bodies
            let stamp = Stamp {
                sequence: channel.sequence,
                sent_ns,
                producer: channel.id,
            };
            channel.sequence = channel.sequence.wrapping_add(1);
            link.publish(index, &stamp);
            if let Some(confirms) = &mut channel.confirms {
                confirms.push(sent_ns);
            }
            count += 1;
        }
        if let Some(limiter) = &mut channel.limiter {
            limiter.take(count);
        }
        channel.sent += count;
        published += count;
    }
    published
}

/// Applies confirms and returns to the channels and the statistics.
fn settle(
    events: &mut PublisherEvents,
    channels: &mut [ChannelState],
    stats: &AgentStats,
    latencies: &mut Vec<u64>,
) {
    if events.returned > 0 {
        stats.returned.fetch_add(events.returned, Ordering::Relaxed);
        events.returned = 0;
    }
    if events.confirms.is_empty() {
        return;
    }
    let now_ns = clock::now_ns();
    let (mut acked, mut nacked) = (0, 0);
    for confirm in events.confirms.drain(..) {
        let tracker = channels
            .get_mut(confirm.channel)
            .and_then(|c| c.confirms.as_mut());
        if let Some(tracker) = tracker {
            let settled = tracker.settle(
                confirm.sequence,
                confirm.multiple,
                confirm.acked,
                now_ns,
                latencies,
            );
            acked += settled.acked;
            nacked += settled.nacked;
        }
    }
    stats.confirmed.fetch_add(acked, Ordering::Relaxed);
    stats.nacked.fetch_add(nacked, Ordering::Relaxed);
    stats.record_confirm_latencies(latencies);
    latencies.clear();
}
