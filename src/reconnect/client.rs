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
//! are [`ClientConnection`]'s, an attempt's TLS and HTTP/2 are `super::attempt`'s, and each
//! connection's reads, writes, interest and timer are its [`Stream`]'s.

// I/O module: The interop client's driver: owns its sockets and logs every attempt.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use rustls::pki_types::ServerName;

use super::attempt::{Attempt, AttemptProgress};
use super::backoff::{AttemptRecord, BackoffConfig, Step};
use super::retry::RetryRun;
use super::tls::interop_client_config;
use super::verify::verify_intervals;
use crate::grpc::client::{ClientConnection, ClientEvent};
use crate::grpc::proto::testing::{Empty, ReconnectInfo, ReconnectParams};
use crate::grpc::status::{Code, Status};
use crate::http2;
use crate::reactor::stream::{Stream, READ_CHUNK};
use crate::reactor::{Component, Ctx, Readiness, TimerSlot};
use crate::timer::TimerId;

const START_PATH: &str = "/grpc.testing.ReconnectService/Start";
const STOP_PATH: &str = "/grpc.testing.ReconnectService/Stop";
/// Registration and timer keys: the control connection, the current attempt, the run's timer.
const CONTROL: u32 = 0;
const ATTEMPT: u32 = 1;
const RUN: u32 = 2;

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

