//! A vhost's durable definitions as the store last made them durable: what a compaction
//! writes, and what the journal's changes are replayed onto at start.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::VHostChange;
use crate::binding::{BindingSet, Destination};
use crate::definitions::{QueueRecord, VHostDefinitions};
use crate::exchange::ExchangeDef;

#[derive(Debug, Clone, Default)]
pub struct VHostImage {
    exchanges: BTreeMap<Arc<str>, ExchangeDef>,
    queues: BTreeMap<Arc<str>, QueueRecord>,
    bindings: BindingSet,
}

impl VHostImage {
    pub fn from_definitions(definitions: VHostDefinitions) -> VHostImage {
        VHostImage {
            exchanges: definitions
                .exchanges
                .into_iter()
                .map(|e| (e.name.clone(), e))
                .collect(),
            queues: definitions
                .queues
                .into_iter()
                .map(|q| (q.name.clone(), q))
                .collect(),
            bindings: definitions.bindings.into_iter().collect(),
        }
    }

    /// The definitions document (exchanges and queues by name, bindings oldest first).
    pub fn to_definitions(&self, vhost: &str) -> VHostDefinitions {
        VHostDefinitions {
            format_version: 0,
            vhost: vhost.to_owned(),
            exchanges: self.exchanges.values().cloned().collect(),
            queues: self.queues.values().cloned().collect(),
            bindings: self.bindings.iter().cloned().collect(),
        }
    }

    /// Applies one change. Idempotent: replaying a journal over a snapshot that already holds
    /// its changes (a crash between a compaction and the journal's removal) changes nothing.
    pub fn apply(&mut self, change: &VHostChange) {
        match change {
            VHostChange::PutExchange { exchange } => {
                self.exchanges
                    .insert(exchange.name.clone(), exchange.clone());
            }
            VHostChange::DeleteExchange { name } => {
                self.exchanges.remove(name);
                self.bindings.remove_source(name);
                self.bindings
                    .remove_destination(&Destination::Exchange(name.clone()));
            }
            VHostChange::PutQueue { queue } => {
                self.queues.insert(queue.name.clone(), queue.clone());
            }
            VHostChange::DeleteQueue { name } => {
                self.queues.remove(name);
                self.bindings
                    .remove_destination(&Destination::Queue(name.clone()));
            }
            VHostChange::PutBinding { binding } => {
                self.bindings.insert(binding.clone());
            }
            VHostChange::DeleteBinding { binding } => {
                self.bindings.remove(binding);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.exchanges.is_empty() && self.queues.is_empty() && self.bindings.is_empty()
    }
}
