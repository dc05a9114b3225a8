//! The coaps upstream (`--upstream coaps://`, RFC 7252 §9): the proxy's DTLS sessions
//! (`crate::dtls::client`) over the upstream endpoints' sockets. The engine sends and reads
//! plaintext as for any upstream; this part encrypts on the way out and decrypts on the way
//! in, one session per endpoint, so the engine's Message IDs per endpoint are per session.

// I/O module: The coaps upstream's driver: reads the clock once to pair the loop's timestamps
// with the DTLS library's instants, draws its seed from the OS, and logs the sessions' events.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use super::{EndpointId, Proxy};
use crate::dtls::{ClientEvent, DtlsClientConfig, DtlsClients, SessionEnd};
use crate::metrics::MetricsWriter;
use crate::reactor::datagram::Datagram;
use crate::reactor::{Ctx, TimerSlot};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// The coaps upstream's timer key: below the coaps listener's (`dtls_listener::DTLS_KEY`).
pub const DTLS_UPSTREAM_KEY: u32 = super::driver::FIRST_FOREIGN_KEY - 2;

/// The sessions towards one coaps upstream.
pub struct DtlsUpstream {
    origin: SocketAddr,
    clients: DtlsClients,
    timer: TimerSlot,
    /// Records the kernel would not take.
    send_drops: u64,
}

impl DtlsUpstream {
    /// Sessions towards `origin` with `config`; the seed comes from the OS.
    pub fn new(origin: SocketAddr, config: &DtlsClientConfig) -> io::Result<Self> {
        let crypto = rtc_dtls::crypto_provider::default_provider()
            .map_err(|e| io::Error::other(e.to_string()))?;
        let seed = {
            use rand::{Rng, SeedableRng};
            rand::rngs::SmallRng::from_os_rng().random()
        };
        let clock = (Instant::now(), Timestamp::now());
        let clients = DtlsClients::new(config, seed, crypto, clock)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(DtlsUpstream {
            origin,
            clients,
            timer: TimerSlot::default(),
            send_drops: 0,
        })
    }

    /// Whether endpoints towards `peer` speak coaps.
    pub fn is_for(&self, peer: SocketAddr) -> bool {
        peer == self.origin
    }

    /// Whether endpoint `id` carries sessions of this upstream.
    pub fn carries(&self, id: EndpointId) -> bool {
        self.clients.has(id.0)
    }

    /// Endpoint `id` opened with `socket`.
    pub fn open(&mut self, id: EndpointId, socket: &Datagram) -> io::Result<()> {
        self.clients.open(id.0, socket.local_addr()?, self.origin);
        Ok(())
    }

    /// Endpoint `id` closes: its close_notify goes out on `socket` first.
    pub fn close(&mut self, now: Timestamp, id: EndpointId, socket: &Datagram) {
        self.clients.close(now, id.0);
        while let Some((_, record)) = self.clients.poll_transmit() {
            let _ = socket.send(&record);
        }
    }

    /// The engine's datagram for endpoint `id`, encrypted or queued for its session.
    pub fn send(&mut self, now: Timestamp, id: EndpointId, plaintext: &[u8]) {
        self.clients.send(now, id.0, plaintext);
    }

    /// A datagram endpoint `id`'s socket read.
    pub fn read(&mut self, now: Timestamp, id: EndpointId, datagram: &[u8]) {
        self.clients.handle_datagram(now, id.0, datagram);
    }

    /// Endpoint `id`'s origin is unreachable (ICMP): its session is gone.
    pub fn unreachable(&mut self, now: Timestamp, id: EndpointId, engine: &mut Proxy) {
        self.clients.reset(id.0);
        engine.handle_upstream_unreachable(now, id);
    }

    /// Runs the sessions' timers.
    pub fn on_timer(&mut self, now: Timestamp, timer: TimerId, engine: &mut Proxy) {
        self.timer.fired(timer);
        self.clients.handle_timeout(now);
        self.deliver(now, engine);
    }

    /// Hands the decrypted datagrams to the engine; logs the events, and tells the engine
    /// of a refused handshake so that the requests that waited are answered at once. True
    /// if the engine was told anything.
    pub fn deliver(&mut self, now: Timestamp, engine: &mut Proxy) -> bool {
        let mut told = false;
        while let Some((key, datagram)) = self.clients.poll_received() {
            engine.handle_upstream_datagram(now, EndpointId(key), &datagram);
            told = true;
        }
        let origin = self.origin;
        while let Some(event) = self.clients.poll_event() {
            match event {
                ClientEvent::Established(key) => {
                    log::debug!("coaps upstream {origin}: endpoint {key}'s session is up")
                }
                ClientEvent::Refused(key, why) => {
                    log::warn!("coaps upstream {origin} refused the DTLS handshake: {why}");
                    engine.handle_upstream_refused(now, EndpointId(key));
                    told = true;
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
        told
    }

    /// Sends the sessions' records on their endpoints' sockets and arms the timer. True if
    /// the engine was told anything (it has answers to send).
    pub fn settle(
        &mut self,
        ctx: &mut Ctx<'_>,
        endpoints: &[Option<Datagram>],
        engine: &mut Proxy,
    ) -> bool {
        let now = ctx.now();
        let mut told = false;
        while let Some((key, record)) = self.clients.poll_transmit() {
            let Some(Some(socket)) = endpoints.get(key as usize) else {
                continue;
            };
            match socket.send(&record) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    self.unreachable(now, EndpointId(key), engine);
                    told = true;
                }
                Err(e) => {
                    self.send_drops += 1;
                    log::debug!("coaps upstream send failed: {e}");
                }
            }
        }
        told |= self.deliver(now, engine);
        self.timer
            .set(ctx, self.clients.poll_timeout(), DTLS_UPSTREAM_KEY);
        told
    }

    /// The sessions' metrics (`backoffd_dtls_upstream_*`).
    pub fn write_metrics(&self, out: &mut MetricsWriter) {
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
