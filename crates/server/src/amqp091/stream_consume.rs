//! What a stream queue refuses of an AMQP 0.9.1 consumer, kept apart from the consume path
//! that every queue type shares.

use warren_core::queue::{QueueHandle, QueueType};
use warren_core::{BrokerError, ErrorKind};
use warren_proto::amqp091::BasicConsume;

/// What a stream refuses of an AMQP 0.9.1 consumer (RabbitMQ's
/// `rabbit_stream_queue:consume`): it must acknowledge, with a prefetch count, and without a
/// channel-wide (global) one. Filtering is not built yet.
pub(super) fn check_stream_consumer(
    queue: &QueueHandle,
    consume: &BasicConsume,
    channel: &super::channel::Channel,
) -> Result<(), BrokerError> {
    if queue.kind() != QueueType::Stream {
        return Ok(());
    }
    let resource = queue.def().resource();
    if channel.consumer_prefetch == 0 {
        return Err(BrokerError::precondition_failed(format!(
            "consumer prefetch count is not set for stream {resource}"
        )));
    }
    if consume.no_ack {
        return Err(BrokerError::new(
            ErrorKind::NotImplemented,
            format!("automatic acknowledgement not supported by stream {resource}"),
        ));
    }
    if channel.channel_prefetch != 0 {
        return Err(BrokerError::new(
            ErrorKind::NotImplemented,
            format!("{resource} does not support global qos"),
        ));
    }
    let filter = ["x-stream-filter", "x-stream-match-unfiltered"];
    if let Some(key) = filter
        .iter()
        .find(|key| consume.arguments.get(key).is_some())
    {
        return Err(BrokerError::precondition_failed(format!(
            "invalid arg '{key}' for {resource}: stream filtering is not supported by Warren \
             yet; consume without it"
        )));
    }
    Ok(())
}
