//! The run: a sender task and a receiver task, one connection each, and a progress line a
//! second from the caller's task.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use warren_proto::amqp10::message::{Body, Sections};
use warren_proto::amqp10::performative::{
    DeliveryState, Disposition, Flow, Performative, ROLE_RECEIVER,
};
use warren_proto::amqp10::FrameBody;

use super::link::{peer_ended, send_limits, settled_count, Link, TransferTemplate, WINDOW};
use super::options::{v1_address, Amqp10Options};
use super::report::Amqp10Report;
use crate::body::Stamp;
use crate::clock;
use crate::error::PerfError;
use crate::stats::new_histogram;

/// Bytes of transfers gathered before a socket write.
const WRITE_BATCH_BYTES: usize = 64 * 1024;
const TICK: Duration = Duration::from_millis(100);

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    accepted: AtomicU64,
    /// Rejected, released or modified.
    refused: AtomicU64,
    received: AtomicU64,
    /// Sum of the latencies received so far, µs (for the progress line's average).
    latency_sum_us: AtomicU64,
    sender_done: AtomicBool,
    stop: AtomicBool,
}

struct SenderEnd {
    first_sent: Option<Instant>,
    last_settled: Instant,
}

struct ReceiverEnd {
    first_received: Option<Instant>,
    last_received: Instant,
    histogram: Histogram<u64>,
}

/// Runs the pair; progress lines and the RESULTS block go to `out`.
pub async fn run(options: &Amqp10Options, out: &mut impl Write) -> Result<Amqp10Report, PerfError> {
    let (options, sender, receiver, template) = open_pair(options, out).await?;
    write_banner(&options, out);
    let counters = Arc::new(Counters::default());
    let start = Instant::now();
    let receiver_task = tokio::spawn(receive(receiver, options.clone(), counters.clone()));
    let sender_task = tokio::spawn(send(
        sender,
        options.clone(),
        template,
        counters.clone(),
        start,
    ));
    let finished = || receiver_task.is_finished() && sender_task.is_finished();
    let timed_out = watch(&options, out, &counters, start, finished).await;
    counters.stop.store(true, Ordering::Relaxed);
    let sender_end = join(sender_task.await)?;
    let receiver_end = join(receiver_task.await)?;
    let report = report_of(
        &options,
        &counters,
        timed_out,
        start,
        &sender_end,
        &receiver_end,
    );
    report.write_results(out);
    report.write_files(&options)?;
    Ok(report)
}

/// Connects and attaches the sender and the receiver. A RabbitMQ 3.x broker gets the v1 form
/// of a v2 address (its plugin knows no other), said on `out`. Refuses a body that would not
/// fit one frame.
async fn open_pair(
    options: &Amqp10Options,
    out: &mut impl Write,
) -> Result<(Amqp10Options, Link, Link, TransferTemplate), PerfError> {
    let mut options = options.clone();
    let mut sender = Link::connect(&options.endpoint, "warren-perf-amqp10-sender").await?;
    if !options.address_v1
        && sender.peer_product.eq_ignore_ascii_case("RabbitMQ")
        && sender.peer_version.starts_with("3.")
        && (options.address.starts_with("/queues/") || options.address.starts_with("/exchanges/"))
    {
        let v1 = v1_address(&options.address);
        writeln!(
            out,
            "note: RabbitMQ {} speaks AMQP 1.0 through its rabbitmq_amqp1_0 plugin (address \
             format v1): using '{v1}' for '{}'",
            sender.peer_version, options.address
        )
        .ok();
        options.address = v1;
    }
    let mut receiver = Link::connect(&options.endpoint, "warren-perf-amqp10-receiver").await?;
    receiver
        .attach(
            "warren-perf-receiver",
            false,
            &options.address,
            options.presettled,
            options.durable,
        )
        .await?;
    sender
        .attach(
            "warren-perf-sender",
            true,
            &options.address,
            options.presettled,
            options.durable,
        )
        .await?;
    let max_frame = sender.peer_max_frame.min(super::link::MAX_FRAME) as usize;
    let template = TransferTemplate::new(options.body_size, options.durable, options.presettled);
    if template.bytes.len() > max_frame {
        return Err(PerfError::usage(format!(
            "--body-size {} makes transfers of {} bytes, more than the broker's max frame size \
             {max_frame}; this tool sends single-frame transfers",
            options.body_size,
            template.bytes.len()
        )));
    }
    Ok((options, sender, receiver, template))
}

