//! The lines the driver logs for the engine's [`ProxyEvent`]s: each kind at its level, and the
//! kinds that repeat under load (give-ups, refusals for want of a Message ID, the observation
//! limit) summed up at most once per interval, so an overload costs a line every ten seconds,
//! not one per request. Sans-IO: each line goes to the driver's `emit`, which logs it.

use std::collections::HashMap;
use std::fmt::Arguments;
use std::net::SocketAddr;
use std::time::Duration;

use log::Level::{Debug, Info, Warn};

use super::events::{ProxyEvent, Source};
use crate::time::Timestamp;

/// Shortest interval between two lines of one repeating kind.
const INTERVAL: Duration = Duration::from_secs(10);

/// Occurrences of one kind since its last line, and when that was.
#[derive(Debug, Default)]
struct Tally {
    count: u64,
    logged: Option<Timestamp>,
}

impl Tally {
    /// Counts one; returns how many to report when a line is due.
    fn due(&mut self, now: Timestamp) -> Option<u64> {
        self.count += 1;
        if self.logged.is_some_and(|at| now < at + INTERVAL) {
            return None;
        }
        self.logged = Some(now);
        Some(std::mem::take(&mut self.count))
    }
}

/// What the driver remembers to keep the log short.
#[derive(Debug, Default)]
pub(in crate::proxy) struct Report {
    gave_up: Tally,
    no_mid: HashMap<SocketAddr, Tally>,
    observation_limit: Tally,
    observation_share: Tally,
}

impl Report {
    /// Hands `emit` the line `event` deserves, if any, at its level; `bound` is
    /// `--max-upstream-endpoints`, for the hint.
    pub(in crate::proxy) fn log(
        &mut self,
        now: Timestamp,
        event: ProxyEvent,
        bound: usize,
        mut emit: impl FnMut(log::Level, Arguments<'_>),
    ) {
        match event {
            ProxyEvent::GaveUp {
                upstream,
                client,
                attempts,
                code,
                why,
            } => {
                emit(Debug, format_args!("gave up on {upstream} for {client} after {attempts} attempt(s): {why}; answered {code}"));
                if let Some(n) = self.gave_up.due(now) {
                    emit(Info, format_args!("gave up on {n} request(s) upstream since the last such line; the latest: {upstream} for {client} after {attempts} attempt(s): {why}; answered {code}"));
                }
            }
            ProxyEvent::NoMessageId { upstream, at_bound } => {
                let Some(n) = self.no_mid.entry(upstream).or_default().due(now) else {
                    return;
                };
                match at_bound {
                    true => emit(Warn, format_args!("upstream {upstream}: the Message IDs of all {bound} endpoints (--max-upstream-endpoints) are reserved; {n} request(s) answered 5.03 since the last warning")),
                    false => emit(Warn, format_args!("upstream {upstream}: no endpoint socket could be opened; {n} request(s) answered 5.03 since the last warning")),
                }
            }
            ProxyEvent::EarlyEviction => emit(Warn, format_args!("--max-cached is too small for this request rate: evicting answers clients may still retransmit for (size it to >= 100 s of answers)")),
            ProxyEvent::ClientNeverAcked { client, mid } => {
                emit(Debug, format_args!("client {client} never acknowledged answer MID {mid}; gave up on it"))
            }
            ProxyEvent::ObservationStale { client } => {
                emit(Debug, format_args!("the observation of {client} went stale"))
            }
            ProxyEvent::ObserverGone { client, why } => {
                emit(Debug, format_args!("observer {client} gone ({why:?}): its observation ended"))
            }
            ProxyEvent::ObservationLimit { client } => {
                if let Some(n) = self.observation_limit.due(now) {
                    emit(Info, format_args!("observation limit (--max-observations) reached: {n} registration(s) answered without registering since the last such line, the latest from {client}"));
                }
            }
            ProxyEvent::ObservationShare { client } => {
                if let Some(n) = self.observation_share.due(now) {
                    emit(Info, format_args!("observation share of one source (--max-observations-per-source) reached: {n} registration(s) answered without registering since the last such line, the latest from {client}"));
                }
            }
            ProxyEvent::Malformed { from, error } => match from {
                Source::Client(addr) => emit(Debug, format_args!("malformed datagram from client {addr}: {error}")),
                Source::Upstream(id) => emit(Debug, format_args!("malformed datagram from upstream endpoint {}: {error}", id.0)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeating_kind_is_reported_at_most_once_per_interval_with_its_count() {
        let at = |ms: u64| Timestamp::from_nanos(ms * 1_000_000);
        let mut t = Tally::default();
        assert_eq!(t.due(at(0)), Some(1));
        for ms in 1..=4 {
            assert_eq!(t.due(at(ms * 1000)), None);
        }
        assert_eq!(t.due(at(9_999)), None);
        assert_eq!(t.due(at(10_000)), Some(6));
        assert_eq!(t.due(at(10_001)), None);
    }
}
