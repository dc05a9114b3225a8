//! The coaps listener's socket (RFC 7252 §9): the DTLS session table (`crate::dtls`) beside
//! its UDP socket, inside the proxy's component. Decrypted datagrams go to the engine as
//! [`Peer::Dtls`]; the engine's answers for such a peer come back here to be encrypted.

// I/O module: The coaps listener's driver: owns its socket, reads the clock once to pair the
// loop's timestamps with the DTLS library's instants, and draws its seed from the OS.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use mio::net::UdpSocket;

use super::{Peer, Proxy, SessionId};
use crate::dtls::{DtlsEvent, DtlsServer, DtlsServerConfig, Ending};
use crate::metrics::MetricsWriter;
use crate::reactor::datagram::{Datagram, Received};
use crate::reactor::{Ctx, TimerSlot};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// The coaps socket's registration key, and its timer's: the last below the keys a hosting
/// component may use (`FIRST_FOREIGN_KEY`).
pub const DTLS_KEY: u32 = super::driver::FIRST_FOREIGN_KEY - 1;

enum Socket {
    Bound(UdpSocket),
    Open(Datagram),
}

/// A coaps listener.
pub struct DtlsListener {
    socket: Option<Socket>,
    server: DtlsServer,
    timer: TimerSlot,
    local_addr: SocketAddr,
    /// Datagrams the kernel would not take.
    send_drops: u64,
}

impl DtlsListener {
    /// Binds `addr`; the session table's seed comes from the OS.
    pub fn bind(addr: SocketAddr, config: &DtlsServerConfig) -> io::Result<Self> {
        let socket = UdpSocket::bind(addr)?;
        let local_addr = socket.local_addr()?;
        let crypto = rtc_dtls::crypto_provider::default_provider()
            .map_err(|e| io::Error::other(e.to_string()))?;
        let clock = (Instant::now(), Timestamp::now());
        let seed = {
            use rand::{Rng, SeedableRng};
            rand::rngs::SmallRng::from_os_rng().random()
        };
        let server = DtlsServer::new(local_addr, config, seed, crypto, clock)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(DtlsListener {
            socket: Some(Socket::Bound(socket)),
            server,
            timer: TimerSlot::default(),
            local_addr,
            send_drops: 0,
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Registers the socket with the loop.
    pub fn start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        if let Some(Socket::Bound(socket)) = self.socket.take() {
            self.socket = Some(Socket::Open(Datagram::register(ctx, socket, DTLS_KEY)?));
        }
        Ok(())
    }

    /// Reads what arrived and hands the decrypted datagrams to `engine`.
    pub fn read(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8], engine: &mut Proxy) {
        let Some(Socket::Open(socket)) = &mut self.socket else {
            return;
        };
        let (now, server) = (ctx.now(), &mut self.server);
        let read = socket.recv(ctx, buf, |received| {
            if let Received::Datagram { data, from } = received {
                server.handle_datagram(now, from, data);
            }
        });
        if let Err(e) = read {
            log::warn!("coaps socket: {e}");
        }
        self.deliver(now, engine);
    }

    /// Runs the session timers.
    pub fn on_timer(&mut self, now: Timestamp, timer: TimerId, engine: &mut Proxy) {
        self.timer.fired(timer);
        self.server.handle_timeout(now);
        self.deliver(now, engine);
    }

    /// Encrypts an answer for `session`; an error if the session has ended.
    pub fn send(&mut self, now: Timestamp, session: SessionId, payload: &[u8]) -> io::Result<()> {
        self.server
            .send(now, session, payload)
            .map_err(|_| io::Error::from(io::ErrorKind::NotConnected))
    }

    /// Sends what the sessions queued and arms the timer for their next deadline.
    pub fn settle(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(Socket::Open(socket)) = &self.socket {
            while let Some((to, datagram)) = self.server.poll_transmit() {
                if let Err(e) = socket.send_to(&datagram, to) {
                    self.send_drops += 1;
                    log::debug!("coaps send to {to} failed: {e}");
                }
            }
        }
        self.timer.set(ctx, self.server.poll_timeout(), DTLS_KEY);
    }

    /// Hands decrypted datagrams and ended sessions to the engine; logs the events.
    fn deliver(&mut self, now: Timestamp, engine: &mut Proxy) {
        while let Some((session, datagram)) = self.server.poll_received() {
            let from = match self.server.peer_address(session) {
                Some(addr) => Peer::Dtls(session).connected_from(addr.ip()),
                None => Peer::Dtls(session).into(),
            };
            engine.handle_client_datagram(now, from, &datagram);
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
                    engine.handle_client_unreachable(now, Peer::Dtls(id));
                }
            }
        }
    }

    /// The listener's metrics (`backoffd_dtls_*`).
    pub fn write_metrics(&self, out: &mut MetricsWriter) {
        crate::dtls::metrics::write_dtls_metrics(
            &self.server.counters(),
            self.server.session_counts(),
            self.send_drops,
            out,
        );
    }
}
