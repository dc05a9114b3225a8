//! Metrics in the Prometheus text exposition format (version 0.0.4).
//!
//! Every component that has something to report is a [`MetricsSource`]. Whoever assembles the
//! components (the command line) shares those with the [`MetricsServer`], which asks each to
//! describe itself into one [`MetricsWriter`] when a scrape arrives, after the loop's own
//! statistics ([`write_loop_metrics`]). Nothing is locked or copied ahead: metrics are read
//! from the components' own state, between their callbacks (the loop is single-threaded).

pub mod routes;
mod server;

use std::cell::RefCell;
use std::fmt::Write;
use std::rc::Rc;

use crate::reactor::LoopStats;
pub use server::{MetricsConfig, MetricsServer, DEFAULT_ADDR};

/// A part of the program a scrape reports on.
pub trait MetricsSource {
    /// Describes its counters and gauges.
    fn write_metrics(&self, out: &mut MetricsWriter);
}

/// A component shared with the loop ([`crate::reactor::Component`] is implemented for
/// `Rc<RefCell<T>>`): read between its callbacks, so the borrow cannot fail.
impl<T: MetricsSource> MetricsSource for RefCell<T> {
    fn write_metrics(&self, out: &mut MetricsWriter) {
        self.borrow().write_metrics(out)
    }
}

/// The sources one metrics endpoint reports on, in the order they are written.
pub type MetricsSources = Vec<Rc<dyn MetricsSource>>;

/// The event loop's own metrics: its timers and how late they fire.
pub fn write_loop_metrics(stats: LoopStats<'_>, out: &mut MetricsWriter) {
    out.gauge(
        "backoffd_timer_wheel_timers",
        "Timers pending in the reactor's wheel.",
        stats.timers as f64,
    );
    stats.lateness.write(
        out,
        "backoffd_timer_lateness_seconds",
        "How late reactor timers were dispatched (dispatch time minus deadline).",
    );
    stats.turns.write(
        out,
        "backoffd_reactor_turn_seconds",
        "How long each turn of the reactor took, from its wake-up to its last callback.",
    );
}

/// Builds one exposition document. Each metric family is written once, with HELP and TYPE.
#[derive(Default)]
pub struct MetricsWriter {
    out: String,
}

impl MetricsWriter {
    /// An empty document.
    pub fn new() -> Self {
        Self::default()
    }

    /// A monotonically increasing count.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.family(name, help, "counter");
        let _ = writeln!(self.out, "{name} {value}");
    }

    /// A value that goes up and down.
    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.family(name, help, "gauge");
        let _ = writeln!(self.out, "{name} {value}");
    }

    /// A counter family with one label, e.g. answers by code.
    pub fn labelled_counter(
        &mut self,
        name: &str,
        help: &str,
        label: &str,
        values: &[(&str, u64)],
    ) {
        self.family(name, help, "counter");
        for (v, count) in values {
            let _ = writeln!(self.out, "{name}{{{label}=\"{}\"}} {count}", escape(v));
        }
    }

    /// A counter family with several labels, e.g. HTTP requests by method and status: each
    /// row is its label values, in the order of `labels`, and its count.
    pub fn multi_labelled_counter(
        &mut self,
        name: &str,
        help: &str,
        labels: &[&str],
        rows: &[(Vec<String>, u64)],
    ) {
        self.family(name, help, "counter");
        for (values, count) in rows {
            let pairs: Vec<String> = (labels.iter().zip(values))
                .map(|(l, v)| format!("{l}=\"{}\"", escape(v)))
                .collect();
            let _ = writeln!(self.out, "{name}{{{}}} {count}", pairs.join(","));
        }
    }

    /// A gauge family with several labels: each row is its label values, in the order of
    /// `labels`, and its value.
    pub fn multi_labelled_gauge(
        &mut self,
        name: &str,
        help: &str,
        labels: &[&str],
        rows: &[(Vec<String>, f64)],
    ) {
        self.family(name, help, "gauge");
        for (values, value) in rows {
            let pairs: Vec<String> = (labels.iter().zip(values))
                .map(|(l, v)| format!("{l}=\"{}\"", escape(v)))
                .collect();
            let _ = writeln!(self.out, "{name}{{{}}} {value}", pairs.join(","));
        }
    }

    /// A gauge family with one label, e.g. endpoints per upstream.
    pub fn labelled_gauge(&mut self, name: &str, help: &str, label: &str, values: &[(&str, f64)]) {
        self.family(name, help, "gauge");
        for (v, value) in values {
            let _ = writeln!(self.out, "{name}{{{label}=\"{}\"}} {value}", escape(v));
        }
    }

    /// A histogram from cumulative `(upper bound, count)` buckets (the last one is `+Inf`).
    pub fn histogram(
        &mut self,
        name: &str,
        help: &str,
        buckets: &[(f64, u64)],
        sum: f64,
        count: u64,
    ) {
        self.family(name, help, "histogram");
        for (le, c) in buckets {
            let le = if le.is_infinite() {
                "+Inf".to_string()
            } else {
                le.to_string()
            };
            let _ = writeln!(self.out, "{name}_bucket{{le=\"{le}\"}} {c}");
        }
        let _ = writeln!(self.out, "{name}_sum {sum}");
        let _ = writeln!(self.out, "{name}_count {count}");
    }

    /// The finished document.
    pub fn finish(self) -> String {
        self.out
    }

    fn family(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(
            self.out,
            "# HELP {name} {}",
            help.replace('\\', "\\\\").replace('\n', "\\n")
        );
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }
}

/// Label values escape backslash, double quote and newline.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

use crate::stats::LatencyHistogram;

impl LatencyHistogram {
    /// Writes it in seconds, as Prometheus conventions ask.
    pub fn write(&self, w: &mut MetricsWriter, name: &str, help: &str) {
        let mut cumulative = 0;
        let mut buckets: Vec<(f64, u64)> = self
            .buckets
            .iter()
            .enumerate()
            .take(self.buckets.len() - 1)
            .map(|(i, c)| {
                cumulative += c;
                (crate::stats::upper_bound_us(i) / 1e6, cumulative)
            })
            .collect();
        buckets.push((f64::INFINITY, self.count));
        w.histogram(name, help, &buckets, self.sum_us / 1e6, self.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_help_type_and_samples() {
        let mut w = MetricsWriter::new();
        w.counter("a_total", "things", 3);
        w.labelled_counter("b_total", "by code", "code", &[("5.04", 2), ("we\"ird", 1)]);
        let text = w.finish();
        assert!(text.contains("# HELP a_total things\n# TYPE a_total counter\na_total 3\n"));
        assert!(text.contains("b_total{code=\"5.04\"} 2\n"));
        assert!(text.contains("b_total{code=\"we\\\"ird\"} 1\n"));
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_inf() {
        let mut h = LatencyHistogram::default();
        for ns in [500, 1_500, 3_000, 1_000_000] {
            h.record_nanos(ns);
        }
        let mut w = MetricsWriter::new();
        h.write(&mut w, "lat_seconds", "lateness");
        let text = w.finish();
        assert!(
            text.contains("lat_seconds_bucket{le=\"0.000001\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("lat_seconds_bucket{le=\"0.0000015\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("lat_seconds_bucket{le=\"0.000003\"} 3\n"),
            "{text}"
        );
        assert!(text.contains("lat_seconds_bucket{le=\"+Inf\"} 4\n"));
        assert!(text.contains("lat_seconds_count 4\n"));
    }
}
