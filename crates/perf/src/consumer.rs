//! The consumer task, the same for every protocol: takes deliveries in batches from the link,
//! measures each one's latency from the stamp in its body, checks its order with
//! `--verify-order`, and settles them as asked (one ack per message, or one `multiple` ack every
//! `--multi-ack-every`; none with `-a`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::body::Stamp;
use crate::clock;
use crate::control::Control;
use crate::driver::{ConsumerLink, Delivery};
use crate::error::PerfError;
use crate::order::OrderCheck;
use crate::rate::RateLimiter;
use crate::stats::{AgentStats, LATENCY_MAX_US};

/// Most deliveries taken from the link at once.
pub const RECEIVE_BATCH_MAX: usize = 4096;
/// Longest wait for deliveries between looks at the stop flag.
const WAIT_MAX: Duration = Duration::from_millis(50);

/// What one consumer connection does.
#[derive(Clone, Debug)]
pub struct ConsumerPlan {
    pub channels: usize,
    /// Messages per channel; 0 is unlimited (`-D`). Counted over the connection's channels.
    pub messages: u64,
    /// msg/s per channel (`-R`).
    pub rate: Option<f64>,
    pub autoack: bool,
    /// Ack with multiple=true every N deliveries (`--multi-ack-every`); 0 or 1 acks each.
    pub multi_ack_every: u32,
    /// Check every producer's messages arrive in order on each channel (`--verify-order`).
    pub verify_order: bool,
}

/// What one `receive` collects: latencies (µs), the tags to settle, and the order checks.
struct Batch {
    latencies: Vec<u64>,
    tags: Vec<(usize, u64)>,
    autoack: bool,
    /// One per channel with `--verify-order`, else empty.
    orders: Vec<OrderCheck>,
    /// The first order failure, which ends the run.
    out_of_order: Option<String>,
}

/// A channel's deliveries not yet acked (multi-ack mode).
#[derive(Clone, Copy, Default)]
struct Unacked {
    count: u32,
    last_tag: u64,
}

/// Runs one consumer connection until the run stops or it has received its `-D` messages.
pub async fn run<C: ConsumerLink>(
    mut link: C,
    plan: ConsumerPlan,
    control: Arc<Control>,
    stats: Arc<AgentStats>,
) -> Result<(), PerfError> {
    assert!(plan.channels > 0, "invariant: a consumer has a channel");
    let limit = plan.messages.saturating_mul(plan.channels as u64);
    let mut limiter = plan
        .rate
        .map(|r| RateLimiter::new(r * plan.channels as f64, Instant::now()));
    let mut unacked = vec![Unacked::default(); plan.channels];
    let mut batch = Batch {
        latencies: Vec::with_capacity(RECEIVE_BATCH_MAX),
        tags: Vec::with_capacity(RECEIVE_BATCH_MAX),
        autoack: plan.autoack,
        orders: Vec::new(),
        out_of_order: None,
    };
    if plan.verify_order {
        batch.orders.resize_with(plan.channels, OrderCheck::default);
    }
    let mut received = 0u64;
    while !control.stopped() && (limit == 0 || received < limit) {
        let now = Instant::now();
        let mut max = RECEIVE_BATCH_MAX as u64;
        if limit > 0 {
            max = max.min(limit - received);
        }
        if let Some(limiter) = &mut limiter {
            max = max.min(limiter.allowance(now));
            if max == 0 {
                link.flush().await?;
                tokio::time::sleep_until(limiter.next_due().min(now + WAIT_MAX)).await;
                continue;
            }
        }
        let got = receive(&mut link, max as usize, now + WAIT_MAX, &mut batch).await?;
        if let Some(text) = batch.out_of_order.take() {
            return Err(PerfError::OutOfOrder(text));
        }
        if got == 0 {
            // quiet: ack what multi-ack holds back, so a prefetch below N cannot stall
            flush_unacked(&mut link, &mut unacked);
            link.flush().await?;
            continue;
        }
        received += got;
        stats.received.fetch_add(got, Ordering::Relaxed);
        stats.record_consumer_latencies(&batch.latencies);
        batch.latencies.clear();
        if let Some(limiter) = &mut limiter {
            limiter.take(got);
        }
        settle(&mut link, &plan, &mut batch.tags, &mut unacked);
        // deliveries already buffered are handed over without waiting: let other tasks run
        tokio::task::yield_now().await;
    }
    flush_unacked(&mut link, &mut unacked);
    let _ = link.flush().await;
    let _ = link.close().await;
    Ok(())
}

/// One batch from the link into `batch`: latencies (µs), unless autoack the tags to settle, and
/// with `--verify-order` the first message out of order.
async fn receive<C: ConsumerLink>(
    link: &mut C,
    max: usize,
    deadline: Instant,
    batch: &mut Batch,
) -> Result<u64, PerfError> {
    // one clock reading per batch: every delivery in it arrived in the same read
    let mut now_ns = None;
    let mut sink = |delivery: Delivery<'_>| {
        let now = *now_ns.get_or_insert_with(clock::now_ns);
        let stamp = Stamp::read(delivery.head);
        // a stamp ahead of this clock or older than the histograms' hour (another machine's
        // clock, a PerfTest body whose stamp is no wall time) is counted but measures nothing
        let age_ns = stamp.and_then(|s| now.checked_sub(s.sent_ns));
        if let Some(age_ns) = age_ns.filter(|&ns| ns / 1000 <= LATENCY_MAX_US) {
            batch.latencies.push(age_ns / 1000);
        }
        if !batch.autoack {
            batch.tags.push((delivery.channel, delivery.tag));
        }
        if let Some(order) = batch.orders.get_mut(delivery.channel) {
            if let (Err(text), None) = (order.check(stamp), &batch.out_of_order) {
                let channel = delivery.channel + 1;
                batch.out_of_order = Some(format!(
                    "--verify-order, consumer channel {channel}: {text}"
                ));
            }
        }
    };
    let got = link.receive(max, deadline, &mut sink).await?;
    Ok(got as u64)
}

fn settle<C: ConsumerLink>(
    link: &mut C,
    plan: &ConsumerPlan,
    tags: &mut Vec<(usize, u64)>,
    unacked: &mut [Unacked],
) {
    for (channel, tag) in tags.drain(..) {
        if plan.multi_ack_every <= 1 {
            link.settle(channel, tag, false);
            continue;
        }
        let Some(state) = unacked.get_mut(channel) else {
            continue;
        };
        state.count += 1;
        state.last_tag = tag;
        if state.count >= plan.multi_ack_every {
            link.settle(channel, tag, true);
            *state = Unacked::default();
        }
    }
}

fn flush_unacked<C: ConsumerLink>(link: &mut C, unacked: &mut [Unacked]) {
    for (channel, state) in unacked.iter_mut().enumerate() {
        if state.count > 0 {
            link.settle(channel, state.last_tag, true);
            *state = Unacked::default();
        }
    }
}
