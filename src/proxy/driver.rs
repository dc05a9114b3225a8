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

use super::report::Report;
use super::{Destination, EndpointEvent, EndpointId, Proxy, ProxyConfig, Seeds, UpstreamStats};
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

/// Per-upstream gauges: endpoints open and Message IDs reserved.
fn write_upstream_metrics(stats: &[UpstreamStats], out: &mut MetricsWriter) {
    let names: Vec<String> = stats.iter().map(|s| s.addr.to_string()).collect();
    let gauge = |f: fn(&UpstreamStats) -> f64| -> Vec<(&str, f64)> {
        names
            .iter()
            .map(String::as_str)
            .zip(stats.iter().map(f))
            .collect()
    };
    out.labelled_gauge(
        "backoffd_coap_upstream_endpoints",
        "Sockets of the proxy's own open towards each upstream (each its own Message ID space).",
        "upstream",
        &gauge(|s| s.endpoints as f64),
    );
    out.labelled_gauge(
        "backoffd_coap_upstream_mids_reserved",
        "Message IDs handed out towards each upstream less than a lifetime ago.",
        "upstream",
        &gauge(|s| s.mids_reserved as f64),
    );
    out.labelled_gauge(
        "backoffd_coap_upstream_in_flight",
        "Requests waiting on each upstream.",
        "upstream",
        &gauge(|s| s.in_flight as f64),
    );
}

/// The proxy's counters under `backoffd_coap_*` names.
fn write_proxy_metrics(c: &super::Counters, send_drops: u64, out: &mut MetricsWriter) {
    let counters: [(&str, &str, u64); 13] = [
        (
            "requests_total",
            "Client requests accepted (duplicates excluded).",
            c.requests,
        ),
        (
            "forwarded_total",
            "Requests sent upstream for the first time.",
            c.forwarded,
        ),
        (
            "client_duplicates_total",
            "Client retransmissions absorbed, never forwarded.",
            c.client_duplicates,
        ),
        (
            "upstream_retransmissions_total",
            "Retransmissions to upstreams by the proxy's retry policy.",
            c.upstream_retransmissions,
        ),
        (
            "client_retransmissions_total",
            "Retransmissions of confirmable answers to clients.",
            c.client_retransmissions,
        ),
        (
            "empty_acks_total",
            "Empty ACKs sent to clients before a separate answer.",
            c.empty_acks_sent,
        ),
        (
            "notifications_relayed_total",
            "Observe notifications relayed to clients.",
            c.notifications_relayed,
        ),
        (
            "unmatched_total",
            "Datagrams that matched no exchange.",
            c.unmatched_client + c.unmatched_upstream,
        ),
        (
            "cache_evictions_total",
            "Finished answers evicted because the cache was full.",
            c.cache_evictions,
        ),
        (
            "early_evictions_total",
            "Evicted answers whose client could still retransmit.",
            c.early_evictions,
        ),
        (
            "local_answer_evictions_total",
            "The proxy's own answers evicted from their full store.",
            c.local_answer_evictions,
        ),
        (
            "events_dropped_total",
            "Diagnostic events the engine dropped because its bounded queue was full.",
            c.events_dropped,
        ),
        (
            "send_drops_total",
            "Datagrams the kernel refused to send (treated as lost).",
            send_drops,
        ),
    ];
    for (name, help, value) in counters {
        out.counter(&format!("backoffd_coap_{name}"), help, value);
    }
    out.labelled_counter(
        "backoffd_coap_answers_total",
        "Answers to clients by code: relayed classes and the proxy's own codes.",
        "code",
        &[
            ("2.xx", c.relayed_2xx),
            ("4.xx", c.relayed_4xx),
            ("5.xx", c.relayed_5xx),
            ("4.00", c.bad_request_4_00),
            ("4.02", c.bad_option_4_02),
            ("4.03", c.forbidden_4_03),
            ("4.04", c.not_found_4_04),
            ("5.02", c.bad_gateway_5_02),
            ("5.03", c.service_unavailable_5_03),
            ("5.04", c.gateway_timeout_5_04),
            ("5.05", c.proxying_not_supported_5_05),
            ("5.08", c.hop_limit_5_08),
        ],
    );
    out.labelled_counter(
        "backoffd_coap_refusals_total",
        "Requests answered 5.03 by the proxy, by cause.",
        "cause",
        &[
            ("endpoints", c.refused_endpoints),
            ("client", c.refused_client),
            ("inflight", c.refused_inflight),
            ("upstream_inflight", c.refused_upstream_inflight),
            ("draining", c.refused_draining),
        ],
    );
    out.labelled_counter(
        "backoffd_coap_format_errors_total",
        "Malformed datagrams (RST to a CON, NON dropped), by leg.",
        "leg",
        &[
            ("client", c.client_format_errors),
            ("upstream", c.upstream_format_errors),
        ],
    );
    out.gauge(
        "backoffd_coap_live_exchanges",
        "Exchanges alive in any state.",
        c.live_exchanges as f64,
    );
    out.gauge(
        "backoffd_coap_cached_answers",
        "Finished answers kept for retransmissions.",
        c.cached_answers as f64,
    );
    out.gauge(
        "backoffd_coap_in_flight",
        "Requests still waiting on an upstream.",
        c.in_flight as f64,
    );
    out.gauge(
        "backoffd_coap_observations",
        "Observe relays alive.",
        c.observations as f64,
    );
}
