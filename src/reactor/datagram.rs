//! The datagram driver: one UDP socket between the loop and a component's sans-IO core.
//!
//! [`Datagram`] owns the socket and its registration and does the edge-triggered receive
//! loop: until `WouldBlock` or [`RECV_BUDGET`] datagrams, each handed to the component's
//! closure as a [`Received`]; an ICMP error reported on the socket (`ECONNREFUSED`) concerns
//! one datagram and does not end the loop. At the budget the socket yields to the loop's
//! other sources and asks to be called again next turn ([`Ctx::ready_again`]): sources are
//! edge-triggered, so what it left would not be reported again. Sending is one non-blocking
//! `send`; a full send buffer drops the datagram, as the network would, and the caller counts
//! it.

// I/O module: The datagram driver: owns a component's UDP socket, receives and sends on it.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::SocketAddr;

use mio::net::UdpSocket;
use mio::Interest;

use super::{Ctx, Registration};

/// Datagrams received per readiness before a socket yields to the loop's other sources. Small
/// enough that a turn stays short under a backlog (64 datagrams take about 0.2 ms here), so a
/// due timer waits little, and a burst read at once does not put hundreds of requests in
/// flight before their answers can be read: with 256, one client's backlog after a stall of a
/// few milliseconds went past the per-client in-flight cap and got 5.03 (issue 26).
pub const RECV_BUDGET: usize = 64;

/// The receive buffer asked of the kernel for every datagram socket of the loop. Linux's
/// default (`net.core.rmem_default`, 208 KiB) holds 256 datagrams of 20 bytes, as each is
/// charged its whole kernel buffer (about 830 B): at 100k datagrams/s a host hiccup of 3 ms
/// overflows it, and the relay and the proxy both lost requests that way at half load. The
/// kernel doubles the value and caps it at `net.core.rmem_max` (4 MiB here: 5,041 such
/// datagrams, 50 ms at that rate); the memory is used only while datagrams wait.
pub const RECV_BUFFER_BYTES: usize = 2 << 20;

/// What one receive found.
#[derive(Debug)]
pub enum Received<'a> {
    /// A datagram and who sent it.
    Datagram {
        /// Its payload.
        data: &'a [u8],
        /// The sender (on a connected socket, the peer).
        from: SocketAddr,
    },
    /// The kernel reported an ICMP port unreachable for something this socket sent (on a
    /// connected socket: from its peer).
    Refused,
}

/// A registered UDP socket. See the module docs.
pub struct Datagram {
    socket: UdpSocket,
    registration: Registration,
    /// The socket is connected: receive with `recv`, and the sender is the peer.
    peer: Option<SocketAddr>,
}

impl Datagram {
    /// Registers `socket` (readable) under `key`.
    pub fn register(ctx: &mut Ctx<'_>, mut socket: UdpSocket, key: u32) -> io::Result<Self> {
        let peer = socket.peer_addr().ok();
        if let Err(e) = crate::net::set_receive_buffer(&socket, RECV_BUFFER_BYTES) {
            log::debug!("SO_RCVBUF: {e} (the kernel's default stays)");
        }
        let registration = ctx.register(&mut socket, Interest::READABLE, key)?;
        Ok(Datagram {
            socket,
            registration,
            peer,
        })
    }

    /// Receives until `WouldBlock` or the budget, handing each datagram or refusal to `on`.
    /// Another error ends the loop and is returned (the next readiness tries again).
    pub fn recv(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
        mut on: impl FnMut(Received<'_>),
    ) -> io::Result<()> {
        for _ in 0..RECV_BUDGET {
            let received = match self.peer {
                Some(peer) => self.socket.recv(buf).map(|n| (n, peer)),
                None => self.socket.recv_from(buf),
            };
            match received {
                Ok((n, from)) => on(Received::Datagram {
                    data: &buf[..n],
                    from,
                }),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => on(Received::Refused),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        ctx.ready_again(&self.registration);
        Ok(())
    }

    /// Sends one datagram to `to` (an unconnected socket).
    pub fn send_to(&self, data: &[u8], to: SocketAddr) -> io::Result<()> {
        self.socket.send_to(data, to).map(drop)
    }

    /// Sends one datagram to the peer (a connected socket).
    pub fn send(&self, data: &[u8]) -> io::Result<()> {
        self.socket.send(data).map(drop)
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Deregisters the socket; it closes.
    pub fn close(mut self, ctx: &mut Ctx<'_>) {
        ctx.deregister(&mut self.socket, self.registration);
    }
}
