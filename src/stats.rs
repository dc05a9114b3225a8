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

/// A histogram of durations, cheap enough to update on every timer: log-linear, like
/// HdrHistogram, with 4 buckets per power of two so that a p99 near 100 µs is told apart from
/// one near 128 µs (bounds ..., 64, 80, 96, 112, 128, 160, ... µs).
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    /// `buckets[0]` counts samples of at most 1 µs; `buckets[i]` those in
    /// `(upper_bound_us(i - 1), upper_bound_us(i)]`; the last one also counts everything longer.
    pub(crate) buckets: [u64; HISTOGRAM_BUCKETS],
    pub(crate) sum_us: f64,
    pub(crate) count: u64,
}

/// Buckets of a [`LatencyHistogram`]: 1 µs, then 4 per power of two up to 2^21 µs (2.1 s).
pub const HISTOGRAM_BUCKETS: usize = 1 + 4 * 21;

/// The index arithmetic works in quarter microseconds, so that every bound is exact.
const QUARTER_US_NS: u64 = 250;

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: [0; HISTOGRAM_BUCKETS],
            sum_us: 0.0,
            count: 0,
        }
    }
}

impl LatencyHistogram {
    /// Adds one sample of `ns` nanoseconds, rounded up to a quarter microsecond for the bucket.
    pub fn record_nanos(&mut self, ns: u64) {
        self.buckets[bucket_of(ns)] += 1;
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
        let lower = |i: usize| if i == 0 { 0.0 } else { upper_bound_us(i - 1) };
        (self.buckets.iter().enumerate())
            .filter(|&(i, _)| lower(i) >= us as f64)
            .map(|(_, c)| c)
            .sum()
    }
}

/// The bucket of a sample of `ns` nanoseconds. In quarter microseconds `q`, a power of two
/// `(2^(k-1), 2^k]` splits into 4 equal parts, told apart by the 2 bits below the top one.
fn bucket_of(ns: u64) -> usize {
    let q = ns.div_ceil(QUARTER_US_NS);
    if q <= 4 {
        return 0;
    }
    let x = q - 1;
    let k = 64 - x.leading_zeros() as usize; // q is in (2^(k-1), 2^k], k >= 3
    let sub = ((x >> (k - 3)) & 3) as usize;
    (1 + 4 * (k - 3) + sub).min(HISTOGRAM_BUCKETS - 1)
}

/// The upper bound of bucket `i`, in microseconds.
pub fn upper_bound_us(i: usize) -> f64 {
    if i == 0 {
        return 1.0;
    }
    let (k, sub) = (3 + (i - 1) / 4, (i - 1) % 4);
    let quarters = (1u64 << (k - 3)) * (4 + sub as u64 + 1);
    quarters as f64 / 4.0
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
    fn latency_buckets_split_each_power_of_two_in_four() {
        let bounds: Vec<f64> = (0..10).map(upper_bound_us).collect();
        assert_eq!(bounds, [1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0]);
        assert_eq!(upper_bound_us(HISTOGRAM_BUCKETS - 2), 1_835_008.0);
        for ns in [
            1,
            1_000,
            1_001,
            1_250,
            1_251,
            99_000,
            100_000,
            100_001,
            5_000_000_000,
        ] {
            let i = bucket_of(ns);
            let us = ns as f64 / 1000.0;
            let lower = if i == 0 { 0.0 } else { upper_bound_us(i - 1) };
            let last = i == HISTOGRAM_BUCKETS - 1;
            assert!(
                us > lower && (us <= upper_bound_us(i) || last),
                "{ns} ns in bucket {i}"
            );
        }
    }

    #[test]
    fn samples_over_counts_whole_buckets() {
        let mut h = LatencyHistogram::default();
        for ns in [500, 90_000, 100_000, 130_000, 3_000_000] {
            h.record_nanos(ns);
        }
        assert_eq!(h.samples(), 5);
        assert_eq!(h.samples_over_us(112), 2);
        assert_eq!(h.samples_over_us(1_000), 1);
    }

    #[test]
    fn histogram_puts_samples_in_log2_buckets() {
        let h = log2_histogram(&[500, 1_500, 3_000, 3_500], 10);
        assert!(h.contains("0..1"));
        assert!(h.contains("1..2"));
        assert!(h.contains("2..4"));
    }
}
