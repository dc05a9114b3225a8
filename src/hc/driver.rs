//! The cross-proxy's sockets: a TCP listener (`--http-listen`) whose connections run the
//! sans-IO [`Http1Connection`], and the [`HcFront`] core between them and the proxy engine.
//!
//! It lives inside the proxy's component (`crate::proxy::ProxyComponent`), which hands it
//! readiness and timers for its keys and moves CoAP datagrams between it and the engine in
//! the same turn of the loop: an HTTP request costs no extra wake-up on its way to CoAP.

// I/O module: The cross-proxy's driver: owns its listener and connections and logs for them.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr};
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use slab::Slab;

use crate::http1::{self, Http1Connection};
use crate::net::Outbox;
use crate::reactor::listener::Listening;
use crate::reactor::stream::{Stream, StreamCore, READ_CHUNK};
use crate::reactor::{Ctx, Readiness, TimerSlot};
use crate::time::Timestamp;
use crate::timer::TimerId;

use super::{ConnId, HcConfig, HcFront, HttpAnswer};

/// How long a closed connection keeps draining the peer's input (RFC 9112 §9.6).
const LINGER: Duration = Duration::from_secs(1);

/// The listener's and connections' settings.
#[derive(Clone, Debug)]
pub struct HttpFrontConfig {
    /// `--http-listen`.
    pub addr: SocketAddr,
    /// Limits and timeouts of each HTTP/1.1 connection.
    pub http: http1::Config,
    /// Connections open at once; past it, the longest idle one is closed for a new one, or
    /// the new one is refused.
    pub max_connections: usize,
    /// The core's settings.
    pub front: HcConfig,
}

