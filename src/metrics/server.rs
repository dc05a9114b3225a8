//! The metrics and health endpoint as a reactor component: a TCP listener (loopback by
//! default) whose connections run the sans-IO [`http1::Http1Connection`].
//!
//! Only socket plumbing lives here: routes are [`super::routes`], HTTP rules are
//! [`crate::http1`]'s. A connection that is done is closed gracefully: its write side is shut
//! and what the peer still sends is read and dropped until it closes or a second (`LINGER`) passes, so
//! the last answer is not destroyed by a reset (RFC 9112 §9.6).

// I/O module: The metrics endpoint's driver: owns its listener and connections and logs for them.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::{Shutdown, SocketAddr};
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use slab::Slab;

use super::routes::{route, HttpStats, Reply};
use super::{write_loop_metrics, MetricsSources, MetricsWriter};
use crate::http1::{self, Http1Connection};
use crate::net::Outbox;
use crate::reactor::listener::Listening;
use crate::reactor::stream::{Stream, StreamCore, READ_CHUNK};
use crate::reactor::{Component, Ctx, Readiness};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// Where the endpoint listens unless configured: loopback, so metrics stay on the host.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9102";
/// How long a closed connection keeps draining the peer's input.
const LINGER: Duration = Duration::from_secs(1);
/// How long a kept-alive connection may wait for its next request. Shorter than HTTP/1.1's
/// usual minute: a scraper reconnects cheaply, and idle connections hold slots of the cap.
pub const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(10);
/// The listener's registration key; connection `i` of the slab has key `i + 1`.
const LISTENER: u32 = 0;

/// Endpoint settings.
#[derive(Clone, Debug)]
pub struct MetricsConfig {
    /// Address to listen on; [`DEFAULT_ADDR`] unless configured.
    pub addr: SocketAddr,
    /// Limits and timeouts of each HTTP/1.1 connection.
    pub http: http1::Config,
    /// Connections open at once. At the cap, a new connection replaces the one idle the
    /// longest between requests, or, if none is idle, is closed as soon as it is accepted.
    pub max_connections: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            addr: DEFAULT_ADDR.parse().expect("literal"),
            http: http1::Config {
                idle_timeout: KEEP_ALIVE_IDLE,
                ..http1::Config::default()
            },
            max_connections: 64,
        }
    }
}

/// One connection's core: the HTTP/1.1 server, then, once it is closed and our write side
/// is shut, a linger that drops what the peer still sends until its close or a deadline.
struct HttpCore {
    http: Http1Connection,
    linger_until: Option<Timestamp>,
}

impl Outbox for HttpCore {
    fn pending_output(&self) -> &[u8] {
        self.http.pending_output()
    }
    fn consume_output(&mut self, _: Timestamp, n: usize) {
        self.http.consume_output(n)
    }
}

impl HttpCore {
    /// See [`Http1Connection::idle_since`]; a lingering connection is not idle, it is closing.
    fn idle_since(&self) -> Option<Timestamp> {
        self.linger_until
            .is_none()
            .then(|| self.http.idle_since())
            .flatten()
    }
}

impl StreamCore for HttpCore {
    fn wants_input(&self) -> bool {
        self.linger_until.is_some() || self.http.wants_input()
    }
    fn handle_input(&mut self, now: Timestamp, data: &[u8]) {
        if self.linger_until.is_none() {
            self.http.handle_input(now, data);
        }
    }
    fn handle_eof(&mut self, _now: Timestamp) {
        if self.linger_until.is_none() {
            self.http.handle_eof();
        }
    }
    fn poll_timeout(&self) -> Option<Timestamp> {
        self.linger_until.or_else(|| self.http.poll_timeout())
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        if self.linger_until.is_none() {
            self.http.handle_timeout(now);
        }
    }
}

/// The endpoint. See the module docs.
pub struct MetricsServer {
    config: MetricsConfig,
    listener: Listening,
    conns: Slab<Stream<HttpCore>>,
    /// What a scrape reports besides the loop and this endpoint, in order.
    sources: MetricsSources,
    buf: Vec<u8>,
    stats: HttpStats,
}

