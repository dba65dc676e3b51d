//! A receiving link's source filters (AMQP 1.0 §3.5.1, §3.5.8; RabbitMQ's
//! `rabbit_amqp_session:parse_filters`). The `rabbitmq:stream-offset-spec` filter becomes the
//! consumer's start when the queue's type takes one. Every filter Warren does not apply is left
//! out of the source of the attach reply, which is how AMQP 1.0 tells a client that a filter
//! was not applied; echoing it would claim a filtering that never happens.

use warren_core::queue::{ConsumeStart, QueueType};
use warren_core::value::Value as CoreValue;
use warren_proto::amqp10::{condition, AmqpError, Terminus, Value};

/// The filter field of a source, counted in `Terminus::rest` (the fields after the address:
/// durable, expiry-policy, timeout, dynamic, dynamic-node-properties, distribution-mode,
/// filter, ...).
const FILTER_FIELD: usize = 6;

/// The descriptor of RabbitMQ's offset filter.
const STREAM_OFFSET_SPEC: &str = "rabbitmq:stream-offset-spec";

/// What the source's filters ask of a consumer of a queue of type `kind`: its start, and the
/// source to echo in the attach reply, holding only the filters applied.
pub(super) fn source_filters(
    source: Option<&Terminus>,
    kind: QueueType,
) -> Result<(Option<ConsumeStart>, Option<Terminus>), AmqpError> {
    let Some(source) = source else {
        return Ok((None, None));
    };
    let Some(Value::Map(filters)) = source.rest.get(FILTER_FIELD) else {
        return Ok((None, Some(source.clone())));
    };
    let mut start = None;
    let mut applied = Vec::new();
    for (key, value) in filters {
        let Value::Described(descriptor, spec) = value else {
            continue;
        };
        let is_offset_spec = descriptor.as_str() == Some(STREAM_OFFSET_SPEC);
        if !is_offset_spec || !kind.takes_consume_start() {
            continue; // not applied: left out of the reply
        }
        let Some(spec) = offset_spec(spec) else {
            continue; // a spec of no known shape is not applied, as RabbitMQ
        };
        let parsed = ConsumeStart::from_argument_now(&spec).map_err(|expected| {
            AmqpError::new(
                condition::INVALID_FIELD,
                format!("source filter {STREAM_OFFSET_SPEC}: {expected}"),
            )
        })?;
        start = Some(parsed);
        applied.push((key.clone(), value.clone()));
    }
    let mut reply = source.clone();
    reply.rest[FILTER_FIELD] = if applied.is_empty() {
        Value::Null
    } else {
        Value::Map(applied)
    };
    Ok((start, Some(reply)))
}

/// The offset spec as the consumer argument RabbitMQ turns it into: a string (`first`, `last`,
/// `next`, an interval), a non-negative integer (an offset) or a timestamp.
fn offset_spec(spec: &Value) -> Option<CoreValue> {
    match spec {
        Value::String(_) | Value::Symbol(_) => spec.as_str().map(|s| CoreValue::Str(s.to_owned())),
        // An AMQP 1.0 timestamp is in milliseconds; the argument's, as 0.9.1's, in seconds.
        Value::Timestamp(ms) => u64::try_from(*ms / 1000).ok().map(CoreValue::Timestamp),
        _ => spec
            .as_u64()
            .and_then(|offset| i64::try_from(offset).ok())
            .map(CoreValue::Int),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source_with(filters: Vec<(Value, Value)>) -> Terminus {
        let mut rest = vec![Value::Null; FILTER_FIELD];
        rest.push(Value::Map(filters));
        Terminus {
            address: Some("/queues/q".into()),
            rest,
            ..Terminus::default()
        }
    }

    fn offset_filter(spec: Value) -> (Value, Value) {
        let descriptor = Value::symbol(STREAM_OFFSET_SPEC);
        (
            Value::symbol("rabbitmq:stream-offset-spec"),
            Value::Described(Box::new(descriptor), Box::new(spec)),
        )
    }

    #[test]
    fn a_classic_queue_applies_no_filter_and_the_reply_says_so() {
        let property = (
            Value::symbol("properties"),
            Value::Described(
                Box::new(Value::symbol("amqp:properties-filter")),
                Box::new(Value::Map(Vec::new())),
            ),
        );
        let source = source_with(vec![offset_filter(Value::string("first")), property]);
        let (start, reply) = source_filters(Some(&source), QueueType::Classic).unwrap();
        assert_eq!(start, None);
        let reply = reply.expect("the source is echoed");
        assert_eq!(reply.address, source.address);
        assert_eq!(reply.rest[FILTER_FIELD], Value::Null, "no filter echoed");
    }

    #[test]
    fn offset_specs_of_every_shape_become_the_arguments_rabbitmq_makes() {
        assert_eq!(
            offset_spec(&Value::symbol("first")),
            Some(CoreValue::Str("first".into()))
        );
        assert_eq!(offset_spec(&Value::Ulong(7)), Some(CoreValue::Int(7)));
        assert_eq!(
            offset_spec(&Value::Timestamp(1_700_000_000_999)),
            Some(CoreValue::Timestamp(1_700_000_000))
        );
        assert_eq!(offset_spec(&Value::Long(-1)), None);
        assert_eq!(offset_spec(&Value::Bool(true)), None);
    }

    #[test]
    fn a_source_without_filters_is_echoed_as_it_came() {
        let source = Terminus {
            address: Some("/queues/q".into()),
            ..Terminus::default()
        };
        let (start, reply) = source_filters(Some(&source), QueueType::Classic).unwrap();
        assert_eq!((start, reply), (None, Some(source)));
    }
}
