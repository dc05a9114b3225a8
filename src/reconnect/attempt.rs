//! One retry attempt of the interop client: a TCP connect, then TLS, then HTTP/2 until the
//! server's SETTINGS, driven by a [`Stream`] like every other connection.
//!
//! The attempt's core layers TLS under HTTP/2: what the socket gives goes to TLS, the
//! plaintext to HTTP/2, and HTTP/2's output back into TLS, whose ciphertext is the stream's
//! output. What happened in one round is an [`AttemptProgress`] for the client to log and to
//! report to its [`RetryRun`](super::retry::RetryRun).

// I/O module: The interop client's attempts: connect their sockets through the stream driver.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::ServerName;

use super::tls::{TlsClient, ALPN_H2};
use crate::http2::{self, Connection, Event, Role};
use crate::net::Outbox;
use crate::reactor::stream::{Stream, StreamCore};
use crate::reactor::{Ctx, Readiness};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// What one round of I/O on an attempt found, in order.
#[derive(Default)]
pub(super) struct AttemptProgress {
    /// TLS completed with ALPN h2, in this version.
    pub transport_up: Option<rustls::ProtocolVersion>,
    /// The server's SETTINGS arrived: the connection is established.
    pub settings: bool,
    /// The attempt is over, and why.
    pub ended: Option<String>,
}

/// One retry attempt's connection. See the module docs.
pub(super) struct Attempt {
    /// Its number in the run, from 1.
    pub number: u32,
    /// When its connect started.
    pub started: Timestamp,
    io: Stream<AttemptCore>,
}

/// TLS, created once the TCP connect completes, and HTTP/2 once TLS is up.
struct AttemptCore {
    tls_config: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
    tls: Option<TlsClient>,
    h2: Option<Connection>,
    /// Decrypted bytes not yet given to HTTP/2.
    plaintext: Vec<u8>,
    /// TLS failed on input; reading stops.
    failed: Option<String>,
    /// The server's SETTINGS arrived.
    established: bool,
}

