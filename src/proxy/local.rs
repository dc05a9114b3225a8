//! The proxy's in-process clients. The HTTP cross-proxy (`crate::hc`, issue 15) speaks CoAP
//! to the engine as a client of its own, so that an HTTP request gets everything a CoAP one
//! does: routes, retry policy, deduplication, limits, the cache and the metrics.
//!
//! Each in-process client has an address from `100::/64`, IPv6's discard-only prefix (RFC
//! 6666): no datagram is ever answered from there, so an in-process client cannot be
//! mistaken for a peer. The driver drops datagrams that claim such a source, and routes
//! the engine's datagrams to such a destination back into the process. The engine spares
//! them what exists against spoofed sources: the send budget and Echo validation.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The first 64 bits of every in-process client's address: `100::/64`.
const PREFIX: [u16; 4] = [0x0100, 0, 0, 0];

/// The address of in-process client number `serial`.
pub fn local_client(serial: u64) -> SocketAddr {
    let [a, b, c, d] = [48, 32, 16, 0].map(|shift| (serial >> shift) as u16);
    let [p0, p1, p2, p3] = PREFIX;
    SocketAddr::new(IpAddr::V6(Ipv6Addr::new(p0, p1, p2, p3, a, b, c, d)), 1)
}

/// Whether `addr` is an in-process client's.
pub fn is_local_client(addr: &SocketAddr) -> bool {
    match addr.ip() {
        IpAddr::V6(ip) => ip.segments()[..4] == PREFIX,
        IpAddr::V4(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_clients_are_in_the_discard_prefix_and_distinct() {
        let (a, b) = (local_client(1), local_client(1 << 40));
        assert!(is_local_client(&a) && is_local_client(&b) && a != b);
        assert_eq!(a.to_string(), "[100::1]:1");
        assert!(!is_local_client(&"[::1]:5683".parse().unwrap()));
        assert!(!is_local_client(&"127.0.0.1:5683".parse().unwrap()));
    }
}
