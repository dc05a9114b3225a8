//! Verify: the reconnect server's verdict on a client's retry intervals, bit for bit the C++
//! reference's (test/cpp/interop/reconnect_interop_server.cc), plus its per-interval log line
//! (test/core/test_util/reconnect_server.cc).
//!
//! Interval `i` (1-based) is the time between accepts `i` and `i+1`, in whole ms. Its expected
//! backoff is `E_1 = 1000.0`, `E_{i+1} = min(E_i * 1.6, cap)` in f64, and it passes iff
//! `E_i*(1-0.2) - 100 <= b_i <= E_i*(1+0.2) + 100`: the 20% jitter plus 100 ms for transmission.

use crate::time::Timestamp;

/// `E_1`, in ms: the first interval is INITIAL_BACKOFF, never jittered or capped.
pub const INITIAL_EXPECTED_MS: f64 = 1000.0;
/// MULTIPLIER of doc/connection-backoff.md.
pub const MULTIPLIER: f64 = 1.6;
/// JITTER of doc/connection-backoff.md.
pub const JITTER: f64 = 0.2;
/// Slack the reference allows on both sides for connection setup, in ms.
pub const TRANSMISSION_DELAY_MS: f64 = 100.0;
/// MAX_BACKOFF when the client reports 0.
pub const DEFAULT_MAX_BACKOFF_MS: i32 = 120_000;

/// The expected backoffs `E_1, E_2, ...` in ms, in the reference's order of f64 operations.
#[derive(Clone, Copy, Debug)]
pub struct ExpectedBackoff {
    next: f64,
    cap: f64,
}

impl ExpectedBackoff {
    /// The sequence Verify uses: `cap` is `max_reconnect_backoff_ms` whenever it is non-zero,
    /// even negative (the reference tests `? :` on the int).
    pub fn for_verify(max_reconnect_backoff_ms: i32) -> Self {
        let cap = match max_reconnect_backoff_ms {
            0 => DEFAULT_MAX_BACKOFF_MS,
            ms => ms,
        };
        Self::with_cap(cap)
    }

    /// The sequence the per-connection log uses: the reference tests `> 0` there, so a negative
    /// value means the default. Identical to [`for_verify`](Self::for_verify) for `max >= 0`.
    pub fn for_log(max_reconnect_backoff_ms: i32) -> Self {
        Self::with_cap(if max_reconnect_backoff_ms > 0 {
            max_reconnect_backoff_ms
        } else {
            DEFAULT_MAX_BACKOFF_MS
        })
    }

    fn with_cap(cap_ms: i32) -> Self {
        ExpectedBackoff {
            next: INITIAL_EXPECTED_MS,
            cap: f64::from(cap_ms),
        }
    }
}

impl Iterator for ExpectedBackoff {
    type Item = f64;

    fn next(&mut self) -> Option<f64> {
        let e = self.next;
        let grown = e * MULTIPLIER;
        self.next = if grown > self.cap { self.cap } else { grown };
        Some(e)
    }
}

/// The inclusive range `[E*(1-J) - 100, E*(1+J) + 100]` an interval with expectation `E` may take.
pub fn allowed_range(expected_ms: f64) -> (f64, f64) {
    (
        expected_ms * (1.0 - JITTER) - TRANSMISSION_DELAY_MS,
        expected_ms * (1.0 + JITTER) + TRANSMISSION_DELAY_MS,
    )
}

/// Whole milliseconds from `earlier` to `later`, as `gpr_time_to_millis` computes them:
/// truncated toward zero for the non-negative intervals a monotonic clock yields (a negative one
/// is floored), saturating at ±2147483647.
pub fn interval_ms(earlier: Timestamp, later: Timestamp) -> i32 {
    const NANOS_PER_SEC: i64 = 1_000_000_000;
    const NANOS_PER_MS: i64 = 1_000_000;
    const SATURATION_SECS: i64 = 2_147_483;
    let nanos = later.signed_nanos_since(earlier);
    let (secs, sub) = (
        nanos.div_euclid(NANOS_PER_SEC),
        nanos.rem_euclid(NANOS_PER_SEC),
    );
    let exact = || (secs * 1000 + sub / NANOS_PER_MS) as i32;
    if secs >= SATURATION_SECS {
        if secs == SATURATION_SECS && sub < 648 * NANOS_PER_MS {
            return exact();
        }
        i32::MAX
    } else if secs <= -SATURATION_SECS {
        -i32::MAX
    } else {
        exact()
    }
}

