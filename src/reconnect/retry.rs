//! The client's retry phase, sans-IO: the [`Backoff`] connector run for the test's duration.
//!
//! The reference client (test/cpp/interop/reconnect_interop_client.cc) issues one wait-for-ready
//! RPC on the retry channel with a 540 s deadline and lets the channel reconnect until it
//! expires; whatever attempt is in flight then is abandoned. [`RetryRun`] is that: it says when
//! to start an attempt and with which deadline, when an attempt has hung too long, and when the
//! phase is over. The driver owns the sockets and the timer and reports how attempts end.

use std::time::Duration;

use super::backoff::{AttemptRecord, Backoff, BackoffConfig, Step};
use crate::time::Timestamp;

/// The retry phase of one test run. See the module docs.
#[derive(Debug)]
pub struct RetryRun {
    backoff: Backoff,
    started: Timestamp,
    ends_at: Timestamp,
    done: bool,
}

impl RetryRun {
    /// A run whose first attempt is due at `now` and which ends `duration` later.
    pub fn new(config: BackoffConfig, seed: u64, now: Timestamp, duration: Duration) -> Self {
        RetryRun {
            backoff: Backoff::new(config, seed, now),
            started: now,
            ends_at: now + duration,
            done: false,
        }
    }

    /// The next step at `now`; call it again after acting on `Connect` or `GiveUp`.
    pub fn poll(&mut self, now: Timestamp) -> Step {
        if self.done || now >= self.ends_at {
            self.done = true;
            return Step::Done;
        }
        match self.backoff.poll(now) {
            Step::Wait(at) => Step::Wait(at.min(self.ends_at)),
            Step::Connected => Step::Wait(self.ends_at),
            step => step,
        }
    }

    /// When [`poll`](Self::poll) must next be called, if nothing happens before.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        match self.done {
            true => None,
            false => Some(
                self.backoff
                    .poll_timeout()
                    .map_or(self.ends_at, |t| t.min(self.ends_at)),
            ),
        }
    }

    /// The attempt failed before the server's SETTINGS (refused, reset, closed, TLS error).
    pub fn on_failed(&mut self, now: Timestamp) {
        self.backoff.on_connect_failed(now);
    }

    /// TCP and TLS are up; the attempt still needs the server's SETTINGS.
    pub fn on_transport_up(&mut self, now: Timestamp) {
        self.backoff.on_connected(now);
    }

    /// The server's HTTP/2 SETTINGS arrived: success, the backoff goes back to INITIAL_BACKOFF.
    pub fn on_settings(&mut self, now: Timestamp) {
        self.backoff.on_settings_received(now);
    }

    /// An established connection closed: reconnect at once with a fresh backoff.
    pub fn on_closed(&mut self, now: Timestamp) {
        self.backoff.on_disconnected(now);
    }

    /// Whether the test duration is over ([`Step::Done`] was returned).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// When the retry phase began.
    pub fn started(&self) -> Timestamp {
        self.started
    }

    /// Every attempt started so far, oldest first.
    pub fn attempts(&self) -> &[AttemptRecord] {
        self.backoff.attempts()
    }

    /// The log line for an attempt that just started: planned and actual start relative to the
    /// run's start, how late, and when it will be given up.
    pub fn describe_start(&self, record: &AttemptRecord, deadline: Timestamp) -> String {
        let late = record.actual_start.saturating_since(record.planned_start);
        format!(
            "attempt {}: planned at +{:.3}s, started at +{:.3}s ({:.1} ms late), give up at +{:.3}s",
            record.attempt,
            self.offset(record.planned_start),
            self.offset(record.actual_start),
            late.as_secs_f64() * 1e3,
            self.offset(deadline),
        )
    }

    /// Seconds since the run started.
    pub fn offset(&self, t: Timestamp) -> f64 {
        t.saturating_since(self.started).as_secs_f64()
    }
}

#[cfg(test)]
mod tests;
