//! The classic queue's state machine against a model, with restarts (RabbitMQ's
//! `classic_queue_prop_SUITE`): random commands run as turns of a durable `ClassicQueue` on a
//! real message store in a temporary directory, with no task, socket or mailbox, and every
//! answer is compared with what the model expects.
//!
//! The model keeps the ready messages in queue order, the unacked ones, and the `uncertain`
//! set: persistent messages published without waiting for their confirm. At a restart those
//! may or may not come back; every confirmed, unacked persistent message must, in order and
//! flagged redelivered when a consumer may have seen it. Transient messages never do.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;
use tokio::sync::{mpsc, oneshot};
use warren_store::{Recovered, Store, StoreConfig};

use super::{ClassicQueue, Storage};
use crate::confirm::ConfirmWaits;
use crate::consumer::{Consumer, Event, Outbox};
use crate::message::Message;
use crate::queue::{QueueArgs, QueueCmd, QueueDef, QueueHandle, QueueType, SettleOp};
use crate::value::Table;

#[derive(Debug, Clone)]
enum Op {
    /// Publishes `count` messages; waits for their confirm when `confirmed`.
    Publish {
        persistent: bool,
        count: usize,
        confirmed: bool,
    },
    /// basic.get with manual ack.
    Get,
    /// Gives the consumer credit for this many deliveries.
    Credit(u32),
    /// Settles the unacked message at this index (modulo their number).
    Settle(usize, SettleOp),
    Purge,
    /// Stops the queue and opens the store again; `clean` closes the store first.
    Restart {
        clean: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let settle = prop_oneof![
        Just(SettleOp::Ack),
        Just(SettleOp::Requeue),
        Just(SettleOp::Discard)
    ];
    prop_oneof![
        6 => (any::<bool>(), 1..4usize, any::<bool>()).prop_map(|(persistent, count, confirmed)| {
            Op::Publish { persistent, count, confirmed }
        }),
        3 => Just(Op::Get),
        2 => (0..4u32).prop_map(Op::Credit),
        5 => (any::<usize>(), settle).prop_map(|(i, op)| Op::Settle(i, op)),
        1 => Just(Op::Purge),
        1 => any::<bool>().prop_map(|clean| Op::Restart { clean }),
    ]
}

/// A message as the model knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Known {
    id: u64,
    persistent: bool,
    redelivered: bool,
}

#[derive(Default)]
struct Model {
    /// Ready messages by queue position (the id grows with publish order, as the seq does).
    ready: BTreeMap<u64, Known>,
    /// Unacked messages: the queue's seq and the message.
    unacked: Vec<(u64, Known)>,
    /// Persistent messages whose confirm was not awaited (see the module doc).
    uncertain: BTreeSet<u64>,
    next_id: u64,
}

/// The queue under test and what it needs around it.
struct Harness {
    dir: tempfile::TempDir,
    store: Store,
    queue: ClassicQueue,
    publisher: Arc<Outbox>,
    confirms: ConfirmWaits,
    consumer: Arc<Outbox>,
    memory_budget: usize,
    /// The consumer does not ack: what it is handed is done with at once (and a message
    /// delivered in the turn it was published in is never written).
    no_ack: bool,
}

fn def() -> QueueDef {
    QueueDef {
        name: Arc::from("prop"),
        vhost: Arc::from("/"),
        durable: true,
        exclusive_owner: None,
        auto_delete: false,
        arguments: Table::new(),
    }
}

fn open_store(dir: &std::path::Path) -> (Store, Recovered) {
    let config = StoreConfig {
        dir: dir.join("store"),
        segment_bytes: 4096, // tiny: segments roll over and are reclaimed in every run
    };
    Store::open(config).expect("open the message store")
}

impl Harness {
    fn new(memory_budget: usize, no_ack: bool) -> Harness {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (store, recovered) = open_store(dir.path());
        let publisher = Outbox::new();
        let consumer = Outbox::new();
        let queue = start(&store, recovered, memory_budget, &consumer, no_ack);
        Harness {
            dir,
            store,
            queue,
            publisher,
            confirms: ConfirmWaits::default(),
            consumer,
            memory_budget,
            no_ack,
        }
    }