/// The line that says what runs, then the progress lines' head.
fn write_banner(options: &Amqp10Options, out: &mut impl Write) {
    writeln!(
        out,
        "warren perf amqp10: {} address '{}', count {}, body {} bytes, credit {}, {}{}",
        options.endpoint.address(),
        options.address,
        if options.count == u64::MAX {
            "unbounded".to_owned()
        } else {
            options.count.to_string()
        },
        options.body_size,
        options.credit,
        if options.durable {
            "durable"
        } else {
            "transient"
        },
        if options.presettled {
            ", presettled"
        } else {
            ""
        }
    )
    .ok();
    if !options.quiet {
        writeln!(out, "{}", super::report::PROGRESS_HEAD).ok();
    }
}

/// Prints a progress line a second until both tasks are `finished`, or stops them at the
/// timeout; `true` when it timed out.
async fn watch(
    options: &Amqp10Options,
    out: &mut impl Write,
    counters: &Counters,
    start: Instant,
    finished: impl Fn() -> bool,
) -> bool {
    let deadline = start + Duration::from_secs(options.timeout_s);
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    let mut last = (0u64, 0u64, 0u64, 0u64);
    while !finished() {
        tokio::select! {
            _ = ticker.tick() => {}
            () = tokio::time::sleep(Duration::from_millis(20)) => {
                continue;
            }
        }
        let now = (
            counters.sent.load(Ordering::Relaxed),
            counters.accepted.load(Ordering::Relaxed),
            counters.received.load(Ordering::Relaxed),
            counters.latency_sum_us.load(Ordering::Relaxed),
        );
        if !options.quiet {
            let received = now.2 - last.2;
            let latency_ms = if received == 0 {
                0.0
            } else {
                (now.3 - last.3) as f64 / received as f64 / 1000.0
            };
            let line = super::report::progress_line(
                start.elapsed().as_secs_f64(),
                now.0,
                now.0 - last.0,
                now.1,
                now.2,
                received,
                latency_ms,
            );
            writeln!(out, "{line}").ok();
            out.flush().ok();
        }
        last = now;
        if Instant::now() > deadline {
            counters.stop.store(true, Ordering::Relaxed);
            return true;
        }
    }
    false
}

/// The report of a finished run: complete when nothing timed out, the sender finished and
/// every settled message was received.
fn report_of(
    options: &Amqp10Options,
    counters: &Counters,
    timed_out: bool,
    start: Instant,
    sender_end: &SenderEnd,
    receiver_end: &ReceiverEnd,
) -> Amqp10Report {
    let sent = counters.sent.load(Ordering::Relaxed);
    let accepted = counters.accepted.load(Ordering::Relaxed);
    let received = counters.received.load(Ordering::Relaxed);
    let settled_target = if options.presettled { sent } else { accepted };
    let complete = !timed_out
        && counters.sender_done.load(Ordering::Relaxed)
        && received >= settled_target
        && (sent == options.count || options.duration_s.is_some());
    Amqp10Report::new(
        options,
        sent,
        settled_target,
        counters.refused.load(Ordering::Relaxed),
        received,
        complete,
        start,
        sender_end.first_sent,
        sender_end.last_settled,
        receiver_end.first_received,
        receiver_end.last_received,
        &receiver_end.histogram,
    )
}

fn join<T>(r: Result<Result<T, PerfError>, tokio::task::JoinError>) -> Result<T, PerfError> {
    r.map_err(|e| PerfError::Protocol(format!("a task of the run failed: {e}")))?
}