impl Attempt {
    /// Starts attempt `number`'s one TCP connection, registered under `key`.
    pub fn start(
        ctx: &mut Ctx<'_>,
        addr: SocketAddr,
        key: u32,
        number: u32,
        tls: (&Arc<rustls::ClientConfig>, &ServerName<'static>),
    ) -> io::Result<Attempt> {
        let core = AttemptCore {
            tls_config: Arc::clone(tls.0),
            server_name: tls.1.clone(),
            tls: None,
            h2: None,
            plaintext: Vec::new(),
            failed: None,
            established: false,
        };
        Ok(Attempt {
            number,
            started: ctx.now(),
            io: Stream::connect(ctx, addr, key, core)?,
        })
    }

    /// Whether the server's SETTINGS arrived.
    pub fn established(&self) -> bool {
        self.io.core().established
    }

    /// Readiness: completes the connect, then runs a round.
    pub fn on_ready(
        &mut self,
        now: Timestamp,
        ready: Readiness,
        buf: &mut [u8],
    ) -> AttemptProgress {
        if let Err(e) = self.io.on_ready(ready) {
            return AttemptProgress {
                ended: Some(format!("connect: {e}")),
                ..AttemptProgress::default()
            };
        }
        self.pump(now, buf)
    }

    /// A timer: a round if it is this attempt's (`None` if not).
    pub fn on_timer(
        &mut self,
        now: Timestamp,
        id: TimerId,
        buf: &mut [u8],
    ) -> Option<AttemptProgress> {
        self.io.on_timer(now, id).then(|| self.pump(now, buf))
    }

    /// Keeps the attempt's interest and timer in step.
    pub fn settle(&mut self, ctx: &mut Ctx<'_>) {
        self.io.settle(ctx);
    }

    /// Closes the connection.
    pub fn close(self, ctx: &mut Ctx<'_>) {
        self.io.close(ctx);
    }

    /// Moves bytes: feeds TLS and HTTP/2, writes what they want sent.
    fn pump(&mut self, now: Timestamp, buf: &mut [u8]) -> AttemptProgress {
        let mut progress = AttemptProgress::default();
        if let Err(why) = self.round(now, buf, &mut progress) {
            progress.ended = Some(why);
        }
        progress
    }

    fn round(
        &mut self,
        now: Timestamp,
        buf: &mut [u8],
        progress: &mut AttemptProgress,
    ) -> Result<(), String> {
        if self.io.is_connecting() {
            return Ok(());
        }
        let core = self.io.core_mut();
        if core.tls.is_none() {
            let tls = TlsClient::new(Arc::clone(&core.tls_config), core.server_name.clone())
                .map_err(|e| format!("TLS set-up: {e}"))?;
            core.tls = Some(tls);
        }
        self.io.read(now, buf).map_err(|e| e.to_string())?;
        let core = self.io.core_mut();
        if let Some(why) = core.failed.take() {
            return Err(why);
        }
        core.advance(now, progress)?;
        self.io.flush(now).map_err(|e| e.to_string())?;
        self.io.core().check_end(self.io.eof())
    }
}

impl AttemptCore {
    /// After a round of reads: completes the handshake, feeds HTTP/2, moves its output to TLS.
    fn advance(&mut self, now: Timestamp, progress: &mut AttemptProgress) -> Result<(), String> {
        let tls = self.tls.as_mut().expect("created when connected");
        if self.h2.is_none() && !tls.is_handshaking() {
            if tls.alpn_protocol() != Some(ALPN_H2) {
                return Err("the server did not select ALPN h2".into());
            }
            progress.transport_up = tls.protocol_version();
            self.h2 = Some(Connection::new(Role::Client, http2::Config::default(), now));
        }
        let Some(h2) = &mut self.h2 else {
            return Ok(());
        };
        if !self.plaintext.is_empty() {
            h2.handle_input(now, &self.plaintext);
        }
        self.plaintext.clear();
        h2.handle_timeout(now);
        while let Some(event) = h2.poll_event() {
            if event == Event::SettingsReceived && !self.established {
                self.established = true;
                progress.settings = true;
            }
        }
        let out = h2.pending_output();
        if !out.is_empty() {
            tls.send(out).map_err(|e| format!("TLS: {e}"))?;
            let n = out.len();
            h2.consume_output(now, n);
        }
        Ok(())
    }

    /// Whether the connection ended: the peer's close (TCP or TLS), or HTTP/2's end.
    fn check_end(&self, eof: bool) -> Result<(), String> {
        let stage = match (&self.h2, self.established) {
            (None, _) => "before the TLS handshake completed",
            (Some(_), false) => "before the server's SETTINGS",
            (Some(_), true) => "by the server",
        };
        if eof || self.tls.as_ref().is_some_and(TlsClient::peer_closed) {
            return Err(format!("closed {stage}"));
        }
        if self.h2.as_ref().is_some_and(Connection::is_closed) {
            return Err("HTTP/2 session ended".into());
        }
        Ok(())
    }
}

impl Outbox for AttemptCore {
    fn pending_output(&self) -> &[u8] {
        self.tls.as_ref().map_or(&[], TlsClient::pending_output)
    }
    fn consume_output(&mut self, _: Timestamp, n: usize) {
        if let Some(tls) = &mut self.tls {
            tls.consume_output(n);
        }
    }
}

impl StreamCore for AttemptCore {
    /// TLS that failed takes no more input: the round ends the attempt.
    fn wants_input(&self) -> bool {
        self.failed.is_none()
    }
    fn handle_input(&mut self, _now: Timestamp, data: &[u8]) {
        let Some(tls) = &mut self.tls else {
            return;
        };
        if let Err(e) = tls.handle_input(data, &mut self.plaintext) {
            self.failed = Some(format!("TLS: {e}"));
        }
    }
    fn poll_timeout(&self) -> Option<Timestamp> {
        self.h2.as_ref().and_then(Connection::poll_timeout)
    }
    /// HTTP/2's timeout runs in every round ([`AttemptCore::advance`]).
    fn handle_timeout(&mut self, _now: Timestamp) {}
}
