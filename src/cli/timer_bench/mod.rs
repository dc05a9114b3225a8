//! `backoffd timer-bench`: how late the reactor dispatches its timers on this host, and how much
//! of that the event loop adds on top of a bare `clock_nanosleep`, measured in the same run.
//!
//! Rooms: `harness` (the sources and their samples), `host` (cyclictest's knobs), `report`
//! (percentiles, overhead, breakdown, JSON), `cyclic` (cyclictest's output formats), `plot`
//! (the SVG histogram). This file reads the command line and puts them together.

mod cyclic;
pub mod harness;
pub mod host;
pub mod plot;
pub mod report;
#[cfg(test)]
mod tests;

use std::time::Duration;

use super::flags::{switch, value, DurationArg, Flags, Parsed, Spec, UsageError};
use cyclic::Histogram;
use harness::{Options, Schedule, Source, SourceSamples};
use host::{InEffect, Wanted};
use report::SourceReport;

pub const HELP: &str = "\
Usage: backoffd timer-bench [options]

Runs the real reactor with timers and reports how late each one's callback ran (callback time -
deadline), per wake-up source, beside a bare clock_nanosleep(TIMER_ABSTIME) loop (cyclictest's
method) measured interleaved in the same run, on the same CPU and under the same policy. For the
reactor, each sample's lateness is split into the kernel's wake-up (deadline to the wait's
return) and the loop's dispatch (the wait's return to the callback).

Schedule (random deadlines by default, or periodic like cyclictest):
  --timers N, --loops N  samples per source (default 10000)
  --min D               shortest deadline ahead, e.g. 100us (default 100us)
  --max D               longest deadline ahead, e.g. 50ms (default 50ms)
  --inflight N          timers pending at once (default 64)
  --interval D          periodic instead: one timer, due every D (cyclictest -i); a wake-up
                        later than whole periods skips them
Sources:
  --wake LIST           comma-separated timerfd, epoll, pwait2, nanosleep, or all (default all);
                        pwait2 needs Linux 5.11+ and is left out with a warning elsewhere
  --round N             samples per source before switching source (default 500, or
                        50 with --interval)
Host (cyclictest's knobs; each one this process may not have is a warning, not an error):
  --mlockall            lock all memory (the default, as cyclictest -m); --no-mlockall: don't
  --affinity CPU        pin to CPU (cyclictest -a)
  --fifo-priority P     run under SCHED_FIFO priority P, 1..99 (cyclictest -p)
  --timerslack-ns NS    set PR_SET_TIMERSLACK (kernel default 50000; pads nanosleep, epoll
                        and pwait2 sleeps under SCHED_OTHER, not timerfd)
  --no-dma-latency      do not hold /dev/cpu_dma_latency at 0 us during the run (held by
                        default, as cyclictest does)
Output:
  --histogram N         a 1 us-bucket histogram of N buckets in cyclictest's -h layout
  --json                one JSON object per source and line instead of the tables
  --plot FILE.svg       an SVG latency histogram, log-count scale, one series per source
  --seed N              random seed (default 1)
  -h, --help            this help

Exit status: 0 on success, 1 if any timer fired early, 2 on a usage error.
";

const SPEC: &[Spec] = &[
    value("timers"),
    value("loops"),
    value("min"),
    value("max"),
    value("inflight"),
    value("interval"),
    value("wake"),
    value("round"),
    switch("mlockall"),
    switch("no-mlockall"),
    value("affinity"),
    value("fifo-priority"),
    value("timerslack-ns"),
    switch("no-dma-latency"),
    value("histogram"),
    switch("json"),
    value("plot"),
    value("seed"),
];

/// A parsed and validated `timer-bench` command line.
pub(super) struct BenchArgs {
    options: Options,
    host: Wanted,
    histogram: Option<usize>,
    plot: Option<String>,
    json: bool,
}

/// Runs the subcommand; returns the process exit code.
pub fn main(args: &[String]) -> Result<i32, UsageError> {
    let Some(mut a) = parse(args)?.or_print_help(HELP) else {
        return Ok(0);
    };
    a.options.sources.retain(|&s| is_available(s));
    if a.options.sources.is_empty() {
        eprintln!("backoffd timer-bench: none of the sources asked for can run here");
        return Ok(1);
    }
    // Opened before the run, so that a path that cannot be written costs no measurement.
    let plot_file = match a.plot.as_deref().map(std::fs::File::create).transpose() {
        Ok(file) => file,
        Err(e) => {
            eprintln!("backoffd timer-bench: --plot: {e}");
            return Ok(1);
        }
    };
    let (effect, warnings) = host::apply(&a.host);
    warnings.iter().for_each(|w| warn(w));
    if !a.json {
        print!("{}", header(&a.options, &effect));
    }
    let samples = match harness::run(&a.options) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("backoffd timer-bench: {e}");
            return Ok(1);
        }
    };
    let reports = report::analyse(&samples);
    print!("{}", output(&a, &effect, &samples, &reports));
    if let Some(file) = plot_file {
        if let Err(e) = write_plot(file, &samples) {
            eprintln!("backoffd timer-bench: --plot: {e}");
            return Ok(1);
        }
    }
    let early: usize = reports.iter().map(|r| r.lateness.early).sum();
    if early > 0 {
        eprintln!("backoffd timer-bench: {early} timers fired before their deadline");
        return Ok(1);
    }
    Ok(0)
}

