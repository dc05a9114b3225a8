//! The client's connection backoff (doc/connection-backoff.md) as a sans-IO connector:
//!
//! ```text
//! current_backoff = INITIAL_BACKOFF
//! current_deadline = now + INITIAL_BACKOFF
//! while TryConnect(max(current_deadline, now + MIN_CONNECT_TIMEOUT)) != SUCCESS:
//!     SleepUntil(current_deadline)
//!     current_backoff = min(current_backoff * MULTIPLIER, MAX_BACKOFF)
//!     current_deadline = now + current_backoff + UniformRandom(-JITTER*current_backoff, JITTER*current_backoff)
//! ```
//!
//! Attempts are spaced start to start: an attempt that fails late eats into the sleep, and one
//! that hangs is abandoned at its deadline, after which the next one starts at once. An attempt
//! succeeds when the server's HTTP/2 SETTINGS arrives; that resets the backoff.
//!
//! The driver owns the socket and the timer: it asks [`Backoff::poll`] what to do, reports
//! what happened with the `on_*` methods, and sleeps until [`Backoff::poll_timeout`].

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::time::Timestamp;

/// The algorithm's parameters; [`Default`] is doc/connection-backoff.md's values for gRPC.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffConfig {
    /// Sleep after the first failure (1 s).
    pub initial_backoff: Duration,
    /// Growth of the backoff per failure (1.6).
    pub multiplier: f64,
    /// Each backoff after the first is scaled by a uniform factor in `1 ± jitter` (0.2).
    pub jitter: f64,
    /// Upper bound on the backoff before jitter (120 s).
    pub max_backoff: Duration,
    /// The least time an attempt is given before it is abandoned (20 s).
    pub min_connect_timeout: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial_backoff: Duration::from_secs(1),
            multiplier: 1.6,
            jitter: 0.2,
            max_backoff: Duration::from_secs(120),
            min_connect_timeout: Duration::from_secs(20),
        }
    }
}

impl BackoffConfig {
    /// The defaults with the interop test's `max_reconnect_backoff_ms` (0 or less: 120 s).
    pub fn with_max_backoff_ms(max_reconnect_backoff_ms: i32) -> Self {
        let mut config = BackoffConfig::default();
        if let Ok(ms @ 1..) = u64::try_from(max_reconnect_backoff_ms) {
            config.max_backoff = Duration::from_millis(ms);
        }
        config
    }
}

/// What the driver does next: the one step type of the client's connector, whether driven
/// bare ([`Backoff::poll`]) or bounded by the test's duration ([`RetryRun::poll`]).
///
/// [`RetryRun::poll`]: super::retry::RetryRun::poll
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Open one connection for attempt `attempt` now; give up on it at `deadline`.
    Connect {
        /// 1-based attempt number, as in [`AttemptRecord::attempt`].
        attempt: u32,
        /// When to give up on this attempt.
        deadline: Timestamp,
    },
    /// Attempt `attempt` reached its deadline: close its connection (already counted as failed).
    GiveUp {
        /// The attempt to abandon.
        attempt: u32,
    },
    /// Nothing to do until this instant (or until the current attempt reports).
    Wait(Timestamp),
    /// SETTINGS received: nothing to do until [`Backoff::on_disconnected`]. A bounded run
    /// says `Wait` until its end instead.
    Connected,
    /// The test duration is over: close any attempt still open (a bounded run only; every
    /// later call says `Done` too).
    Done,
}

/// One attempt in the connector's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptRecord {
    /// 1-based, counted over the connector's whole life.
    pub attempt: u32,
    /// When the algorithm wanted it to start.
    pub planned_start: Timestamp,
    /// When the driver actually started it (its `poll` call).
    pub actual_start: Timestamp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// The next attempt starts at `at`; `after_failure` grows the backoff first.
    Waiting {
        at: Timestamp,
        after_failure: bool,
    },
    Connecting {
        attempt: u32,
        deadline: Timestamp,
    },
    Established,
}

/// The backoff connector for one target address.
#[derive(Debug)]
pub struct Backoff {
    config: BackoffConfig,
    rng: StdRng,
    state: State,
    current_backoff: Duration,
    current_deadline: Timestamp,
    attempts: u32,
    log: Vec<AttemptRecord>,
}

impl Backoff {
    /// A connector whose first attempt is due at `now`. `rng_seed` makes the jitter reproducible
    /// (StdRng, the same sequence on every platform for a given rand version).
    pub fn new(config: BackoffConfig, rng_seed: u64, now: Timestamp) -> Self {
        let mut backoff = Backoff {
            config,
            rng: StdRng::seed_from_u64(rng_seed),
            state: State::Established,
            current_backoff: config.initial_backoff,
            current_deadline: now,
            attempts: 0,
            log: Vec::new(),
        };
        backoff.restart(now);
        backoff
    }

