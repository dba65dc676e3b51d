//! The run: a sender task and a receiver task, one connection each, and a progress line a
//! second from the caller's task.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_proto::amqp10::message::{Body, Sections};
use warren_proto::amqp10::performative::{
    DeliveryState, Disposition, Flow, Performative, ROLE_RECEIVER,
};
use warren_proto::amqp10::FrameBody;

use super::link::{Link, TransferTemplate, WINDOW};
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
            "note: RabbitMQ {} speaks AMQP 1.0 through its rabbitmq_amqp1_0 plugin (address format v1): using '{v1}' for '{}'",
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
            "--body-size {} makes transfers of {} bytes, more than the broker's max frame size {max_frame}; this tool sends single-frame transfers",
            options.body_size,
            template.bytes.len()
        )));
    }
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

    let deadline = start + Duration::from_secs(options.timeout_s);
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    let mut last = (0u64, 0u64, 0u64, 0u64);
    let mut timed_out = false;
    while !receiver_task.is_finished() || !sender_task.is_finished() {
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
            timed_out = true;
            counters.stop.store(true, Ordering::Relaxed);
            break;
        }
    }
    counters.stop.store(true, Ordering::Relaxed);
    let sender_end = join(sender_task.await)?;
    let receiver_end = join(receiver_task.await)?;
    let sent = counters.sent.load(Ordering::Relaxed);
    let accepted = counters.accepted.load(Ordering::Relaxed);
    let refused = counters.refused.load(Ordering::Relaxed);
    let received = counters.received.load(Ordering::Relaxed);
    let settled_target = if options.presettled { sent } else { accepted };
    let complete = !timed_out
        && counters.sender_done.load(Ordering::Relaxed)
        && received >= settled_target
        && (sent == options.count || options.duration_s.is_some());
    let report = Amqp10Report::new(
        &options,
        sent,
        if options.presettled { sent } else { accepted },
        refused,
        received,
        complete,
        start,
        sender_end.first_sent,
        sender_end.last_settled,
        receiver_end.first_received,
        receiver_end.last_received,
        &receiver_end.histogram,
    );
    report.write_results(out);
    report.write_files(&options)?;
    Ok(report)
}

fn join<T>(r: Result<Result<T, PerfError>, tokio::task::JoinError>) -> Result<T, PerfError> {
    r.map_err(|e| PerfError::Protocol(format!("a task of the run failed: {e}")))?
}

fn credit_left(limit: u32, count: u32) -> i64 {
    i64::from(limit.wrapping_sub(count) as i32)
}

