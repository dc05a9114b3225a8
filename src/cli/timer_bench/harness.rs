//! The timer-precision benchmark: the real reactor, many timers at random deadlines, and the
//! lateness (dispatch time minus deadline) of every one, per wake-up source.
//!
//! Sources are measured interleaved, in rounds, so that a noisy neighbour hurts them alike and
//! their ratio stays fair.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use backoffd::reactor::{self, Component, Ctx, Reactor, Readiness, WakeMode};
use backoffd::time::Timestamp;
use backoffd::timer::TimerId;

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// Samples per wake source.
    pub timers: usize,
    /// Deadlines are drawn uniformly from `now + min .. now + max`.
    pub min: Duration,
    /// Upper bound of the deadline range (see `min`).
    pub max: Duration,
    /// Timers pending at once.
    pub inflight: usize,
    /// Wake sources to compare, measured in this order within each round.
    pub sources: Vec<WakeMode>,
    /// Samples per source per round (rounds alternate sources).
    pub round: usize,
    /// Seed of the deadline generator, so runs are repeatable.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timers: 10_000,
            min: Duration::from_micros(100),
            max: Duration::from_millis(50),
            inflight: 64,
            sources: vec![WakeMode::Timerfd, WakeMode::Epoll],
            round: 500,
            seed: 1,
        }
    }
}

/// The lateness samples (nanoseconds, negative = early) of one wake source.
pub struct SourceSamples {
    /// The wake source measured.
    pub source: WakeMode,
    /// One sample per timer: dispatch time minus deadline, in nanoseconds.
    pub lateness_ns: Vec<i64>,
}

/// Runs the benchmark and returns the samples per source, in the order of `options.sources`.
pub fn run(options: &Options) -> io::Result<Vec<SourceSamples>> {
    let mut results: Vec<SourceSamples> = options
        .sources
        .iter()
        .map(|&source| SourceSamples {
            source,
            lateness_ns: Vec::with_capacity(options.timers),
        })
        .collect();
    let mut rng = SmallRng::seed_from_u64(options.seed);
    while results.iter().any(|r| r.lateness_ns.len() < options.timers) {
        for r in results.iter_mut() {
            let want = (options.timers - r.lateness_ns.len()).min(options.round.max(1));
            if want > 0 {
                let seed = rng.random();
                r.lateness_ns
                    .extend(run_round(r.source, want, options, seed)?);
            }
        }
    }
    Ok(results)
}

/// One reactor, `samples` timers with `inflight` pending at a time.
fn run_round(wake: WakeMode, samples: usize, o: &Options, seed: u64) -> io::Result<Vec<i64>> {
    let mut reactor = Reactor::new(reactor::Config {
        wake,
        signals: false,
        ..reactor::Config::default()
    })?;
    let out = Rc::new(RefCell::new(Vec::with_capacity(samples)));
    reactor.add(Box::new(TimerLoad {
        deadlines: vec![Timestamp::ZERO; o.inflight.clamp(1, samples)],
        unscheduled: samples,
        wanted: samples,
        min: o.min,
        max: o.max.max(o.min),
        rng: SmallRng::seed_from_u64(seed),
        out: Rc::clone(&out),
    }))?;
    reactor.run()?;
    let samples = out.take();
    Ok(samples)
}

/// Keeps `deadlines.len()` timers pending and records each one's lateness when it fires.
struct TimerLoad {
    /// Deadline of the timer pending in each in-flight slot (the timer key is the slot).
    deadlines: Vec<Timestamp>,
    unscheduled: usize,
    wanted: usize,
    min: Duration,
    max: Duration,
    rng: SmallRng,
    out: Rc<RefCell<Vec<i64>>>,
}

impl TimerLoad {
    fn schedule(&mut self, ctx: &mut Ctx<'_>, slot: u32) {
        if self.unscheduled == 0 {
            return;
        }
        self.unscheduled -= 1;
        let delay = self.rng.random_range(self.min..=self.max);
        let deadline = ctx.now() + delay;
        self.deadlines[slot as usize] = deadline;
        ctx.set_timer(deadline, slot);
    }
}

impl Component for TimerLoad {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        for slot in 0..self.deadlines.len() as u32 {
            self.schedule(ctx, slot);
        }
        Ok(())
    }

    fn on_ready(&mut self, _: &mut Ctx<'_>, _: u32, _: Readiness) {}

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _: TimerId, slot: u32) {
        let lateness = ctx.now().signed_nanos_since(self.deadlines[slot as usize]);
        let done = {
            let mut out = self.out.borrow_mut();
            out.push(lateness);
            out.len() >= self.wanted
        };
        if done {
            ctx.shutdown();
        } else {
            self.schedule(ctx, slot);
        }
    }
}

/// Sets this thread's timer slack (`PR_SET_TIMERSLACK`), which pads `epoll_wait`'s sleeps.
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: prctl with PR_SET_TIMERSLACK takes an unsigned long and no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs this thread under `SCHED_FIFO` at `priority` (1..=99), as cyclictest's `-p` does, so
/// the measurement is not queued behind other runnable processes. Needs CAP_SYS_NICE.
pub fn set_fifo_priority(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is this thread; `param` is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
