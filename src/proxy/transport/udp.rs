//! Plain CoAP over UDP (RFC 7252): the client-facing socket and the upstream endpoints' sockets.
//!
//! Towards each upstream the engine keeps a pool of endpoints and says when to open or close one
//! ([`EndpointEvent`](crate::proxy::EndpointEvent)); each is a socket on its own ephemeral port,
//! *connected* to the upstream, so the kernel reports ICMP port unreachable as `ECONNREFUSED`
//! and the engine can answer 5.02 at once. Each socket is a [`Datagram`]: read until
//! `WouldBlock` or its budget, so a client that floods cannot starve the upstream sockets (or
//! the other way).
//!
//! The client-facing socket is not connected, and Linux reports ICMP errors on such a socket
//! only with `IP_RECVERR`/`IPV6_RECVERR` set: each is then queued with the destination of the
//! datagram that caused it, read with `recvmsg(MSG_ERRQUEUE)` (as libcoap does). A port
//! unreachable from a client tells the engine that nobody listens there any more: its
//! observations end, and the proxy stops reflecting notifications at a closed port (issue 13).

// I/O module: owns the proxy's UDP sockets.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};

use mio::net::UdpSocket;

use super::icmp::{enable_recverr, read_icmp_error, IcmpError};
use super::{Claim, Intake, Transport, UpstreamFailure};
use crate::net::{connected_udp, MAX_UDP_DATAGRAM};
use crate::proxy::{Destination, EndpointId, Peer};
use crate::reactor::datagram::{Datagram, Received, RECV_BUDGET};
use crate::reactor::keys::KeyRange;
use crate::reactor::{Ctx, Readiness};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// The most endpoints open at once whose keys a transport's range holds (the engine numbers
/// them from 0 and reuses freed numbers).
pub(in crate::proxy) const MAX_ENDPOINTS: u32 = 1 << 22;

/// The client-facing socket: bound at construction, registered at start.
enum ClientSocket {
    Bound(UdpSocket),
    Open(Datagram),
}

/// Upstream endpoints' connected sockets by [`EndpointId`], each registered under its key in a
/// range (the engine reuses freed numbers, so this stays as long as the most endpoints ever
/// open at once). Shared by plain UDP and the coaps upstream, which encrypts on the same kind.
#[derive(Default)]
pub(in crate::proxy) struct EndpointSockets {
    sockets: Vec<Option<Datagram>>,
    keys: KeyRange,
}

impl EndpointSockets {
    /// Sockets keyed within `keys` (endpoint `id` has the range's key `id`).
    pub(in crate::proxy) fn new(keys: KeyRange) -> Self {
        EndpointSockets {
            sockets: Vec::new(),
            keys,
        }
    }

    /// The endpoint whose socket has `key`.
    pub(in crate::proxy) fn endpoint_of(&self, key: u32) -> Option<EndpointId> {
        self.keys.index(key).map(EndpointId)
    }

    /// Opens a socket connected to `origin` for endpoint `id`.
    pub(in crate::proxy) fn open(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: EndpointId,
        origin: SocketAddr,
    ) -> io::Result<&Datagram> {
        let key = self.keys.key(id.0).ok_or(io::ErrorKind::InvalidInput)?;
        let socket = Datagram::register(ctx, connected_udp(origin)?, key)?;
        let index = id.0 as usize;
        if self.sockets.len() <= index {
            self.sockets.resize_with(index + 1, || None);
        }
        Ok(self.sockets[index].insert(socket))
    }

    /// Endpoint `id`'s socket, if open.
    pub(in crate::proxy) fn get(&self, id: EndpointId) -> Option<&Datagram> {
        self.sockets.get(id.0 as usize)?.as_ref()
    }

    /// Endpoint `id`'s socket, if open.
    pub(in crate::proxy) fn get_mut(&mut self, id: EndpointId) -> Option<&mut Datagram> {
        self.sockets.get_mut(id.0 as usize)?.as_mut()
    }

    /// Takes endpoint `id`'s socket out, to close it.
    pub(in crate::proxy) fn take(&mut self, id: EndpointId) -> Option<Datagram> {
        self.sockets.get_mut(id.0 as usize)?.take()
    }
}

/// The plain UDP transport. See the module docs.
pub(in crate::proxy) struct Udp {
    clients: Option<ClientSocket>,
    /// The client-facing socket's descriptor, for its error queue (owned by `clients`).
    clients_fd: RawFd,
    local_addr: Option<SocketAddr>,
    endpoints: EndpointSockets,
    keys: KeyRange,
    /// A send to a client failed with a pending ICMP error: the error queue is read at settle.
    refused_clients: bool,
    buf: Vec<u8>,
}

impl Udp {
    /// Binds the client-facing socket at `listen`, if plain CoAP is served; the endpoints open
    /// as the engine asks.
    pub(in crate::proxy) fn bind(listen: Option<SocketAddr>) -> io::Result<Self> {
        let (clients, clients_fd, local_addr) = match listen {
            Some(listen) => {
                let socket = UdpSocket::bind(listen)?;
                let fd = socket.as_raw_fd();
                enable_recverr(fd, listen.is_ipv6())?;
                let addr = socket.local_addr()?;
                (Some(ClientSocket::Bound(socket)), fd, Some(addr))
            }
            None => (None, -1, None),
        };
        Ok(Udp {
            clients,
            clients_fd,
            local_addr,
            endpoints: EndpointSockets::default(),
            keys: KeyRange::default(),
            refused_clients: false,
            buf: vec![0; MAX_UDP_DATAGRAM],
        })
    }

