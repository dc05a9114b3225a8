//! The CoAP-over-TCP upstream (`--upstream coap+tcp://`, RFC 8323): each of the engine's
//! endpoints towards the origin is a TCP connection (a sans-IO [`UpstreamConn`] on the stream
//! driver) instead of a UDP socket. The engine sends its requests as for any upstream, each
//! once (the upstream is marked reliable), and takes the origin's responses by token, with
//! no ACK or Message ID (RFC 8323 §2.2); this part carries them.
//!
//! A connection opens when the engine opens its endpoint, and again when the engine sends on
//! an endpoint whose connection has closed. When one fails or closes, the engine hears it
//! (an [`UpstreamFailure::Closed`]): what waits there gets 5.02, since nothing is resent.

// I/O module: The TCP upstream's driver: owns its connections' sockets.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use super::udp::MAX_ENDPOINTS;
use super::{Claim, Intake, Transport, UpstreamFailure};
use crate::coap_tcp::carried::CarriedUpstream;
use crate::coap_tcp::tls::TlsSession;
use crate::coap_tcp::ConnLimits;
use crate::metrics::MetricsWriter;
use crate::net::Outbox;
use crate::proxy::{Destination, EndpointId};
use crate::reactor::keys::KeyRange;
use crate::reactor::stream::{Stream, StreamCore, READ_CHUNK};
use crate::reactor::{Ctx, Readiness};
use crate::time::Timestamp;
use crate::timer::TimerId;

impl Outbox for CarriedUpstream {
    fn pending_output(&self) -> &[u8] {
        CarriedUpstream::pending_output(self)
    }
    fn consume_output(&mut self, _: Timestamp, n: usize) {
        CarriedUpstream::consume_output(self, n)
    }
}

impl StreamCore for CarriedUpstream {
    fn wants_input(&self) -> bool {
        CarriedUpstream::wants_input(self)
    }
    fn handle_input(&mut self, now: Timestamp, data: &[u8]) {
        CarriedUpstream::handle_input(self, now, data)
    }
    fn handle_eof(&mut self, _: Timestamp) {
        CarriedUpstream::handle_eof(self)
    }
    fn poll_timeout(&self) -> Option<Timestamp> {
        CarriedUpstream::poll_timeout(self)
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        CarriedUpstream::handle_timeout(self, now)
    }
}

/// A coaps+tcp upstream's TLS: the client configuration (its trusted CAs) and the name the
/// origin's certificate must carry.
#[derive(Clone, Debug)]
pub struct UpstreamTls {
    /// rustls' client configuration.
    pub config: Arc<rustls::ClientConfig>,
    /// The origin's name (the URI's host).
    pub name: rustls::pki_types::ServerName<'static>,
}

/// What the upstream counted.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    connects: u64,
    connect_failures: u64,
    closed: u64,
}

/// The connections towards one CoAP-over-TCP origin. See the module docs.
pub struct StreamUpstream {
    origin: SocketAddr,
    limits: ConnLimits,
    /// coaps+tcp: the TLS configuration and the name the origin's certificate must have.
    tls: Option<UpstreamTls>,
    /// The engine's open endpoints towards the origin, with their connection if one is up.
    endpoints: HashMap<EndpointId, Option<Stream<CarriedUpstream>>>,
    /// Endpoints opened whose connection is to be made at the next settle.
    to_connect: Vec<EndpointId>,
    /// Datagrams for endpoints whose connection is still to be made (at the next settle).
    waiting: Vec<(EndpointId, Vec<u8>)>,
    /// Endpoints written to since the last settle.
    written: Vec<EndpointId>,
    /// Endpoint `e`'s connection has the range's key `e`.
    keys: KeyRange,
    buf: Vec<u8>,
    counts: Counts,
}