    fn restart(&mut self, clean: bool) {
        let (_, _) = (self.take_deliveries(), self.take_settled());
        if clean {
            self.store.close();
        }
        let (store, recovered) = open_store(self.dir.path());
        self.consumer = Outbox::new();
        self.queue = start(
            &store,
            recovered,
            self.memory_budget,
            &self.consumer,
            self.no_ack,
        );
        self.store = store;
    }

    /// One turn of the state machine, its actions carried out as the driver does.
    fn turn(&mut self, cmd: QueueCmd) {
        super::run_turn(&mut self.queue, [cmd]);
    }

    /// (seq, body id, redelivered) of the deliveries waiting for the consumer.
    fn take_deliveries(&self) -> Vec<(u64, u64, bool)> {
        let mut events = Vec::new();
        self.consumer.take_all(&mut events);
        events
            .into_iter()
            .filter_map(|e| match e {
                Event::Deliver(d) => Some((d.seq, body_id(&d.message), d.redelivered)),
                _ => None,
            })
            .collect()
    }

    /// Tickets completed from the settlements waiting in the publisher's outbox.
    fn take_settled(&mut self) -> Vec<(u64, bool)> {
        let mut events = Vec::new();
        self.publisher.take_all(&mut events);
        events
            .into_iter()
            .filter_map(|e| match e {
                Event::Settled { ticket, ok } => {
                    self.confirms.settled(ticket, ok).map(|ok| (ticket, ok))
                }
                _ => None,
            })
            .collect()
    }
}

fn start(
    store: &Store,
    mut recovered: Recovered,
    memory_budget: usize,
    consumer: &Arc<Outbox>,
    no_ack: bool,
) -> ClassicQueue {
    let def = def();
    let id = warren_store::queue_id(&def.vhost, &def.name);
    let (data_tx, _) = mpsc::channel(1);
    let (control_tx, _) = mpsc::channel(1);
    let handle = QueueHandle::new(
        QueueType::Classic,
        def,
        QueueArgs::default(),
        data_tx,
        control_tx,
        1_000,
    );
    let mut queue = ClassicQueue::new(handle);
    let storage = Storage {
        store: store.clone(),
        memory_budget,
    };
    queue.attach_store(storage, recovered.take(id));
    let (reply, mut answer) = oneshot::channel();
    let consumer = Consumer {
        id: 1,
        connection: 1,
        channel: 1,
        tag: Arc::from("c"),
        no_ack,
        exclusive: false,
        priority: 0,
        credit: 0,
        credit_on_write: false,
        start: None,
        outbox: consumer.clone(),
    };
    super::run_turn(&mut queue, [QueueCmd::Consume { consumer, reply }]);
    assert_eq!(answer.try_recv().map(|r| r.is_ok()), Ok(true));
    queue
}

fn message(id: u64, persistent: bool) -> Arc<Message> {
    let mut message = Message::new(
        Bytes::new(),
        Bytes::from_static(b"prop"),
        Bytes::from_static(&[0, 0]),
        Bytes::from(id.to_string()),
    );
    message.persistent = persistent;
    Arc::new(message)
}

fn body_id(message: &Message) -> u64 {
    std::str::from_utf8(&message.body.to_vec())
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("invariant: test bodies are ids")
}

