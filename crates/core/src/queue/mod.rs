//! The queue interface every queue type implements (RabbitMQ's `rabbit_queue_type`).
//!
//! A queue is a state machine run by its own task. Callers talk to it through its two bounded
//! mailboxes, in batches (`Publish` carries many messages, `Settle` many sequence numbers); it
//! answers through oneshot replies and hands deliveries to consumers' outboxes. A full mailbox
//! makes the publisher wait, which stops its socket reader: that is the credit flow from queue
//! back to the client. Quorum and stream queues will implement the same commands.
//!
//! One shortcut: a queue may offer `InlinePublish`, and then a publisher with a small batch
//! runs it as a turn of the queue on its own task while the queue is idle (nothing in its
//! mailboxes, no turn running, not in flow). Order is kept by `pending`: a command sent
//! before is always handled first. One publisher spread over many queues then wakes no queue
//! task at all. The publisher may also have the queue accept the batch first and run it a
//! moment later (`try_accept`, `run_accepted`): accepted, it is in the queue's order (the next
//! turn, whoever runs it, takes it before any command, all of which were sent after it), so
//! its confirm can go out before the turns that deliver it.
//!
//! The data mailbox carries publishes and everything that must see them in order (get, purge,
//! delete, info). The control mailbox carries what consumers need promptly (credit, settle,
//! consume, cancel); the queue takes it first, so a flood of publishes cannot starve the
//! consumers that would drain it. A control command sent before a data command is always
//! handled before it (see `classic::run`).

pub mod action;
pub mod args;
pub mod classic;
pub mod consume_start;
mod expiry;
mod forward;
pub mod queue_type;
pub mod stats;
pub mod stream;

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use rustc_hash::FxHashMap;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::confirm::ConfirmTicket;
use crate::consumer::{ConnectionId, Consumer, ConsumerId, Delivery, Outbox};
use crate::error::{resource_name, BrokerError};
use crate::limits::INLINE_PUBLISH_MAX;
use crate::message::Message;
use crate::value::Table;

pub use action::Action;
pub use args::{Overflow, QueueArgs};
pub use consume_start::ConsumeStart;
pub use queue_type::{ConfirmAfter, QueueType};
pub use stats::{QueueStats, QueueStatsSnapshot};

/// The declared shape of a queue; compared on redeclaration.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueDef {
    pub name: Arc<str>,
    pub vhost: Arc<str>,
    pub durable: bool,
    /// The connection that declared an exclusive queue; `None` for shared queues.
    pub exclusive_owner: Option<ConnectionId>,
    pub auto_delete: bool,
    pub arguments: Table,
}

