//! `Topology`: the exchange, queues and bindings a run uses, and which queue or routing key each
//! producer and consumer channel gets, worked out from the options the way PerfTest does:
//!
//! - The exchange (`-e`, default `direct`, type `-t`) is declared durable unless it is the
//!   default exchange (`""`) or an `amq.*` one, which exist already.
//! - Without `-u` or `--queue-pattern`, every consumer channel declares its own server-named,
//!   exclusive queue bound with the run's routing key, so each message reaches every consumer
//!   (fanout 1 -> N also works with `-t fanout`).
//! - Named queues are durable exactly when `--flag persistent` is given, auto-delete unless
//!   `--auto-delete false`, and bound with `-k` or else their own name. Producer channel `i`
//!   publishes to queue `i mod n` and consumer channel `j` reads queue `j mod n`.

use crate::options::{ArgValue, RunOptions};

/// What a consumer channel reads from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// A queue declared up front (or existing, with `-p`).
    Named(String),
    /// A server-named exclusive queue the consumer declares on its own connection and binds.
    ServerNamed {
        exchange: String,
        routing_key: String,
    },
}

/// A queue to declare before the run.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueSpec {
    pub name: String,
    pub durable: bool,
    pub auto_delete: bool,
    pub arguments: Vec<(String, ArgValue)>,
    /// Bound to the run's exchange with this key; `None` when the exchange is the default one.
    pub binding_key: Option<String>,
}

/// The run's broker objects and who uses which.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    pub exchange: String,
    pub exchange_type: String,
    /// Declare the exchange (not for `""` and `amq.*`, nor with `-p`).
    pub declare_exchange: bool,
    pub queues: Vec<QueueSpec>,
    /// With `-p`: check that the queues exist instead of declaring them.
    pub predeclared: bool,
    /// Arguments of server-named queues (`-qa` applies to them too).
    pub queue_arguments: Vec<(String, ArgValue)>,
    routing_keys: Vec<String>,
    sources: Vec<Source>,
}

impl Topology {
    /// Works out the topology; `random_key` is the routing key used when neither `-k` nor a
    /// queue name gives one.
    pub fn new(options: &RunOptions, random_key: &str) -> Topology {
        let names: Vec<String> = match (&options.queue, &options.queue_pattern) {
            (Some(name), _) => vec![name.clone()],
            (None, Some(pattern)) => pattern.names(),
            (None, None) => Vec::new(),
        };
        let default_exchange = options.exchange.is_empty();
        let key_for = |name: &str| {
            options
                .routing_key
                .clone()
                .unwrap_or_else(|| name.to_owned())
        };
        let queues = names
            .iter()
            .map(|name| QueueSpec {
                name: name.clone(),
                durable: options.persistent,
                auto_delete: options.auto_delete,
                arguments: options.queue_args.clone(),
                binding_key: (!default_exchange).then(|| key_for(name)),
            })
            .collect();
        let run_key = options
            .routing_key
            .clone()
            .unwrap_or_else(|| random_key.to_owned());
        let routing_keys = if names.is_empty() {
            vec![run_key.clone()]
        } else {
            names.iter().map(|n| key_for(n)).collect()
        };
        let sources = if names.is_empty() {
            vec![Source::ServerNamed {
                exchange: options.exchange.clone(),
                routing_key: run_key,
            }]
        } else {
            names.into_iter().map(Source::Named).collect()
        };
        Topology {
            exchange: options.exchange.clone(),
            exchange_type: options.exchange_type.clone(),
            declare_exchange: !options.predeclared
                && !default_exchange
                && !options.exchange.starts_with("amq."),
            queues,
            predeclared: options.predeclared,
            queue_arguments: options.queue_args.clone(),
            routing_keys,
            sources,
        }
    }

    /// The routing key of producer channel `index` (counted over all producer connections).
    pub fn routing_key(&self, index: usize) -> &str {
        let keys = &self.routing_keys;
        debug_assert!(
            !keys.is_empty(),
            "invariant: a topology has at least one routing key"
        );
        keys.get(index % keys.len().max(1))
            .map_or("", String::as_str)
    }

    /// The source of consumer channel `index` (counted over all consumer connections).
    pub fn source(&self, index: usize) -> &Source {
        let sources = &self.sources;
        assert!(
            !sources.is_empty(),
            "invariant: a topology has at least one source"
        );
        &sources[index % sources.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::tokenize;

    fn options(args: &[&str]) -> RunOptions {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let given = tokenize(&args).unwrap().unwrap();
        RunOptions::from_given(&given, "t".into(), args).unwrap()
    }

    #[test]
    fn without_queue_names_each_consumer_gets_a_server_named_queue() {
        let t = Topology::new(&options(&["-y", "3"]), "key-1");
        assert!(t.queues.is_empty());
        assert!(t.declare_exchange);
        assert_eq!(t.routing_key(5), "key-1");
        let expected = Source::ServerNamed {
            exchange: "direct".into(),
            routing_key: "key-1".into(),
        };
        assert_eq!(t.source(2), &expected);
    }

    #[test]
    fn a_queue_pattern_spreads_producers_and_consumers() {
        let args = [
            "--queue-pattern",
            "q-%d",
            "--queue-pattern-from",
            "1",
            "--queue-pattern-to",
            "3",
        ];
        let t = Topology::new(&options(&args), "unused");
        let names: Vec<&str> = t.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, ["q-1", "q-2", "q-3"]);
        assert_eq!(t.queues[1].binding_key.as_deref(), Some("q-2"));
        assert_eq!((t.routing_key(0), t.routing_key(4)), ("q-1", "q-2"));
        assert_eq!(t.source(5), &Source::Named("q-3".into()));
    }

    #[test]
    fn persistent_makes_named_queues_durable_and_amq_exchanges_are_not_declared() {
        let args = [
            "-u",
            "w1",
            "-f",
            "persistent",
            "-ad",
            "false",
            "-e",
            "amq.fanout",
        ];
        let t = Topology::new(&options(&args), "unused");
        assert!(t.queues[0].durable && !t.queues[0].auto_delete);
        assert!(!t.declare_exchange);
        let t = Topology::new(&options(&["-u", "q", "-e", ""]), "unused");
        assert_eq!(t.queues[0].binding_key, None);
        assert_eq!(t.routing_key(0), "q");
    }
}
