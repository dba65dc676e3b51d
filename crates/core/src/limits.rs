//! Every bound on something that grows with client input, in one place (STYLE rule 1).

/// Commands waiting in one queue's mailbox; a publisher whose send would exceed it waits,
/// which stops its socket reader (credit flow back to the client).
pub const QUEUE_MAILBOX_MAX: usize = 256;
/// Commands waiting in one queue's control mailbox (credit, settle, consume, cancel).
pub const QUEUE_CONTROL_MAILBOX_MAX: usize = 1024;
/// Deliveries a queue may hand to one consumer that the consumer's connection has not yet
/// written to its socket (credit flow from queue to connection, RabbitMQ's
/// `credit_flow_default_credit` role). Consumers with a prefetch are also bound by it.
pub const CONSUMER_FLOW_CREDIT_MAX: u32 = 8_000;
/// Bytes of deliveries in flight to one such consumer that its credit window aims at: large
/// messages get a smaller window (never below `CONSUMER_FLOW_CREDIT_MIN`).
pub const CONSUMER_FLOW_BYTES_MAX: u32 = 4 * 1024 * 1024;
pub const CONSUMER_FLOW_CREDIT_MIN: u32 = 16;
/// Commands one queue handles before it dispatches and yields.
pub const QUEUE_BATCH_MAX: usize = 64;
/// Published messages one queue takes in a turn before it dispatches (a command that
/// brings more is still taken whole): keeps turns short under a flood of publishes.
pub const QUEUE_TURN_PUBLISHES_MAX: usize = 512;
/// The largest publish batch a publisher runs as a turn of an idle queue on its own task
/// (`QueueHandle::publish_serving`). A small batch costs less there than waking the queue's
/// task; a larger one goes to that task, which then works in parallel with the publisher.
/// At 64, a confirm window of 100 split over two queues runs inline (at 32 it woke both
/// queue tasks, and the second woke the other worker: about a quarter more broker CPU per
/// message at two consistent-hash queues), while one queue's whole window still goes to it.
pub const INLINE_PUBLISH_MAX: usize = 64;
/// Deliveries dispatched to one consumer in a single pass before moving to the next.
pub const DISPATCH_BATCH_MAX: u32 = 256;
/// Length of queue and exchange names (AMQP short strings).
pub const NAME_BYTES_MAX: usize = 255;
/// Ready messages above which a queue whose consumers take deliveries as fast as the broker
/// writes them stops taking publishes until half of them are delivered (RabbitMQ's `flow`
/// state): its publishers wait, so a fast publisher cannot starve its consumers of CPU. A queue
/// without such consumers, or whose consumers stopped taking deliveries, never does this.
pub const QUEUE_FLOW_BACKLOG_MAX: usize = 8_192;
/// How long a queue in flow waits for a delivery before deciding its consumers have stalled
/// and taking publishes again.
pub const QUEUE_FLOW_STALL_MS: u64 = 5_000;
/// Dead letters one queue holds while their target queues' mailboxes are full; beyond it new
/// dead letters are dropped (see `queue::forward`).
pub const DEAD_LETTER_PENDING_MAX: usize = 65_536;
/// Requests the metadata writer takes into one batch (one fsync per vhost for all of them).
pub const METADATA_BATCH_REQUESTS_MAX: usize = 4_096;
/// A vhost's metadata journal may grow to twice its snapshot, and to at least this, before
/// the next batch writes a new snapshot instead.
pub const METADATA_JOURNAL_BYTES_MIN: u64 = 4 * 1024 * 1024;
/// Definitions an import (POST /api/definitions) has on their way to disk at once.
pub const METADATA_IMPORT_WINDOW_MAX: usize = 512;
