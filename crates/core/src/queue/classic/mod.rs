//! The classic queue: a FIFO (one per priority level) held in memory, with the message store
//! behind it (RabbitMQ's classic queue, v2 and lazy).
//!
//! `machine.rs` is the state machine (`ClassicQueue`: commands in, effects out); this module
//! is its type's rules (`CLASSIC`) and its driver: the task that owns the state machine, its
//! two mailboxes and its timers. The driver offers one policy of its own: a publisher with a
//! small batch may run it as a turn of the idle queue on its own task (`Shared`, see
//! `InlinePublish`), so one publisher spread over many queues wakes no queue task at all.

mod machine;
#[cfg(test)]
mod machine_prop_test;
mod ready;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use warren_store::Store;

use super::forward::Forwarder;
use super::queue_type::{Behaviour, Capabilities, ConfirmAfter, QueueType};
use crate::error::BrokerError;
use crate::limits::{
    QUEUE_BATCH_MAX, QUEUE_CONTROL_MAILBOX_MAX, QUEUE_FLOW_STALL_MS, QUEUE_MAILBOX_MAX,
    QUEUE_TURN_PUBLISHES_MAX,
};
use crate::queue::{InlinePublish, PublishBatch, QueueCmd, QueueDef, QueueHandle, Setup};
pub use machine::ClassicQueue;
use machine::State;

/// The classic queue type.
pub struct Classic;

pub static CLASSIC: Classic = Classic;

/// RabbitMQ's `rabbit_classic_queue:capabilities/0`.
static CAPABILITIES: Capabilities = Capabilities {
    queue_arguments: &[
        "x-expires",
        "x-message-ttl",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-priority",
        "x-overflow",
        "x-queue-mode",
        "x-queue-version",
        "x-single-active-consumer",
        "x-queue-type",
        "x-queue-master-locator",
        "x-queue-leader-locator",
    ],
    consumer_arguments: &["x-priority"],
    unsupported_policies: &[
        "max-age",
        "stream-max-segment-size-bytes",
        "initial-cluster-size",
        "delivery-limit",
        "dead-letter-strategy",
        "max-in-memory-length",
        "max-in-memory-bytes",
        "target-group-size",
    ],
    server_named: true,
    transient: true,
    global_qos: true,
    requeue: true,
    inline_publish: true,
};

impl Behaviour for Classic {
    fn module(&self) -> &'static str {
        "rabbit_classic_queue"
    }

    fn capabilities(&self) -> &'static Capabilities {
        &CAPABILITIES
    }

    /// A persistent message to a durable queue waits for the store's fsync; anything else is
    /// safe once the queue holds it (a transient message or queue does not outlive a restart).
    fn confirm_after(&self, def: &QueueDef, persistent: bool) -> ConfirmAfter {
        if persistent && def.durable && def.exclusive_owner.is_none() {
            ConfirmAfter::Fsynced
        } else {
            ConfirmAfter::Enqueued
        }
    }

    fn check_declare(&self, _def: &QueueDef) -> Result<(), BrokerError> {
        Ok(()) // classic queues take every shape: durable or not, exclusive, auto-delete
    }

    fn start(&self, def: QueueDef, setup: Setup) -> QueueHandle {
        spawn(def, setup)
    }
}

/// How a queue uses the message store.
#[derive(Debug, Clone)]
pub struct Storage {
    pub store: Store,
    /// Bytes of ready messages kept in memory; beyond it only their location is.
    pub memory_budget: usize,
}

/// Starts a classic queue task.
pub fn spawn(def: QueueDef, setup: Setup) -> QueueHandle {
    let Setup {
        args,
        on_auto_delete,
        storage,
        recovered,
        vhost,
        credit,
        ..
    } = setup;
    let (data_tx, data_rx) = mpsc::channel(QUEUE_MAILBOX_MAX);
    let (control_tx, control_rx) = mpsc::channel(QUEUE_CONTROL_MAILBOX_MAX);
    let handle = QueueHandle::new(QueueType::Classic, def, args, data_tx, control_tx, credit);
    let mut queue = ClassicQueue::new(handle.clone());
    queue.forwarder = Forwarder::new(vhost);
    if let Some(storage) = storage {
        queue.attach_store(storage, recovered);
    }
    let mailboxes = Mailboxes {
        data: data_rx,
        control: control_rx,
    };
    let shared = Arc::new(Shared {
        queue: Mutex::new(queue),
        kick: Notify::new(),
    });
    let inline: Arc<dyn InlinePublish> = shared.clone();
    handle.offer_inline(Arc::downgrade(&inline));
    tokio::spawn(run(shared, mailboxes, on_auto_delete));
    handle
}

