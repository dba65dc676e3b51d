//! Routing: an immutable snapshot of a vhost's exchanges and bindings, swapped whole on change.

pub mod headers;
pub mod snapshot;
pub mod topic_trie;

pub use snapshot::RoutingSnapshot;
