//! The one event loop: a mio `Poll`, the sockets' routing table, the clock and the timer wheel.
//!
//! Everything else in backoffd is a [`Component`]: a struct that owns its sockets and protocol
//! state and reacts to three kinds of events: readiness of a source it registered, expiry of a
//! timer it armed, and the request to shut down. Components reach the loop only through [`Ctx`],
//! which lets them register sources, arm and cancel timers, read the loop's `now`, and ask the
//! whole loop to stop. There are no threads, locks, channels or futures: one `Poll`, one wheel.
//!
//! To use it: [`Reactor::new`], then [`Reactor::add`] each component (its
//! [`Component::on_start`] runs there), then [`Reactor::run`] until the loop stops. The crate
//! root has a complete example.
//!
//! Routing is by key, for sources as for timers: [`Ctx::register`] and [`Ctx::set_timer`]
//! take a `u32` the component chooses (typically its own slab index), and
//! [`Component::on_ready`] and [`Component::on_timer`] hand it back, so readiness maps
//! straight to the connection it concerns without a token map in the component.
//!
//! Components do not hand-write the edge-triggered read / flush / interest / timer loop: the
//! drivers here do, with a work budget per wake-up so that one peer that floods cannot
//! monopolise the loop. [`stream::Stream`] drives a TCP connection's sans-IO
//! [`StreamCore`](stream::StreamCore) (read until `WouldBlock` or the budget, feed the core,
//! flush, keep [`WriteInterest`] and a [`TimerSlot`] in step); [`datagram::Datagram`] does the
//! same for a UDP socket. A driver that stops at its budget before `WouldBlock` asks, with
//! [`Ctx::ready_again`], to be handed its source again on the next turn, after other sources
//! have had theirs (the kernel would not report the edge again).
//!
//! One iteration of [`Reactor::run`]:
//! 1. ask the wheel for its earliest deadline and sleep until it or an event (a `timerfd`
//!    re-armed only when that deadline changes, `epoll_pwait2`'s nanosecond timeout, or the
//!    `epoll_wait` timeout; see [`WakeMode`]);
//! 2. read the clock: that instant is [`Ctx::woke_at`];
//! 3. hand each readiness event to the component that registered its source, with its key
//!    (sources are edge-triggered: a component must read or accept until `WouldBlock`, or
//!    call [`Ctx::ready_again`]), then the sources that asked to be called again (the wait
//!    in step 2 does not sleep while there are any);
//! 4. read the clock again and fire every due timer, earliest first.
//!
//! The loop's own metrics (its timers, how late they fire) are [`Ctx::loop_stats`]; what a
//! metrics scrape reports about the components is for whoever assembled them to gather
//! (`crate::metrics::MetricsSource`): the loop knows nothing of metrics.
//!
//! Shutdown starts with [`Ctx::shutdown`] or, if [`Config::signals`] is set, with SIGINT/SIGTERM
//! (read through a signalfd in the same `Poll`). The loop then calls [`Component::on_shutdown`]
//! on every component and gives them [`Config::drain_timeout`] to report
//! [`Component::is_drained`]; a signal that arrives while they drain stops the loop at once.

// I/O module: The event loop: owns the poll, the clock and the wake-up sources.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

pub mod datagram;
pub mod keys;
pub mod listener;
mod registration;
mod signals;
pub mod stream;
mod wake;

use std::any::Any;
use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use mio::event::Source;
use mio::{Events, Interest, Poll, Registry, Token};
use slab::Slab;

use crate::stats::LatencyHistogram;
use crate::time::Timestamp;
use crate::timer::{TimerId, TimerWheel};
pub use registration::{Registration, TimerSlot, WriteInterest};
use signals::Signals;
pub use wake::WakeMode;
use wake::Waker;

const WAKE_TOKEN: Token = Token(usize::MAX - 1);
const SIGNAL_TOKEN: Token = Token(usize::MAX - 2);
/// A turn longer than this is logged (at debug) with what ran in it: the loop exists for
/// timer precision, and one slow callback delays every timer and datagram behind it.
const SLOW_TURN: Duration = Duration::from_millis(1);

