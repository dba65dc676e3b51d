//! What one user may do in one vhost: configure/write/read regexes over resource names and
//! topic permissions over routing keys, compiled once per change of the definitions and
//! checked by protocol connections on every operation RabbitMQ checks.

use std::sync::Arc;

use crate::error::{resource_name, BrokerError};

/// A permission regex. `.*` and `""` (RabbitMQ's synonym for `^$`) skip the regex engine.
#[derive(Debug, Clone)]
pub enum Pattern {
    Any,
    Nothing,
    Regex(regex::Regex),
}

impl Pattern {
    /// Compiles `source` as RabbitMQ does: an unanchored match, `""` matching no name.
    pub fn compile(source: &str) -> Result<Pattern, String> {
        match source {
            ".*" | "^.*" | "^.*$" => Ok(Pattern::Any),
            "" => Ok(Pattern::Nothing),
            _ => regex::Regex::new(source)
                .map(Pattern::Regex)
                .map_err(|error| format!("invalid regular expression '{source}': {error}")),
        }
    }

    pub fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Nothing => false,
            Pattern::Regex(regex) => regex.is_match(name),
        }
    }
}

/// The three kinds of access RabbitMQ distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Perm {
    Configure,
    Write,
    Read,
}

impl Perm {
    pub fn name(self) -> &'static str {
        match self {
            Perm::Configure => "configure",
            Perm::Write => "write",
            Perm::Read => "read",
        }
    }
}

/// The resources permissions name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceKind {
    Queue,
    Exchange,
}

impl ResourceKind {
    fn name(self) -> &'static str {
        match self {
            ResourceKind::Queue => "queue",
            ResourceKind::Exchange => "exchange",
        }
    }
}

#[derive(Debug, Clone)]
pub struct TopicGrant {
    pub exchange: Arc<str>,
    pub write: Pattern,
    pub read: Pattern,
}

/// One user's permissions in one vhost.
#[derive(Debug, Clone)]
pub struct Grant {
    pub user: Arc<str>,
    pub vhost: Arc<str>,
    pub configure: Pattern,
    pub write: Pattern,
    pub read: Pattern,
    /// Topic permissions; none means every routing key is allowed, as in RabbitMQ.
    pub topics: Vec<TopicGrant>,
}

impl Grant {
    /// Checks `perm` on a queue or exchange; the default exchange `""` is checked under its
    /// RabbitMQ name `amq.default`. The error names permission, resource and user.
    pub fn check(&self, perm: Perm, kind: ResourceKind, name: &str) -> Result<(), BrokerError> {
        let checked = if kind == ResourceKind::Exchange && name.is_empty() {
            "amq.default"
        } else {
            name
        };
        let pattern = match perm {
            Perm::Configure => &self.configure,
            Perm::Write => &self.write,
            Perm::Read => &self.read,
        };
        if pattern.matches(checked) {
            return Ok(());
        }
        Err(BrokerError::access_refused(format!(
            "{} access to {} refused for user '{}'",
            perm.name(),
            resource_name(kind.name(), checked, &self.vhost),
            self.user
        )))
    }

    /// Whether any topic permission exists (publishers skip the topic check when not).
    pub fn has_topic_permissions(&self) -> bool {
        !self.topics.is_empty()
    }

    /// Checks a routing key against the topic permissions of a topic exchange: write when
    /// publishing, read when binding. Exchanges without topic permissions allow every key.
    pub fn check_topic(
        &self,
        perm: Perm,
        exchange: &str,
        routing_key: &str,
    ) -> Result<(), BrokerError> {
        let Some(topic) = self.topics.iter().find(|t| &*t.exchange == exchange) else {
            return Ok(());
        };
        let pattern = match perm {
            Perm::Read => &topic.read,
            _ => &topic.write,
        };
        if pattern.matches(routing_key) {
            return Ok(());
        }
        Err(BrokerError::access_refused(format!(
            "{} access to topic '{routing_key}' in {} refused for user '{}'",
            perm.name(),
            resource_name("exchange", exchange, &self.vhost),
            self.user
        )))
    }
}

