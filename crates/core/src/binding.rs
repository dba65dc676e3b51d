//! Bindings: from a source exchange to a queue or to another exchange.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::value::Table;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(
    tag = "destination_type",
    content = "destination",
    rename_all = "lowercase"
)]
pub enum Destination {
    Queue(Arc<str>),
    Exchange(Arc<str>),
}

impl Destination {
    pub fn name(&self) -> &Arc<str> {
        match self {
            Destination::Queue(name) | Destination::Exchange(name) => name,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Binding {
    pub source: Arc<str>,
    #[serde(flatten)]
    pub destination: Destination,
    pub routing_key: Arc<str>,
    pub arguments: Table,
}