async fn send(
    mut link: Link,
    options: Amqp10Options,
    template: TransferTemplate,
    counters: Arc<Counters>,
    start: Instant,
) -> Result<SenderEnd, PerfError> {
    let mut next_id: u32 = 0; // session next-outgoing-id and link delivery-count: both from 0
    let mut credit_limit: u32 = link.credit_limit; // delivery-count + link-credit as the broker last said
    let mut window_limit: u32 = link.peer_incoming_window;
    let mut sent: u64 = 0;
    let mut settled: u64 = 0;
    let mut first_sent = None;
    let mut last_settled = Instant::now();
    let stop_sending_at = options
        .duration_s
        .map(|d| start + Duration::from_secs_f64(d));
    let mut last_write = Instant::now();
    let idle = Duration::from_millis(u64::from(link.peer_idle_ms / 2).max(1));
    let mut sequence: u32 = 0;
    let mut tick = tokio::time::interval(TICK);
    loop {
        while let Some(frame) = link.decode_buffered()? {
            let FrameBody::Amqp { performative, .. } = frame.body else {
                continue;
            };
            match performative {
                Performative::Flow(flow) => {
                    if let Some(next_incoming) = flow.next_incoming_id {
                        window_limit = next_incoming.wrapping_add(flow.incoming_window);
                    } else {
                        window_limit = flow.incoming_window;
                    }
                    if flow.handle == Some(0) {
                        if let Some(credit) = flow.link_credit {
                            // a null delivery-count: our initial one, 0 (transport.xml, flow)
                            credit_limit = flow.delivery_count.unwrap_or(0).wrapping_add(credit);
                        }
                    }
                }
                Performative::Disposition(d) if d.role == ROLE_RECEIVER => {
                    let n = u64::from(d.last.unwrap_or(d.first).wrapping_sub(d.first)) + 1;
                    match d.state {
                        Some(DeliveryState::Accepted) => {
                            counters.accepted.fetch_add(n, Ordering::Relaxed);
                        }
                        _ => {
                            counters.refused.fetch_add(n, Ordering::Relaxed);
                        }
                    }
                    settled += n;
                    last_settled = Instant::now();
                }
                Performative::Detach(detach) => {
                    return Err(super::link::address_refused(
                        &options.address,
                        true,
                        detach.error.as_ref(),
                    ));
                }
                Performative::End(end) => {
                    return Err(super::link::address_refused(
                        &options.address,
                        true,
                        end.error.as_ref(),
                    ));
                }
                Performative::Close(close) => {
                    return Err(super::link::address_refused(
                        &options.address,
                        true,
                        close.error.as_ref(),
                    ));
                }
                _ => {}
            }
        }
        let sending = sent < options.count && !counters.stop.load(Ordering::Relaxed);
        if sending {
            if let Some(at) = stop_sending_at {
                if Instant::now() >= at {
                    // quiver's --duration: stop here; what was sent is the count
                    return finish_sender(
                        link,
                        options,
                        counters,
                        sent,
                        settled,
                        first_sent,
                        last_settled,
                        true,
                    )
                    .await;
                }
            }
            let mut batch = 0;
            while sent < options.count
                && link.write.len() < WRITE_BATCH_BYTES
                && credit_left(credit_limit, next_id) > 0
                && credit_left(window_limit, next_id) > 0
            {
                let stamp = Stamp {
                    sequence,
                    sent_ns: clock::now_ns(),
                    producer: 0,
                };
                template.write(&mut link.write, next_id, &stamp);
                next_id = next_id.wrapping_add(1);
                sequence = sequence.wrapping_add(1);
                sent += 1;
                batch += 1;
            }
            if batch > 0 {
                first_sent.get_or_insert_with(Instant::now);
                counters.sent.store(sent, Ordering::Relaxed);
                if options.presettled {
                    settled = sent;
                    counters.accepted.store(sent, Ordering::Relaxed);
                    last_settled = Instant::now();
                }
            }
        }
        let all_sent = sent >= options.count;
        if (all_sent && settled >= sent && link.write.is_empty())
            || counters.stop.load(Ordering::Relaxed)
        {
            return finish_sender(
                link,
                options,
                counters,
                sent,
                settled,
                first_sent,
                last_settled,
                false,
            )
            .await;
        }
        let (mut reader, mut writer) = link.stream.split();
        tokio::select! {
            biased;
            n = reader.read_buf(&mut link.read) => {
                let n = n.map_err(|e| PerfError::io(&link.what, &e))?;
                if n == 0 {
                    return Err(PerfError::Broker(format!("{}: the broker closed the socket", link.what)));
                }
            }
            n = writer.write(&link.write), if !link.write.is_empty() => {
                let n = n.map_err(|e| PerfError::io(&link.what, &e))?;
                link.write.advance(n);
                last_write = Instant::now();
                continue;
            }
            _ = tick.tick() => {
                if link.peer_idle_ms > 0 && last_write.elapsed() >= idle && link.write.is_empty() {
                    link.send_heartbeat();
                }
                continue;
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn finish_sender(
    mut link: Link,
    options: Amqp10Options,
    counters: Arc<Counters>,
    sent: u64,
    mut settled: u64,
    first_sent: Option<Instant>,
    mut last_settled: Instant,
    wait_settles: bool,
) -> Result<SenderEnd, PerfError> {
    counters.sent.store(sent, Ordering::Relaxed);
    link.flush().await?;
    if wait_settles && !options.presettled {
        // after --duration: the dispositions still on their way
        let wait = async {
            while settled < sent && !counters.stop.load(Ordering::Relaxed) {
                let frame = link.next_frame().await?;
                if let FrameBody::Amqp {
                    performative: Performative::Disposition(d),
                    ..
                } = frame.body
                {
                    let n = u64::from(d.last.unwrap_or(d.first).wrapping_sub(d.first)) + 1;
                    if matches!(d.state, Some(DeliveryState::Accepted)) {
                        counters.accepted.fetch_add(n, Ordering::Relaxed);
                    } else {
                        counters.refused.fetch_add(n, Ordering::Relaxed);
                    }
                    settled += n;
                    last_settled = Instant::now();
                }
            }
            Ok::<(), PerfError>(())
        };
        let _ = tokio::time::timeout(Duration::from_secs(options.timeout_s), wait).await;
    }
    counters.sender_done.store(true, Ordering::Relaxed);
    link.close().await;
    Ok(SenderEnd {
        first_sent,
        last_settled,
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

async fn receive(
    mut link: Link,
    options: Amqp10Options,
    counters: Arc<Counters>,
) -> Result<ReceiverEnd, PerfError> {
    let credit = options.credit;
    let mut next_incoming_id = link.peer_next_outgoing_id;
    let mut delivery_count: u32 = 0;
    let mut credit_limit: u32 = credit;
    let mut received: u64 = 0;
    let mut latency_sum: u64 = 0;
    let mut histogram = new_histogram();
    let mut first_received = None;
    let mut last_received = Instant::now();
    let mut partial = BytesMut::new();
    let mut last_write = Instant::now();
    let idle = Duration::from_millis(u64::from(link.peer_idle_ms / 2).max(1));
    let flow = |next_incoming_id: u32, delivery_count: u32| Flow {
        next_incoming_id: Some(next_incoming_id),
        incoming_window: WINDOW,
        next_outgoing_id: 0,
        outgoing_window: WINDOW,
        handle: Some(0),
        delivery_count: Some(delivery_count),
        link_credit: Some(credit),
        ..Default::default()
    };
    link.send_flow(flow(next_incoming_id, 0));
    let mut tick = tokio::time::interval(TICK);
    loop {
        let mut unsettled: Option<(u32, u32)> = None;
        let before = received;
        while let Some(frame) = link.decode_buffered()? {
            let FrameBody::Amqp {
                performative,
                payload,
            } = frame.body
            else {
                continue;
            };
            match performative {
                Performative::Transfer(t) => {
                    next_incoming_id = next_incoming_id.wrapping_add(1);
                    if let Some(id) = t.delivery_id {
                        if t.settled != Some(true) {
                            unsettled = Some(match unsettled {
                                Some((first, _)) => (first, id),
                                None => (id, id),
                            });
                        }
                    }
                    if t.more {
                        partial.extend_from_slice(&payload);
                        continue;
                    }
                    let payload = if partial.is_empty() {
                        payload
                    } else {
                        partial.extend_from_slice(&payload);
                        partial.split().freeze()
                    };
                    received += 1;
                    delivery_count = delivery_count.wrapping_add(1);
                    if let Some(stamp) = stamp_of(&payload, options.body_size) {
                        let latency_us = clock::now_ns().saturating_sub(stamp.sent_ns) / 1000;
                        histogram.saturating_record(latency_us.max(1));
                        latency_sum += latency_us;
                    }
                }
                Performative::Detach(detach) => {
                    return Err(super::link::address_refused(
                        &options.address,
                        false,
                        detach.error.as_ref(),
                    ));
                }
                Performative::End(end) => {
                    return Err(super::link::address_refused(
                        &options.address,
                        false,
                        end.error.as_ref(),
                    ));
                }
                Performative::Close(close) => {
                    return Err(super::link::address_refused(
                        &options.address,
                        false,
                        close.error.as_ref(),
                    ));
                }
                _ => {}
            }
        }
        if received > before {
            let now = Instant::now();
            first_received.get_or_insert(now);
            last_received = now;
            counters.received.store(received, Ordering::Relaxed);
            counters
                .latency_sum_us
                .store(latency_sum, Ordering::Relaxed);
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
        if credit_left(credit_limit, delivery_count) <= i64::from(credit / 2) {
            link.send_flow(flow(next_incoming_id, delivery_count));
            credit_limit = delivery_count.wrapping_add(credit);
        }
        let done = {
            let target = if options.presettled {
                counters.sent.load(Ordering::Relaxed)
            } else {
                counters.accepted.load(Ordering::Relaxed)
            };
            (counters.sender_done.load(Ordering::Relaxed) && received >= target)
                || received >= options.count
                || counters.stop.load(Ordering::Relaxed)
        };
        if done && link.write.is_empty() {
            link.close().await;
            return Ok(ReceiverEnd {
                first_received,
                last_received,
                histogram,
            });
        }
        let (mut reader, mut writer) = link.stream.split();
        tokio::select! {
            biased;
            n = writer.write(&link.write), if !link.write.is_empty() => {
                let n = n.map_err(|e| PerfError::io(&link.what, &e))?;
                link.write.advance(n);
                last_write = Instant::now();
                continue;
            }
            n = reader.read_buf(&mut link.read) => {
                let n = n.map_err(|e| PerfError::io(&link.what, &e))?;
                if n == 0 {
                    return Err(PerfError::Broker(format!("{}: the broker closed the socket", link.what)));
                }
            }
            _ = tick.tick() => {
                if link.peer_idle_ms > 0 && last_write.elapsed() >= idle && link.write.is_empty() {
                    link.send_heartbeat();
                }
                continue;
            }
        }
    }
}