/// RabbitMQ's `check_user_id` (validated user-id): a message's `user_id` property must name
/// the publishing user, unless that user is tagged `impersonator` (an administrator is not).
pub fn check_user_id(claimed: &str, user: &str, tags: &[String]) -> Result<(), BrokerError> {
    check_user_id_as(claimed, user, is_impersonator(tags))
}

/// Whether a user with `tags` may publish any `user_id` (RabbitMQ's `impersonator` tag).
pub fn is_impersonator(tags: &[String]) -> bool {
    tags.iter().any(|tag| tag == "impersonator")
}

/// [`check_user_id`] for a caller that keeps only whether the user is an impersonator (an
/// AMQP connection, which decides it once at login).
pub fn check_user_id_as(claimed: &str, user: &str, impersonator: bool) -> Result<(), BrokerError> {
    if claimed == user || impersonator {
        return Ok(());
    }
    Err(BrokerError::precondition_failed(format!(
        "user_id property set to '{claimed}' but authenticated user was '{user}'"
    )))
}

/// Expands RabbitMQ's `{username}` and `{vhost}` variables in a topic permission pattern.
pub fn expand_variables(source: &str, user: &str, vhost: &str) -> String {
    source
        .replace("{username}", &regex::escape(user))
        .replace("{vhost}", &regex::escape(vhost))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(configure: &str, write: &str, read: &str) -> Grant {
        Grant {
            user: "alice".into(),
            vhost: "dev".into(),
            configure: Pattern::compile(configure).unwrap(),
            write: Pattern::compile(write).unwrap(),
            read: Pattern::compile(read).unwrap(),
            topics: vec![TopicGrant {
                exchange: "amq.topic".into(),
                write: Pattern::compile(&expand_variables("^{username}\\.", "alice", "dev"))
                    .unwrap(),
                read: Pattern::Any,
            }],
        }
    }

    #[test]
    fn patterns_match_unanchored_and_empty_matches_nothing() {
        let g = grant("^alice-", "", "amq\\..*");
        assert!(g
            .check(Perm::Configure, ResourceKind::Queue, "alice-q")
            .is_ok());
        let refused = g
            .check(Perm::Configure, ResourceKind::Queue, "bob-q")
            .unwrap_err();
        assert_eq!(
            refused.text,
            "configure access to queue 'bob-q' in vhost 'dev' refused for user 'alice'"
        );
        assert!(g.check(Perm::Write, ResourceKind::Exchange, "").is_err());
        assert!(
            g.check(Perm::Read, ResourceKind::Exchange, "").is_ok(),
            "amq.default"
        );
        assert!(g.check(Perm::Read, ResourceKind::Queue, "x.amq.y").is_ok());
    }

    #[test]
    fn topic_permissions_apply_to_their_exchange_only() {
        let g = grant(".*", ".*", ".*");
        assert!(g.check_topic(Perm::Write, "amq.topic", "alice.x").is_ok());
        let refused = g
            .check_topic(Perm::Write, "amq.topic", "bob.x")
            .unwrap_err();
        assert!(refused.text.contains("topic 'bob.x'"), "{}", refused.text);
        assert!(g.check_topic(Perm::Write, "other", "bob.x").is_ok());
    }

    #[test]
    fn user_id_must_name_the_user_unless_impersonating() {
        let tags = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_user_id("alice", "alice", &[]).is_ok());
        let refused = check_user_id("bob", "alice", &tags(&["administrator"])).unwrap_err();
        assert_eq!(refused.kind, crate::error::ErrorKind::PreconditionFailed);
        assert_eq!(
            refused.text,
            "user_id property set to 'bob' but authenticated user was 'alice'"
        );
        assert!(check_user_id("bob", "alice", &tags(&["impersonator"])).is_ok());
    }

    #[test]
    fn variables_are_escaped() {
        assert_eq!(
            expand_variables("^{username}-{vhost}", "a.b", "/"),
            "^a\\.b-/"
        );
    }
}
