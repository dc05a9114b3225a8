//! timer-bench's arithmetic and formats on synthetic samples, its command line, and the
//! nanosleep baseline on the real clock (never early; no timing is asserted).

use std::time::Duration;

use backoffd::reactor::WakeMode;
use backoffd::time::Timestamp;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::cyclic::{self, Histogram};
use super::harness::{self, Breakdown, Options, Schedule, Source, SourceSamples};
use super::report::{self, Spread};
use super::{parse, BenchArgs, Parsed};

const TIMERFD: Source = Source::Reactor(WakeMode::Timerfd);

/// `rounds` rounds of `per_round` samples: `base_us + i` µs for the i-th sample of a round.
fn samples(source: Source, rounds: usize, per_round: usize, base_us: i64) -> SourceSamples {
    let lateness_ns: Vec<i64> = (0..rounds)
        .flat_map(|_| (0..per_round as i64).map(|i| (base_us + i) * 1000))
        .collect();
    let breakdown = match source {
        // A fixed 400 ns of dispatch, the rest kernel.
        Source::Reactor(_) => Some(Breakdown {
            kernel_ns: lateness_ns.iter().map(|l| l - 400).collect(),
            dispatch_ns: vec![400; lateness_ns.len()],
        }),
        Source::Nanosleep => None,
    };
    SourceSamples {
        source,
        lateness_ns,
        breakdown,
        round_ends: (1..=rounds).map(|r| r * per_round).collect(),
    }
}

#[test]
fn the_overhead_is_the_difference_of_percentiles_over_the_run_and_per_block() {
    // 8 rounds of 250: blocks of 500 samples are 2 rounds each, so 4 blocks.
    let base = samples(Source::Nanosleep, 8, 250, 10);
    let reactor = samples(TIMERFD, 8, 250, 13);
    let reports = report::analyse(&[reactor, base]);
    let o = reports[0]
        .overhead
        .as_ref()
        .expect("a reactor source has one");
    assert_eq!((o.p50_us, o.p99_us), (3.0, 3.0));
    let every_block_3 = Spread {
        blocks: 4,
        median: 3.0,
        min: 3.0,
        max: 3.0,
    };
    assert_eq!((o.p50_blocks, o.p99_blocks), (every_block_3, every_block_3));
    // 13..=262 µs, 8 of each: the 1000th of 2000 is the 125th value, 137 µs.
    assert_eq!(reports[0].lateness.p50_us, 137.0);
    let split = reports[0].breakdown.as_ref().unwrap();
    assert_eq!((split.kernel.p50_us, split.dispatch.p50_us), (136.6, 0.4));
    assert_eq!(
        reports[1].overhead, None,
        "the baseline has no overhead over itself"
    );
    assert_eq!(reports[1].breakdown, None);
}

#[test]
fn blocks_group_whole_rounds_and_a_short_tail_joins_the_last() {
    assert_eq!(samples(TIMERFD, 7, 100, 0).blocks(250), [0..300, 300..700]);
    assert_eq!(
        samples(TIMERFD, 4, 500, 0).blocks(500),
        [0..500, 500..1000, 1000..1500, 1500..2000]
    );
    let fewer = samples(TIMERFD, 2, 100, 0).blocks(250);
    assert_eq!((fewer.len(), &fewer[0]), (1, &(0..200)), "fewer: one block");
    assert!(samples(TIMERFD, 0, 0, 0).blocks(250).is_empty());
}

#[test]
fn without_a_baseline_there_is_no_overhead_and_json_says_null() {
    let reports = report::analyse(&[samples(TIMERFD, 1, 10, 5)]);
    assert_eq!(reports[0].overhead, None);
    let line = report::json(&reports[0], "");
    assert!(
        line.contains("\"overhead_p50_us\":null,\"overhead_p99_us\":null"),
        "{line}"
    );
    assert!(line.contains("\"kernel_p50_us\":"), "{line}");
}

#[test]
fn the_spread_of_blocks_is_their_median_and_range() {
    let s = Spread::of(vec![5.0, -1.0, 2.0, 9.0, 3.0]);
    assert_eq!((s.blocks, s.median, s.min, s.max), (5, 3.0, -1.0, 9.0));
    let even = Spread::of(vec![4.0, 1.0, 3.0, 2.0]);
    assert_eq!(even.median, 2.0, "the lower middle of an even count");
    assert_eq!(Spread::of(Vec::new()).blocks, 0);
}