/// What a source is ready for, copied out of mio's event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Reading may make progress: read until `WouldBlock`.
    pub readable: bool,
    /// Writing may make progress: flush until `WouldBlock`.
    pub writable: bool,
    /// The peer closed its side, or the socket failed: reading will return 0 or an error.
    pub closed: bool,
    /// The socket has a pending error (e.g. `SO_ERROR` after a failed connect or an ICMP error).
    pub error: bool,
}

/// A part of the program driven by the loop. Every method runs on the loop's thread and must not
/// block: do bounded work and return.
pub trait Component: Any {
    /// Called once when the component is added: register sockets, arm first timers.
    fn on_start(&mut self, _ctx: &mut Ctx<'_>) -> io::Result<()> {
        Ok(())
    }
    /// A source this component registered with `key` became ready (or asked, with
    /// [`Ctx::ready_again`], to be called again).
    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness);
    /// A timer this component armed with [`Ctx::set_timer`] is due (never called early).
    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32);
    /// The loop is stopping: stop accepting work, say goodbye (e.g. HTTP/2 GOAWAY).
    fn on_shutdown(&mut self, _ctx: &mut Ctx<'_>) {}
    /// Whether this component has finished what it had in flight after [`on_shutdown`].
    ///
    /// [`on_shutdown`]: Component::on_shutdown
    fn is_drained(&self) -> bool {
        true
    }
}

/// A component shared with whoever reads it between callbacks (a metrics scrape, a test): the
/// loop runs one callback at a time, so while another component runs this one is not
/// borrowed, and its reader's `borrow()` cannot fail.
impl<T: Component> Component for Rc<RefCell<T>> {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        self.borrow_mut().on_start(ctx)
    }
    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness) {
        self.borrow_mut().on_ready(ctx, key, ready)
    }
    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32) {
        self.borrow_mut().on_timer(ctx, timer, key)
    }
    fn on_shutdown(&mut self, ctx: &mut Ctx<'_>) {
        self.borrow_mut().on_shutdown(ctx)
    }
    fn is_drained(&self) -> bool {
        self.borrow().is_drained()
    }
}

/// Reactor settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// How the loop sleeps until the next timer: a `timerfd`, `epoll_pwait2`'s nanosecond
    /// timeout, or the `epoll_wait` millisecond timeout (see [`WakeMode`]).
    pub wake: WakeMode,
    /// Handle SIGINT/SIGTERM in the loop (blocks them for this thread).
    pub signals: bool,
    /// How long components may take to drain after the first signal.
    pub drain_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            wake: WakeMode::Timerfd,
            signals: true,
            drain_timeout: Duration::from_secs(5),
        }
    }
}

/// Who gets a source's readiness or a timer's expiry: the component and its own key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Target {
    component: u32,
    key: u32,
}

/// The loop's own statistics, for a metrics scrape.
#[derive(Clone, Copy, Debug)]
pub struct LoopStats<'a> {
    /// Live timers in the wheel.
    pub timers: usize,
    /// How late timers were dispatched (dispatch time minus deadline).
    pub lateness: &'a LatencyHistogram,
    /// How long each turn's work took, from the wake-up to the last timer callback.
    pub turns: &'a LatencyHistogram,
}

/// What one turn of the loop ran, for the log line of a slow one.
#[derive(Clone, Copy, Debug, Default)]
struct Turn {
    /// Whether callbacks are timed: only when that line can be logged, so that the loop's
    /// hot path reads no extra clock otherwise.
    timed: bool,
    events: u32,
    again: u32,
    timers: u32,
    /// The longest callback: its component, key, whether a timer, and its length.
    slowest: Option<(u32, u32, bool, Duration)>,
    /// The thread's CPU time at the wake-up, when timed: a slow turn that used little CPU was
    /// preempted (the host or the kernel), not busy with the loop's own work.
    cpu_at_wake: Option<Duration>,
}

