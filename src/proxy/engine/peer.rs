//! Who a client is, and so how its answers go back: the seam between the engine and the
//! transports that carry CoAP to it.
//!
//! The engine keys everything it keeps per client (the duplicate index, Message IDs, answers,
//! observations) by [`Peer`], and hands every datagram for a client to its driver with the
//! peer it is for ([`super::Destination::Client`]). The driver that owns the transport
//! delivers it. What the engine must know of a transport is in the peer's type:
//!
//! - [`Peer::Udp`]: a source address, which anyone can forge. Its answers pass the
//!   anti-amplification allowance and the send budget until the address proves that it
//!   receives (`validation.rs`; RFC 9175 §2.4, RFC 7252 §11.3).
//! - [`Peer::Local`]: a client inside this process, the HTTP cross-proxy's connection number
//!   n. Nobody outside can claim to be one, so nothing is validated.
//!
//! Each transport is one variant holding a small copyable name, like `Local`; the
//! connection's own state never enters the engine:
//! - [`Peer::Dtls`] (RFC 7252 §9): `Dtls(SessionId)`. The session (handshake, keys, record layer,
//!   its retransmission timers, the client's address) lives in the DTLS driver's session
//!   table, a sans-IO state machine per session beside the client socket. The engine sees
//!   decrypted datagrams from the session and hands answers back to it; the cookie exchange
//!   (RFC 6347 §4.2.1) has proven the address, so no allowance applies.
//! - [`Peer::Stream`] (RFC 8323, CoAP over TCP, TLS and WebSockets): `Stream(ConnectionId)`.
//!   The connection's framing and its CSM state (Max-Message-Size, Block-Wise-Transfer,
//!   §5.3) live in the stream listener's connection table (`crate::coap_tcp`); it turns
//!   frames into the engine's message layout and back. RFC 8323 has no message layer
//!   (§2.2, §3.2: no types, no Message IDs, no ACKs, no retransmissions), so the engine
//!   has none with such a peer ([`Peer::has_message_layer`]): each request is new, each
//!   answer goes once and the exchange retires when it is handed over.
//!
//! Two questions, two methods: whether the transport loses nothing ([`Peer::is_reliable`]:
//! an in-process client, a stream connection), and whether the peer speaks CoAP's message
//! layer (RFC 7252 §4) all the same ([`Peer::has_message_layer`]: everyone but a stream
//! connection). The HTTP cross-proxy's in-process clients keep theirs: `crate::hc`'s front
//! sends CONs with Message IDs of its own, retransmits them until it has the ACK, matches
//! piggybacked answers by Message ID and acknowledges separate CONs, which keeps it
//! correct however the engine bounds what it holds. So a local client is reliable (no copy
//! of an answer is kept for a replay) but answered on the message layer.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, SocketAddr};

pub use crate::slot_id::{ConnectionId, SessionId, SlotId};

/// A client of the proxy: how its requests came and how its answers go. Ordered so that a
/// client can key an ordered map (`observation_shares.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Peer {
    /// A CoAP client over UDP, at the address its datagrams come from.
    Udp(SocketAddr),
    /// A client inside this process: the HTTP cross-proxy's connection of this number.
    Local(LocalClient),
    /// A coaps client (RFC 7252 §9): a DTLS session of the listener's session table
    /// (`crate::dtls`). Its address was proven by the cookie exchange (RFC 6347 §4.2.1).
    Dtls(SessionId),
    /// A CoAP client over TCP, TLS or WebSockets (RFC 8323): a connection of the stream
    /// listener's table. The TCP handshake proved its address.
    Stream(ConnectionId),
}

/// An in-process client's number, unique for the life of the process. Two 32-bit halves
/// rather than a `u64`, so that a [`Peer`] keeps an address's 4-byte alignment and the
/// engine's per-client keys do not grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocalClient([u32; 2]);

impl LocalClient {
    /// Client number `n`.
    pub fn new(n: u64) -> Self {
        LocalClient([(n >> 32) as u32, n as u32])
    }

    /// Its number.
    pub fn number(self) -> u64 {
        (u64::from(self.0[0]) << 32) | u64::from(self.0[1])
    }
}

impl Peer {
    /// The address the peer is known by if that is all the proxy knows of it: an address
    /// a datagram claims, which must prove that it receives before it is sent more than
    /// it sent (`validation.rs`), and whose sends are budgeted (`budget.rs`). `None` for
    /// a peer that cannot be forged.
    pub fn claimed_address(&self) -> Option<SocketAddr> {
        match self {
            Peer::Udp(addr) => Some(*addr),
            Peer::Local(_) | Peer::Dtls(_) | Peer::Stream(_) => None,
        }
    }
}

impl Peer {
    /// Whether every datagram handed to the peer's transport arrives (an in-process client, a
    /// stream connection):
    /// such a peer never asks again for an answer it was given.
    pub fn is_reliable(&self) -> bool {
        match self {
            Peer::Udp(_) | Peer::Dtls(_) => false,
            Peer::Local(_) | Peer::Stream(_) => true,
        }
    }

