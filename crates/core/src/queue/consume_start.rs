//! Where a consumer starts reading a queue that keeps its messages after delivery (a stream):
//! RabbitMQ's offset specs. AMQP 0.9.1 gives them as the `x-stream-offset` consumer argument;
//! AMQP 1.0 as the `rabbitmq:stream-offset-spec` source filter, which the connection turns
//! into the same value, as RabbitMQ does (`rabbit_amqp_session:parse_filters`).
//!
//! Whether a queue takes a start is its type's rule: the type lists `x-stream-offset` among
//! its consumer arguments (`Capabilities::consumer_arguments`). A classic queue only ever
//! hands out its head, so it refuses one (`QueueType::check_consume`).

use crate::value::Value;

/// The consumer argument that carries a start (AMQP 0.9.1).
pub const STREAM_OFFSET_ARGUMENT: &str = "x-stream-offset";

/// A consumer's start (osiris's `offset_spec()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeStart {
    /// The oldest message the queue still has.
    First,
    /// The last chunk written (a stream's last batch of messages).
    Last,
    /// Only what is published from now on (RabbitMQ's default).
    Next,
    /// This offset, or the first one kept when it has gone.
    Offset(u64),
    /// The first message stored at or after this time, milliseconds since the epoch.
    Timestamp { ms: i64 },
}

impl ConsumeStart {
    /// RabbitMQ's `rabbit_stream_queue:parse_offset_arg`: `first`, `last`, `next`, an offset,
    /// a timestamp (AMQP 0.9.1 timestamps are seconds), or an interval back from `now_ms`
    /// such as `1h` (units `Y`, `M`, `D`, `h`, `m`, `s`, as `x-max-age`) back from now. `Err`
    /// says what was expected, for the caller's 406 text.
    pub fn from_argument_now(value: &Value) -> Result<ConsumeStart, String> {
        let now_ms = i64::try_from(super::expiry::now_ms()).unwrap_or(i64::MAX);
        ConsumeStart::from_argument(value, now_ms)
    }

    /// `from_argument_now` at a given time.
    pub fn from_argument(value: &Value, now_ms: i64) -> Result<ConsumeStart, String> {
        let expected = "expected first, last, next, an offset, a timestamp or an interval \
                        such as 1h";
        match value {
            Value::Int(offset) => u64::try_from(*offset)
                .map(ConsumeStart::Offset)
                .map_err(|_| format!("{expected}, got the negative offset {offset}")),
            Value::Timestamp(seconds) => i64::try_from(seconds.saturating_mul(1000))
                .map(|ms| ConsumeStart::Timestamp { ms })
                .map_err(|_| format!("{expected}, got the timestamp {seconds}")),
            _ => match value.as_str() {
                Some("first") => Ok(ConsumeStart::First),
                Some("last") => Ok(ConsumeStart::Last),
                Some("next") => Ok(ConsumeStart::Next),
                Some(text) => match age_ms(text) {
                    Some(age) => Ok(ConsumeStart::Timestamp {
                        ms: now_ms.saturating_sub(i64::try_from(age).unwrap_or(i64::MAX)),
                    }),
                    None => Err(format!("{expected}, got \"{text}\"")),
                },
                None => Err(format!("{expected}, got {}", super::args::type_name(value))),
            },
        }
    }
}

/// An age such as `7D` or `1h` in milliseconds (RabbitMQ's `check_max_age`: a positive
/// integer and one of the units `Y` (365 days), `M` (30 days), `D`, `h`, `m`, `s`).
pub fn age_ms(text: &str) -> Option<u64> {
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (count, unit) = text.split_at(digits);
    let count: u64 = count.parse().ok().filter(|&n| n > 0)?;
    let unit_ms: u64 = match unit {
        "Y" => 365 * 24 * 3_600_000,
        "M" => 30 * 24 * 3_600_000,
        "D" => 24 * 3_600_000,
        "h" => 3_600_000,
        "m" => 60_000,
        "s" => 1_000,
        _ => return None,
    };
    count.checked_mul(unit_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn start(value: Value) -> Result<ConsumeStart, String> {
        ConsumeStart::from_argument(&value, NOW)
    }

    #[test]
    fn every_offset_spec_rabbitmq_takes() {
        assert_eq!(start(Value::Str("first".into())), Ok(ConsumeStart::First));
        assert_eq!(
            start(Value::Bytes(b"last".to_vec())),
            Ok(ConsumeStart::Last)
        );
        assert_eq!(start(Value::Str("next".into())), Ok(ConsumeStart::Next));
        assert_eq!(start(Value::Int(42)), Ok(ConsumeStart::Offset(42)));
        assert_eq!(
            start(Value::Timestamp(1_700_000_000)),
            Ok(ConsumeStart::Timestamp {
                ms: 1_700_000_000_000
            })
        );
        assert_eq!(
            start(Value::Str("1h".into())),
            Ok(ConsumeStart::Timestamp {
                ms: NOW - 3_600_000
            })
        );
        assert_eq!(
            start(Value::Str("2D".into())),
            Ok(ConsumeStart::Timestamp {
                ms: NOW - 2 * 86_400_000
            })
        );
    }

    #[test]
    fn what_is_not_an_offset_spec_is_refused_with_what_was_expected() {
        for bad in [
            Value::Str("middle".into()),
            Value::Str("0h".into()),
            Value::Str("1w".into()),
            Value::Str("h".into()),
            Value::Int(-1),
            Value::Bool(true),
            Value::Void,
        ] {
            let refused = start(bad.clone()).expect_err("refused");
            assert!(
                refused.starts_with("expected first, last, next"),
                "{bad:?}: {refused}"
            );
        }
    }

    #[test]
    fn ages_are_rabbitmqs_units() {
        assert_eq!(age_ms("1Y"), Some(365 * 86_400_000));
        assert_eq!(age_ms("1M"), Some(30 * 86_400_000));
        assert_eq!(age_ms("90m"), Some(90 * 60_000));
        assert_eq!(age_ms("10s"), Some(10_000));
        assert_eq!(age_ms(""), None);
        assert_eq!(age_ms("10"), None);
        assert_eq!(age_ms("99999999999999999999s"), None);
    }
}
