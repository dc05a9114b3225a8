//! A component's handles on the loop for one source: the [`Registration`] that routes its
//! readiness, and the two things a driver keeps in step with a sans-IO core: one timer at the
//! deadline the core wants ([`TimerSlot`]) and write interest only while output waits
//! ([`WriteInterest`]).

use mio::event::Source;
use mio::{Interest, Token};

use super::Ctx;
use crate::time::Timestamp;
use crate::timer::TimerId;

/// A source registered with [`Ctx::register`]. The loop routes its readiness to the component
/// that registered it, with the key chosen there, so no component maps tokens itself. Not
/// `Clone`: [`Ctx::deregister`] takes it, so a source is deregistered at most once.
#[derive(Debug, PartialEq, Eq)]
pub struct Registration {
    pub(super) token: Token,
}

/// One reactor timer kept at the deadline a core wants (its `poll_timeout`), re-armed only
/// when that deadline changes, as quinn's drivers do.
#[derive(Debug, Default)]
pub struct TimerSlot(Option<(TimerId, Timestamp)>);

impl TimerSlot {
    /// Arms, moves or cancels the timer so that it fires at `wanted` with `key`.
    pub fn set(&mut self, ctx: &mut Ctx<'_>, wanted: Option<Timestamp>, key: u32) {
        if self.0.map(|(_, at)| at) == wanted {
            return;
        }
        self.cancel(ctx);
        self.0 = wanted.map(|at| (ctx.set_timer(at, key), at));
    }

    /// Like [`set`](Self::set) for a core whose timeout handler may run early (it then does
    /// nothing and reports its next deadline): a timer already armed no later than `wanted`
    /// stays. A deadline that keeps moving later, as when each answer cancels the oldest
    /// pending timer, then costs one early wake-up per old deadline instead of a re-arm (and
    /// a timerfd system call) per batch of input.
    pub fn set_no_later(&mut self, ctx: &mut Ctx<'_>, wanted: Option<Timestamp>, key: u32) {
        let armed_earlier = self.0.is_some_and(|(_, at)| wanted.is_none_or(|w| at <= w));
        if !armed_earlier {
            self.set(ctx, wanted, key);
        }
    }

    /// Whether `id` is this slot's timer firing (the slot is then empty); false for a stale id.
    pub fn fired(&mut self, id: TimerId) -> bool {
        let ours = self.0.is_some_and(|(t, _)| t == id);
        if ours {
            self.0 = None;
        }
        ours
    }

    /// Cancels the timer, if armed; the slot is then empty.
    pub fn cancel(&mut self, ctx: &mut Ctx<'_>) {
        if let Some((id, _)) = self.0.take() {
            ctx.cancel_timer(id);
        }
    }
}

/// A stream registered READABLE, plus WRITABLE only while output waits for the socket (so an
/// idle connection causes no wake-ups).
#[derive(Debug, Default)]
pub struct WriteInterest(bool);

impl WriteInterest {
    /// The interest to register with first: WRITABLE too if `wants_write` (e.g. to learn that
    /// a non-blocking connect completed).
    pub fn initial(wants_write: bool) -> (Self, Interest) {
        (WriteInterest(wants_write), interest(wants_write))
    }

    /// Re-registers `source` if whether it `wants_write` changed.
    pub fn update<S: Source + ?Sized>(
        &mut self,
        ctx: &mut Ctx<'_>,
        source: &mut S,
        registration: &Registration,
        wants_write: bool,
    ) {
        if wants_write == self.0 {
            return;
        }
        self.0 = wants_write;
        let _ = ctx.reregister(source, registration, interest(wants_write));
    }
}

fn interest(wants_write: bool) -> Interest {
    match wants_write {
        true => Interest::READABLE | Interest::WRITABLE,
        false => Interest::READABLE,
    }
}
