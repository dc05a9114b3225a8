//! The reconnect interop server as a reactor component: the control port (plaintext HTTP/2
//! gRPC serving `grpc.testing.ReconnectService`) and the retry port (accept, timestamp, close).
//!
//! Only socket plumbing lives here. Sessions and verdicts are [`ReconnectService`]'s, HTTP/2 and
//! gRPC framing are [`ServerConnection`]'s.

// I/O module: The interop server's driver: owns its listeners and logs the reference's lines.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::SocketAddr;

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Token};
use prost::Message as _;
use slab::Slab;

use super::service::{CallId, ReconnectService, ServiceConfig, StartOutcome};
use crate::grpc::proto::testing::{Empty, ReconnectParams};
use crate::grpc::server::{Request, ServerConnection, ServerEvent};
use crate::grpc::{Code, Status};
use crate::metrics::MetricsWriter;
use crate::net::{flush, listen_dual_stack, unmap, Outbox};
use crate::reactor::{Component, Ctx, Readiness, TimerSlot, WriteInterest};
use crate::time::Timestamp;
use crate::timer::TimerId;

const SERVICE: &str = "grpc.testing.ReconnectService";
/// Reads per readiness event before yielding to other sources (edge-triggered: we re-arm by
/// reading until WouldBlock, but one chatty peer must not starve the retry port).
const READ_CHUNK: usize = 16 * 1024;

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Plaintext HTTP/2 port serving Start and Stop (`--control_port`; 0 picks a free one).
    pub control_port: u16,
    /// Port whose accepts are timestamped and closed (`--retry_port`); bound at the first Start.
    pub retry_port: u16,
    /// Options of the service logic beyond the reference's behaviour.
    pub service: ServiceConfig,
    /// HTTP/2 settings of control-port connections.
    pub http2: crate::http2::Config,
}

struct ControlConn {
    stream: TcpStream,
    token: Token,
    grpc: ServerConnection,
    peer: SocketAddr,
    timer: TimerSlot,
    interest: WriteInterest,
}

/// The reconnect interop server. See the module docs.
pub struct ReconnectServer {
    config: ServerConfig,
    control: TcpListener,
    control_token: Option<Token>,
    /// Bound at the first Start, like the reference, and kept.
    retry: Option<(TcpListener, Token)>,
    conns: Slab<ControlConn>,
    /// Readiness token -> connection slot, so routing an event does not scan connections.
    by_token: HashMap<Token, usize>,
    service: ReconnectService,
    buf: Vec<u8>,
    shutting_down: bool,
    stats: ServerStats,
}

/// What the server has done, for metrics.
#[derive(Default)]
struct ServerStats {
    control_connections: u64,
    retry_accepts: u64,
    starts: u64,
    stops_passed: u64,
    stops_failed: u64,
}

impl ReconnectServer {
    /// Binds the control port (dual-stack); failures surface at start-up.
    pub fn bind(config: ServerConfig) -> io::Result<Self> {
        let control = TcpListener::from_std(listen_dual_stack(config.control_port)?);
        Ok(ReconnectServer {
            service: ReconnectService::new(config.service),
            config,
            control,
            control_token: None,
            retry: None,
            conns: Slab::new(),
            by_token: HashMap::new(),
            buf: vec![0; READ_CHUNK],
            shutting_down: false,
            stats: ServerStats::default(),
        })
    }

    /// The control port actually bound (useful with port 0).
    pub fn control_addr(&self) -> io::Result<SocketAddr> {
        self.control.local_addr()
    }

    /// The session logic, read-only: for benchmarks and tests that run the server in-process
    /// and, after [`Reactor::run`](crate::reactor::Reactor::run) returns, compare the retry
    /// port's recorded accept times ([`ReconnectService::timestamps`], the current session's)
    /// with their own clocks. Not needed to run the server.
    pub fn service(&self) -> &ReconnectService {
        &self.service
    }

