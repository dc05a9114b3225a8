//! The proxy's sockets: the only place the proxy touches the network.
//!
//! One UDP socket faces clients. Towards each upstream the engine keeps a pool of endpoints
//! and says when to open or close one ([`EndpointEvent`]); each is a socket on its own
//! ephemeral port, *connected* to the upstream, so the kernel reports ICMP port unreachable
//! as `ECONNREFUSED` and the engine can answer 5.02 at once. The component moves datagrams
//! between sockets and the engine and keeps one reactor timer armed for the engine's earliest
//! deadline. Each socket is a [`Datagram`]: the driver reads it until `WouldBlock` or its
//! budget, so a client that floods cannot starve the upstream sockets (or the other way).

// I/O module: The proxy engine's driver: owns its sockets and draws its seeds from the OS.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::SocketAddr;

use mio::net::UdpSocket;

use super::metrics::{write_proxy_metrics, write_upstream_metrics};
use super::report::Report;
use super::{Destination, EndpointEvent, EndpointId, Proxy, ProxyConfig, Seeds};
use crate::metrics::{MetricsSource, MetricsWriter};
use crate::net::{connected_udp, MAX_UDP_DATAGRAM};
use crate::reactor::datagram::{Datagram, Received};
use crate::reactor::{Component, Ctx, Readiness, TimerSlot};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// The client-facing socket's registration key; upstream endpoint `id` has key `id + 1`.
const CLIENTS: u32 = 0;

/// The client-facing socket: bound by [`ProxyComponent::bind`], registered at start.
enum ClientSocket {
    Bound(UdpSocket),
    Open(Datagram),
}

/// The proxy as a reactor component.
pub struct ProxyComponent {
    engine: Proxy,
    clients: Option<ClientSocket>,
    local_addr: SocketAddr,
    /// Upstream endpoints' sockets by [`EndpointId`] (the engine reuses freed numbers, so this
    /// stays as long as the most endpoints ever open at once).
    endpoints: Vec<Option<Datagram>>,
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
        let local_addr = listener.local_addr()?;
        config.local_addr = Some(local_addr);
        Ok(ProxyComponent {
            engine: Proxy::new(config.clone(), seeds(config.seed)),
            clients: Some(ClientSocket::Bound(listener)),
            local_addr,
            endpoints: Vec::new(),
            timer: TimerSlot::default(),
            report: Report::default(),
            buf: vec![0; MAX_UDP_DATAGRAM],
            last_now: Timestamp::ZERO,
            send_drops: 0,
        })
    }

    /// The client-facing address actually bound (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local_addr)
    }

    /// The engine, for counters.
    pub fn engine(&self) -> &Proxy {
        &self.engine
    }

    fn read_clients(&mut self, ctx: &mut Ctx<'_>) {
        let Some(ClientSocket::Open(socket)) = &mut self.clients else {
            return;
        };
        let (now, engine) = (ctx.now(), &mut self.engine);
        let read = socket.recv(ctx, &mut self.buf, |received| match received {
            Received::Datagram { data, from } => engine.handle_client_datagram(now, from, data),
            // A client's ICMP error surfaces on the shared socket: nothing to do for it.
            Received::Refused => {}
        });
        if let Err(e) = read {
            log::warn!("client socket: {e}");
        }
    }

    fn read_upstream(&mut self, ctx: &mut Ctx<'_>, id: EndpointId) {
        let Some(Some(socket)) = self.endpoints.get_mut(id.0 as usize) else {
            return;
        };
        let (now, engine) = (ctx.now(), &mut self.engine);
        let read = socket.recv(ctx, &mut self.buf, |received| match received {
            Received::Datagram { data, .. } => engine.handle_upstream_datagram(now, id, data),
            Received::Refused => engine.handle_upstream_unreachable(now, id),
        });
        if let Err(e) = read {
            log::warn!("upstream endpoint socket {}: {e}", id.0);
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
                    if let Some(socket) = slot {
                        socket.close(ctx);
                    }
                }
            }
        }
        Ok(())
    }

    fn open(&mut self, ctx: &mut Ctx<'_>, id: EndpointId, peer: SocketAddr) -> io::Result<()> {
        let key = id.0.checked_add(1).ok_or(io::ErrorKind::InvalidInput)?;
        let socket = Datagram::register(ctx, connected_udp(peer)?, key)?;
        let index = id.0 as usize;
        if self.endpoints.len() <= index {
            self.endpoints.resize_with(index + 1, || None);
        }
        self.endpoints[index] = Some(socket);
        Ok(())
    }

    /// Sends everything the engine queued, after opening the sockets it needs.
    fn flush(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        let _ = self.apply_endpoint_events(ctx, false);
        let (clients, endpoints) = (&self.clients, &self.endpoints);
        let send = |to: Destination, payload: &[u8]| {
            let sent = match (to, clients) {
                (Destination::Client(addr), Some(ClientSocket::Open(socket))) => {
                    socket.send_to(payload, addr)
                }
                (Destination::Upstream(id), _) => match endpoints.get(id.0 as usize) {
                    Some(Some(socket)) => socket.send(payload),
                    _ => Err(io::Error::from(io::ErrorKind::NotConnected)),
                },
                (Destination::Client(_), _) => Err(io::Error::from(io::ErrorKind::NotConnected)),
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
        if let Some(ClientSocket::Bound(socket)) = self.clients.take() {
            let socket = Datagram::register(ctx, socket, CLIENTS)?;
            self.clients = Some(ClientSocket::Open(socket));
        }
        self.apply_endpoint_events(ctx, true)
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, _: Readiness) {
        match key.checked_sub(1) {
            None => self.read_clients(ctx),
            Some(id) => self.read_upstream(ctx, EndpointId(id)),
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
}

impl MetricsSource for ProxyComponent {
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
