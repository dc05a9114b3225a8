//! The reconnect interop client as a reactor component, a drop-in for grpc's C++
//! `reconnect_interop_client` (test/cpp/interop/reconnect_interop_client.cc):
//!
//! 1. control channel: plaintext TCP + HTTP/2 (prior knowledge) to `server_host:control_port`;
//!    `Start(ReconnectParams{max_reconnect_backoff_ms})` without a deadline;
//! 2. `Starting connections with retries.`: TLS connections to `server_host:retry_port`, spaced
//!    by the [`RetryRun`] (doc/connection-backoff.md) for the test's duration. Each attempt is
//!    exactly one non-blocking TCP connect, abandoned at `max(deadline, start + 20 s)`; a refusal,
//!    reset or close before TLS completes is a failed attempt; the server's HTTP/2 SETTINGS over
//!    TLS is a success and resets the backoff;
//! 3. `Done retrying, getting final data from server`: `Stop` on the control channel, the
//!    `backoff_ms` list printed and checked with the server's own rules ([`verify_intervals`]),
//!    and `Passed` iff the server's verdict is `passed`.
//!
//! Every connection goes to the one address resolved at start ([`resolve`]), so the server sees
//! one peer host and one TCP connection per attempt. The retry channel accepts any certificate:
//! see [`super::tls`]. Only socket plumbing is here; the schedule is [`RetryRun`]'s, gRPC calls
//! are [`ClientConnection`]'s, TLS is [`TlsClient`]'s.

// I/O module: The interop client's driver: owns its sockets and logs every attempt.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::cell::RefCell;
use std::fmt;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Interest, Token};
use prost::Message as _;
use rustls::pki_types::ServerName;

use super::backoff::{AttemptRecord, BackoffConfig};
use super::retry::{RetryRun, Step};
use super::tls::{interop_client_config, TlsClient, ALPN_H2};
use super::verify::verify_intervals;
use crate::grpc::client::{ClientConnection, ClientEvent};
use crate::grpc::proto::testing::{Empty, ReconnectInfo, ReconnectParams};
use crate::grpc::{Code, Status};
use crate::http2::{self, Connection, Event, Role};
use crate::net::{flush, Outbox};
use crate::reactor::{Component, Ctx, Readiness};
use crate::time::Timestamp;
use crate::timer::TimerId;

const START_PATH: &str = "/grpc.testing.ReconnectService/Start";
const STOP_PATH: &str = "/grpc.testing.ReconnectService/Stop";
/// Socket reads per call.
const READ_CHUNK: usize = 16 * 1024;

/// Client settings.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// As given (`--server_host`): the `:authority` host and the TLS server name.
    pub server_host: String,
    /// The one address every connection goes to (see [`resolve`]).
    pub server_ip: IpAddr,
    /// The server's plaintext HTTP/2 port for Start and Stop (`--server_control_port`).
    pub control_port: u16,
    /// The TLS port the backoff attempts connect to (`--server_retry_port`).
    pub retry_port: u16,
    /// Sent in Start and used for the client's own backoff (0: the default 120 s).
    pub max_reconnect_backoff_ms: i32,
    /// How long the retry phase lasts (the reference: 540 s).
    pub test_duration: Duration,
    /// Seed of the backoff jitter.
    pub seed: u64,
    /// Deadline of the Stop call (the reference sets none; this keeps a stuck server from
    /// hanging the test forever). `None`: no deadline.
    pub stop_timeout: Option<Duration>,
}

/// Why a run did not pass.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// The control channel could not be opened.
    Unreachable(String),
    /// The Start call returned a non-OK status.
    StartFailed(Status),
    /// The Stop call returned a non-OK status.
    StopFailed(Status),
    /// Stop answered, with `passed = false`.
    NotPassed {
        /// The intervals the server measured between attempts, in milliseconds.
        backoff_ms: Vec<i32>,
    },
    /// SIGINT/SIGTERM before the end.
    Interrupted,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Unreachable(why) => write!(f, "server unreachable: {why}"),
            Failure::StartFailed(status) => write!(f, "Start failed: {status}"),
            Failure::StopFailed(status) => write!(f, "Stop failed: {status}"),
            Failure::NotPassed { backoff_ms } => {
                write!(
                    f,
                    "the server's verdict is passed=false (backoff_ms {backoff_ms:?})"
                )
            }
            Failure::Interrupted => f.write_str("interrupted before the test finished"),
        }
    }
}

