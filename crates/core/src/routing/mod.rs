//! Routing: an immutable snapshot of a vhost's exchanges and bindings, swapped whole on change.

pub mod hash;
pub mod headers;
pub mod snapshot;
pub mod topic_trie;

pub use snapshot::{MessageFields, RoutingSnapshot};
