//! AMQP 1.0 on the AMQP port: the protocol header picks it (`AMQP 3 1 0 0` for the SASL layer,
//! then `AMQP 0 1 0 0`). One task per connection, as for AMQP 0.9.1 (see `connection.rs`).
//!
//! SASL: PLAIN checks the user like AMQP 0.9.1 does (loopback-only users included). ANONYMOUS
//! is offered to loopback peers only and logs them in as the default user (`default_user`),
//! which is what RabbitMQ does with `anonymous_login_user` set to `guest` (its default), whose
//! guest user may only connect from loopback.

mod address;
mod connection;
mod convert;
mod link;
mod management;
mod publish;
mod session;
mod unsettled;
mod writer;

use std::time::Duration;

use tokio::io::Interest;
use tokio::net::TcpStream;
use warren_proto::amqp10::{AMQP_HEADER, SASL_HEADER};

pub use connection::serve;

/// How long the listener waits for the 8-byte protocol header before it lets AMQP 0.9.1 handle
/// the socket (which answers a wrong or missing header the 0.9.1 way).
const SNIFF_TIMEOUT: Duration = Duration::from_secs(10);
const SNIFF_POLL: Duration = Duration::from_millis(5);
/// Polls of a socket that has sent part of a header (bounded by `SNIFF_TIMEOUT` too).
const SNIFF_POLLS_MAX: u32 = 2000;

/// Whether the client on `socket` opens with an AMQP 1.0 protocol header (SASL or plain). Only
/// peeks: the bytes stay in the socket for whichever protocol serves it. It waits for the
/// whole header only while what came so far can begin one and the client may send more.
pub async fn is_amqp10(socket: &TcpStream) -> bool {
    let sniff = async {
        let mut header = [0u8; 8];
        for _ in 0..SNIFF_POLLS_MAX {
            match socket.peek(&mut header).await {
                Ok(n) if n >= header.len() => return is_amqp10_header(&header),
                Ok(0) | Err(_) => return false,
                Ok(n) if !may_begin_amqp10_header(&header[..n]) => return false,
                Ok(_) => {
                    // The peer closed its side after part of a header: no more is coming.
                    let ready = socket.ready(Interest::READABLE).await;
                    if ready.is_ok_and(|ready| ready.is_read_closed()) {
                        return false;
                    }
                    tokio::time::sleep(SNIFF_POLL).await;
                }
            }
        }
        false
    };
    tokio::time::timeout(SNIFF_TIMEOUT, sniff)
        .await
        .unwrap_or(false)
}

/// AMQP 1.0's two protocol headers, SASL's and plain AMQP's (AMQP 0.9.1 sends
/// `AMQP 0 0 9 1`).
const HEADERS: [[u8; 8]; 2] = [SASL_HEADER, AMQP_HEADER];

fn is_amqp10_header(header: &[u8; 8]) -> bool {
    HEADERS.contains(header)
}

/// Whether `start`, shorter than a header, agrees with an AMQP 1.0 header so far.
fn may_begin_amqp10_header(start: &[u8]) -> bool {
    HEADERS.iter().any(|header| header.starts_with(start))
}
