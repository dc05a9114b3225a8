//! The timer wheel against a trivially correct model (a BTreeMap keyed by deadline and insertion
//! order), over random insert / cancel / advance sequences in virtual time.

use std::collections::BTreeMap;

use backoffd::time::Timestamp;
use backoffd::timer::{TimerId, TimerWheel};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The reference: fires every timer with `deadline <= now`, ordered by (deadline, insertion).
#[derive(Default)]
struct Model {
    timers: BTreeMap<(u64, u64), u64>,
    by_value: BTreeMap<u64, (u64, u64)>,
    seq: u64,
}

impl Model {
    fn insert(&mut self, deadline: u64, value: u64) {
        self.seq += 1;
        self.timers.insert((deadline, self.seq), value);
        self.by_value.insert(value, (deadline, self.seq));
    }
    fn cancel(&mut self, value: u64) -> bool {
        match self.by_value.remove(&value) {
            Some(key) => self.timers.remove(&key).is_some(),
            None => false,
        }
    }
    fn expire(&mut self, now: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        while let Some((&(deadline, seq), &value)) = self.timers.iter().next() {
            if deadline > now {
                break;
            }
            self.timers.remove(&(deadline, seq));
            self.by_value.remove(&value);
            out.push((deadline, value));
        }
        out
    }
    fn earliest(&self) -> Option<u64> {
        self.timers.keys().next().map(|k| k.0)
    }
}

enum Op {
    Insert,
    /// Cancel the handle at this position (modulo the number ever issued): live or stale.
    Cancel(usize),
    Advance(u64),
    /// Advance exactly to what the wheel says is the next deadline.
    AdvanceToNext,
}

/// A deadline relative to `now` at every wheel level (sub-tick, levels 0..7, past the wheel's
/// range, in the past), or exactly a recent deadline again, to exercise equal deadlines.
fn random_deadline(rng: &mut SmallRng, now: u64, recent: &[u64]) -> u64 {
    let ahead = |d: u64| now.saturating_add(d).min(u64::MAX - 1);
    match rng.random_range(0..10) {
        0 => ahead(rng.random_range(0..2_048)),
        1 => ahead(rng.random_range(0..100_000)),
        2 => ahead(rng.random_range(0..50_000_000)),
        3 => ahead(rng.random_range(0..10_000_000_000)),
        4 => ahead(rng.random_range(0..(1u64 << 52))),
        5 => ahead(rng.random_range(0..(1u64 << 62))),
        6 => now.saturating_sub(rng.random_range(0..5_000_000)),
        7 if !recent.is_empty() => recent[rng.random_range(0..recent.len())],
        _ => ahead(rng.random_range(0..3_000_000)),
    }
}

fn random_ops(seed: u64, count: usize) -> Vec<Op> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..count)
        .map(|_| match rng.random_range(0..100) {
            0..=44 => Op::Insert,
            45..=69 => Op::Cancel(rng.random_range(0..usize::MAX)),
            70..=89 => Op::Advance(match rng.random_range(0..4) {
                0 => rng.random_range(0..2_000),
                1 => rng.random_range(0..1_000_000),
                2 => rng.random_range(0..100_000_000),
                _ => rng.random_range(0..100_000_000_000),
            }),
            _ => Op::AdvanceToNext,
        })
        .collect()
}

/// Runs one sequence through wheel and model and asserts they agree at every step.
fn check(seed: u64, ops: &[Op]) {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
    let mut wheel = TimerWheel::new();
    let mut model = Model::default();
    let mut handles: Vec<(TimerId, u64)> = Vec::new();
    let mut recent: Vec<u64> = Vec::new();
    let mut now: u64 = rng.random_range(0..1u64 << 40);
    let mut next_value = 0u64;
    for op in ops {
        match *op {
            Op::Insert => {
                let deadline = random_deadline(&mut rng, now, &recent);
                next_value += 1;
                let id = wheel.insert(Timestamp::from_nanos(deadline), next_value);
                model.insert(deadline, next_value);
                handles.push((id, next_value));
                recent.push(deadline);
                if recent.len() > 16 {
                    recent.remove(0);
                }
            }
            Op::Cancel(i) if !handles.is_empty() => {
                let (id, value) = handles[i % handles.len()];
                let expected = model.cancel(value);
                let got = wheel.cancel(id);
                assert_eq!(
                    got.is_some(),
                    expected,
                    "seed {seed}: cancel live/stale mismatch"
                );
                if let Some(v) = got {
                    assert_eq!(v, value, "seed {seed}: cancel returned another timer");
                }
            }
            Op::Cancel(_) => {}
            Op::Advance(step) => now = now.saturating_add(step).min(u64::MAX - 1),
            Op::AdvanceToNext => {
                if let Some(next) = wheel.next_deadline() {
                    now = now.max(next.as_nanos());
                }
            }
        }
        let mut fired = Vec::new();
        while let Some(e) = wheel.poll(Timestamp::from_nanos(now)) {
            assert!(e.deadline.as_nanos() <= now, "seed {seed}: fired early");
            fired.push((e.deadline.as_nanos(), e.value));
        }
        assert_eq!(
            fired,
            model.expire(now),
            "seed {seed}: fire order differs at now={now}"
        );
        assert_eq!(wheel.len(), model.timers.len(), "seed {seed}: live count");
        match (wheel.next_deadline(), model.earliest()) {
            (None, None) => {}
            (Some(w), Some(m)) => assert!(
                w.as_nanos() <= m,
                "seed {seed}: next_deadline {w:?} later than {m} (now {now})\n{}",
                wheel.debug_dump()
            ),
            (w, m) => panic!("seed {seed}: next_deadline {w:?} vs model {m:?}"),
        }
        if handles.len() > 4096 {
            handles.drain(..2048);
        }
    }
}

#[test]
fn wheel_matches_model_over_millions_of_operations() {
    // 160 seeds x 20_000 operations = 3.2 million operations, each followed by a full poll.
    for seed in 0..160 {
        check(seed, &random_ops(seed, 20_000));
    }
}

#[test]
fn stale_handles_never_cancel_a_reused_slot() {
    let mut wheel = TimerWheel::new();
    let mut stale = Vec::new();
    for round in 0..1000u64 {
        let id = wheel.insert(Timestamp::from_nanos(round), round);
        stale.push(id);
        assert_eq!(
            wheel.poll(Timestamp::from_nanos(round)).map(|e| e.value),
            Some(round)
        );
        let live = wheel.insert(Timestamp::from_nanos(u64::MAX - 1), round);
        for &s in &stale {
            assert_eq!(wheel.cancel(s), None);
        }
        assert_eq!(wheel.cancel(live), Some(round));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    #[test]
    fn wheel_matches_model_for_arbitrary_seeds(seed in any::<u64>(), len in 1usize..400) {
        check(seed, &random_ops(seed, len));
    }
}

#[test]
fn regression_seed_18427223729965485254() {
    let seed = 18427223729965485254;
    for len in 1..400 {
        check(seed, &random_ops(seed, len));
    }
}