fn credit_left(limit: u32, count: u32) -> i64 {
    i64::from(limit.wrapping_sub(count) as i32)
}

/// Counts a disposition's deliveries as accepted or refused; returns how many it settles.
fn tally(disposition: &Disposition, counters: &Counters) -> u64 {
    let n = settled_count(disposition);
    if matches!(disposition.state, Some(DeliveryState::Accepted)) {
        counters.accepted.fetch_add(n, Ordering::Relaxed);
    } else {
        counters.refused.fetch_add(n, Ordering::Relaxed);
    }
    n
}

/// The sender's side of the link and session: ids, limits and counts.
struct SendState {
    /// Session next-outgoing-id and link delivery-count: both start at 0 and move together.
    next_id: u32,
    /// delivery-count + link-credit as the broker last said.
    credit_limit: u32,
    /// The broker's next-incoming-id + incoming-window as it last said.
    window_limit: u32,
    sent: u64,
    settled: u64,
    first_sent: Option<Instant>,
    last_settled: Instant,
    sequence: u32,
}

impl SendState {
    /// Takes a flow's limits and a disposition's settlements.
    fn on_performative(&mut self, performative: &Performative, counters: &Counters) {
        match performative {
            Performative::Flow(flow) => {
                let (window_limit, credit_limit) = send_limits(flow);
                self.window_limit = window_limit;
                if let Some(credit_limit) = credit_limit {
                    self.credit_limit = credit_limit;
                }
            }
            Performative::Disposition(d) if d.role == ROLE_RECEIVER => {
                self.settled += tally(d, counters);
                self.last_settled = Instant::now();
            }
            _ => {}
        }
    }

    /// Queues transfers while credit, the session window and the write batch allow.
    fn fill(
        &mut self,
        link: &mut Link,
        template: &TransferTemplate,
        options: &Amqp10Options,
        counters: &Counters,
    ) {
        let mut batch = 0;
        while self.sent < options.count
            && link.write.len() < WRITE_BATCH_BYTES
            && credit_left(self.credit_limit, self.next_id) > 0
            && credit_left(self.window_limit, self.next_id) > 0
        {
            let stamp = Stamp {
                sequence: self.sequence,
                sent_ns: clock::now_ns(),
                producer: 0,
            };
            template.write(&mut link.write, self.next_id, &stamp);
            self.next_id = self.next_id.wrapping_add(1);
            self.sequence = self.sequence.wrapping_add(1);
            self.sent += 1;
            batch += 1;
        }
        if batch > 0 {
            self.first_sent.get_or_insert_with(Instant::now);
            counters.sent.store(self.sent, Ordering::Relaxed);
            if options.presettled {
                self.settled = self.sent;
                counters.accepted.store(self.sent, Ordering::Relaxed);
                self.last_settled = Instant::now();
            }
        }
    }
}

async fn send(
    mut link: Link,
    options: Amqp10Options,
    template: TransferTemplate,
    counters: Arc<Counters>,
    start: Instant,
) -> Result<SenderEnd, PerfError> {
    let mut state = SendState {
        next_id: 0,
        credit_limit: link.credit_limit,
        window_limit: link.peer_incoming_window,
        sent: 0,
        settled: 0,
        first_sent: None,
        last_settled: Instant::now(),
        sequence: 0,
    };
    let stop_sending_at = options
        .duration_s
        .map(|d| start + Duration::from_secs_f64(d));
    let mut tick = tokio::time::interval(TICK);
    loop {
        while let Some(frame) = link.decode_buffered()? {
            let FrameBody::Amqp { performative, .. } = frame.body else {
                continue;
            };
            if let Some(error) = peer_ended(&performative, &options.address, true) {
                return Err(error);
            }
            state.on_performative(&performative, &counters);
        }
        if state.sent < options.count && !counters.stop.load(Ordering::Relaxed) {
            if stop_sending_at.is_some_and(|at| Instant::now() >= at) {
                // quiver's --duration: stop here; what was sent is the count
                return finish_sender(link, options, counters, state, true).await;
            }
            state.fill(&mut link, &template, &options, &counters);
        }
        let all_sent = state.sent >= options.count;
        if (all_sent && state.settled >= state.sent && link.write.is_empty())
            || counters.stop.load(Ordering::Relaxed)
        {
            return finish_sender(link, options, counters, state, false).await;
        }
        link.pump(&mut tick, false).await?;
    }
}