impl Turn {
    fn ran(&mut self, target: Target, timer: bool, took: Duration) {
        if self.slowest.is_none_or(|(.., t)| took > t) {
            self.slowest = Some((target.component, target.key, timer, took));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RunState {
    Running,
    /// A component or a signal asked to stop; `on_shutdown` not yet delivered.
    StopRequested,
    Draining {
        until: Timestamp,
    },
    Stopped,
}

/// Everything a component may touch, split from the components so both can be borrowed at once.
struct Core {
    registry: Registry,
    /// Token -> owning component and its key. The token is the slab key.
    sources: Slab<Target>,
    /// Sources that stopped at their work budget and asked to be called again next turn.
    again: Vec<Token>,
    timers: TimerWheel<Target>,
    now: Timestamp,
    /// When the last wait returned: what the kernel's part of a timer's lateness ends at.
    woke: Timestamp,
    state: RunState,
    /// How late timers were dispatched (now - deadline), for metrics.
    lateness: LatencyHistogram,
    /// How long turns took (wake-up to the last callback), for metrics.
    turns: LatencyHistogram,
    /// What the current turn ran so far.
    turn: Turn,
}

/// A component's handle on the loop during one callback.
pub struct Ctx<'a> {
    core: &'a mut Core,
    component: u32,
}

impl Ctx<'_> {
    /// The loop's notion of now: read right after the wake-up (and again before timers fire).
    pub fn now(&self) -> Timestamp {
        self.core.now
    }

    /// When the loop's wait last returned (the clock read first thing after it). A timer's
    /// lateness splits there: up to it is the kernel's wake-up, after it the loop's dispatch.
    pub fn woke_at(&self) -> Timestamp {
        self.core.woke
    }

    /// Registers a source; [`Component::on_ready`] receives `key` when it is ready. Keys are
    /// the component's to choose and need not be unique (e.g. a slab index, or a number per
    /// kind of socket).
    pub fn register<S: Source + ?Sized>(
        &mut self,
        source: &mut S,
        interest: Interest,
        key: u32,
    ) -> io::Result<Registration> {
        let target = self.target(key);
        let entry = self.core.sources.vacant_entry();
        let token = Token(entry.key());
        self.core.registry.register(source, token, interest)?;
        entry.insert(target);
        Ok(Registration { token })
    }

    /// Changes the interest of a source this component registered.
    pub fn reregister<S: Source + ?Sized>(
        &mut self,
        source: &mut S,
        registration: &Registration,
        interest: Interest,
    ) -> io::Result<()> {
        self.core
            .registry
            .reregister(source, registration.token, interest)
    }

    /// Removes a source; events already reported for it are dropped.
    pub fn deregister<S: Source + ?Sized>(&mut self, source: &mut S, registration: Registration) {
        // Deregistering a source that the kernel already dropped (closed fd) can fail; the
        // routing entry must go regardless.
        let _ = self.core.registry.deregister(source);
        let token = registration.token;
        let ours = self.core.sources.get(token.0);
        if ours.is_some_and(|t| t.component == self.component) {
            self.core.sources.remove(token.0);
        }
    }

    /// Calls [`Component::on_ready`] for this source again on the loop's next turn, as
    /// readable, after that turn's events: for a driver that stopped at its work budget
    /// before `WouldBlock` (sources are edge-triggered, so the kernel would not report the
    /// data it left). The loop does not sleep while such calls are due.
    pub fn ready_again(&mut self, registration: &Registration) {
        if !self.core.again.contains(&registration.token) {
            self.core.again.push(registration.token);
        }
    }

    /// Arms a timer; [`Component::on_timer`] receives `key` at or after `deadline`.
    pub fn set_timer(&mut self, deadline: Timestamp, key: u32) -> TimerId {
        let target = self.target(key);
        self.core.timers.insert(deadline, target)
    }

    fn target(&self, key: u32) -> Target {
        Target {
            component: self.component,
            key,
        }
    }

    /// Cancels a timer; a stale handle (already fired or cancelled) is a harmless no-op.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        self.core.timers.cancel(id).is_some()
    }

    /// Live timers in the loop's wheel (for metrics).
    pub fn timer_count(&self) -> usize {
        self.core.timers.len()
    }

    /// The loop's own statistics (for metrics).
    pub fn loop_stats(&self) -> LoopStats<'_> {
        LoopStats {
            timers: self.core.timers.len(),
            lateness: &self.core.lateness,
            turns: &self.core.turns,
        }
    }

    /// Asks the whole loop to stop gracefully, as SIGTERM would.
    pub fn shutdown(&mut self) {
        if self.core.state == RunState::Running {
            self.core.state = RunState::StopRequested;
        }
    }

    /// Whether the loop is stopping (components should refuse new work).
    pub fn is_shutting_down(&self) -> bool {
        self.core.state != RunState::Running
    }
}