impl MetricsServer {
    /// Binds the listener; failures surface at start-up. A scrape reports the loop's own
    /// metrics, then `sources`, then this endpoint's.
    pub fn bind(config: MetricsConfig, sources: MetricsSources) -> io::Result<Self> {
        let listener = TcpListener::bind(config.addr)?;
        Ok(MetricsServer {
            config,
            listener: Listening::Bound(listener),
            conns: Slab::new(),
            sources,
            buf: vec![0; READ_CHUNK],
            stats: HttpStats::default(),
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    fn accept(&mut self, ctx: &mut Ctx<'_>) {
        while let Some((stream, _)) = self.listener.driven().and_then(|l| l.accept(ctx)) {
            self.add_conn(ctx, stream);
        }
    }

    fn add_conn(&mut self, ctx: &mut Ctx<'_>, stream: TcpStream) {
        if self.conns.len() >= self.config.max_connections && !self.close_longest_idle(ctx) {
            self.stats.connections_refused += 1;
            return;
        }
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        let core = HttpCore {
            http: Http1Connection::new(ctx.now(), self.config.http.clone()),
            linger_until: None,
        };
        let Ok(conn) = Stream::accepted(ctx, stream, key as u32 + 1, core) else {
            return;
        };
        entry.insert(conn);
        self.stats.connections += 1;
        self.pump(ctx, key);
    }

    /// Makes room at the cap: closes the connection idle the longest between requests, if
    /// any. Otherwise one scraper's idle keep-alive connections could lock out the next.
    fn close_longest_idle(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let idle = self
            .conns
            .iter()
            .filter_map(|(key, c)| Some((c.core().idle_since()?, key)));
        let Some((_, key)) = idle.min() else {
            return false;
        };
        self.stats.idle_closed += 1;
        self.remove(ctx, key, "idle, closed for a new connection");
        true
    }

    /// Reads, answers and writes until the connection can make no more progress (or used its
    /// budget), then closes it if it is done and keeps its interest and timer up to date.
    fn pump(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        loop {
            let Some(conn) = self.conns.get_mut(key) else {
                return;
            };
            if conn.core().linger_until.is_some() {
                return self.drain_lingering(ctx, key);
            }
            let io = conn.read(ctx.now(), &mut self.buf).and_then(|()| {
                self.answer(ctx, key);
                self.conns[key].flush(ctx.now())
            });
            if let Err(e) = io {
                return self.remove(ctx, key, &e.to_string());
            }
            // Written output can unpause parsing: answer what that parsed before stopping.
            let conn = &self.conns[key];
            if conn.core().http.backlog() == 0 && !conn.can_read() {
                break;
            }
        }
        self.settle(ctx, key);
    }

    fn answer(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        while let Some(req) = self.conns[key].core_mut().http.poll_request() {
            let reply = Reply::new(route(&req.method, &req.path), || self.document(ctx));
            self.stats.count(reply.status);
            let http = &mut self.conns[key].core_mut().http;
            http.respond_with(reply.status, reply.fields, reply.content_type, &reply.body);
        }
    }

    /// The loop's metrics, every source's, then this endpoint's own.
    fn document(&self, ctx: &Ctx<'_>) -> String {
        let mut out = MetricsWriter::new();
        write_loop_metrics(ctx.loop_stats(), &mut out);
        for source in &self.sources {
            source.write_metrics(&mut out);
        }
        let mut stats = self.stats.clone();
        stats.accept_failures = self.listener.failures();
        stats.write(&mut out, self.conns.len());
        out.finish()
    }

    /// After I/O: close a finished connection, or update its interest and timer.
    fn settle(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        let conn = &mut self.conns[key];
        if let Some(status) = conn.core_mut().http.poll_refusal() {
            self.stats.count(status);
        }
        let http = &conn.core().http;
        if http.is_closed() && http.pending_output().is_empty() {
            if conn.eof() || conn.socket().shutdown(Shutdown::Write).is_err() {
                return self.remove(ctx, key, "done");
            }
            conn.core_mut().linger_until = Some(ctx.now() + LINGER);
            return self.drain_lingering(ctx, key);
        }
        conn.settle(ctx);
    }

    /// Reads and drops input of a closed connection until the peer closes or would block.
    fn drain_lingering(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        let conn = &mut self.conns[key];
        if let Err(e) = conn.read(ctx.now(), &mut self.buf) {
            return self.remove(ctx, key, &e.to_string());
        }
        if conn.eof() {
            return self.remove(ctx, key, "closed");
        }
        conn.settle(ctx);
    }

    fn remove(&mut self, ctx: &mut Ctx<'_>, key: usize, why: &str) {
        let Some(conn) = self.conns.try_remove(key) else {
            return;
        };
        log::debug!("metrics connection {key} closed: {why}");
        let mut core = conn.close(ctx);
        if let Some(status) = core.http.poll_refusal() {
            self.stats.count(status);
        }
    }
}

impl Component for MetricsServer {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        let addr = self.local_addr()?;
        self.listener.start(ctx, LISTENER, "metrics")?;
        log::info!("metrics listening on {addr} (http://{addr}/metrics)");
        Ok(())
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness) {
        let Some(slot) = key.checked_sub(1) else {
            if let Some(listener) = self.listener.driven() {
                listener.on_ready();
            }
            return self.accept(ctx);
        };
        let key = slot as usize;
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if let Err(e) = conn.on_ready(ready) {
            return self.remove(ctx, key, &e.to_string());
        }
        self.pump(ctx, key);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32) {
        let Some(key) = key.checked_sub(1).map(|k| k as usize) else {
            if self.listener.driven().is_some_and(|l| l.on_timer(timer)) {
                self.accept(ctx);
            }
            return;
        };
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if !conn.on_timer(ctx.now(), timer) {
            return;
        }
        if conn.core().linger_until.is_some() {
            return self.remove(ctx, key, "linger time over");
        }
        self.pump(ctx, key);
    }

    /// Stops accepting, then lets every connection finish the answers it owes and close.
    fn on_shutdown(&mut self, ctx: &mut Ctx<'_>) {
        self.listener.close(ctx);
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.conns[key].core_mut().http.close_after_answers();
            self.pump(ctx, key);
        }
    }

    fn is_drained(&self) -> bool {
        self.conns.is_empty()
    }
}