/// Runs `ops` on a fresh queue and its model; `Err` names the first disagreement.
fn run(ops: &[Op], memory_budget: usize, no_ack: bool) -> Result<(), TestCaseError> {
    let mut h = Harness::new(memory_budget, no_ack);
    let mut model = Model::default();
    for op in ops {
        match op {
            Op::Publish {
                persistent,
                count,
                confirmed,
            } => publish(&mut h, &mut model, *persistent, *count, *confirmed)?,
            Op::Get => get(&mut h, &mut model)?,
            Op::Credit(credit) => {
                h.turn(QueueCmd::Credit {
                    consumer: 1,
                    credit: *credit,
                });
                take_delivered(&mut h, &mut model, *credit as usize)?;
            }
            Op::Settle(index, op) => settle(&mut h, &mut model, *index, *op),
            Op::Purge => {
                let (reply, mut answer) = oneshot::channel();
                h.turn(QueueCmd::Purge { reply });
                let purged = answer.try_recv().expect("purge answers in its turn");
                prop_assert_eq!(purged as usize, model.ready.len(), "purge count");
                model.ready.clear();
            }
            Op::Restart { clean } => restart(&mut h, &mut model, *clean)?,
        }
        // Whatever credit the consumer still has is used as soon as something is ready.
        take_delivered(&mut h, &mut model, usize::MAX)?;
    }
    restart(&mut h, &mut model, false)
}

