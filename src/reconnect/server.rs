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

use std::io;
use std::net::SocketAddr;

use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use prost::Message as _;
use slab::Slab;

use super::service::{CallId, ReconnectService, ServiceConfig, StartOutcome};
use crate::grpc::proto::testing::{Empty, ReconnectParams};
use crate::grpc::server::{Request, ServerAbuse, ServerConnection, ServerEvent};
use crate::grpc::status::{Code, Status};
use crate::http2::Cutoff;
use crate::metrics::{MetricsSource, MetricsWriter};
use crate::net::{listen_dual_stack, unmap};
use crate::reactor::listener::{Listener, Listening};
use crate::reactor::stream::{Stream, READ_CHUNK};
use crate::reactor::{Component, Ctx, Readiness};
use crate::time::Timestamp;
use crate::timer::TimerId;

const SERVICE: &str = "grpc.testing.ReconnectService";
/// Registration keys of the two listeners; control connection `i` of the slab has key `i + 2`
/// (its timer too).
const CONTROL: u32 = 0;
const RETRY: u32 = 1;
const FIRST_CONN: u32 = 2;

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
    /// Control-port connections open at once; more are closed as soon as they are accepted
    /// (`--max_control_connections`). The interop client needs one.
    pub max_connections: usize,
}

/// How long a control connection with no open stream is kept. A test's control channel is
/// quiet between Start and Stop for the whole test (the reference's is 540 s), so this is
/// longer than that; a parked Start is an open stream, never idle.
pub const CONTROL_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// The default [`ServerConfig::max_connections`].
pub const MAX_CONTROL_CONNECTIONS: usize = 64;

impl ServerConfig {
    /// The server on these ports with the defaults: the reference's service behaviour,
    /// HTTP/2 defaults plus [`CONTROL_IDLE_TIMEOUT`], [`MAX_CONTROL_CONNECTIONS`].
    pub fn new(control_port: u16, retry_port: u16) -> Self {
        ServerConfig {
            control_port,
            retry_port,
            service: ServiceConfig::default(),
            http2: crate::http2::Config {
                idle_timeout: Some(CONTROL_IDLE_TIMEOUT),
                ..crate::http2::Config::default()
            },
            max_connections: MAX_CONTROL_CONNECTIONS,
        }
    }
}

struct ControlConn {
    io: Stream<ServerConnection>,
    peer: SocketAddr,
}

/// The reconnect interop server. See the module docs.
pub struct ReconnectServer {
    config: ServerConfig,
    control: Listening,
    /// Bound (and registered) at the first Start, like the reference, and kept.
    retry: Option<Listener>,
    conns: Slab<ControlConn>,
    service: ReconnectService,
    buf: Vec<u8>,
    shutting_down: bool,
    stats: ServerStats,
}

/// What the server has done, for metrics.
#[derive(Default)]
struct ServerStats {
    control_connections: u64,
    /// Control connections closed at once: `max_connections` were open.
    control_refused: u64,
    retry_accepts: u64,
    starts: u64,
    stops_passed: u64,
    stops_failed: u64,
    /// What closed control connections' peers were cut off or refused for.
    abuse: AbuseTotals,
}

/// The abuse counters of closed control connections, summed (see [`ServerAbuse`]).
#[derive(Default)]
struct AbuseTotals {
    /// Connections ended by each limit, indexed like [`Cutoff::ALL`].
    cutoffs: [u64; Cutoff::ALL.len()],
    /// Streams reset by the peer before their call was dispatched: dropped unseen.
    streams_dropped: u64,
    /// Streams we reset for the peer's stream errors.
    stream_errors: u64,
    /// Calls refused with RESOURCE_EXHAUSTED: message too large, buffer budget spent.
    message_too_large: u64,
    buffer_budget: u64,
}

impl AbuseTotals {
    fn add(&mut self, a: &ServerAbuse) {
        if let Some(i) = a
            .http2
            .cutoff
            .and_then(|c| Cutoff::ALL.iter().position(|&k| k == c))
        {
            self.cutoffs[i] += 1;
        }
        self.streams_dropped += a.http2.reset_before_accept + a.reset_before_dispatch;
        self.stream_errors += a.http2.local_error_resets;
        self.message_too_large += a.oversized_messages;
        self.buffer_budget += a.over_budget;
    }

    fn write(&self, out: &mut MetricsWriter) {
        let by_reason: Vec<(&str, u64)> = Cutoff::ALL
            .iter()
            .zip(self.cutoffs)
            .map(|(c, n)| (c.name(), n))
            .collect();
        out.labelled_counter(
            "backoffd_reconnect_http2_cutoffs_total",
            "Control connections ended by a limit (GOAWAY), by limit; counted at close.",
            "reason",
            &by_reason,
        );
        out.counter(
            "backoffd_reconnect_streams_dropped_total",
            "Streams the peer reset before their call was dispatched (Rapid Reset bound).",
            self.streams_dropped,
        );
        out.counter(
            "backoffd_reconnect_http2_stream_errors_total",
            "Streams reset for the peer's stream errors.",
            self.stream_errors,
        );
        out.labelled_counter(
            "backoffd_reconnect_grpc_refused_calls_total",
            "Calls answered RESOURCE_EXHAUSTED: a message over 4 KiB, or the connection's 64 KiB of buffered requests spent.",
            "reason",
            &[
                ("message_too_large", self.message_too_large),
                ("buffer_budget", self.buffer_budget),
            ],
        );
    }
}