impl StreamUpstream {
    /// Connections towards `origin`, each bounded by `limits`, over TLS if `tls` is given.
    pub fn new(origin: SocketAddr, limits: ConnLimits, tls: Option<UpstreamTls>) -> Self {
        StreamUpstream {
            origin,
            limits,
            tls,
            endpoints: HashMap::new(),
            to_connect: Vec::new(),
            waiting: Vec::new(),
            written: Vec::new(),
            keys: KeyRange::default(),
            buf: vec![0; READ_CHUNK],
            counts: Counts::default(),
        }
    }

    fn scheme(&self) -> &'static str {
        match self.tls {
            Some(_) => "coaps+tcp",
            None => "coap+tcp",
        }
    }

    fn connect(&mut self, ctx: &mut Ctx<'_>, id: EndpointId, engine: &mut Intake) {
        let Some(key) = self.keys.key(id.0) else {
            return;
        };
        let tls = match &self.tls {
            None => None,
            Some(t) => match TlsSession::client(Arc::clone(&t.config), t.name.clone()) {
                Ok(session) => Some(session),
                Err(e) => {
                    log::warn!("coaps+tcp upstream {}: {e}", self.origin);
                    return engine.upstream_failed(id, UpstreamFailure::Closed);
                }
            },
        };
        let core = CarriedUpstream::new(ctx.now(), self.limits, tls);
        match Stream::connect(ctx, self.origin, key, core) {
            Ok(stream) => {
                self.counts.connects += 1;
                self.endpoints.insert(id, Some(stream));
                self.pump(ctx, id, engine);
            }
            Err(e) => {
                self.counts.connect_failures += 1;
                log::info!(
                    "{} upstream {}: cannot connect: {e}",
                    self.scheme(),
                    self.origin
                );
                engine.upstream_failed(id, UpstreamFailure::Closed);
            }
        }
    }

    /// Reads, hands the origin's answers to the engine, writes; closes a connection that is
    /// over.
    fn pump(&mut self, ctx: &mut Ctx<'_>, id: EndpointId, engine: &mut Intake) {
        let now = ctx.now();
        let Some(Some(stream)) = self.endpoints.get_mut(&id) else {
            return;
        };
        let read = stream.read(now, &mut self.buf);
        while let Some(datagram) = stream.core_mut().poll_to_engine() {
            engine.upstream(id, &datagram);
        }
        let io = read.and_then(|()| stream.flush(now));
        let over = stream.core().ended().is_some()
            && (stream.core().pending_output().is_empty() || stream.eof());
        if io.is_err() || over {
            let why = match (&io, stream.core().ended()) {
                (Err(e), _) => e.to_string(),
                (_, Some(ending)) => match stream.core().tls_error() {
                    Some(tls) => format!("connection ended: {tls}"),
                    None => format!("connection ended: {ending:?}"),
                },
                _ => String::new(),
            };
            log::info!("{} upstream {}: {why}", self.scheme(), self.origin);
            return self.drop_connection(ctx, id, engine);
        }
        stream.settle(ctx);
    }

    /// The connection of endpoint `id` is gone; the endpoint stays, and the next datagram
    /// on it connects again.
    fn drop_connection(&mut self, ctx: &mut Ctx<'_>, id: EndpointId, engine: &mut Intake) {
        if let Some(slot) = self.endpoints.get_mut(&id) {
            if let Some(stream) = slot.take() {
                stream.close(ctx);
                self.counts.closed += 1;
            }
        }
        engine.upstream_failed(id, UpstreamFailure::Closed);
    }
}

impl Transport for StreamUpstream {
    fn keys_needed(&self) -> u32 {
        MAX_ENDPOINTS
    }

    fn start(&mut self, _: &mut Ctx<'_>, keys: KeyRange) -> io::Result<()> {
        self.keys = keys;
        Ok(())
    }

    fn keys(&self) -> KeyRange {
        self.keys
    }

