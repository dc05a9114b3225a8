//! The network a peer's address belongs to, for per-source shares of bounded tables.
//!
//! A share counted per address and port is no share at all: one host has 65,536 ports. One
//! counted per IPv4 address is not one per IPv6 host either: a single subscriber is routinely
//! given a whole /64 (RFC 6177, RFC 7934 §6), so an attacker on one IPv6 link holds 2^64
//! addresses. Every per-source bound of backoffd (held answers, DTLS sessions, stream
//! connections, observations) therefore counts a [`SourcePrefix`]: the address cut to
//! `/32` for IPv4 and `/64` for IPv6 by default ([`PrefixLengths`]). An IPv4-mapped IPv6
//! address (`::ffff:a.b.c.d`, what a dual-stack socket reports for an IPv4 peer) is the IPv4
//! address it maps, so the same host is one source on either kind of socket.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// How many leading bits of an address name its source, per address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixLengths {
    /// Bits of an IPv4 address (1 to 32).
    pub v4: u8,
    /// Bits of an IPv6 address (1 to 128).
    pub v6: u8,
}

impl PrefixLengths {
    /// One IPv4 address; one IPv6 /64, the smallest network a subscriber is given.
    pub const DEFAULT: PrefixLengths = PrefixLengths { v4: 32, v6: 64 };

    /// The source that `ip` counts towards.
    pub fn source_of(self, ip: IpAddr) -> SourcePrefix {
        match ip {
            IpAddr::V4(v4) => self.v4_source(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => self.v4_source(v4),
                None => {
                    let bits = u128::from(v6) & mask128(self.v6);
                    SourcePrefix(IpAddr::V6(Ipv6Addr::from(bits)), self.v6)
                }
            },
        }
    }

    fn v4_source(self, ip: Ipv4Addr) -> SourcePrefix {
        let bits = u32::from(ip) & mask32(self.v4);
        SourcePrefix(IpAddr::V4(Ipv4Addr::from(bits)), self.v4)
    }
}

impl Default for PrefixLengths {
    fn default() -> Self {
        PrefixLengths::DEFAULT
    }
}

impl fmt::Display for PrefixLengths {
    /// `/32,/64`: the form [`FromStr`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/{},/{}", self.v4, self.v6)
    }
}

/// Why a prefix-length pair was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixLengthsError(String);

impl fmt::Display for PrefixLengthsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PrefixLengthsError {}

impl FromStr for PrefixLengths {
    type Err = PrefixLengthsError;

    /// `V4,V6` with an optional `/` before each: `/32,/64`, `24,48`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refuse = || {
            PrefixLengthsError(format!(
                "{s:?} is not a pair of prefix lengths like /32,/64 (IPv4 1-32, IPv6 1-128)"
            ))
        };
        let (v4, v6) = s.split_once(',').ok_or_else(refuse)?;
        let bits = |part: &str, max: u8| {
            let part = part.trim();
            let n: u8 = part.strip_prefix('/').unwrap_or(part).parse().ok()?;
            (1..=max).contains(&n).then_some(n)
        };
        Ok(PrefixLengths {
            v4: bits(v4, 32).ok_or_else(refuse)?,
            v6: bits(v6, 128).ok_or_else(refuse)?,
        })
    }
}

/// A network, as an address with its host bits cleared and the prefix length: what a
/// per-source share is counted against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourcePrefix(IpAddr, u8);

impl SourcePrefix {
    /// The network's first address.
    pub fn network(self) -> IpAddr {
        self.0
    }

    /// How many leading bits it keeps.
    pub fn bits(self) -> u8 {
        self.1
    }
}

impl fmt::Display for SourcePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.0, self.1)
    }
}

fn mask32(len: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(len.min(32)))
        .unwrap_or(0)
}

fn mask128(len: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(len.min(128)))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(ip: &str) -> SourcePrefix {
        PrefixLengths::DEFAULT.source_of(ip.parse().unwrap())
    }

    #[test]
    fn one_ipv4_address_is_one_source() {
        assert_eq!(source("192.0.2.7"), source("192.0.2.7"));
        assert_ne!(source("192.0.2.7"), source("192.0.2.8"));
        assert_eq!(source("192.0.2.7").to_string(), "192.0.2.7/32");
    }

    #[test]
    fn one_ipv6_slash_64_is_one_source() {
        assert_eq!(
            source("2001:db8::1"),
            source("2001:db8::ffff:1234:5678:9abc")
        );
        assert_ne!(source("2001:db8::1"), source("2001:db8:0:1::1"));
        assert_eq!(source("2001:db8::1").to_string(), "2001:db8::/64");
    }

    #[test]
    fn an_ipv4_mapped_address_is_its_ipv4_source() {
        assert_eq!(source("::ffff:192.0.2.7"), source("192.0.2.7"));
    }

    #[test]
    fn other_lengths_group_wider_networks() {
        let wide: PrefixLengths = "/24,/48".parse().unwrap();
        let a = wide.source_of("198.51.100.1".parse().unwrap());
        let b = wide.source_of("198.51.100.200".parse().unwrap());
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "198.51.100.0/24");
        let full: PrefixLengths = "32,128".parse().unwrap();
        assert_ne!(
            full.source_of("2001:db8::1".parse().unwrap()),
            full.source_of("2001:db8::2".parse().unwrap())
        );
    }

    #[test]
    fn malformed_lengths_are_refused() {
        for bad in ["", "/32", "/0,/64", "/33,/64", "/32,/129", "a,b", "/32;/64"] {
            assert!(bad.parse::<PrefixLengths>().is_err(), "{bad}");
        }
        assert_eq!(PrefixLengths::DEFAULT.to_string(), "/32,/64");
        assert_eq!("/32,/64".parse(), Ok(PrefixLengths::DEFAULT));
    }
}