/// One connection's core: the HTTP/1.1 server, then a linger once it is closed.
struct HttpCore {
    id: ConnId,
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

/// See the module docs. Keys are relative: 0 is the listener and the core's timer,
/// connection `i` is `i + 1`.
pub struct HttpFront {
    config: HttpFrontConfig,
    listener: Listening,
    conns: Slab<Stream<HttpCore>>,
    /// Slab keys by connection id (ids are never reused, keys are).
    keys: HashMap<ConnId, usize>,
    next_id: u64,
    front: HcFront,
    timer: TimerSlot,
    key_base: u32,
    buf: Vec<u8>,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections refused at the cap (none idle to close for them).
    pub refused: u64,
}

impl HttpFront {
    /// Binds the listener; its keys start at `key_base`.
    pub fn bind(config: HttpFrontConfig, key_base: u32) -> io::Result<Self> {
        let listener = TcpListener::bind(config.addr)?;
        Ok(HttpFront {
            front: HcFront::new(config.front.clone()),
            config,
            listener: Listening::Bound(listener),
            conns: Slab::new(),
            keys: HashMap::new(),
            next_id: 0,
            timer: TimerSlot::default(),
            key_base,
            buf: vec![0; READ_CHUNK],
            accepted: 0,
            refused: 0,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The core, for metrics.
    pub fn front(&self) -> &HcFront {
        &self.front
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Registers the listener.
    pub fn start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        let addr = self.local_addr()?;
        self.listener.start(ctx, self.key_base, "http")?;
        log::info!("HTTP cross-proxy listening on {addr}");
        Ok(())
    }

    /// Whether `key` is one of ours.
    pub fn owns(&self, key: u32) -> bool {
        key >= self.key_base
    }

    /// Readiness of the listener or a connection.
    pub fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness) {
        let Some(slot) = (key - self.key_base).checked_sub(1) else {
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

    /// A timer of the listener, the core or a connection.
    pub fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32) {
        let Some(slot) = (key - self.key_base).checked_sub(1) else {
            if self.listener.driven().is_some_and(|l| l.on_timer(timer)) {
                self.accept(ctx);
            }
            if self.timer.fired(timer) {
                self.front.handle_timeout(ctx.now());
            }
            return;
        };
        let key = slot as usize;
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

    /// The next CoAP datagram for the engine, and its in-process source.
    pub fn to_engine(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.front.poll_to_engine()
    }

    /// Whether the core has datagrams for the engine.
    pub fn has_to_engine(&self) -> bool {
        self.front.has_to_engine()
    }

    /// A datagram the engine sent to an in-process client.
    pub fn from_engine(&mut self, now: Timestamp, to: SocketAddr, bytes: &[u8]) {
        self.front.from_engine(now, to, bytes);
    }

    /// Writes the answers the core has ready and re-arms the core's timer.
    pub fn write_answers(&mut self, ctx: &mut Ctx<'_>) {
        while let Some((id, answer)) = self.front.poll_answer() {
            let Some(&key) = self.keys.get(&id) else {
                continue;
            };
            let Some(conn) = self.conns.get_mut(key) else {
                continue;
            };
            write(&mut conn.core_mut().http, answer);
            self.pump(ctx, key);
        }
        let key = self.key_base;
        self.timer.set_no_later(ctx, self.front.poll_timeout(), key);
    }

    /// Stops accepting; every connection finishes what it owes and closes.
    pub fn shutdown(&mut self, ctx: &mut Ctx<'_>) {
        self.listener.close(ctx);
        self.front.end_streams();
        self.write_answers(ctx);
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.conns[key].core_mut().http.close_after_answers();
            self.pump(ctx, key);
        }
    }

    fn accept(&mut self, ctx: &mut Ctx<'_>) {
        while let Some((stream, _)) = self.listener.driven().and_then(|l| l.accept(ctx)) {
            self.add_conn(ctx, stream);
        }
    }

    fn add_conn(&mut self, ctx: &mut Ctx<'_>, stream: TcpStream) {
        if self.conns.len() >= self.config.max_connections && !self.close_longest_idle(ctx) {
            self.refused += 1;
            return;
        }
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        let id = ConnId(self.next_id);
        self.next_id += 1;
        let core = HttpCore {
            id,
            http: Http1Connection::new(ctx.now(), self.config.http.clone()),
            linger_until: None,
        };
        let Ok(conn) = Stream::accepted(ctx, stream, self.key_base + key as u32 + 1, core) else {
            return;
        };
        entry.insert(conn);
        self.accepted += 1;
        self.keys.insert(id, key);
        self.front.open(id);
        self.pump(ctx, key);
    }

    /// At the cap, the connection idle the longest between requests makes room.
    fn close_longest_idle(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let idle = (self.conns.iter())
            .filter(|(_, c)| c.core().linger_until.is_none())
            .filter_map(|(key, c)| Some((c.core().http.idle_since()?, key)));
        let Some((_, key)) = idle.min() else {
            return false;
        };
        self.remove(ctx, key, "idle, closed for a new connection");
        true
    }

    /// Reads, hands requests to the core, writes, until no more progress; then settles.
    fn pump(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        loop {
            let Some(conn) = self.conns.get_mut(key) else {
                return;
            };
            if conn.core().linger_until.is_some() {
                return self.drain_lingering(ctx, key);
            }
            let (now, id) = (ctx.now(), conn.core().id);
            let io = conn.read(now, &mut self.buf).and_then(|()| {
                let mut took = false;
                while let Some(req) = self.conns[key].core_mut().http.poll_request() {
                    self.front.request(now, id, &req);
                    took = true;
                }
                self.conns[key].flush(now).map(|()| took)
            });
            match io {
                Err(e) => return self.remove(ctx, key, &e.to_string()),
                Ok(true) => continue,
                Ok(false) => {}
            }
            if !self.conns[key].can_read() {
                break;
            }
        }
        self.settle(ctx, key);
    }

    fn settle(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        let now = ctx.now();
        let conn = &mut self.conns[key];
        let _ = conn.core_mut().http.poll_refusal();
        if conn.core().http.stream_gone() {
            // Its client went away: deregister (RFC 7641 §3.6) and let the connection end.
            self.front.close(now, conn.core().id);
            conn.core_mut().http.end_stream();
        }
        let http = &conn.core().http;
        if http.is_closed() && http.pending_output().is_empty() {
            if conn.eof() || conn.socket().shutdown(Shutdown::Write).is_err() {
                return self.remove(ctx, key, "done");
            }
            conn.core_mut().linger_until = Some(now + LINGER);
            return self.drain_lingering(ctx, key);
        }
        conn.settle(ctx);
    }

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
        log::debug!("http connection {key} closed: {why}");
        let core = conn.close(ctx);
        self.keys.remove(&core.id);
        self.front.close(ctx.now(), core.id);
    }
}

/// Writes one answer of the core to its connection.
fn write(http: &mut Http1Connection, answer: HttpAnswer) {
    match answer {
        HttpAnswer::Full {
            status,
            fields,
            content_type,
            body,
        } => {
            http.respond_with(status, &borrowed(&fields), &content_type, &body);
        }
        HttpAnswer::StreamStart { fields } => {
            let mut fields = borrowed(&fields);
            fields.push(("Cache-Control", "no-cache"));
            http.start_stream(200, &fields, "text/event-stream");
        }
        HttpAnswer::StreamData(data) => _ = http.stream_data(&data),
        HttpAnswer::StreamEnd => _ = http.end_stream(),
    }
}

fn borrowed<'f>(fields: &'f [(&'static str, String)]) -> Vec<(&'static str, &'f str)> {
    fields.iter().map(|(n, v)| (*n, v.as_str())).collect()
}