/// The reconnect interop client. See the module docs.
pub struct ReconnectClient {
    config: ClientConfig,
    tls_config: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
    phase: Phase,
    /// The control channel: plaintext HTTP/2.
    control: Option<Stream<ClientConnection>>,
    retry: Option<RetryRun>,
    attempt: Option<Attempt>,
    /// The run's timer, at its next step (the connections keep their own).
    run_timer: TimerSlot,
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
            run_timer: TimerSlot::default(),
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
        let authority = self.authority();
        let grpc = ClientConnection::new(ctx.now(), &authority, false, http2::Config::default());
        let control = Stream::connect(ctx, addr, CONTROL, grpc)
            .map_err(|e| format!("control channel to {addr}: {e}"))?;
        self.control = Some(control);
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
            if let Ok(call) = c.core_mut().call(now, path, message, timeout) {
                return Ok(call);
            }
        }
        self.open_control(ctx).map_err(Failure::Unreachable)?;
        let control = self.control.as_mut().expect("just opened");
        control
            .core_mut()
            .call(now, path, message, timeout)
            .map_err(|s| Failure::Unreachable(s.to_string()))
    }

    fn close_control(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(c) = self.control.take() {
            c.close(ctx);
        }
    }

    /// Readiness on the control connection: connect, read, answer, write.
    fn control_io(&mut self, ctx: &mut Ctx<'_>, ready: Readiness) {
        let addr = self.control_addr();
        let Some(c) = self.control.as_mut() else {
            return;
        };
        let was_connecting = c.is_connecting();
        if let Err(e) = c.on_ready(ready) {
            return self.control_lost(ctx, &format!("control channel to {addr}: {e}"));
        }
        if c.is_connecting() {
            return;
        }
        if was_connecting {
            log::debug!("control channel connected to {addr}");
        }
        let closed = match c.read(ctx.now(), &mut self.buf) {
            Err(e) => Some(format!("control connection: {e}")),
            Ok(()) if c.eof() => Some("the server closed the control connection".to_owned()),
            Ok(()) => None,
        };
        self.after_control_io(ctx, closed);
    }

    /// Handles the control connection's events, writes, and closes it when it is over.
    fn after_control_io(&mut self, ctx: &mut Ctx<'_>, mut closed: Option<String>) {
        let Some(c) = self.control.as_mut() else {
            return;
        };
        if closed.is_none() {
            if let Err(e) = c.flush(ctx.now()) {
                closed = Some(format!("control connection: {e}"));
            }
        }
        let grpc = c.core_mut();
        if closed.is_none() && grpc.is_closed() && grpc.pending_output().is_empty() {
            closed = Some("the control connection's HTTP/2 session ended".to_owned());
        }
        if let Some(why) = &closed {
            grpc.on_transport_closed(why);
        }
        while let Some(event) = self
            .control
            .as_mut()
            .and_then(|c| c.core_mut().poll_event())
        {
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
            c.settle(ctx);
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
                // A bounded run waits until its end rather than say `Connected`.
                Step::Wait(_) | Step::Connected => break,
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
            c.core_mut().go_away(ctx.now());
            let _ = c.flush(ctx.now());
        }
        self.close_control(ctx);
        self.run_timer.cancel(ctx);
        ctx.shutdown();
    }

    /// Opens attempt `number`'s one TCP connection.
    fn start_attempt(&mut self, ctx: &mut Ctx<'_>, number: u32) -> io::Result<()> {
        self.close_attempt(ctx);
        let addr = SocketAddr::new(self.config.server_ip, self.config.retry_port);
        let tls = (&self.tls_config, &self.server_name);
        self.attempt = Some(Attempt::start(ctx, addr, ATTEMPT, number, tls)?);
        Ok(())
    }

    fn close_attempt(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(a) = self.attempt.take() {
            a.close(ctx);
        }
    }

    /// Logs what a round on the current attempt found and reports it to the run.
    fn attempt_progress(&mut self, ctx: &mut Ctx<'_>, progress: AttemptProgress) {
        let now = ctx.now();
        let Some(a) = self.attempt.as_mut() else {
            return;
        };
        let (number, started, established) = (a.number, a.started, a.established());
        let Some(run) = self.retry.as_mut() else {
            return;
        };
        let after_ms = (now - started).as_secs_f64() * 1e3;
        if let Some(version) = progress.transport_up {
            log::info!(
                "attempt {number}: {version:?} with ALPN h2 after {after_ms:.1} ms; HTTP/2 preface sent"
            );
            run.on_transport_up(now);
        }
        if progress.settings {
            log::info!(
                "attempt {number}: connected (server SETTINGS after {after_ms:.1} ms): backoff reset"
            );
            run.on_settings(now);
        }
        let Some(why) = progress.ended else {
            return a.settle(ctx);
        };
        match established {
            true => {
                log::info!("attempt {number}: connection closed after {after_ms:.1} ms: {why}");
                run.on_closed(now);
            }
            false => {
                log::info!("attempt {number} failed after {after_ms:.1} ms: {why}");
                run.on_failed(now);
            }
        }
        self.close_attempt(ctx);
    }

    /// Keeps the run's timer at its next step (only while retrying).
    fn update_timer(&mut self, ctx: &mut Ctx<'_>) {
        let wanted = self
            .retry
            .as_ref()
            .filter(|_| self.phase == Phase::Retrying)
            .and_then(RetryRun::poll_timeout);
        self.run_timer.set(ctx, wanted, RUN);
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
                self.after_control_io(ctx, None);
                self.update_timer(ctx);
            }
            Err(failure) => self.finish(ctx, Err(failure)),
        }
        Ok(())
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness) {
        match key {
            CONTROL => self.control_io(ctx, ready),
            ATTEMPT => {
                if let Some(a) = self.attempt.as_mut() {
                    let progress = a.on_ready(ctx.now(), ready, &mut self.buf);
                    self.attempt_progress(ctx, progress);
                }
            }
            _ => {}
        }
        self.drive(ctx);
        self.update_timer(ctx);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32) {
        let now = ctx.now();
        match key {
            CONTROL => {
                if self
                    .control
                    .as_mut()
                    .is_some_and(|c| c.on_timer(now, timer))
                {
                    self.after_control_io(ctx, None);
                }
            }
            ATTEMPT => {
                let a = self.attempt.as_mut();
                if let Some(p) = a.and_then(|a| a.on_timer(now, timer, &mut self.buf)) {
                    self.attempt_progress(ctx, p);
                }
            }
            _ => {
                if !self.run_timer.fired(timer) {
                    return;
                }
            }
        }
        self.drive(ctx);
        self.update_timer(ctx);
    }

    fn on_shutdown(&mut self, ctx: &mut Ctx<'_>) {
        self.finish(ctx, Err(Failure::Interrupted));
    }
}

crate::reactor::stream::stream_core_by_inherent_methods!(ClientConnection);
