//! What a peer may make us do, and how often (issue 13): token buckets refilled from the `now`
//! each call brings, counters with a ceiling, and the reasons a peer is cut off.
//!
//! RFC 9113 §10.5 lets an endpoint treat "activity that might indicate abuse" (SETTINGS,
//! PING, empty frames, streams opened and reset) as a connection error of type
//! ENHANCE_YOUR_CALM; it leaves the thresholds to us. Every budget here is generous for real
//! gRPC clients (grpc-go, grpc-java, grpcio, grpc-js send one SETTINGS and its ACK, a few
//! PINGs and WINDOW_UPDATEs) and small against floods.

use crate::time::Timestamp;

const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// Control frames a peer earns for each HEADERS or DATA frame we send, on top of the time
/// budget: real clients answer data with WINDOW_UPDATEs (grpcio: one for the stream, one for
/// the connection, per response) and BDP PINGs, at any call rate. Envoy allows 10
/// WINDOW_UPDATEs per DATA frame sent; 4 covers what we saw with room to spare.
const CONTROL_EARNED_PER_FRAME_SENT: u32 = 4;

/// A token bucket's shape: `burst` events at once, then `per_second` sustained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Events allowed back to back (the bucket's size; it starts full).
    pub burst: u32,
    /// Events per second refilled, up to `burst`.
    pub per_second: u32,
}

/// What a peer may make us do, and how often (RFC 9113 §10.5: "activity that might indicate
/// abuse"); each is ENHANCE_YOUR_CALM past its bound. `Default` suits a gRPC server or client.
#[derive(Clone, Debug)]
pub struct AbuseBudgets {
    /// Streams the peer may reset before the application has taken their
    /// requests (it polls every event after each input, so: within one input
    /// batch) before GOAWAY(ENHANCE_YOUR_CALM): Rapid Reset, CVE-2023-44487.
    /// Such streams are dropped unseen. hyperium/h2's
    /// `max_pending_accept_reset_streams`, with its default of 20.
    pub max_pending_accept_reset_streams: usize,
    /// RST_STREAM from the peer on open streams, sustained (a client
    /// cancelling calls); beyond it, ENHANCE_YOUR_CALM. Default 200 at once,
    /// 100 a second.
    pub peer_reset_rate: Rate,
    /// Streams we may reset for the peer's stream errors (malformed or
    /// refused streams) over the connection's life before
    /// ENHANCE_YOUR_CALM; hyperium/h2's `max_local_error_reset_streams`, 1024.
    pub max_local_error_resets: usize,
    /// SETTINGS frames (not ACKs): each costs an ACK and, with an
    /// INITIAL_WINDOW_SIZE, a pass over the streams (§6.9.2). Clients send
    /// one, grpc-go a few more as its BDP estimate grows the window. Default
    /// 32 at once, 8 a second.
    pub settings_rate: Rate,
    /// Frames that change nothing we keep, each costing a frame of work and
    /// some an answer: PING, PRIORITY, WINDOW_UPDATE that unblocks no queued
    /// data, RST_STREAM on a closed stream, GOAWAY, unsolicited ACKs, unknown
    /// frame types (§10.5). Each HEADERS or DATA frame we send earns the
    /// peer 4 more (its WINDOW_UPDATEs and BDP PINGs follow our data), so
    /// this is what a peer gets for nothing: keepalive PINGs, mostly.
    /// Default 200 at once, 50 a second.
    pub control_frame_rate: Rate,
    /// Empty frames that end nothing: DATA without END_STREAM, HEADERS and
    /// CONTINUATION fragments without END_HEADERS (CVE-2019-9518). Default
    /// 100 at once, 20 a second; real clients send none.
    pub empty_frame_rate: Rate,
}