fn publish(
    h: &mut Harness,
    model: &mut Model,
    persistent: bool,
    count: usize,
    confirmed: bool,
) -> Result<(), TestCaseError> {
    let ticket = h.confirms.open(&h.publisher, None);
    h.confirms.hold(&ticket);
    let mut messages = Vec::new();
    for _ in 0..count {
        model.next_id += 1;
        let known = Known {
            id: model.next_id,
            persistent,
            redelivered: false,
        };
        messages.push(message(known.id, persistent));
        model.ready.insert(known.id, known);
        if persistent && !confirmed {
            model.uncertain.insert(known.id);
        }
    }
    let id = ticket.id();
    h.turn(QueueCmd::Publish {
        messages,
        confirm: Some(ticket.clone()),
        tags: Vec::new(),
        credit: None,
    });
    prop_assert_eq!(h.confirms.release(ticket), None, "held by the queue");
    if confirmed {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let settled = h.take_settled();
            if let Some(&(_, ok)) = settled.iter().find(|(t, _)| *t == id) {
                prop_assert!(ok, "the store confirms what it wrote");
                break;
            }
            prop_assert!(Instant::now() < deadline, "no confirm within 5 s");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok(())
}

fn get(h: &mut Harness, model: &mut Model) -> Result<(), TestCaseError> {
    let (reply, mut answer) = oneshot::channel();
    h.turn(QueueCmd::Get {
        channel: 1,
        no_ack: false,
        reply,
    });
    let got = answer.try_recv().expect("get answers in its turn");
    let expected = model.ready.pop_first();
    match (got, expected) {
        (None, None) => Ok(()),
        (Some(got), Some((_, known))) => {
            let body = body_id(&got.delivery.message);
            prop_assert_eq!(body, known.id, "get takes the head");
            prop_assert_eq!(
                got.delivery.redelivered,
                known.redelivered,
                "redelivered flag"
            );
            prop_assert_eq!(got.remaining as usize, model.ready.len(), "remaining");
            model.unacked.push((got.delivery.seq, known));
            Ok(())
        }
        (got, expected) => Err(TestCaseError::fail(format!(
            "get answered {:?}, the model expected {expected:?}",
            got.map(|g| body_id(&g.delivery.message))
        ))),
    }
}

/// Checks that the consumer got (at most `credit`) ready messages from the head, in order.
fn take_delivered(h: &mut Harness, model: &mut Model, credit: usize) -> Result<(), TestCaseError> {
    let delivered = h.take_deliveries();
    prop_assert!(delivered.len() <= credit, "more deliveries than credit");
    for (seq, id, redelivered) in delivered {
        let expected = model.ready.pop_first();
        prop_assert_eq!(expected.map(|(_, k)| k.id), Some(id), "delivered in order");
        let known = expected.expect("checked").1;
        prop_assert_eq!(redelivered, known.redelivered, "redelivered flag");
        if h.no_ack {
            model.uncertain.remove(&known.id); // done with: it must never come back
        } else {
            model.unacked.push((seq, known));
        }
    }
    Ok(())
}

fn settle(h: &mut Harness, model: &mut Model, index: usize, op: SettleOp) {
    if model.unacked.is_empty() {
        return;
    }
    let (seq, mut known) = model.unacked.remove(index % model.unacked.len());
    h.turn(QueueCmd::Settle {
        op,
        seqs: vec![seq],
    });
    if op == SettleOp::Requeue {
        known.redelivered = true;
        model.ready.insert(known.id, known); // back to its place, flagged
    } else {
        model.uncertain.remove(&known.id);
    }
}

/// Restarts and checks what came back: every confirmed, unacked persistent message, in
/// order, redelivered when it was delivered before; uncertain ones may be there too.
fn restart(h: &mut Harness, model: &mut Model, clean: bool) -> Result<(), TestCaseError> {
    for (_, mut known) in model.unacked.drain(..) {
        known.redelivered = true;
        model.ready.insert(known.id, known);
    }
    model.ready.retain(|_, k| k.persistent);
    h.restart(clean);
    let mut back = BTreeMap::new();
    loop {
        let (reply, mut answer) = oneshot::channel();
        h.turn(QueueCmd::Get {
            channel: 1,
            no_ack: false,
            reply,
        });
        let Some(got) = answer.try_recv().expect("get answers in its turn") else {
            break;
        };
        let id = body_id(&got.delivery.message);
        back.insert(id, (got.delivery.seq, got.delivery.redelivered));
    }
    let expected: BTreeSet<u64> = model
        .ready
        .keys()
        .filter(|id| !model.uncertain.contains(id))
        .copied()
        .collect();
    for id in &expected {
        prop_assert!(back.contains_key(id), "confirmed message {} lost", id);
    }
    let mut seqs = Vec::new();
    for (id, (seq, redelivered)) in &back {
        let known = model.ready.get(id);
        prop_assert!(known.is_some(), "message {} came back unexpectedly", id);
        // A message delivered before the restart must come back flagged; an uncertain one
        // may have been seen by nobody and still be flagged (its delivered mark is coarse).
        if known.is_some_and(|k| k.redelivered) {
            prop_assert!(*redelivered, "message {} lost its redelivered flag", id);
        }
        seqs.push(*seq);
    }
    prop_assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "recovered out of order"
    );
    // The gets above took everything: requeue it all so the model and queue agree again.
    let gotten: Vec<u64> = back.values().map(|(seq, _)| *seq).collect();
    h.turn(QueueCmd::Settle {
        op: SettleOp::Requeue,
        seqs: gotten,
    });
    model.ready = back
        .keys()
        .map(|&id| {
            let persistent = true;
            (
                id,
                Known {
                    id,
                    persistent,
                    redelivered: true,
                },
            )
        })
        .collect();
    model.uncertain.clear();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn classic_queue_agrees_with_its_model(
        ops in proptest::collection::vec(op(), 1..60),
        paged in any::<bool>(),
        no_ack in any::<bool>(),
    ) {
        // A budget of 0 pages every message out to the store (lazy), exercising reads back.
        run(&ops, if paged { 0 } else { 1 << 20 }, no_ack)?;
    }
}

/// A persistent message handed to a no-ack consumer in the turn it was published in is done
/// with before the turn's records go out: it is never written, and its confirm still comes.
/// One that waits in the queue is written.
#[test]
fn a_message_delivered_no_ack_in_its_publish_turn_is_never_written() {
    let mut h = Harness::new(1 << 20, true);
    let mut model = Model::default();
    h.turn(QueueCmd::Credit {
        consumer: 1,
        credit: 3,
    });
    let before = h.store.stats().bytes_written;
    publish(&mut h, &mut model, true, 3, true).expect("confirmed");
    take_delivered(&mut h, &mut model, 3).expect("delivered in order");
    assert!(model.ready.is_empty(), "all three went to the consumer");
    assert_eq!(h.store.stats().bytes_written, before, "nothing was written");

    publish(&mut h, &mut model, true, 2, true).expect("confirmed");
    assert_eq!(model.ready.len(), 2, "no credit left: both wait");
    assert!(
        h.store.stats().bytes_written > before,
        "waiting persistent messages are written"
    );
    restart(&mut h, &mut model, false).expect("the two waiting ones come back, no others");
    assert_eq!(model.ready.len(), 2);
}
