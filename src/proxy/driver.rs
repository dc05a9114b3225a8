//! The proxy's sockets: the only place the proxy touches the network.
//!
//! One UDP socket faces clients. Towards each upstream the engine keeps a pool of endpoints
//! and says when to open or close one ([`EndpointEvent`]); each is a socket on its own
//! ephemeral port, *connected* to the upstream, so the kernel reports ICMP port unreachable
//! as `ECONNREFUSED` and the engine can answer 5.02 at once. The component moves datagrams
//! between sockets and the engine and keeps one reactor timer armed for the engine's earliest
//! deadline. Each socket is a [`Datagram`]: the driver reads it until `WouldBlock` or its
//! budget, so a client that floods cannot starve the upstream sockets (or the other way).
//!
//! The client-facing socket is not connected, and Linux reports ICMP errors on such a socket
//! only with `IP_RECVERR`/`IPV6_RECVERR` set: each is then queued with the destination of the
//! datagram that caused it, read with `recvmsg(MSG_ERRQUEUE)` (as libcoap does). A port
//! unreachable from a client tells the engine that nobody listens there any more
//! ([`Proxy::handle_client_unreachable`]): its observations end, and the proxy stops
//! reflecting notifications at a closed port (issue 13).

// I/O module: The proxy engine's driver: owns its sockets and draws its seeds from the OS.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};

use mio::net::UdpSocket;

#[cfg(feature = "dtls")]
use super::dtls_listener::{DtlsListener, DTLS_KEY};
#[cfg(feature = "dtls")]
use super::dtls_upstream::{DtlsUpstream, DTLS_UPSTREAM_KEY};
#[cfg(feature = "cache")]
use super::metrics::write_cache_metrics;
use super::metrics::{write_proxy_metrics, write_upstream_metrics};
use super::report::Report;
#[cfg(feature = "tcp")]
use super::stream_listener::{StreamListen, StreamListener};
#[cfg(feature = "tcp")]
use super::stream_upstream::StreamUpstream;
use super::transports::Transports;
use super::{Destination, EndpointEvent, EndpointId, LocalClient, Peer, Proxy, ProxyConfig, Seeds};
use crate::metrics::{MetricsSource, MetricsWriter};
use crate::net::{connected_udp, MAX_UDP_DATAGRAM};
use crate::reactor::datagram::{Datagram, Received};
use crate::reactor::{Component, Ctx, Readiness, TimerSlot};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// The client-facing socket's registration key; upstream endpoint `id` has key `id + 1`.
const CLIENTS: u32 = 0;
/// The first key the proxy does not use: a component that hosts it and more sockets (the HTTP
/// cross-proxy, `crate::hc::CrossProxy`) gives the others keys from here on.
pub const FIRST_FOREIGN_KEY: u32 = 1 << 31;

/// The client-facing socket: bound by [`ProxyComponent::bind`], registered at start.
enum ClientSocket {
    Bound(UdpSocket),
    Open(Datagram),
}

/// The proxy as a reactor component.
pub struct ProxyComponent {
    engine: Proxy,
    clients: Option<ClientSocket>,
    /// The client-facing socket's descriptor, for its error queue (owned by `clients`).
    clients_fd: RawFd,
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
    /// Datagrams for in-process clients ([`Peer::Local`]), for the component that hosts them
    /// to take ([`poll_local`](Self::poll_local)).
    to_local: VecDeque<(LocalClient, Vec<u8>)>,
    /// The coaps listener (`--listen-dtls`), if any.
    #[cfg(feature = "dtls")]
    dtls: Option<DtlsListener>,
    /// The coaps upstream's sessions (`--upstream coaps://`), if the upstream is one.
    #[cfg(feature = "dtls")]
    dtls_upstream: Option<DtlsUpstream>,
    /// The RFC 8323 listeners (`--listen-tcp`, `--listen-tls`, `--listen-ws`).
    #[cfg(feature = "tcp")]
    streams: Vec<StreamListener>,
    /// The CoAP-over-TCP upstream's connections (`--upstream coap+tcp://`), if it is one.
    #[cfg(feature = "tcp")]
    stream_upstream: Option<StreamUpstream>,
}

