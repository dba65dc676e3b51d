//! Why a channel or the connection must close, with the AMQP reply to send.

use warren_core::{BrokerError, ErrorKind};
use warren_proto::amqp091::{reply_code, DecodeError, Method};

#[derive(Debug)]
pub enum Fault {
    /// Soft error: close this channel, keep the connection.
    Channel {
        channel: u16,
        code: u16,
        text: String,
        class_id: u16,
        method_id: u16,
    },
    /// Hard error: send connection.close and stop.
    Connection {
        code: u16,
        text: String,
        class_id: u16,
        method_id: u16,
    },
    /// The peer went away or the socket failed: nothing more to say.
    Gone(String),
}

/// The method an error is about, for the class-id and method-id fields of close.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cause {
    pub class_id: u16,
    pub method_id: u16,
}

impl Cause {
    pub fn of(method: &Method) -> Cause {
        Cause {
            class_id: method.class_id(),
            method_id: method.method_id(),
        }
    }
}

pub fn code_of(kind: ErrorKind) -> u16 {
    match kind {
        ErrorKind::NotFound => reply_code::NOT_FOUND,
        ErrorKind::AccessRefused => reply_code::ACCESS_REFUSED,
        ErrorKind::ResourceLocked => reply_code::RESOURCE_LOCKED,
        ErrorKind::PreconditionFailed => reply_code::PRECONDITION_FAILED,
        ErrorKind::NotAllowed => reply_code::NOT_ALLOWED,
        ErrorKind::CommandInvalid => reply_code::COMMAND_INVALID,
        ErrorKind::ResourceError => reply_code::RESOURCE_ERROR,
        ErrorKind::NotImplemented => reply_code::NOT_IMPLEMENTED,
        ErrorKind::InternalError => reply_code::INTERNAL_ERROR,
    }
}

/// RabbitMQ's reply text: `NOT_FOUND - no queue 'x' in vhost '/'`.
pub fn reply_text(code: u16, text: &str) -> String {
    format!("{} - {text}", reply_code::name(code))
}

impl Fault {
    /// An error with `code`: soft codes close the channel, hard codes the connection.
    pub fn new(channel: u16, code: u16, text: impl AsRef<str>, cause: Cause) -> Fault {
        let text = reply_text(code, text.as_ref());
        if reply_code::is_hard_error(code) || channel == 0 {
            Fault::Connection {
                code,
                text,
                class_id: cause.class_id,
                method_id: cause.method_id,
            }
        } else {
            Fault::Channel {
                channel,
                code,
                text,
                class_id: cause.class_id,
                method_id: cause.method_id,
            }
        }
    }

    pub fn connection(code: u16, text: impl AsRef<str>, cause: Cause) -> Fault {
        Fault::new(0, code, text, cause)
    }

    pub fn broker(channel: u16, error: BrokerError, cause: Cause) -> Fault {
        Fault::new(channel, code_of(error.kind), &error.text, cause)
    }

    pub fn decode(error: &DecodeError) -> Fault {
        let cause = error.context().and_then(method_ids).unwrap_or_default();
        Fault::connection(error.reply_code(), error.to_string(), cause)
    }
}

impl From<std::io::Error> for Fault {
    fn from(error: std::io::Error) -> Fault {
        Fault::Gone(error.to_string())
    }
}

/// The class and method ids of a method named like `queue.declare` (error path only).
fn method_ids(name: &str) -> Option<Cause> {
    const CLASS_IDS: [u16; 8] = [10, 20, 30, 40, 50, 60, 85, 90];
    CLASS_IDS.iter().find_map(|&class_id| {
        (0..=200u16)
            .find(|&method_id| {
                warren_proto::amqp091::method_name(class_id, method_id) == Some(name)
            })
            .map(|method_id| Cause {
                class_id,
                method_id,
            })
    })
}
