//! `backoffd demo`: everything backoffd does, on loopback, with no setup, in well under a
//! minute. It runs the real components on the real reactor and checks what they did.
//!
//! Phase 1 (CoAP): the proxy in front of a deliberately lossy upstream; a client sends a burst
//! of requests. Checked: every request got one final answer, no request was executed twice.
//! Phase 2 (backoff): the reconnect interop server and client in one reactor, with a short
//! maximum backoff. Checked: the server's verdict is `passed`.
//! Phase 3 (timers): a short timer-bench of the reactor's precise wake-ups, beside the bare
//! kernel's `clock_nanosleep` in the same run.

mod burst;
mod phases;
mod upstream;

use std::time::{Duration, Instant};

use super::flags::{value, Flags, Parsed, Spec, UsageError};
use super::timer_bench::harness::{self as timer_bench, Options, Schedule};
use super::timer_bench::{host, report};
use phases::{run_backoff_phase, run_coap_phase, BackoffReport, CoapReport};

pub const HELP: &str = "\
Usage: backoffd demo [options]

Shows what backoffd does, on loopback, with no setup: the CoAP proxy in front of a lossy
upstream with a burst of client requests, and the reactor's timer precision. Prints a report
and exits 0 only if every check passed. Takes a few seconds.

Options:
  --requests N   CoAP requests in the burst (default 200)
  --loss F       upstream datagram loss each way, 0 <= F < 1 (default 0.2)
  --seed N       seed for loss, jitter and tokens (default 1)
  -h, --help     this help
";

const SPEC: &[Spec] = &[value("requests"), value("loss"), value("seed")];

/// Runs the demo; returns the process exit code.
pub fn main(args: &[String]) -> Result<i32, UsageError> {
    let Some((requests, loss, seed)) = parse(args)?.or_print_help(HELP) else {
        return Ok(0);
    };
    if std::env::var_os("RUST_LOG").is_none() {
        // The report is the demo's output; component logs only when asked for (RUST_LOG=info).
        log::set_max_level(log::LevelFilter::Warn);
    }
    let started = Instant::now();
    println!("backoffd demo: the real components on the real event loop, loopback only.\n");
    let coap = match run_coap_phase(requests, loss, seed) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("backoffd demo: CoAP phase failed to start: {e}");
            return Ok(1);
        }
    };
    print_coap(&coap, loss);
    let backoff = match run_backoff_phase(2000, Duration::from_secs(9), seed) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("backoffd demo: backoff phase failed to start: {e}");
            return Ok(1);
        }
    };
    let backoff_ok = print_backoff(&backoff);
    let timers_ok = match timer_phase(seed) {
        Ok(ok) => ok,
        Err(e) => {
            eprintln!("backoffd demo: timer phase failed: {e}");
            return Ok(1);
        }
    };
    let passed = coap.passed() && backoff_ok && timers_ok;
    println!(
        "\nResult: {} in {:.1} s",
        if passed { "PASSED" } else { "FAILED" },
        started.elapsed().as_secs_f64()
    );
    Ok(if passed { 0 } else { 1 })
}

/// Parses and validates the command line: (requests, loss, seed).
pub(super) fn parse(args: &[String]) -> Result<Parsed<(usize, f64, u64)>, UsageError> {
    let flags = Flags::parse(args, SPEC)?;
    if flags.help {
        return Ok(Parsed::Help);
    }
    let requests: usize = flags.get_or("requests", 200)?;
    if !(1..=60_000).contains(&requests) {
        return Err(UsageError("--requests must be between 1 and 60000".into()));
    }
    let loss: f64 = flags.get_or("loss", 0.2)?;
    if !(0.0..1.0).contains(&loss) {
        return Err(UsageError("--loss must be >= 0 and < 1".into()));
    }
    let seed: u64 = flags.get_or("seed", 1)?;
    Ok(Parsed::Run((requests, loss, seed)))
}