async fn finish_sender(
    mut link: Link,
    options: Amqp10Options,
    counters: Arc<Counters>,
    mut state: SendState,
    wait_settles: bool,
) -> Result<SenderEnd, PerfError> {
    counters.sent.store(state.sent, Ordering::Relaxed);
    link.flush().await?;
    if wait_settles && !options.presettled {
        // after --duration: the dispositions still on their way
        let wait = async {
            while state.settled < state.sent && !counters.stop.load(Ordering::Relaxed) {
                let frame = link.next_frame().await?;
                if let FrameBody::Amqp {
                    performative: Performative::Disposition(d),
                    ..
                } = frame.body
                {
                    state.settled += tally(&d, &counters);
                    state.last_settled = Instant::now();
                }
            }
            Ok::<(), PerfError>(())
        };
        let _ = tokio::time::timeout(Duration::from_secs(options.timeout_s), wait).await;
    }
    counters.sender_done.store(true, Ordering::Relaxed);
    link.close().await;
    Ok(SenderEnd {
        first_sent: state.first_sent,
        last_settled: state.last_settled,
    })
}

/// The stamp in the body of one of our messages: the data section's bytes at the end of the
/// payload, else the first data section found by decoding.
fn stamp_of(payload: &Bytes, body_size: usize) -> Option<Stamp> {
    // The data section's head just before the body: vbin8 (as we send) or vbin32 (as Warren
    // delivers); anything else is decoded.
    let len = payload.len();
    let head_is = |head: &[u8]| {
        len.checked_sub(body_size + head.len())
            .and_then(|at| payload.get(at..len - body_size))
            == Some(head)
    };
    let vbin8 = u8::try_from(body_size).is_ok_and(|n| head_is(&[0, 0x53, 0x75, 0xa0, n]));
    let vbin32 = || {
        u32::try_from(body_size).is_ok_and(|n| {
            let [a, b, c, d] = n.to_be_bytes();
            head_is(&[0, 0x53, 0x75, 0xb0, a, b, c, d])
        })
    };
    if vbin8 || vbin32() {
        return Stamp::read(payload.get(len - body_size..)?);
    }
    match Sections::decode(payload).ok()?.body {
        Body::Data(chunks) => Stamp::read(chunks.first()?),
        _ => None,
    }
}

/// The receiver's side of the link and session: ids, credit, counts and latencies.
struct ReceiveState {
    next_incoming_id: u32,
    delivery_count: u32,
    /// delivery-count + link-credit as we last granted.
    credit_limit: u32,
    received: u64,
    latency_sum: u64,
    histogram: Histogram<u64>,
    first_received: Option<Instant>,
    last_received: Instant,
    /// The transfers so far of a message sent in several (`more`).
    partial: BytesMut,
}

impl ReceiveState {
    /// Takes the buffered frames: counts and times each whole message; returns the range of
    /// unsettled delivery ids to accept.
    fn take_buffered(
        &mut self,
        link: &mut Link,
        options: &Amqp10Options,
    ) -> Result<Option<(u32, u32)>, PerfError> {
        let mut unsettled: Option<(u32, u32)> = None;
        while let Some(frame) = link.decode_buffered()? {
            let FrameBody::Amqp {
                performative,
                payload,
            } = frame.body
            else {
                continue;
            };
            if let Some(error) = peer_ended(&performative, &options.address, false) {
                return Err(error);
            }
            if let Performative::Transfer(t) = performative {
                if let (Some(id), false) = (t.delivery_id, t.settled == Some(true)) {
                    unsettled = Some(unsettled.map_or((id, id), |(first, _)| (first, id)));
                }
                self.on_transfer(t.more, payload, options.body_size);
            }
        }
        Ok(unsettled)
    }

