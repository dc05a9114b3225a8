//! The stream driver: one TCP connection between the loop and a sans-IO [`StreamCore`].
//!
//! Every TCP component used to hand-write the same edge-triggered loop; [`Stream`] is that
//! loop, once: read until `WouldBlock` (or the work budget), feed the core, flush its output
//! ([`crate::net::flush`]), register WRITABLE only while output waits ([`WriteInterest`]) and
//! keep one timer at the core's deadline ([`TimerSlot`]). What the core's output *means*
//! (requests to answer, events to route between connections) stays with the component, which
//! calls the steps in order between its own work:
//!
//! ```text
//! on_ready:  stream.on_ready(ready)?  ->  stream.read(now, buf)?  ->  (component: events)
//! on_timer:  stream.on_timer(now, id) ->  ...                        ->  stream.flush()?
//!                                                                     ->  stream.settle(ctx)
//! ```
//!
//! The budget: at most [`READ_BUDGET`] reads per readiness. A peer that floods could otherwise
//! keep one `on_ready` reading forever (a fast sender refills the socket as fast as we drain
//! it) while every other connection waits. A stream that stops at its budget still holds a
//! readable edge the kernel will not report again, so [`Stream::settle`] asks the loop to call
//! it again on the next turn ([`Ctx::ready_again`]), after the other sources had theirs.
//!
//! Write progress: output that waits for the socket while the socket takes nothing for
//! [`WRITE_STALL_TIMEOUT`] ends the connection ([`Stream::flush`] fails with `TimedOut`). A
//! peer that never reads would otherwise pin its output buffer, and the connection, forever.

// I/O module: The stream driver: owns a component's TCP socket, reads and writes it.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io::{self, Read};
use std::net::SocketAddr;
use std::time::Duration;

use mio::net::TcpStream;

use super::{Ctx, Readiness, Registration, TimerSlot, WriteInterest};
use crate::net::{flush, Outbox};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// Reads per readiness before a stream yields to the loop's other sources: 16 reads of
/// [`READ_CHUNK`], so at most 256 KiB from one peer per turn of the loop.
pub const READ_BUDGET: u32 = 16;
/// The size of one read; a core bounds what it keeps of it.
pub const READ_CHUNK: usize = 16 * 1024;
/// How long output may wait with the socket taking none of it before the connection is
/// given up. Long enough for a slow reader on a lossy link (TCP's own retransmissions back
/// off to seconds), short enough that a peer that never reads frees its buffers soon.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A sans-IO protocol core behind a byte stream: bytes in, bytes out, one deadline.
pub trait StreamCore: Outbox {
    /// Whether the core takes input now. `false` pauses reading (backpressure, e.g. answers
    /// not yet written) until the component reads again; the kernel buffers meanwhile.
    fn wants_input(&self) -> bool {
        true
    }
    /// Bytes the peer sent, in order.
    fn handle_input(&mut self, now: Timestamp, data: &[u8]);
    /// Whether input already read waits that the core can take now without more input
    /// (it paused for its own reasons, e.g. answers it was owed): the driver asks for
    /// another turn ([`Ctx::ready_again`]), since no edge will come for what was read.
    fn has_work(&self) -> bool {
        false
    }
    /// The peer closed its side (a read returned 0); nothing more will arrive.
    fn handle_eof(&mut self, _now: Timestamp) {}
    /// When the core next needs [`handle_timeout`](Self::handle_timeout), if ever.
    fn poll_timeout(&self) -> Option<Timestamp>;
    /// The deadline from [`poll_timeout`](Self::poll_timeout) passed (a spurious call is a
    /// no-op).
    fn handle_timeout(&mut self, now: Timestamp);
}

