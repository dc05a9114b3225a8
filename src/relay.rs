//! A stateless UDP relay: the benchmark baseline for the proxy.
//!
//! It makes the same system calls per datagram as [`ProxyComponent`](crate::proxy::ProxyComponent)
//! on the same reactor (one client-facing socket, one socket connected to the upstream, each a
//! [`Datagram`] read until `WouldBlock` or its budget) but keeps no per-exchange state: every
//! datagram from a client goes upstream unchanged, every datagram from the upstream goes to
//! the most recent client. With
//! one client that is exactly a forwarding path, so its throughput is the ceiling any proxy on
//! this reactor can reach; the proxy's cost is the distance to it. It is not a CoAP proxy:
//! with several clients, answers go to whoever spoke last.

// I/O module: The benchmark's stateless relay: nothing but sockets.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::SocketAddr;

use mio::net::UdpSocket;

use crate::net::{connected_udp, MAX_UDP_DATAGRAM};
use crate::reactor::datagram::{Datagram, Received};
use crate::reactor::{Component, Ctx, Readiness};
use crate::timer::TimerId;

/// Registration keys of the two sockets.
const FRONT: u32 = 0;
const BACK: u32 = 1;

/// The two sockets: bound by [`Relay::bind`], registered at start.
enum Sockets {
    Bound { front: UdpSocket, back: UdpSocket },
    Open { front: Datagram, back: Datagram },
}

/// The relay as a reactor component.
pub struct Relay {
    sockets: Option<Sockets>,
    local_addr: SocketAddr,
    /// Where the last client datagram came from: the only thing remembered.
    client: Option<SocketAddr>,
    buf: Vec<u8>,
}

impl Relay {
    /// Binds `listen` and a socket connected to `upstream`.
    pub fn bind(listen: SocketAddr, upstream: SocketAddr) -> io::Result<Relay> {
        let front = UdpSocket::bind(listen)?;
        Ok(Relay {
            local_addr: front.local_addr()?,
            sockets: Some(Sockets::Bound {
                front,
                back: connected_udp(upstream)?,
            }),
            client: None,
            buf: vec![0; MAX_UDP_DATAGRAM],
        })
    }

    /// The client-facing address actually bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local_addr)
    }
}

impl Component for Relay {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        if let Some(Sockets::Bound { front, back }) = self.sockets.take() {
            self.sockets = Some(Sockets::Open {
                front: Datagram::register(ctx, front, FRONT)?,
                back: Datagram::register(ctx, back, BACK)?,
            });
        }
        Ok(())
    }

    /// Errors other than an ICMP refusal end the read until the next readiness; a full send
    /// buffer drops the datagram, as the network would.
    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, _ready: Readiness) {
        let Some(Sockets::Open { front, back }) = &mut self.sockets else {
            return;
        };
        let client = &mut self.client;
        let _ = match key {
            FRONT => front.recv(ctx, &mut self.buf, |received| {
                if let Received::Datagram { data, from } = received {
                    *client = Some(from);
                    let _ = back.send(data);
                }
            }),
            _ => back.recv(ctx, &mut self.buf, |received| {
                if let (Received::Datagram { data, .. }, Some(to)) = (received, *client) {
                    let _ = front.send_to(data, to);
                }
            }),
        };
    }

    fn on_timer(&mut self, _ctx: &mut Ctx<'_>, _timer: TimerId, _key: u32) {}
}
