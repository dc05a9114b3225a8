//! The metrics and health endpoint as a reactor component: a TCP listener (loopback by
//! default) whose connections run the sans-IO [`http1::ServerConnection`].
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

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr};
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Token};
use slab::Slab;

use super::routes::{route, HttpStats, Reply};
use super::MetricsWriter;
use crate::http1::{self, ServerConnection};
use crate::net::{flush, Outbox};
use crate::reactor::{Component, Ctx, Readiness, TimerSlot, WriteInterest};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// Where the endpoint listens unless configured: loopback, so metrics stay on the host.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9102";
/// How long a closed connection keeps draining the peer's input.
const LINGER: Duration = Duration::from_secs(1);
/// One read's size; the HTTP core bounds what it keeps of it.
const READ_CHUNK: usize = 16 * 1024;

/// Endpoint settings.
#[derive(Clone, Debug)]
pub struct MetricsConfig {
    /// Address to listen on; [`DEFAULT_ADDR`] unless configured.
    pub addr: SocketAddr,
    /// Limits and timeouts of each HTTP/1.1 connection.
    pub http: http1::Config,
    /// Connections open at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            addr: DEFAULT_ADDR.parse().expect("literal"),
            http: http1::Config::default(),
            max_connections: 64,
        }
    }
}

struct Conn {
    stream: TcpStream,
    token: Token,
    http: ServerConnection,
    timer: TimerSlot,
    interest: WriteInterest,
    /// A readable edge not yet read to `WouldBlock`.
    readable: bool,
    /// The peer closed its side.
    eof: bool,
    /// Our side is shut; the connection goes at this deadline or at the peer's close.
    linger_until: Option<Timestamp>,
}

/// The endpoint. See the module docs.
pub struct MetricsServer {
    config: MetricsConfig,
    listener: Option<(TcpListener, Option<Token>)>,
    conns: Slab<Conn>,
    by_token: HashMap<Token, usize>,
    buf: Vec<u8>,
    stats: HttpStats,
}

