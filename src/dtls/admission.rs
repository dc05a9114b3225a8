//! Who gets a session when a cookie-verified ClientHello arrives, and whom it costs.
//!
//! A valid cookie proves only that the sender receives at its address (RFC 6347 §4.2.1),
//! not that it holds a key: anyone with a few addresses can open sessions that never finish,
//! and a table that is full of them and refuses the next hello shuts every real client out.
//! So the table is bounded four ways, each per [`SourcePrefix`] as well as in total: all
//! sessions, and the sessions still handshaking (a smaller bound, since only they can be
//! had without a key). At a bound, **the oldest session still handshaking makes room**,
//! taken from the newcomer's own source when its source's share is what is full: an
//! attacker's oldest handshakes go first, and a real client, which finishes in a few round
//! trips, stays the newest for as long as it needs. An established session is never ended
//! for a newcomer; with only those at a bound, the newcomer is refused (and its client
//! tries again, a new hello on its retransmission timer, §4.2.4).
//!
//! **Every handshake has its chance first.** A handshake younger than `handshake_grace`
//! (1 s) is not ended for a newcomer, which is refused instead. Without it, each hello an
//! attacker repeats from its own full share would cost a whole new session's work (the
//! library's state and the server's flight) for one ended, as fast as it can send; with
//! it, a source opens at most its share of sessions per second, and the rest cost a cookie
//! check. A refused client's next hello, one retransmission timer later, finds the oldest
//! past their grace.
//!
//! This is the pattern of the stream listeners, which close the oldest connection without
//! a CSM for a new one.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::config::SessionLimits;
use crate::source_prefix::SourcePrefix;
use crate::time::Timestamp;

/// Which bound a newcomer met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// All sessions (`--dtls-max-sessions`).
    Sessions,
    /// Sessions still handshaking (`--dtls-max-handshakes`).
    Handshakes,
    /// One source's sessions (`--dtls-max-sessions-per-source`).
    SourceSessions,
    /// One source's sessions still handshaking (`--dtls-max-handshakes-per-source`).
    SourceHandshakes,
}

/// What to do with a newcomer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Open its session.
    Admit,
    /// End the handshaking session at this slab index first, then ask again.
    Evict(usize, Bound),
    /// Refuse it: established sessions, or handshakes still in their grace, fill the bound.
    Refuse(Bound),
}

/// A handshaking session in age order: when it was opened, a counter for ties, its slab
/// index.
type Aged = (Timestamp, u64, usize);

/// When a session was opened, and a counter that orders sessions opened at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Age(Timestamp, u64);

/// One source's share.
#[derive(Default)]
struct Share {
    sessions: usize,
    handshaking: BTreeSet<Aged>,
}

/// The counts the bounds are checked against.
#[derive(Default)]
pub struct Admission {
    sessions: usize,
    handshaking: BTreeSet<Aged>,
    shares: BTreeMap<SourcePrefix, Share>,
    next_age: u64,
}

impl Admission {
    /// What a newcomer from `source` gets under `limits` at `now`.
    pub fn verdict(&self, limits: &SessionLimits, source: SourcePrefix, now: Timestamp) -> Verdict {
        let share = self.shares.get(&source);
        let (own, own_handshaking) = share.map_or((0, 0), |s| (s.sessions, s.handshaking.len()));
        let own_oldest = share.and_then(|s| s.handshaking.first());
        let oldest = self.handshaking.first();
        let (bound, victim) = if own >= limits.max_sessions_per_source {
            (Bound::SourceSessions, own_oldest)
        } else if own_handshaking >= limits.max_handshakes_per_source {
            (Bound::SourceHandshakes, own_oldest)
        } else if self.sessions >= limits.max_sessions {
            (Bound::Sessions, oldest)
        } else if self.handshaking.len() >= limits.max_handshakes {
            (Bound::Handshakes, oldest)
        } else {
            return Verdict::Admit;
        };
        match victim {
            Some(&(opened, _, index)) if now >= opened + limits.handshake_grace => {
                Verdict::Evict(index, bound)
            }
            _ => Verdict::Refuse(bound),
        }
    }

    /// A session opened at slab `index` for `source` at `now`; returns its age, which the
    /// session keeps for [`established`](Self::established) and [`removed`](Self::removed).
    pub fn opened(&mut self, index: usize, source: SourcePrefix, now: Timestamp) -> Age {
        let age = Age(now, self.next_age);
        self.next_age += 1;
        self.sessions += 1;
        self.handshaking.insert((age.0, age.1, index));
        let share = self.shares.entry(source).or_default();
        share.sessions += 1;
        share.handshaking.insert((age.0, age.1, index));
        age
    }

