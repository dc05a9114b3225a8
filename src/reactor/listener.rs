//! The listener driver: one TCP listening socket between the loop and a component.
//!
//! Two things every accept loop needs and none had: a work budget, and recovery from running
//! out of descriptors.
//!
//! - **Budget.** At most [`ACCEPT_BUDGET`] accepts per readiness, then the listener yields to
//!   the loop's other sources and asks to be called again next turn ([`Ctx::ready_again`]):
//!   a connect flood cannot hold the loop in one `on_ready`.
//! - **Descriptor exhaustion.** `accept` failing with `EMFILE` (or any other error) leaves the
//!   pending connections in the kernel's backlog, and an edge-triggered listener gets no new
//!   edge for them: accepting would stop until yet another client connects. So a failure
//!   pauses accepting for [`ACCEPT_RETRY`] and a timer resumes it; the warning is logged at
//!   most once per [`WARN_EVERY`], with the count of failures it stands for.
//!
//! ```text
//! on_ready(key):            listener.on_ready();  while let Some(c) = listener.accept(ctx) { .. }
//! on_timer(key, id):        if listener.on_timer(id) { the same loop }
//! ```

// I/O module: The listener driver: owns a component's listening socket, accepts and logs.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::Interest;

use super::{Ctx, Registration};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// Accepts per readiness before a listener yields to the loop's other sources.
pub const ACCEPT_BUDGET: u32 = 64;
/// How long accepting pauses after a failed `accept` (e.g. `EMFILE`) before it is tried again.
pub const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// The least time between two warnings about failed accepts.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// Where a listener is in its accept loop.
#[derive(Debug)]
enum State {
    /// Accepting: this many accepts left in the current readiness.
    Accepting { budget: u32 },
    /// Waiting for the next readiness (the backlog was empty, or the budget spent).
    Waiting,
    /// An accept failed: paused until this timer fires.
    Paused { timer: TimerId },
}

/// Failed accepts, and when they were last logged.
#[derive(Debug, Default)]
struct FailureLog {
    last_logged: Option<Timestamp>,
    unlogged: u64,
    total: u64,
}

/// A listening socket driven for a component. See the module docs.
pub struct Listener {
    socket: TcpListener,
    registration: Registration,
    key: u32,
    /// Names the listener in log lines, e.g. `control port`.
    name: &'static str,
    state: State,
    failures: FailureLog,
}

impl Listener {
    /// Registers `socket` under the component's `key` (its readiness and its timer). Call
    /// [`on_ready`](Self::on_ready) and accept at once if connections may already wait.
    pub fn register(
        ctx: &mut Ctx<'_>,
        mut socket: TcpListener,
        key: u32,
        name: &'static str,
    ) -> io::Result<Self> {
        let registration = ctx.register(&mut socket, Interest::READABLE, key)?;
        Ok(Listener {
            socket,
            registration,
            key,
            name,
            state: State::Waiting,
            failures: FailureLog::default(),
        })
    }

    /// Takes a readiness event: a fresh budget, unless accepting is paused.
    pub fn on_ready(&mut self) {
        if !matches!(self.state, State::Paused { .. }) {
            self.state = State::Accepting {
                budget: ACCEPT_BUDGET,
            };
        }
    }

    /// Whether `id` is this listener's retry timer; if so accepting resumes with a fresh
    /// budget, and the component runs its accept loop.
    pub fn on_timer(&mut self, id: TimerId) -> bool {
        let ours = matches!(self.state, State::Paused { timer } if timer == id);
        if ours {
            self.state = State::Accepting {
                budget: ACCEPT_BUDGET,
            };
        }
        ours
    }

    /// The next pending connection, or `None`: none is pending, the budget is spent (the loop
    /// calls again next turn), or an accept failed (accepting resumes after [`ACCEPT_RETRY`]).
    pub fn accept(&mut self, ctx: &mut Ctx<'_>) -> Option<(TcpStream, SocketAddr)> {
        loop {
            let State::Accepting { budget } = &mut self.state else {
                return None;
            };
            if *budget == 0 {
                self.state = State::Waiting;
                ctx.ready_again(&self.registration);
                return None;
            }
            *budget -= 1;
            match self.socket.accept() {
                Ok(conn) => return Some(conn),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.state = State::Waiting,
                // The peer gave up before we accepted it; the next one may be fine.
                Err(e) if retry_at_once(&e) => continue,
                Err(e) => self.pause(ctx, &e),
            }
        }
    }

    /// Failed accepts so far (for metrics).
    pub fn failures(&self) -> u64 {
        self.failures.total
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Deregisters the socket and cancels a pending retry; the socket closes.
    pub fn close(mut self, ctx: &mut Ctx<'_>) {
        if let State::Paused { timer } = self.state {
            ctx.cancel_timer(timer);
        }
        ctx.deregister(&mut self.socket, self.registration);
    }

    fn pause(&mut self, ctx: &mut Ctx<'_>, error: &io::Error) {
        let now = ctx.now();
        let timer = ctx.set_timer(now + ACCEPT_RETRY, self.key);
        self.state = State::Paused { timer };
        let log = &mut self.failures;
        (log.total, log.unlogged) = (log.total + 1, log.unlogged + 1);
        if log.last_logged.is_some_and(|t| now < t + WARN_EVERY) {
            return;
        }
        let more = match log.unlogged {
            1 => String::new(),
            n => format!(" ({n} failed accepts since the last warning)"),
        };
        log::warn!(
            "{} accept: {error}; accepting again in {} ms{more}",
            self.name,
            ACCEPT_RETRY.as_millis()
        );
        (log.last_logged, log.unlogged) = (Some(now), 0);
    }
}

/// A component's listening socket over its life: bound when the component is built, so that
/// a taken port fails start-up; driven once the component starts; closed at shutdown, when
/// the component stops accepting and drains.
pub enum Listening {
    /// Bound, not yet registered with the loop.
    Bound(TcpListener),
    /// Registered and accepting.
    Driven(Listener),
    /// Closed: shut down.
    Closed,
}

impl Listening {
    /// Registers a bound socket (see [`Listener::register`]); otherwise does nothing.
    pub fn start(&mut self, ctx: &mut Ctx<'_>, key: u32, name: &'static str) -> io::Result<()> {
        if let Listening::Bound(socket) = std::mem::replace(self, Listening::Closed) {
            *self = Listening::Driven(Listener::register(ctx, socket, key, name)?);
        }
        Ok(())
    }

    /// The driven listener, if started and not closed.
    pub fn driven(&mut self) -> Option<&mut Listener> {
        match self {
            Listening::Driven(l) => Some(l),
            _ => None,
        }
    }

    /// The bound address, until closed.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Listening::Bound(s) => s.local_addr(),
            Listening::Driven(l) => l.local_addr(),
            Listening::Closed => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    /// Failed accepts so far (for metrics).
    pub fn failures(&self) -> u64 {
        match self {
            Listening::Driven(l) => l.failures(),
            _ => 0,
        }
    }

    /// Stops accepting for good: the socket closes.
    pub fn close(&mut self, ctx: &mut Ctx<'_>) {
        if let Listening::Driven(l) = std::mem::replace(self, Listening::Closed) {
            l.close(ctx);
        }
    }
}

/// Errors that concern one connection, not the listener: accept the next at once.
fn retry_at_once(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
    )
}