fn warn(what: &str) {
    eprintln!("backoffd timer-bench: warning: {what}");
}

/// Whether this kernel has `source`; if not, a warning says that it is left out.
fn is_available(source: Source) -> bool {
    match harness::available(source) {
        Ok(true) => true,
        Ok(false) => {
            warn(&format!(
                "{source} is not available on this kernel; left out"
            ));
            false
        }
        Err(e) => {
            warn(&format!("{source} cannot be set up ({e}); left out"));
            false
        }
    }
}

/// Parses and validates the command line; changes nothing about the process yet.
pub(super) fn parse(args: &[String]) -> Result<Parsed<BenchArgs>, UsageError> {
    let flags = Flags::parse(args, SPEC)?;
    if flags.help {
        return Ok(Parsed::Help);
    }
    let schedule = schedule(&flags)?;
    let options = Options {
        timers: samples_per_source(&flags)?,
        schedule,
        sources: sources(&flags)?,
        round: positive(&flags, "round", default_round(&schedule))?,
        seed: flags.get_or("seed", Options::default().seed)?,
    };
    if flags.has("mlockall") && flags.has("no-mlockall") {
        return Err(UsageError(
            "--mlockall and --no-mlockall contradict each other".into(),
        ));
    }
    let host = Wanted {
        mlockall: !flags.has("no-mlockall"),
        affinity: flags.get("affinity")?,
        fifo_priority: in_range(&flags, "fifo-priority", 1..=99)?,
        timerslack_ns: in_range(&flags, "timerslack-ns", 1..=u64::MAX)?,
        dma_latency: !flags.has("no-dma-latency"),
    };
    Ok(Parsed::Run(BenchArgs {
        options,
        host,
        histogram: in_range(&flags, "histogram", 1..=1_000_000)?,
        plot: flags.get("plot")?,
        json: flags.has("json"),
    }))
}

/// Random deadlines keep `inflight` timers pending, which wants rounds well above it; one
/// periodic timer does not, and short rounds spread the host's bursts of noise over every
/// source alike (50 at 1 ms: each source's turn lasts 50 ms).
fn default_round(schedule: &Schedule) -> usize {
    match schedule {
        Schedule::Random { .. } => Options::default().round,
        Schedule::Periodic { .. } => 50,
    }
}

fn samples_per_source(flags: &Flags) -> Result<usize, UsageError> {
    if flags.has("timers") && flags.has("loops") {
        return Err(UsageError(
            "--timers and --loops are the same setting; give one".into(),
        ));
    }
    let name = if flags.has("loops") {
        "loops"
    } else {
        "timers"
    };
    positive(flags, name, Options::default().timers)
}

fn schedule(flags: &Flags) -> Result<Schedule, UsageError> {
    if let Some(DurationArg(interval)) = flags.get("interval")? {
        if let Some(other) = ["min", "max", "inflight"].iter().find(|f| flags.has(f)) {
            return Err(UsageError(format!(
                "--{other} is for random deadlines; --interval makes them periodic"
            )));
        }
        if interval < Duration::from_micros(1) {
            return Err(UsageError("--interval must be at least 1us".into()));
        }
        return Ok(Schedule::Periodic { interval });
    }
    let Schedule::Random { min, max, inflight } = Options::default().schedule else {
        unreachable!("the default schedule is random");
    };
    let min = flags.get_or("min", DurationArg(min))?.0;
    let max = flags.get_or("max", DurationArg(max))?.0;
    if min > max {
        return Err(UsageError("--min must not exceed --max".into()));
    }
    let inflight = positive(flags, "inflight", inflight)?;
    Ok(Schedule::Random { min, max, inflight })
}

fn sources(flags: &Flags) -> Result<Vec<Source>, UsageError> {
    let list = flags.get::<String>("wake")?;
    let wake_error = |e: String| UsageError(format!("--wake: {e}"));
    let mut sources: Vec<Source> = Vec::new();
    for name in list.as_deref().unwrap_or("all").split(',') {
        let named = match name.trim() {
            "all" => Source::ALL.to_vec(),
            one => vec![one.parse().map_err(wake_error)?],
        };
        for source in named {
            if !sources.contains(&source) {
                sources.push(source);
            }
        }
    }
    Ok(sources)
}