    /// Readiness of a connection.
    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness, engine: &mut Intake) {
        let Some(id) = self.keys.index(key).map(EndpointId) else {
            return;
        };
        let Some(Some(stream)) = self.endpoints.get_mut(&id) else {
            return;
        };
        match stream.on_ready(ready) {
            Ok(()) => self.pump(ctx, id, engine),
            Err(e) => {
                self.counts.connect_failures += 1;
                log::info!("{} upstream {}: {e}", self.scheme(), self.origin);
                self.drop_connection(ctx, id, engine);
            }
        }
    }

    /// A connection's timer.
    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32, engine: &mut Intake) {
        let Some(id) = self.keys.index(key).map(EndpointId) else {
            return;
        };
        if let Some(Some(stream)) = self.endpoints.get_mut(&id) {
            if stream.on_timer(ctx.now(), timer) {
                self.pump(ctx, id, engine);
            }
        }
    }

    fn carries(&self, to: Destination) -> bool {
        matches!(to, Destination::Upstream(id) if self.endpoints.contains_key(&id))
    }

    /// A datagram the engine sent on endpoint `id`: framed, or kept until its connection is
    /// made (at settle).
    fn send(&mut self, _now: Timestamp, to: Destination, datagram: &[u8]) -> io::Result<()> {
        let Destination::Upstream(id) = to else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        match self.endpoints.get_mut(&id) {
            Some(Some(stream)) => {
                stream.core_mut().send(datagram);
                self.written.push(id);
            }
            Some(None) => self.waiting.push((id, datagram.to_vec())),
            None => {}
        }
        Ok(())
    }

    /// After the engine's transmissions: makes the connections it needs, and writes.
    fn settle(&mut self, ctx: &mut Ctx<'_>, engine: &mut Intake) {
        for id in std::mem::take(&mut self.to_connect) {
            if matches!(self.endpoints.get(&id), Some(None)) {
                self.connect(ctx, id, engine);
            }
        }
        for (id, datagram) in std::mem::take(&mut self.waiting) {
            if matches!(self.endpoints.get(&id), Some(None)) {
                self.connect(ctx, id, engine);
            }
            if let Some(Some(stream)) = self.endpoints.get_mut(&id) {
                stream.core_mut().send(&datagram);
                self.written.push(id);
            }
        }
        let mut written = std::mem::take(&mut self.written);
        written.sort_unstable_by_key(|id| id.0);
        written.dedup();
        for &id in &written {
            self.pump(ctx, id, engine);
        }
        written.clear();
        self.written = written;
    }

    fn claims(&self, origin: SocketAddr) -> Claim {
        match origin == self.origin {
            true => Claim::Origin,
            false => Claim::No,
        }
    }

    /// The engine opened endpoint `id`: its connection is made at this turn's settle.
    fn open_endpoint(&mut self, _: &mut Ctx<'_>, id: EndpointId, _: SocketAddr) -> io::Result<()> {
        self.endpoints.insert(id, None);
        self.to_connect.push(id);
        Ok(())
    }

    /// The engine closed endpoint `id`: Release goes out, and the socket closes.
    fn close_endpoint(&mut self, ctx: &mut Ctx<'_>, id: EndpointId) {
        if let Some(Some(mut stream)) = self.endpoints.remove(&id) {
            stream.core_mut().release();
            let _ = stream.flush(ctx.now());
            stream.close(ctx);
        }
    }

    /// The upstream's metrics (`backoffd_coap_stream_upstream_*`).
    fn write_metrics(&self, out: &mut MetricsWriter) {
        let up = self.endpoints.values().filter(|s| s.is_some()).count();
        out.gauge(
            "backoffd_coap_stream_upstream_connections",
            "Connections open to the CoAP-over-TCP upstream.",
            up as f64,
        );
        out.labelled_counter(
            "backoffd_coap_stream_upstream_connections_total",
            "Connections to the CoAP-over-TCP upstream: made, failed to connect, closed after.",
            "outcome",
            &[
                ("connected", self.counts.connects),
                ("connect_failed", self.counts.connect_failures),
                ("closed", self.counts.closed),
            ],
        );
    }
}