/// Implements [`Outbox`] and [`StreamCore`] for a sans-IO core whose own methods already
/// have those names and signatures (the gRPC client and server connections): the core stays
/// free of the driver's traits, and the adapter is written once.
macro_rules! stream_core_by_inherent_methods {
    ($core:ty) => {
        impl $crate::net::Outbox for $core {
            fn pending_output(&self) -> &[u8] {
                <$core>::pending_output(self)
            }
            fn consume_output(&mut self, now: $crate::time::Timestamp, n: usize) {
                <$core>::consume_output(self, now, n)
            }
        }

        impl $crate::reactor::stream::StreamCore for $core {
            /// A connection that is over (cut off, failed, or done) reads nothing more: what
            /// a flooding peer still sends after its GOAWAY is not worth a read.
            fn wants_input(&self) -> bool {
                !<$core>::is_closed(self)
            }
            fn handle_input(&mut self, now: $crate::time::Timestamp, data: &[u8]) {
                <$core>::handle_input(self, now, data)
            }
            fn poll_timeout(&self) -> Option<$crate::time::Timestamp> {
                <$core>::poll_timeout(self)
            }
            fn handle_timeout(&mut self, now: $crate::time::Timestamp) {
                <$core>::handle_timeout(self, now)
            }
        }
    };
}
pub(crate) use stream_core_by_inherent_methods;

/// One TCP connection driven for a component: the socket, its registration and key, the
/// core, and the driver's bookkeeping. The key is the component's (see [`Ctx::register`]):
/// the registration's and the timer's, so both map straight back to this connection.
pub struct Stream<C> {
    socket: TcpStream,
    registration: Registration,
    key: u32,
    core: C,
    timer: TimerSlot,
    interest: WriteInterest,
    /// A non-blocking connect not yet completed: nothing is read or written.
    connecting: bool,
    /// A readable edge not yet read to `WouldBlock`.
    readable: bool,
    /// The peer closed its side.
    eof: bool,
    /// Reads left in this readiness.
    budget: u32,
    /// Since when output has waited with the socket taking none of it.
    stalled_since: Option<Timestamp>,
    /// How long it may wait so ([`WRITE_STALL_TIMEOUT`] unless set).
    stall_timeout: Duration,
}

impl<C: StreamCore> Stream<C> {
    /// Drives an accepted connection. It is read at once: the peer may have written before
    /// the socket was registered.
    pub fn accepted(ctx: &mut Ctx<'_>, socket: TcpStream, key: u32, core: C) -> io::Result<Self> {
        Self::register(ctx, socket, key, core, false)
    }

    /// Starts a non-blocking connect to `addr` (Nagle off: the cores write whole messages).
    /// Nothing is read or written until [`on_ready`](Self::on_ready) sees it complete.
    pub fn connect(ctx: &mut Ctx<'_>, addr: SocketAddr, key: u32, core: C) -> io::Result<Self> {
        let socket = TcpStream::connect(addr)?;
        let _ = socket.set_nodelay(true);
        Self::register(ctx, socket, key, core, true)
    }

    fn register(
        ctx: &mut Ctx<'_>,
        mut socket: TcpStream,
        key: u32,
        core: C,
        connecting: bool,
    ) -> io::Result<Self> {
        // A connect completes with writability, so a connecting stream waits for it.
        let (interest, initial) = WriteInterest::initial(connecting);
        let registration = ctx.register(&mut socket, initial, key)?;
        Ok(Stream {
            socket,
            registration,
            key,
            core,
            timer: TimerSlot::default(),
            interest,
            connecting,
            readable: !connecting,
            eof: false,
            budget: READ_BUDGET,
            stalled_since: None,
            stall_timeout: WRITE_STALL_TIMEOUT,
        })
    }

    /// Takes a readiness event: a fresh budget, the readable edge, and a connect's outcome
    /// (an error if it failed).
    pub fn on_ready(&mut self, ready: Readiness) -> io::Result<()> {
        self.budget = READ_BUDGET;
        if self.connecting {
            if !connect_done(&self.socket, ready)? {
                return Ok(());
            }
            self.connecting = false;
        }
        if ready.readable || ready.closed || ready.error {
            self.readable = true;
        }
        Ok(())
    }

    /// Whether `id` is this stream's timer; if so the core handles its timeout.
    pub fn on_timer(&mut self, now: Timestamp, id: TimerId) -> bool {
        let ours = self.timer.fired(id);
        if ours {
            self.core.handle_timeout(now);
        }
        ours
    }

    /// Whether a read now could make progress: connected, an edge left, budget left, and a
    /// core that wants input.
    pub fn can_read(&self) -> bool {
        !self.connecting && self.readable && self.budget > 0 && self.core.wants_input()
    }