/// Where the proxy takes its clients: plain CoAP over UDP, coaps, or both. With coaps alone
/// no plain socket is opened: it would let clients past the keys.
#[derive(Clone, Debug, Default)]
pub struct Listeners {
    /// The plain CoAP address (`--listen`).
    pub plain: Option<SocketAddr>,
    /// The coaps address and its keys (`--listen-dtls`).
    #[cfg(feature = "dtls")]
    pub dtls: Option<(SocketAddr, crate::dtls::DtlsServerConfig)>,
    /// The RFC 8323 listeners (`--listen-tcp`, `--listen-tls`, `--listen-ws`), at most 4.
    #[cfg(feature = "tcp")]
    pub streams: Vec<StreamListen>,
}

impl Listeners {
    /// Plain CoAP at `addr` alone.
    pub fn plain(addr: SocketAddr) -> Self {
        Listeners {
            plain: Some(addr),
            #[cfg(feature = "dtls")]
            dtls: None,
            #[cfg(feature = "tcp")]
            streams: Vec::new(),
        }
    }
}

impl ProxyComponent {
    /// Binds the client-facing socket; the upstream sockets open when the component starts.
    pub fn bind(listen: SocketAddr, config: ProxyConfig) -> io::Result<Self> {
        let listeners = Listeners::plain(listen);
        Self::bind_listeners(&listeners, config)
    }