impl MetricsServer {
    /// Binds the listener; failures surface at start-up.
    pub fn bind(config: MetricsConfig) -> io::Result<Self> {
        let listener = TcpListener::bind(config.addr)?;
        Ok(MetricsServer {
            config,
            listener: Some((listener, None)),
            conns: Slab::new(),
            by_token: HashMap::new(),
            buf: vec![0; READ_CHUNK],
            stats: HttpStats::default(),
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.listener {
            Some((l, _)) => l.local_addr(),
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    fn accept(&mut self, ctx: &mut Ctx<'_>) {
        while let Some((listener, _)) = &self.listener {
            match listener.accept() {
                Ok((stream, _)) => self.add_conn(ctx, stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return log::warn!("metrics accept: {e}"),
            }
        }
    }

    fn add_conn(&mut self, ctx: &mut Ctx<'_>, mut stream: TcpStream) {
        if self.conns.len() >= self.config.max_connections {
            self.stats.connections_refused += 1;
            return;
        }
        let Ok(token) = ctx.register(&mut stream, Interest::READABLE) else {
            return;
        };
        self.stats.connections += 1;
        let key = self.conns.insert(Conn {
            stream,
            token,
            http: ServerConnection::new(ctx.now(), self.config.http.clone()),
            timer: TimerSlot::default(),
            interest: WriteInterest::default(),
            // The peer may have written before we registered: read at once.
            readable: true,
            eof: false,
            linger_until: None,
        });
        self.by_token.insert(token, key);
        self.pump(ctx, key);
    }

    /// Reads, answers and writes until the connection can make no more progress, then
    /// closes it if it is done and keeps its interest and timer up to date.
    fn pump(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        loop {
            let Some(conn) = self.conns.get_mut(key) else {
                return;
            };
            if conn.linger_until.is_some() {
                return self.drain_lingering(ctx, key);
            }
            let io = read(conn, &mut self.buf, ctx.now()).and_then(|()| {
                self.answer(ctx, key);
                let conn = &mut self.conns[key];
                flush(&mut conn.stream, &mut conn.http)
            });
            if let Err(e) = io {
                return self.remove(ctx, key, &e.to_string());
            }
            // Written output can unpause parsing: answer what that parsed before stopping.
            let conn = &self.conns[key];
            if conn.http.backlog() == 0 && !(conn.readable && conn.http.wants_input()) {
                break;
            }
        }
        self.settle(ctx, key);
    }

    fn answer(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        while let Some(req) = self.conns[key].http.poll_request() {
            let reply = Reply::new(route(&req.method, &req.path), || self.document(ctx));
            self.stats.count(reply.status);
            let http = &mut self.conns[key].http;
            http.respond_with(reply.status, reply.fields, reply.content_type, &reply.body);
        }
    }

    /// The loop's and every other component's metrics, then this endpoint's own.
    fn document(&self, ctx: &Ctx<'_>) -> String {
        let mut out = MetricsWriter::new();
        ctx.write_metrics(&mut out);
        self.write_metrics(&mut out);
        out.finish()
    }

    /// After I/O: close a finished connection, or update its interest and timer.
    fn settle(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        let conn = &mut self.conns[key];
        if let Some(status) = conn.http.take_refusal() {
            self.stats.count(status);
        }
        if conn.http.is_closed() && conn.http.pending_output().is_empty() {
            if conn.eof || conn.stream.shutdown(Shutdown::Write).is_err() {
                return self.remove(ctx, key, "done");
            }
            conn.linger_until = Some(ctx.now() + LINGER);
            return self.drain_lingering(ctx, key);
        }
        let wants_write = !conn.http.pending_output().is_empty();
        conn.interest
            .update(ctx, &mut conn.stream, conn.token, wants_write);
        conn.timer.set(ctx, conn.http.poll_timeout(), key as u32);
    }

    /// Reads and drops input of a closed connection until the peer closes or would block.
    fn drain_lingering(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        let conn = &mut self.conns[key];
        loop {
            match conn.stream.read(&mut self.buf) {
                Ok(0) => return self.remove(ctx, key, "closed"),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.remove(ctx, key, &e.to_string()),
            }
        }
        conn.timer.set(ctx, conn.linger_until, key as u32);
    }

    fn remove(&mut self, ctx: &mut Ctx<'_>, key: usize, why: &str) {
        let Some(mut conn) = self.conns.try_remove(key) else {
            return;
        };
        log::debug!("metrics connection {key} closed: {why}");
        self.by_token.remove(&conn.token);
        ctx.deregister(&mut conn.stream, conn.token);
        conn.timer.cancel(ctx);
        if let Some(status) = conn.http.take_refusal() {
            self.stats.count(status);
        }
    }
}

impl Component for MetricsServer {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        let addr = self.local_addr()?;
        if let Some((listener, token)) = &mut self.listener {
            *token = Some(ctx.register(listener, Interest::READABLE)?);
        }
        log::info!("metrics listening on {addr} (http://{addr}/metrics)");
        Ok(())
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, token: Token, ready: Readiness) {
        if self
            .listener
            .as_ref()
            .is_some_and(|(_, t)| *t == Some(token))
        {
            return self.accept(ctx);
        }
        let Some(&key) = self.by_token.get(&token) else {
            return;
        };
        if ready.readable || ready.closed || ready.error {
            self.conns[key].readable = true;
        }
        self.pump(ctx, key);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32) {
        let key = key as usize;
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if !conn.timer.fired(timer) {
            return;
        }
        if conn.linger_until.is_some() {
            return self.remove(ctx, key, "linger time over");
        }
        conn.http.handle_timeout(ctx.now());
        self.pump(ctx, key);
    }

    /// Stops accepting, then lets every connection finish the answers it owes and close.
    fn on_shutdown(&mut self, ctx: &mut Ctx<'_>) {
        if let Some((mut listener, Some(token))) = self.listener.take() {
            ctx.deregister(&mut listener, token);
        }
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.conns[key].http.close_after_answers();
            self.pump(ctx, key);
        }
    }

    fn is_drained(&self) -> bool {
        self.conns.is_empty()
    }

    fn write_metrics(&self, out: &mut MetricsWriter) {
        self.stats.write(out, self.conns.len());
    }
}

/// Reads while the connection wants input; a closed peer is reported to the HTTP core.
fn read(conn: &mut Conn, buf: &mut [u8], now: Timestamp) -> io::Result<()> {
    while conn.readable && conn.http.wants_input() {
        match conn.stream.read(buf) {
            Ok(0) => {
                (conn.eof, conn.readable) = (true, false);
                conn.http.handle_eof();
            }
            Ok(n) => conn.http.handle_input(now, &buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => conn.readable = false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Outbox for ServerConnection {
    fn pending_output(&self) -> &[u8] {
        ServerConnection::pending_output(self)
    }
    fn consume_output(&mut self, n: usize) {
        ServerConnection::consume_output(self, n)
    }
}
