//! The CoAP-over-TCP upstream (`--upstream coap+tcp://`, RFC 8323): each of the engine's
//! endpoints towards the origin is a TCP connection (a sans-IO [`UpstreamConn`] on the stream
//! driver) instead of a UDP socket. The engine sends and reads datagrams as for any
//! upstream, each request once (the upstream is marked reliable); this part frames them.
//!
//! A connection opens when the engine opens its endpoint, and again when the engine sends on
//! an endpoint whose connection has closed. When one fails or closes, the engine hears it
//! ([`Proxy::handle_upstream_closed`]): what waits there gets 5.02, since nothing is resent.

// I/O module: The TCP upstream's driver: owns its connections' sockets.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use super::stream_listener::TCP_KEY;
use super::{EndpointId, Proxy};
use crate::coap_tcp::carried::CarriedUpstream;
use crate::coap_tcp::tls::TlsSession;
use crate::coap_tcp::ConnLimits;
use crate::metrics::MetricsWriter;
use crate::net::Outbox;
use crate::reactor::stream::{Stream, StreamCore, READ_CHUNK};
use crate::reactor::{Ctx, Readiness};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// Endpoint `e`'s connection has key `STREAM_UPSTREAM_KEY + e`: past the stream listeners'.
pub const STREAM_UPSTREAM_KEY: u32 = TCP_KEY + (4 << 21);
/// The most endpoints whose keys fit below the coaps keys.
const MAX_ENDPOINTS: u32 = 1 << 21;

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
    /// Datagrams for endpoints whose connection is still to be made (at the next settle).
    waiting: Vec<(EndpointId, Vec<u8>)>,
    /// Endpoints written to since the last settle.
    written: Vec<EndpointId>,
    /// Whether the engine was told something since the last settle.
    fed: bool,
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
            waiting: Vec::new(),
            written: Vec::new(),
            fed: false,
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

    /// Whether endpoints towards `peer` are connections of this upstream.
    pub fn is_for(&self, peer: SocketAddr) -> bool {
        peer == self.origin
    }

    /// Whether endpoint `id` is one of this upstream's.
    pub fn carries(&self, id: EndpointId) -> bool {
        self.endpoints.contains_key(&id)
    }

    /// Whether `key` is one of this upstream's connections'.
    pub fn owns(&self, key: u32) -> bool {
        (STREAM_UPSTREAM_KEY..STREAM_UPSTREAM_KEY + MAX_ENDPOINTS).contains(&key)
    }

    /// The engine opened endpoint `id`: its connection is made at once.
    pub fn open(&mut self, ctx: &mut Ctx<'_>, id: EndpointId, engine: &mut Proxy) {
        self.endpoints.insert(id, None);
        self.connect(ctx, id, engine);
    }

    /// The engine closed endpoint `id`: Release goes out, and the socket closes.
    pub fn close(&mut self, ctx: &mut Ctx<'_>, id: EndpointId) {
        if let Some(Some(mut stream)) = self.endpoints.remove(&id) {
            stream.core_mut().release();
            let _ = stream.flush(ctx.now());
            stream.close(ctx);
        }
    }

    /// A datagram the engine sent on endpoint `id`.
    pub fn send(&mut self, now: Timestamp, id: EndpointId, datagram: &[u8]) {
        match self.endpoints.get_mut(&id) {
            Some(Some(stream)) => {
                stream.core_mut().send(now, datagram);
                self.written.push(id);
            }
            Some(None) => self.waiting.push((id, datagram.to_vec())),
            None => {}
        }
    }

    /// Readiness of a connection.
    pub fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness, engine: &mut Proxy) {
        let id = EndpointId(key - STREAM_UPSTREAM_KEY);
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
    pub fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32, engine: &mut Proxy) {
        let id = EndpointId(key - STREAM_UPSTREAM_KEY);
        if let Some(Some(stream)) = self.endpoints.get_mut(&id) {
            if stream.on_timer(ctx.now(), timer) {
                self.pump(ctx, id, engine);
            }
        }
    }

    /// After the engine's transmissions: makes the connections it needs, and writes. True if
    /// the engine was told something since the last call.
    pub fn settle(&mut self, ctx: &mut Ctx<'_>, engine: &mut Proxy) -> bool {
        for (id, datagram) in std::mem::take(&mut self.waiting) {
            if matches!(self.endpoints.get(&id), Some(None)) {
                self.connect(ctx, id, engine);
            }
            if let Some(Some(stream)) = self.endpoints.get_mut(&id) {
                stream.core_mut().send(ctx.now(), &datagram);
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
        std::mem::take(&mut self.fed)
    }

    fn connect(&mut self, ctx: &mut Ctx<'_>, id: EndpointId, engine: &mut Proxy) {
        if id.0 >= MAX_ENDPOINTS {
            return;
        }
        let tls = match &self.tls {
            None => None,
            Some(t) => match TlsSession::client(Arc::clone(&t.config), t.name.clone()) {
                Ok(session) => Some(session),
                Err(e) => {
                    log::warn!("coaps+tcp upstream {}: {e}", self.origin);
                    engine.handle_upstream_closed(ctx.now(), id);
                    self.fed = true;
                    return;
                }
            },
        };
        let core = CarriedUpstream::new(ctx.now(), self.limits, tls);
        match Stream::connect(ctx, self.origin, STREAM_UPSTREAM_KEY + id.0, core) {
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
                engine.handle_upstream_closed(ctx.now(), id);
                self.fed = true;
            }
        }
    }

    /// Reads, hands the origin's answers to the engine, writes; closes a connection that is
    /// over.
    fn pump(&mut self, ctx: &mut Ctx<'_>, id: EndpointId, engine: &mut Proxy) {
        let now = ctx.now();
        let Some(Some(stream)) = self.endpoints.get_mut(&id) else {
            return;
        };
        let read = stream.read(now, &mut self.buf);
        while let Some(datagram) = stream.core_mut().poll_to_engine() {
            engine.handle_upstream_datagram(now, id, &datagram);
            self.fed = true;
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
    fn drop_connection(&mut self, ctx: &mut Ctx<'_>, id: EndpointId, engine: &mut Proxy) {
        if let Some(slot) = self.endpoints.get_mut(&id) {
            if let Some(stream) = slot.take() {
                stream.close(ctx);
                self.counts.closed += 1;
            }
        }
        engine.handle_upstream_closed(ctx.now(), id);
        self.fed = true;
    }

    /// The upstream's metrics (`backoffd_coap_stream_upstream_*`).
    pub fn write_metrics(&self, out: &mut MetricsWriter) {
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
