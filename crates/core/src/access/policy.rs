//! Policies and operator policies: a regex over queue or exchange names and a definition whose
//! keys act as `x-` arguments of the matching entities. At most one policy of each kind
//! applies (the highest priority); declared arguments win over a policy, and an operator
//! policy caps both, with the precedence RabbitMQ documents (policies.md).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

use crate::value::{from_json, Table, Value};

/// Which entities a policy applies to (`apply-to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyTo {
    #[default]
    All,
    Queues,
    Exchanges,
    ClassicQueues,
    QuorumQueues,
    Streams,
}

impl ApplyTo {
    fn covers(self, entity: Entity) -> bool {
        matches!(
            (self, entity),
            (ApplyTo::All, _)
                | (ApplyTo::Queues | ApplyTo::ClassicQueues, Entity::Queue)
                | (ApplyTo::Exchanges, Entity::Exchange)
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entity {
    Queue,
    Exchange,
}

/// A policy as RabbitMQ's definitions and HTTP API write it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyRecord {
    pub vhost: String,
    pub name: String,
    pub pattern: String,
    #[serde(rename = "apply-to", default)]
    pub apply_to: ApplyTo,
    #[serde(default)]
    pub priority: i64,
    pub definition: Map<String, Json>,
}

/// Keys a (user) policy may set. RabbitMQ's plugins add more; those of queue types and
/// plugins Warren does not have yet are accepted and kept, but have no effect.
const POLICY_KEYS: &[&str] = &[
    "alternate-exchange",
    "dead-letter-exchange",
    "dead-letter-routing-key",
    "dead-letter-strategy",
    "delivery-limit",
    "expires",
    "federation-upstream",
    "federation-upstream-set",
    "ha-mode",
    "ha-params",
    "ha-promote-on-failure",
    "ha-promote-on-shutdown",
    "ha-sync-batch-size",
    "ha-sync-mode",
    "initial-cluster-size",
    "max-age",
    "max-length",
    "max-length-bytes",
    "max-segment-size-bytes",
    "message-ttl",
    "overflow",
    "queue-leader-locator",
    "queue-master-locator",
    "queue-mode",
    "queue-version",
    "stream-max-segment-size-bytes",
];

/// Keys an operator policy may set (policies.md, "Operator Policies").
const OPERATOR_POLICY_KEYS: &[&str] = &[
    "delivery-limit",
    "expires",
    "max-in-memory-bytes",
    "max-in-memory-length",
    "max-length",
    "max-length-bytes",
    "message-ttl",
    "overflow",
    "queue-version",
    "target-group-size",
];

/// Keys whose operator-policy value caps the effective one (the lesser wins).
const CAPPED_KEYS: &[&str] = &["expires", "max-length", "max-length-bytes", "message-ttl"];

impl PolicyRecord {
    /// Checks the pattern, the keys and the value types, with RabbitMQ's wording.
    pub fn validate(&self, operator: bool) -> Result<regex::Regex, String> {
        let pattern = regex::Regex::new(&self.pattern)
            .map_err(|error| format!("invalid pattern '{}': {error}", self.pattern))?;
        if self.definition.is_empty() {
            return Err("Validation failed\n\nno policy definition given".into());
        }
        let allowed = if operator {
            OPERATOR_POLICY_KEYS
        } else {
            POLICY_KEYS
        };
        let unknown: Vec<&str> = self
            .definition
            .keys()
            .map(String::as_str)
            .filter(|key| !allowed.contains(key))
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "Validation failed\n\n{unknown:?} are not recognised policy settings"
            ));
        }
        for (key, value) in &self.definition {
            validate_value(key, value)?;
        }
        Ok(pattern)
    }
}

