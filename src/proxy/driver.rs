//! The proxy as a reactor component: the engine, its transports, and one pass per turn.
//!
//! [`ProxyComponent`] owns the sans-IO engine ([`Proxy`]) and the transports that carry CoAP
//! to clients and upstreams (`transport/`: UDP, in-process clients, coaps, CoAP over TCP, TLS
//! and WebSockets), each with its own range of registration keys. A turn:
//! 1. the transport that owns the ready key (or the fired timer) reads, and hands what came to
//!    the engine through an [`Intake`];
//! 2. the sockets the engine asked for are opened or closed, by the transport that claims the
//!    upstream ([`Claim`]);
//! 3. the engine's datagrams go out, each to the transport that carries its destination;
//! 4. every transport settles (writes, arms its timers); what one learns then (an ICMP error,
//!    a connection that failed) reaches the engine, and if that gave the engine anything to
//!    send, the component's timer asks for the next turn at once;
//! 5. the engine's events are logged and its timer armed for its earliest deadline.

// I/O module: The proxy engine's driver: owns its transports and draws its seeds from the OS.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::SocketAddr;

#[cfg(feature = "cache")]
use super::engine::metrics::write_cache_metrics;
use super::engine::metrics::{write_proxy_metrics, write_upstream_metrics};
use super::engine::report::Report;
use super::transport::local::LocalClients;
use super::transport::{Claim, Intake, Listeners, Transport};
use super::{Destination, EndpointEvent, EndpointId, LocalClient, Peer, Proxy, ProxyConfig, Seeds};
use crate::metrics::{MetricsSource, MetricsWriter};
use crate::reactor::keys::{KeyRange, KeySpace};
use crate::reactor::{Component, Ctx, Readiness, TimerSlot};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// The first key the proxy does not use: a component that hosts it and more sockets (the HTTP
/// cross-proxy, `crate::hc::CrossProxy`) gives the others keys from here on.
pub const FIRST_FOREIGN_KEY: u32 = 1 << 31;

/// The proxy as a reactor component. See the module docs.
pub struct ProxyComponent {
    engine: Proxy,
    /// In-process clients ([`Peer::Local`]): a transport without sockets, kept apart so that
    /// its host can take what the engine sent them ([`poll_local`](Self::poll_local)).
    local: LocalClients,
    /// The other transports, in the order sends look for a carrier (plain UDP first).
    transports: Vec<Box<dyn Transport>>,
    local_addr: SocketAddr,
    /// The engine's timer's key; the transports' ranges follow it.
    timer_key: u32,
    /// One reactor timer at the engine's earliest deadline.
    timer: TimerSlot,
    /// The engine's events, logged and rate-limited.
    report: Report,
    /// The loop's clock at the latest event, for the Message ID gauge of a scrape.
    last_now: Timestamp,
    /// Datagrams the kernel would not take (send buffer full): counted, then treated as lost.
    pub send_drops: u64,
}

impl ProxyComponent {
    /// Binds the client-facing socket; the upstream sockets open when the component starts.
    pub fn bind(listen: SocketAddr, config: ProxyConfig) -> io::Result<Self> {
        let listeners = Listeners::plain(listen);
        Self::bind_listeners(&listeners, config)
    }

    /// Binds the client-facing sockets `listeners` name (at least one).
    pub fn bind_listeners(listeners: &Listeners, mut config: ProxyConfig) -> io::Result<Self> {
        let transports = super::transport::bind(listeners)?;
        let mut addrs = Vec::new();
        for t in &transports {
            t.listening(&mut addrs);
        }
        let local_addr = addrs.first().map(|(_, addr)| *addr);
        let local_addr = local_addr.ok_or(io::ErrorKind::InvalidInput)?;
        config.local_addr = Some(local_addr);
        Ok(ProxyComponent {
            engine: Proxy::new(config.clone(), seeds(config.seed)),
            local: LocalClients::default(),
            transports,
            local_addr,
            timer_key: 0,
            timer: TimerSlot::default(),
            report: Report::default(),
            last_now: Timestamp::ZERO,
            send_drops: 0,
        })
    }