    /// Binds the client-facing sockets `listeners` name (at least one).
    pub fn bind_listeners(listeners: &Listeners, mut config: ProxyConfig) -> io::Result<Self> {
        let (clients, clients_fd, plain_addr) = match listeners.plain {
            Some(listen) => {
                let listener = UdpSocket::bind(listen)?;
                let fd = listener.as_raw_fd();
                enable_recverr(fd, listen.is_ipv6())?;
                let addr = listener.local_addr()?;
                (Some(ClientSocket::Bound(listener)), fd, Some(addr))
            }
            None => (None, -1, None),
        };
        #[cfg(feature = "dtls")]
        let dtls = match &listeners.dtls {
            Some((addr, dtls)) => Some(DtlsListener::bind(*addr, dtls)?),
            None => None,
        };
        #[cfg(feature = "dtls")]
        let plain_addr = plain_addr.or(dtls.as_ref().map(DtlsListener::local_addr));
        #[cfg(feature = "tcp")]
        let streams = (listeners.streams.iter().zip(0..))
            .map(|(listen, number)| StreamListener::bind(listen, number))
            .collect::<io::Result<Vec<_>>>()?;
        #[cfg(feature = "tcp")]
        let plain_addr = plain_addr.or(streams.first().map(StreamListener::local_addr));
        let local_addr = plain_addr.ok_or(io::ErrorKind::InvalidInput)?;
        config.local_addr = Some(local_addr);
        Ok(ProxyComponent {
            engine: Proxy::new(config.clone(), seeds(config.seed)),
            clients,
            clients_fd,
            local_addr,
            endpoints: Vec::new(),
            timer: TimerSlot::default(),
            report: Report::default(),
            buf: vec![0; MAX_UDP_DATAGRAM],
            last_now: Timestamp::ZERO,
            send_drops: 0,
            to_local: VecDeque::new(),
            #[cfg(feature = "dtls")]
            dtls,
            #[cfg(feature = "dtls")]
            dtls_upstream: None,
            #[cfg(feature = "tcp")]
            streams,
            #[cfg(feature = "tcp")]
            stream_upstream: None,
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
        self.dtls_upstream = Some(DtlsUpstream::new(origin, config)?);
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
        self.stream_upstream = Some(StreamUpstream::new(origin, limits, tls));
        self
    }

    /// The coaps address actually bound, if there is a coaps listener.
    pub fn dtls_addr(&self) -> Option<SocketAddr> {
        #[cfg(feature = "dtls")]
        return self.dtls.as_ref().map(DtlsListener::local_addr);
        #[cfg(not(feature = "dtls"))]
        None
    }

    /// The RFC 8323 listeners' schemes (`coap+tcp`, `coaps+tcp`, `coap+ws`) and the
    /// addresses actually bound.
    pub fn stream_addrs(&self) -> Vec<(&'static str, SocketAddr)> {
        #[cfg(feature = "tcp")]
        return (self.streams.iter())
            .map(|l| (l.transport().scheme(), l.local_addr()))
            .collect();
        #[cfg(not(feature = "tcp"))]
        Vec::new()
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
        self.to_local.pop_front()
    }

    fn read_clients(&mut self, ctx: &mut Ctx<'_>) {
        let Some(ClientSocket::Open(socket)) = &mut self.clients else {
            return;
        };
        let (now, engine) = (ctx.now(), &mut self.engine);
        let read = socket.recv(ctx, &mut self.buf, |received| match received {
            Received::Datagram { data, from } => {
                engine.handle_client_datagram(now, Peer::Udp(from), data)
            }
            // A client's ICMP error: who it was is in the error queue, read below.
            Received::Refused => {}
        });
        if let Err(e) = read {
            log::warn!("client socket: {e}");
        }
        self.read_client_errors(now);
    }

    /// Drains the client socket's error queue: each ICMP port unreachable names the client
    /// it came for. Bounded like a receive, and cheap when empty (one `EAGAIN`).
    fn read_client_errors(&mut self, now: Timestamp) {
        if !matches!(self.clients, Some(ClientSocket::Open(_))) {
            return;
        }
        for _ in 0..crate::reactor::datagram::RECV_BUDGET {
            match read_icmp_error(self.clients_fd) {
                Ok(Some(IcmpError::PortUnreachable(client))) => self
                    .engine
                    .handle_client_unreachable(now, Peer::Udp(client)),
                Ok(Some(IcmpError::Other)) => {}
                Ok(None) => return,
                Err(e) => {
                    log::debug!("client socket error queue: {e}");
                    return;
                }
            }
        }
    }

    fn read_upstream(&mut self, ctx: &mut Ctx<'_>, id: EndpointId) {
        let Some(Some(socket)) = self.endpoints.get_mut(id.0 as usize) else {
            return;
        };
        let (now, engine) = (ctx.now(), &mut self.engine);
        #[cfg(feature = "dtls")]
        if let Some(up) = self.dtls_upstream.as_mut().filter(|up| up.carries(id)) {
            let read = socket.recv(ctx, &mut self.buf, |received| match received {
                Received::Datagram { data, .. } => up.read(now, id, data),
                Received::Refused => up.unreachable(now, id, engine),
            });
            if let Err(e) = read {
                log::warn!("upstream endpoint socket {}: {e}", id.0);
            }
            up.deliver(now, engine);
            return;
        }
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
            #[cfg(feature = "tcp")]
            if let Some(up) = self.stream_upstream.as_mut() {
                match event {
                    EndpointEvent::Open { id, peer } if up.is_for(peer) => {
                        self.engine.endpoint_opened(now, id);
                        up.open(ctx, id, &mut self.engine);
                        continue;
                    }
                    EndpointEvent::Close { id } if up.carries(id) => {
                        up.close(ctx, id);
                        continue;
                    }
                    _ => {}
                }
            }
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
                        #[cfg(feature = "dtls")]
                        if let Some(up) = self.dtls_upstream.as_mut().filter(|u| u.carries(id)) {
                            up.close(now, id, &socket);
                        }
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
        #[cfg(feature = "dtls")]
        if let Some(up) = self.dtls_upstream.as_mut().filter(|u| u.is_for(peer)) {
            up.open(id, &socket)?;
        }
        self.endpoints[index] = Some(socket);
        Ok(())
    }

    /// Sends everything the engine queued, after opening the sockets it needs.
    fn flush(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        let _ = self.apply_endpoint_events(ctx, false);
        self.transmit(now);
        #[cfg(feature = "dtls")]
        if let Some(listener) = &mut self.dtls {
            listener.settle(ctx);
        }
        // The coaps upstream's records go out; a handshake refused or an ICMP error there
        // gave the engine answers to send.
        #[cfg(feature = "dtls")]
        if let Some(up) = &mut self.dtls_upstream {
            if up.settle(ctx, &self.endpoints, &mut self.engine) {
                self.transmit(now);
                if let Some(up) = &mut self.dtls_upstream {
                    up.settle(ctx, &self.endpoints, &mut self.engine);
                }
            }
        }
        // A stream connection's ACKs and requests go to the engine after its answers are
        // framed; what the engine says to them goes out in another round.
        #[cfg(feature = "tcp")]
        for round in 0..4 {
            let mut fed = false;
            for listener in &mut self.streams {
                fed |= listener.settle(ctx, &mut self.engine);
            }
            if let Some(up) = &mut self.stream_upstream {
                fed |= up.settle(ctx, &mut self.engine);
            }
            if !fed || round == 3 {
                break;
            }
            self.transmit(now);
        }
        // Answering an ICMP error can have asked for sockets too.
        let _ = self.apply_endpoint_events(ctx, false);
    }

    /// Hands every datagram the engine queued to its transport.
    fn transmit(&mut self, now: Timestamp) {
        let mut to = Transports {
            clients: match &self.clients {
                Some(ClientSocket::Open(socket)) => Some(socket),
                _ => None,
            },
            endpoints: &self.endpoints,
            to_local: &mut self.to_local,
            #[cfg(feature = "dtls")]
            dtls: self.dtls.as_mut(),
            #[cfg(feature = "dtls")]
            dtls_upstream: self.dtls_upstream.as_mut(),
            #[cfg(feature = "tcp")]
            streams: &mut self.streams,
            #[cfg(feature = "tcp")]
            stream_upstream: self.stream_upstream.as_mut(),
        };
        let mut send = |dest: Destination, payload: &[u8]| (dest, to.send(now, dest, payload));
        let mut refused_clients = false;
        while let Some((to, sent)) = self.engine.poll_transmit_with(|to, payload| {
            let (to, sent) = send(to, payload);
            // With IP_RECVERR a pending ICMP error fails the next send on the socket, which
            // was for someone else: the datagram is sent again (once).
            match (to, &sent) {
                (Destination::Client(_), Err(e))
                    if e.kind() == io::ErrorKind::ConnectionRefused =>
                {
                    send(to, payload)
                }
                _ => (to, sent),
            }
        }) {
            match sent {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => match to {
                    Destination::Upstream(id) => self.engine.handle_upstream_unreachable(now, id),
                    Destination::Client(_) => refused_clients = true,
                },
                Err(e) => {
                    self.send_drops += 1;
                    log::debug!("send to {to:?} failed: {e}");
                }
            }
        }
        if refused_clients {
            self.read_client_errors(now);
        }
    }

    /// Sends what the engine queued, logs its events and arms the timer for its next
    /// deadline: after every input, which [`Component`] calls do on their own, and after
    /// [`handle_local`](Self::handle_local).
    pub fn settle(&mut self, ctx: &mut Ctx<'_>) {
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
        #[cfg(feature = "dtls")]
        if let Some(listener) = &mut self.dtls {
            listener.start(ctx)?;
        }
        #[cfg(feature = "tcp")]
        for listener in &mut self.streams {
            listener.start(ctx)?;
        }
        self.apply_endpoint_events(ctx, true)
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness) {
        #[cfg(feature = "tcp")]
        if let Some(listener) = self.streams.iter_mut().find(|l| l.owns(key)) {
            listener.on_ready(ctx, key, ready, &mut self.engine);
            return self.settle(ctx);
        }
        #[cfg(feature = "tcp")]
        if let Some(up) = self.stream_upstream.as_mut().filter(|u| u.owns(key)) {
            up.on_ready(ctx, key, ready, &mut self.engine);
            return self.settle(ctx);
        }
        let _ = ready;
        #[cfg(feature = "dtls")]
        if let (DTLS_KEY, Some(listener)) = (key, &mut self.dtls) {
            listener.read(ctx, &mut self.buf, &mut self.engine);
            return self.settle(ctx);
        }
        match key.checked_sub(1) {
            None => self.read_clients(ctx),
            Some(id) => self.read_upstream(ctx, EndpointId(id)),
        }
        self.settle(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32) {
        #[cfg(feature = "dtls")]
        if let (DTLS_KEY, Some(listener)) = (key, &mut self.dtls) {
            listener.on_timer(ctx.now(), timer, &mut self.engine);
            return self.settle(ctx);
        }
        #[cfg(feature = "dtls")]
        if let (DTLS_UPSTREAM_KEY, Some(up)) = (key, &mut self.dtls_upstream) {
            up.on_timer(ctx.now(), timer, &mut self.engine);
            return self.settle(ctx);
        }
        #[cfg(feature = "tcp")]
        if let Some(listener) = self.streams.iter_mut().find(|l| l.owns(key)) {
            listener.on_timer(ctx, timer, key, &mut self.engine);
            return self.settle(ctx);
        }
        #[cfg(feature = "tcp")]
        if let Some(up) = self.stream_upstream.as_mut().filter(|u| u.owns(key)) {
            up.on_timer(ctx, timer, key, &mut self.engine);
            return self.settle(ctx);
        }
        let _ = key;
        self.timer.fired(timer);
        self.engine.handle_timeout(ctx.now());
        self.settle(ctx);
    }

    fn on_shutdown(&mut self, ctx: &mut Ctx<'_>) {
        self.engine.begin_drain();
        #[cfg(feature = "tcp")]
        for listener in &mut self.streams {
            listener.shutdown(ctx, &mut self.engine);
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
        #[cfg(feature = "dtls")]
        if let Some(listener) = &self.dtls {
            listener.write_metrics(out);
        }
        #[cfg(feature = "dtls")]
        if let Some(up) = &self.dtls_upstream {
            up.write_metrics(out);
        }
        #[cfg(feature = "tcp")]
        if let Some(up) = &self.stream_upstream {
            up.write_metrics(out);
        }
        #[cfg(feature = "tcp")]
        super::stream_metrics::write(
            &self
                .streams
                .iter()
                .map(StreamListener::snapshot)
                .collect::<Vec<_>>(),
            out,
        );
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

/// Asks the kernel to queue ICMP errors for the unconnected client socket (`ip(7)`,
/// `ipv6(7)`: `IP_RECVERR`, `IPV6_RECVERR`). A dual-stack socket takes both: IPv4 clients'
/// errors come through the IPv4 option.
fn enable_recverr(fd: RawFd, ipv6: bool) -> io::Result<()> {
    let on: libc::c_int = 1;
    let set = |level, name| {
        // SAFETY: `fd` is an open socket; the option value is a c_int that outlives the call.
        let r = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        match r {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    };
    if ipv6 {
        set(libc::IPPROTO_IPV6, libc::IPV6_RECVERR)?;
        // An IPv6-only socket may refuse the IPv4 option; it has no IPv4 clients then.
        let _ = set(libc::IPPROTO_IP, libc::IP_RECVERR);
        Ok(())
    } else {
        set(libc::IPPROTO_IP, libc::IP_RECVERR)
    }
}

/// One entry of a socket's error queue.
#[derive(Debug, PartialEq, Eq)]
enum IcmpError {
    /// ICMP (or ICMPv6) port unreachable for a datagram sent to this address.
    PortUnreachable(SocketAddr),
    /// Anything else (host unreachable, fragmentation needed, ...): not a sign that the
    /// client has gone.
    Other,
}

/// Reads one entry of `fd`'s error queue without blocking; `None` when it is empty.
fn read_icmp_error(fd: RawFd) -> io::Result<Option<IcmpError>> {
    // SAFETY: all-zero is a valid sockaddr_storage and msghdr.
    let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut data = [0u8; 64];
    let mut control = [0u64; 64];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: every pointer in `msg` points at a live buffer of the length it states.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => Ok(None),
            _ => Err(e),
        };
    }
    let mut refused = false;
    // SAFETY: `msg` was filled by recvmsg; the CMSG macros walk its control buffer.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let c = &*cmsg;
            let ours = (c.cmsg_level == libc::IPPROTO_IP && c.cmsg_type == libc::IP_RECVERR)
                || (c.cmsg_level == libc::IPPROTO_IPV6 && c.cmsg_type == libc::IPV6_RECVERR);
            if ours {
                let ee = std::ptr::read_unaligned(
                    libc::CMSG_DATA(cmsg).cast::<libc::sock_extended_err>(),
                );
                let icmp = ee.ee_origin == libc::SO_EE_ORIGIN_ICMP
                    || ee.ee_origin == libc::SO_EE_ORIGIN_ICMP6;
                refused |= icmp && ee.ee_errno == libc::ECONNREFUSED as u32;
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Some(match (refused, sockaddr_to_std(&name)) {
        (true, Some(addr)) => IcmpError::PortUnreachable(addr),
        _ => IcmpError::Other,
    }))
}

/// The address in a `sockaddr_storage` filled by the kernel, as `recv_from` gives it.
fn sockaddr_to_std(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says it holds a sockaddr_in, which fits in the storage.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = u32::from_be(a.sin_addr.s_addr);
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip.into(),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, a sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                a.sin6_addr.s6_addr.into(),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}