/// The event loop. See the module docs.
pub struct Reactor {
    poll: Poll,
    events: Events,
    core: Core,
    components: Vec<Box<dyn Component>>,
    waker: Waker,
    signals: Option<Signals>,
    drain_timeout: Duration,
}

impl Reactor {
    /// Creates the `Poll`, the wake source and (if `config.signals`) the signalfd; no components.
    /// A wake source this kernel lacks (`epoll_pwait2` before Linux 5.11) falls back to timerfd
    /// with a warning; [`wake_mode`](Self::wake_mode) says which one runs.
    pub fn new(config: Config) -> io::Result<Self> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = match Waker::new(config.wake, &poll, WAKE_TOKEN) {
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                log::warn!("{e}; waking for timers with a timerfd instead");
                Waker::new(WakeMode::Timerfd, &poll, WAKE_TOKEN)?
            }
            other => other?,
        };
        let signals = match config.signals {
            true => Some(Signals::new(&registry, SIGNAL_TOKEN)?),
            false => None,
        };
        Ok(Reactor {
            poll,
            events: Events::with_capacity(1024),
            core: Core {
                registry,
                sources: Slab::new(),
                again: Vec::new(),
                timers: TimerWheel::new(),
                now: Timestamp::now(),
                woke: Timestamp::now(),
                state: RunState::Running,
                lateness: LatencyHistogram::default(),
                turns: LatencyHistogram::default(),
                turn: Turn::default(),
            },
            components: Vec::new(),
            waker,
            signals,
            drain_timeout: config.drain_timeout,
        })
    }

    /// Adds a component and calls its [`Component::on_start`]; start-up errors surface here.
    /// Returns the component's index, for [`component`](Self::component) after the run.
    pub fn add(&mut self, component: Box<dyn Component>) -> io::Result<usize> {
        let id = u32::try_from(self.components.len()).expect("too many components");
        let mut component = component;
        self.core.now = Timestamp::now();
        let mut ctx = Ctx {
            core: &mut self.core,
            component: id,
        };
        component.on_start(&mut ctx)?;
        self.components.push(component);
        Ok(id as usize)
    }

    /// The wake source in use: the one configured, unless this kernel lacked it.
    pub fn wake_mode(&self) -> WakeMode {
        self.waker.mode()
    }

    /// A component by index and type, e.g. to read a report after [`run`](Self::run) returned.
    pub fn component<T: Component>(&self, index: usize) -> Option<&T> {
        let c: &dyn Component = self.components.get(index)?.as_ref();
        (c as &dyn Any).downcast_ref::<T>()
    }

    /// Runs until every component drained after a stop request, or the drain time ran out.
    pub fn run(&mut self) -> io::Result<()> {
        loop {
            self.core.now = Timestamp::now();
            self.advance_shutdown();
            if self.core.state == RunState::Stopped {
                return Ok(());
            }
            let wake = match self.core.again.is_empty() {
                true => self.next_wake(),
                false => Some(self.core.now),
            };
            let (poll, events) = (&mut self.poll, &mut self.events);
            self.waker.wait(poll, events, wake, self.core.now)?;
            self.core.woke = Timestamp::now();
            self.core.now = self.core.woke;
            let timed = log::log_enabled!(log::Level::Debug);
            self.core.turn = Turn {
                timed,
                cpu_at_wake: timed.then(thread_cpu_time),
                ..Turn::default()
            };
            self.dispatch_io();
            self.core.now = Timestamp::now();
            self.fire_timers();
            self.end_turn();
        }
    }

    /// Records the turn's length, and logs a slow one with what ran in it.
    fn end_turn(&mut self) {
        let took = Timestamp::now().saturating_since(self.core.woke);
        self.core.turns.record_nanos(took.as_nanos() as u64);
        if took < SLOW_TURN || !self.core.turn.timed {
            return;
        }
        let t = self.core.turn;
        let cpu = t
            .cpu_at_wake
            .map_or(Duration::ZERO, |at| thread_cpu_time().saturating_sub(at));
        let slowest = t
            .slowest
            .map_or(String::new(), |(component, key, timer, d)| {
                let what = if timer { "timer" } else { "readiness" };
                format!("; slowest: component {component} key {key} {what} {d:?}")
            });
        log::debug!(
            "slow turn: {took:?} ({cpu:?} on the CPU): {} events, {} called again, {} timers{slowest}",
            t.events,
            t.again,
            t.timers
        );
    }

    /// The earliest instant the loop must be awake: the next timer, or the end of draining.
    fn next_wake(&self) -> Option<Timestamp> {
        let timer = self.core.timers.next_deadline();
        match self.core.state {
            RunState::Draining { until } => Some(timer.map_or(until, |t| t.min(until))),
            _ => timer,
        }
    }

    fn dispatch_io(&mut self) {
        // Taken before this turn's events: sources that ask again now are called next turn.
        let again = std::mem::take(&mut self.core.again);
        // `events` is moved out so components can be called while we iterate it.
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        for event in events.iter() {
            match event.token() {
                WAKE_TOKEN => self.waker.on_ready(),
                SIGNAL_TOKEN => self.on_signal(),
                token => {
                    let ready = Readiness {
                        readable: event.is_readable(),
                        writable: event.is_writable(),
                        closed: event.is_read_closed() || event.is_write_closed(),
                        error: event.is_error(),
                    };
                    self.deliver(token, ready);
                }
            }
        }
        self.events = events;
        let ready = Readiness {
            readable: true,
            ..Readiness::default()
        };
        self.core.turn.again = again.len() as u32;
        for token in again {
            self.deliver(token, ready);
        }
    }

    /// An event for a token deregistered earlier in this batch is dropped; one whose token was
    /// already reused is a spurious wake-up, which edge-triggered handlers tolerate (they read
    /// until `WouldBlock`).
    fn deliver(&mut self, token: Token, ready: Readiness) {
        if let Some(&target) = self.core.sources.get(token.0) {
            self.core.turn.events += 1;
            let key = target.key;
            self.call(target, false, |c, ctx| c.on_ready(ctx, key, ready));
        }
    }

    fn fire_timers(&mut self) {
        while let Some(expired) = self.core.timers.poll(self.core.now) {
            let late = self.core.now.saturating_since(expired.deadline);
            self.core.lateness.record_nanos(late.as_nanos() as u64);
            let target = expired.value;
            self.core.turn.timers += 1;
            let key = target.key;
            self.call(target, true, |c, ctx| c.on_timer(ctx, expired.id, key));
        }
    }

    fn on_signal(&mut self) {
        let count = self.signals.as_mut().map_or(0, Signals::drain);
        if count == 0 {
            return;
        }
        self.core.state = match self.core.state {
            RunState::Running => {
                log::info!("signal received: shutting down");
                RunState::StopRequested
            }
            RunState::Draining { .. } | RunState::StopRequested => {
                log::warn!("second signal: stopping now");
                RunState::Stopped
            }
            RunState::Stopped => RunState::Stopped,
        };
    }

    /// Delivers `on_shutdown` once, then stops when all components drained or time ran out.
    fn advance_shutdown(&mut self) {
        match self.core.state {
            RunState::StopRequested => {
                self.core.state = RunState::Draining {
                    until: self.core.now + self.drain_timeout,
                };
                for id in 0..self.components.len() as u32 {
                    self.with_component(id, |c, ctx| c.on_shutdown(ctx));
                }
                self.advance_shutdown();
            }
            RunState::Draining { until } => {
                if self.components.iter().all(|c| c.is_drained()) {
                    self.core.state = RunState::Stopped;
                } else if self.core.now >= until {
                    log::warn!("drain time ran out; stopping with work in flight");
                    self.core.state = RunState::Stopped;
                }
            }
            RunState::Running | RunState::Stopped => {}
        }
    }

    /// Runs one callback of `target`'s component, timed for the turn's log line if it is on.
    fn call(&mut self, target: Target, timer: bool, f: impl FnOnce(&mut dyn Component, &mut Ctx)) {
        let started = self.core.turn.timed.then(Timestamp::now);
        self.with_component(target.component, f);
        if let Some(started) = started {
            let took = Timestamp::now().saturating_since(started);
            self.core.turn.ran(target, timer, took);
        }
    }

    /// Calls one component with a `Ctx` (the loop's core and the components are apart, so
    /// both can be borrowed).
    fn with_component(&mut self, id: u32, f: impl FnOnce(&mut dyn Component, &mut Ctx)) {
        let mut ctx = Ctx {
            core: &mut self.core,
            component: id,
        };
        f(self.components[id as usize].as_mut(), &mut ctx);
    }
}

/// The calling thread's CPU time (user and system), or zero if the kernel cannot say.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
