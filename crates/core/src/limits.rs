//! Every bound on something that grows with client input, in one place (STYLE rule 1).

/// Commands waiting in one queue's mailbox; a publisher whose send would exceed it waits,
/// which stops its socket reader (credit flow back to the client).
pub const QUEUE_MAILBOX_MAX: usize = 256;
/// Deliveries a queue may hand to one consumer that the consumer's connection has not yet
/// written to its socket (credit flow from queue to connection, RabbitMQ's
/// `credit_flow_default_credit` role). Consumers with a prefetch are also bound by it.
pub const CONSUMER_FLOW_CREDIT_MAX: u32 = 2_000;
/// Commands one queue handles before it dispatches and yields.
pub const QUEUE_BATCH_MAX: usize = 64;
/// Deliveries dispatched to one consumer in a single pass before moving to the next.
pub const DISPATCH_BATCH_MAX: u32 = 256;
/// Length of queue and exchange names (AMQP short strings).
pub const NAME_BYTES_MAX: usize = 255;