#[test]
fn a_json_line_keeps_the_names_scripts_rely_on() {
    let reports = report::analyse(&[
        samples(TIMERFD, 2, 10, 13),
        samples(Source::Nanosleep, 2, 10, 10),
    ]);
    let reactor = report::json(&reports[0], ",\"rounds\":2");
    assert!(reactor.starts_with(
        "{\"source\":\"timerfd\",\"samples\":20,\"early\":0,\"min_us\":13.000,\"avg_us\":17.500,\"p50_us\":17.000,"
    ), "{reactor}");
    for key in [
        "p99_us",
        "p999_us",
        "max_us",
        "overhead_p50_us",
        "overhead_p99_us",
        "kernel_p50_us",
        "kernel_p99_us",
        "dispatch_p50_us",
        "dispatch_p99_us",
    ] {
        assert!(reactor.contains(&format!("\"{key}\":")), "{key}: {reactor}");
    }
    assert!(reactor.contains("\"overhead_p50_us\":3.000,"), "{reactor}");
    assert!(reactor.ends_with(",\"rounds\":2}"), "{reactor}");
    let base = report::json(&reports[1], "");
    assert!(
        base.starts_with("{\"source\":\"nanosleep\",\"samples\":20,"),
        "{base}"
    );
    assert!(
        !base.contains("overhead") && !base.contains("kernel"),
        "{base}"
    );
}

#[test]
fn a_sample_splits_into_kernel_and_dispatch_that_add_up() {
    let mut s = samples(TIMERFD, 0, 0, 0);
    let t = Timestamp::from_nanos;
    // Woke 7 µs late, callback 1 µs after.
    s.record(t(100_000), t(107_000), t(108_000));
    // The loop was awake already (woke before this deadline, for an earlier timer).
    s.record(t(200_000), t(199_000), t(200_500));
    let b = s.breakdown.as_ref().unwrap();
    assert_eq!(s.lateness_ns, [8000, 500]);
    assert_eq!(b.kernel_ns, [7000, 0]);
    assert_eq!(b.dispatch_ns, [1000, 500]);
}

#[test]
fn the_histogram_is_written_in_cyclictests_layout() {
    let a = [0, 999, 1000, 2500, 7000, -5, 3000];
    let b = [1500, 1600];
    let hists = [Histogram::of(&a, 3), Histogram::of(&b, 3)];
    assert_eq!(hists[0].counts, [2, 1, 1]);
    assert_eq!(
        (hists[0].overflow, &hists[0].overflow_at[..]),
        (2, &[4, 6][..])
    );
    let reports = report::analyse(&[
        with_lateness(TIMERFD, &a),
        with_lateness(Source::Nanosleep, &b),
    ]);
    let text = cyclic::histogram_text(&reports, &hists);
    assert_eq!(
        text,
        "# Histogram\n\
         000000 000002\t000000\n\
         000001 000001\t000002\n\
         000002 000001\t000000\n\
         # Total: 000000004 000000002\n\
         # Min Latencies: 00000 00001\n\
         # Avg Latencies: 00002 00001\n\
         # Max Latencies: 00007 00001\n\
         # Histogram Overflows: 00002 00000\n\
         # Histogram Overflow at cycle number:\n\
         # Thread 0: 00004 00006\n\
         # Thread 1:\n"
    );
    let many = Histogram::of(&[5000; 10], 3);
    assert_eq!(
        many.overflow_at,
        [0, 1, 2],
        "at most one cycle number per bucket"
    );
    assert!(cyclic::histogram_text(&reports[..1], &[many])
        .ends_with("# Thread 0: 00000 00001 00002 # 00007 others\n"));
    assert_eq!(
        hists[1].json(),
        "{\"bucket_us\":1,\"counts\":[0,2,0],\"overflow\":0}"
    );
}

fn with_lateness(source: Source, ns: &[i64]) -> SourceSamples {
    SourceSamples {
        source,
        lateness_ns: ns.to_vec(),
        breakdown: None,
        round_ends: vec![ns.len()],
    }
}