    /// One transfer: a part of a message is kept until its last part; a whole message is
    /// counted and its stamp's latency recorded.
    fn on_transfer(&mut self, more: bool, payload: Bytes, body_size: usize) {
        self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
        if more {
            self.partial.extend_from_slice(&payload);
            return;
        }
        let payload = if self.partial.is_empty() {
            payload
        } else {
            self.partial.extend_from_slice(&payload);
            self.partial.split().freeze()
        };
        self.received += 1;
        self.delivery_count = self.delivery_count.wrapping_add(1);
        if let Some(stamp) = stamp_of(&payload, body_size) {
            let latency_us = clock::now_ns().saturating_sub(stamp.sent_ns) / 1000;
            self.histogram.saturating_record(latency_us.max(1));
            self.latency_sum += latency_us;
        }
    }
}

/// Our flow for link 0: `credit` from `delivery_count`, and windows wide open.
fn receiver_flow(next_incoming_id: u32, delivery_count: u32, credit: u32) -> Flow {
    Flow {
        next_incoming_id: Some(next_incoming_id),
        incoming_window: WINDOW,
        next_outgoing_id: 0,
        outgoing_window: WINDOW,
        handle: Some(0),
        delivery_count: Some(delivery_count),
        link_credit: Some(credit),
        ..Default::default()
    }
}

/// The receiver is done when it has every message the sender had settled, or the count, or
/// the run stops.
fn receiver_done(options: &Amqp10Options, counters: &Counters, received: u64) -> bool {
    let target = if options.presettled {
        counters.sent.load(Ordering::Relaxed)
    } else {
        counters.accepted.load(Ordering::Relaxed)
    };
    (counters.sender_done.load(Ordering::Relaxed) && received >= target)
        || received >= options.count
        || counters.stop.load(Ordering::Relaxed)
}

async fn receive(
    mut link: Link,
    options: Amqp10Options,
    counters: Arc<Counters>,
) -> Result<ReceiverEnd, PerfError> {
    let credit = options.credit;
    let mut state = ReceiveState {
        next_incoming_id: link.peer_next_outgoing_id,
        delivery_count: 0,
        credit_limit: credit,
        received: 0,
        latency_sum: 0,
        histogram: new_histogram(),
        first_received: None,
        last_received: Instant::now(),
        partial: BytesMut::new(),
    };
    link.send_flow(receiver_flow(state.next_incoming_id, 0, credit));
    let mut tick = tokio::time::interval(TICK);
    loop {
        let before = state.received;
        let unsettled = state.take_buffered(&mut link, &options)?;
        if state.received > before {
            let now = Instant::now();
            state.first_received.get_or_insert(now);
            state.last_received = now;
            counters.received.store(state.received, Ordering::Relaxed);
            counters
                .latency_sum_us
                .store(state.latency_sum, Ordering::Relaxed);
        }
        if let Some((first, last)) = unsettled {
            link.send_disposition(Disposition {
                role: ROLE_RECEIVER,
                first,
                last: (last != first).then_some(last),
                settled: true,
                state: Some(DeliveryState::Accepted),
                batchable: false,
            });
        }
        if credit_left(state.credit_limit, state.delivery_count) <= i64::from(credit / 2) {
            link.send_flow(receiver_flow(
                state.next_incoming_id,
                state.delivery_count,
                credit,
            ));
            state.credit_limit = state.delivery_count.wrapping_add(credit);
        }
        if receiver_done(&options, &counters, state.received) && link.write.is_empty() {
            link.close().await;
            return Ok(ReceiverEnd {
                first_received: state.first_received,
                last_received: state.last_received,
                histogram: state.histogram,
            });
        }
        link.pump(&mut tick, true).await?;
    }
}