impl QueueDef {
    /// `queue 'orders' in vhost '/'`, for error texts.
    pub fn resource(&self) -> String {
        resource_name("queue", &self.name, &self.vhost)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SettleOp {
    /// Processed: forget the message.
    Ack,
    /// Rejected without requeue: dead-letter it (reason `rejected`) or drop it.
    Discard,
    /// Put back at its original position, marked redelivered.
    Requeue,
}

/// What a queue is started with besides its definition (`Behaviour::start`).
pub struct Setup {
    pub args: QueueArgs,
    /// Runs (once) when the queue removes itself: its last consumer left (auto-delete) or it
    /// was unused for `x-expires`. The caller drops its records there.
    pub on_auto_delete: Box<dyn FnOnce() + Send>,
    pub storage: Option<classic::Storage>,
    /// What a durable queue had on disk at startup.
    pub recovered: Option<warren_store::RecoveredQueue>,
    /// Where dead letters are routed.
    pub vhost: Weak<crate::vhost::VHost>,
    /// Messages publishers may have in flight to the queue (`QueueHandle::acquire_credit`).
    pub credit: u32,
    /// Where streams keep their logs (`None`: the broker has no data directory for them).
    pub streams: Option<stream::StreamStorage>,
    /// The queue was recovered at broker start (a stream opens its log as it is), rather
    /// than declared now (a new stream starts empty).
    pub restart: bool,
}

/// Counts reported to declare-ok, purge-ok and the management API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueInfo {
    pub messages: u32,
    pub consumers: u32,
}

/// The answer to a basic.get: the delivery and how many messages remain ready.
#[derive(Debug)]
pub struct GetOk {
    pub delivery: Delivery,
    pub remaining: u32,
}

/// Requests a queue task handles, in mailbox order.
#[derive(Debug)]
pub enum QueueCmd {
    /// Messages to enqueue; the ticket is held until they are safe under the queue's
    /// durability contract (see `ConfirmTicket`).
    Publish {
        messages: Vec<Arc<Message>>,
        confirm: Option<ConfirmTicket>,
        /// The publisher's tag of each message, for those it must hear about when the queue
        /// refuses them (`x-overflow=reject-publish`); empty when it need not.
        tags: Vec<u64>,
        /// The publisher's credit for these messages (see `QueueHandle::acquire_credit`),
        /// returned when the queue has taken them.
        credit: Option<OwnedSemaphorePermit>,
    },
    /// New settings from a policy change (max-priority and single-active-consumer cannot
    /// change and are kept; a new message TTL applies to messages enqueued from now on).
    SetArgs {
        args: Box<QueueArgs>,
    },
    Consume {
        consumer: Consumer,
        reply: oneshot::Sender<Result<(), BrokerError>>,
    },
    Cancel {
        consumer: ConsumerId,
        reply: Option<oneshot::Sender<()>>,
    },
    /// More deliveries the consumer may receive.
    Credit {
        consumer: ConsumerId,
        credit: u32,
    },
    Settle {
        op: SettleOp,
        seqs: Vec<u64>,
    },
    Get {
        channel: u16,
        no_ack: bool,
        reply: oneshot::Sender<Option<GetOk>>,
    },
    Purge {
        reply: oneshot::Sender<u32>,
    },
    Delete {
        if_unused: bool,
        if_empty: bool,
        reply: oneshot::Sender<Result<u32, BrokerError>>,
    },
    Info {
        reply: oneshot::Sender<QueueInfo>,
    },
}

/// Settlements a connection collected from one read: one `Settle` command per queue and
/// operation, each carrying every sequence number (the AMQP 0.9.1 and 1.0 connections both
/// batch through here).
#[derive(Default)]
pub struct Settlements(FxHashMap<(usize, SettleOp), (QueueHandle, Vec<u64>)>);

impl Settlements {
    pub fn add(&mut self, queue: &QueueHandle, op: SettleOp, seq: u64) {
        self.0
            .entry((queue.key(), op))
            .or_insert_with(|| (queue.clone(), Vec::new()))
            .1
            .push(seq);
    }

    /// Commands `send` would send.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sends them to their queues (a queue that has stopped has nothing left to settle).
    pub async fn send(&mut self) {
        for ((_, op), (queue, seqs)) in self.0.drain() {
            let _ = queue.send(QueueCmd::Settle { op, seqs }).await;
        }
    }
}

/// Sends consumer credit, (queue, consumer, messages) each, to the queues (a queue that has
/// stopped needs none); both protocols' connections grant through here.
pub async fn send_credit(grants: impl IntoIterator<Item = (QueueHandle, ConsumerId, u32)>) {
    for (queue, consumer, credit) in grants {
        let _ = queue.send(QueueCmd::Credit { consumer, credit }).await;
    }
}

/// A cheap, cloneable reference to a running queue.
#[derive(Clone)]
pub struct QueueHandle(Arc<HandleInner>);

struct HandleInner {
    def: QueueDef,
    /// The queue's type, whose rules publishers ask (`confirm_after`).
    kind: queue_type::QueueType,
    /// The queue's settings: those it was started with, then what policies made of them
    /// (a publisher reads `rejects_publishes`).
    args: arc_swap::ArcSwap<QueueArgs>,
    data: mpsc::Sender<QueueCmd>,
    control: mpsc::Sender<QueueCmd>,
    /// Messages publishers may have on their way into the queue (RabbitMQ's
    /// `credit_flow_default_credit`): a publisher takes credit before it sends a batch and
    /// the queue gives it back once it has taken the batch. Fair: publishers wait in turn.
    credit: Arc<Semaphore>,
    credit_max: u32,
    stats: QueueStats,
    /// Commands sent to either mailbox and not yet handled: counted up before a command is
    /// sent and down by the queue once it has handled it, so an inline publish (below) never
    /// overtakes a command sent before it.
    pending: AtomicUsize,
    /// The queue's side of inline publishes, for queue types that offer them.
    inline: OnceLock<Weak<dyn InlinePublish>>,
    /// A stream's handle for the stream protocol (set once, by the stream when it starts).
    stream: OnceLock<stream::StreamHandle>,
}

/// A publish batch: the messages, the confirm ticket they hold and the publisher's tags
/// (see `QueueCmd::Publish`).
pub type PublishBatch = (Vec<Arc<Message>>, Option<ConfirmTicket>, Vec<u64>);

/// A queue that lets a publisher run its publish as a whole turn of the queue on the
/// publisher's own task while the queue is idle: no mailbox hop and no task to wake, which
/// is most of a small batch's cost when one publisher's messages are spread over many queues.
pub trait InlinePublish: Send + Sync {
    /// Runs the batch now, or gives it back when the queue is busy: its task is in a turn,
    /// commands wait in its mailboxes (`pending` is not 0), it holds publishers back (flow)
    /// or it has stopped.
    fn try_publish(&self, batch: PublishBatch) -> Result<(), PublishBatch>;

