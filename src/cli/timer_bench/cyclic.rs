//! cyclictest's output formats, so that scripts written for it read timer-bench too: its
//! per-thread summary line (`T: 0 ( 1234) P:80 I:1000 C: 5000 Min: 5 Act: 10 Avg: 12 Max: 111`)
//! and its `-h N` histogram (rt-tests `cyclictest.c`, `print_hist`). Each source stands where
//! cyclictest has a thread; latencies are whole microseconds, truncated, as cyclictest's are.

use std::fmt::Write;

use super::report::SourceReport;

/// One source's latency histogram in 1 µs buckets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// `counts[k]`: samples late by `k` µs (truncated).
    pub counts: Vec<u64>,
    /// Samples late by the number of buckets or more.
    pub overflow: u64,
    /// The sample numbers ("cycles") of the first overflows, at most one per bucket as
    /// cyclictest keeps them.
    pub overflow_at: Vec<u64>,
}

impl Histogram {
    /// Buckets `lateness_ns`, given in the order measured. Early samples are not bucketed
    /// (the report counts them as `early`, and the run fails).
    pub fn of(lateness_ns: &[i64], buckets: usize) -> Histogram {
        let mut h = Histogram {
            counts: vec![0; buckets],
            overflow: 0,
            overflow_at: Vec::new(),
        };
        for (cycle, &ns) in lateness_ns.iter().enumerate() {
            if ns < 0 {
                continue;
            }
            match h.counts.get_mut((ns / 1000) as usize) {
                Some(count) => *count += 1,
                None => {
                    h.overflow += 1;
                    if h.overflow_at.len() < buckets {
                        h.overflow_at.push(cycle as u64);
                    }
                }
            }
        }
        h
    }

    fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The buckets as a JSON object.
    pub fn json(&self) -> String {
        let counts: Vec<String> = self.counts.iter().map(u64::to_string).collect();
        format!(
            "{{\"bucket_us\":1,\"counts\":[{}],\"overflow\":{}}}",
            counts.join(","),
            self.overflow
        )
    }
}

/// Whole microseconds, truncated toward zero like cyclictest's `calcdiff`.
fn whole_us(us: f64) -> i64 {
    us.trunc() as i64
}

/// cyclictest's `-h` block: one row per bucket with a column per source, then the totals,
/// min/avg/max, overflow counts and the cycles that overflowed.
pub fn histogram_text(reports: &[SourceReport], hists: &[Histogram]) -> String {
    let mut out = String::from("# Histogram\n");
    let rows = hists.iter().map(|h| h.counts.len()).max().unwrap_or(0);
    for row in 0..rows {
        let cells: Vec<String> = hists
            .iter()
            .map(|h| format!("{:06}", h.counts.get(row).copied().unwrap_or(0)))
            .collect();
        let _ = writeln!(out, "{row:06} {}", cells.join("\t"));
    }
    let line = |out: &mut String, label: &str, cells: Vec<String>| {
        let _ = writeln!(out, "# {label}: {}", cells.join(" "));
    };
    line(
        &mut out,
        "Total",
        hists.iter().map(|h| format!("{:09}", h.total())).collect(),
    );
    let per = |f: fn(&SourceReport) -> f64| {
        reports
            .iter()
            .map(|r| format!("{:05}", whole_us(f(r))))
            .collect::<Vec<_>>()
    };
    line(&mut out, "Min Latencies", per(|r| r.lateness.min_us));
    line(&mut out, "Avg Latencies", per(|r| r.avg_us));
    line(&mut out, "Max Latencies", per(|r| r.lateness.max_us));
    line(
        &mut out,
        "Histogram Overflows",
        hists.iter().map(|h| format!("{:05}", h.overflow)).collect(),
    );
    out.push_str("# Histogram Overflow at cycle number:\n");
    for (thread, h) in hists.iter().enumerate() {
        let _ = write!(out, "# Thread {thread}:");
        for cycle in &h.overflow_at {
            let _ = write!(out, " {cycle:05}");
        }
        let others = h.overflow - h.overflow_at.len() as u64;
        if others > 0 {
            let _ = write!(out, " # {others:05} others");
        }
        out.push('\n');
    }
    out
}

/// cyclictest's summary line for one source: `index` stands for the thread number, the source's
/// name for its thread id, `interval_us` for `-i` (a range in random mode).
pub fn summary_line(
    index: usize,
    r: &SourceReport,
    priority: i32,
    interval_us: &str,
    last_ns: i64,
) -> String {
    format!(
        "T:{index:2} ({:>9}) P:{priority:2} I:{interval_us} C:{:7} Min:{:7} Act:{:5} Avg:{:5} Max:{:8}",
        r.source.to_string(),
        r.lateness.samples,
        whole_us(r.lateness.min_us),
        last_ns / 1000,
        whole_us(r.avg_us),
        whole_us(r.lateness.max_us)
    )
}