/// One interval outside its allowed range: what the server logs to say why a run failed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutOfRange {
    /// 1-based, as in the reference's `retry %2d` log lines.
    pub index: usize,
    /// The interval measured between accepts, in whole ms.
    pub observed_ms: i32,
    /// Its expected backoff `E_i`.
    pub expected_ms: f64,
    /// Lower end of the allowed range (see [`allowed_range`]).
    pub min_ms: f64,
    /// Upper end of the allowed range.
    pub max_ms: f64,
}

impl OutOfRange {
    /// One log line: the interval, its observed value and the range it missed.
    pub fn describe(&self) -> String {
        format!(
            "interval {}: {} ms outside [{:.2}, {:.2}] ms (expected {:.2} ms)",
            self.index, self.observed_ms, self.min_ms, self.max_ms, self.expected_ms
        )
    }
}

/// Verify's result: what Stop returns in `ReconnectInfo`, and why it failed.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Whether every interval was in range (and, if required, there were enough of them).
    pub passed: bool,
    /// Every interval, failing ones included.
    pub backoff_ms: Vec<i32>,
    /// The intervals outside their range, in order.
    pub out_of_range: Vec<OutOfRange>,
    /// Set when the strict minimum was not met: `(observed, required)` interval counts.
    pub too_few_intervals: Option<(usize, usize)>,
    /// Set when the retry port saw more connections than the server records:
    /// `(seen, recorded)`. Only the first `recorded` were verified.
    pub too_many_accepts: Option<(u64, usize)>,
}

impl Verdict {
    /// One line per reason the run failed; empty when it passed.
    pub fn reasons(&self) -> Vec<String> {
        let too_few = self.too_few_intervals.map(|(observed, required)| {
            format!("only {observed} intervals observed, at least {required} required")
        });
        let too_many = self.too_many_accepts.map(|(seen, kept)| {
            format!("{seen} retry-port connections, more than the {kept} recorded per session")
        });
        too_few
            .into_iter()
            .chain(too_many)
            .chain(self.out_of_range.iter().map(OutOfRange::describe))
            .collect()
    }
}

/// Verify over accept timestamps (in accept order). With 0 or 1 timestamps there is no interval
/// and the reference passes; `min_intervals > 0` makes such short runs fail instead.
pub fn verify(
    timestamps: &[Timestamp],
    max_reconnect_backoff_ms: i32,
    min_intervals: usize,
) -> Verdict {
    let intervals: Vec<i32> = timestamps
        .windows(2)
        .map(|pair| interval_ms(pair[0], pair[1]))
        .collect();
    verify_intervals(&intervals, max_reconnect_backoff_ms, min_intervals)
}

/// Verify's rules over intervals already in whole ms, e.g. the `backoff_ms` a server returned,
/// so a client can check a server's verdict.
pub fn verify_intervals(
    backoff_ms: &[i32],
    max_reconnect_backoff_ms: i32,
    min_intervals: usize,
) -> Verdict {
    let mut verdict = Verdict {
        passed: true,
        backoff_ms: backoff_ms.to_vec(),
        out_of_range: Vec::new(),
        too_few_intervals: None,
        too_many_accepts: None,
    };
    let expected = ExpectedBackoff::for_verify(max_reconnect_backoff_ms);
    for (index, (&b, e)) in backoff_ms.iter().zip(expected).enumerate() {
        let (min_ms, max_ms) = allowed_range(e);
        let observed = f64::from(b);
        if observed < min_ms || observed > max_ms {
            verdict.passed = false;
            verdict.out_of_range.push(OutOfRange {
                index: index + 1,
                observed_ms: b,
                expected_ms: e,
                min_ms,
                max_ms,
            });
        }
    }
    if backoff_ms.len() < min_intervals {
        verdict.passed = false;
        verdict.too_few_intervals = Some((backoff_ms.len(), min_intervals));
    }
    verdict
}