impl Default for AbuseBudgets {
    fn default() -> Self {
        AbuseBudgets {
            max_pending_accept_reset_streams: 20,
            peer_reset_rate: Rate {
                burst: 200,
                per_second: 100,
            },
            max_local_error_resets: 1024,
            settings_rate: Rate {
                burst: 32,
                per_second: 8,
            },
            control_frame_rate: Rate {
                burst: 200,
                per_second: 50,
            },
            empty_frame_rate: Rate {
                burst: 100,
                per_second: 20,
            },
        }
    }
}

/// Why a connection was ended by one of its limits rather than by the protocol or the
/// application; [`Connection::abuse`](super::Connection::abuse) reports it, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cutoff {
    /// Preface, SETTINGS or its ACK not in time (GOAWAY PROTOCOL_ERROR or SETTINGS_TIMEOUT).
    HandshakeTimeout,
    /// No open stream for `idle_timeout` (GOAWAY NO_ERROR).
    IdleTimeout,
    /// A header block not finished within `header_block_timeout` (§6.10; VU#421644).
    HeaderBlockTimeout,
    /// A header block over 4 x MAX_HEADER_LIST_SIZE.
    HeaderBlockTooLarge,
    /// Rapid Reset (CVE-2023-44487): more streams reset before the application took them
    /// than `max_pending_accept_reset_streams`.
    PendingAcceptResets,
    /// RST_STREAM on open streams faster than `peer_reset_rate`.
    PeerResets,
    /// More streams reset for the peer's stream errors than `max_local_error_resets`.
    LocalErrorResets,
    /// SETTINGS frames faster than `settings_rate`.
    SettingsFlood,
    /// PING, PRIORITY, ineffective WINDOW_UPDATE and other no-op frames faster than
    /// `control_frame_rate`.
    ControlFlood,
    /// Empty DATA, HEADERS or CONTINUATION that end nothing, faster than `empty_frame_rate`.
    EmptyFrames,
    /// Output the driver was offered and the peer did not read, over `max_buffered_output`.
    UnreadOutput,
    /// Events the application did not poll, over `max_queued_event_bytes`.
    UnpolledEvents,
}

impl Cutoff {
    /// Every reason, for a metrics family with one label value each.
    pub const ALL: [Cutoff; 12] = [
        Cutoff::HandshakeTimeout,
        Cutoff::IdleTimeout,
        Cutoff::HeaderBlockTimeout,
        Cutoff::HeaderBlockTooLarge,
        Cutoff::PendingAcceptResets,
        Cutoff::PeerResets,
        Cutoff::LocalErrorResets,
        Cutoff::SettingsFlood,
        Cutoff::ControlFlood,
        Cutoff::EmptyFrames,
        Cutoff::UnreadOutput,
        Cutoff::UnpolledEvents,
    ];

    /// A metric label value (snake case).
    pub fn name(self) -> &'static str {
        match self {
            Cutoff::HandshakeTimeout => "handshake_timeout",
            Cutoff::IdleTimeout => "idle_timeout",
            Cutoff::HeaderBlockTimeout => "header_block_timeout",
            Cutoff::HeaderBlockTooLarge => "header_block_too_large",
            Cutoff::PendingAcceptResets => "pending_accept_resets",
            Cutoff::PeerResets => "peer_resets",
            Cutoff::LocalErrorResets => "local_error_resets",
            Cutoff::SettingsFlood => "settings_flood",
            Cutoff::ControlFlood => "control_flood",
            Cutoff::EmptyFrames => "empty_frames",
            Cutoff::UnreadOutput => "unread_output",
            Cutoff::UnpolledEvents => "unpolled_events",
        }
    }

    /// The GOAWAY debug data and the logged reason.
    pub(super) fn reason(self) -> &'static str {
        match self {
            Cutoff::HandshakeTimeout => "handshake timeout",
            Cutoff::IdleTimeout => "idle timeout",
            Cutoff::HeaderBlockTimeout => "header block not finished in time",
            Cutoff::HeaderBlockTooLarge => "header block too large",
            Cutoff::PendingAcceptResets => "too many streams reset before they were taken",
            Cutoff::PeerResets => "too many stream resets",
            Cutoff::LocalErrorResets => "too many stream errors",
            Cutoff::SettingsFlood => "too many SETTINGS",
            Cutoff::ControlFlood => "too many control frames",
            Cutoff::EmptyFrames => "too many empty frames",
            Cutoff::UnreadOutput => "peer is not reading",
            Cutoff::UnpolledEvents => "too many unread events",
        }
    }
}

