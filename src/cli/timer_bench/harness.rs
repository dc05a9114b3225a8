//! The timer-precision benchmark: wake-up sources driven through the same deadlines, and the
//! lateness (the instant the timer's callback runs, minus its deadline) of every sample.
//!
//! The sources are the reactor with each of its wake-ups ([`WakeMode`]) and, as the bare-kernel
//! baseline, a `clock_nanosleep(TIMER_ABSTIME)` loop on `CLOCK_MONOTONIC`: cyclictest's method.
//! They run on this one thread, so on the same CPU and under the same policy, interleaved in
//! rounds, so that a noisy neighbour hurts them alike and their difference stays fair.
//!
//! For the reactor a sample's lateness splits at [`Ctx::woke_at`], the instant its wait
//! returned: before it is the kernel's wake-up, after it the loop's dispatch (the timerfd read,
//! the wheel's poll, the call).

use std::fmt;
use std::io;
use std::str::FromStr;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use backoffd::reactor::{self, Component, Ctx, Reactor, Readiness, WakeMode};
use backoffd::time::Timestamp;
use backoffd::timer::TimerId;

/// A wake-up source timer-bench measures.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Source {
    /// The reactor, waking for its timers this way.
    Reactor(WakeMode),
    /// The bare kernel: `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`, as cyclictest does.
    Nanosleep,
}

impl Source {
    /// Every source, in the order reports list them (the baseline last).
    pub const ALL: [Source; 4] = [
        Source::Reactor(WakeMode::Timerfd),
        Source::Reactor(WakeMode::Epoll),
        Source::Reactor(WakeMode::Pwait2),
        Source::Nanosleep,
    ];
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Reactor(mode) => mode.fmt(f),
            Source::Nanosleep => f.write_str("nanosleep"),
        }
    }
}

impl FromStr for Source {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "nanosleep" => Ok(Source::Nanosleep),
            _ => s.parse().map(Source::Reactor).map_err(|_| {
                format!("expected timerfd, epoll, pwait2, nanosleep or all, got {s:?}")
            }),
        }
    }
}

/// When the timers are due.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Schedule {
    /// `inflight` timers pending at once, each due `min..=max` (uniform) after it was set.
    Random {
        min: Duration,
        max: Duration,
        inflight: usize,
    },
    /// One timer at a time, each due one `interval` after the last one's deadline, as
    /// cyclictest's `-i`. A wake-up later than whole periods skips them: one stall, one sample.
    Periodic { interval: Duration },
}

impl Schedule {
    fn inflight(&self) -> usize {
        match *self {
            Schedule::Random { inflight, .. } => inflight.max(1),
            Schedule::Periodic { .. } => 1,
        }
    }

    /// The deadline that follows one due at `last`, its timer having run at `now`.
    pub fn next(&self, rng: &mut SmallRng, last: Timestamp, now: Timestamp) -> Timestamp {
        match *self {
            Schedule::Random { min, max, .. } => now + rng.random_range(min..=max.max(min)),
            Schedule::Periodic { interval } => {
                let step = interval.as_nanos().max(1) as u64;
                let behind = now.as_nanos().saturating_sub(last.as_nanos()) / step;
                Timestamp::from_nanos(last.as_nanos() + (behind + 1) * step)
            }
        }
    }

    fn first(&self, rng: &mut SmallRng, now: Timestamp) -> Timestamp {
        self.next(rng, now, now)
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// Samples per source.
    pub timers: usize,
    /// When the timers are due.
    pub schedule: Schedule,
    /// Sources to compare, reported in this order; each round starts with the next one.
    pub sources: Vec<Source>,
    /// Samples per source per round (rounds alternate sources).
    pub round: usize,
    /// Seed of the deadline generator, so runs are repeatable.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timers: 10_000,
            schedule: Schedule::Random {
                min: Duration::from_micros(100),
                max: Duration::from_millis(50),
                inflight: 64,
            },
            sources: Source::ALL.to_vec(),
            round: 500,
            seed: 1,
        }
    }
}

/// Where a reactor sample's lateness went, in nanoseconds; `kernel + dispatch == lateness`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Breakdown {
    /// Deadline to the wait's return (0 if the loop was already awake for an earlier timer).
    pub kernel_ns: Vec<i64>,
    /// The wait's return (or the deadline, if later) to the timer's callback.
    pub dispatch_ns: Vec<i64>,
}