/// How a run ended, and the attempts it made.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The server's `ReconnectInfo` from Stop if it passed, else why the run failed.
    pub result: Result<ReconnectInfo, Failure>,
    /// Every connection attempt on the retry port, in order.
    pub attempts: Vec<AttemptRecord>,
}

impl Outcome {
    /// 0 iff the server said passed, else 1.
    pub fn exit_code(&self) -> i32 {
        match self.result {
            Ok(_) => 0,
            Err(_) => 1,
        }
    }
}

/// Where the component leaves its [`Outcome`] for whoever ran the reactor (single-threaded).
pub type OutcomeSlot = Rc<RefCell<Option<Outcome>>>;

/// Resolves `host` once and picks the first address, for every connection of the test: one
/// address family throughout, so the server's peer check stays quiet and each attempt is one
/// TCP connection. Logs the choice.
pub fn resolve(host: &str) -> io::Result<IpAddr> {
    let addrs: Vec<IpAddr> = (host, 0).to_socket_addrs()?.map(|a| a.ip()).collect();
    let Some(&ip) = addrs.first() else {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{host} has no address"),
        ));
    };
    if addrs.len() > 1 {
        log::info!("{host} resolves to {addrs:?}");
    }
    let family = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
    log::info!("using {ip} ({family}) for the whole test");
    Ok(ip)
}

/// Where the test is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Not started yet.
    Idle,
    /// Start sent on the control channel (stream id), not answered yet.
    Starting {
        call: u32,
    },
    Retrying,
    /// Stop sent (stream id).
    Stopping {
        call: u32,
    },
    Finished,
}

/// How a non-blocking connect is going.
enum ConnectProgress {
    Pending,
    Connected,
    Failed(String),
}

/// The control channel: plaintext HTTP/2.
struct Control {
    stream: TcpStream,
    token: Token,
    grpc: ClientConnection,
    connected: bool,
    wants_write: bool,
}

/// One retry attempt's connection: TCP, then TLS, then HTTP/2.
struct Attempt {
    number: u32,
    stream: TcpStream,
    token: Token,
    started: Timestamp,
    tls: Option<TlsClient>,
    h2: Option<Connection>,
    /// The server's SETTINGS arrived.
    established: bool,
    wants_write: bool,
}

/// What one round of I/O on an attempt found, in order.
#[derive(Default)]
struct AttemptProgress {
    /// TLS completed with ALPN h2, in this version.
    transport_up: Option<rustls::ProtocolVersion>,
    settings: bool,
    ended: Option<String>,
}

/// The reconnect interop client. See the module docs.
pub struct ReconnectClient {
    config: ClientConfig,
    tls_config: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
    phase: Phase,
    control: Option<Control>,
    retry: Option<RetryRun>,
    attempt: Option<Attempt>,
    /// The component's one timer: the earliest instant anything needs it.
    wake: Option<(TimerId, Timestamp)>,
    outcome: OutcomeSlot,
    buf: Vec<u8>,
}

impl ReconnectClient {
    /// The client and the slot its outcome will be in once the reactor has stopped.
    pub fn new(config: ClientConfig) -> (Self, OutcomeSlot) {
        let server_name = ServerName::try_from(config.server_host.clone())
            .unwrap_or_else(|_| ServerName::IpAddress(config.server_ip.into()));
        let outcome = OutcomeSlot::default();
        let client = ReconnectClient {
            config,
            tls_config: interop_client_config(),
            server_name,
            phase: Phase::Idle,
            control: None,
            retry: None,
            attempt: None,
            wake: None,
            outcome: Rc::clone(&outcome),
            buf: vec![0; READ_CHUNK],
        };
        (client, outcome)
    }

