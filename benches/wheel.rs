//! Timer wheel vs std BinaryHeap and BTreeMap, side by side in one run, at 1k, 100k and 1M live
//! timers: insert, cancel, insert+cancel, and advance-with-fire (cost per fired timer), plus heap
//! bytes per live timer measured with a counting allocator.
//!
//! BinaryHeap cannot cancel: its "cancel" column is `pop` and its insert+cancel is push+pop, the
//! cheapest way to keep its size steady, which flatters it.
//!
//! Run: `cargo bench --bench wheel` (add `-- --quick` for a faster pass).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use backoffd::time::Timestamp;
use backoffd::timer::{TimerId, TimerWheel};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Counts live heap bytes so memory per timer is measured, not estimated.
struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The reactor's payload: (component, key).
type Payload = (u32, u32);
/// Deadlines are spread over a minute, like CoAP retransmission and exchange timers.
const SPREAD_NS: u64 = 60_000_000_000;
const SIZES: [usize; 3] = [1_000, 100_000, 1_000_000];
const CHUNK: usize = 1_000;

/// The operations every structure offers to the benchmark.
trait Timers {
    type Handle: Copy;
    fn insert(&mut self, deadline: u64) -> Self::Handle;
    fn cancel(&mut self, h: Self::Handle);
    /// Fires every timer due at `now`; returns how many.
    fn fire(&mut self, now: u64) -> usize;
}

impl Timers for TimerWheel<Payload> {
    type Handle = TimerId;
    fn insert(&mut self, deadline: u64) -> TimerId {
        TimerWheel::insert(self, Timestamp::from_nanos(deadline), (1, 2))
    }
    fn cancel(&mut self, h: TimerId) {
        black_box(TimerWheel::cancel(self, h));
    }
    fn fire(&mut self, now: u64) -> usize {
        let mut n = 0;
        while let Some(e) = self.poll(Timestamp::from_nanos(now)) {
            black_box(e);
            n += 1;
        }
        n
    }
}

#[derive(Default)]
struct Tree {
    map: BTreeMap<(u64, u64), Payload>,
    seq: u64,
}

impl Timers for Tree {
    type Handle = (u64, u64);
    fn insert(&mut self, deadline: u64) -> (u64, u64) {
        self.seq += 1;
        self.map.insert((deadline, self.seq), (1, 2));
        (deadline, self.seq)
    }
    fn cancel(&mut self, h: (u64, u64)) {
        black_box(self.map.remove(&h));
    }
    fn fire(&mut self, now: u64) -> usize {
        let mut n = 0;
        while let Some(e) = self.map.first_entry() {
            if e.key().0 > now {
                break;
            }
            black_box(e.remove());
            n += 1;
        }
        n
    }
}

#[derive(Default)]
struct Heap {
    heap: BinaryHeap<Reverse<(u64, u64, Payload)>>,
    seq: u64,
}

impl Timers for Heap {
    type Handle = ();
    fn insert(&mut self, deadline: u64) {
        self.seq += 1;
        self.heap.push(Reverse((deadline, self.seq, (1, 2))));
    }
    fn cancel(&mut self, _: ()) {
        black_box(self.heap.pop());
    }
    fn fire(&mut self, now: u64) -> usize {
        let mut n = 0;
        while self.heap.peek().is_some_and(|Reverse(t)| t.0 <= now) {
            black_box(self.heap.pop());
            n += 1;
        }
        n
    }
}

/// A structure holding `live` timers spread over [0, SPREAD_NS).
fn filled<T: Timers>(mut t: T, live: usize, rng: &mut SmallRng) -> T {
    for _ in 0..live {
        t.insert(rng.random_range(0..SPREAD_NS));
    }
    t
}

/// Times `iters` operations in chunks; `timed` runs one chunk and returns its duration.
fn chunked(iters: u64, mut timed: impl FnMut(usize) -> Duration) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters as usize;
    while left > 0 {
        let n = left.min(CHUNK);
        total += timed(n);
        left -= n;
    }
    total
}

fn bench_structure<T: Timers>(c: &mut Criterion, name: &str, make: impl Fn() -> T) {
    for live in SIZES {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut t = filled(make(), live, &mut rng);
        let deadlines: Vec<u64> = (0..CHUNK).map(|_| rng.random_range(0..SPREAD_NS)).collect();
        let mut group = c.benchmark_group(format!("timers/{live}"));
        group.bench_function(BenchmarkId::new("insert", name), |b| {
            b.iter_custom(|iters| {
                chunked(iters, |n| {
                    let start = Instant::now();
                    let handles: Vec<_> = deadlines[..n].iter().map(|&d| t.insert(d)).collect();
                    let took = start.elapsed();
                    handles.into_iter().for_each(|h| t.cancel(h));
                    took
                })
            })
        });
        group.bench_function(BenchmarkId::new("cancel", name), |b| {
            b.iter_custom(|iters| {
                chunked(iters, |n| {
                    let handles: Vec<_> = deadlines[..n].iter().map(|&d| t.insert(d)).collect();
                    let start = Instant::now();
                    handles.into_iter().for_each(|h| t.cancel(h));
                    start.elapsed()
                })
            })
        });
        group.bench_function(BenchmarkId::new("insert+cancel", name), |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % CHUNK;
                let h = t.insert(deadlines[i]);
                t.cancel(h);
            })
        });
        drop(t);
        // Advance time so that about CHUNK timers come due per step; refill behind the front.
        let mut t = filled(make(), live, &mut rng);
        let step = SPREAD_NS * CHUNK as u64 / live as u64;
        let mut now = 0u64;
        group.bench_function(
            BenchmarkId::new("advance-with-fire (per timer)", name),
            |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    let mut fired = 0u64;
                    while fired < iters {
                        now += step;
                        let start = Instant::now();
                        let n = t.fire(now);
                        total += start.elapsed();
                        fired += n as u64;
                        for _ in 0..n {
                            t.insert(now + rng.random_range(0..SPREAD_NS));
                        }
                    }
                    total.mul_f64(iters as f64 / fired.max(1) as f64)
                })
            },
        );
        group.finish();
    }
}

/// Prints heap bytes per live timer at 1M for each structure.
fn report_memory() {
    fn per_timer<T: Timers>(make: impl Fn() -> T) -> f64 {
        let before = LIVE.load(Ordering::Relaxed);
        let t = filled(make(), 1_000_000, &mut SmallRng::seed_from_u64(1));
        let bytes = LIVE.load(Ordering::Relaxed) - before;
        drop(t);
        bytes as f64 / 1e6
    }
    println!("heap bytes per live timer at 1M (payload 8 bytes):");
    println!("  wheel      {:6.1}", per_timer(TimerWheel::<Payload>::new));
    println!(
        "  wheel(pre) {:6.1}  (with_capacity(1M))",
        per_timer(|| TimerWheel::<Payload>::with_capacity(1_000_000))
    );
    println!("  btreemap   {:6.1}", per_timer(Tree::default));
    println!("  binaryheap {:6.1}", per_timer(Heap::default));
}

fn benches(c: &mut Criterion) {
    report_memory();
    bench_structure(c, "wheel", TimerWheel::<Payload>::new);
    bench_structure(c, "btreemap", Tree::default);
    bench_structure(c, "binaryheap", Heap::default);
}

criterion_group! {
    name = wheel;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = benches
}
criterion_main!(wheel);