fn positive(flags: &Flags, name: &str, default: usize) -> Result<usize, UsageError> {
    match flags.get_or(name, default)? {
        0 => Err(UsageError(format!("--{name} must be at least 1"))),
        n => Ok(n),
    }
}

fn in_range<T>(
    flags: &Flags,
    name: &str,
    range: std::ops::RangeInclusive<T>,
) -> Result<Option<T>, UsageError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
    T::Err: std::fmt::Display,
{
    match flags.get::<T>(name)? {
        Some(v) if !range.contains(&v) => Err(UsageError(format!(
            "--{name} must be between {} and {}",
            range.start(),
            range.end()
        ))),
        v => Ok(v),
    }
}

/// What is measured and under what, before the run.
fn header(o: &Options, effect: &InEffect) -> String {
    let names: Vec<String> = o.sources.iter().map(Source::to_string).collect();
    let schedule = match o.schedule {
        Schedule::Random { min, max, inflight } => {
            format!("due {min:?}..{max:?} after they are set, {inflight} in flight")
        }
        Schedule::Periodic { interval } => format!("periodic, every {interval:?}"),
    };
    let mut out = format!(
        "timer-bench: {} timers per source, {schedule}; sources {} interleaved in rounds of {}\nin effect: {}\n",
        o.timers,
        names.join(", "),
        o.round,
        effect.describe()
    );
    let slack_pads = effect.fifo_priority.is_none() && effect.timerslack_ns > 1;
    if slack_pads && o.sources.contains(&Source::Nanosleep) {
        out.push_str(&format!(
            "note: under SCHED_OTHER the {} ns timer slack pads nanosleep, epoll and pwait2 sleeps, not timerfd's (--timerslack-ns 1 evens them)\n",
            effect.timerslack_ns
        ));
    }
    out.push('\n');
    out
}

/// The report: JSON lines, or the tables, cyclictest's summary lines and its histogram.
fn output(
    a: &BenchArgs,
    effect: &InEffect,
    samples: &[SourceSamples],
    reports: &[SourceReport],
) -> String {
    let hists: Vec<Histogram> = match a.histogram {
        Some(n) => samples
            .iter()
            .map(|s| Histogram::of(&s.lateness_ns, n))
            .collect(),
        None => Vec::new(),
    };
    if a.json {
        let mut out = String::new();
        for (i, (r, s)) in reports.iter().zip(samples).enumerate() {
            let mut extra = format!(",\"rounds\":{}", s.round_ends.len());
            if let Some(h) = hists.get(i) {
                extra.push_str(&format!(",\"histogram\":{}", h.json()));
            }
            extra.push_str(&format!(
                ",\"schedule\":{}",
                schedule_json(&a.options.schedule)
            ));
            extra.push_str(&format!(",\"in_effect\":{}", effect.json()));
            out.push_str(&report::json(r, &extra));
            out.push('\n');
        }
        return out;
    }
    let mut out = report::text(reports);
    out.push('\n');
    let interval = match a.options.schedule {
        Schedule::Periodic { interval } => interval.as_micros().to_string(),
        Schedule::Random { min, max, .. } => format!("{}-{}", min.as_micros(), max.as_micros()),
    };
    for (i, (r, s)) in reports.iter().zip(samples).enumerate() {
        let priority = effect.fifo_priority.unwrap_or(0);
        let last = s.lateness_ns.last().copied().unwrap_or(0);
        out.push_str(&cyclic::summary_line(i, r, priority, &interval, last));
        out.push('\n');
    }
    if !hists.is_empty() {
        out.push_str(&cyclic::histogram_text(reports, &hists));
    }
    out
}

/// The schedule as a JSON object, so that a line says what it measured.
fn schedule_json(schedule: &Schedule) -> String {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    match *schedule {
        Schedule::Random { min, max, inflight } => format!(
            "{{\"mode\":\"random\",\"min_us\":{:.3},\"max_us\":{:.3},\"inflight\":{inflight}}}",
            us(min),
            us(max)
        ),
        Schedule::Periodic { interval } => format!(
            "{{\"mode\":\"periodic\",\"interval_us\":{:.3}}}",
            us(interval)
        ),
    }
}

fn write_plot(mut file: std::fs::File, samples: &[SourceSamples]) -> std::io::Result<()> {
    let names: Vec<String> = samples.iter().map(|s| s.source.to_string()).collect();
    let series: Vec<plot::Series<'_>> = samples
        .iter()
        .zip(&names)
        .map(|(s, name)| plot::Series {
            name,
            lateness_ns: &s.lateness_ns,
        })
        .collect();
    let svg = plot::svg("backoffd timer-bench: timer lateness", &series);
    std::io::Write::write_all(&mut file, svg.as_bytes())
}