    fn control_addr(&self) -> SocketAddr {
        SocketAddr::new(self.config.server_ip, self.config.control_port)
    }

    /// `host:port` for `:authority`, IPv6 literals in brackets.
    fn authority(&self) -> String {
        let host = &self.config.server_host;
        match host.contains(':') {
            true => format!("[{host}]:{}", self.config.control_port),
            false => format!("{host}:{}", self.config.control_port),
        }
    }

    /// Opens a fresh control connection (the previous one, if any, is dropped).
    fn open_control(&mut self, ctx: &mut Ctx<'_>) -> Result<(), String> {
        self.close_control(ctx);
        let addr = self.control_addr();
        let fail = |e: io::Error| format!("control channel to {addr}: {e}");
        let mut stream = TcpStream::connect(addr).map_err(fail)?;
        let _ = stream.set_nodelay(true);
        let token = ctx
            .register(&mut stream, Interest::READABLE | Interest::WRITABLE)
            .map_err(fail)?;
        let grpc = ClientConnection::new(
            ctx.now(),
            &self.authority(),
            false,
            http2::Config::default(),
        );
        self.control = Some(Control {
            stream,
            token,
            grpc,
            connected: false,
            wants_write: true,
        });
        Ok(())
    }

    /// Sends a call on the control channel, on a new connection if the old one is gone or going
    /// away.
    fn control_call(
        &mut self,
        ctx: &mut Ctx<'_>,
        path: &str,
        message: &[u8],
        timeout: Option<Duration>,
    ) -> Result<u32, Failure> {
        let now = ctx.now();
        if let Some(c) = &mut self.control {
            if let Ok(call) = c.grpc.call(now, path, message, timeout) {
                return Ok(call);
            }
        }
        self.open_control(ctx).map_err(Failure::Unreachable)?;
        let control = self.control.as_mut().expect("just opened");
        control
            .grpc
            .call(now, path, message, timeout)
            .map_err(|s| Failure::Unreachable(s.to_string()))
    }

    fn close_control(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(mut c) = self.control.take() {
            ctx.deregister(&mut c.stream, c.token);
        }
    }

    /// Readiness on the control connection: connect, read, answer, write.
    fn control_io(&mut self, ctx: &mut Ctx<'_>, ready: Readiness) {
        let now = ctx.now();
        let addr = self.control_addr();
        let Some(c) = self.control.as_mut() else {
            return;
        };
        if !c.connected {
            match connect_progress(&c.stream, ready) {
                ConnectProgress::Pending => return,
                ConnectProgress::Failed(e) => {
                    return self.control_lost(ctx, &format!("control channel to {addr}: {e}"))
                }
                ConnectProgress::Connected => {
                    log::debug!("control channel connected to {addr}");
                    c.connected = true;
                }
            }
        }
        let mut closed = None;
        loop {
            match c.stream.read(&mut self.buf) {
                Ok(0) => {
                    closed = Some("the server closed the control connection".to_owned());
                    break;
                }
                Ok(n) => c.grpc.handle_input(now, &self.buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    closed = Some(format!("control connection: {e}"));
                    break;
                }
            }
        }
        self.after_control_io(ctx, closed);
    }

