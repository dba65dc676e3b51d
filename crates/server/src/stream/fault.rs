//! What ends a stream protocol connection: a Close the server sends (with the spec's response
//! code and a reason), or nothing left to send (the socket is gone, or RabbitMQ's silent close
//! after a refused login).

use warren_proto::stream::{response_code, DecodeError};

#[derive(Debug)]
pub enum Fault {
    /// Ends without a Close: the peer is gone or must not be told more.
    Gone(String),
    /// Sends Close with `code` and `reason`, then waits briefly for the client's answer.
    Close { code: u16, reason: String },
}

impl Fault {
    pub fn close(code: u16, reason: impl Into<String>) -> Fault {
        Fault::Close {
            code,
            reason: reason.into(),
        }
    }

    /// A frame that cannot be decoded: the code the codec names for it, and its text.
    pub fn decode(error: &DecodeError) -> Fault {
        Fault::close(error.response_code(), error.to_string())
    }

    /// The broker ends the connection (shutdown, management API, deleted user or vhost).
    pub fn forced(reason: impl Into<String>) -> Fault {
        Fault::close(response_code::INTERNAL_ERROR, reason)
    }
}

impl From<std::io::Error> for Fault {
    fn from(error: std::io::Error) -> Fault {
        Fault::Gone(error.to_string())
    }
}