    /// What to do at `now`. Starts the next attempt when it is due (so call it promptly when
    /// [`Step::Wait`]'s instant comes: the attempt's start is the time of this call), and gives
    /// up on one whose deadline has passed; call it again after acting on either.
    pub fn poll(&mut self, now: Timestamp) -> Step {
        match self.state {
            State::Waiting { at, after_failure } if now >= at => {
                self.start_attempt(now, at, after_failure)
            }
            State::Waiting { at, .. } => Step::Wait(at),
            State::Connecting { attempt, deadline } if now >= deadline => {
                self.on_attempt_timeout(now);
                Step::GiveUp { attempt }
            }
            State::Connecting { deadline, .. } => Step::Wait(deadline),
            State::Established => Step::Connected,
        }
    }

    /// When the driver must next call in: the next attempt's start or the current one's deadline.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        match self.state {
            State::Waiting { at, .. } => Some(at),
            State::Connecting { deadline, .. } => Some(deadline),
            State::Established => None,
        }
    }

    /// The attempt ended without the server's SETTINGS (refused, reset, closed, TLS failure):
    /// sleep until `current_deadline`, which may already have passed.
    pub fn on_connect_failed(&mut self, _now: Timestamp) {
        if let State::Connecting { .. } = self.state {
            self.state = State::Waiting {
                at: self.current_deadline,
                after_failure: true,
            };
        }
    }

    /// The attempt's deadline passed: abandon it like a failure. Early calls are ignored.
    pub fn on_attempt_timeout(&mut self, now: Timestamp) {
        if let State::Connecting { deadline, .. } = self.state {
            if now >= deadline {
                self.on_connect_failed(now);
            }
        }
    }

    /// The transport is up (TCP connected, TLS done). Not yet success: that takes SETTINGS, and
    /// the attempt's deadline still applies.
    pub fn on_connected(&mut self, _now: Timestamp) {}

    /// The server's SETTINGS arrived: the attempt succeeded and the backoff is reset.
    pub fn on_settings_received(&mut self, _now: Timestamp) {
        if let State::Connecting { .. } = self.state {
            self.state = State::Established;
            self.current_backoff = self.config.initial_backoff;
        }
    }

    /// The connection closed. After success this starts a fresh run now, from INITIAL_BACKOFF;
    /// during an attempt it is that attempt's failure.
    pub fn on_disconnected(&mut self, now: Timestamp) {
        match self.state {
            State::Established => self.restart(now),
            State::Connecting { .. } => self.on_connect_failed(now),
            State::Waiting { .. } => {}
        }
    }

    /// Every attempt started so far, oldest first.
    pub fn attempts(&self) -> &[AttemptRecord] {
        &self.log
    }

    /// The backoff before jitter that the latest attempt was spaced by.
    pub fn current_backoff(&self) -> Duration {
        self.current_backoff
    }

    fn restart(&mut self, now: Timestamp) {
        self.current_backoff = self.config.initial_backoff;
        self.current_deadline = now + self.config.initial_backoff;
        self.state = State::Waiting {
            at: now,
            after_failure: false,
        };
    }

    fn start_attempt(&mut self, now: Timestamp, planned: Timestamp, after_failure: bool) -> Step {
        if after_failure {
            self.grow(now);
        }
        self.attempts += 1;
        let attempt = self.attempts;
        self.log.push(AttemptRecord {
            attempt,
            planned_start: planned,
            actual_start: now,
        });
        let deadline = self
            .current_deadline
            .max(now + self.config.min_connect_timeout);
        self.state = State::Connecting { attempt, deadline };
        Step::Connect { attempt, deadline }
    }

    /// `current_backoff = min(current_backoff * MULTIPLIER, MAX_BACKOFF)`, then the jittered
    /// `current_deadline` from `now` (the end of the sleep).
    fn grow(&mut self, now: Timestamp) {
        let grown = self.current_backoff.as_secs_f64() * self.config.multiplier;
        self.current_backoff = secs(grown).min(self.config.max_backoff);
        let backoff = self.current_backoff.as_secs_f64();
        let spread = self.config.jitter.clamp(0.0, 1.0) * backoff;
        let offset = self.rng.random_range(-spread..=spread);
        self.current_deadline = now + secs(backoff + offset);
    }
}

/// Seconds to a Duration, saturating instead of panicking on overflow, NaN or negatives.
fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests;