    /// The session finished its handshake: it no longer makes room for anyone.
    pub fn established(&mut self, index: usize, age: Age, source: SourcePrefix) {
        self.handshaking.remove(&(age.0, age.1, index));
        if let Some(share) = self.shares.get_mut(&source) {
            share.handshaking.remove(&(age.0, age.1, index));
        }
    }

    /// The session is gone.
    pub fn removed(&mut self, index: usize, age: Age, source: SourcePrefix) {
        self.established(index, age, source);
        self.sessions -= 1;
        if let Some(share) = self.shares.get_mut(&source) {
            share.sessions -= 1;
            if share.sessions == 0 {
                self.shares.remove(&source);
            }
        }
    }

    /// Sessions still handshaking.
    pub fn handshaking(&self) -> usize {
        self.handshaking.len()
    }

    /// Sources that hold a session (for tests and the memory figure).
    pub fn sources(&self) -> usize {
        self.shares.len()
    }
}

/// `ip`'s source under `limits`' prefix lengths.
pub fn source_of(limits: &SessionLimits, ip: IpAddr) -> SourcePrefix {
    limits.source_prefix.source_of(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp::from_nanos(1_000_000_000);
    const LATER: Timestamp = Timestamp::from_nanos(3_000_000_000);

    fn limits() -> SessionLimits {
        SessionLimits {
            max_sessions: 6,
            max_sessions_per_source: 4,
            max_handshakes: 4,
            max_handshakes_per_source: 2,
            ..SessionLimits::default()
        }
    }

    fn source(ip: &str) -> SourcePrefix {
        source_of(&limits(), ip.parse().unwrap())
    }

    #[test]
    fn a_full_source_makes_room_from_its_own_oldest_handshake() {
        let (mut a, l) = (Admission::default(), limits());
        let (x, y) = (source("192.0.2.1"), source("192.0.2.2"));
        a.opened(0, y, T0);
        a.opened(1, x, T0);
        a.opened(2, x, T0);
        assert_eq!(
            a.verdict(&l, x, LATER),
            Verdict::Evict(1, Bound::SourceHandshakes)
        );
        assert_eq!(a.verdict(&l, y, LATER), Verdict::Admit);
    }

    #[test]
    fn a_full_table_makes_room_from_the_oldest_handshake_anywhere() {
        let (mut a, l) = (Admission::default(), limits());
        let ips = ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"];
        let ages: Vec<Age> = (ips.iter().enumerate())
            .map(|(i, ip)| a.opened(i, source(ip), T0))
            .collect();
        let newcomer = source("198.51.100.1");
        // Each handshake has its grace first: until then the newcomer is refused.
        assert_eq!(
            a.verdict(&l, newcomer, T0),
            Verdict::Refuse(Bound::Handshakes)
        );
        assert_eq!(
            a.verdict(&l, newcomer, LATER),
            Verdict::Evict(0, Bound::Handshakes)
        );
        a.removed(0, ages[0], source("192.0.2.1"));
        assert_eq!(a.verdict(&l, newcomer, LATER), Verdict::Admit);
    }

    #[test]
    fn established_sessions_are_never_the_ones_to_go() {
        let (mut a, l) = (Admission::default(), limits());
        let x = source("192.0.2.1");
        for i in 0..4 {
            let age = a.opened(i, x, T0);
            a.established(i, age, x);
        }
        assert_eq!(
            a.verdict(&l, x, LATER),
            Verdict::Refuse(Bound::SourceSessions)
        );
        let y = source("192.0.2.2");
        for i in 4..6 {
            let age = a.opened(i, y, T0);
            a.established(i, age, y);
        }
        let z = source("192.0.2.3");
        assert_eq!(a.verdict(&l, z, LATER), Verdict::Refuse(Bound::Sessions));
        assert_eq!((a.handshaking(), a.sources()), (0, 2));
    }

    #[test]
    fn an_ipv6_slash_64_is_one_source() {
        let (mut a, l) = (Admission::default(), limits());
        a.opened(0, source("2001:db8::1"), T0);
        a.opened(1, source("2001:db8::2"), T0);
        let same = source("2001:db8::ffff");
        assert_eq!(
            a.verdict(&l, same, LATER),
            Verdict::Evict(0, Bound::SourceHandshakes)
        );
    }
}
