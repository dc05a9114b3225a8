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
//! root has a complete example. [`TimerSlot`] and [`WriteInterest`] help a component keep its
//! timer and write interest in step with a sans-IO core.
//!
//! One iteration of [`Reactor::run`]:
//! 1. ask the wheel for its earliest deadline and arm the wake source for it (a `timerfd` re-armed
//!    only when that deadline changes, or the `epoll_wait` timeout; see [`WakeMode`]);
//! 2. wait in `Poll::poll`, then read the clock;
//! 3. hand each readiness event to the component that registered its token (sources are
//!    edge-triggered: a component must read or accept until `WouldBlock`);
//! 4. read the clock again and fire every due timer, earliest first.
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

mod conn;
mod signals;
mod wake;

use std::any::Any;
use std::io;
use std::time::Duration;

use mio::event::Source;
use mio::{Events, Interest, Poll, Registry, Token};
use slab::Slab;

use crate::metrics::{LatencyHistogram, MetricsWriter};
use crate::time::Timestamp;
use crate::timer::{TimerId, TimerWheel};
pub use conn::{TimerSlot, WriteInterest};
use signals::Signals;
pub use wake::WakeMode;
use wake::Waker;

const WAKE_TOKEN: Token = Token(usize::MAX - 1);
const SIGNAL_TOKEN: Token = Token(usize::MAX - 2);

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
    /// A source this component registered under `token` became ready.
    fn on_ready(&mut self, ctx: &mut Ctx<'_>, token: Token, ready: Readiness);
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
    /// Describes this component's counters and gauges for a metrics scrape.
    fn write_metrics(&self, _out: &mut MetricsWriter) {}
}

/// Reactor settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// How the loop sleeps until the next timer: `timerfd` precision or the `epoll_wait` timeout.
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

/// A component's timer: who armed it and the component's own key.
#[derive(Clone, Copy, Debug)]
struct TimerTarget {
    component: u32,
    key: u32,
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
    /// Token -> owning component. The token is the slab key.
    sources: Slab<u32>,
    timers: TimerWheel<TimerTarget>,
    now: Timestamp,
    state: RunState,
    /// How late timers were dispatched (now - deadline), for metrics.
    lateness: LatencyHistogram,
}

/// A component's handle on the loop during one callback.
pub struct Ctx<'a> {
    core: &'a mut Core,
    component: u32,
    /// The other components (the one being called is taken out while it runs).
    others: &'a [Option<Box<dyn Component>>],
}

