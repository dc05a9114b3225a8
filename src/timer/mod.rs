//! Timers: the hashed hierarchical timing wheel every component's deadlines live in.
//!
//! The wheel is sans-IO: it never reads a clock. Callers pass `now` to [`TimerWheel::poll`] and ask
//! [`TimerWheel::next_deadline`] when to come back; the reactor turns that answer into a `timerfd`
//! (or `epoll_wait` timeout) and protocol cores use their own wheels in virtual time.

mod wheel;

pub use wheel::{Expired, TimerId, TimerWheel, LEVELS, TICK_NANOS};