/// What a queue's task shares with the publishers that run their publishes inline: the
/// state machine, held by whoever runs a turn, and the task's wake-up for what an inline
/// turn leaves it to do (a timer, flow, or its end).
struct Shared {
    queue: Mutex<ClassicQueue>,
    kick: Notify,
}

impl InlinePublish for Shared {
    fn try_publish(&self, batch: PublishBatch) -> Result<(), PublishBatch> {
        let Some(mut queue) = self.idle() else {
            return Err(batch);
        };
        let (messages, confirm, tags) = batch;
        run_turn(
            &mut queue,
            [QueueCmd::Publish {
                messages,
                confirm,
                tags,
                credit: None,
            }],
        );
        self.after_inline_turn(&mut queue);
        Ok(())
    }

    fn try_accept(&self, batch: PublishBatch) -> Result<(), PublishBatch> {
        let Some(mut queue) = self.idle() else {
            return Err(batch);
        };
        queue.accepted.push(batch);
        Ok(())
    }

    fn run_accepted(&self) {
        let Some(mut queue) = self.queue.try_lock() else {
            // Whoever holds the queue may not be in a turn (the task between two waits):
            // the task's next turn runs them.
            self.kick.notify_one();
            return;
        };
        if queue.accepted.is_empty() || queue.state != State::Running {
            return; // a turn ran them meanwhile, or the queue is gone with them
        }
        run_turn(&mut queue, []);
        self.after_inline_turn(&mut queue);
    }
}

impl Shared {
    /// The queue, when a publisher may run or add to it now: no turn is running, every
    /// command sent before was handled (`pending` is 0), it takes publishes (not in flow)
    /// and has not stopped.
    fn idle(&self) -> Option<MutexGuard<'_, ClassicQueue>> {
        let queue = self.queue.try_lock()?; // the task or another publisher is in a turn
        let idle = queue.state == State::Running && !queue.flow && queue.handle.pending() == 0;
        idle.then_some(queue)
    }

    /// Wakes the task for what an inline turn left it: a timer, flow, or its end.
    fn after_inline_turn(&self, queue: &mut ClassicQueue) {
        let flow = queue.in_flow();
        if queue.state != State::Running || flow || queue.wake_at().is_some() {
            self.kick.notify_one();
        }
    }
}

struct Mailboxes {
    data: mpsc::Receiver<QueueCmd>,
    control: mpsc::Receiver<QueueCmd>,
}

impl Mailboxes {
    /// Waits for commands; returns control and data commands in the order they must run, or
    /// `false` once every handle is gone.
    /// In `flow`, only control commands are taken (publishers wait), and only for as long as
    /// the consumers keep taking deliveries.
    /// `wake_at` ends the wait early for the queue's timers (TTL, x-expires, dead letters).
    async fn next(
        &mut self,
        control: &mut Vec<QueueCmd>,
        data: &mut Vec<QueueCmd>,
        flow: bool,
        wake_at: Option<Instant>,
        kick: &Notify,
    ) -> bool {
        let far = Instant::now() + Duration::from_secs(3600);
        let timer = tokio::time::sleep_until(wake_at.unwrap_or(far));
        let received = if flow {
            let stall = tokio::time::sleep(Duration::from_millis(QUEUE_FLOW_STALL_MS));
            tokio::select! {
                biased;
                n = self.control.recv_many(control, QUEUE_BATCH_MAX) => n,
                // No credit came: the caller re-evaluates flow.
                () = stall => return true,
                () = timer => return true,
                () = kick.notified() => return true,
            }
        } else {
            tokio::select! {
                biased;
                n = self.control.recv_many(control, QUEUE_BATCH_MAX) => n,
                cmd = self.data.recv() => match cmd {
                    Some(cmd) => {
                        data.push(cmd);
                        self.take_more_data(data);
                        data.len()
                    }
                    None => 0,
                },
                () = timer => return true,
                () = kick.notified() => return true,
            }
        };
        if received == 0 {
            return false; // every handle dropped: the vhost forgot the queue
        }
        // A control command sent before the data just taken is in the control mailbox now:
        // take all of it so it runs first.
        while let Ok(cmd) = self.control.try_recv() {
            control.push(cmd);
        }
        true
    }