    /// Takes the batch into the queue's order without running it, on the same terms as
    /// `try_publish`: it then counts as handed to the queue (its confirm may go out, and
    /// whatever is sent to the queue later sees it), and the next turn runs it first. The
    /// caller runs that turn soon with `run_accepted`.
    fn try_accept(&self, batch: PublishBatch) -> Result<(), PublishBatch>;

    /// Runs what `try_accept` took, as a turn on this task when the queue is free, or wakes
    /// the queue's task to run it.
    fn run_accepted(&self);
}

impl QueueCmd {
    /// Messages the command publishes.
    pub fn published_count(&self) -> usize {
        match self {
            QueueCmd::Publish { messages, .. } => messages.len(),
            _ => 0,
        }
    }

    /// A command the queue will never run (it stopped): a publish's ticket is settled, as
    /// RabbitMQ confirms a publish whose queue was deleted on its way; a reply is dropped, so
    /// its caller sees the queue gone.
    pub fn abandon(self) {
        if let QueueCmd::Publish {
            confirm: Some(ticket),
            ..
        } = self
        {
            ticket.settle(true);
        }
    }

    /// Whether the command travels in the control mailbox (see the module doc).
    pub fn is_control(&self) -> bool {
        matches!(
            self,
            QueueCmd::Credit { .. }
                | QueueCmd::Settle { .. }
                | QueueCmd::Consume { .. }
                | QueueCmd::Cancel { .. }
        )
    }
}

impl fmt::Debug for QueueHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QueueHandle({})", self.0.def.name)
    }
}

/// A connection that keeps serving its consumers while its publishes wait for a queue
/// (`QueueHandle::publish_serving`).
pub trait ServeWhileWaiting {
    /// Takes the connection's events and writes what they produced; `false` when its socket
    /// is gone.
    fn serve(&mut self) -> impl std::future::Future<Output = bool> + Send;
}

impl QueueHandle {
    /// `credit` is the number of messages publishers may have in flight to the queue
    /// (at least 1).
    pub fn new(
        kind: queue_type::QueueType,
        def: QueueDef,
        args: QueueArgs,
        data: mpsc::Sender<QueueCmd>,
        control: mpsc::Sender<QueueCmd>,
        credit: u32,
    ) -> QueueHandle {
        let credit_max = credit.max(1);
        QueueHandle(Arc::new(HandleInner {
            def,
            kind,
            args: arc_swap::ArcSwap::from_pointee(args),
            data,
            control,
            credit: Arc::new(Semaphore::new(credit_max as usize)),
            credit_max,
            stats: QueueStats::default(),
            pending: AtomicUsize::new(0),
            inline: OnceLock::new(),
            stream: OnceLock::new(),
        }))
    }

    /// A stream's handle for the stream protocol; `None` for the other queue types.
    pub fn stream(&self) -> Option<&stream::StreamHandle> {
        self.0.stream.get()
    }

    /// Gives the queue its stream handle (set once, by the stream when it starts).
    pub(crate) fn offer_stream(&self, handle: stream::StreamHandle) {
        let _ = self.0.stream.set(handle);
    }