    /// Handles the control connection's events, writes, and closes it when it is over.
    fn after_control_io(&mut self, ctx: &mut Ctx<'_>, mut closed: Option<String>) {
        let Some(c) = self.control.as_mut() else {
            return;
        };
        if closed.is_none() && c.connected {
            if let Err(e) = flush(ctx.now(), &mut c.stream, &mut c.grpc) {
                closed = Some(format!("control connection: {e}"));
            }
        }
        if closed.is_none() && c.grpc.is_closed() && c.grpc.pending_output().is_empty() {
            closed = Some("the control connection's HTTP/2 session ended".to_owned());
        }
        if let Some(why) = &closed {
            c.grpc.on_transport_closed(why);
        }
        while let Some(event) = self.control.as_mut().and_then(|c| c.grpc.poll_event()) {
            if let ClientEvent::Response { stream, result } = event {
                self.on_control_response(ctx, stream, result);
            }
        }
        if let Some(why) = closed {
            if self.phase != Phase::Finished {
                log::debug!("{why}");
            }
            return self.close_control(ctx);
        }
        if let Some(c) = self.control.as_mut() {
            let wants_write = !c.connected || !c.grpc.pending_output().is_empty();
            if wants_write != c.wants_write {
                c.wants_write = wants_write;
                let _ = ctx.reregister(&mut c.stream, c.token, interest(wants_write));
            }
        }
    }

    /// The control connection failed before it was up.
    fn control_lost(&mut self, ctx: &mut Ctx<'_>, why: &str) {
        self.close_control(ctx);
        match self.phase {
            Phase::Idle | Phase::Starting { .. } | Phase::Stopping { .. } => {
                self.finish(ctx, Err(Failure::Unreachable(why.to_owned())))
            }
            Phase::Retrying | Phase::Finished => log::debug!("{why}"),
        }
    }