    /// Speaks coaps (RFC 7252 §9) to the upstream at `origin`: every endpoint towards it
    /// carries a DTLS session made with `config`. Call before the component starts.
    #[cfg(feature = "dtls")]
    pub fn with_coaps_upstream(
        mut self,
        origin: SocketAddr,
        config: &crate::dtls::DtlsClientConfig,
    ) -> io::Result<Self> {
        let upstream = super::transport::dtls::DtlsUpstream::new(origin, config)?;
        self.transports.push(Box::new(upstream));
        Ok(self)
    }

    /// Speaks CoAP over TCP (RFC 8323) to the upstream at `origin`, over TLS if `tls` says
    /// so (coaps+tcp): each endpoint towards it is a connection bounded by `limits`, and
    /// requests to it are not retransmitted. Call before the component starts.
    #[cfg(feature = "tcp")]
    pub fn with_tcp_upstream(
        mut self,
        origin: SocketAddr,
        limits: crate::coap_tcp::ConnLimits,
        tls: Option<super::UpstreamTls>,
    ) -> Self {
        self.engine.set_reliable_upstream(origin);
        let upstream = super::transport::stream_upstream::StreamUpstream::new(origin, limits, tls);
        self.transports.push(Box::new(upstream));
        self
    }

    /// The listening addresses actually bound, by URI scheme.
    fn listening(&self) -> Vec<(&'static str, SocketAddr)> {
        let mut addrs = Vec::new();
        for t in &self.transports {
            t.listening(&mut addrs);
        }
        addrs
    }

    /// The coaps address actually bound, if there is a coaps listener.
    pub fn dtls_addr(&self) -> Option<SocketAddr> {
        let addrs = self.listening().into_iter();
        addrs
            .filter(|(scheme, _)| *scheme == "coaps")
            .map(|(_, a)| a)
            .next()
    }

    /// The RFC 8323 listeners' schemes (`coap+tcp`, `coaps+tcp`, `coap+ws`) and the
    /// addresses actually bound.
    pub fn stream_addrs(&self) -> Vec<(&'static str, SocketAddr)> {
        let addrs = self.listening().into_iter();
        addrs.filter(|(scheme, _)| scheme.contains('+')).collect()
    }

    /// The client-facing address actually bound (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local_addr)
    }

    /// The engine, for counters.
    pub fn engine(&self) -> &Proxy {
        &self.engine
    }

    /// A datagram from in-process client `from`. Call [`settle`](Self::settle) after the
    /// last one.
    pub fn handle_local(&mut self, now: Timestamp, from: LocalClient, bytes: &[u8]) {
        self.engine
            .handle_client_datagram(now, Peer::Local(from), bytes);
    }

    /// The next datagram the engine sent to an in-process client.
    pub fn poll_local(&mut self) -> Option<(LocalClient, Vec<u8>)> {
        self.local.poll()
    }

    /// Opens and closes the upstream sockets the engine asks for, each by the transport that
    /// claims its upstream. At start-up a socket that cannot be opened is an error; later the
    /// engine is told and asks again a bit later.
    fn apply_endpoint_events(&mut self, ctx: &mut Ctx<'_>, starting: bool) -> io::Result<()> {
        let now = ctx.now();
        while let Some(event) = self.engine.poll_endpoint_event() {
            match event {
                EndpointEvent::Open { id, peer } => match self.open_endpoint(ctx, id, peer) {
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
                    let to = Destination::Upstream(id);
                    if let Some(t) = self.transports.iter_mut().find(|t| t.carries(to)) {
                        t.close_endpoint(ctx, id);
                    }
                }
            }
        }
        Ok(())
    }

    /// Opens endpoint `id` on the transport that claims `origin` as its own, else on the one
    /// that takes any upstream (plain UDP).
    fn open_endpoint(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: EndpointId,
        origin: SocketAddr,
    ) -> io::Result<()> {
        let claim = |wanted| {
            let mut all = self.transports.iter().enumerate();
            all.find(|(_, t)| t.claims(origin) == wanted)
                .map(|(i, _)| i)
        };
        let chosen = claim(Claim::Origin).or_else(|| claim(Claim::Fallback));
        let i = chosen.ok_or(io::ErrorKind::Unsupported)?;
        self.transports[i].open_endpoint(ctx, id, origin)
    }

    /// Hands every datagram the engine queued to the transport that carries it.
    fn transmit(&mut self, now: Timestamp) {
        let (local, transports) = (&mut self.local, &mut self.transports);
        let mut send = |to: Destination, payload: &[u8]| {
            let carrier = match local.carries(to) {
                true => Some(local as &mut dyn Transport),
                false => transports
                    .iter_mut()
                    .find(|t| t.carries(to))
                    .map(|t| &mut **t),
            };
            let sent = match carrier {
                Some(t) => t.send(now, to, payload),
                None => Err(io::ErrorKind::NotConnected.into()),
            };
            (to, sent)
        };
        while let Some((to, sent)) = self.engine.poll_transmit_with(&mut send) {
            match sent {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => match to {
                    Destination::Upstream(id) => self.engine.handle_upstream_unreachable(now, id),
                    // The transport reads who it was from its error queue at settle.
                    Destination::Client(_) => {}
                },
                Err(e) => {
                    self.send_drops += 1;
                    log::debug!("send to {to:?} failed: {e}");
                }
            }
        }
    }

    /// Ends a turn: opens what the engine asked for, sends what it queued, lets every
    /// transport settle, logs the engine's events and arms the timer for its next deadline.
    /// Called after every input, which [`Component`] calls do on their own, and after
    /// [`handle_local`](Self::handle_local).
    pub fn settle(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        self.last_now = now;
        let _ = self.apply_endpoint_events(ctx, false);
        self.transmit(now);
        let mut intake = Intake::new(&mut self.engine, now);
        for t in &mut self.transports {
            t.settle(ctx, &mut intake);
        }
        // What the transports learned while settling can have asked for sockets too.
        let _ = self.apply_endpoint_events(ctx, false);
        let bound = self.engine.max_upstream_endpoints();
        while let Some(event) = self.engine.poll_event() {
            (self.report).log(now, event, bound, |level, line| log::log!(level, "{line}"));
        }
        // What the engine answered to that goes out in the next turn, at once. Otherwise its
        // earliest deadline, which moves later with nearly every answer (its ack-delay timer
        // goes); `handle_timeout` may run early, so an earlier timer is left armed.
        let more = (self.engine.queued_bytes() > 0).then_some(now);
        let wanted = more.or(self.engine.poll_timeout());
        self.timer.set_no_later(ctx, wanted, self.timer_key);
    }
}