    /// Whether the peer speaks CoAP's message layer (RFC 7252 §4): types and Message IDs,
    /// CONs acknowledged and retransmitted, duplicates found by Message ID. A stream
    /// connection does not (RFC 8323 §2.2, §3.2): the type and Message ID of what it hands
    /// the engine are placeholders, which the engine ignores, and the engine's answers to it
    /// carry placeholders its transport drops (`exchange::Reply::Reliable`). An in-process
    /// client keeps the layer (see the module docs).
    pub fn has_message_layer(&self) -> bool {
        !matches!(self, Peer::Stream(_))
    }
}

impl Peer {
    /// The peer as its transport knows it: connected from `ip` (a DTLS session's or a stream
    /// connection's remote address, which the peer's name does not carry).
    pub fn connected_from(self, ip: IpAddr) -> ClientOrigin {
        ClientOrigin {
            peer: self,
            address: Some(ip),
        }
    }
}

/// A client as the transport a datagram came by knows it: its [`Peer`], and the IP address it
/// connects from. The per-source shares (`crate::source_prefix`) count that address's
/// network; the engine asks the origin for it, never which transport the peer uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientOrigin {
    /// The client.
    pub peer: Peer,
    /// Where it connects from, if its transport knows an address the peer's name does not
    /// carry (a UDP peer's is its [`claimed_address`](Peer::claimed_address)).
    pub address: Option<IpAddr>,
}

impl ClientOrigin {
    /// The IP address the client's source is counted by, if it has one: an in-process
    /// client has none.
    pub fn ip(&self) -> Option<IpAddr> {
        (self.address).or_else(|| self.peer.claimed_address().map(|a| a.ip()))
    }
}

impl From<Peer> for ClientOrigin {
    fn from(peer: Peer) -> Self {
        ClientOrigin {
            peer,
            address: None,
        }
    }
}

impl From<SocketAddr> for ClientOrigin {
    fn from(addr: SocketAddr) -> Self {
        Peer::Udp(addr).into()
    }
}

/// By hand: a UDP peer hashes as its address alone, saving the engine's maps one word per
/// hash for the variant (a local client's number cannot look like an address: equal hashes
/// are only a collision, which equality settles).
impl Hash for Peer {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Peer::Udp(addr) => addr.hash(state),
            Peer::Local(client) => client.hash(state),
            Peer::Dtls(session) | Peer::Stream(session) => session.hash(state),
        }
    }
}

impl From<SocketAddr> for Peer {
    fn from(addr: SocketAddr) -> Self {
        Peer::Udp(addr)
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Udp(addr) => addr.fmt(f),
            Peer::Local(client) => write!(f, "HTTP connection {}", client.number()),
            Peer::Dtls(session) => write!(
                f,
                "DTLS session {}.{}",
                session.index(),
                session.generation()
            ),
            Peer::Stream(conn) => write!(
                f,
                "stream connection {}.{}",
                conn.index(),
                conn.generation()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_datagram_source_has_an_address_to_prove() {
        let addr: SocketAddr = "127.0.0.1:5683".parse().unwrap();
        assert_eq!(Peer::Udp(addr).claimed_address(), Some(addr));
        assert_eq!(Peer::Local(LocalClient::new(7)).claimed_address(), None);
        assert_eq!(
            Peer::Local(LocalClient::new(7)).to_string(),
            "HTTP connection 7"
        );
        assert_eq!(Peer::from(addr).to_string(), "127.0.0.1:5683");
        let session = Peer::Dtls(SessionId::new(3, 9));
        assert_eq!(
            (session.claimed_address(), session.is_reliable()),
            (None, false)
        );
        assert_eq!(session.to_string(), "DTLS session 3.9");
        let conn = Peer::Stream(ConnectionId::new(4, 1));
        assert_eq!((conn.claimed_address(), conn.is_reliable()), (None, true));
        assert!(
            !conn.has_message_layer(),
            "RFC 8323 §2.2: no types, no Message IDs"
        );
        assert!(Peer::Local(LocalClient::new(7)).has_message_layer());
        assert!(session.has_message_layer());
        assert_eq!(conn.to_string(), "stream connection 4.1");
        assert_ne!(conn, Peer::Dtls(SessionId::new(4, 1)));
    }

    #[test]
    fn a_client_is_counted_by_the_address_its_transport_knows() {
        let udp: SocketAddr = "192.0.2.7:5683".parse().unwrap();
        assert_eq!(ClientOrigin::from(udp).ip(), Some(udp.ip()));
        let conn = Peer::Stream(ConnectionId::new(4, 1));
        assert_eq!(ClientOrigin::from(conn).ip(), None);
        let ip = "198.51.100.1".parse().unwrap();
        assert_eq!(conn.connected_from(ip).ip(), Some(ip));
        assert_eq!(
            ClientOrigin::from(Peer::Local(LocalClient::new(1))).ip(),
            None
        );
    }

    #[test]
    fn a_peer_is_no_bigger_than_an_address() {
        assert_eq!(size_of::<Peer>(), size_of::<SocketAddr>());
        assert_eq!(align_of::<Peer>(), align_of::<SocketAddr>());
        assert_eq!(LocalClient::new(u64::MAX - 1).number(), u64::MAX - 1);
    }
}
