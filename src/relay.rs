//! A stateless UDP relay: the benchmark baseline for the proxy.
//!
//! It makes the same system calls per datagram as [`ProxyComponent`](crate::proxy::ProxyComponent)
//! on the same reactor (one client-facing socket, one socket connected to the upstream, reads
//! until `WouldBlock`) but keeps no per-exchange state: every datagram from a client goes
//! upstream unchanged, every datagram from the upstream goes to the most recent client. With
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
use mio::{Interest, Token};

use crate::net::{connected_udp, MAX_UDP_DATAGRAM};
use crate::reactor::{Component, Ctx, Readiness};
use crate::timer::TimerId;

/// The relay as a reactor component.
pub struct Relay {
    front: UdpSocket,
    back: UdpSocket,
    front_token: Option<Token>,
    /// Where the last client datagram came from: the only thing remembered.
    client: Option<SocketAddr>,
    buf: Vec<u8>,
}

impl Relay {
    /// Binds `listen` and a socket connected to `upstream`.
    pub fn bind(listen: SocketAddr, upstream: SocketAddr) -> io::Result<Relay> {
        Ok(Relay {
            front: UdpSocket::bind(listen)?,
            back: connected_udp(upstream)?,
            front_token: None,
            client: None,
            buf: vec![0; MAX_UDP_DATAGRAM],
        })
    }

    /// The client-facing address actually bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.front.local_addr()
    }

    fn client_to_upstream(&mut self) {
        loop {
            match self.front.recv_from(&mut self.buf) {
                Ok((n, from)) => {
                    self.client = Some(from);
                    // A full send buffer drops the datagram, as the network would.
                    let _ = self.back.send(&self.buf[..n]);
                }
                Err(e) if skip_one(&e) => continue,
                Err(_) => return,
            }
        }
    }

    fn upstream_to_client(&mut self) {
        loop {
            match self.back.recv(&mut self.buf) {
                Ok(n) => {
                    if let Some(client) = self.client {
                        let _ = self.front.send_to(&self.buf[..n], client);
                    }
                }
                Err(e) if skip_one(&e) => continue,
                Err(_) => return,
            }
        }
    }
}

/// An ICMP refusal or an interrupt concerns one datagram; anything else (`WouldBlock`
/// included) ends the read loop until the next readiness.
fn skip_one(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::Interrupted
    )
}

impl Component for Relay {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        self.front_token = Some(ctx.register(&mut self.front, Interest::READABLE)?);
        ctx.register(&mut self.back, Interest::READABLE)?;
        Ok(())
    }

    fn on_ready(&mut self, _ctx: &mut Ctx<'_>, token: Token, _ready: Readiness) {
        if Some(token) == self.front_token {
            self.client_to_upstream();
        } else {
            self.upstream_to_client();
        }
    }

    fn on_timer(&mut self, _ctx: &mut Ctx<'_>, _timer: TimerId, _key: u32) {}
}
