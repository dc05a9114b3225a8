//! An HTTP/1.1 listener and its connections on the loop, around the sans-IO
//! [`Http1Connection`]: what the metrics endpoint and the HTTP cross-proxy share. The
//! application (an [`HttpApp`]) sees requests and answers them, now or later; everything
//! about sockets stays here.
//!
//! A connection at the cap: the one that made the least progress is closed for the new one
//! ([`EvictionRank`]: first those with no complete request head, oldest first, then idle
//! keep-alive ones, longest idle first, then those receiving a body behind the minimum rate;
//! RFC 9112 §9.5), or, if every one owes or streams answers, the new one is closed at once.
//! So slots held by peers that ask for nothing cannot lock out clients that send requests.
//!
//! Request bodies are held whole until answered, by the connections and then by the
//! application, so the server keeps a budget for them all ([`HttpServer::with_body_budget`]):
//! before feeding a connection it gives it as allowance the budget less what the others and
//! the application ([`HttpApp::held_body_bytes`]) hold, and a body past it is refused with 503
//! (see [`Http1Connection::set_body_allowance`]).
//!
//! A connection that is done is closed gracefully: its write side is shut and what the peer
//! still sends is read and dropped until it closes or [`LINGER`] passes, so the last answer is
//! not destroyed by a reset (RFC 9112 §9.6).

// I/O module: The HTTP/1.1 driver: owns a listener and its connections.
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

use super::{Config, EvictionRank, Http1Connection, Request};
use crate::net::Outbox;
use crate::reactor::listener::Listening;
use crate::reactor::stream::{Stream, StreamCore, READ_CHUNK};
use crate::reactor::{Ctx, Readiness};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// How long a closed connection keeps draining the peer's input.
pub const LINGER: Duration = Duration::from_secs(1);

/// A connection, as the application knows it: never reused, so an answer that comes late
/// for a closed connection cannot reach the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// What an application does with the connections' requests.
pub trait HttpApp {
    /// A request on `id`, in the connection's order. Answer it on `http` now, or later
    /// through [`HttpServer::answer`], in the same order.
    fn request(&mut self, ctx: &mut Ctx<'_>, id: ConnId, req: Request, http: &mut Http1Connection);

    /// A connection opened.
    fn opened(&mut self, _id: ConnId) {}

    /// A connection closed: what it waits for is of no use any more.
    fn closed(&mut self, _now: Timestamp, _id: ConnId) {}

    /// The client of the connection's open stream went away
    /// ([`Http1Connection::stream_gone`]); the stream is ended right after.
    fn stream_gone(&mut self, now: Timestamp, id: ConnId) {
        self.closed(now, id);
    }

    /// A request the connection refused by itself (400, 408, 413, 431, 503, ...).
    fn refused(&mut self, _status: u16) {}

    /// Bytes of request bodies the application holds (requests taken and not done with),
    /// which count against the server's body budget ([`HttpServer::with_body_budget`]). Keep it
    /// cheap: it is asked before each connection is fed.
    fn held_body_bytes(&self) -> usize {
        0
    }
}

/// Connections accepted and closed, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnCounts {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed at once because the cap was reached and none was idle.
    pub refused: u64,
    /// Idle keep-alive connections closed at the cap to make room for a new one.
    pub idle_closed: u64,
    /// Connections with no complete request head, or receiving a body behind the minimum
    /// rate, closed at the cap to make room for a new one.
    pub slow_closed: u64,
}

