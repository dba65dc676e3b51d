//! Routing: an immutable snapshot of a vhost's exchanges and bindings, swapped whole on change
//! and updated by what changed (see `layered` for how a large map changes cheaply).

pub mod hash;
pub mod headers;
pub mod layered;
pub mod snapshot;
pub mod topic_trie;

pub use snapshot::{MessageFields, RoutingSnapshot};