/// The samples of one source.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceSamples {
    /// The source measured.
    pub source: Source,
    /// One sample per timer: callback time minus deadline, in nanoseconds (negative = early).
    pub lateness_ns: Vec<i64>,
    /// The reactor's split of each sample; `None` for the nanosleep baseline.
    pub breakdown: Option<Breakdown>,
    /// Where each round's samples end in `lateness_ns`, for the spread across blocks.
    pub round_ends: Vec<usize>,
}

impl SourceSamples {
    fn new(source: Source, capacity: usize) -> Self {
        let breakdown = match source {
            Source::Reactor(_) => Some(Breakdown {
                kernel_ns: Vec::with_capacity(capacity),
                dispatch_ns: Vec::with_capacity(capacity),
            }),
            Source::Nanosleep => None,
        };
        SourceSamples {
            source,
            lateness_ns: Vec::with_capacity(capacity),
            breakdown,
            round_ends: Vec::new(),
        }
    }

    /// Records one sample: the deadline, the wait's return (reactor only) and the callback.
    pub fn record(&mut self, deadline: Timestamp, woke: Timestamp, ran: Timestamp) {
        self.lateness_ns.push(ran.signed_nanos_since(deadline));
        if let Some(b) = &mut self.breakdown {
            let split = woke.max(deadline);
            b.kernel_ns.push(split.signed_nanos_since(deadline));
            b.dispatch_ns.push(ran.signed_nanos_since(split));
        }
    }

    /// The samples in blocks of consecutive rounds, each of at least `min_samples` (a short
    /// tail joins the block before it). Sources measured with the same options have their
    /// blocks in step: block k of each covers the same stretch of the run.
    pub fn blocks(&self, min_samples: usize) -> Vec<std::ops::Range<usize>> {
        let mut blocks: Vec<std::ops::Range<usize>> = Vec::new();
        let mut start = 0;
        for &end in &self.round_ends {
            if end - start >= min_samples {
                blocks.push(start..end);
                start = end;
            }
        }
        match blocks.last_mut() {
            Some(last) if start < self.lateness_ns.len() => last.end = self.lateness_ns.len(),
            None if !self.lateness_ns.is_empty() => blocks.push(0..self.lateness_ns.len()),
            _ => {}
        }
        blocks
    }
}

/// Runs the benchmark and returns the samples per source, in the order of `options.sources`.
/// A reactor source this kernel lacks is measured as what the reactor fell back to, so the
/// caller should check [`available`] first.
pub fn run(options: &Options) -> io::Result<Vec<SourceSamples>> {
    let mut results: Vec<SourceSamples> = options
        .sources
        .iter()
        .map(|&s| SourceSamples::new(s, options.timers))
        .collect();
    let mut rng = SmallRng::seed_from_u64(options.seed);
    let per_round = options.round.max(1);
    let n = results.len();
    for round in 0.. {
        if results
            .iter()
            .all(|r| r.lateness_ns.len() >= options.timers)
        {
            break;
        }
        // Each round starts with the next source, so that none is always the one measured
        // right after another's set-up, or always last.
        for i in 0..n {
            let r = &mut results[(round + i) % n];
            let want = options
                .timers
                .saturating_sub(r.lateness_ns.len())
                .min(per_round);
            if want == 0 {
                continue;
            }
            let plan = Round {
                schedule: options.schedule,
                samples: want,
                seed: rng.random(),
            };
            match r.source {
                Source::Reactor(mode) => reactor_round(mode, &plan, r)?,
                Source::Nanosleep => nanosleep_round(&plan, r)?,
            }
            r.round_ends.push(r.lateness_ns.len());
        }
    }
    Ok(results)
}

/// Whether this kernel has `source` (only `pwait2` can be missing: Linux before 5.11).
pub fn available(source: Source) -> io::Result<bool> {
    match source {
        Source::Reactor(mode) => {
            let reactor = Reactor::new(reactor_config(mode))?;
            Ok(reactor.wake_mode() == mode)
        }
        Source::Nanosleep => Ok(true),
    }
}

/// One round of one source.
struct Round {
    schedule: Schedule,
    samples: usize,
    seed: u64,
}

fn reactor_config(wake: WakeMode) -> reactor::Config {
    reactor::Config {
        wake,
        signals: false,
        ..reactor::Config::default()
    }
}

