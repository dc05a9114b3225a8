//! Which connection a full stream listener closes for a new one (issue 40, row 4).
//!
//! A table that is full and stays full locks every newcomer out, so at either cap (total, or
//! the newcomer's source prefix) one connection goes, chosen so that a legitimate client
//! loses as little as possible:
//!
//! 1. one that has sent no CSM yet (RFC 8323 §5.3), the oldest first: it has asked for
//!    nothing;
//! 2. else an *idle* one: open, with nothing the proxy is working on for it (no request in
//!    flight, no observation), from the source prefix that holds the most connections, the
//!    one quiet longest first. Counting by source first means that whoever holds the table
//!    with many connections loses its own before a client with one does, whatever it
//!    sends to look fresh.
//!
//! A connection with a request in flight or an observation is never closed for another: it
//! is a client being served. With none to close, the newcomer is refused. At the per-source
//! cap only that source's connections are candidates; closing one of them makes room under
//! both caps.

use std::cmp::Reverse;

use crate::source_prefix::SourcePrefix;
use crate::time::Timestamp;

/// Where a connection stands, as far as closing it for a newcomer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Standing {
    /// No CSM yet; accepted then.
    NoCsm { accepted_at: Timestamp },
    /// Open with nothing in flight; the peer's latest input then.
    Idle { quiet_since: Timestamp },
    /// A request in flight, an observation, or ending already: not closed for another.
    Kept,
}

/// A connection the listener could close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Candidate {
    /// Its slot in the listener's table.
    pub slot: usize,
    /// The source prefix it counts towards.
    pub source: SourcePrefix,
    /// Its standing.
    pub standing: Standing,
}

/// Why a connection was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Eviction {
    /// It had sent no CSM.
    NoCsm,
    /// It was idle.
    Idle,
}

/// The connection to close for a newcomer, and why: among `candidates` in `scope` (a source
/// prefix at its cap, or `None` for the whole table), by the order of the module docs.
/// `connections_of` says how many connections a source prefix holds.
pub(super) fn choose(
    candidates: impl Iterator<Item = Candidate>,
    scope: Option<SourcePrefix>,
    connections_of: impl Fn(SourcePrefix) -> usize,
) -> Option<(usize, Eviction)> {
    let in_scope = candidates.filter(|c| scope.is_none_or(|s| c.source == s));
    let mut no_csm: Option<(Timestamp, usize)> = None;
    let mut idle: Option<(Reverse<usize>, Timestamp, usize)> = None;
    for c in in_scope {
        match c.standing {
            Standing::NoCsm { accepted_at } => no_csm = lower(no_csm, (accepted_at, c.slot)),
            Standing::Idle { quiet_since } => {
                let rank = (Reverse(connections_of(c.source)), quiet_since, c.slot);
                idle = lower(idle, rank)
            }
            Standing::Kept => {}
        }
    }
    match (no_csm, idle) {
        (Some((_, slot)), _) => Some((slot, Eviction::NoCsm)),
        (None, Some((_, _, slot))) => Some((slot, Eviction::Idle)),
        (None, None) => None,
    }
}

/// The lower of the best so far and `rank`.
fn lower<T: Ord>(best: Option<T>, rank: T) -> Option<T> {
    Some(match best {
        Some(best) => best.min(rank),
        None => rank,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source_prefix::PrefixLengths;
    use std::time::Duration;

    fn source(last: u8) -> SourcePrefix {
        PrefixLengths::DEFAULT.source_of([10, 0, 0, last].into())
    }

    fn at(s: u64) -> Timestamp {
        Timestamp::ZERO + Duration::from_secs(s)
    }

    fn cand(slot: usize, last: u8, standing: Standing) -> Candidate {
        Candidate {
            slot,
            source: source(last),
            standing,
        }
    }

    fn count(cands: &[Candidate]) -> impl Fn(SourcePrefix) -> usize + '_ {
        |s| cands.iter().filter(|c| c.source == s).count()
    }

    #[test]
    fn a_connection_without_a_csm_goes_first_the_oldest() {
        let cands = [
            cand(0, 1, Standing::Idle { quiet_since: at(1) }),
            cand(1, 2, Standing::NoCsm { accepted_at: at(9) }),
            cand(2, 2, Standing::NoCsm { accepted_at: at(5) }),
        ];
        let chosen = choose(cands.iter().copied(), None, count(&cands));
        assert_eq!(chosen, Some((2, Eviction::NoCsm)));
    }

    #[test]
    fn then_the_idle_one_of_the_source_holding_most_quiet_longest() {
        let cands = [
            // A lone client, quiet for long.
            cand(0, 1, Standing::Idle { quiet_since: at(1) }),
            // A source with three, one of them busy.
            cand(
                1,
                2,
                Standing::Idle {
                    quiet_since: at(50),
                },
            ),
            cand(
                2,
                2,
                Standing::Idle {
                    quiet_since: at(40),
                },
            ),
            cand(3, 2, Standing::Kept),
        ];
        let chosen = choose(cands.iter().copied(), None, count(&cands));
        assert_eq!(chosen, Some((2, Eviction::Idle)));
    }

    #[test]
    fn busy_connections_are_never_chosen_and_the_scope_holds() {
        let cands = [
            cand(0, 1, Standing::Kept),
            cand(1, 2, Standing::NoCsm { accepted_at: at(1) }),
        ];
        assert_eq!(
            choose(cands.iter().copied(), Some(source(1)), count(&cands)),
            None
        );
        assert_eq!(
            choose(cands.iter().copied(), Some(source(2)), count(&cands)),
            Some((1, Eviction::NoCsm))
        );
    }
}
