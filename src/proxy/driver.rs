//! The proxy's sockets: the only place the proxy touches the network.
//!
//! One UDP socket faces clients; one socket per upstream is *connected* to it, so the kernel
//! reports ICMP port unreachable as `ECONNREFUSED` and the engine can answer 5.02 at once.
//! The component moves datagrams between sockets and the engine and keeps one reactor timer
//! armed for the engine's earliest deadline.

use std::io;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};

use mio::net::UdpSocket;
use mio::{Interest, Token};

use super::{Destination, Proxy, ProxyConfig, UpstreamId};
use crate::reactor::{Component, Ctx, Readiness};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// Largest datagram read; anything longer would be truncated, so the buffer is one byte more
/// than the largest UDP payload.
const MAX_DATAGRAM: usize = 65_536;

/// The proxy as a reactor component.
pub struct ProxyComponent {
    engine: Proxy,
    listener: UdpSocket,
    listener_token: Option<Token>,
    upstreams: Vec<(UdpSocket, Option<Token>)>,
    timer: Option<(TimerId, Timestamp)>,
    buf: Vec<u8>,
    /// Datagrams the kernel would not take (send buffer full): counted, then treated as lost.
    pub send_drops: u64,
}

impl ProxyComponent {
    /// Binds the client-facing socket and one connected socket per upstream.
    pub fn bind(listen: SocketAddr, config: ProxyConfig) -> io::Result<Self> {
        let engine = Proxy::new(config);
        let listener = UdpSocket::bind(listen)?;
        let upstreams = engine
            .upstream_addrs()
            .into_iter()
            .map(|addr| connected_socket(addr).map(|s| (s, None)))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(ProxyComponent {
            engine,
            listener,
            listener_token: None,
            upstreams,
            timer: None,
            buf: vec![0; MAX_DATAGRAM],
            send_drops: 0,
        })
    }

    /// The client-facing address actually bound (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The engine, for counters.
    pub fn engine(&self) -> &Proxy {
        &self.engine
    }

    fn read_clients(&mut self, now: Timestamp) {
        loop {
            match self.listener.recv_from(&mut self.buf) {
                Ok((n, from)) => self
                    .engine
                    .handle_client_datagram(now, from, &self.buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // A client's ICMP error surfaces on the shared socket: nothing to do for it.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("client socket: {e}");
                    return;
                }
            }
        }
    }

    fn read_upstream(&mut self, now: Timestamp, id: UpstreamId) {
        loop {
            let socket = &self.upstreams[usize::from(id)].0;
            match socket.recv(&mut self.buf) {
                Ok(n) => self
                    .engine
                    .handle_upstream_datagram(now, id, &self.buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    self.engine.handle_upstream_unreachable(now, id)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("upstream socket {id}: {e}");
                    return;
                }
            }
        }
    }

    /// Sends everything the engine queued.
    fn flush(&mut self, now: Timestamp) {
        while let Some(t) = self.engine.poll_transmit() {
            let sent = match t.to {
                Destination::Client(addr) => self.listener.send_to(&t.payload, addr).map(drop),
                Destination::Upstream(id) => {
                    self.upstreams[usize::from(id)].0.send(&t.payload).map(drop)
                }
            };
            match sent {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    if let Destination::Upstream(id) = t.to {
                        self.engine.handle_upstream_unreachable(now, id);
                    }
                }
                Err(e) => {
                    self.send_drops += 1;
                    log::debug!("send to {:?} failed: {e}", t.to);
                }
            }
        }
    }

    /// Keeps one reactor timer at the engine's earliest deadline.
    fn rearm(&mut self, ctx: &mut Ctx<'_>) {
        let wanted = self.engine.poll_timeout();
        if self.timer.map(|(_, at)| at) == wanted {
            return;
        }
        if let Some((id, _)) = self.timer.take() {
            ctx.cancel_timer(id);
        }
        self.timer = wanted.map(|at| (ctx.set_timer(at, 0), at));
    }

    fn after_input(&mut self, ctx: &mut Ctx<'_>) {
        self.flush(ctx.now());
        self.rearm(ctx);
    }
}

impl Component for ProxyComponent {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        self.listener_token = Some(ctx.register(&mut self.listener, Interest::READABLE)?);
        for (socket, token) in &mut self.upstreams {
            *token = Some(ctx.register(socket, Interest::READABLE)?);
        }
        Ok(())
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, token: Token, _: Readiness) {
        let now = ctx.now();
        if Some(token) == self.listener_token {
            self.read_clients(now);
        } else if let Some(id) = self.upstreams.iter().position(|(_, t)| *t == Some(token)) {
            self.read_upstream(now, id as UpstreamId);
        }
        self.after_input(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, _: u32) {
        if self.timer.map(|(id, _)| id) == Some(timer) {
            self.timer = None;
        }
        self.engine.handle_timeout(ctx.now());
        self.after_input(ctx);
    }

    fn on_shutdown(&mut self, ctx: &mut Ctx<'_>) {
        self.engine.begin_drain();
        self.after_input(ctx);
    }

    fn is_drained(&self) -> bool {
        self.engine.in_flight() == 0
    }
}

fn connected_socket(upstream: SocketAddr) -> io::Result<UdpSocket> {
    let local: SocketAddr = match upstream {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().expect("literal"),
        SocketAddr::V6(_) => "[::]:0".parse().expect("literal"),
    };
    let socket = StdUdpSocket::bind(local)?;
    socket.connect(upstream)?;
    socket.set_nonblocking(true)?;
    Ok(UdpSocket::from_std(socket))
}
