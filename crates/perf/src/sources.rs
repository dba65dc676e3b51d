//! `SourceAddresses`: which local address each `--connections` socket is bound to.
//!
//! A TCP connection is named by its two addresses and ports, so one client address reaches one
//! broker port through at most the kernel's ephemeral port range (net.ipv4.ip_local_port_range,
//! 32768-60999 by default: 28,232 ports). On Linux every address of 127.0.0.0/8 is the loopback
//! interface, so a client of a loopback broker can bind its sockets to 127.0.0.2, 127.0.0.3, ...
//! before connecting, and gets a port range per address.
//!
//! By default the sockets are not bound (the kernel picks 127.0.0.1) up to
//! `CONNECTIONS_PER_SOURCE_ADDRESS` connections; above that, they take the addresses from
//! 127.0.0.2 on in turn, that many connections per address at most. A bound socket's port is
//! chosen at bind time, when the kernel cannot yet reuse a port whose earlier connection is in
//! TIME_WAIT (a minute after an earlier run closed it), hence the margin of half the range:
//! a second run right after the first still finds free ports. `--source-addresses N` sets the
//! number of addresses (0: never bind).

use std::net::{IpAddr, Ipv4Addr};

use crate::error::PerfError;

/// 127.0.0.2 to 127.0.0.254.
pub const SOURCE_ADDRESSES_MAX: u8 = 253;
/// Most connections per source address when the tool picks the addresses itself.
const CONNECTIONS_PER_SOURCE_ADDRESS: u32 = 10_000;
/// Linux's default net.ipv4.ip_local_port_range, when /proc cannot tell.
const EPHEMERAL_PORTS_DEFAULT: u32 = 60_999 - 32_768 + 1;

/// The local addresses the connections are spread over; none: the kernel picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceAddresses {
    count: u8,
}

impl SourceAddresses {
    /// The addresses for `connections` connections to `target`: `asked` (`--source-addresses`)
    /// when given, else as many as the connections need when the broker is on loopback.
    pub fn plan(
        asked: Option<u8>,
        connections: u32,
        target: Option<IpAddr>,
    ) -> Result<SourceAddresses, PerfError> {
        let loopback_v4 = matches!(target, Some(IpAddr::V4(ip)) if ip.is_loopback());
        let count = match asked {
            Some(0) => 0,
            Some(count) if loopback_v4 => count,
            Some(count) => {
                let target = target.map_or("unresolved".to_owned(), |ip| ip.to_string());
                return Err(PerfError::usage(format!(
                    "--source-addresses {count}: the source addresses are 127.0.0.2 and on, \
                     which reach a broker on 127.0.0.0/8 only (the broker is at {target})"
                )));
            }
            None if loopback_v4 => needed(connections, per_address()),
            None => 0,
        };
        Ok(SourceAddresses { count })
    }

    /// The address connection number `index` binds to; `None`: the kernel picks.
    pub fn for_connection(&self, index: u32) -> Option<IpAddr> {
        if self.count == 0 {
            return None;
        }
        let offset = 2 + index % u32::from(self.count);
        let last = u8::try_from(offset).expect("invariant: count <= SOURCE_ADDRESSES_MAX");
        Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
    }

    pub fn count(&self) -> u8 {
        self.count
    }

    /// "127.0.0.2 to 127.0.0.5" for the lines the run prints; `None` when not bound.
    pub fn describe(&self) -> Option<String> {
        let first = self.for_connection(0)?;
        let last = self.for_connection(u32::from(self.count) - 1)?;
        Some(if first == last {
            first.to_string()
        } else {
            format!("{first} to {last}")
        })
    }
}

/// Connections one source address takes: `CONNECTIONS_PER_SOURCE_ADDRESS`, or half the
/// ephemeral port range when that is narrower.
fn per_address() -> u32 {
    let ports = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut range = text.split_whitespace().map(str::parse::<u32>);
            let (Some(Ok(low)), Some(Ok(high))) = (range.next(), range.next()) else {
                return None;
            };
            high.checked_sub(low).map(|span| span + 1)
        })
        .unwrap_or(EPHEMERAL_PORTS_DEFAULT);
    (ports / 2).clamp(1, CONNECTIONS_PER_SOURCE_ADDRESS)
}

/// Addresses needed for `connections` at `per_address` each: 0 when one address (unbound,
/// the kernel's) is enough.
fn needed(connections: u32, per_address: u32) -> u8 {
    if connections <= per_address {
        return 0;
    }
    let count = connections.div_ceil(per_address);
    u8::try_from(count)
        .unwrap_or(SOURCE_ADDRESSES_MAX)
        .min(SOURCE_ADDRESSES_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback(last: u8) -> Option<IpAddr> {
        Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
    }

    #[test]
    fn few_connections_are_not_bound() {
        let plan = SourceAddresses::plan(None, 200, loopback(1)).unwrap();
        assert_eq!(plan.count(), 0);
        assert_eq!(plan.for_connection(7), None);
        assert_eq!(plan.describe(), None);
    }

    #[test]
    fn many_connections_take_addresses_in_turn() {
        assert_eq!(needed(40_000, 10_000), 4);
        assert_eq!(needed(40_001, 10_000), 5);
        assert_eq!(needed(10_000, 10_000), 0);
        assert_eq!(needed(u32::MAX, 1), SOURCE_ADDRESSES_MAX);
        let plan = SourceAddresses::plan(Some(4), 40_000, loopback(1)).unwrap();
        assert_eq!(plan.for_connection(0), loopback(2));
        assert_eq!(plan.for_connection(3), loopback(5));
        assert_eq!(plan.for_connection(4), loopback(2));
        assert_eq!(plan.describe().unwrap(), "127.0.0.2 to 127.0.0.5");
        let last = SourceAddresses::plan(Some(SOURCE_ADDRESSES_MAX), 9, loopback(1)).unwrap();
        assert_eq!(last.for_connection(252), loopback(254));
    }

    #[test]
    fn only_a_loopback_broker_gets_source_addresses() {
        let remote = Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
        assert_eq!(
            SourceAddresses::plan(None, 90_000, remote).unwrap().count(),
            0
        );
        let refused = SourceAddresses::plan(Some(2), 9, remote).unwrap_err();
        assert!(refused.to_string().contains("192.0.2.1"), "{refused}");
        let v6 = Some(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST));
        assert_eq!(SourceAddresses::plan(None, 90_000, v6).unwrap().count(), 0);
        assert_eq!(
            SourceAddresses::plan(Some(0), 90_000, loopback(1))
                .unwrap()
                .count(),
            0
        );
    }
}
