//! Wake-up precision, side by side in one run: the reactor with each of its wake-ups (timerfd,
//! the plain epoll timeout, epoll_pwait2 where the kernel has it), the bare `clock_nanosleep`
//! baseline, and `tokio::time::sleep_until` on a current-thread runtime. Rounds of each
//! alternate so machine noise hits them alike.
//!
//! Run: `cargo bench --bench wake_precision` (env TIMERS=N to change samples per source,
//! FIFO_PRIORITY=P to run under SCHED_FIFO like cyclictest -p, which needs root).

// The timer-precision harness is the `timer-bench` command's, built in from the binary's source.
#[allow(dead_code)]
#[path = "../src/cli/timer_bench/host.rs"]
mod host;
#[allow(dead_code)]
#[path = "../src/cli/timer_bench/harness.rs"]
mod timer_bench;

use std::time::{Duration, Instant};

use backoffd::stats::Summary;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use timer_bench::{Options, Schedule, Source};

const ROUND: usize = 500;

fn main() {
    // Criterion-style harnesses pass flags such as --bench; this one takes none.
    let timers: usize = std::env::var("TIMERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let fifo: Option<i32> = std::env::var("FIFO_PRIORITY")
        .ok()
        .and_then(|v| v.parse().ok());
    if let Some(p) = fifo {
        host::set_fifo_priority(p).expect("SCHED_FIFO (needs root or CAP_SYS_NICE)");
    }
    let base = Options {
        timers: ROUND,
        ..Options::default()
    };
    let Schedule::Random { min, max, inflight } = base.schedule else {
        unreachable!("the default schedule is random");
    };
    let sources: Vec<Source> = Source::ALL
        .into_iter()
        .filter(|&s| timer_bench::available(s).unwrap_or(false))
        .collect();
    let mut names: Vec<String> = sources.iter().map(|s| format!("backoffd {s}")).collect();
    names.push("tokio sleep_until".into());
    let mut samples: Vec<Vec<i64>> = vec![Vec::new(); names.len()];
    let mut seed = 1;
    while samples[sources.len()].len() < timers {
        let options = Options {
            sources: sources.clone(),
            seed,
            ..base.clone()
        };
        let rounds = timer_bench::run(&options).expect("reactor round");
        for (all, mut r) in samples.iter_mut().zip(rounds) {
            all.append(&mut r.lateness_ns);
        }
        samples[sources.len()].extend(tokio_round(ROUND, min, max, inflight, seed));
        seed += 1;
    }
    println!(
        "wake precision: {timers} timers per source, deadlines {min:?}..{max:?}, {inflight} in flight, {}",
        fifo.map_or("default scheduler".into(), |p| format!("SCHED_FIFO {p}"))
    );
    println!(
        "{:<22} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}   (lateness, us)",
        "source", "samples", "early", "p50", "p90", "p99", "p99.9", "max"
    );
    let mut p50 = Vec::new();
    for (name, s) in names.iter().zip(samples.iter_mut()) {
        let sum = Summary::from_nanos(s);
        p50.push(sum.p50_us);
        println!(
            "{:<22} {:>8} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            name,
            sum.samples,
            sum.early,
            sum.p50_us,
            sum.p90_us,
            sum.p99_us,
            sum.p999_us,
            sum.max_us
        );
    }
    let ratios: Vec<String> = names
        .iter()
        .zip(&p50)
        .skip(1)
        .map(|(n, p)| format!("{n}/timerfd {:.1}x", p / p50[0]))
        .collect();
    println!("p50 ratios: {}", ratios.join(", "));
}

/// `inflight` tasks on a current-thread runtime, each sleeping until random deadlines.
fn tokio_round(
    timers: usize,
    min: Duration,
    max: Duration,
    inflight: usize,
    seed: u64,
) -> Vec<i64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    let per_task = timers.div_ceil(inflight);
    rt.block_on(async move {
        let tasks: Vec<_> = (0..inflight as u64)
            .map(|t| {
                tokio::spawn(async move {
                    let mut rng = SmallRng::seed_from_u64(seed * 1000 + t);
                    let mut out = Vec::with_capacity(per_task);
                    for _ in 0..per_task {
                        let delay: Duration = rng.random_range(min..=max);
                        let deadline = Instant::now() + delay;
                        tokio::time::sleep_until(deadline.into()).await;
                        let now = Instant::now();
                        let late = now.saturating_duration_since(deadline).as_nanos() as i64;
                        let early = deadline.saturating_duration_since(now).as_nanos() as i64;
                        out.push(late - early);
                    }
                    out
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.expect("task"));
        }
        all.truncate(timers);
        all
    })
}