impl ReconnectServer {
    /// Binds the control port (dual-stack); failures surface at start-up.
    pub fn bind(config: ServerConfig) -> io::Result<Self> {
        let control = TcpListener::from_std(listen_dual_stack(config.control_port)?);
        Ok(ReconnectServer {
            service: ReconnectService::new(config.service),
            config,
            control: Listening::Bound(control),
            retry: None,
            conns: Slab::new(),
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
        while let Some((stream, peer)) = self.control.driven().and_then(|l| l.accept(ctx)) {
            if self.conns.len() >= self.config.max_connections {
                self.stats.control_refused += 1;
                log::debug!(
                    "control connection from {} refused: too many open",
                    unmap(peer)
                );
                continue;
            }
            self.add_control(ctx, stream, unmap(peer));
        }
    }

    fn add_control(&mut self, ctx: &mut Ctx<'_>, stream: TcpStream, peer: SocketAddr) {
        let _ = stream.set_nodelay(true);
        let grpc = ServerConnection::new(ctx.now(), self.config.http2.clone());
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        let Ok(io) = Stream::accepted(ctx, stream, conn_key(key), grpc) else {
            return;
        };
        entry.insert(ControlConn { io, peer });
        self.stats.control_connections += 1;
        log::debug!("control connection {key} from {peer}");
        if self.shutting_down {
            self.conns[key].io.core_mut().go_away(ctx.now());
        }
        self.after_io(ctx, key);
    }

    /// The retry port: timestamp first, then close, for every pending connection (up to the
    /// listener's budget; the rest on the loop's next turn).
    fn accept_retry(&mut self, ctx: &mut Ctx<'_>) {
        while let Some((stream, peer)) = self.retry.as_mut().and_then(|l| l.accept(ctx)) {
            let now = Timestamp::now();
            drop(stream);
            self.stats.retry_accepts += 1;
            for line in self.service.on_retry_connection(now, unmap(peer).ip()) {
                log::info!("{line}");
            }
        }
    }

    fn read_conn(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        let conn = &mut self.conns[key].io;
        if let Err(e) = conn.read(ctx.now(), &mut self.buf) {
            return self.close(ctx, key, &e.to_string());
        }
        if conn.eof() {
            return self.close(ctx, key, "peer closed");
        }
        self.after_io(ctx, key);
    }

    /// Handles the connection's events, writes what it can, closes it if it is done, and keeps
    /// its timer and interest up to date.
    fn after_io(&mut self, ctx: &mut Ctx<'_>, key: usize) {
        while let Some(event) = self
            .conns
            .get_mut(key)
            .and_then(|c| c.io.core_mut().poll_event())
        {
            match event {
                ServerEvent::Request(req) => self.on_request(ctx, key, req),
                ServerEvent::Cancelled { stream } => self.cancel_call(ctx, call_id(key, stream)),
            }
        }
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if let Err(e) = conn.io.flush(ctx.now()) {
            return self.close(ctx, key, &e.to_string());
        }
        let grpc = conn.io.core();
        if grpc.is_closed() && grpc.pending_output().is_empty() {
            let why = match grpc.error() {
                Some(e) => format!("HTTP/2 connection failed: {e}"),
                None => "HTTP/2 connection ended".to_owned(),
            };
            return self.close(ctx, key, &why);
        }
        conn.io.settle(ctx);
    }

    fn on_request(&mut self, ctx: &mut Ctx<'_>, key: usize, req: Request) {
        let call = call_id(key, req.stream);
        let answer = match (req.service.as_str(), req.method.as_str()) {
            (SERVICE, "Start") => self.start(ctx, call, &req.message),
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
    fn start(
        &mut self,
        ctx: &mut Ctx<'_>,
        call: CallId,
        message: &[u8],
    ) -> Option<Result<Vec<u8>, Status>> {
        let params = match ReconnectParams::decode(message) {
            Ok(p) => p,
            Err(e) => {
                return Some(Err(Status::new(
                    Code::InvalidArgument,
                    format!("bad ReconnectParams: {e}"),
                )))
            }
        };
        if let Err(status) = self.ensure_retry_listener(ctx) {
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
        log_reasons(&outcome.verdict.reasons());
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
    fn ensure_retry_listener(&mut self, ctx: &mut Ctx<'_>) -> Result<(), Status> {
        if self.retry.is_some() {
            return Ok(());
        }
        let port = self.config.retry_port;
        let unavailable = |e: io::Error| {
            Status::new(
                Code::Unavailable,
                format!("cannot listen on retry port {port}: {e}"),
            )
        };
        let socket = TcpListener::from_std(listen_dual_stack(port).map_err(unavailable)?);
        let listener = Listener::register(ctx, socket, RETRY, "retry port").map_err(unavailable)?;
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(port);
        log::info!("test tcp server listening on 0.0.0.0:{port}");
        self.retry = Some(listener);
        Ok(())
    }

    fn respond(&mut self, ctx: &mut Ctx<'_>, call: CallId, answer: Result<Vec<u8>, Status>) {
        let (key, stream) = split_call_id(call);
        if let Some(conn) = self.conns.get_mut(key) {
            conn.io.core_mut().respond(ctx.now(), stream, answer);
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
        let Some(conn) = self.conns.try_remove(key) else {
            return;
        };
        let grpc = conn.io.close(ctx);
        let abuse = grpc.abuse();
        match abuse.http2.cutoff {
            Some(limit) => log::debug!(
                "control connection {key} from {} cut off: {}",
                conn.peer,
                limit.name()
            ),
            None => log::debug!("control connection {key} from {} closed: {why}", conn.peer),
        }
        self.stats.abuse.add(&abuse);
        let calls: Vec<u32> = grpc.dispatched().collect();
        for stream in calls {
            self.cancel_call(ctx, call_id(key, stream));
        }
    }
}

impl Component for ReconnectServer {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        self.control.start(ctx, CONTROL, "control port")?;
        let port = self.control.local_addr()?.port();
        log::info!("Server listening on 0.0.0.0:{port}");
        Ok(())
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness) {
        // Whatever woke us, connections waiting on the retry port are stamped first, so a
        // busy control port does not delay their timestamps (one non-blocking accept). That
        // also serves the retry port's own readiness.
        if let Some(retry) = &mut self.retry {
            retry.on_ready();
        }
        self.accept_retry(ctx);
        match key {
            CONTROL => {
                if let Some(control) = self.control.driven() {
                    control.on_ready();
                }
                self.accept_control(ctx);
            }
            RETRY => {}
            _ => {
                let key = slot_of(key);
                let Some(conn) = self.conns.get_mut(key) else {
                    return;
                };
                match conn.io.on_ready(ready) {
                    Ok(()) => self.read_conn(ctx, key),
                    Err(e) => self.close(ctx, key, &e.to_string()),
                }
            }
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32) {
        match key {
            CONTROL if self.control.driven().is_some_and(|l| l.on_timer(timer)) => {
                return self.accept_control(ctx)
            }
            RETRY if self.retry.as_mut().is_some_and(|l| l.on_timer(timer)) => {
                return self.accept_retry(ctx)
            }
            CONTROL | RETRY => return,
            _ => {}
        }
        let key = slot_of(key);
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if conn.io.on_timer(ctx.now(), timer) {
            self.after_io(ctx, key);
        }
    }

    fn on_shutdown(&mut self, ctx: &mut Ctx<'_>) {
        self.shutting_down = true;
        for call in self.service.shutdown() {
            self.respond(ctx, call, Err(shutting_down()));
        }
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            if let Some(conn) = self.conns.get_mut(key) {
                conn.io.core_mut().go_away(ctx.now());
            }
            self.after_io(ctx, key);
        }
    }

    fn is_drained(&self) -> bool {
        self.conns.is_empty()
    }
}

impl MetricsSource for ReconnectServer {
    fn write_metrics(&self, out: &mut MetricsWriter) {
        let s = &self.stats;
        out.counter(
            "backoffd_reconnect_control_connections_total",
            "Control-port connections accepted.",
            s.control_connections,
        );
        out.counter(
            "backoffd_reconnect_control_refused_total",
            "Control-port connections closed at once: too many open.",
            s.control_refused,
        );
        out.counter(
            "backoffd_reconnect_accept_failures_total",
            "Accepts that failed on either port (e.g. out of descriptors) and paused accepting.",
            self.control.failures() + self.retry.as_ref().map_or(0, Listener::failures),
        );
        s.abuse.write(out);
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

crate::reactor::stream::stream_core_by_inherent_methods!(ServerConnection);

/// A control connection's registration and timer key, from its slab index.
fn conn_key(slot: usize) -> u32 {
    FIRST_CONN + slot as u32
}

/// The slab index of a control connection's key (a listener's key maps to no connection).
fn slot_of(key: u32) -> usize {
    key.checked_sub(FIRST_CONN)
        .map_or(usize::MAX, |s| s as usize)
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

/// Reasons a Stop failed listed at info, at most [`REASONS_AT_INFO`] of them: a flood of
/// retry-port connections fails every interval, and 10,000 lines would bury the log. The
/// rest go to debug, counted at info.
fn log_reasons(reasons: &[String]) {
    let (shown, rest) = reasons.split_at(reasons.len().min(REASONS_AT_INFO));
    shown.iter().for_each(|reason| log::info!("{reason}"));
    rest.iter().for_each(|reason| log::debug!("{reason}"));
    if !rest.is_empty() {
        log::info!(
            "... and {} more reasons (listed at debug level)",
            rest.len()
        );
    }
}

/// See [`log_reasons`].
const REASONS_AT_INFO: usize = 10;

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn service_accessor_shows_the_live_sessions_timestamps() {
        let mut server = ReconnectServer::bind(ServerConfig::new(0, 0)).unwrap();
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