    fn on_control_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        stream: u32,
        result: Result<Vec<u8>, Status>,
    ) {
        match self.phase {
            Phase::Starting { call } if call == stream => match result {
                Ok(_) => self.begin_retrying(ctx),
                Err(status) => self.finish(ctx, Err(Failure::StartFailed(status))),
            },
            Phase::Stopping { call } if call == stream => {
                let result = result.and_then(|bytes| {
                    ReconnectInfo::decode(&bytes[..])
                        .map_err(|e| Status::new(Code::Internal, format!("bad ReconnectInfo: {e}")))
                });
                match result {
                    Ok(info) => {
                        let result = self.judge(info);
                        self.finish(ctx, result);
                    }
                    Err(status) => self.finish(ctx, Err(Failure::StopFailed(status))),
                }
            }
            _ => {}
        }
    }

    fn begin_retrying(&mut self, ctx: &mut Ctx<'_>) {
        log::info!("Starting connections with retries.");
        let config = BackoffConfig::with_max_backoff_ms(self.config.max_reconnect_backoff_ms);
        let run = RetryRun::new(
            config,
            self.config.seed,
            ctx.now(),
            self.config.test_duration,
        );
        self.retry = Some(run);
        self.phase = Phase::Retrying;
    }

    /// Runs the retry schedule at `now`: starts, abandons and ends attempts as it says.
    fn drive(&mut self, ctx: &mut Ctx<'_>) {
        while self.phase == Phase::Retrying {
            let now = ctx.now();
            let run = self.retry.as_mut().expect("retrying");
            match run.poll(now) {
                Step::Connect { attempt, deadline } => {
                    let record = *run.attempts().last().expect("attempt started");
                    log::info!("{}", run.describe_start(&record, deadline));
                    if let Err(e) = self.start_attempt(ctx, attempt) {
                        log::info!("attempt {attempt} failed at once: {e}");
                        self.retry.as_mut().expect("retrying").on_failed(now);
                    }
                }
                Step::GiveUp { attempt } => {
                    log::info!("attempt {attempt}: no connection by its deadline, giving up on it");
                    self.close_attempt(ctx);
                }
                Step::Wait(_) => break,
                Step::Done => {
                    self.close_attempt(ctx);
                    self.begin_stopping(ctx);
                }
            }
        }
    }

    fn begin_stopping(&mut self, ctx: &mut Ctx<'_>) {
        log::info!("Done retrying, getting final data from server");
        let message = Empty {}.encode_to_vec();
        match self.control_call(ctx, STOP_PATH, &message, self.config.stop_timeout) {
            Ok(call) => {
                self.phase = Phase::Stopping { call };
                self.after_control_io(ctx, None);
            }
            Err(Failure::Unreachable(why)) => self.finish(
                ctx,
                Err(Failure::StopFailed(Status::new(Code::Unavailable, why))),
            ),
            Err(other) => self.finish(ctx, Err(other)),
        }
    }

    /// The server's verdict, with the list printed and checked by the same rules here.
    fn judge(&self, info: ReconnectInfo) -> Result<ReconnectInfo, Failure> {
        log::info!("backoff_ms: {:?}", info.backoff_ms);
        let own = verify_intervals(&info.backoff_ms, self.config.max_reconnect_backoff_ms, 0);
        match own.passed {
            true => log::info!(
                "own check: all {} intervals within their allowed ranges",
                own.backoff_ms.len()
            ),
            false => {
                for reason in own.reasons() {
                    log::warn!("own check: {reason}");
                }
            }
        }
        if own.passed != info.passed {
            log::warn!(
                "the server's verdict (passed={}) differs from the own check's (passed={})",
                info.passed,
                own.passed
            );
        }
        log::info!("server verdict: passed={}", info.passed);
        match info.passed {
            true => Ok(info),
            false => Err(Failure::NotPassed {
                backoff_ms: info.backoff_ms,
            }),
        }
    }

    /// Ends the run: records the outcome, closes everything, stops the loop.
    fn finish(&mut self, ctx: &mut Ctx<'_>, result: Result<ReconnectInfo, Failure>) {
        if self.outcome.borrow().is_some() {
            return;
        }
        self.phase = Phase::Finished;
        match &result {
            Ok(_) => log::info!("Passed"),
            Err(failure) => log::error!("FAILED: {failure}"),
        }
        let attempts = self
            .retry
            .as_ref()
            .map(|r| r.attempts().to_vec())
            .unwrap_or_default();
        *self.outcome.borrow_mut() = Some(Outcome { result, attempts });
        self.close_attempt(ctx);
        if let Some(c) = self.control.as_mut() {
            c.grpc.go_away(ctx.now());
            if c.connected {
                let _ = flush(ctx.now(), &mut c.stream, &mut c.grpc);
            }
        }
        self.close_control(ctx);
        if let Some((id, _)) = self.wake.take() {
            ctx.cancel_timer(id);
        }
        ctx.shutdown();
    }

    /// Opens attempt `number`'s one TCP connection.
    fn start_attempt(&mut self, ctx: &mut Ctx<'_>, number: u32) -> io::Result<()> {
        self.close_attempt(ctx);
        let addr = SocketAddr::new(self.config.server_ip, self.config.retry_port);
        let mut stream = TcpStream::connect(addr)?;
        let _ = stream.set_nodelay(true);
        let token = ctx.register(&mut stream, interest(true))?;
        self.attempt = Some(Attempt {
            number,
            stream,
            token,
            started: ctx.now(),
            tls: None,
            h2: None,
            established: false,
            wants_write: true,
        });
        Ok(())
    }

    fn close_attempt(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(mut a) = self.attempt.take() {
            ctx.deregister(&mut a.stream, a.token);
        }
    }

    /// Readiness (or a timer) on the current attempt; reports its progress to the run.
    fn attempt_io(&mut self, ctx: &mut Ctx<'_>, ready: Readiness) {
        let now = ctx.now();
        let Some(a) = self.attempt.as_mut() else {
            return;
        };
        let progress = a.pump(
            now,
            ready,
            &self.tls_config,
            &self.server_name,
            &mut self.buf,
        );
        let (number, started, established) = (a.number, a.started, a.established);
        let Some(run) = self.retry.as_mut() else {
            return;
        };
        if let Some(version) = progress.transport_up {
            log::info!(
                "attempt {number}: {version:?} with ALPN h2 after {:.1} ms; HTTP/2 preface sent",
                (now - started).as_secs_f64() * 1e3
            );
            run.on_transport_up(now);
        }
        if progress.settings {
            log::info!(
                "attempt {number}: connected (server SETTINGS after {:.1} ms): backoff reset",
                (now - started).as_secs_f64() * 1e3
            );
            run.on_settings(now);
        }
        if let Some(why) = progress.ended {
            let after = (now - started).as_secs_f64() * 1e3;
            match established {
                true => {
                    log::info!("attempt {number}: connection closed after {after:.1} ms: {why}");
                    run.on_closed(now);
                }
                false => {
                    log::info!("attempt {number} failed after {after:.1} ms: {why}");
                    run.on_failed(now);
                }
            }
            self.close_attempt(ctx);
        } else if let Some(a) = self.attempt.as_mut() {
            let wants_write = a.wants_write();
            if wants_write != a.wants_write {
                a.wants_write = wants_write;
                let _ = ctx.reregister(&mut a.stream, a.token, interest(wants_write));
            }
        }
    }

    /// Keeps the one timer at the earliest instant the run or a connection needs.
    fn update_timer(&mut self, ctx: &mut Ctx<'_>) {
        let wanted = [
            self.retry
                .as_ref()
                .filter(|_| self.phase == Phase::Retrying)
                .and_then(RetryRun::poll_timeout),
            self.control.as_ref().and_then(|c| c.grpc.poll_timeout()),
            self.attempt
                .as_ref()
                .and_then(|a| a.h2.as_ref())
                .and_then(Connection::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min();
        if self.wake.map(|(_, at)| at) != wanted {
            if let Some((id, _)) = self.wake.take() {
                ctx.cancel_timer(id);
            }
            self.wake = wanted.map(|at| (ctx.set_timer(at, 0), at));
        }
    }
}

impl Attempt {
    /// Moves bytes: completes the connect, feeds TLS and HTTP/2, writes what they want sent.
    fn pump(
        &mut self,
        now: Timestamp,
        ready: Readiness,
        tls_config: &Arc<rustls::ClientConfig>,
        server_name: &ServerName<'static>,
        buf: &mut [u8],
    ) -> AttemptProgress {
        let mut progress = AttemptProgress::default();
        if let Err(why) = self.pump_inner(now, ready, tls_config, server_name, buf, &mut progress) {
            progress.ended = Some(why);
        }
        progress
    }

    fn pump_inner(
        &mut self,
        now: Timestamp,
        ready: Readiness,
        tls_config: &Arc<rustls::ClientConfig>,
        server_name: &ServerName<'static>,
        buf: &mut [u8],
        progress: &mut AttemptProgress,
    ) -> Result<(), String> {
        if self.tls.is_none() {
            match connect_progress(&self.stream, ready) {
                ConnectProgress::Pending => return Ok(()),
                ConnectProgress::Failed(e) => return Err(format!("connect: {e}")),
                ConnectProgress::Connected => {
                    let tls = TlsClient::new(Arc::clone(tls_config), server_name.clone())
                        .map_err(|e| format!("TLS set-up: {e}"))?;
                    self.tls = Some(tls);
                }
            }
        }
        let tls = self.tls.as_mut().expect("set above");
        let mut plaintext = Vec::new();
        let mut eof = false;
        loop {
            match self.stream.read(buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => tls
                    .handle_input(&buf[..n], &mut plaintext)
                    .map_err(|e| format!("TLS: {e}"))?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.to_string()),
            }
        }
        if self.h2.is_none() && !tls.is_handshaking() {
            if tls.alpn_protocol() != Some(ALPN_H2) {
                return Err("the server did not select ALPN h2".into());
            }
            progress.transport_up = tls.protocol_version();
            self.h2 = Some(Connection::new(Role::Client, http2::Config::default(), now));
        }
        if let Some(h2) = &mut self.h2 {
            if !plaintext.is_empty() {
                h2.handle_input(now, &plaintext);
            }
            h2.handle_timeout(now);
            while let Some(event) = h2.poll_event() {
                if event == Event::SettingsReceived && !self.established {
                    self.established = true;
                    progress.settings = true;
                }
            }
            let out = h2.pending_output();
            if !out.is_empty() {
                tls.send(out).map_err(|e| format!("TLS: {e}"))?;
                let n = out.len();
                h2.consume_output(now, n);
            }
        }
        flush(now, &mut self.stream, tls).map_err(|e| e.to_string())?;
        let stage = match (&self.h2, self.established) {
            (None, _) => "before the TLS handshake completed",
            (Some(_), false) => "before the server's SETTINGS",
            (Some(_), true) => "by the server",
        };
        if eof || tls.peer_closed() {
            return Err(format!("closed {stage}"));
        }
        if self.h2.as_ref().is_some_and(Connection::is_closed) {
            return Err("HTTP/2 session ended".into());
        }
        Ok(())
    }

    fn wants_write(&self) -> bool {
        self.tls
            .as_ref()
            .is_none_or(|t| !t.pending_output().is_empty())
    }
}

