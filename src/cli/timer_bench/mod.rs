//! `backoffd timer-bench`: measure wake-up precision of the reactor on this host.

pub mod harness;

use super::flags::{switch, value, DurationArg, Flags, Parsed, Spec, UsageError};
use backoffd::reactor::WakeMode;
use backoffd::stats::{log2_histogram, Summary};
use harness::{self as timer_bench, Options};

pub const HELP: &str = "\
Usage: backoffd timer-bench [options]

Runs the real reactor with many timers at random deadlines and reports how late each one was
dispatched (actual dispatch time - deadline), like cyclictest, per wake-up source.

Options:
  --timers N            timers measured per source (default 10000)
  --min D               shortest deadline ahead, e.g. 100us (default 100us)
  --max D               longest deadline ahead, e.g. 50ms (default 50ms)
  --inflight N          timers pending at once (default 64)
  --wake SRC            timerfd, epoll or both (default both, measured interleaved)
  --round N             samples per source before switching source (default 500)
  --timerslack-ns NS    set PR_SET_TIMERSLACK for the run (kernel default: 50000)
  --fifo-priority P     run under SCHED_FIFO priority P (1..99), like cyclictest -p;
                        needs root or CAP_SYS_NICE
  --seed N              random seed (default 1)
  --json                one JSON object per source and line instead of the table
  -h, --help            this help

Exit status: 0 on success, 1 if any timer fired early, 2 on a usage error.
";

const SPEC: &[Spec] = &[
    value("timers"),
    value("min"),
    value("max"),
    value("inflight"),
    value("wake"),
    value("round"),
    value("timerslack-ns"),
    value("fifo-priority"),
    value("seed"),
    switch("json"),
];

/// A parsed and validated `timer-bench` command line.
pub(super) struct BenchArgs {
    options: Options,
    timerslack_ns: Option<u64>,
    fifo_priority: Option<i32>,
    json: bool,
}

/// Runs the subcommand; returns the process exit code.
pub fn main(args: &[String]) -> Result<i32, UsageError> {
    let Some(a) = parse(args)?.or_print_help(HELP) else {
        return Ok(0);
    };
    if let Some(ns) = a.timerslack_ns {
        if let Err(e) = timer_bench::set_timer_slack(ns) {
            eprintln!("backoffd timer-bench: cannot set timer slack: {e}");
            return Ok(1);
        }
    }
    if let Some(p) = a.fifo_priority {
        if let Err(e) = timer_bench::set_fifo_priority(p) {
            eprintln!("backoffd timer-bench: cannot switch to SCHED_FIFO: {e}");
            return Ok(1);
        }
    }
    let options = a.options;
    let json = a.json;
    if !json {
        println!(
            "timer-bench: {} timers per source, deadlines {:?}..{:?} ahead, {} in flight, timer slack {}, scheduler {}",
            options.timers,
            options.min,
            options.max,
            options.inflight,
            a.timerslack_ns
                .map_or("default".to_string(), |ns| format!("{ns} ns")),
            a.fifo_priority
                .map_or("default".to_string(), |p| format!("SCHED_FIFO {p}"))
        );
    }
    let results = match timer_bench::run(&options) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("backoffd timer-bench: {e}");
            return Ok(1);
        }
    };
    let mut early = 0;
    let mut report = Vec::new();
    for mut r in results {
        let summary = Summary::from_nanos(&mut r.lateness_ns);
        early += summary.early;
        report.push((r.source, summary, r.lateness_ns));
    }
    if json {
        for (source, s, _) in &report {
            println!("{}", json_line(&source.to_string(), s));
        }
    } else {
        print_table(&report);
    }
    if early > 0 {
        eprintln!("backoffd timer-bench: {early} timers fired before their deadline");
        return Ok(1);
    }
    Ok(0)
}

/// Parses and validates the command line; changes nothing about the process yet.
pub(super) fn parse(args: &[String]) -> Result<Parsed<BenchArgs>, UsageError> {
    let flags = Flags::parse(args, SPEC)?;
    if flags.help {
        return Ok(Parsed::Help);
    }
    let defaults = Options::default();
    let options = Options {
        timers: positive(&flags, "timers", defaults.timers)?,
        min: flags.get_or("min", DurationArg(defaults.min))?.0,
        max: flags.get_or("max", DurationArg(defaults.max))?.0,
        inflight: positive(&flags, "inflight", defaults.inflight)?,
        sources: match flags.get::<String>("wake")?.as_deref() {
            None | Some("both") => defaults.sources,
            Some(one) => vec![one
                .parse::<WakeMode>()
                .map_err(|e| UsageError(format!("--wake: {e} or both")))?],
        },
        round: positive(&flags, "round", defaults.round)?,
        seed: flags.get_or("seed", defaults.seed)?,
    };
    if options.min > options.max {
        return Err(UsageError("--min must not exceed --max".into()));
    }
    if let Some(ns) = flags.get::<u64>("timerslack-ns")? {
        if ns == 0 {
            return Err(UsageError(
                "--timerslack-ns must be at least 1 (0 means the default)".into(),
            ));
        }
    }
    if let Some(p) = flags.get::<i32>("fifo-priority")? {
        if !(1..=99).contains(&p) {
            return Err(UsageError(
                "--fifo-priority must be between 1 and 99".into(),
            ));
        }
    }
    Ok(Parsed::Run(BenchArgs {
        options,
        timerslack_ns: flags.get::<u64>("timerslack-ns")?,
        fifo_priority: flags.get::<i32>("fifo-priority")?,
        json: flags.has("json"),
    }))
}

fn positive(flags: &Flags, name: &str, default: usize) -> Result<usize, UsageError> {
    match flags.get_or(name, default)? {
        0 => Err(UsageError(format!("--{name} must be at least 1"))),
        n => Ok(n),
    }
}

fn print_table(report: &[(WakeMode, Summary, Vec<i64>)]) {
    println!(
        "{:<8} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}   (lateness, us)",
        "source", "samples", "early", "min", "p50", "p90", "p99", "p99.9", "max"
    );
    for (source, s, _) in report {
        println!(
            "{:<8} {:>8} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            source.to_string(),
            s.samples,
            s.early,
            s.min_us,
            s.p50_us,
            s.p90_us,
            s.p99_us,
            s.p999_us,
            s.max_us
        );
    }
    if let [(a, sa, _), (b, sb, _)] = report {
        if sa.p50_us > 0.0 {
            println!("p50 ratio {b}/{a}: {:.1}x", sb.p50_us / sa.p50_us);
        }
    }
    for (source, _, samples) in report {
        println!("\nhistogram {source}:");
        print!("{}", log2_histogram(samples, 40));
    }
}

fn json_line(source: &str, s: &Summary) -> String {
    format!(
        "{{\"source\":\"{source}\",\"samples\":{},\"early\":{},\"min_us\":{:.3},\"p50_us\":{:.3},\"p90_us\":{:.3},\"p99_us\":{:.3},\"p999_us\":{:.3},\"max_us\":{:.3}}}",
        s.samples, s.early, s.min_us, s.p50_us, s.p90_us, s.p99_us, s.p999_us, s.max_us
    )
}
