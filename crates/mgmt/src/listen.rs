//! Binding a TCP listener as RabbitMQ binds a port-only one: on `[::]` with `IPV6_V6ONLY` off,
//! so one socket takes IPv4 and IPv6 clients; on `0.0.0.0` where IPv6 is not available.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

/// Pending connections the kernel queues before `accept`.
const BACKLOG: i32 = 1024;

/// Binds `addr`. `[::]` (every interface) is dual-stack, falling back to `0.0.0.0` with a log
/// line where IPv6 is off; any other address binds that address only.
pub fn bind_tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    if addr.ip() != IpAddr::V6(Ipv6Addr::UNSPECIFIED) {
        return bind_socket(addr, false);
    }
    match bind_socket(addr, true) {
        Err(error)
            if !matches!(
                error.kind(),
                io::ErrorKind::AddrInUse | io::ErrorKind::PermissionDenied
            ) =>
        {
            let v4 = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), addr.port());
            tracing::info!(%error, "IPv6 is not available; listening on {v4}, IPv4 only");
            bind_socket(v4, false)
        }
        bound => bound,
    }
}

fn bind_socket(addr: SocketAddr, dual_stack: bool) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if dual_stack {
        socket.set_only_v6(false)?;
    }
    // As tokio's TcpListener::bind: a restarted broker rebinds despite TIME_WAIT sockets.
    #[cfg(unix)]
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket.into())
}

/// A peer as it would appear on an IPv4 socket: `::ffff:127.0.0.1` (an IPv4 client on a
/// dual-stack socket) becomes `127.0.0.1`, so loopback checks see it.
pub fn canonical_peer(peer: SocketAddr) -> SocketAddr {
    SocketAddr::new(peer.ip().to_canonical(), peer.port())
}