impl Component for ReconnectClient {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        log::info!(
            "reconnect interop client: control {}, retry port {}, max_reconnect_backoff_ms {}, \
             test duration {:?}, seed {}",
            self.control_addr(),
            self.config.retry_port,
            self.config.max_reconnect_backoff_ms,
            self.config.test_duration,
            self.config.seed
        );
        let params = ReconnectParams {
            max_reconnect_backoff_ms: self.config.max_reconnect_backoff_ms,
        };
        // The reference sends Start without a deadline.
        match self.control_call(ctx, START_PATH, &params.encode_to_vec(), None) {
            Ok(call) => {
                self.phase = Phase::Starting { call };
                self.update_timer(ctx);
            }
            Err(failure) => self.finish(ctx, Err(failure)),
        }
        Ok(())
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, token: Token, ready: Readiness) {
        if self.control.as_ref().is_some_and(|c| c.token == token) {
            self.control_io(ctx, ready);
        } else if self.attempt.as_ref().is_some_and(|a| a.token == token) {
            self.attempt_io(ctx, ready);
        }
        self.drive(ctx);
        self.update_timer(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, _key: u32) {
        if self.wake.map(|(id, _)| id) != Some(timer) {
            return;
        }
        self.wake = None;
        let now = ctx.now();
        if let Some(c) = self.control.as_mut() {
            c.grpc.handle_timeout(now);
            self.after_control_io(ctx, None);
        }
        if self.attempt.as_ref().is_some_and(|a| a.h2.is_some()) {
            self.attempt_io(ctx, Readiness::default());
        }
        self.drive(ctx);
        self.update_timer(ctx);
    }

    fn on_shutdown(&mut self, ctx: &mut Ctx<'_>) {
        self.finish(ctx, Err(Failure::Interrupted));
    }
}

