//! coaps (RFC 7252 §9) on both legs: the listener's DTLS session table (`crate::dtls`) beside
//! its UDP socket, and the upstream's sessions over the endpoints' sockets.
//!
//! - **Listener** (`--listen-dtls`): decrypted datagrams go to the engine as [`Peer::Dtls`]; the
//!   engine's answers for such a peer come back here to be encrypted.
//! - **Upstream** (`--upstream coaps://`): the engine sends and reads plaintext as for any
//!   upstream; this part encrypts on the way out and decrypts on the way in, one session per
//!   endpoint, so the engine's Message IDs per endpoint are per session.
//!
//! Both read the clock once, to pair the loop's timestamps with the DTLS library's instants,
//! and draw their seed from the OS.

// I/O module: owns the coaps sockets, reads the clock once, draws seeds from the OS.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use mio::net::UdpSocket;

use super::udp::{EndpointSockets, MAX_ENDPOINTS};
use super::{Claim, Intake, Transport, UpstreamFailure};
use crate::dtls::{ClientEvent, DtlsClientConfig, DtlsClients, SessionEnd};
use crate::dtls::{DtlsEvent, DtlsServer, DtlsServerConfig, Ending};
use crate::metrics::MetricsWriter;
use crate::proxy::{Destination, EndpointId, Peer};
use crate::reactor::datagram::{Datagram, Received};
use crate::reactor::keys::KeyRange;
use crate::reactor::{Ctx, Readiness, TimerSlot};
use crate::time::Timestamp;
use crate::timer::TimerId;
use rtc_dtls::crypto_provider::RTCCryptoProvider;

/// A seed for a session table, from the OS.
fn os_seed() -> u64 {
    use rand::{Rng, SeedableRng};
    rand::rngs::SmallRng::from_os_rng().random()
}

/// The DTLS library's crypto provider.
fn crypto() -> io::Result<std::sync::Arc<dyn RTCCryptoProvider>> {
    rtc_dtls::crypto_provider::default_provider().map_err(|e| io::Error::other(e.to_string()))
}

enum Socket {
    Bound(UdpSocket),
    Open(Datagram),
}

/// A coaps listener. See the module docs.
pub(in crate::proxy) struct DtlsListener {
    socket: Option<Socket>,
    server: DtlsServer,
    timer: TimerSlot,
    local_addr: SocketAddr,
    /// One key: the socket's and its timer's.
    keys: KeyRange,
    buf: Vec<u8>,
    /// Datagrams the kernel would not take.
    send_drops: u64,
}

impl DtlsListener {
    /// Binds `addr`; the session table's seed comes from the OS.
    pub(in crate::proxy) fn bind(addr: SocketAddr, config: &DtlsServerConfig) -> io::Result<Self> {
        let socket = UdpSocket::bind(addr)?;
        let local_addr = socket.local_addr()?;
        let clock = (Instant::now(), Timestamp::now());
        let server = DtlsServer::new(local_addr, config, os_seed(), crypto()?, clock)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(DtlsListener {
            socket: Some(Socket::Bound(socket)),
            server,
            timer: TimerSlot::default(),
            local_addr,
            keys: KeyRange::default(),
            buf: vec![0; crate::net::MAX_UDP_DATAGRAM],
            send_drops: 0,
        })
    }

    fn key(&self) -> u32 {
        self.keys.key(0).unwrap_or(u32::MAX)
    }

    /// Hands decrypted datagrams and ended sessions to the engine; logs the events.
    fn deliver(&mut self, intake: &mut Intake) {
        while let Some((session, datagram)) = self.server.poll_received() {
            let from = match self.server.peer_address(session) {
                Some(addr) => Peer::Dtls(session).connected_from(addr.ip()),
                None => Peer::Dtls(session).into(),
            };
            intake.client(from, &datagram);
        }
        while let Some(event) = self.server.poll_event() {
            match event {
                DtlsEvent::Established(id, addr) => {
                    log::debug!("coaps: session {id:?} with {addr} established")
                }
                DtlsEvent::Ended(id, addr, why) => {
                    let level = match why {
                        Ending::HandshakeFailed => log::Level::Info,
                        _ => log::Level::Debug,
                    };
                    log::log!(level, "coaps: session {id:?} with {addr} ended: {why:?}");
                    intake.client_gone(Peer::Dtls(id));
                }
            }
        }
    }
}

impl Transport for DtlsListener {
    fn keys_needed(&self) -> u32 {
        1
    }