    /// Reads into the core while [`can_read`](Self::can_read); the peer's close goes to
    /// [`StreamCore::handle_eof`] (then [`eof`](Self::eof) is true).
    pub fn read(&mut self, now: Timestamp, buf: &mut [u8]) -> io::Result<()> {
        while self.can_read() {
            self.budget -= 1;
            match self.socket.read(buf) {
                Ok(0) => {
                    (self.eof, self.readable) = (true, false);
                    self.core.handle_eof(now);
                }
                Ok(n) => self.core.handle_input(now, &buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads left in this readiness' budget.
    pub fn reads_left(&self) -> u32 {
        self.budget
    }

    /// Writes as much of the core's output as the socket takes (nothing while connecting).
    /// Fails with `TimedOut` once output has waited the write-stall timeout
    /// ([`WRITE_STALL_TIMEOUT`] by default) with the socket taking none of it.
    pub fn flush(&mut self, now: Timestamp) -> io::Result<()> {
        if self.connecting {
            return Ok(());
        }
        let before = self.core.pending_output().len();
        flush(now, &mut self.socket, &mut self.core)?;
        let after = self.core.pending_output().len();
        self.stalled_since = match (after, self.stalled_since) {
            (0, _) => None,
            // Something went out: the clock restarts (new output may have been queued too).
            _ if after < before => Some(now),
            (_, since) => Some(since.unwrap_or(now)),
        };
        match self.write_deadline() {
            Some(deadline) if now >= deadline => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("peer read nothing for {:?}", self.stall_timeout),
            )),
            _ => Ok(()),
        }
    }

    fn write_deadline(&self) -> Option<Timestamp> {
        self.stalled_since.map(|t| t + self.stall_timeout)
    }

    /// Sets how long output may wait with the socket taking none of it.
    pub fn set_write_stall_timeout(&mut self, timeout: Duration) {
        self.stall_timeout = timeout;
    }

    /// After the component's work: WRITABLE interest iff output waits (or the connect does),
    /// the timer at the core's deadline, and another call next turn if the budget ran out
    /// with input left or the core has work in what it read ([`StreamCore::has_work`]).
    pub fn settle(&mut self, ctx: &mut Ctx<'_>) {
        let wants_write = self.connecting || !self.core.pending_output().is_empty();
        self.interest
            .update(ctx, &mut self.socket, &self.registration, wants_write);
        let wanted = match (self.core.poll_timeout(), self.write_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.timer.set(ctx, wanted, self.key);
        if (self.readable && self.budget == 0) || self.core.has_work() {
            ctx.ready_again(&self.registration);
        }
    }

    /// Deregisters the socket and cancels the timer; the socket closes, the core is returned.
    pub fn close(mut self, ctx: &mut Ctx<'_>) -> C {
        ctx.deregister(&mut self.socket, self.registration);
        self.timer.cancel(ctx);
        self.core
    }

    /// The core.
    pub fn core(&self) -> &C {
        &self.core
    }

    /// The core, to feed it the component's work (answers, calls, shutdown).
    pub fn core_mut(&mut self) -> &mut C {
        &mut self.core
    }

    /// The socket, for what the driver does not do (e.g. `shutdown(Write)`).
    pub fn socket(&self) -> &TcpStream {
        &self.socket
    }

    /// Whether the connect is still in progress.
    pub fn is_connecting(&self) -> bool {
        self.connecting
    }

    /// Whether the peer closed its side.
    pub fn eof(&self) -> bool {
        self.eof
    }
}

/// Whether a non-blocking connect completed (mio: wait for writable, then `take_error`, then
/// `peer_addr`); its error if it failed. A hang-up while still connecting is a failure, not
/// a wait.
fn connect_done(socket: &TcpStream, ready: Readiness) -> io::Result<bool> {
    if let Some(e) = socket.take_error()? {
        return Err(e);
    }
    match socket.peer_addr() {
        Ok(_) => Ok(true),
        Err(_) if ready.closed || ready.error => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "connection closed while connecting",
        )),
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
        Err(e) => Err(e),
    }
}
