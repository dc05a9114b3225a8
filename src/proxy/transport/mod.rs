//! The proxy's transports: the I/O side of the seam between the sans-IO engine and the network.
//!
//! A transport carries CoAP to clients (a listener), to upstreams (endpoints), or both: plain
//! UDP (`udp.rs`), in-process clients (`local.rs`), coaps (`dtls.rs`, RFC 7252 §9), and CoAP over
//! TCP, TLS and WebSockets (`stream_listener.rs`, `stream_upstream.rs`, RFC 8323). Each one
//! implements [`Transport`], one lifecycle with one signature per step, the way smoltcp's devices
//! or quinn's endpoints meet their drivers:
//!
//! 1. **bind** (its own constructor), then [`start`](Transport::start) with the registration keys
//!    the component gives it ([`KeyRange`]): no transport numbers its sockets outside its range;
//! 2. **input**: [`on_ready`](Transport::on_ready) and [`on_timer`](Transport::on_timer) do its
//!    I/O and hand what arrived to the [`Intake`]: datagrams from clients and upstreams, and the
//!    peers and endpoints that went away. The transport never sees the engine, only that port;
//! 3. **output**: the engine's queue goes out through [`send`](Transport::send), to whichever
//!    transport [`carries`](Transport::carries) the destination;
//! 4. [`settle`](Transport::settle): write what `send` queued, arm its timers. What it learns
//!    there (an ICMP error, a connection that failed) goes to the intake, and what the engine
//!    answers to it goes out in the next turn, which the component asks for at once
//!    (`driver.rs`): one pass per turn, never a loop of rounds.
//!
//! The upstream role adds [`claims`](Transport::claims), [`open_endpoint`](Transport::open_endpoint)
//! and [`close_endpoint`](Transport::close_endpoint) for the engine's [`EndpointEvent`]s.
//! Optional transports (the `dtls` and `tcp` features) are wired in one place: [`bind`].
//!
//! [`EndpointEvent`]: super::EndpointEvent

// I/O module: the transports' lifecycle and the component's routing over them.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::SocketAddr;

use super::{ClientOrigin, Destination, EndpointId, Peer, Proxy};
use crate::metrics::MetricsWriter;
use crate::reactor::keys::KeyRange;
use crate::reactor::{Ctx, Readiness};
use crate::time::Timestamp;
use crate::timer::TimerId;

#[cfg(feature = "dtls")]
pub(super) mod dtls;
mod icmp;
pub(super) mod local;
#[cfg(feature = "tcp")]
pub(super) mod stream_listener;
#[cfg(feature = "tcp")]
mod stream_metrics;
#[cfg(feature = "tcp")]
pub(super) mod stream_upstream;
pub(super) mod udp;

/// How strongly a transport claims the endpoints towards an upstream address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Claim {
    /// Not its upstream.
    No,
    /// Its configured upstream (coaps, coap+tcp): it carries that origin's endpoints.
    Origin,
    /// Any upstream no other transport claims (plain UDP).
    Fallback,
}

/// Why an upstream endpoint failed, as a transport learned it. (Without the optional
/// transports some of the port's words go unused.)
#[cfg_attr(not(all(feature = "dtls", feature = "tcp")), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum UpstreamFailure {
    /// ICMP port unreachable (`ECONNREFUSED`): nobody listens there.
    Unreachable,
    /// The coaps upstream refused the DTLS handshake.
    HandshakeRefused,
    /// The connection to a reliable upstream (RFC 8323) failed or closed.
    Closed,
}

/// The engine's input port, handed to a transport for one step: what the transport received
/// goes in here, at the loop's `now`. The transport knows this port, never the engine.
pub(super) struct Intake<'a> {
    engine: &'a mut Proxy,
    now: Timestamp,
}

#[cfg_attr(not(all(feature = "dtls", feature = "tcp")), allow(dead_code))]
impl<'a> Intake<'a> {
    /// The port into `engine` at `now`.
    pub(super) fn new(engine: &'a mut Proxy, now: Timestamp) -> Self {
        Intake { engine, now }
    }

    /// The loop's time of this step.
    pub(super) fn now(&self) -> Timestamp {
        self.now
    }

    /// A datagram from a client (a UDP address, or a peer its transport names).
    pub(super) fn client(&mut self, from: impl Into<ClientOrigin>, bytes: &[u8]) {
        self.engine.handle_client_datagram(self.now, from, bytes);
    }

    /// The client is gone: an ICMP port unreachable, an ended session or connection.
    pub(super) fn client_gone(&mut self, peer: Peer) {
        self.engine.handle_client_unreachable(self.now, peer);
    }

    /// A datagram from the upstream behind endpoint `id`.
    pub(super) fn upstream(&mut self, id: EndpointId, bytes: &[u8]) {
        self.engine.handle_upstream_datagram(self.now, id, bytes);
    }