/// One connection's core: the HTTP/1.1 server, then, once it is closed and our write side
/// is shut, a linger that drops what the peer still sends until its close or a deadline.
struct HttpCore {
    id: ConnId,
    http: Http1Connection,
    linger_until: Option<Timestamp>,
    /// [`Http1Connection::held_body_bytes`] as last counted into the server's total.
    held_body: usize,
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
    /// See [`Http1Connection::eviction_rank`]; a lingering connection has none: it is
    /// closing, and its last answer may still be on its way.
    fn eviction_rank(&self, now: Timestamp) -> Option<EvictionRank> {
        (self.linger_until.is_none())
            .then(|| self.http.eviction_rank(now))
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

/// A listener and its connections. Keys are relative to `key_base`: the listener's is
/// `key_base`, connection slot `i`'s is `key_base + i + 1`.
pub struct HttpServer {
    listener: Listening,
    conns: Slab<Stream<HttpCore>>,
    /// Slots by connection id.
    slots: std::collections::HashMap<ConnId, usize>,
    next_id: u64,
    http: Config,
    max_connections: usize,
    key_base: u32,
    buf: Vec<u8>,
    counts: ConnCounts,
    /// What request bodies may hold, in the connections and the application together.
    body_budget: usize,
    /// What the connections' bodies hold: the sum of their `held_body`.
    conn_bodies: usize,
}

impl HttpServer {
    /// Binds `addr`; connections get `http`'s limits, at most `max_connections` at once.
    pub fn bind(
        addr: SocketAddr,
        http: Config,
        max_connections: usize,
        key_base: u32,
    ) -> io::Result<Self> {
        Ok(HttpServer {
            listener: Listening::Bound(TcpListener::bind(addr)?),
            conns: Slab::new(),
            slots: std::collections::HashMap::new(),
            next_id: 0,
            http,
            max_connections,
            key_base,
            buf: vec![0; READ_CHUNK],
            counts: ConnCounts::default(),
            body_budget: usize::MAX,
            conn_bodies: 0,
        })
    }

    /// Bounds the request bodies in flight, in the connections and in the application
    /// together, to `bytes`; a request whose body would pass it is refused with 503 and
    /// `Retry-After`. Unbounded unless set.
    pub fn with_body_budget(mut self, bytes: usize) -> Self {
        self.body_budget = bytes;
        self
    }

    /// Bytes of request bodies the connections hold (the application's are its own to tell).
    pub fn held_body_bytes(&self) -> usize {
        self.conn_bodies
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Registers the listener; `name` goes into its log lines.
    pub fn start(&mut self, ctx: &mut Ctx<'_>, name: &'static str) -> io::Result<()> {
        self.listener.start(ctx, self.key_base, name)
    }

    /// Whether `key` is the listener's or a connection's.
    pub fn owns(&self, key: u32) -> bool {
        key >= self.key_base && key - self.key_base <= self.conns.capacity() as u32
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Connections accepted and closed, and failed accepts.
    pub fn counts(&self) -> (ConnCounts, u64) {
        (self.counts, self.listener.failures())
    }

    /// Readiness of the listener or a connection.
    pub fn on_ready(
        &mut self,
        ctx: &mut Ctx<'_>,
        key: u32,
        ready: Readiness,
        app: &mut impl HttpApp,
    ) {
        let Some(slot) = (key - self.key_base).checked_sub(1) else {
            if let Some(listener) = self.listener.driven() {
                listener.on_ready();
            }
            return self.accept(ctx, app);
        };
        let slot = slot as usize;
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        if let Err(e) = conn.on_ready(ready) {
            return self.remove(ctx, slot, &e.to_string(), app);
        }
        self.pump(ctx, slot, app);
    }

    /// A timer of the listener (its accept pause) or a connection; false if it is neither's.
    pub fn on_timer(
        &mut self,
        ctx: &mut Ctx<'_>,
        timer: TimerId,
        key: u32,
        app: &mut impl HttpApp,
    ) -> bool {
        let Some(slot) = (key - self.key_base).checked_sub(1) else {
            let ours = self.listener.driven().is_some_and(|l| l.on_timer(timer));
            if ours {
                self.accept(ctx, app);
            }
            return ours;
        };
        let slot = slot as usize;
        let Some(conn) = self.conns.get_mut(slot) else {
            return true;
        };
        if !conn.on_timer(ctx.now(), timer) {
            return true;
        }
        if conn.core().linger_until.is_some() {
            self.remove(ctx, slot, "linger time over", app);
            return true;
        }
        self.pump(ctx, slot, app);
        true
    }

    /// Writes a later answer to connection `id` (if it is still open), then lets it go on.
    pub fn answer(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: ConnId,
        write: impl FnOnce(&mut Http1Connection),
        app: &mut impl HttpApp,
    ) {
        let Some(&slot) = self.slots.get(&id) else {
            return;
        };
        // An answer resumes parsing: bodies in the input are read against a fresh allowance.
        self.grant_allowance(slot, app);
        write(&mut self.conns[slot].core_mut().http);
        self.pump(ctx, slot, app);
    }

    /// Stops accepting; every connection finishes the answers it owes, then closes.
    pub fn shutdown(&mut self, ctx: &mut Ctx<'_>, app: &mut impl HttpApp) {
        self.listener.close(ctx);
        let slots: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for slot in slots {
            self.conns[slot].core_mut().http.close_after_answers();
            self.pump(ctx, slot, app);
        }
    }

    fn accept(&mut self, ctx: &mut Ctx<'_>, app: &mut impl HttpApp) {
        while let Some((stream, _)) = self.listener.driven().and_then(|l| l.accept(ctx)) {
            self.add_conn(ctx, stream, app);
        }
    }

    fn add_conn(&mut self, ctx: &mut Ctx<'_>, stream: TcpStream, app: &mut impl HttpApp) {
        if self.conns.len() >= self.max_connections && !self.close_least_progressed(ctx, app) {
            self.counts.refused += 1;
            return;
        }
        let entry = self.conns.vacant_entry();
        let slot = entry.key();
        let id = ConnId(self.next_id);
        let core = HttpCore {
            id,
            http: Http1Connection::new(ctx.now(), self.http.clone()),
            linger_until: None,
            held_body: 0,
        };
        let key = self.key_base + slot as u32 + 1;
        let Ok(conn) = Stream::accepted(ctx, stream, key, core) else {
            return;
        };
        entry.insert(conn);
        self.next_id += 1;
        self.slots.insert(id, slot);
        self.counts.accepted += 1;
        app.opened(id);
        self.pump(ctx, slot, app);
    }

    /// Makes room at the cap: closes the connection that made the least progress
    /// ([`EvictionRank`]), if one may be closed. Otherwise peers that hold connections without
    /// sending requests, or idle keep-alive ones, could lock out the next client.
    fn close_least_progressed(&mut self, ctx: &mut Ctx<'_>, app: &mut impl HttpApp) -> bool {
        let now = ctx.now();
        let ranked =
            (self.conns.iter()).filter_map(|(slot, c)| Some((c.core().eviction_rank(now)?, slot)));
        let Some((rank, slot)) = ranked.min() else {
            return false;
        };
        let why = match rank {
            EvictionRank::Idle { .. } => {
                self.counts.idle_closed += 1;
                "idle, closed for a new connection"
            }
            EvictionRank::NoHead { .. } => {
                self.counts.slow_closed += 1;
                "no request yet, closed for a new connection"
            }
            EvictionRank::SlowBody { .. } => {
                self.counts.slow_closed += 1;
                "body behind the minimum rate, closed for a new connection"
            }
        };
        self.remove(ctx, slot, why, app);
        true
    }

    /// Gives the connection in `slot` what the body budget has left beside the other
    /// connections and the application.
    fn grant_allowance(&mut self, slot: usize, app: &impl HttpApp) {
        let core = self.conns[slot].core_mut();
        let others = self.conn_bodies - core.held_body + app.held_body_bytes();
        (core.http).set_body_allowance(self.body_budget.saturating_sub(others));
    }

    /// Counts what the connection in `slot` holds now into the total.
    fn recount_bodies(&mut self, slot: usize) {
        let core = self.conns[slot].core_mut();
        let held = core.http.held_body_bytes();
        self.conn_bodies = self.conn_bodies - core.held_body + held;
        core.held_body = held;
    }

    /// Reads, hands requests to the application and writes until the connection can make
    /// no more progress (or used its budget), then settles it.
    fn pump(&mut self, ctx: &mut Ctx<'_>, slot: usize, app: &mut impl HttpApp) {
        loop {
            let Some(conn) = self.conns.get_mut(slot) else {
                return;
            };
            if conn.core().linger_until.is_some() {
                return self.drain_lingering(ctx, slot, app);
            }
            self.grant_allowance(slot, app);
            let conn = &mut self.conns[slot];
            let io = conn.read(ctx.now(), &mut self.buf).and_then(|()| {
                let conn = &mut self.conns[slot];
                let id = conn.core().id;
                while let Some(req) = conn.core_mut().http.poll_request() {
                    app.request(ctx, id, req, &mut conn.core_mut().http);
                }
                conn.flush(ctx.now())
            });
            if let Err(e) = io {
                return self.remove(ctx, slot, &e.to_string(), app);
            }
            // Written output can unpause parsing: hand over what that parsed before stopping.
            let conn = &self.conns[slot];
            if !conn.core().http.has_request() && !conn.can_read() {
                break;
            }
        }
        self.settle(ctx, slot, app);
    }

    /// After I/O: close a finished connection, or update its interest and timer.
    fn settle(&mut self, ctx: &mut Ctx<'_>, slot: usize, app: &mut impl HttpApp) {
        let now = ctx.now();
        self.recount_bodies(slot);
        let conn = &mut self.conns[slot];
        if let Some(status) = conn.core_mut().http.poll_refusal() {
            app.refused(status);
        }
        if conn.core().http.stream_gone() {
            app.stream_gone(now, conn.core().id);
            conn.core_mut().http.end_stream();
        }
        let http = &conn.core().http;
        if http.is_closed() && http.pending_output().is_empty() {
            if conn.eof() || conn.socket().shutdown(Shutdown::Write).is_err() {
                return self.remove(ctx, slot, "done", app);
            }
            conn.core_mut().linger_until = Some(now + LINGER);
            return self.drain_lingering(ctx, slot, app);
        }
        conn.settle(ctx);
    }

    /// Reads and drops input of a closed connection until the peer closes or would block.
    fn drain_lingering(&mut self, ctx: &mut Ctx<'_>, slot: usize, app: &mut impl HttpApp) {
        let conn = &mut self.conns[slot];
        if let Err(e) = conn.read(ctx.now(), &mut self.buf) {
            return self.remove(ctx, slot, &e.to_string(), app);
        }
        if conn.eof() {
            return self.remove(ctx, slot, "closed", app);
        }
        conn.settle(ctx);
    }

    fn remove(&mut self, ctx: &mut Ctx<'_>, slot: usize, why: &str, app: &mut impl HttpApp) {
        let Some(conn) = self.conns.try_remove(slot) else {
            return;
        };
        let mut core = conn.close(ctx);
        log::debug!("http connection {} closed: {why}", core.id.0);
        self.conn_bodies -= core.held_body;
        self.slots.remove(&core.id);
        if let Some(status) = core.http.poll_refusal() {
            app.refused(status);
        }
        app.closed(ctx.now(), core.id);
    }
}