    fn accept_control(&mut self, ctx: &mut Ctx<'_>) {
        loop {
            match self.control.accept() {
                Ok((mut stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let Ok(token) = ctx.register(&mut stream, Interest::READABLE) else {
                        continue;
                    };
                    let grpc = ServerConnection::new(ctx.now(), self.config.http2.clone());
                    self.stats.control_connections += 1;
                    let key = self.conns.insert(ControlConn {
                        stream,
                        token,
                        grpc,
                        peer: unmap(peer),
                        timer: TimerSlot::default(),
                        interest: WriteInterest::default(),
                    });
                    self.by_token.insert(token, key);
                    log::debug!("control connection {key} from {}", unmap(peer));
                    if self.shutting_down {
                        self.conns[key].grpc.go_away(ctx.now());
                    }
                    self.after_io(ctx, key);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("control port accept: {e}");
                    return;
                }
            }
        }
    }

    /// The retry port: timestamp first, then close, for every pending connection.
    fn accept_retry(&mut self) {
        let Some((listener, _)) = &self.retry else {
            return;
        };
        loop {
            match listener.accept() {
                Ok((stream, peer)) => {
                    let now = Timestamp::now();
                    drop(stream);
                    self.stats.retry_accepts += 1;
                    for line in self.service.on_retry_connection(now, unmap(peer).ip()) {
                        log::info!("{line}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("retry port accept: {e}");
                    return;
                }
            }
        }
    }

    fn read_conn(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        let now = ctx.now();
        let conn = &mut self.conns[key];
        loop {
            match conn.stream.read(&mut self.buf) {
                Ok(0) => return self.close(ctx, key, "peer closed"),
                Ok(n) => conn.grpc.handle_input(now, &self.buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return self.close(ctx, key, &e.to_string()),
            }
        }
        self.after_io(ctx, key);
    }

    /// Handles the connection's events, writes what it can, closes it if it is done, and keeps
    /// its timer and interest up to date.
    fn after_io(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        while let Some(event) = self.conns.get_mut(key).and_then(|c| c.grpc.poll_event()) {
            match event {
                ServerEvent::Request(req) => self.on_request(ctx, key, req),
                ServerEvent::Cancelled { stream } => self.cancel_call(ctx, call_id(key, stream)),
            }
        }
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if let Err(e) = flush(ctx.now(), &mut conn.stream, &mut conn.grpc) {
            return self.close(ctx, key, &e.to_string());
        }
        if conn.grpc.is_closed() && conn.grpc.pending_output().is_empty() {
            let why = match conn.grpc.error() {
                Some(e) => format!("HTTP/2 connection failed: {e}"),
                None => "HTTP/2 connection ended".to_owned(),
            };
            return self.close(ctx, key, &why);
        }
        let wants_write = !conn.grpc.pending_output().is_empty();
        conn.interest
            .update(ctx, &mut conn.stream, conn.token, wants_write);
        conn.timer.set(ctx, conn.grpc.poll_timeout(), key as u32);
    }

    fn on_request(&mut self, ctx: &mut Ctx<'_>, key: usize, req: Request) {
        let call = call_id(key, req.stream);
        let answer = match (req.service.as_str(), req.method.as_str()) {
            (SERVICE, "Start") => self.start(call, &req.message),
            (SERVICE, "Stop") => self.stop(ctx, &req.message),
            (service, method) => Some(Err(Status::new(
                Code::Unimplemented,
                format!("unknown method /{service}/{method}"),
            ))),
        };
        if let Some(answer) = answer {
            self.respond(ctx, call, answer);
        }
    }

    /// Start: answered now, or parked (`None`) until the active session's Stop.
    fn start(&mut self, call: CallId, message: &[u8]) -> Option<Result<Vec<u8>, Status>> {
        let params = match ReconnectParams::decode(message) {
            Ok(p) => p,
            Err(e) => {
                return Some(Err(Status::new(
                    Code::InvalidArgument,
                    format!("bad ReconnectParams: {e}"),
                )))
            }
        };
        if let Err(status) = self.ensure_retry_listener() {
            return Some(Err(status));
        }
        self.stats.starts += 1;
        match self.service.start(call, &params) {
            StartOutcome::Ready => Some(Ok(Empty {}.encode_to_vec())),
            StartOutcome::Parked => {
                log::info!("Start parked until the active session's Stop");
                None
            }
            StartOutcome::ShuttingDown => Some(Err(shutting_down())),
        }
    }

    fn stop(&mut self, ctx: &mut Ctx<'_>, message: &[u8]) -> Option<Result<Vec<u8>, Status>> {
        if let Err(e) = Empty::decode(message) {
            return Some(Err(Status::new(
                Code::InvalidArgument,
                format!("bad Empty: {e}"),
            )));
        }
        let outcome = self.service.stop();
        match outcome.info.passed {
            true => self.stats.stops_passed += 1,
            false => self.stats.stops_failed += 1,
        }
        for reason in outcome.verdict.reasons() {
            log::info!("{reason}");
        }
        log::info!(
            "Stop: passed={} backoff_ms={:?}",
            outcome.info.passed,
            outcome.info.backoff_ms
        );
        if let Some(released) = outcome.released {
            self.respond(ctx, released, Ok(Empty {}.encode_to_vec()));
        }
        Some(Ok(outcome.info.encode_to_vec()))
    }

    /// Binds the retry port at the first Start, as the reference does; failure is this Start's
    /// gRPC error rather than a crash.
    fn ensure_retry_listener(&mut self) -> Result<(), Status> {
        if self.retry.is_some() {
            return Ok(());
        }
        let port = self.config.retry_port;
        let listener = listen_dual_stack(port).map_err(|e| {
            Status::new(
                Code::Unavailable,
                format!("cannot listen on retry port {port}: {e}"),
            )
        })?;
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(port);
        log::info!("test tcp server listening on 0.0.0.0:{port}");
        // Registered lazily in `on_ready`'s caller: see `register_retry`.
        self.retry = Some((TcpListener::from_std(listener), Token(usize::MAX)));
        Ok(())
    }

    /// Registers a freshly bound retry listener with the loop.
    fn register_retry(&mut self, ctx: &mut Ctx<'_>) {
        if let Some((listener, token)) = &mut self.retry {
            if *token == Token(usize::MAX) {
                match ctx.register(listener, Interest::READABLE) {
                    Ok(t) => *token = t,
                    Err(e) => log::warn!("cannot register the retry port: {e}"),
                }
            }
        }
    }

    fn respond(&mut self, ctx: &mut Ctx<'_>, call: CallId, answer: Result<Vec<u8>, Status>) {
        let (key, stream) = split_call_id(call);
        if let Some(conn) = self.conns.get_mut(key) {
            conn.grpc.respond(ctx.now(), stream, answer);
            self.after_io(ctx, key);
        }
    }

    /// A call went away: a parked Start is dropped; a released waiter is answered.
    fn cancel_call(&mut self, ctx: &mut Ctx<'_>, call: CallId) {
        if let Some(released) = self.service.cancel(call) {
            self.respond(ctx, released, Ok(Empty {}.encode_to_vec()));
        }
    }

    fn close(&mut self, ctx: &mut Ctx<'_>, key: usize, why: &str) {
        let Some(mut conn) = self.conns.try_remove(key) else {
            return;
        };
        log::debug!("control connection {key} from {} closed: {why}", conn.peer);
        self.by_token.remove(&conn.token);
        ctx.deregister(&mut conn.stream, conn.token);
        conn.timer.cancel(ctx);
        let calls: Vec<u32> = conn.grpc.dispatched().collect();
        for stream in calls {
            self.cancel_call(ctx, call_id(key, stream));
        }
    }
}

impl Component for ReconnectServer {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        self.control_token = Some(ctx.register(&mut self.control, Interest::READABLE)?);
        let port = self.control.local_addr()?.port();
        log::info!("Server listening on 0.0.0.0:{port}");
        Ok(())
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, token: Token, ready: Readiness) {
        // Whatever woke us, connections waiting on the retry port are stamped first, so a
        // busy control port does not delay their timestamps (one non-blocking accept). That
        // also serves the retry port's own readiness.
        self.accept_retry();
        if Some(token) == self.control_token {
            self.accept_control(ctx);
        } else if let Some(key) = self.by_token.get(&token).copied() {
            if ready.readable || ready.closed || ready.error {
                self.read_conn(ctx, key);
            } else {
                self.after_io(ctx, key);
            }
        }
        self.register_retry(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32) {
        let key = key as usize;
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if !conn.timer.fired(timer) {
            return;
        }
        conn.grpc.handle_timeout(ctx.now());
        self.after_io(ctx, key);
        self.register_retry(ctx);
    }

    fn on_shutdown(&mut self, ctx: &mut Ctx<'_>) {
        self.shutting_down = true;
        for call in self.service.shutdown() {
            self.respond(ctx, call, Err(shutting_down()));
        }
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            if let Some(conn) = self.conns.get_mut(key) {
                conn.grpc.go_away(ctx.now());
            }
            self.after_io(ctx, key);
        }
    }

    fn is_drained(&self) -> bool {
        self.conns.is_empty()
    }

    fn write_metrics(&self, out: &mut MetricsWriter) {
        let s = &self.stats;
        out.counter(
            "backoffd_reconnect_control_connections_total",
            "Control-port connections accepted.",
            s.control_connections,
        );
        out.counter(
            "backoffd_reconnect_retry_accepts_total",
            "Retry-port connections accepted, timestamped and closed.",
            s.retry_accepts,
        );
        out.counter(
            "backoffd_reconnect_starts_total",
            "Start calls received.",
            s.starts,
        );
        out.labelled_counter(
            "backoffd_reconnect_verdicts_total",
            "Stop verdicts.",
            "passed",
            &[("true", s.stops_passed), ("false", s.stops_failed)],
        );
        out.gauge(
            "backoffd_reconnect_sessions_active",
            "Sessions started and not yet stopped.",
            f64::from(u8::from(self.service.session().is_some())),
        );
        out.gauge(
            "backoffd_reconnect_parked_starts",
            "Start calls waiting for the active session's Stop.",
            self.service.parked().count() as f64,
        );
        out.gauge(
            "backoffd_reconnect_control_connections_open",
            "Open control-port connections.",
            self.conns.len() as f64,
        );
    }
}

impl Outbox for ServerConnection {
    fn pending_output(&self) -> &[u8] {
        ServerConnection::pending_output(self)
    }
    fn consume_output(&mut self, now: Timestamp, n: usize) {
        ServerConnection::consume_output(self, now, n)
    }
}

fn shutting_down() -> Status {
    Status::new(Code::Unavailable, "shutting down")
}

/// Calls are named by connection slot and stream id. Every call of a connection is cancelled
/// in the service before its slot is reused, so names never collide.
fn call_id(conn: usize, stream: u32) -> CallId {
    CallId(((conn as u64) << 32) | u64::from(stream))
}

fn split_call_id(call: CallId) -> (usize, u32) {
    ((call.0 >> 32) as usize, call.0 as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn service_accessor_shows_the_live_sessions_timestamps() {
        let mut server = ReconnectServer::bind(ServerConfig {
            control_port: 0,
            retry_port: 0,
            service: ServiceConfig::default(),
            http2: crate::http2::Config::default(),
        })
        .unwrap();
        assert!(server.service().session().is_none());
        assert!(server.service().timestamps().is_empty());
        let params = ReconnectParams {
            max_reconnect_backoff_ms: 0,
        };
        server.service.start(CallId(7), &params);
        let at = Timestamp::from_nanos(42);
        server
            .service
            .on_retry_connection(at, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(server.service().session().unwrap().owner, CallId(7));
        assert_eq!(server.service().timestamps(), [at]);
    }
}
