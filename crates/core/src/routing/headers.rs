//! Headers-exchange matching on `x-match` = all | any | all-with-x | any-with-x.

use crate::error::BrokerError;
use crate::value::{Table, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchMode {
    All,
    Any,
    AllWithX,
    AnyWithX,
}

impl MatchMode {
    /// Reads `x-match` from binding arguments (`all` when absent, as RabbitMQ).
    pub fn from_arguments(arguments: &Table) -> Result<MatchMode, BrokerError> {
        match arguments.get("x-match").map(|v| v.as_str()) {
            None => Ok(MatchMode::All),
            Some(Some("all")) => Ok(MatchMode::All),
            Some(Some("any")) => Ok(MatchMode::Any),
            Some(Some("all-with-x")) => Ok(MatchMode::AllWithX),
            Some(Some("any-with-x")) => Ok(MatchMode::AnyWithX),
            Some(Some(other)) => Err(BrokerError::precondition_failed(format!(
                "Invalid x-match field value <<\"{other}\">>; expected all, any, all-with-x, \
                 or any-with-x"
            ))),
            Some(None) => {
                let value = arguments
                    .get("x-match")
                    .expect("invariant: matched Some above");
                Err(BrokerError::precondition_failed(format!(
                    "Invalid x-match field type {} (value {value}); expected longstr",
                    crate::queue::args::type_name(value)
                )))
            }
        }
    }
}

/// Whether message `headers` satisfy the binding `arguments`. A void argument only asks that
/// the header be present.
pub fn matches(mode: MatchMode, arguments: &Table, headers: Option<&Table>) -> bool {
    let with_x = matches!(mode, MatchMode::AllWithX | MatchMode::AnyWithX);
    let mut considered = arguments
        .iter()
        .filter(|(key, _)| key.as_str() != "x-match" && (with_x || !key.starts_with("x-")));
    let hit = |(key, expected): (&String, &Value)| {
        let Some(actual) = headers.and_then(|h| h.get(key)) else {
            return false;
        };
        matches!(expected, Value::Void) || actual == expected
    };
    match mode {
        MatchMode::All | MatchMode::AllWithX => considered.all(hit),
        MatchMode::Any | MatchMode::AnyWithX => considered.any(hit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pairs: &[(&str, Value)]) -> Table {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn all_and_any() {
        let args = table(&[("a", Value::Int(1)), ("b", Value::Str("x".into()))]);
        let both = table(&[("a", Value::Int(1)), ("b", Value::Str("x".into()))]);
        let one = table(&[("a", Value::Int(1))]);
        assert!(matches(MatchMode::All, &args, Some(&both)));
        assert!(!matches(MatchMode::All, &args, Some(&one)));
        assert!(matches(MatchMode::Any, &args, Some(&one)));
        assert!(!matches(MatchMode::Any, &args, None));
    }

    #[test]
    fn x_keys_only_count_with_x() {
        let args = table(&[("x-k", Value::Int(1))]);
        let headers = table(&[("x-k", Value::Int(2))]);
        assert!(
            matches(MatchMode::All, &args, Some(&headers)),
            "x- keys ignored"
        );
        assert!(!matches(MatchMode::AllWithX, &args, Some(&headers)));
        let headers = table(&[("x-k", Value::Int(1))]);
        assert!(matches(MatchMode::AnyWithX, &args, Some(&headers)));
    }
}