fn print_coap(r: &CoapReport, loss: f64) {
    let c = &r.proxy;
    println!(
        "CoAP proxy: {} confirmable requests (every third a POST); the upstream loses {:.0}% of \
         datagrams each way, the client {:.0}% of the proxy's",
        r.requests,
        loss * 100.0,
        loss * 50.0
    );
    println!(
        "  answered 2.xx                         {:>6}",
        r.answered_2xx
    );
    println!(
        "  answered 5.04 (upstream gave up)      {:>6}",
        r.gateway_timeouts
    );
    println!(
        "  other answers                         {:>6}",
        r.other_codes
    );
    println!(
        "  never answered                        {:>6}   (must be 0)",
        r.unanswered
    );
    println!(
        "  client retransmissions                {:>6}",
        r.client_retransmissions
    );
    println!(
        "  ... absorbed by the proxy (duplicates) {:>5}   (never forwarded)",
        c.traffic.client_duplicates
    );
    println!(
        "  proxy retransmissions upstream        {:>6}",
        c.traffic.upstream_retransmissions
    );
    println!(
        "  datagrams the upstream leg lost       {:>6}",
        r.upstream_dropped
    );
    println!(
        "  upstream replays of cached answers    {:>6}",
        r.upstream_replays
    );
    println!(
        "  requests executed twice upstream      {:>6}   (must be 0)",
        r.duplicate_executions
    );
    println!(
        "  answers kept after the run            {:>6}   (for retransmissions, freed by their deadline)",
        c.kept.cached_answers
    );
    println!(
        "  exchanges still being worked on       {:>6}",
        c.load.live_exchanges
    );
}

fn print_backoff(r: &BackoffReport) -> bool {
    println!(
        "\ngRPC connection backoff: reconnect_interop_client against reconnect_interop_server, \
         max backoff {} ms, TLS attempts to the retry port",
        r.max_backoff_ms
    );
    match &r.result {
        Ok((passed, backoff_ms)) => {
            let mut expected = 1000.0f64;
            println!("  interval  observed  expected  allowed");
            for (i, b) in backoff_ms.iter().enumerate() {
                let (lo, hi) = (expected * 0.8 - 100.0, expected * 1.2 + 100.0);
                let ok = (lo..=hi).contains(&f64::from(*b));
                println!(
                    "  {:>8}  {:>6} ms  {:>6.0} ms  [{lo:.0}, {hi:.0}] {}",
                    i + 1,
                    b,
                    expected,
                    if ok { "ok" } else { "OUT OF RANGE" }
                );
                expected = (expected * 1.6).min(f64::from(r.max_backoff_ms));
            }
            println!("  server verdict: passed={passed}");
            *passed
        }
        Err(why) => {
            println!("  FAILED: {why}");
            false
        }
    }
}

/// A short timer-bench: the reactor's wake-up lateness per source, beside the bare kernel's
/// (`clock_nanosleep`) measured in the same run, and what the loop adds to it.
fn timer_phase(seed: u64) -> std::io::Result<bool> {
    let mut options = Options {
        timers: 2000,
        schedule: Schedule::Random {
            min: Duration::from_micros(100),
            max: Duration::from_millis(20),
            inflight: 64,
        },
        seed,
        ..Options::default()
    };
    options
        .sources
        .retain(|&s| timer_bench::available(s).unwrap_or(false));
    // Even for all: the default 50 us slack pads every sleep but timerfd's.
    let slack = host::timer_slack();
    let evened = host::set_timer_slack(1).is_ok();
    println!(
        "\nTimer wake-ups: {} timers per source, deadlines 0.1..20 ms ahead, interleaved in rounds, timer slack {}",
        options.timers,
        if evened { "1 ns" } else { "left at the default" }
    );
    let samples = timer_bench::run(&options);
    if evened {
        let _ = host::set_timer_slack(slack);
    }
    let reports = report::analyse(&samples?);
    for r in &reports {
        let s = &r.lateness;
        let added = match (&r.overhead, &r.breakdown) {
            (Some(o), Some(b)) => format!(
                "   over nanosleep p50 {:+.1} us, p99 {:+.1} us (kernel p50 {:.1}, dispatch p50 {:.1})",
                o.p50_us, o.p99_us, b.kernel.p50_us, b.dispatch.p50_us
            ),
            _ => "   (the bare-kernel baseline)".to_string(),
        };
        println!(
            "  {:<9} lateness p50 {:>7.1} us   p99 {:>8.1} us   max {:>8.1} us   early {}{added}",
            r.source.to_string(),
            s.p50_us,
            s.p99_us,
            s.max_us,
            s.early
        );
    }
    Ok(reports.iter().all(|r| r.lateness.early == 0))
}
