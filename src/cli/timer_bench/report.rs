//! What timer-bench concludes from its samples: each source's lateness, the reactor's overhead
//! over the bare-kernel baseline measured in the same run, and where that overhead goes.
//!
//! The overhead is a difference of percentiles (the reactor's p50 minus nanosleep's p50, and so
//! on), not a percentile of differences: the samples are not paired. How stable it is shows in
//! the same difference taken block by block: a block is [`BLOCK_SAMPLES`] or more samples of
//! consecutive rounds, and since the rounds of all sources interleave, block k of each source
//! covers the same stretch of the run.

use std::fmt::Write;

use backoffd::stats::Summary;

use super::harness::{Source, SourceSamples};

/// The fewest samples a block holds: enough for its p99 to be the 5th-worst, not the worst.
pub const BLOCK_SAMPLES: usize = 500;

/// One source's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceReport {
    /// The source.
    pub source: Source,
    /// Its lateness.
    pub lateness: Summary,
    /// The mean lateness in µs (cyclictest's "Avg").
    pub avg_us: f64,
    /// The reactor's split of the lateness; `None` for the baseline.
    pub breakdown: Option<Split>,
    /// Over the baseline of the same run; `None` for the baseline, or when it was not measured.
    pub overhead: Option<Overhead>,
}

/// Lateness split at the instant the loop's wait returned.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    /// Deadline to the wait's return.
    pub kernel: Summary,
    /// The wait's return to the callback.
    pub dispatch: Summary,
}

impl Split {
    /// The JSON names of [`figures`](Self::figures), in its order.
    const NAMES: [&'static str; 6] = [
        "kernel_p50_us",
        "kernel_p99_us",
        "kernel_p999_us",
        "dispatch_p50_us",
        "dispatch_p99_us",
        "dispatch_p999_us",
    ];

    /// p50, p99 and p99.9 of the kernel's part, then of the dispatch's, in µs.
    fn figures(&self) -> [f64; 6] {
        let (k, d) = (&self.kernel, &self.dispatch);
        [k.p50_us, k.p99_us, k.p999_us, d.p50_us, d.p99_us, d.p999_us]
    }
}

/// A reactor source's percentiles minus the baseline's, in µs.
#[derive(Clone, Debug, PartialEq)]
pub struct Overhead {
    /// Over the whole run.
    pub p50_us: f64,
    /// Over the whole run.
    pub p99_us: f64,
    /// The p50 difference of each block against the baseline's block beside it.
    pub p50_blocks: Spread,
    /// The same for p99.
    pub p99_blocks: Spread,
}

/// The median and range of per-block values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Number of blocks.
    pub blocks: usize,
    /// Median (nearest rank, lower).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (none: all zero).
    pub fn of(mut values: Vec<f64>) -> Spread {
        values.sort_by(f64::total_cmp);
        let at = |i: usize| values.get(i).copied().unwrap_or(0.0);
        Spread {
            blocks: values.len(),
            median: at(values.len().saturating_sub(1) / 2),
            min: at(0),
            max: at(values.len().saturating_sub(1)),
        }
    }
}

/// Analyses every source's samples; the overhead is taken against the nanosleep source if the
/// run had one.
pub fn analyse(samples: &[SourceSamples]) -> Vec<SourceReport> {
    let lateness: Vec<Summary> = samples.iter().map(|s| summary(&s.lateness_ns)).collect();
    let baseline = samples
        .iter()
        .zip(&lateness)
        .find(|(s, _)| s.source == Source::Nanosleep);
    samples
        .iter()
        .zip(lateness.iter().cloned())
        .map(|(s, lateness)| SourceReport {
            source: s.source,
            avg_us: mean_us(&s.lateness_ns),
            breakdown: s.breakdown.as_ref().map(|b| Split {
                kernel: summary(&b.kernel_ns),
                dispatch: summary(&b.dispatch_ns),
            }),
            overhead: match (s.breakdown.is_some(), baseline) {
                (true, Some(base)) => Some(overhead((s, &lateness), base)),
                _ => None,
            },
            lateness,
        })
        .collect()
}

/// A source's overhead over the baseline, each given with its samples and their summary.
fn overhead(
    (source, all): (&SourceSamples, &Summary),
    (base, all_base): (&SourceSamples, &Summary),
) -> Overhead {
    let mut p50s = Vec::new();
    let mut p99s = Vec::new();
    let blocks = source.blocks(BLOCK_SAMPLES);
    for (ours, theirs) in blocks.into_iter().zip(base.blocks(BLOCK_SAMPLES)) {
        let ours = summary(&source.lateness_ns[ours]);
        let theirs = summary(&base.lateness_ns[theirs]);
        p50s.push(ours.p50_us - theirs.p50_us);
        p99s.push(ours.p99_us - theirs.p99_us);
    }
    Overhead {
        p50_us: all.p50_us - all_base.p50_us,
        p99_us: all.p99_us - all_base.p99_us,
        p50_blocks: Spread::of(p50s),
        p99_blocks: Spread::of(p99s),
    }
}

