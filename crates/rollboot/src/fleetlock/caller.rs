//! Who is calling: the address a FleetLock request comes from, and whether that is the host
//! the request names.
//!
//! The protocol has no authentication (Zincati sends the header and `{id, group}`, nothing
//! else), and a host's id is derived from its Node's `status.nodeInfo.machineID`, which anyone
//! who can read Nodes knows. What a caller cannot choose is the TCP peer address its request
//! arrives from: Zincati runs on the host, so its requests come from one of the host's own
//! addresses. Owns, purely, the CIDR lists of `fleetlock.trustedProxies` ([`Cidr`]), the
//! client address of a request ([`client_address`]: the peer, or the last hop of
//! `X-Forwarded-For` when the peer is a trusted proxy) and the check against the Node's
//! addresses ([`is_host`]). It must never read a socket, a header map or the API: the server
//! (`controller::fleetlock`) hands it the values.

use std::net::IpAddr;

/// One block of addresses, `10.0.0.0/16` or `fd00::/64` (a bare address is its own block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `addr/prefix` or a bare address; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let net: IpAddr = addr
            .parse()
            .map_err(|e| format!("`{addr}` is not an IP address: {e}"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("`/{p}` is not a prefix length from 0 to {max}"))?,
        };
        Ok(Cidr { net, prefix })
    }

    /// Whether `ip` is in the block (an IPv4-mapped IPv6 address counts as its IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// The address a request comes from: `peer`, the TCP peer; or, when `peer` is in one of the
/// `trusted` proxies' blocks, the last hop of its `X-Forwarded-For` (`forwarded_for`: the
/// address that proxy itself saw; earlier hops are whatever the client wrote). `Err` says why
/// no address can be taken: a trusted proxy that sent no usable header.
pub fn client_address(
    peer: IpAddr,
    forwarded_for: Option<&str>,
    trusted: &[Cidr],
) -> Result<IpAddr, String> {
    // A server bound to `[::]` sees IPv4 peers as IPv4-mapped IPv6 addresses.
    let peer = peer.to_canonical();
    if !trusted.iter().any(|c| c.contains(peer)) {
        return Ok(peer);
    }
    let last = forwarded_for
        .and_then(|v| v.rsplit(',').next())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            format!("the request came through trusted proxy {peer} without X-Forwarded-For")
        })?;
    last.parse::<IpAddr>()
        .map(|a| a.to_canonical())
        .map_err(|_| {
            format!(
                "the last hop of X-Forwarded-For from trusted proxy {peer} is not an address: `{}`",
                last.chars().take(64).collect::<String>()
            )
        })
}

pub use crate::node::HOST_ADDRESS_TYPES;

/// Whether `client` is one of a Node's addresses (`(type, address)` pairs from
/// `status.addresses`; only [`HOST_ADDRESS_TYPES`] count: a Hostname is not an address).
pub fn is_host<'a>(
    client: IpAddr,
    addresses: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> bool {
    let client = client.to_canonical();
    addresses
        .into_iter()
        .filter(|(t, _)| HOST_ADDRESS_TYPES.contains(t))
        .filter_map(|(_, a)| a.trim().parse::<IpAddr>().ok())
        .any(|a| a.to_canonical() == client)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_block_holds_the_addresses_under_its_prefix_only() {
        let c = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(c.contains(ip("10.1.255.3")));
        assert!(!c.contains(ip("10.2.0.1")));
        assert!(c.contains(ip("::ffff:10.1.0.9")), "IPv4-mapped");
        assert!(!c.contains(ip("fd00::1")));
        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains(ip("192.0.2.1")));
        let one = Cidr::parse("127.0.0.7").unwrap();
        assert!(one.contains(ip("127.0.0.7")) && !one.contains(ip("127.0.0.8")));
        let v6 = Cidr::parse("fd00:1::/32").unwrap();
        assert!(v6.contains(ip("fd00:1:ffff::1")) && !v6.contains(ip("fd00:2::1")));
        for bad in [
            "10.0.0.0/33",
            "10.0.0/8",
            "x/1",
            "fd00::/129",
            "10.0.0.0/-1",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn forwarded_for_is_read_only_from_a_trusted_proxy_and_only_its_last_hop() {
        let proxies = [Cidr::parse("10.9.0.0/24").unwrap()];
        // Not a proxy: its header is whatever it wrote, and ignored.
        assert_eq!(
            client_address(ip("10.1.0.5"), Some("10.1.0.7"), &proxies),
            Ok(ip("10.1.0.5"))
        );
        // A trusted proxy: the hop it appended, not the ones the client wrote before it.
        assert_eq!(
            client_address(ip("10.9.0.2"), Some("10.1.0.7, 10.1.0.8"), &proxies),
            Ok(ip("10.1.0.8"))
        );
        assert!(client_address(ip("10.9.0.2"), None, &proxies).is_err());
        assert!(client_address(ip("10.9.0.2"), Some("10.1.0.7, junk"), &proxies).is_err());
        // No proxies trusted: never read.
        assert_eq!(
            client_address(ip("10.9.0.2"), Some("10.1.0.7"), &[]),
            Ok(ip("10.9.0.2"))
        );
        assert_eq!(
            client_address(ip("::ffff:10.1.0.5"), None, &[]),
            Ok(ip("10.1.0.5"))
        );
    }

    #[test]
    fn a_host_is_one_of_its_nodes_internal_or_external_addresses() {
        let addrs = [
            ("InternalIP", "10.1.0.5"),
            ("ExternalIP", "203.0.113.9"),
            ("Hostname", "10.1.0.6"),
        ];
        assert!(is_host(ip("10.1.0.5"), addrs));
        assert!(is_host(ip("203.0.113.9"), addrs));
        assert!(is_host(ip("::ffff:10.1.0.5"), addrs));
        assert!(!is_host(ip("10.1.0.6"), addrs), "a Hostname is no address");
        assert!(!is_host(ip("127.0.0.1"), addrs));
        assert!(!is_host(ip("10.1.0.5"), []));
    }
}