/// What a connection refused its peer, for the driver's metrics: the limit that ended it, if
/// one did, and the streams it dropped or reset on the way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AbuseStats {
    /// The limit that closed the connection.
    pub cutoff: Option<Cutoff>,
    /// Streams the peer reset before the application took their request: dropped unseen.
    pub reset_before_accept: u64,
    /// RST_STREAMs we sent for the peer's stream errors (refused or malformed streams).
    pub local_error_resets: u64,
}

/// A token bucket refilled from the caller's clock, in nanotokens so refills are exact.
#[derive(Debug)]
pub(super) struct TokenBucket {
    rate: Rate,
    /// Tokens x 10^9.
    level: u128,
    refilled: Timestamp,
}

impl TokenBucket {
    pub(super) fn full(rate: Rate, now: Timestamp) -> Self {
        TokenBucket {
            rate,
            level: u128::from(rate.burst) * NANOS_PER_SECOND,
            refilled: now,
        }
    }

    /// Takes one token; `false` when the budget is spent (the token is not taken).
    pub(super) fn take(&mut self, now: Timestamp) -> bool {
        self.refill(now, 0);
        if self.level < NANOS_PER_SECOND {
            return false;
        }
        self.level -= NANOS_PER_SECOND;
        true
    }

    /// Adds `tokens` earned otherwise than by time, up to the burst.
    pub(super) fn give(&mut self, tokens: u32, now: Timestamp) {
        self.refill(now, tokens);
    }

    fn refill(&mut self, now: Timestamp, tokens: u32) {
        let elapsed = now.saturating_since(self.refilled).as_nanos();
        let capacity = u128::from(self.rate.burst) * NANOS_PER_SECOND;
        let refill = elapsed.saturating_mul(u128::from(self.rate.per_second))
            + u128::from(tokens) * NANOS_PER_SECOND;
        self.level = self.level.saturating_add(refill).min(capacity);
        self.refilled = self.refilled.max(now);
    }
}

/// A count with a ceiling: `take` fails once `max` are used.
#[derive(Debug)]
pub(super) struct Allowance {
    used: usize,
    max: usize,
}

impl Allowance {
    pub(super) fn new(max: usize) -> Self {
        Allowance { used: 0, max }
    }

    /// Uses one; `false` if that goes past the ceiling.
    pub(super) fn take(&mut self) -> bool {
        self.used += 1;
        self.used <= self.max
    }

    /// Gives all back.
    pub(super) fn clear(&mut self) {
        self.used = 0;
    }
}

/// Which budget a received frame draws on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Charge {
    /// A SETTINGS frame (not an ACK).
    Settings,
    /// A frame that changes nothing we keep: PING, PRIORITY, an ineffective WINDOW_UPDATE.
    Control,
    /// An empty frame that ends nothing.
    Empty,
    /// RST_STREAM on an open stream.
    PeerReset,
}

/// One connection's per-second budgets, and the ceilings on resets (hyperium/h2's
/// `max_pending_accept_reset_streams` and `max_local_error_reset_streams`).
#[derive(Debug)]
pub(super) struct Budgets {
    settings: TokenBucket,
    control: TokenBucket,
    empty: TokenBucket,
    peer_resets: TokenBucket,
    /// Streams reset by the peer before the application polled their HEADERS; given back
    /// whenever the application has polled every event (it has "accepted" what was queued).
    pub(super) pending_accept_resets: Allowance,
    /// Streams we reset for the peer's stream errors, over the connection's life.
    pub(super) local_error_resets: Allowance,
}

