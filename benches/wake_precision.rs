//! Wake-up precision, side by side in one run: the reactor with a timerfd, the reactor with the
//! plain epoll timeout, and `tokio::time::sleep_until` on a current-thread runtime. Rounds of
//! each alternate so machine noise hits all three alike.
//!
//! Run: `cargo bench --bench wake_precision` (env TIMERS=N to change samples per source,
//! FIFO_PRIORITY=P to run under SCHED_FIFO like cyclictest -p, which needs root).

// The timer-precision harness is the `timer-bench` command's, built in from the binary's source.
#[allow(dead_code)]
#[path = "../src/cli/timer_bench/harness.rs"]
mod timer_bench;

use std::time::{Duration, Instant};

use backoffd::reactor::WakeMode;
use backoffd::stats::Summary;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use timer_bench::Options;

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
        timer_bench::set_fifo_priority(p).expect("SCHED_FIFO (needs root or CAP_SYS_NICE)");
    }
    let base = Options {
        timers: ROUND,
        ..Options::default()
    };
    let mut samples: [Vec<i64>; 3] = Default::default();
    let mut seed = 1;
    while samples[2].len() < timers {
        for (i, wake) in [WakeMode::Timerfd, WakeMode::Epoll].into_iter().enumerate() {
            let options = Options {
                sources: vec![wake],
                seed,
                ..base.clone()
            };
            let mut r = timer_bench::run(&options).expect("reactor round");
            samples[i].append(&mut r[0].lateness_ns);
        }
        samples[2].extend(tokio_round(&base, seed));
        seed += 1;
    }
    println!(
        "wake precision: {timers} timers per source, deadlines {:?}..{:?}, {} in flight, {}",
        base.min,
        base.max,
        base.inflight,
        fifo.map_or("default scheduler".into(), |p| format!("SCHED_FIFO {p}"))
    );
    println!(
        "{:<22} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}   (lateness, us)",
        "source", "samples", "early", "p50", "p90", "p99", "p99.9", "max"
    );
    let names = ["backoffd timerfd", "backoffd epoll", "tokio sleep_until"];
    let mut p50 = [0.0; 3];
    for (i, s) in samples.iter_mut().enumerate() {
        let sum = Summary::from_nanos(s);
        p50[i] = sum.p50_us;
        println!(
            "{:<22} {:>8} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            names[i],
            sum.samples,
            sum.early,
            sum.p50_us,
            sum.p90_us,
            sum.p99_us,
            sum.p999_us,
            sum.max_us
        );
    }
    println!(
        "p50 ratios: tokio/timerfd {:.1}x, epoll/timerfd {:.1}x",
        p50[2] / p50[0],
        p50[1] / p50[0]
    );
}

/// `inflight` tasks on a current-thread runtime, each sleeping until random deadlines.
fn tokio_round(o: &Options, seed: u64) -> Vec<i64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    let per_task = o.timers.div_ceil(o.inflight);
    let (min, max) = (o.min, o.max);
    rt.block_on(async move {
        let tasks: Vec<_> = (0..o.inflight as u64)
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
        all.truncate(o.timers);
        all
    })
}
