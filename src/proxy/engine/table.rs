//! The live exchanges: a slab named by generation-checked keys, and one wheel timer per
//! exchange at its earliest deadline (as quinn-proto's `TimerTable`, one level up). A key
//! kept by a map or a timer after its exchange left names nothing: every lookup checks the
//! generation, so a stale key can reach no other exchange that took the slot.

use slab::Slab;

use crate::time::Timestamp;
use crate::timer::TimerWheel;

use super::exchange::{Exchange, ExchangeKey};

/// See the module docs.
pub(super) struct Exchanges {
    slab: Slab<Exchange>,
    /// The next exchange's generation: never 0, wraps after 2^32 exchanges.
    next_generation: u32,
    /// One timer per exchange with a deadline, at its earliest (see `Exchange::next_deadline`).
    timers: TimerWheel<ExchangeKey>,
}

impl Exchanges {
    pub(super) fn new() -> Self {
        Exchanges {
            slab: Slab::new(),
            next_generation: 1,
            timers: TimerWheel::new(),
        }
    }

    /// Live exchanges.
    pub(super) fn len(&self) -> usize {
        self.slab.len()
    }

    /// Armed wheel timers (at most one per exchange).
    pub(super) fn pending_timers(&self) -> usize {
        self.timers.len()
    }

    /// The earliest armed deadline.
    pub(super) fn next_deadline(&self) -> Option<Timestamp> {
        self.timers.next_deadline()
    }

    #[inline]
    pub(super) fn get(&self, key: ExchangeKey) -> Option<&Exchange> {
        (self.slab.get(key.index as usize)).filter(|x| x.generation == key.generation)
    }

    #[inline]
    pub(super) fn get_mut(&mut self, key: ExchangeKey) -> Option<&mut Exchange> {
        (self.slab.get_mut(key.index as usize)).filter(|x| x.generation == key.generation)
    }

    /// The exchange in slot `index`, whatever its generation, and its key: for a token of
    /// ours, which starts with the slot index (its other bytes tell whether it is this one).
    pub(super) fn at_index(&self, index: u32) -> Option<(ExchangeKey, &Exchange)> {
        let x = self.slab.get(index as usize)?;
        let key = ExchangeKey {
            index,
            generation: x.generation,
        };
        Some((key, x))
    }

    /// Adds the exchange `make` builds with the generation it is given.
    pub(super) fn insert(&mut self, make: impl FnOnce(u32) -> Exchange) -> ExchangeKey {
        let generation = self.next_generation;
        self.next_generation = generation.wrapping_add(1).max(1);
        let index = self.slab.insert(make(generation));
        let index = u32::try_from(index).expect("fewer than 2^32 exchanges");
        ExchangeKey { index, generation }
    }

    /// Takes the exchange out, with its wheel timer.
    pub(super) fn remove(&mut self, key: ExchangeKey) -> Option<Exchange> {
        self.get(key)?;
        let x = self.slab.remove(key.index as usize);
        if let Some((id, _)) = x.wheel {
            self.timers.cancel(id);
        }
        Some(x)
    }

    /// Changes exchange `key` (its deadlines, say) and keeps its wheel timer in step.
    #[inline]
    pub(super) fn update(&mut self, key: ExchangeKey, change: impl FnOnce(&mut Exchange)) {
        let x = self.slab.get_mut(key.index as usize);
        if let Some(x) = x.filter(|x| x.generation == key.generation) {
            change(x);
            rearm(&mut self.timers, key, x);
        }
    }

    /// Keeps the exchange's wheel timer no later than its earliest deadline: one armed earlier
    /// stays (it fires and finds nothing due); with no deadline left it goes.
    #[inline]
    pub(super) fn rearm(&mut self, key: ExchangeKey) {
        let x = self.slab.get_mut(key.index as usize);
        if let Some(x) = x.filter(|x| x.generation == key.generation) {
            rearm(&mut self.timers, key, x);
        }
    }

    /// The next exchange whose wheel timer is due at `now`, with that timer disarmed; `None`
    /// in the key's place for a timer whose exchange has gone.
    pub(super) fn poll_due(&mut self, now: Timestamp) -> Option<Option<ExchangeKey>> {
        let key = self.timers.poll(now)?.value;
        Some(self.get_mut(key).map(|x| {
            x.wheel = None;
            key
        }))
    }

    /// Every live exchange, with its key.
    pub(super) fn iter(&self) -> impl Iterator<Item = (ExchangeKey, &Exchange)> + '_ {
        let key = |i: usize, x: &Exchange| ExchangeKey {
            index: i as u32,
            generation: x.generation,
        };
        (self.slab.iter()).map(move |(i, x)| (key(i, x), x))
    }
}

/// See [`Exchanges::rearm`]. Run at every change of a deadline: the common case (a timer
/// already armed no later) costs a comparison.
#[inline]
fn rearm(timers: &mut TimerWheel<ExchangeKey>, key: ExchangeKey, x: &mut Exchange) {
    let next = x.next_deadline();
    match (x.wheel, next) {
        (Some((_, armed)), Some(next)) if armed <= next => {}
        (None, None) => {}
        (armed, next) => {
            if let Some((id, _)) = armed {
                timers.cancel(id);
            }
            x.wheel = next.map(|at| (timers.insert(at, key), at));
        }
    }
}
