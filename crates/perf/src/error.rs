//! `PerfError`: why a run could not start or had to stop. Every text names the thing that went
//! wrong and, where there is one, the fix (as the broker's own errors do).

use std::process::ExitCode;

/// Why `warren perf` stopped early.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// The command line is wrong: an unknown flag, a missing or malformed value. Exit code 2.
    #[error("{0}")]
    Usage(String),
    /// The broker could not be reached or refused the connection.
    #[error("{0}")]
    Connect(String),
    /// The broker closed a channel or the connection (404 queue not found, 403 access refused,
    /// 406 inequivalent arguments...).
    #[error("{0}")]
    Broker(String),
    /// The broker sent bytes that are not AMQP, or something this client does not expect.
    #[error("{0}")]
    Protocol(String),
    /// Reading or writing a file (`--json`, `--chart`) or the socket failed.
    #[error("{0}")]
    Io(String),
    /// With `--verify-order`, a message arrived out of its producer's order (or twice, or after
    /// a gap).
    #[error("{0}")]
    OutOfOrder(String),
}

impl PerfError {
    /// 2 for usage errors (as clap and PerfTest do), 1 for everything else.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            PerfError::Usage(_) => ExitCode::from(2),
            _ => ExitCode::FAILURE,
        }
    }

    /// A usage error.
    pub fn usage(text: impl Into<String>) -> PerfError {
        PerfError::Usage(text.into())
    }

    /// An I/O error on `what` (a file path, or "the connection to HOST:PORT").
    pub fn io(what: &str, error: &std::io::Error) -> PerfError {
        PerfError::Io(format!("{what}: {error}"))
    }
}