/// Timers each round runs before the ones it records. A round's first wake-up is a fresh
/// reactor's first (cold caches, buffers not yet touched), which the baseline's loop has no
/// counterpart for; with short rounds it would be 1 in 50 samples, right where p99 is read.
/// It is dropped from every source alike.
const WARM_UP: usize = 1;

/// One reactor, `round.samples` timers with the schedule's number pending at a time.
fn reactor_round(wake: WakeMode, round: &Round, into: &mut SourceSamples) -> io::Result<()> {
    let mut reactor = Reactor::new(reactor_config(wake))?;
    let timers = WARM_UP + round.samples;
    let load = reactor.add(Box::new(TimerLoad {
        deadlines: vec![Timestamp::ZERO; round.schedule.inflight().min(timers)],
        unscheduled: timers,
        wanted: timers,
        schedule: round.schedule,
        rng: SmallRng::seed_from_u64(round.seed),
        fired: Vec::with_capacity(timers),
    }))?;
    reactor.run()?;
    let load: &TimerLoad = reactor.component(load).expect("added above");
    for f in load.fired.iter().skip(WARM_UP) {
        into.record(f.deadline, f.woke, f.ran);
    }
    Ok(())
}

/// One timer's three instants.
struct Fired {
    deadline: Timestamp,
    woke: Timestamp,
    ran: Timestamp,
}

/// Keeps `deadlines.len()` timers pending and records each one's instants when it fires.
struct TimerLoad {
    /// Deadline of the timer pending in each in-flight slot (the timer key is the slot).
    deadlines: Vec<Timestamp>,
    unscheduled: usize,
    wanted: usize,
    schedule: Schedule,
    rng: SmallRng,
    /// Filled in place, its capacity reserved up front: no allocation while measuring.
    fired: Vec<Fired>,
}

impl TimerLoad {
    fn schedule(&mut self, ctx: &mut Ctx<'_>, slot: u32, deadline: Timestamp) {
        if self.unscheduled == 0 {
            return;
        }
        self.unscheduled -= 1;
        self.deadlines[slot as usize] = deadline;
        ctx.set_timer(deadline, slot);
    }
}

impl Component for TimerLoad {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        for slot in 0..self.deadlines.len() as u32 {
            let first = self.schedule.first(&mut self.rng, ctx.now());
            self.schedule(ctx, slot, first);
        }
        Ok(())
    }

    fn on_ready(&mut self, _: &mut Ctx<'_>, _: u32, _: Readiness) {}

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _: TimerId, slot: u32) {
        // The callback's own clock reading: lateness includes the whole dispatch.
        let ran = Timestamp::now();
        let deadline = self.deadlines[slot as usize];
        self.fired.push(Fired {
            deadline,
            woke: ctx.woke_at(),
            ran,
        });
        if self.fired.len() >= self.wanted {
            ctx.shutdown();
        } else {
            let next = self.schedule.next(&mut self.rng, deadline, ran);
            self.schedule(ctx, slot, next);
        }
    }
}

/// The baseline: the same schedule slept out with `clock_nanosleep` until the earliest pending
/// deadline, lateness read right after it returns (cyclictest's loop).
fn nanosleep_round(round: &Round, into: &mut SourceSamples) -> io::Result<()> {
    let mut rng = SmallRng::seed_from_u64(round.seed);
    let now = Timestamp::now();
    let mut left = WARM_UP + round.samples;
    let inflight = round.schedule.inflight().min(left);
    let mut pending: Vec<Timestamp> = (0..inflight)
        .map(|_| round.schedule.first(&mut rng, now))
        .collect();
    while left > 0 {
        let earliest = pending.iter().copied().min().unwrap_or(now);
        sleep_until(earliest)?;
        let woke = Timestamp::now();
        for deadline in pending.iter_mut().filter(|d| **d <= woke) {
            if left == 0 {
                break;
            }
            if left <= round.samples {
                into.record(*deadline, woke, woke);
            }
            left -= 1;
            *deadline = round.schedule.next(&mut rng, *deadline, woke);
        }
    }
    Ok(())
}

/// Sleeps until `deadline` on `CLOCK_MONOTONIC` (the clock [`Timestamp::now`] reads).
fn sleep_until(deadline: Timestamp) -> io::Result<()> {
    let spec = deadline.to_timespec();
    loop {
        // SAFETY: a valid timespec; no remainder is asked for with TIMER_ABSTIME.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        match rc {
            0 => return Ok(()),
            libc::EINTR => continue,
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}
