//! Latency summaries: exact percentiles over recorded samples and a log2 text histogram.

use std::fmt::Write;

/// Lateness statistics of one sample set, in microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Number of samples summarised.
    pub samples: usize,
    /// Samples below zero: a timer that fired before its deadline (must never happen).
    pub early: usize,
    /// Smallest sample.
    pub min_us: f64,
    /// Median (nearest rank).
    pub p50_us: f64,
    /// 90th percentile (nearest rank).
    pub p90_us: f64,
    /// 99th percentile (nearest rank).
    pub p99_us: f64,
    /// 99.9th percentile (nearest rank).
    pub p999_us: f64,
    /// Largest sample.
    pub max_us: f64,
}

impl Summary {
    /// Summarises signed nanosecond samples (sorted in place). Percentiles use the nearest-rank
    /// method, so every reported value is one that was actually observed.
    pub fn from_nanos(samples: &mut [i64]) -> Summary {
        samples.sort_unstable();
        let us = |ns: i64| ns as f64 / 1000.0;
        // `per_mille` in integers so p99.9 of 1000 samples is exactly rank 999.
        let rank = |per_mille: usize| {
            let n = samples.len();
            let i = (per_mille * n).div_ceil(1000);
            us(samples[i.clamp(1, n) - 1])
        };
        if samples.is_empty() {
            return Summary {
                samples: 0,
                early: 0,
                min_us: 0.0,
                p50_us: 0.0,
                p90_us: 0.0,
                p99_us: 0.0,
                p999_us: 0.0,
                max_us: 0.0,
            };
        }
        Summary {
            samples: samples.len(),
            early: samples.iter().take_while(|&&s| s < 0).count(),
            min_us: us(samples[0]),
            p50_us: rank(500),
            p90_us: rank(900),
            p99_us: rank(990),
            p999_us: rank(999),
            max_us: us(samples[samples.len() - 1]),
        }
    }
}

/// A text histogram of nanosecond samples in power-of-two microsecond buckets.
pub fn log2_histogram(samples: &[i64], width: usize) -> String {
    let mut buckets = [0usize; 24];
    for &ns in samples {
        let us = (ns.max(0) / 1000) as u64;
        let b = (64 - us.leading_zeros() as usize).min(buckets.len() - 1);
        buckets[b] += 1;
    }
    let last = buckets.iter().rposition(|&c| c > 0).unwrap_or(0);
    let first = buckets.iter().position(|&c| c > 0).unwrap_or(0);
    let peak = buckets.iter().copied().max().unwrap_or(0).max(1);
    let mut out = String::new();
    for (b, &count) in buckets.iter().enumerate().take(last + 1).skip(first) {
        let (lo, hi) = if b == 0 {
            (0, 1)
        } else {
            (1u64 << (b - 1), 1u64 << b)
        };
        let bar = "#".repeat((count * width).div_ceil(peak));
        let _ = writeln!(out, "  {lo:>7}..{hi:<7} us {count:>8} {bar}");
    }
    out
}

/// A log2 histogram of durations in microseconds, cheap enough to update on every timer.
#[derive(Clone, Debug, Default)]
pub struct LatencyHistogram {
    /// `buckets[i]` counts samples in `(2^(i-1), 2^i]` µs; bucket 0 is `<= 1 µs`.
    pub(crate) buckets: [u64; 24],
    pub(crate) sum_us: f64,
    pub(crate) count: u64,
}

impl LatencyHistogram {
    /// Adds one sample of `ns` nanoseconds, rounded up to whole microseconds for the bucket.
    pub fn record_nanos(&mut self, ns: u64) {
        let us = ns.div_ceil(1000);
        let i = (64 - us.saturating_sub(1).leading_zeros() as usize).min(self.buckets.len() - 1);
        self.buckets[i] += 1;
        self.sum_us += ns as f64 / 1000.0;
        self.count += 1;
    }

    /// Samples recorded.
    pub fn samples(&self) -> u64 {
        self.count
    }

    /// Samples longer than `us` microseconds, as far as the buckets tell: those in buckets
    /// whose lower bound is at least `us`.
    pub fn samples_over_us(&self, us: u64) -> u64 {
        let lower = |i: usize| if i == 0 { 0 } else { 1u64 << (i - 1) };
        (self.buckets.iter().enumerate())
            .filter(|&(i, _)| lower(i) >= us)
            .map(|(_, c)| c)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut s: Vec<i64> = (1..=1000).map(|i| i * 1000).collect();
        let sum = Summary::from_nanos(&mut s);
        assert_eq!(sum.samples, 1000);
        assert_eq!(sum.p50_us, 500.0);
        assert_eq!(sum.p99_us, 990.0);
        assert_eq!(sum.p999_us, 999.0);
        assert_eq!(sum.max_us, 1000.0);
        assert_eq!(sum.early, 0);
    }

    #[test]
    fn negative_samples_count_as_early() {
        let mut s = vec![-5, -1, 0, 10];
        assert_eq!(Summary::from_nanos(&mut s).early, 2);
    }

    #[test]
    fn histogram_puts_samples_in_log2_buckets() {
        let h = log2_histogram(&[500, 1_500, 3_000, 3_500], 10);
        assert!(h.contains("0..1"));
        assert!(h.contains("1..2"));
        assert!(h.contains("2..4"));
    }
}