    /// Closes both mailboxes and abandons what they still hold (`QueueCmd::abandon`): every
    /// publish the queue took a ticket for is settled, run or not.
    async fn abandon_all(&mut self) {
        self.control.close();
        self.data.close();
        // After `close`, `recv` ends once the buffer is empty and no sender holds a permit
        // (a permit is sent at once by whoever reserved it).
        while let Some(cmd) = self.control.recv().await {
            cmd.abandon();
        }
        while let Some(cmd) = self.data.recv().await {
            cmd.abandon();
        }
    }

    /// Takes what else is waiting in the data mailbox, up to `QUEUE_BATCH_MAX` commands and
    /// about `QUEUE_TURN_PUBLISHES_MAX` published messages: a turn stays short, so the acks
    /// that give consumers more credit wait at most one short turn behind a flood of publishes.
    fn take_more_data(&mut self, data: &mut Vec<QueueCmd>) {
        let mut published: usize = data.iter().map(QueueCmd::published_count).sum();
        while data.len() < QUEUE_BATCH_MAX && published < QUEUE_TURN_PUBLISHES_MAX {
            let Ok(cmd) = self.data.try_recv() else {
                break;
            };
            published += cmd.published_count();
            data.push(cmd);
        }
    }
}

/// Runs one turn of the state machine and carries out what it asked for.
fn run_turn(queue: &mut ClassicQueue, cmds: impl IntoIterator<Item = QueueCmd>) {
    queue.turn(cmds);
    apply_actions(queue);
}

/// Carries out the queue's actions (`Action::apply`), giving their buffers back.
fn apply_actions(queue: &mut ClassicQueue) {
    let mut actions = queue.take_actions();
    for action in actions.drain(..) {
        if let Some(events) = action.apply() {
            queue.recycle(events);
        }
    }
    queue.return_actions(actions);
}

/// The queue's task: a turn for each batch of commands from its mailboxes, and for its
/// timers. Publishers may run turns of their own in between (`Shared`); the lock keeps turns
/// apart.
async fn run(
    shared: Arc<Shared>,
    mut mailboxes: Mailboxes,
    on_auto_delete: Box<dyn FnOnce() + Send>,
) {
    let mut control = Vec::with_capacity(QUEUE_BATCH_MAX);
    let mut data = Vec::with_capacity(QUEUE_BATCH_MAX);
    let mut auto_deleted = false;
    loop {
        let (wake_at, flow) = {
            let mut queue = shared.queue.lock();
            if queue.state != State::Running {
                auto_deleted = queue.finish(); // an inline turn ended it
                break;
            }
            (queue.wake_at(), queue.in_flow())
        };
        let more = mailboxes
            .next(&mut control, &mut data, flow, wake_at, &shared.kick)
            .await;
        if !more {
            break;
        }
        let mut queue = shared.queue.lock();
        let taken = control.len() + data.len();
        run_turn(&mut queue, control.drain(..).chain(data.drain(..)));
        queue.handle.handled(taken);
        if queue.state != State::Running {
            auto_deleted = queue.finish();
            break;
        }
    }
    {
        let mut queue = shared.queue.lock();
        queue.cancel_all_consumers();
        apply_actions(&mut queue);
        tracing::debug!(queue = %queue.handle.name(), "queue stopped");
    }
    mailboxes.abandon_all().await;
    if auto_deleted {
        on_auto_delete();
    }
}
