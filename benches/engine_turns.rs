//! The proxy engine alone, without sockets: how long each "turn" of work takes at a steady
//! offered rate, to find work that stops the world (issue 26). A turn hands the engine what one
//! wake-up of the loop would: a batch of client requests, the upstream's answers to the
//! previous batch, and the timers due. Time is virtual and advances by the offered rate, so
//! every deadline falls where it would in a real run; the thread's CPU time measures each turn
//! (so another process taking the CPU does not make a turn look slow).
//!
//! `cargo bench --bench engine_turns`. Environment: RATE (requests per virtual second,
//! default 200000), BATCH (requests per turn, default 32), SECONDS (virtual seconds, default
//! 30), CACHE (response cache bytes, default 0: every request goes upstream; nonzero: all but
//! the first are hits). Prints the turn-time percentiles and the slowest turns with their
//! virtual time and what they ran.

use std::net::SocketAddr;
use std::time::Duration;

use backoffd::coap::option::URI_PATH;
use backoffd::coap::{Code, Message, MessageBuilder, MessageType};
use backoffd::proxy::{Destination, EndpointId, Proxy, ProxyConfig, Routing, Seeds};
use backoffd::time::Timestamp;

/// Reads one of the kernel's clocks.
fn clock(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which outlives the call.
    unsafe { libc::clock_gettime(id, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// This thread's CPU time: unlike the wall clock, it does not count time the thread was not
/// running, so a turn is not made slow by a neighbour taking the CPU.
fn cpu_now() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CLOCK_MONOTONIC, as `perf record -k CLOCK_MONOTONIC` stamps its samples: with SLOW_US,
/// each turn over that many microseconds of CPU is printed with its start and end, so that
/// `perf script` can show what ran in it.
fn mono_now() -> Duration {
    clock(libc::CLOCK_MONOTONIC)
}

fn var<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A CON GET of `/r` with a token that is never reused.
fn request(out: &mut Vec<u8>, n: u64) {
    out.clear();
    let token = n.to_be_bytes();
    let mut b = MessageBuilder::new(out, MessageType::Con, Code::GET, n as u16, &token);
    b.option(URI_PATH, b"r");
    b.finish().unwrap();
}

/// The upstream's piggybacked 2.05 to `req`, 8 bytes of payload.
fn answer(out: &mut Vec<u8>, req: &[u8]) {
    out.clear();
    let req = Message::parse(req).unwrap();
    let (mid, token) = (req.message_id(), req.token());
    let mut b = MessageBuilder::new(out, MessageType::Ack, Code::CONTENT, mid, token);
    b.payload(b"12345678");
    b.finish().unwrap();
}

/// One turn's work and how long it took.
struct Turn {
    at: Duration,
    took: Duration,
    requests: usize,
    answers: usize,
    timers: usize,
    /// Wall time of each phase: upstream answers, client requests, timers and transmits.
    phases: [Duration; 3],
    /// Endpoint sockets the engine asked to open or close.
    endpoint_events: usize,
}

/// The run's settings, from the environment.
struct Settings {
    rate: f64,
    batch: usize,
    seconds: f64,
    cache: usize,
    slow_us: u64,
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            rate: var("RATE", 200_000.0),
            batch: var("BATCH", 32),
            seconds: var("SECONDS", 30.0),
            cache: var("CACHE", 0),
            slow_us: var("SLOW_US", 0),
        }
    }
}

/// The engine under test and what is in flight between it and its (simulated) peers.
struct Bench {
    p: Proxy,
    start: Timestamp,
    client: SocketAddr,
    req: Vec<u8>,
    ans: Vec<u8>,
    to_upstream: Vec<(EndpointId, Vec<u8>)>,
    /// Requests sent so far.
    n: u64,
    /// Datagrams the engine sent to the client.
    answered: u64,
}

impl Bench {
    fn new(cache: usize) -> Bench {
        let config = ProxyConfig {
            routing: Routing {
                upstream: Some("127.0.0.1:5683".parse().unwrap()),
                allow: Vec::new(),
                forward: false,
            },
            cache_size: cache,
            ..ProxyConfig::default()
        };
        let start = Timestamp::ZERO + Duration::from_secs(1);
        let mut p = Proxy::new(
            config,
            Seeds {
                rng: 1,
                hash: [1, 2],
            },
        );
        p.accept_endpoint_events(start);
        Bench {
            p,
            start,
            client: "127.0.0.1:40000".parse().unwrap(),
            req: Vec::new(),
            ans: Vec::new(),
            to_upstream: Vec::new(),
            n: 0,
            answered: 0,
        }
    }

    /// One turn at virtual time `now`: the upstream's answers to the previous batch, `batch`
    /// new requests, the timers due, and the transmits.
    fn turn(&mut self, now: Timestamp, batch: usize, slow_us: u64) -> Turn {
        let p = &mut self.p;
        let began = cpu_now();
        let wall = mono_now();
        let answers = self.to_upstream.len();
        for (ep, r) in self.to_upstream.drain(..) {
            answer(&mut self.ans, &r);
            p.handle_upstream_datagram(now, ep, &self.ans);
        }
        let after_answers = cpu_now() - began;
        for _ in 0..batch {
            request(&mut self.req, self.n);
            self.n += 1;
            p.handle_client_datagram(now, self.client, &self.req);
        }
        let after_requests = cpu_now() - began;
        let mut timers = 0;
        while let Some(at) = p.poll_timeout().filter(|&at| at <= now) {
            p.handle_timeout(at);
            timers += 1;
        }
        while let Some(t) = p.poll_transmit() {
            match t.to {
                Destination::Upstream(ep) => self.to_upstream.push((ep, t.payload)),
                Destination::Client(_) => self.answered += 1,
            }
        }
        let endpoint_events = p.accept_endpoint_events(now).len();
        let took = cpu_now() - began;
        if slow_us > 0 && took.as_micros() as u64 >= slow_us {
            eprintln!(
                "SLOW {:.6} {:.6}",
                wall.as_secs_f64(),
                mono_now().as_secs_f64()
            );
        }
        Turn {
            at: now.saturating_since(self.start),
            took,
            requests: batch,
            answers,
            timers,
            phases: [
                after_answers,
                after_requests - after_answers,
                took - after_requests,
            ],
            endpoint_events,
        }
    }
}

fn main() {
    let s = Settings::from_env();
    let mut bench = Bench::new(s.cache);
    let step = Duration::from_secs_f64(s.batch as f64 / s.rate);
    let turns_total = (s.seconds * s.rate / s.batch as f64) as usize;
    let mut turns = Vec::with_capacity(turns_total);
    for i in 0..turns_total {
        let now = bench.start + step * i as u32;
        turns.push(bench.turn(now, s.batch, s.slow_us));
    }
    print_summary(&s, &bench, &mut turns);
}

/// Prints the turn-time percentiles and the slowest turns.
fn print_summary(s: &Settings, bench: &Bench, turns: &mut [Turn]) {
    let Settings {
        rate,
        batch,
        seconds,
        cache,
        ..
    } = s;
    let (n, answered) = (bench.n, bench.answered);
    let mut sorted: Vec<Duration> = turns.iter().map(|t| t.took).collect();
    sorted.sort();
    let q = |f: f64| sorted[((sorted.len() - 1) as f64 * f) as usize];
    println!(
        "engine_turns: {rate} req/s, {batch} per turn, {seconds} virtual s, cache {cache} B: \
         {} turns, {n} requests, {answered} datagrams to the client",
        turns.len()
    );
    println!(
        "turn CPU time: p50 {:?}, p99 {:?}, p99.9 {:?}, p99.99 {:?}, max {:?}",
        q(0.5),
        q(0.99),
        q(0.999),
        q(0.9999),
        sorted[sorted.len() - 1]
    );
    turns.sort_by_key(|t| std::cmp::Reverse(t.took));
    println!(
        "slowest turns: virtual time, CPU time (answers | requests | timers and sends), \
         requests, upstream answers, timers, endpoint events"
    );
    for t in turns.iter().take(12) {
        println!(
            "  {:>10.4} s  {:>10?} ({:?} | {:?} | {:?})  {} {} {} {}",
            t.at.as_secs_f64(),
            t.took,
            t.phases[0],
            t.phases[1],
            t.phases[2],
            t.requests,
            t.answers,
            t.timers,
            t.endpoint_events
        );
    }
}
