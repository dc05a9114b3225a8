//! Retry timers under load: how late the proxy's retransmissions go while the same loop
//! carries LOAD x its CON peak (issue 26). The timer wheel and the reactor exist for this.
//!
//! A `backoffd proxy` with default flags and a metrics endpoint takes open-loop CON GETs at
//! the rate; the upstream drops the first transmission of one request in [`DROP_EVERY`], so
//! the proxy's retransmission timers (2-3 s, RFC 7252 §4.2) fire in the middle of the load. The
//! proxy's histograms are read right before and right after the run; their difference gives:
//!
//! - `backoffd_coap_retransmit_lateness_seconds`: each retransmission, handled minus due (the
//!   whole way: kernel wake-up, the loop's other work, the engine's wheel);
//! - `backoffd_timer_lateness_seconds`: the reactor's timers (the proxy arms one, at its
//!   earliest deadline);
//! - `backoffd_reactor_turn_seconds`: how long each turn of the loop took (a stall shows here).
//!
//! The histograms have 4 buckets per power of two; a percentile is reported as the upper bound
//! of the bucket it falls in ("at most").

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use super::common::exposition::scrape;
use super::common::free_port;
use super::loadgen::{FastUpstream, LoadReport, Offered};
use super::{run_seen, spec, start, steal, Seen, Settings, Target, TARGET_CPU};
use backoffd::coap::option::URI_PATH;

/// One request in this many loses its first transmission upstream. Each stays in flight until
/// its retransmission is answered, 2-3 s later, and the generator is one client: at 1 in 2,000
/// its requests in flight stay well within the default per-client cap (256), so every other
/// request is still forwarded at once.
pub const DROP_EVERY: u64 = 2000;

/// The run's measured period: long enough for about 500 retransmissions at 50k/s.
const MEASURED: Duration = Duration::from_secs(20);

/// What one timer run found.
pub struct TimerRun {
    pub rate: f64,
    pub report: LoadReport,
    /// First transmissions the upstream dropped during the run.
    pub dropped: u64,
    /// Steal time of the target CPU during the run.
    pub stolen: Duration,
    pub retransmit: Percentiles,
    pub reactor_timers: Percentiles,
    pub turns: Percentiles,
}

/// Samples in a histogram's difference, and the bucket bounds (µs) of its p50, p99 and p99.9.
pub struct Percentiles {
    pub samples: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
}

/// Starts the timer target, runs it at `rate` for [`MEASURED`] with the upstream dropping first transmissions,
/// and reads the histograms around the run.
pub fn run(
    rate: f64,
    up: SocketAddr,
    upstream: &mut FastUpstream,
    settings: &Settings,
    pinned: bool,
    logs: &Path,
) -> Result<TimerRun, String> {
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let bin = env!("CARGO_BIN_EXE_backoffd");
    let argv =
        format!("{bin} proxy --listen 127.0.0.1:{{port}} --upstream {up} --metrics {metrics}");
    let target = Target {
        name: "backoffd-timers",
        command: Some(argv.split_whitespace().map(str::to_owned).collect()),
        options: vec![(URI_PATH, b"bench".to_vec())],
    };
    let running = start(&target, up, upstream, settings, pinned, logs)?;
    if let Some(child) = &running.child {
        child.set_running(true);
    }
    let mut load = spec(
        settings,
        true,
        Offered::Rate(rate),
        running.addr,
        &target.options,
    );
    // Answers that needed a retransmission come 2-3 s late: they count as lost here, and a
    // short timeout ends the run soon after the load, before the loop goes idle.
    load.timeout = Duration::from_millis(100);
    load.duration = MEASURED;
    let before = scrape(metrics);
    upstream.drop_first_of(Some(DROP_EVERY));
    let stolen_before = steal(TARGET_CPU);
    let report = run_seen(&load, upstream, &mut Seen::default())?;
    let stolen = steal(TARGET_CPU).saturating_sub(stolen_before);
    let after = scrape(metrics);
    let dropped = upstream.first_drops();
    for (series, n) in &after.samples {
        let was = before.samples.get(series).copied().unwrap_or(0.0);
        let interesting = ["answers_total{", "refusals_total{", "dropped", "send_drops"];
        if n - was > 0.0 && interesting.iter().any(|i| series.contains(i)) {
            eprintln!("timer run: {series} +{}", n - was);
        }
    }
    upstream.drop_first_of(None);
    let diff = |name: &str| Percentiles::of(&after.histogram(name), &before.histogram(name));
    Ok(TimerRun {
        rate,
        report,
        dropped,
        stolen,
        retransmit: diff("backoffd_coap_retransmit_lateness_seconds"),
        reactor_timers: diff("backoffd_timer_lateness_seconds"),
        turns: diff("backoffd_reactor_turn_seconds"),
    })
}

impl Percentiles {
    /// From the cumulative buckets after and before a run (the same bounds, sorted).
    fn of(after: &[(f64, f64)], before: &[(f64, f64)]) -> Percentiles {
        let diff: Vec<(f64, f64)> = (after.iter().zip(before))
            .map(|(&(le, n), &(_, was))| (le * 1e6, n - was))
            .collect();
        let samples = diff.last().map_or(0.0, |&(_, n)| n);
        let at = |q: f64| {
            (diff.iter())
                .find(|&&(_, n)| n >= q * samples && samples > 0.0)
                .map_or(f64::NAN, |&(le, _)| le)
        };
        Percentiles {
            samples: samples as u64,
            p50_us: at(0.5),
            p99_us: at(0.99),
            p999_us: at(0.999),
        }
    }
}

/// The table for docs/benchmarks.md.
pub fn print(run: &TimerRun, settings: &Settings) {
    println!(
        "\n### Retry timers under load (backoffd, open loop at {:.0} % of its median CON peak; the upstream drops the first transmission of 1 request in {DROP_EVERY}; bucket bounds, so \"at most\")\n",
        settings.load * 100.0
    );
    println!("| rate req/s | first transmissions dropped | what | samples | p50 | p99 | p99.9 |");
    println!("|---:|---:|---|---:|---:|---:|---:|");
    for (what, p) in [
        ("retransmissions: handled minus due", &run.retransmit),
        ("reactor timers: dispatched minus due", &run.reactor_timers),
        ("loop turns: length", &run.turns),
    ] {
        println!(
            "| {:.0} | {} | {what} | {} | {} us | {} us | {} us |",
            run.rate, run.dropped, p.samples, p.p50_us, p.p99_us, p.p999_us
        );
    }
    println!(
        "\n{} requests answered 2.xx within 100 ms, {} answered otherwise, {} later or never (the dropped ones are answered after their retransmission, 2-3 s on). The hypervisor took the target CPU away for {} ms during the run ({} s measured).",
        run.report.answered,
        run.report.errors,
        run.report.lost,
        run.stolen.as_millis(),
        MEASURED.as_secs()
    );
}