    fn start(&mut self, ctx: &mut Ctx<'_>, keys: KeyRange) -> io::Result<()> {
        self.keys = keys;
        if let Some(Socket::Bound(socket)) = self.socket.take() {
            self.socket = Some(Socket::Open(Datagram::register(ctx, socket, self.key())?));
        }
        Ok(())
    }

    fn keys(&self) -> KeyRange {
        self.keys
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, _: u32, _: Readiness, intake: &mut Intake) {
        let Some(Socket::Open(socket)) = &mut self.socket else {
            return;
        };
        let (now, server) = (intake.now(), &mut self.server);
        let read = socket.recv(ctx, &mut self.buf, |received| {
            if let Received::Datagram { data, from } = received {
                server.handle_datagram(now, from, data);
            }
        });
        if let Err(e) = read {
            log::warn!("coaps socket: {e}");
        }
        self.deliver(intake);
    }

    fn on_timer(&mut self, _: &mut Ctx<'_>, timer: TimerId, _: u32, intake: &mut Intake) {
        self.timer.fired(timer);
        self.server.handle_timeout(intake.now());
        self.deliver(intake);
    }

    fn carries(&self, to: Destination) -> bool {
        matches!(to, Destination::Client(Peer::Dtls(_)))
    }

    fn send(&mut self, now: Timestamp, to: Destination, payload: &[u8]) -> io::Result<()> {
        let Destination::Client(Peer::Dtls(session)) = to else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        (self.server.send(now, session, payload))
            .map_err(|_| io::Error::from(io::ErrorKind::NotConnected))
    }

    fn settle(&mut self, ctx: &mut Ctx<'_>, _: &mut Intake) {
        if let Some(Socket::Open(socket)) = &self.socket {
            while let Some((to, datagram)) = self.server.poll_transmit() {
                if let Err(e) = socket.send_to(&datagram, to) {
                    self.send_drops += 1;
                    log::debug!("coaps send to {to} failed: {e}");
                }
            }
        }
        let key = self.key();
        self.timer.set(ctx, self.server.poll_timeout(), key);
    }

    fn listening(&self, out: &mut Vec<(&'static str, SocketAddr)>) {
        out.push(("coaps", self.local_addr));
    }

    fn write_metrics(&self, out: &mut MetricsWriter) {
        crate::dtls::metrics::write_dtls_metrics(
            &self.server.counters(),
            self.server.session_counts(),
            self.send_drops,
            out,
        );
    }
}

/// The sessions towards one coaps upstream. See the module docs.
pub(in crate::proxy) struct DtlsUpstream {
    origin: SocketAddr,
    clients: DtlsClients,
    sockets: EndpointSockets,
    timer: TimerSlot,
    /// Its timer's key, then its endpoints' sockets'.
    keys: KeyRange,
    buf: Vec<u8>,
    /// Records the kernel would not take.
    send_drops: u64,
}

impl DtlsUpstream {
    /// Sessions towards `origin` with `config`; the seed comes from the OS.
    pub(in crate::proxy) fn new(origin: SocketAddr, config: &DtlsClientConfig) -> io::Result<Self> {
        let clock = (Instant::now(), Timestamp::now());
        let clients = DtlsClients::new(config, os_seed(), crypto()?, clock)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(DtlsUpstream {
            origin,
            clients,
            sockets: EndpointSockets::default(),
            timer: TimerSlot::default(),
            keys: KeyRange::default(),
            buf: vec![0; crate::net::MAX_UDP_DATAGRAM],
            send_drops: 0,
        })
    }

    /// Hands the decrypted datagrams to the engine; logs the events, and tells the engine of
    /// a refused handshake so that the requests that waited are answered at once.
    fn deliver(&mut self, intake: &mut Intake) {
        while let Some((key, datagram)) = self.clients.poll_received() {
            intake.upstream(EndpointId(key), &datagram);
        }
        let origin = self.origin;
        while let Some(event) = self.clients.poll_event() {
            match event {
                ClientEvent::Established(key) => {
                    log::debug!("coaps upstream {origin}: endpoint {key}'s session is up")
                }
                ClientEvent::Refused(key, why) => {
                    log::warn!("coaps upstream {origin} refused the DTLS handshake: {why}");
                    intake.upstream_failed(EndpointId(key), UpstreamFailure::HandshakeRefused);
                }
                ClientEvent::Ended(key, why) => {
                    let level = match why {
                        SessionEnd::Stale | SessionEnd::HandshakeTimeout => log::Level::Info,
                        SessionEnd::Closed | SessionEnd::Idle => log::Level::Debug,
                    };
                    log::log!(
                        level,
                        "coaps upstream {origin}: endpoint {key}'s session ended: {why:?}"
                    );
                }
            }
        }
    }