fn summary(ns: &[i64]) -> Summary {
    Summary::from_nanos(&mut ns.to_vec())
}

fn mean_us(ns: &[i64]) -> f64 {
    match ns.len() {
        0 => 0.0,
        n => ns.iter().map(|&v| v as f64).sum::<f64>() / n as f64 / 1000.0,
    }
}

/// The lateness table, then the overhead and the breakdown of the reactor's sources.
pub fn text(reports: &[SourceReport]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:>8} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}   (lateness, us)",
        "source", "samples", "early", "min", "avg", "p50", "p90", "p99", "p99.9", "max"
    );
    for r in reports {
        let s = &r.lateness;
        let _ = writeln!(
            out,
            "{:<10} {:>8} {:>6} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
            r.source.to_string(),
            s.samples,
            s.early,
            s.min_us,
            r.avg_us,
            s.p50_us,
            s.p90_us,
            s.p99_us,
            s.p999_us,
            s.max_us
        );
    }
    overhead_text(&mut out, reports);
    breakdown_text(&mut out, reports);
    out
}

fn overhead_text(out: &mut String, reports: &[SourceReport]) {
    let with: Vec<(&SourceReport, &Overhead)> = reports
        .iter()
        .filter_map(|r| r.overhead.as_ref().map(|o| (r, o)))
        .collect();
    let Some((_, first)) = with.first() else {
        return;
    };
    let _ = writeln!(
        out,
        "\noverhead over nanosleep, same run (us): whole run, and per block of {BLOCK_SAMPLES}+ samples median [min..max] (blocks: {})",
        first.p50_blocks.blocks
    );
    let _ = writeln!(
        out,
        "{:<10} {:>8} {:>24} {:>8} {:>24}",
        "source", "p50", "p50 per block", "p99", "p99 per block"
    );
    for (r, o) in with {
        let _ = writeln!(
            out,
            "{:<10} {:>+8.1} {:>24} {:>+8.1} {:>24}",
            r.source.to_string(),
            o.p50_us,
            spread_text(&o.p50_blocks),
            o.p99_us,
            spread_text(&o.p99_blocks)
        );
    }
}

fn spread_text(s: &Spread) -> String {
    format!("{:+.1} [{:+.1}..{:+.1}]", s.median, s.min, s.max)
}

fn breakdown_text(out: &mut String, reports: &[SourceReport]) {
    let _ = writeln!(
        out,
        "\nbreakdown (us): kernel = deadline to the wait's return, dispatch = wait's return to the callback"
    );
    let _ = writeln!(
        out,
        "{:<10} {:>11} {:>8} {:>8} {:>13} {:>8} {:>8}",
        "source", "kernel p50", "p99", "p99.9", "dispatch p50", "p99", "p99.9"
    );
    const WIDTHS: [usize; 6] = [11, 8, 8, 13, 8, 8];
    for r in reports {
        if let Some(b) = &r.breakdown {
            let cells: String = b
                .figures()
                .iter()
                .zip(WIDTHS)
                .map(|(v, w)| format!(" {v:>w$.1}"))
                .collect();
            let _ = writeln!(out, "{:<10}{cells}", r.source.to_string());
        }
    }
}

/// One `--json` line: the names scripts rely on, then the extras. `extra` is appended as is
/// (a leading comma and more members, or empty).
pub fn json(r: &SourceReport, extra: &str) -> String {
    let s = &r.lateness;
    let mut line = format!(
        "{{\"source\":\"{}\",\"samples\":{},\"early\":{},\"min_us\":{:.3},\"avg_us\":{:.3},\"p50_us\":{:.3},\"p90_us\":{:.3},\"p99_us\":{:.3},\"p999_us\":{:.3},\"max_us\":{:.3}",
        r.source, s.samples, s.early, s.min_us, r.avg_us, s.p50_us, s.p90_us, s.p99_us, s.p999_us, s.max_us
    );
    if let Some(b) = &r.breakdown {
        let o = r.overhead.as_ref();
        let num = |v: Option<f64>| v.map_or("null".to_string(), |v| format!("{v:.3}"));
        let spread = |s: Option<&Spread>| {
            s.map_or("null".to_string(), |s| {
                format!(
                    "{{\"blocks\":{},\"median\":{:.3},\"min\":{:.3},\"max\":{:.3}}}",
                    s.blocks, s.median, s.min, s.max
                )
            })
        };
        let _ = write!(
            line,
            ",\"overhead_p50_us\":{},\"overhead_p99_us\":{},\"overhead_p50_blocks_us\":{},\"overhead_p99_blocks_us\":{}",
            num(o.map(|o| o.p50_us)),
            num(o.map(|o| o.p99_us)),
            spread(o.map(|o| &o.p50_blocks)),
            spread(o.map(|o| &o.p99_blocks)),
        );
        for (name, v) in Split::NAMES.iter().zip(b.figures()) {
            let _ = write!(line, ",\"{name}\":{v:.3}");
        }
    }
    line.push_str(extra);
    line.push('}');
    line
}