/// The reference's log line for interval `index` (1-based):
/// `retry %2d:backoff %6.2fs,expected backoff %6.2fs, jitter %4.2f%%`.
pub fn interval_log_line(index: usize, backoff_ms: i32, expected_ms: f64) -> String {
    let b = f64::from(backoff_ms);
    format!(
        "retry {index:2}:backoff {:6.2}s,expected backoff {:6.2}s, jitter {:4.2}%",
        b / 1000.0,
        expected_ms / 1000.0,
        (b - expected_ms) * 100.0 / expected_ms
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Timestamps starting at 5 s whose consecutive gaps are `gaps_ns`.
    fn stamps(gaps_ns: &[u64]) -> Vec<Timestamp> {
        let mut t = 5_000 * MS;
        let mut out = vec![Timestamp::from_nanos(t)];
        for gap in gaps_ns {
            t += gap;
            out.push(Timestamp::from_nanos(t));
        }
        out
    }

    fn gaps_ms(ms: &[u64]) -> Vec<Timestamp> {
        stamps(&ms.iter().map(|m| m * MS).collect::<Vec<_>>())
    }

    /// Intervals equal to each `E_i` (rounded), then `last`.
    fn on_schedule_then(n: usize, max: i32, last: u64) -> Vec<Timestamp> {
        let mut ms: Vec<u64> = ExpectedBackoff::for_verify(max)
            .take(n)
            .map(|e| e.round() as u64)
            .collect();
        ms.push(last);
        gaps_ms(&ms)
    }

    fn passes(ts: &[Timestamp], max: i32) -> bool {
        verify(ts, max, 0).passed
    }

    #[test]
    fn no_or_one_timestamp_passes_with_no_intervals() {
        for ts in [vec![], gaps_ms(&[])] {
            let v = verify(&ts, 0, 0);
            assert!(v.passed);
            assert!(v.backoff_ms.is_empty());
            assert!(v.reasons().is_empty());
        }
    }

    #[test]
    fn strict_minimum_fails_short_runs_and_says_why() {
        let v = verify(&gaps_ms(&[1000]), 0, 2);
        assert!(!v.passed);
        assert_eq!(v.too_few_intervals, Some((1, 2)));
        assert_eq!(
            v.reasons(),
            ["only 1 intervals observed, at least 2 required"]
        );
        assert!(verify(&gaps_ms(&[1000, 1600]), 0, 2).passed);
    }

    #[test]
    fn first_interval_bounds_are_700_and_1300_inclusive() {
        assert!(!passes(&gaps_ms(&[699]), 0));
        assert!(passes(&gaps_ms(&[700]), 0));
        assert!(passes(&gaps_ms(&[1300]), 0));
        assert!(!passes(&gaps_ms(&[1301]), 0));
    }

    #[test]
    fn second_interval_bounds_are_1180_and_2020_inclusive() {
        assert!(!passes(&gaps_ms(&[1000, 1179]), 0));
        assert!(passes(&gaps_ms(&[1000, 1180]), 0));
        assert!(passes(&gaps_ms(&[1000, 2020]), 0));
        assert!(!passes(&gaps_ms(&[1000, 2021]), 0));
    }

    #[test]
    fn expected_backoffs_match_the_spec_table() {
        let bounds: Vec<_> = ExpectedBackoff::for_verify(0)
            .map(allowed_range)
            .take(12)
            .collect();
        assert_eq!(bounds[2], (1948.0, 3172.0));
        assert_eq!(bounds[3], (3176.8, 5015.2));
        assert_eq!(bounds[4], (5142.880000000001, 7964.32));
        assert_eq!(bounds[11], (95900.0, 144100.0));
    }

    #[test]
    fn default_cap_applies_from_interval_12() {
        assert!(!passes(&on_schedule_then(11, 0, 95_899), 0));
        assert!(passes(&on_schedule_then(11, 0, 95_900), 0));
        assert!(passes(&on_schedule_then(11, 0, 144_100), 0));
        assert!(!passes(&on_schedule_then(11, 0, 144_101), 0));
        assert!(passes(&on_schedule_then(20, 0, 120_000), 0));
    }

    #[test]
    fn configured_cap_of_3000() {
        // E = 1000, 1600, 2560, then 3000 (4096 capped) forever: [2300, 3700].
        assert!(passes(&on_schedule_then(3, 3000, 2300), 3000));
        assert!(!passes(&on_schedule_then(3, 3000, 2299), 3000));
        assert!(passes(&on_schedule_then(9, 3000, 3700), 3000));
        assert!(!passes(&on_schedule_then(9, 3000, 3701), 3000));
        // The uncapped 4096 would fail here.
        assert!(!passes(&on_schedule_then(3, 3000, 4096), 3000));
    }

    #[test]
    fn cap_below_1000_keeps_e1_and_caps_e2() {
        let e: Vec<f64> = ExpectedBackoff::for_verify(500).take(3).collect();
        assert_eq!(e, [1000.0, 500.0, 500.0]);
        assert!(passes(&gaps_ms(&[1000, 500, 500]), 500));
        assert!(passes(&gaps_ms(&[700, 300, 700]), 500));
        assert!(!passes(&gaps_ms(&[1000, 701]), 500));
    }

    #[test]
    fn negative_cap_is_used_as_is_like_the_reference() {
        let e: Vec<f64> = ExpectedBackoff::for_verify(-5).take(2).collect();
        assert_eq!(e, [1000.0, -5.0]);
        let log: Vec<f64> = ExpectedBackoff::for_log(-5).take(2).collect();
        assert_eq!(log, [1000.0, 1600.0]);
    }

    #[test]
    fn sub_millisecond_parts_are_truncated_toward_zero() {
        let almost_1301 = stamps(&[1_300 * MS + 999_999]);
        assert_eq!(verify(&almost_1301, 0, 0).backoff_ms, [1300]);
        assert!(passes(&almost_1301, 0));
        let almost_700 = stamps(&[699 * MS + 999_999]);
        assert_eq!(verify(&almost_700, 0, 0).backoff_ms, [699]);
        assert!(!passes(&almost_700, 0));
    }

    #[test]
    fn interval_ms_matches_gpr_time_to_millis() {
        let t = |ns: u64| Timestamp::from_nanos(ns);
        assert_eq!(interval_ms(t(0), t(1_999_999)), 1);
        assert_eq!(interval_ms(t(1_999_999), t(0)), -2);
        let limit = 2_147_483_647 * MS;
        assert_eq!(interval_ms(t(0), t(limit)), i32::MAX);
        assert_eq!(interval_ms(t(0), t(limit - MS)), i32::MAX - 1);
        assert_eq!(interval_ms(t(0), t(u64::MAX)), i32::MAX);
        assert_eq!(interval_ms(t(u64::MAX), t(0)), -i32::MAX);
    }

    #[test]
    fn every_interval_is_reported_and_failures_explained() {
        let v = verify(&gaps_ms(&[1000, 3000, 2560]), 0, 0);
        assert!(!v.passed);
        assert_eq!(v.backoff_ms, [1000, 3000, 2560]);
        assert_eq!(v.out_of_range.len(), 1);
        assert_eq!(v.out_of_range[0].index, 2);
        assert_eq!(
            v.reasons(),
            ["interval 2: 3000 ms outside [1180.00, 2020.00] ms (expected 1600.00 ms)"]
        );
    }

    #[test]
    fn intervals_in_ms_get_the_same_verdict_as_timestamps() {
        let ts = gaps_ms(&[1000, 3000, 2560]);
        assert_eq!(
            verify_intervals(&[1000, 3000, 2560], 0, 0),
            verify(&ts, 0, 0)
        );
        assert!(verify_intervals(&[1000, 1600, 2000], 2000, 0).passed);
        assert!(!verify_intervals(&[], 0, 1).passed);
    }

    #[test]
    fn log_line_has_the_reference_format() {
        assert_eq!(
            interval_log_line(1, 1000, 1000.0),
            "retry  1:backoff   1.00s,expected backoff   1.00s, jitter 0.00%"
        );
        assert_eq!(
            interval_log_line(2, 1280, 1600.0),
            "retry  2:backoff   1.28s,expected backoff   1.60s, jitter -20.00%"
        );
        assert_eq!(
            interval_log_line(12, 130_000, 120_000.0),
            "retry 12:backoff 130.00s,expected backoff 120.00s, jitter 8.33%"
        );
    }
}