    /// Endpoint `id`'s origin is unreachable (ICMP): its session is gone.
    fn unreachable(&mut self, id: EndpointId, intake: &mut Intake) {
        self.clients.reset(id.0);
        intake.upstream_failed(id, UpstreamFailure::Unreachable);
    }

    fn timer_key(&self) -> u32 {
        self.keys.key(0).unwrap_or(u32::MAX)
    }
}

impl Transport for DtlsUpstream {
    fn keys_needed(&self) -> u32 {
        1 + MAX_ENDPOINTS
    }

    fn start(&mut self, _: &mut Ctx<'_>, keys: KeyRange) -> io::Result<()> {
        self.keys = keys;
        let mut space = keys.space();
        space.take(1)?;
        self.sockets = EndpointSockets::new(space.take(MAX_ENDPOINTS)?);
        Ok(())
    }

    fn keys(&self) -> KeyRange {
        self.keys
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, _: Readiness, intake: &mut Intake) {
        let Some(id) = self.sockets.endpoint_of(key) else {
            return;
        };
        let Some(socket) = self.sockets.get_mut(id) else {
            return;
        };
        let (now, clients) = (intake.now(), &mut self.clients);
        let mut refused = false;
        let read = socket.recv(ctx, &mut self.buf, |received| match received {
            Received::Datagram { data, .. } => clients.handle_datagram(now, id.0, data),
            Received::Refused => refused = true,
        });
        if let Err(e) = read {
            log::warn!("upstream endpoint socket {}: {e}", id.0);
        }
        if refused {
            self.unreachable(id, intake);
        }
        self.deliver(intake);
    }

    fn on_timer(&mut self, _: &mut Ctx<'_>, timer: TimerId, _: u32, intake: &mut Intake) {
        self.timer.fired(timer);
        self.clients.handle_timeout(intake.now());
        self.deliver(intake);
    }

    fn carries(&self, to: Destination) -> bool {
        matches!(to, Destination::Upstream(id) if self.clients.has(id.0))
    }

    fn send(&mut self, now: Timestamp, to: Destination, payload: &[u8]) -> io::Result<()> {
        match to {
            Destination::Upstream(id) => {
                self.clients.send(now, id.0, payload);
                Ok(())
            }
            Destination::Client(_) => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    /// Sends the sessions' records on their endpoints' sockets and arms the timer.
    fn settle(&mut self, ctx: &mut Ctx<'_>, intake: &mut Intake) {
        while let Some((key, record)) = self.clients.poll_transmit() {
            let id = EndpointId(key);
            let Some(socket) = self.sockets.get(id) else {
                continue;
            };
            match socket.send(&record) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    self.unreachable(id, intake)
                }
                Err(e) => {
                    self.send_drops += 1;
                    log::debug!("coaps upstream send failed: {e}");
                }
            }
        }
        self.deliver(intake);
        let key = self.timer_key();
        self.timer.set(ctx, self.clients.poll_timeout(), key);
    }

    fn claims(&self, origin: SocketAddr) -> Claim {
        match origin == self.origin {
            true => Claim::Origin,
            false => Claim::No,
        }
    }

    fn open_endpoint(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: EndpointId,
        origin: SocketAddr,
    ) -> io::Result<()> {
        let local = self.sockets.open(ctx, id, origin)?.local_addr()?;
        self.clients.open(id.0, local, self.origin);
        Ok(())
    }

    /// Endpoint `id` closes: its close_notify goes out on its socket first.
    fn close_endpoint(&mut self, ctx: &mut Ctx<'_>, id: EndpointId) {
        let Some(socket) = self.sockets.take(id) else {
            return;
        };
        self.clients.close(ctx.now(), id.0);
        while let Some((_, record)) = self.clients.poll_transmit() {
            let _ = socket.send(&record);
        }
        socket.close(ctx);
    }

    fn write_metrics(&self, out: &mut MetricsWriter) {
        crate::dtls::metrics::write_dtls_upstream_metrics(
            &self.clients.counters(),
            self.clients.session_counts(),
            out,
        );
        out.counter(
            "backoffd_dtls_upstream_send_failed_total",
            "Records towards the coaps upstream the kernel would not take.",
            self.send_drops,
        );
    }
}