    fn read_clients(&mut self, ctx: &mut Ctx<'_>, intake: &mut Intake) {
        let Some(ClientSocket::Open(socket)) = &mut self.clients else {
            return;
        };
        let read = socket.recv(ctx, &mut self.buf, |received| match received {
            Received::Datagram { data, from } => intake.client(from, data),
            // A client's ICMP error: who it was is in the error queue, read below.
            Received::Refused => {}
        });
        if let Err(e) = read {
            log::warn!("client socket: {e}");
        }
        self.read_client_errors(intake);
    }

    /// Drains the client socket's error queue: each ICMP port unreachable names the client
    /// it came for. Bounded like a receive, and cheap when empty (one `EAGAIN`).
    fn read_client_errors(&mut self, intake: &mut Intake) {
        if !matches!(self.clients, Some(ClientSocket::Open(_))) {
            return;
        }
        for _ in 0..RECV_BUDGET {
            match read_icmp_error(self.clients_fd) {
                Ok(Some(IcmpError::PortUnreachable(client))) => {
                    intake.client_gone(Peer::Udp(client))
                }
                Ok(Some(IcmpError::Other)) => {}
                Ok(None) => return,
                Err(e) => {
                    log::debug!("client socket error queue: {e}");
                    return;
                }
            }
        }
    }

    fn read_endpoint(&mut self, ctx: &mut Ctx<'_>, id: EndpointId, intake: &mut Intake) {
        let Some(socket) = self.endpoints.get_mut(id) else {
            return;
        };
        let read = socket.recv(ctx, &mut self.buf, |received| match received {
            Received::Datagram { data, .. } => intake.upstream(id, data),
            Received::Refused => intake.upstream_failed(id, UpstreamFailure::Unreachable),
        });
        if let Err(e) = read {
            log::warn!("upstream endpoint socket {}: {e}", id.0);
        }
    }

    fn send_to_client(&mut self, addr: SocketAddr, payload: &[u8]) -> io::Result<()> {
        let Some(ClientSocket::Open(socket)) = &self.clients else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        // With IP_RECVERR a pending ICMP error fails the next send on the socket, which was
        // for someone else: the datagram is sent again (once), and the queue read at settle.
        match socket.send_to(payload, addr) {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                self.refused_clients = true;
                socket.send_to(payload, addr)
            }
            sent => sent,
        }
    }
}

impl Transport for Udp {
    fn keys_needed(&self) -> u32 {
        1 + MAX_ENDPOINTS
    }

    fn start(&mut self, ctx: &mut Ctx<'_>, keys: KeyRange) -> io::Result<()> {
        self.keys = keys;
        let mut space = keys.space();
        let client_key = space.take(1)?;
        self.endpoints = EndpointSockets::new(space.take(MAX_ENDPOINTS)?);
        if let Some(ClientSocket::Bound(socket)) = self.clients.take() {
            let key = client_key.key(0).ok_or(io::ErrorKind::InvalidInput)?;
            self.clients = Some(ClientSocket::Open(Datagram::register(ctx, socket, key)?));
        }
        Ok(())
    }

    fn keys(&self) -> KeyRange {
        self.keys
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, _: Readiness, intake: &mut Intake) {
        match self.endpoints.endpoint_of(key) {
            Some(id) => self.read_endpoint(ctx, id, intake),
            None => self.read_clients(ctx, intake),
        }
    }

    fn on_timer(&mut self, _: &mut Ctx<'_>, _: TimerId, _: u32, _: &mut Intake) {}

    fn carries(&self, to: Destination) -> bool {
        match to {
            Destination::Client(peer) => matches!(peer, Peer::Udp(_)),
            Destination::Upstream(id) => self.endpoints.get(id).is_some(),
        }
    }

    fn send(&mut self, _: Timestamp, to: Destination, payload: &[u8]) -> io::Result<()> {
        match to {
            Destination::Client(Peer::Udp(addr)) => self.send_to_client(addr, payload),
            Destination::Upstream(id) => match self.endpoints.get(id) {
                Some(socket) => socket.send(payload),
                None => Err(io::ErrorKind::NotConnected.into()),
            },
            Destination::Client(_) => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    fn settle(&mut self, _: &mut Ctx<'_>, intake: &mut Intake) {
        if std::mem::take(&mut self.refused_clients) {
            self.read_client_errors(intake);
        }
    }

    fn claims(&self, _: SocketAddr) -> Claim {
        Claim::Fallback
    }

    fn open_endpoint(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: EndpointId,
        origin: SocketAddr,
    ) -> io::Result<()> {
        self.endpoints.open(ctx, id, origin).map(drop)
    }

    fn close_endpoint(&mut self, ctx: &mut Ctx<'_>, id: EndpointId) {
        if let Some(socket) = self.endpoints.take(id) {
            socket.close(ctx);
        }
    }

    fn listening(&self, out: &mut Vec<(&'static str, SocketAddr)>) {
        out.extend(self.local_addr.map(|addr| ("coap", addr)));
    }
}