impl Budgets {
    pub(super) fn new(config: &AbuseBudgets, now: Timestamp) -> Self {
        Budgets {
            settings: TokenBucket::full(config.settings_rate, now),
            control: TokenBucket::full(config.control_frame_rate, now),
            empty: TokenBucket::full(config.empty_frame_rate, now),
            peer_resets: TokenBucket::full(config.peer_reset_rate, now),
            pending_accept_resets: Allowance::new(config.max_pending_accept_reset_streams),
            local_error_resets: Allowance::new(config.max_local_error_resets),
        }
    }

    /// We sent a HEADERS or DATA frame: the peer may answer it with control frames.
    pub(super) fn earn(&mut self, now: Timestamp) {
        self.control.give(CONTROL_EARNED_PER_FRAME_SENT, now);
    }

    /// Draws on the budget of `charge`; its cut-off when that is spent.
    pub(super) fn charge(&mut self, charge: Charge, now: Timestamp) -> Result<(), Cutoff> {
        let (bucket, cutoff) = match charge {
            Charge::Settings => (&mut self.settings, Cutoff::SettingsFlood),
            Charge::Control => (&mut self.control, Cutoff::ControlFlood),
            Charge::Empty => (&mut self.empty, Cutoff::EmptyFrames),
            Charge::PeerReset => (&mut self.peer_resets, Cutoff::PeerResets),
        };
        match bucket.take(now) {
            true => Ok(()),
            false => Err(cutoff),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const T0: Timestamp = Timestamp::ZERO;

    #[test]
    fn a_bucket_allows_its_burst_then_refills_at_its_rate() {
        let mut b = TokenBucket::full(
            Rate {
                burst: 3,
                per_second: 2,
            },
            T0,
        );
        assert!((0..3).all(|_| b.take(T0)));
        assert!(!b.take(T0));
        let half = T0 + Duration::from_millis(499);
        assert!(!b.take(half), "0.998 tokens");
        assert!(b.take(T0 + Duration::from_millis(500)));
        assert!(!b.take(T0 + Duration::from_millis(500)));
        // A long pause refills to the burst, no more.
        let later = T0 + Duration::from_secs(3600);
        assert_eq!((0..10).filter(|_| b.take(later)).count(), 3);
    }

    #[test]
    fn tokens_given_count_up_to_the_burst() {
        let rate = Rate {
            burst: 5,
            per_second: 0,
        };
        let mut b = TokenBucket::full(rate, T0);
        assert_eq!((0..10).filter(|_| b.take(T0)).count(), 5);
        b.give(2, T0);
        assert_eq!((0..10).filter(|_| b.take(T0)).count(), 2);
        b.give(100, T0);
        assert_eq!((0..10).filter(|_| b.take(T0)).count(), 5);
    }

    #[test]
    fn a_bucket_never_refills_from_a_clock_running_backwards() {
        let rate = Rate {
            burst: 1,
            per_second: 1,
        };
        let mut b = TokenBucket::full(rate, T0 + Duration::from_secs(10));
        assert!(b.take(T0 + Duration::from_secs(10)));
        assert!(!b.take(T0));
        assert!(!b.take(T0 + Duration::from_millis(10_999)));
        assert!(b.take(T0 + Duration::from_secs(11)));
    }

    #[test]
    fn a_huge_rate_and_pause_saturate_instead_of_overflowing() {
        let rate = Rate {
            burst: u32::MAX,
            per_second: u32::MAX,
        };
        let mut b = TokenBucket::full(rate, T0);
        assert!(b.take(Timestamp::MAX));
    }

    #[test]
    fn an_allowance_fails_past_its_ceiling_until_cleared() {
        let mut a = Allowance::new(2);
        assert!(a.take() && a.take());
        assert!(!a.take());
        a.clear();
        assert!(a.take());
    }

    #[test]
    fn every_cutoff_has_a_distinct_name() {
        let mut names: Vec<_> = Cutoff::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Cutoff::ALL.len());
    }
}