fn validate_value(key: &str, value: &Json) -> Result<(), String> {
    let fail = |what: &str| Err(format!("Validation failed\n\n{key} {what} (got {value})"));
    match key {
        "message-ttl" | "max-length" | "max-length-bytes" | "delivery-limit" => {
            match value.as_i64() {
                Some(n) if n >= 0 => Ok(()),
                _ => fail("must be a non-negative integer"),
            }
        }
        "expires" => match value.as_i64() {
            Some(n) if n >= 1 => Ok(()),
            _ => fail("must be a positive integer"),
        },
        "overflow" => match value.as_str() {
            Some("drop-head" | "reject-publish" | "reject-publish-dlx") => Ok(()),
            _ => fail("must be one of drop-head, reject-publish, reject-publish-dlx"),
        },
        "queue-mode" => match value.as_str() {
            Some("default" | "lazy") => Ok(()),
            _ => fail("must be default or lazy"),
        },
        "alternate-exchange" | "dead-letter-exchange" | "dead-letter-routing-key" => {
            match value.as_str() {
                Some(_) => Ok(()),
                None => fail("must be a string"),
            }
        }
        _ => Ok(()),
    }
}

#[derive(Debug, Clone)]
struct Compiled {
    record: PolicyRecord,
    pattern: regex::Regex,
}

/// The policies of one vhost, ordered by priority (highest first, then by name, so equal
/// priorities resolve the same way every time).
#[derive(Debug, Clone, Default)]
pub struct PolicySet {
    policies: Vec<Compiled>,
    operator: Vec<Compiled>,
}

/// What the policies make of one queue: its effective arguments and which policies apply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Effective {
    pub arguments: Table,
    pub policy: Option<Arc<str>>,
    pub operator_policy: Option<Arc<str>>,
}