impl Component for ProxyComponent {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        let mut keys = KeySpace::new(0, FIRST_FOREIGN_KEY);
        let timer: KeyRange = keys.take(1)?;
        self.timer_key = timer.key(0).unwrap_or_default();
        for t in &mut self.transports {
            let range = keys.take(t.keys_needed())?;
            t.start(ctx, range)?;
        }
        self.apply_endpoint_events(ctx, true)?;
        self.settle(ctx);
        Ok(())
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness) {
        let now = ctx.now();
        if let Some(t) = self.transports.iter_mut().find(|t| t.keys().owns(key)) {
            t.on_ready(ctx, key, ready, &mut Intake::new(&mut self.engine, now));
        }
        self.settle(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32) {
        let now = ctx.now();
        if key == self.timer_key {
            self.timer.fired(timer);
            self.engine.handle_timeout(now);
        } else if let Some(t) = self.transports.iter_mut().find(|t| t.keys().owns(key)) {
            t.on_timer(ctx, timer, key, &mut Intake::new(&mut self.engine, now));
        }
        self.settle(ctx);
    }

    fn on_shutdown(&mut self, ctx: &mut Ctx<'_>) {
        self.engine.begin_drain();
        let mut intake = Intake::new(&mut self.engine, ctx.now());
        for t in &mut self.transports {
            t.shutdown(ctx, &mut intake);
        }
        self.settle(ctx);
    }

    fn is_drained(&self) -> bool {
        self.engine.in_flight() == 0
    }
}

impl MetricsSource for ProxyComponent {
    fn write_metrics(&self, out: &mut MetricsWriter) {
        write_proxy_metrics(&self.engine.counters(), self.send_drops, out);
        write_upstream_metrics(&self.engine.upstream_stats(self.last_now), out);
        for t in &self.transports {
            t.write_metrics(out);
        }
        #[cfg(feature = "cache")]
        write_cache_metrics(&self.engine, out);
        self.engine.retransmit_lateness().write(
            out,
            "backoffd_coap_retransmit_lateness_seconds",
            "How late the proxy's retransmissions (upstream and to clients) went: handled minus due.",
        );
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