/// How a non-blocking connect is going (mio: wait for writable, then `take_error`, then
/// `peer_addr`). A hang-up while still connecting is a failure, not a wait.
fn connect_progress(stream: &TcpStream, ready: Readiness) -> ConnectProgress {
    match stream.take_error() {
        Ok(Some(e)) | Err(e) => return ConnectProgress::Failed(e.to_string()),
        Ok(None) => {}
    }
    match stream.peer_addr() {
        Ok(_) => ConnectProgress::Connected,
        Err(_) if ready.closed || ready.error => {
            ConnectProgress::Failed("connection closed while connecting".into())
        }
        Err(e) if e.kind() == io::ErrorKind::NotConnected => ConnectProgress::Pending,
        Err(e) => ConnectProgress::Failed(e.to_string()),
    }
}

fn interest(write: bool) -> Interest {
    match write {
        true => Interest::READABLE | Interest::WRITABLE,
        false => Interest::READABLE,
    }
}

impl Outbox for ClientConnection {
    fn pending_output(&self) -> &[u8] {
        ClientConnection::pending_output(self)
    }
    fn consume_output(&mut self, now: Timestamp, n: usize) {
        ClientConnection::consume_output(self, now, n)
    }
}

impl Outbox for TlsClient {
    fn pending_output(&self) -> &[u8] {
        TlsClient::pending_output(self)
    }
    fn consume_output(&mut self, _now: Timestamp, n: usize) {
        TlsClient::consume_output(self, n)
    }
}
