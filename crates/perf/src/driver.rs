//! The protocol abstraction. A run (producers, consumers, rates, statistics, reports) is the
//! same whatever the wire protocol; what differs is how a client connects, declares, publishes,
//! consumes with credit and settles. Each protocol is one module implementing [`Driver`]:
//! `amqp091` is the first; AMQP 1.0 and the stream protocol add theirs beside it.
//!
//! The calls are shaped for speed: `publish` only appends to a buffer (no await, no allocation),
//! `flush` sends the whole buffer in as few writes as the socket allows, and `receive` hands over
//! every delivery already decoded from one large read. A link never blocks longer than the
//! deadline it is given, so the generic loops stay in charge of time.

use std::future::Future;
use std::net::IpAddr;

use tokio::time::Instant;

use crate::body::Stamp;
use crate::error::PerfError;
use crate::options::ArgValue;
use crate::topology::{Source, Topology};

/// One wire protocol's client side.
pub trait Driver: Clone + Send + Sync + 'static {
    type Publisher: PublisherLink;
    type Consumer: ConsumerLink;
    /// An open connection that does nothing (`--connections`).
    type Idle: Send + 'static;

    /// The protocol's name in reports (`"amqp091"`).
    fn protocol(&self) -> &'static str;

    /// Declares the exchange, named queues and bindings, or with `-p` checks that they exist.
    fn prepare(&self, topology: &Topology) -> impl Future<Output = Result<(), PerfError>> + Send;

    /// Opens one producer connection with its channels, ready to publish.
    fn open_publisher(
        &self,
        setup: PublisherSetup,
    ) -> impl Future<Output = Result<Self::Publisher, PerfError>> + Send;

    /// Opens one consumer connection with its channels, each already consuming.
    fn open_consumer(
        &self,
        setup: ConsumerSetup,
    ) -> impl Future<Output = Result<Self::Consumer, PerfError>> + Send;

    /// Opens a connection with `channels` channels and leaves it idle, its socket bound to
    /// `source` (port chosen by the kernel) when given.
    fn open_idle(
        &self,
        channels: u16,
        source: Option<IpAddr>,
    ) -> impl Future<Output = Result<Self::Idle, PerfError>> + Send;

    /// Keeps an idle connection alive: discards what arrived and sends a heartbeat when one is
    /// due. Fails when the broker closed it.
    fn tend_idle(
        &self,
        idle: &mut Self::Idle,
    ) -> impl Future<Output = Result<(), PerfError>> + Send;

    /// Closes an idle connection politely.
    fn close_idle(&self, idle: Self::Idle) -> impl Future<Output = Result<(), PerfError>> + Send;
}

/// What a producer connection publishes.
#[derive(Clone, Debug)]
pub struct PublisherSetup {
    pub exchange: String,
    /// One routing key per channel.
    pub routing_keys: Vec<String>,
    pub body_size: usize,
    pub persistent: bool,
    pub mandatory: bool,
    /// Ask for publisher confirms.
    pub confirm: bool,
    /// `-K`: a random routing key for each message.
    pub random_routing_key: bool,
}

/// What a consumer connection reads.
#[derive(Clone, Debug)]
pub struct ConsumerSetup {
    /// One source per channel.
    pub sources: Vec<Source>,
    /// Credit per channel: prefetch count (0: unlimited).
    pub prefetch: u16,
    /// Deliveries are settled on sending (no-ack).
    pub autoack: bool,
    pub arguments: Vec<(String, ArgValue)>,
    /// Arguments of server-named queues the consumer declares.
    pub queue_arguments: Vec<(String, ArgValue)>,
}

/// A publisher confirm, as the broker sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Confirm {
    /// Index of the channel in the setup's order.
    pub channel: usize,
    /// Publish sequence number, 1 for the channel's first message.
    pub sequence: u64,
    /// Every earlier unconfirmed message is settled too.
    pub multiple: bool,
    /// `false` for a negative confirm (nack).
    pub acked: bool,
}

/// What arrived on a producer connection while it published.
#[derive(Debug, Default)]
pub struct PublisherEvents {
    pub confirms: Vec<Confirm>,
    /// Unroutable mandatory messages sent back.
    pub returned: u64,
}

/// A producer connection.
pub trait PublisherLink: Send + 'static {
    /// Appends one message on `channel` (index in the setup) to the write buffer, its body
    /// starting with `stamp`. Sends nothing.
    fn publish(&mut self, channel: usize, stamp: &Stamp);

    /// Bytes appended and not yet sent.
    fn buffered_bytes(&self) -> usize;

    /// Sends everything buffered, collecting whatever arrives meanwhile into `events`.
    fn flush(
        &mut self,
        events: &mut PublisherEvents,
    ) -> impl Future<Output = Result<(), PerfError>> + Send;

    /// Waits until something arrives or `deadline` passes, collecting it into `events`.
    fn wait(
        &mut self,
        deadline: Instant,
        events: &mut PublisherEvents,
    ) -> impl Future<Output = Result<(), PerfError>> + Send;

    /// Closes the connection (bounded wait for the broker's answer).
    fn close(self) -> impl Future<Output = Result<(), PerfError>> + Send;
}

/// One message received.
#[derive(Clone, Copy, Debug)]
pub struct Delivery<'a> {
    /// Index of the channel in the setup's order.
    pub channel: usize,
    /// What `settle` takes to acknowledge it.
    pub tag: u64,
    /// The first bytes of the body (up to 16), where the stamp is.
    pub head: &'a [u8],
}

/// A consumer connection.
pub trait ConsumerLink: Send + 'static {
    /// Hands at most `max` deliveries to `sink`, reading the socket only when none is buffered
    /// and waiting no later than `deadline`. Returns how many were handed over (0 at the
    /// deadline).
    fn receive<F>(
        &mut self,
        max: usize,
        deadline: Instant,
        sink: &mut F,
    ) -> impl Future<Output = Result<usize, PerfError>> + Send
    where
        F: FnMut(Delivery<'_>) + Send;

    /// Buffers a settlement (ack) of `tag` on `channel`, and of every earlier delivery when
    /// `multiple`. Sent by the next `flush` or `receive`.
    fn settle(&mut self, channel: usize, tag: u64, multiple: bool);

    /// Sends buffered settlements (and credit, for protocols that grant it explicitly).
    fn flush(&mut self) -> impl Future<Output = Result<(), PerfError>> + Send;

    /// Closes the connection (bounded wait for the broker's answer).
    fn close(self) -> impl Future<Output = Result<(), PerfError>> + Send;
}
