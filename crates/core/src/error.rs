//! Broker errors: a kind named after the AMQP reply it maps to, and a text that names the thing.
//!
//! Each protocol maps `ErrorKind` to its own codes (AMQP 0.9.1: reply code + soft/hard).
//! Texts follow RabbitMQ's wording so operators and client logs read the same.

use std::fmt;

/// What went wrong, in the spec's reply names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    AccessRefused,
    ResourceLocked,
    PreconditionFailed,
    NotAllowed,
    CommandInvalid,
    ResourceError,
    NotImplemented,
    InternalError,
}

/// A refused operation: the kind decides the reply code, the text is shown to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerError {
    pub kind: ErrorKind,
    pub text: String,
}

impl BrokerError {
    pub fn new(kind: ErrorKind, text: impl Into<String>) -> BrokerError {
        BrokerError {
            kind,
            text: text.into(),
        }
    }

    pub fn not_found(text: impl Into<String>) -> BrokerError {
        BrokerError::new(ErrorKind::NotFound, text)
    }

    pub fn access_refused(text: impl Into<String>) -> BrokerError {
        BrokerError::new(ErrorKind::AccessRefused, text)
    }

    pub fn precondition_failed(text: impl Into<String>) -> BrokerError {
        BrokerError::new(ErrorKind::PreconditionFailed, text)
    }

    pub fn resource_locked(text: impl Into<String>) -> BrokerError {
        BrokerError::new(ErrorKind::ResourceLocked, text)
    }

    pub fn internal(text: impl Into<String>) -> BrokerError {
        BrokerError::new(ErrorKind::InternalError, text)
    }
}

impl fmt::Display for BrokerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.text)
    }
}

impl std::error::Error for BrokerError {}

/// RabbitMQ's way of naming a resource in error texts: `queue 'orders' in vhost '/'`.
pub fn resource_name(kind: &str, name: &str, vhost: &str) -> String {
    format!("{kind} '{name}' in vhost '{vhost}'")
}