impl PolicySet {
    /// Builds the set from validated records (invalid ones were refused when set).
    pub fn new(policies: &[PolicyRecord], operator: &[PolicyRecord]) -> PolicySet {
        let compile = |records: &[PolicyRecord], operator: bool| {
            let mut compiled: Vec<Compiled> = records
                .iter()
                .filter_map(|record| {
                    let pattern = record.validate(operator).ok()?;
                    Some(Compiled {
                        record: record.clone(),
                        pattern,
                    })
                })
                .collect();
            compiled.sort_by(|a, b| {
                b.record
                    .priority
                    .cmp(&a.record.priority)
                    .then_with(|| a.record.name.cmp(&b.record.name))
            });
            compiled
        };
        PolicySet {
            policies: compile(policies, false),
            operator: compile(operator, true),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty() && self.operator.is_empty()
    }

    fn first<'a>(list: &'a [Compiled], name: &str, entity: Entity) -> Option<&'a PolicyRecord> {
        list.iter()
            .find(|c| c.record.apply_to.covers(entity) && c.pattern.is_match(name))
            .map(|c| &c.record)
    }

    /// The policy and operator policy that apply to `name`.
    pub fn matching(
        &self,
        name: &str,
        entity: Entity,
    ) -> (Option<&PolicyRecord>, Option<&PolicyRecord>) {
        (
            Self::first(&self.policies, name, entity),
            Self::first(&self.operator, name, entity),
        )
    }

    /// A queue's effective `x-` arguments: declared ones, then the policy's for keys not
    /// declared, then the operator policy's (the lesser value for limits and TTLs, its own
    /// value for `overflow`).
    pub fn queue_arguments(&self, name: &str, declared: &Table) -> Effective {
        let (policy, operator) = self.matching(name, Entity::Queue);
        let mut arguments = declared.clone();
        if let Some(policy) = policy {
            for (key, value) in &policy.definition {
                arguments
                    .entry(format!("x-{key}"))
                    .or_insert_with(|| from_json(value));
            }
        }
        if let Some(operator) = operator {
            for (key, value) in &operator.definition {
                let x_key = format!("x-{key}");
                let value = from_json(value);
                let capped = CAPPED_KEYS.contains(&key.as_str());
                match arguments.get(&x_key).and_then(Value::as_i64) {
                    Some(current) if capped && value.as_i64().is_some_and(|v| v >= current) => {}
                    _ => {
                        arguments.insert(x_key, value);
                    }
                }
            }
        }
        Effective {
            arguments,
            policy: policy.map(|p| Arc::from(p.name.as_str())),
            operator_policy: operator.map(|p| Arc::from(p.name.as_str())),
        }
    }

    /// The alternate exchange a policy gives an exchange that declares none.
    pub fn alternate_exchange(&self, exchange: &str) -> Option<String> {
        let policy = Self::first(&self.policies, exchange, Entity::Exchange)?;
        policy
            .definition
            .get("alternate-exchange")?
            .as_str()
            .map(str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(name: &str, pattern: &str, priority: i64, definition: Json) -> PolicyRecord {
        PolicyRecord {
            vhost: "/".into(),
            name: name.into(),
            pattern: pattern.into(),
            apply_to: ApplyTo::Queues,
            priority,
            definition: definition.as_object().unwrap().clone(),
        }
    }

    #[test]
    fn highest_priority_wins_and_declared_arguments_win_over_policy() {
        let set = PolicySet::new(
            &[
                policy("low", ".*", 0, json!({"message-ttl": 10, "max-length": 5})),
                policy("high", "^t\\.", 5, json!({"message-ttl": 20})),
            ],
            &[],
        );
        let e = set.queue_arguments("t.q", &Table::new());
        assert_eq!(e.policy.as_deref(), Some("high"));
        assert_eq!(e.arguments.get("x-message-ttl"), Some(&Value::Int(20)));
        assert_eq!(
            e.arguments.get("x-max-length"),
            None,
            "only one policy applies"
        );
        let declared = Table::from([("x-message-ttl".to_string(), Value::Int(7))]);
        let e = set.queue_arguments("other", &declared);
        assert_eq!(e.arguments.get("x-message-ttl"), Some(&Value::Int(7)));
        assert_eq!(e.arguments.get("x-max-length"), Some(&Value::Int(5)));
    }

    #[test]
    fn operator_policy_caps_limits_and_overrides_overflow() {
        let set = PolicySet::new(
            &[policy("user", ".*", 0, json!({"max-length": 100}))],
            &[policy(
                "ops",
                ".*",
                0,
                json!({"max-length": 50, "message-ttl": 1000, "overflow": "reject-publish"}),
            )],
        );
        let declared = Table::from([
            ("x-message-ttl".to_string(), Value::Int(500)),
            ("x-overflow".to_string(), Value::Str("drop-head".into())),
        ]);
        let e = set.queue_arguments("q", &declared);
        assert_eq!(e.arguments.get("x-max-length"), Some(&Value::Int(50)));
        assert_eq!(e.arguments.get("x-message-ttl"), Some(&Value::Int(500)));
        assert_eq!(
            e.arguments.get("x-overflow"),
            Some(&Value::Str("reject-publish".into()))
        );
        assert_eq!(e.operator_policy.as_deref(), Some("ops"));
    }

    #[test]
    fn validation_names_the_problem() {
        let bad = policy("p", ".*", 0, json!({"colour": "red"}));
        assert!(bad.validate(false).unwrap_err().contains("colour"));
        let bad = policy("p", ".*", 0, json!({"message-ttl": "soon"}));
        assert!(bad.validate(false).unwrap_err().contains("message-ttl"));
        let bad = policy("p", ".*", 0, json!({"dead-letter-exchange": "dlx"}));
        assert!(bad
            .validate(true)
            .unwrap_err()
            .contains("dead-letter-exchange"));
        let bad = policy("p", "(", 0, json!({"max-length": 1}));
        assert!(bad.validate(false).unwrap_err().contains("invalid pattern"));
    }

    #[test]
    fn exchanges_take_alternate_exchange_from_policy() {
        let mut p = policy(
            "ae",
            "^orders$",
            0,
            json!({"alternate-exchange": "unrouted"}),
        );
        p.apply_to = ApplyTo::Exchanges;
        let set = PolicySet::new(&[p], &[]);
        assert_eq!(
            set.alternate_exchange("orders").as_deref(),
            Some("unrouted")
        );
        assert_eq!(set.alternate_exchange("orders2"), None);
        assert!(set.matching("orders", Entity::Queue).0.is_none());
    }
}
