//! The AMQP side of a run, over lapin: connecting, declaring the queue, a publisher that
//! keeps a window of unconfirmed persistent messages, and a consumer that checks the order of
//! what it receives and acknowledges it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{bail, Context};
use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};

use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, PublisherConfirm,
};
use tokio::sync::Notify;

use crate::progress::Counters;
use crate::sequence::{self, OrderCheck};

/// `delivery_mode` of a persistent message: the broker must keep it on disk in a durable
/// queue and confirm it only once it is there.
const PERSISTENT: u8 = 2;

/// Opens a connection named after the tool and `role`, so the broker's log tells the
/// publisher and the consumer apart.
pub async fn connect(uri: &str, role: &str) -> anyhow::Result<Connection> {
    let properties = ConnectionProperties::default()
        .with_connection_name(format!("warren-backlog {role}").into());
    Connection::connect(uri, properties)
        .await
        .with_context(|| format!("cannot connect to {uri} (is the broker running there?)"))
}

/// Closes a connection politely; the broker then has every ack sent before it.
pub async fn close(connection: &Connection) -> anyhow::Result<()> {
    connection
        .close(200, "warren-backlog done".into())
        .await
        .context("closing the connection")
}

/// Declares `queue` durable (with `x-queue-mode=lazy` when `lazy`) and checks that it is
/// empty: the order check counts from sequence 0, so earlier messages would fail it.
pub async fn declare_empty(channel: &Channel, queue: &str, lazy: bool) -> anyhow::Result<()> {
    let mut arguments = FieldTable::default();
    if lazy {
        arguments.insert("x-queue-mode".into(), AMQPValue::LongString("lazy".into()));
    }
    let options = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare(queue.into(), options, arguments)
        .await
        .with_context(|| format!("cannot declare durable queue {queue}"))?;
    if declared.message_count() > 0 {
        bail!(
            "queue {queue} already holds {} messages, but the order check needs it empty: \
             delete it or pass another --queue",
            declared.message_count()
        );
    }
    Ok(())
}

/// The ready message count of an existing `queue` (a passive `queue.declare`).
pub async fn ready_count(channel: &Channel, queue: &str) -> anyhow::Result<u32> {
    let options = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare(queue.into(), options, FieldTable::default())
        .await
        .with_context(|| format!("cannot find queue {queue} (does it exist? publish first)"))?;
    Ok(declared.message_count())
}

/// Publishes the sequence-numbered persistent messages of one run on one channel in confirm
/// mode, keeping at most `window` of them unconfirmed. A nack, or a message returned as
/// unroutable (they are published mandatory), ends the run with an error.
pub struct Publisher {
    channel: Channel,
    queue: ShortString,
    window: usize,
    in_flight: VecDeque<(u64, PublisherConfirm)>,
    body: Vec<u8>,
    properties: BasicProperties,
    counters: Arc<Counters>,
}

impl Publisher {
    /// Opens a channel in confirm mode on `connection`.
    pub async fn open(
        connection: &Connection,
        queue: &str,
        size: usize,
        window: usize,
        counters: Arc<Counters>,
    ) -> anyhow::Result<Publisher> {
        let channel = connection
            .create_channel()
            .await
            .context("cannot open a channel")?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .context("cannot put the channel in confirm mode")?;
        Ok(Publisher {
            channel,
            queue: queue.into(),
            window: window.max(1),
            in_flight: VecDeque::with_capacity(window),
            body: sequence::body(size),
            properties: BasicProperties::default().with_delivery_mode(PERSISTENT),
            counters,
        })
    }

