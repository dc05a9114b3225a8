//! Each source's share of the observations (`--max-observations-per-source`), so that one
//! client, or one address with many connections or ports, cannot take the whole table
//! (`--max-observations`) and leave every other client's registration refused.
//!
//! A source is the network of the address a client connects from (`crate::source_prefix`:
//! one IPv4 address, one IPv6 /64 by default), whichever transport it came by: the UDP
//! source address, a DTLS session's or a stream connection's remote address, as the
//! transport names it with the datagram ([`ClientOrigin`]). A client with no address, an
//! in-process one (the HTTP front's connection), is a source of its own; the HTTP front
//! bounds its event streams together (`--http-max-streams`).
//!
//! A registration past its source's share, like one past the table's size, is served as
//! the plain GET it also is (RFC 7641 §3.1, §4.1: a server that does not add the client
//! answers without Observe, and the client then knows it is not registered).

use std::collections::BTreeMap;

use crate::source_prefix::{PrefixLengths, SourcePrefix};

use super::peer::{ClientOrigin, Peer};

/// What a per-source share counts a client by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum SourceKey {
    /// The network of the address the client connects from.
    Network(SourcePrefix),
    /// A client with no address (in-process): itself.
    Client(Peer),
}

impl SourceKey {
    /// The source `origin` counts towards, networks cut to `lengths` (`--source-prefix`).
    pub(super) fn of(origin: ClientOrigin, lengths: PrefixLengths) -> Self {
        match origin.ip() {
            Some(ip) => SourceKey::Network(lengths.source_of(ip)),
            None => SourceKey::Client(origin.peer),
        }
    }
}

/// Live observations per source. An ordered map: its keys are chosen by clients, and it
/// needs no hashing secrets; it has one entry per source holding an observation, so at most
/// `--max-observations` entries.
#[derive(Debug, Default)]
pub(super) struct ObservationShares {
    by_source: BTreeMap<SourceKey, u32>,
}

impl ObservationShares {
    /// Observations `source` holds.
    pub(super) fn held(&self, source: &SourceKey) -> usize {
        self.by_source.get(source).map_or(0, |&n| n as usize)
    }

    /// One more observation of `source`.
    pub(super) fn began(&mut self, source: SourceKey) {
        *self.by_source.entry(source).or_default() += 1;
    }

    /// One fewer; a source with none left is forgotten.
    pub(super) fn ended(&mut self, source: &SourceKey) {
        if let Some(n) = self.by_source.get_mut(source) {
            *n -= 1;
            if *n == 0 {
                self.by_source.remove(source);
            }
        }
    }

    /// Sources holding an observation now, for tests.
    #[cfg(test)]
    pub(super) fn sources(&self) -> usize {
        self.by_source.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::engine::peer::{ConnectionId, LocalClient};

    fn key(origin: impl Into<ClientOrigin>) -> SourceKey {
        SourceKey::of(origin.into(), PrefixLengths::DEFAULT)
    }

    #[test]
    fn the_ports_and_connections_of_one_address_are_one_source() {
        let udp = key("192.0.2.7:5683".parse::<std::net::SocketAddr>().unwrap());
        let other_port = key("192.0.2.7:40000".parse::<std::net::SocketAddr>().unwrap());
        let conn = key(Peer::Stream(ConnectionId::new(1, 0)).connected_from([192, 0, 2, 7].into()));
        assert_eq!((udp, other_port), (conn, conn));
        let elsewhere =
            key(Peer::Stream(ConnectionId::new(2, 0)).connected_from([192, 0, 2, 8].into()));
        assert_ne!(conn, elsewhere);
    }

    #[test]
    fn a_client_without_an_address_is_a_source_of_its_own() {
        let (a, b) = (
            Peer::Local(LocalClient::new(1)),
            Peer::Local(LocalClient::new(2)),
        );
        assert_eq!(key(a), SourceKey::Client(a));
        assert_ne!(key(a), key(b));
    }

    #[test]
    fn a_source_is_forgotten_with_its_last_observation() {
        let mut shares = ObservationShares::default();
        let s = key(Peer::Local(LocalClient::new(1)));
        shares.began(s);
        shares.began(s);
        assert_eq!((shares.held(&s), shares.sources()), (2, 1));
        shares.ended(&s);
        shares.ended(&s);
        assert_eq!((shares.held(&s), shares.sources()), (0, 0));
    }
}