#[test]
fn the_summary_line_reads_like_cyclictests() {
    let reports = report::analyse(&[samples(Source::Nanosleep, 1, 100, 12)]);
    assert_eq!(
        cyclic::summary_line(3, &reports[0], 80, "1000", 30_900),
        "T: 3 (nanosleep) P:80 I:1000 C:    100 Min:     12 Act:   30 Avg:   61 Max:     111"
    );
}

#[test]
fn a_periodic_schedule_keeps_its_phase_and_skips_missed_periods() {
    let p = Schedule::Periodic {
        interval: Duration::from_micros(1000),
    };
    let mut rng = SmallRng::seed_from_u64(1);
    let t = Timestamp::from_nanos;
    assert_eq!(p.next(&mut rng, t(5_000_000), t(5_000_030)), t(6_000_000));
    // 3.2 periods late: the next deadline is the first one still ahead, on the same phase.
    assert_eq!(p.next(&mut rng, t(5_000_000), t(8_200_000)), t(9_000_000));
    let r = Schedule::Random {
        min: Duration::from_micros(100),
        max: Duration::from_micros(200),
        inflight: 4,
    };
    for _ in 0..1000 {
        let next = r.next(&mut rng, t(0), t(1_000_000));
        assert!((t(1_100_000)..=t(1_200_000)).contains(&next));
    }
}

#[test]
fn the_nanosleep_baseline_never_wakes_early() {
    for schedule in [
        Schedule::Random {
            min: Duration::ZERO,
            max: Duration::from_millis(2),
            inflight: 8,
        },
        Schedule::Periodic {
            interval: Duration::from_micros(200),
        },
    ] {
        let options = Options {
            timers: 300,
            schedule,
            sources: vec![Source::Nanosleep, TIMERFD],
            round: 100,
            seed: 7,
        };
        for s in harness::run(&options).expect("runs") {
            assert_eq!(s.lateness_ns.len(), 300);
            assert_eq!(s.round_ends, [100, 200, 300]);
            let early = s.lateness_ns.iter().filter(|&&l| l < 0).count();
            assert_eq!(early, 0, "{}: {early} early", s.source);
        }
    }
}

fn args(line: &str) -> Result<BenchArgs, String> {
    let argv: Vec<String> = line.split_whitespace().map(String::from).collect();
    match parse(&argv) {
        Ok(Parsed::Run(a)) => Ok(a),
        Ok(Parsed::Help) => Err("help".into()),
        Err(e) => Err(e.0),
    }
}

#[test]
fn wake_takes_a_list_or_all() {
    let sources = |line: &str| args(line).map(|a| a.options.sources);
    assert_eq!(sources("").unwrap(), Source::ALL);
    assert_eq!(sources("--wake all").unwrap(), Source::ALL);
    assert_eq!(
        sources("--wake nanosleep,timerfd,nanosleep").unwrap(),
        [Source::Nanosleep, TIMERFD]
    );
    let e = sources("--wake timerfd,poll").unwrap_err();
    assert!(
        e.starts_with("--wake: expected timerfd, epoll, pwait2, nanosleep or all"),
        "{e}"
    );
}

#[test]
fn cyclictest_style_flags_parse_and_contradictions_are_refused() {
    let a = args("--interval 1ms --loops 5000 --affinity 1 --no-dma-latency").unwrap();
    let interval = Duration::from_millis(1);
    assert_eq!(a.options.schedule, Schedule::Periodic { interval });
    assert_eq!(a.options.timers, 5000);
    assert_eq!(
        (a.host.affinity, a.host.dma_latency, a.host.mlockall),
        (Some(1), false, true)
    );
    assert!(!args("--no-mlockall").unwrap().host.mlockall);
    for (line, names) in [
        ("--interval 1ms --min 1ms", "--min"),
        ("--timers 5 --loops 5", "--loops"),
        ("--mlockall --no-mlockall", "--mlockall"),
        ("--fifo-priority 0", "--fifo-priority"),
        ("--timerslack-ns 0", "--timerslack-ns"),
        ("--histogram 0", "--histogram"),
        ("--interval 0s", "--interval"),
        ("--affinity x", "--affinity"),
    ] {
        let e = args(line).err().unwrap_or_default();
        assert!(e.contains(names), "{line}: {e}");
    }
}