    /// The channel, for declaring the queue.
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Publishes message `seq`, first waiting for the oldest confirm if the window is full.
    pub async fn send(&mut self, seq: u64) -> anyhow::Result<()> {
        if self.in_flight.len() >= self.window {
            self.settle_oldest().await?;
        }
        sequence::write_seq(&mut self.body, seq);
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let confirm = self
            .channel
            .basic_publish(
                "".into(),
                self.queue.clone(),
                options,
                &self.body,
                self.properties.clone(),
            )
            .await
            .with_context(|| format!("cannot publish message {seq}"))?;
        self.in_flight.push_back((seq, confirm));
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Waits until every published message is confirmed.
    pub async fn finish(&mut self) -> anyhow::Result<()> {
        while !self.in_flight.is_empty() {
            self.settle_oldest().await?;
        }
        Ok(())
    }

    async fn settle_oldest(&mut self) -> anyhow::Result<()> {
        let Some((seq, confirm)) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let confirmation = confirm
            .await
            .with_context(|| format!("no confirm for message {seq}: the channel failed"))?;
        match confirmation {
            Confirmation::Ack(None) => {
                self.counters.confirmed.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Confirmation::Ack(Some(returned)) => bail!(
                "message {seq} was returned unroutable ({} {}): does queue {} still exist?",
                returned.reply_code,
                returned.reply_text,
                self.queue
            ),
            Confirmation::Nack(_) => bail!(
                "the broker nacked message {seq}: it could not store it (see the broker's log)"
            ),
            Confirmation::NotRequested => {
                bail!("message {seq} got no confirm: the channel is not in confirm mode")
            }
        }
    }
}

/// How a consumer reads a queue: the messages it expects, its prefetch, and how many
/// deliveries it acknowledges at once (one `basic.ack` with `multiple`).
#[derive(Debug, Clone, Copy)]
pub struct ConsumeSpec {
    pub count: u64,
    pub prefetch: u16,
    pub ack_every: u64,
    /// The sequence number of the first message expected.
    pub first: u64,
}

/// How the churn consumer keeps pace with a publisher that runs at the same time.
pub struct Pace<'a> {
    /// Notified after every ack, for the publisher that waits for the backlog to shrink.
    pub acked: &'a Notify,
    /// Notified by the publisher after every message it sends.
    pub sent: &'a Notify,
    /// The consumer acknowledges message `s` only once `s + 1 + lag` messages are sent (or
    /// all of them), so the queue keeps about `lag` messages; 0 lets it run freely.
    pub lag: u64,
}

/// Consumes `spec.count` messages from `queue` with manual acks and checks that they carry
/// the sequence numbers `spec.first`, `spec.first + 1`, ... in order. The last delivery is always acknowledged, so
/// the queue is left without the consumed messages. `pace` is for a publisher running
/// at the same time.
pub async fn consume(
    connection: &Connection,
    queue: &str,
    spec: ConsumeSpec,
    counters: &Counters,
    pace: Option<&Pace<'_>>,
) -> anyhow::Result<()> {
    let channel = connection
        .create_channel()
        .await
        .context("cannot open a channel")?;
    channel
        .basic_qos(spec.prefetch, BasicQosOptions::default())
        .await
        .context("basic.qos failed")?;
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            "warren-backlog".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .with_context(|| format!("cannot consume from queue {queue}"))?;
    let mut check = OrderCheck::starting_at(spec.first);
    let end = spec.first + spec.count;
    let mut unacked = 0;
    while check.expected() < end {
        let Some(delivery) = consumer.next().await else {
            bail!(
                "the broker cancelled the consumer after {} messages (queue {queue} deleted?)",
                check.expected() - spec.first
            );
        };
        let delivery = delivery.context("the consumer's channel failed")?;
        check.check(&delivery.data)?;
        counters.received.fetch_add(1, Ordering::Relaxed);
        unacked += 1;
        if unacked >= spec.ack_every || check.expected() == end {
            if let Some(pace) = pace {
                let wanted = (check.expected() + pace.lag).min(end);
                wait_until_sent(counters, pace.sent, wanted).await;
            }
            let multiple = BasicAckOptions { multiple: true };
            channel
                .basic_ack(delivery.delivery_tag, multiple)
                .await
                .context("basic.ack failed")?;
            counters.acked.fetch_add(unacked, Ordering::Relaxed);
            unacked = 0;
            if let Some(pace) = pace {
                pace.acked.notify_waiters();
            }
        }
    }
    channel
        .close(200, "warren-backlog consumed all".into())
        .await
        .context("closing the consumer's channel")
}

/// Waits until at least `count` messages are sent.
async fn wait_until_sent(counters: &Counters, sent: &Notify, count: u64) {
    loop {
        // Created before the check, so a notification in between still wakes it.
        let notified = sent.notified();
        if counters.sent.load(Ordering::Relaxed) >= count {
            return;
        }
        notified.await;
    }
}
