//! The HTTP cross-proxy composed with the CoAP proxy: one reactor component holding both,
//! wired together by the application (`--http-listen`). The proxy knows nothing of HTTP; it
//! sees in-process clients ([`Peer::Local`](crate::proxy::Peer::Local)) and hands their
//! datagrams out through [`ProxyComponent::poll_local`]. This component moves them between
//! the two in the same turn of the loop, so an HTTP request costs no extra wake-up on its
//! way to CoAP.

// I/O module: a reactor component, as the two drivers it joins.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;

use crate::metrics::{MetricsSource, MetricsWriter};
use crate::proxy::{ProxyComponent, FIRST_FOREIGN_KEY};
use crate::reactor::{Component, Ctx, Readiness};
use crate::timer::TimerId;

use super::driver::{HttpFront, HttpFrontConfig};

/// The CoAP proxy with the HTTP cross-proxy in front of it.
pub struct CrossProxy {
    proxy: ProxyComponent,
    http: HttpFront,
}

impl CrossProxy {
    /// Binds the HTTP listener in front of `proxy` (whose sockets are bound already).
    pub fn bind(proxy: ProxyComponent, config: HttpFrontConfig) -> io::Result<Self> {
        let http = HttpFront::bind(config, FIRST_FOREIGN_KEY)?;
        Ok(CrossProxy { proxy, http })
    }

    /// Moves CoAP datagrams between the cross-proxy and the engine, and writes the HTTP
    /// answers they make, until neither side has more. Writing an answer frees a pipelining
    /// slot, so the connection parses its next request at once: what the engine answers
    /// itself (a cache hit, a 403) must be taken in this turn too, or the request would wait
    /// for the in-process client's retransmission (issue 25, finding 5).
    fn shuttle(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        loop {
            while let Some((to, bytes)) = self.proxy.poll_local() {
                self.http.from_engine(now, to, &bytes);
            }
            self.http.write_answers(ctx);
            if !self.http.has_to_engine() {
                return;
            }
            while let Some((from, bytes)) = self.http.to_engine() {
                self.proxy.handle_local(now, from, &bytes);
            }
            self.proxy.settle(ctx);
        }
    }
}

impl Component for CrossProxy {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        self.http.start(ctx)?;
        self.proxy.on_start(ctx)
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness) {
        match self.http.owns(key) {
            true => self.http.on_ready(ctx, key, ready),
            false => self.proxy.on_ready(ctx, key, ready),
        }
        self.shuttle(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32) {
        match self.http.owns(key) {
            true => self.http.on_timer(ctx, timer, key),
            false => self.proxy.on_timer(ctx, timer, key),
        }
        self.shuttle(ctx);
    }

    fn on_shutdown(&mut self, ctx: &mut Ctx<'_>) {
        self.proxy.on_shutdown(ctx);
        self.http.shutdown(ctx);
        self.shuttle(ctx);
    }

    fn is_drained(&self) -> bool {
        self.proxy.is_drained() && self.http.connections() == 0
    }
}

impl MetricsSource for CrossProxy {
    fn write_metrics(&self, out: &mut MetricsWriter) {
        self.proxy.write_metrics(out);
        super::metrics::write_http_metrics(&self.http, out);
    }
}