    /// Lets publishers run their publishes on their own task through `inline` while the
    /// queue is idle (set once, by the queue when it starts).
    pub fn offer_inline(&self, inline: Weak<dyn InlinePublish>) {
        let _ = self.0.inline.set(inline);
    }

    /// Commands sent and not yet handled (see `HandleInner::pending`).
    pub fn pending(&self) -> usize {
        self.0.pending.load(Ordering::SeqCst)
    }

    /// The queue handled `count` commands taken from its mailboxes.
    pub fn handled(&self, count: usize) {
        let before = self.0.pending.fetch_sub(count, Ordering::SeqCst);
        debug_assert!(before >= count, "a command was sent without `will_send`");
    }

    /// Counts a command about to be sent; the caller sends it next, or calls `handled(1)`
    /// when it could not.
    fn will_send(&self) {
        self.0.pending.fetch_add(1, Ordering::SeqCst);
    }

    /// Runs the batch as a turn of the queue on this task when the queue offers it and is
    /// idle; gives it back otherwise.
    fn try_publish_inline(&self, batch: PublishBatch) -> Result<(), PublishBatch> {
        match self.inline_for(&batch) {
            Some(inline) => inline.try_publish(batch),
            None => Err(batch),
        }
    }

    /// Hands a small batch to an idle queue without running it yet, so that its publisher can
    /// confirm it before the queue's turn (delivery to consumers) has run; the publisher then
    /// calls `run_accepted`. Gives the batch back when the queue is busy, or does not offer
    /// inline publishes, or the batch is large: it goes through `publish_serving` then.
    pub fn try_accept(&self, batch: PublishBatch) -> Result<(), PublishBatch> {
        match self.inline_for(&batch) {
            Some(inline) => inline.try_accept(batch),
            None => Err(batch),
        }
    }

    /// Runs what `try_accept` took (see `InlinePublish::run_accepted`).
    pub fn run_accepted(&self) {
        if let Some(inline) = self.0.inline.get().and_then(Weak::upgrade) {
            inline.run_accepted();
        }
    }

    fn inline_for(&self, batch: &PublishBatch) -> Option<Arc<dyn InlinePublish>> {
        if batch.0.len() > INLINE_PUBLISH_MAX {
            return None;
        }
        self.0.inline.get().and_then(Weak::upgrade)
    }

    pub fn args(&self) -> arc_swap::Guard<Arc<QueueArgs>> {
        self.0.args.load()
    }

    /// Applies new settings (a policy changed): publishers see them at once, the queue
    /// when it takes the command.
    pub async fn set_args(&self, args: QueueArgs) -> Result<(), BrokerError> {
        self.0.args.store(Arc::new(args.clone()));
        self.send(QueueCmd::SetArgs {
            args: Box::new(args),
        })
        .await
    }

    /// Sends a data command without waiting: `Err(Some(cmd))` when the mailbox is full,
    /// `Err(None)` when the queue has stopped.
    pub fn try_send_data(&self, cmd: QueueCmd) -> Result<(), Option<QueueCmd>> {
        self.will_send();
        self.0.data.try_send(cmd).map_err(|error| {
            self.handled(1); // not sent
            match error {
                mpsc::error::TrySendError::Full(cmd) => Some(cmd),
                mpsc::error::TrySendError::Closed(_) => None,
            }
        })
    }

    /// Waits until the queue has credit for `messages` more messages in flight and takes it
    /// (cancel-safe, but a dropped wait loses its turn). A batch larger than the whole credit
    /// takes all of it, so one batch can always go.
    pub async fn acquire_credit(&self, messages: usize) -> OwnedSemaphorePermit {
        let wanted = u32::try_from(messages)
            .unwrap_or(u32::MAX)
            .clamp(1, self.0.credit_max);
        self.0
            .credit
            .clone()
            .acquire_many_owned(wanted)
            .await
            .expect("invariant: a queue's credit semaphore is never closed")
    }

    fn mailbox(&self, cmd: &QueueCmd) -> &mpsc::Sender<QueueCmd> {
        if cmd.is_control() {
            &self.0.control
        } else {
            &self.0.data
        }
    }

    /// The queue's figures as of its last turn (management API, metrics).
    pub fn stats(&self) -> QueueStatsSnapshot {
        self.0.stats.snapshot()
    }