impl Ctx<'_> {
    /// The loop's notion of now: read right after the wake-up (and again before timers fire).
    pub fn now(&self) -> Timestamp {
        self.core.now
    }

    /// Registers a source; its events will go to this component under the returned token.
    pub fn register<S: Source + ?Sized>(
        &mut self,
        source: &mut S,
        interest: Interest,
    ) -> io::Result<Token> {
        let entry = self.core.sources.vacant_entry();
        let token = Token(entry.key());
        self.core.registry.register(source, token, interest)?;
        entry.insert(self.component);
        Ok(token)
    }

    /// Changes the interest of a source this component registered.
    pub fn reregister<S: Source + ?Sized>(
        &mut self,
        source: &mut S,
        token: Token,
        interest: Interest,
    ) -> io::Result<()> {
        self.core.registry.reregister(source, token, interest)
    }

    /// Removes a source; its token may be reused by the next registration.
    pub fn deregister<S: Source + ?Sized>(&mut self, source: &mut S, token: Token) {
        // Deregistering a source that the kernel already dropped (closed fd) can fail; the
        // routing entry must go regardless.
        let _ = self.core.registry.deregister(source);
        if self.core.sources.get(token.0) == Some(&self.component) {
            self.core.sources.remove(token.0);
        }
    }

    /// Arms a timer; [`Component::on_timer`] receives `key` at or after `deadline`.
    pub fn set_timer(&mut self, deadline: Timestamp, key: u32) -> TimerId {
        let target = TimerTarget {
            component: self.component,
            key,
        };
        self.core.timers.insert(deadline, target)
    }

    /// Cancels a timer; a stale handle (already fired or cancelled) is a harmless no-op.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        self.core.timers.cancel(id).is_some()
    }

    /// Live timers in the loop's wheel (for metrics).
    pub fn timer_count(&self) -> usize {
        self.core.timers.len()
    }

    /// Collects the loop's own metrics and every other component's into `out`.
    pub fn write_metrics(&self, out: &mut MetricsWriter) {
        out.gauge(
            "backoffd_timer_wheel_timers",
            "Timers pending in the reactor's wheel.",
            self.core.timers.len() as f64,
        );
        self.core.lateness.write(
            out,
            "backoffd_timer_lateness_seconds",
            "How late reactor timers were dispatched (dispatch time minus deadline).",
        );
        for c in self.others.iter().flatten() {
            c.write_metrics(out);
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
    /// `None` only while that component is being called.
    components: Vec<Option<Box<dyn Component>>>,
    waker: Waker,
    signals: Option<Signals>,
    drain_timeout: Duration,
}

impl Reactor {
    /// Creates the `Poll`, the wake source and (if `config.signals`) the signalfd; no components.
    pub fn new(config: Config) -> io::Result<Self> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = Waker::new(config.wake, &registry, WAKE_TOKEN)?;
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
                timers: TimerWheel::new(),
                now: Timestamp::now(),
                state: RunState::Running,
                lateness: LatencyHistogram::default(),
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
            others: &self.components,
        };
        component.on_start(&mut ctx)?;
        self.components.push(Some(component));
        Ok(id as usize)
    }

    /// A component by index and type, e.g. to read a report after [`run`](Self::run) returned.
    pub fn component<T: Component>(&self, index: usize) -> Option<&T> {
        let c: &dyn Component = self.components.get(index)?.as_deref()?;
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
            let timeout = self.waker.prepare(self.next_wake(), self.core.now)?;
            if let Err(e) = self.poll.poll(&mut self.events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            self.core.now = Timestamp::now();
            self.dispatch_io();
            self.core.now = Timestamp::now();
            self.fire_timers();
        }
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
                    // An event for a token deregistered earlier in this batch is dropped; one
                    // whose token was already reused is a spurious wake-up, which edge-triggered
                    // handlers tolerate (they read until WouldBlock).
                    if let Some(&owner) = self.core.sources.get(token.0) {
                        self.with_component(owner, |c, ctx| c.on_ready(ctx, token, ready));
                    }
                }
            }
        }
        self.events = events;
    }

    fn fire_timers(&mut self) {
        while let Some(expired) = self.core.timers.poll(self.core.now) {
            let late = self.core.now.saturating_since(expired.deadline);
            self.core.lateness.record_nanos(late.as_nanos() as u64);
            let TimerTarget { component, key } = expired.value;
            self.with_component(component, |c, ctx| c.on_timer(ctx, expired.id, key));
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
                if self.components.iter().flatten().all(|c| c.is_drained()) {
                    self.core.state = RunState::Stopped;
                } else if self.core.now >= until {
                    log::warn!("drain time ran out; stopping with work in flight");
                    self.core.state = RunState::Stopped;
                }
            }
            RunState::Running | RunState::Stopped => {}
        }
    }

    /// Calls one component with a `Ctx`; it is taken out of the list meanwhile, so the `Ctx`
    /// can show it the others (for metrics) without aliasing.
    fn with_component<R: Default>(
        &mut self,
        id: u32,
        f: impl FnOnce(&mut dyn Component, &mut Ctx) -> R,
    ) -> R {
        let Some(mut component) = self.components[id as usize].take() else {
            return R::default();
        };
        let mut ctx = Ctx {
            core: &mut self.core,
            component: id,
            others: &self.components,
        };
        let result = f(component.as_mut(), &mut ctx);
        self.components[id as usize] = Some(component);
        result
    }
}