    /// Endpoint `id` failed: what waits there is answered at once.
    pub(super) fn upstream_failed(&mut self, id: EndpointId, why: UpstreamFailure) {
        let (engine, now) = (&mut *self.engine, self.now);
        match why {
            UpstreamFailure::Unreachable => engine.handle_upstream_unreachable(now, id),
            UpstreamFailure::HandshakeRefused => engine.handle_upstream_refused(now, id),
            UpstreamFailure::Closed => engine.handle_upstream_closed(now, id),
        }
    }

    /// Bytes the engine holds queued for the transports: a stream connection takes its
    /// requests while this stays under its bound (`stream_listener.rs`).
    pub(super) fn queued_bytes(&self) -> usize {
        self.engine.queued_bytes()
    }

    /// The clients the engine holds something for (a request in flight, an answer being
    /// delivered, an observation): none of them is closed to make room for a newcomer.
    pub(super) fn busy_clients(&self) -> impl Iterator<Item = Peer> + '_ {
        self.engine.busy_clients()
    }
}

/// One transport's lifecycle. See the module docs.
pub(super) trait Transport {
    /// How many registration keys it needs (its sockets and timers).
    fn keys_needed(&self) -> u32;

    /// Registers its sockets with the loop under `keys`, which it keeps.
    fn start(&mut self, ctx: &mut Ctx<'_>, keys: KeyRange) -> io::Result<()>;

    /// The keys it was given at [`start`](Self::start).
    fn keys(&self) -> KeyRange;

    /// One of its sources is ready: read, and hand what came to `intake`.
    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness, intake: &mut Intake);

    /// One of its timers fired.
    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32, intake: &mut Intake);

    /// Whether it carries datagrams to `to`.
    fn carries(&self, to: Destination) -> bool;

    /// Queues or sends a datagram the engine sent to `to` (which it [`carries`](Self::carries));
    /// `NotConnected` when the peer's session or connection has ended.
    fn send(&mut self, now: Timestamp, to: Destination, payload: &[u8]) -> io::Result<()>;

    /// After the engine's datagrams went out: writes, and arms its timers.
    fn settle(&mut self, ctx: &mut Ctx<'_>, intake: &mut Intake);

    /// Whether the endpoints towards `origin` are its to open.
    fn claims(&self, _origin: SocketAddr) -> Claim {
        Claim::No
    }

    /// Opens endpoint `id` towards `origin` (which it [`claims`](Self::claims)).
    fn open_endpoint(
        &mut self,
        _ctx: &mut Ctx<'_>,
        _id: EndpointId,
        _origin: SocketAddr,
    ) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// Closes endpoint `id`, if it is one of its.
    fn close_endpoint(&mut self, _ctx: &mut Ctx<'_>, _id: EndpointId) {}

    /// The proxy is shutting down: stop taking clients, say goodbye (RFC 8323 §5.5 Release).
    fn shutdown(&mut self, _ctx: &mut Ctx<'_>, _intake: &mut Intake) {}

    /// Its listening addresses, by URI scheme (`coap`, `coaps`, `coap+tcp`, ...).
    fn listening(&self, _out: &mut Vec<(&'static str, SocketAddr)>) {}

    /// Its metrics.
    fn write_metrics(&self, _out: &mut MetricsWriter) {}
}

/// Where the proxy takes its clients: plain CoAP over UDP, coaps, or both. With coaps alone
/// no plain socket is opened: it would let clients past the keys.
#[derive(Clone, Debug, Default)]
pub struct Listeners {
    /// The plain CoAP address (`--listen`).
    pub plain: Option<SocketAddr>,
    /// The coaps address and its keys (`--listen-dtls`).
    #[cfg(feature = "dtls")]
    pub dtls: Option<(SocketAddr, crate::dtls::DtlsServerConfig)>,
    /// The RFC 8323 listeners (`--listen-tcp`, `--listen-tls`, `--listen-ws`), at most 4.
    #[cfg(feature = "tcp")]
    pub streams: Vec<stream_listener::StreamListen>,
}

impl Listeners {
    /// Plain CoAP at `addr` alone. (The other fields exist with their features only, so the
    /// update is empty without them.)
    #[allow(clippy::needless_update)]
    pub fn plain(addr: SocketAddr) -> Self {
        Listeners {
            plain: Some(addr),
            ..Listeners::default()
        }
    }
}

/// Binds every listener `listeners` names, as transports: plain UDP first (the most datagrams,
/// so sends find it first), then coaps, then the stream listeners. The in-process clients'
/// transport is the component's own (`local.rs`).
pub(super) fn bind(listeners: &Listeners) -> io::Result<Vec<Box<dyn Transport>>> {
    let mut transports: Vec<Box<dyn Transport>> = Vec::with_capacity(3);
    transports.push(Box::new(udp::Udp::bind(listeners.plain)?));
    #[cfg(feature = "dtls")]
    if let Some((addr, config)) = &listeners.dtls {
        transports.push(Box::new(dtls::DtlsListener::bind(*addr, config)?));
    }
    #[cfg(feature = "tcp")]
    if !listeners.streams.is_empty() {
        let streams = stream_listener::StreamListeners::bind(&listeners.streams)?;
        transports.push(Box::new(streams));
    }
    Ok(transports)
}
