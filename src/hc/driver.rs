//! The cross-proxy's sockets: an HTTP/1.1 listener (`--http-listen`,
//! [`crate::http1::driver::HttpServer`]), and the [`HcFront`] core between its connections
//! and the proxy engine.
//!
//! It lives inside the proxy's component (`crate::proxy::ProxyComponent`), which hands it
//! readiness and timers for its keys and moves CoAP datagrams between it and the engine in
//! the same turn of the loop: an HTTP request costs no extra wake-up on its way to CoAP.

// I/O module: The cross-proxy's driver: owns its listener and logs for it.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::SocketAddr;

use crate::http1::driver::{ConnCounts, ConnId, HttpApp, HttpServer};
use crate::http1::{self, Http1Connection, Request};
use crate::proxy::LocalClient;
use crate::reactor::{Ctx, Readiness, TimerSlot};
use crate::time::Timestamp;
use crate::timer::TimerId;

use super::{HcConfig, HcFront};

/// The listener's and connections' settings.
#[derive(Clone, Debug)]
pub struct HttpFrontConfig {
    /// `--http-listen`.
    pub addr: SocketAddr,
    /// Limits and timeouts of each HTTP/1.1 connection.
    pub http: http1::Config,
    /// Connections open at once; past it, the one that made the least progress is closed for
    /// a new one ([`http1::EvictionRank`]), or the new one is refused.
    pub max_connections: usize,
    /// What request bodies in flight may hold, received by the connections or held by the
    /// exchanges, together (`--http-max-inflight-bytes`); past it, 503 with `Retry-After`.
    pub max_inflight_body: usize,
    /// The core's settings.
    pub front: HcConfig,
}

/// The core as the HTTP server's application: requests in, connections coming and going.
impl HttpApp for HcFront {
    fn request(&mut self, ctx: &mut Ctx<'_>, id: ConnId, req: Request, _: &mut Http1Connection) {
        HcFront::request(self, ctx.now(), id, &req);
    }

    fn opened(&mut self, id: ConnId) {
        self.open(id);
    }

    fn closed(&mut self, now: Timestamp, id: ConnId) {
        self.close(now, id);
    }

    fn refused(&mut self, status: u16) {
        self.count_refusal(status);
    }

    fn held_body_bytes(&self) -> usize {
        HcFront::held_body_bytes(self)
    }
}

/// See the module docs. Its keys start at `key_base`: the listener's (and the core's timer),
/// then the connections'.
pub struct HttpFront {
    server: HttpServer,
    front: HcFront,
    timer: TimerSlot,
    key_base: u32,
}

impl HttpFront {
    /// Binds the listener; its keys start at `key_base`.
    pub fn bind(config: HttpFrontConfig, key_base: u32) -> io::Result<Self> {
        let max = config.max_connections;
        let server = HttpServer::bind(config.addr, config.http, max, key_base)?;
        Ok(HttpFront {
            server: server.with_body_budget(config.max_inflight_body),
            front: HcFront::new(config.front),
            timer: TimerSlot::default(),
            key_base,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.server.local_addr()
    }

    /// The core, for metrics.
    pub fn front(&self) -> &HcFront {
        &self.front
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.server.connections()
    }

    /// Connections accepted and closed.
    pub fn counts(&self) -> ConnCounts {
        self.server.counts().0
    }

    /// Request-body bytes held against `--http-max-inflight-bytes`: by the connections
    /// receiving them and by the exchanges in flight.
    pub fn held_body_bytes(&self) -> usize {
        self.server.held_body_bytes() + self.front.held_body_bytes()
    }

    /// Registers the listener.
    pub fn start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        let addr = self.local_addr()?;
        self.server.start(ctx, "http")?;
        log::info!("HTTP cross-proxy listening on {addr}");
        Ok(())
    }

    /// Whether `key` is one of ours.
    pub fn owns(&self, key: u32) -> bool {
        key >= self.key_base
    }

    /// Readiness of the listener or a connection.
    pub fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness) {
        self.server.on_ready(ctx, key, ready, &mut self.front);
    }

    /// A timer of the listener, a connection or the core.
    pub fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32) {
        if self.server.on_timer(ctx, timer, key, &mut self.front) {
            return;
        }
        if self.timer.fired(timer) {
            self.front.handle_timeout(ctx.now());
        }
    }

    /// The next CoAP datagram for the engine, and its in-process source.
    pub fn to_engine(&mut self) -> Option<(LocalClient, Vec<u8>)> {
        self.front.poll_to_engine()
    }

    /// Whether the core has datagrams for the engine.
    pub fn has_to_engine(&self) -> bool {
        self.front.has_to_engine()
    }

    /// A datagram the engine sent to an in-process client.
    pub fn from_engine(&mut self, now: Timestamp, to: LocalClient, bytes: &[u8]) {
        self.front.from_engine(now, to, bytes);
    }

    /// Writes the answers the core has ready and re-arms the core's timer.
    pub fn write_answers(&mut self, ctx: &mut Ctx<'_>) {
        while let Some((id, answer)) = self.front.poll_answer() {
            self.server
                .answer(ctx, id, |http| answer.write(http), &mut self.front);
        }
        let key = self.key_base;
        self.timer.set_no_later(ctx, self.front.poll_timeout(), key);
    }

    /// Stops accepting; streams end, every connection finishes what it owes and closes.
    pub fn shutdown(&mut self, ctx: &mut Ctx<'_>) {
        self.front.end_streams();
        self.write_answers(ctx);
        self.server.shutdown(ctx, &mut self.front);
    }
}
