//! The proxy's sockets: the only place the proxy touches the network.
//!
//! One UDP socket faces clients; one socket per upstream is *connected* to it, so the kernel
//! reports ICMP port unreachable as `ECONNREFUSED` and the engine can answer 5.02 at once.
//! The component moves datagrams between sockets and the engine and keeps one reactor timer
//! armed for the engine's earliest deadline.

use std::io;
use std::net::SocketAddr;

use mio::net::UdpSocket;
use mio::{Interest, Token};

use super::{Destination, Proxy, ProxyConfig, UpstreamId};
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
    upstreams: Vec<(UdpSocket, Option<Token>)>,
    /// One reactor timer at the engine's earliest deadline.
    timer: TimerSlot,
    buf: Vec<u8>,
    /// Datagrams the kernel would not take (send buffer full): counted, then treated as lost.
    pub send_drops: u64,
}

impl ProxyComponent {
    /// Binds the client-facing socket and one connected socket per upstream.
    pub fn bind(listen: SocketAddr, mut config: ProxyConfig) -> io::Result<Self> {
        let listener = UdpSocket::bind(listen)?;
        config.local_addr = Some(listener.local_addr()?);
        let engine = Proxy::new(config);
        let upstreams = engine
            .upstream_addrs()
            .into_iter()
            .map(|addr| connected_udp(addr).map(|s| (s, None)))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(ProxyComponent {
            engine,
            listener,
            listener_token: None,
            upstreams,
            timer: TimerSlot::default(),
            buf: vec![0; MAX_UDP_DATAGRAM],
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

    fn after_input(&mut self, ctx: &mut Ctx<'_>) {
        self.flush(ctx.now());
        self.timer.set(ctx, self.engine.poll_timeout(), 0);
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
    }
}

/// The proxy's counters under `backoffd_coap_*` names.
fn write_proxy_metrics(c: &super::Counters, send_drops: u64, out: &mut MetricsWriter) {
    let counters: [(&str, &str, u64); 11] = [
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
