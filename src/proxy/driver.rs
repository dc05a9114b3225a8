//! The proxy's sockets: the only place the proxy touches the network.
//!
//! One UDP socket faces clients. Towards each upstream the engine keeps a pool of endpoints
//! and says when to open or close one ([`EndpointEvent`]); each is a socket on its own
//! ephemeral port, *connected* to the upstream, so the kernel reports ICMP port unreachable
//! as `ECONNREFUSED` and the engine can answer 5.02 at once. The component moves datagrams
//! between sockets and the engine and keeps one reactor timer armed for the engine's earliest
//! deadline.

// I/O module: The proxy engine's driver: owns its sockets and draws its seeds from the OS.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;

use mio::net::UdpSocket;
use mio::{Interest, Token};

use super::metrics::{write_proxy_metrics, write_upstream_metrics};
use super::report::Report;
use super::{Destination, EndpointEvent, EndpointId, Proxy, ProxyConfig, Seeds};
use crate::metrics::MetricsWriter;
use crate::net::{connected_udp, MAX_UDP_DATAGRAM};
use crate::reactor::{Component, Ctx, Readiness, TimerSlot};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// The proxy as a reactor component.
pub struct ProxyComponent {
    engine: Proxy,
    listener: UdpSocket,
    listener_token: Option<Token>,
    /// Upstream endpoints' sockets by [`EndpointId`] (the engine reuses freed numbers, so this
    /// stays as long as the most endpoints ever open at once).
    endpoints: Vec<Option<(UdpSocket, Token)>>,
    by_token: HashMap<Token, EndpointId>,
    /// One reactor timer at the engine's earliest deadline.
    timer: TimerSlot,
    /// The engine's events, logged and rate-limited.
    report: Report,
    buf: Vec<u8>,
    /// The loop's clock at the latest event, for the Message ID gauge of a scrape.
    last_now: Timestamp,
    /// Datagrams the kernel would not take (send buffer full): counted, then treated as lost.
    pub send_drops: u64,
}

impl ProxyComponent {
    /// Binds the client-facing socket; the upstream sockets open when the component starts.
    pub fn bind(listen: SocketAddr, mut config: ProxyConfig) -> io::Result<Self> {
        let listener = UdpSocket::bind(listen)?;
        config.local_addr = Some(listener.local_addr()?);
        Ok(ProxyComponent {
            engine: Proxy::new(config.clone(), seeds(config.seed)),
            listener,
            listener_token: None,
            endpoints: Vec::new(),
            by_token: HashMap::new(),
            timer: TimerSlot::default(),
            report: Report::default(),
            buf: vec![0; MAX_UDP_DATAGRAM],
            last_now: Timestamp::ZERO,
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

    fn read_upstream(&mut self, now: Timestamp, id: EndpointId) {
        loop {
            let Some(Some((socket, _))) = self.endpoints.get(id.0 as usize) else {
                return;
            };
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
                    log::warn!("upstream endpoint socket {}: {e}", id.0);
                    return;
                }
            }
        }
    }

    /// Opens and closes the upstream sockets the engine asks for. At start-up a socket that
    /// cannot be opened is an error; later the engine is told and asks again a bit later.
    fn apply_endpoint_events(&mut self, ctx: &mut Ctx<'_>, starting: bool) -> io::Result<()> {
        let now = ctx.now();
        while let Some(event) = self.engine.poll_endpoint_event() {
            match event {
                EndpointEvent::Open { id, peer } => match self.open(ctx, id, peer) {
                    Ok(()) => self.engine.endpoint_opened(now, id),
                    Err(e) if starting => {
                        return Err(io::Error::new(e.kind(), format!("upstream {peer}: {e}")))
                    }
                    Err(e) => {
                        log::warn!("cannot open another socket towards upstream {peer}: {e}");
                        self.engine.endpoint_failed(now, id);
                    }
                },
                EndpointEvent::Close { id } => {
                    let slot = self.endpoints.get_mut(id.0 as usize).and_then(Option::take);
                    if let Some((mut socket, token)) = slot {
                        ctx.deregister(&mut socket, token);
                        self.by_token.remove(&token);
                    }
                }
            }
        }
        Ok(())
    }

    fn open(&mut self, ctx: &mut Ctx<'_>, id: EndpointId, peer: SocketAddr) -> io::Result<()> {
        let mut socket = connected_udp(peer)?;
        let token = ctx.register(&mut socket, Interest::READABLE)?;
        let index = id.0 as usize;
        if self.endpoints.len() <= index {
            self.endpoints.resize_with(index + 1, || None);
        }
        self.endpoints[index] = Some((socket, token));
        self.by_token.insert(token, id);
        Ok(())
    }

    /// Sends everything the engine queued, after opening the sockets it needs.
    fn flush(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        let _ = self.apply_endpoint_events(ctx, false);
        let (listener, endpoints) = (&self.listener, &self.endpoints);
        let send = |to: Destination, payload: &[u8]| {
            let sent = match to {
                Destination::Client(addr) => listener.send_to(payload, addr).map(drop),
                Destination::Upstream(id) => match endpoints.get(id.0 as usize) {
                    Some(Some((socket, _))) => socket.send(payload).map(drop),
                    _ => Err(io::Error::from(io::ErrorKind::NotConnected)),
                },
            };
            (to, sent)
        };
        while let Some((to, sent)) = self.engine.poll_transmit_with(send) {
            match sent {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    if let Destination::Upstream(id) = to {
                        self.engine.handle_upstream_unreachable(now, id);
                    }
                }
                Err(e) => {
                    self.send_drops += 1;
                    log::debug!("send to {to:?} failed: {e}");
                }
            }
        }
        // Answering an ICMP error can have asked for sockets too.
        let _ = self.apply_endpoint_events(ctx, false);
    }

    fn after_input(&mut self, ctx: &mut Ctx<'_>) {
        self.last_now = ctx.now();
        self.flush(ctx);
        let bound = self.engine.max_upstream_endpoints();
        while let Some(event) = self.engine.poll_event() {
            self.report.log(ctx.now(), event, bound);
        }
        // The engine's earliest deadline moves later with nearly every answer (its ack-delay
        // timer goes); `handle_timeout` may run early, so an earlier timer is left armed.
        self.timer.set_no_later(ctx, self.engine.poll_timeout(), 0);
    }
}

impl Component for ProxyComponent {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        self.listener_token = Some(ctx.register(&mut self.listener, Interest::READABLE)?);
        self.apply_endpoint_events(ctx, true)
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, token: Token, _: Readiness) {
        let now = ctx.now();
        if Some(token) == self.listener_token {
            self.read_clients(now);
        } else if let Some(&id) = self.by_token.get(&token) {
            self.read_upstream(now, id);
        }
        self.after_input(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, _: u32) {
        self.timer.fired(timer);
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

    fn write_metrics(&self, out: &mut MetricsWriter) {
        write_proxy_metrics(&self.engine.counters(), self.send_drops, out);
        write_upstream_metrics(&self.engine.upstream_stats(self.last_now), out);
    }
}

/// The engine's randomness from the OS; `--seed` fixes the part that makes a run repeatable.
fn seeds(configured: Option<u64>) -> Seeds {
    use rand::{Rng, SeedableRng};
    let mut os = rand::rngs::SmallRng::from_os_rng();
    Seeds {
        rng: configured.unwrap_or_else(|| os.random()),
        hash: os.random(),
    }
}