    /// Where the queue task copies its figures (see `stats`).
    pub fn stats_cell(&self) -> &QueueStats {
        &self.0.stats
    }

    pub fn def(&self) -> &QueueDef {
        &self.0.def
    }

    /// The queue's type.
    pub fn kind(&self) -> queue_type::QueueType {
        self.0.kind
    }

    /// When the queue's type lets a publish be confirmed (`persistent`: the message, or any
    /// message of a batch, is): the type decides; the connections only ask.
    pub fn confirm_after(&self, persistent: bool) -> ConfirmAfter {
        self.0
            .kind
            .behaviour()
            .confirm_after(&self.0.def, persistent)
    }

    pub fn name(&self) -> &Arc<str> {
        &self.0.def.name
    }

    /// Identity of the running queue, for keying per-queue batches.
    pub fn key(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    pub fn same(&self, other: &QueueHandle) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Sends a command, waiting while the mailbox is full (back-pressure). Fails only when the
    /// queue has stopped (deleted), which callers report as 404.
    pub async fn send(&self, cmd: QueueCmd) -> Result<(), BrokerError> {
        // What `mpsc::Sender::send` does, with the command held once rather than twice across
        // the wait: every connection task's future is as large as its largest await.
        let permit = self
            .mailbox(&cmd)
            .reserve()
            .await
            .map_err(|_| BrokerError::not_found(format!("no {}", self.0.def.resource())))?;
        self.will_send();
        permit.send(cmd);
        Ok(())
    }

    /// Hands a batch of publishes to the queue: its credit first (waiting in turn with the
    /// queue's other publishers), then a mailbox slot. Meanwhile, each time `outbox` wakes,
    /// `connection` is served: it takes its deliveries, since a connection that publishes to
    /// and consumes from the same busy queue must keep taking them, or neither side would
    /// move. `serve` returning `false` (the socket is gone) gives the batch up, and so does a
    /// queue deleted meanwhile (the route was taken before).
    /// The AMQP 0.9.1 and AMQP 1.0 connections both publish through here.
    pub async fn publish_serving(
        &self,
        messages: Vec<Arc<Message>>,
        confirm: Option<ConfirmTicket>,
        tags: Vec<u64>,
        outbox: &Outbox,
        connection: &mut impl ServeWhileWaiting,
    ) {
        let (messages, confirm, tags) = match self.try_publish_inline((messages, confirm, tags)) {
            Ok(()) => return,
            Err(batch) => batch,
        };
        let credit = self.acquire_credit(messages.len());
        tokio::pin!(credit);
        let mut credit_taken = None;
        loop {
            tokio::select! {
                permit = &mut credit, if credit_taken.is_none() => credit_taken = Some(permit),
                permit = self.reserve_data(), if credit_taken.is_some() => {
                    let Ok(permit) = permit else {
                        break; // the queue stopped (deleted) since the route was taken
                    };
                    self.will_send();
                    permit.send(QueueCmd::Publish {
                        messages,
                        confirm,
                        tags,
                        credit: credit_taken,
                    });
                    return;
                }
                () = outbox.notified() => {
                    if !connection.serve().await {
                        break;
                    }
                }
            }
        }
        // Not handed over: the ticket is settled here, as the queue would have on its way out.
        if let Some(ticket) = confirm {
            ticket.settle(true);
        }
    }

    /// Waits for room in the data mailbox (cancel-safe, unlike `send`): lets a connection keep
    /// serving its consumers while its publishes wait for a busy queue.
    async fn reserve_data(&self) -> Result<mpsc::Permit<'_, QueueCmd>, BrokerError> {
        self.0
            .data
            .reserve()
            .await
            .map_err(|_| BrokerError::not_found(format!("no {}", self.0.def.resource())))
    }

    pub async fn request<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> QueueCmd,
    ) -> Result<T, BrokerError> {
        let (reply_tx, reply_rx) = oneshot::channel();
        self.send(make(reply_tx)).await?;
        reply_rx
            .await
            .map_err(|_| BrokerError::not_found(format!("no {}", self.0.def.resource())))
    }

    pub async fn info(&self) -> Result<QueueInfo, BrokerError> {
        self.request(|reply| QueueCmd::Info { reply }).await
    }
}
