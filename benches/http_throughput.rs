//! The HTTP cross-proxy against the CoAP path, side by side in one run (issue 15).
//!
//! One `backoffd proxy --upstream UP --http-listen ...` runs alone on CPU 1, with default
//! flags but the per-source send budget (off: the CoAP generator is one source, see
//! benches/proxy_throughput.rs). On CPU 0 one thread runs the fast upstream
//! (`benches/loadgen/`) and, in turn, the two clients:
//!
//! - `coap`: the CoAP load generator, CON GETs with CONNS requests outstanding (closed loop);
//! - `http`: CONNS HTTP/1.1 keep-alive connections, each with one GET outstanding, read and
//!   written without blocking in the same loop as the upstream.
//!
//! Both reach the same upstream through the same engine, so the difference is what the
//! HTTP side costs: parsing, translation, the in-process CoAP leg. ROUNDS rounds alternate
//! the two at full speed; then both run with one request outstanding, for latency (p50, p99)
//! without queueing: the HTTP round trip less the CoAP one is the latency the cross-proxy adds.
//!
//! `cargo bench --bench http_throughput`. Environment: SECONDS (per run, default 3), CONNS
//! (default 16), ROUNDS (default 3).

#[allow(dead_code, unused_imports)]
#[path = "loadgen/mod.rs"]
mod loadgen;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use backoffd::coap::option::URI_PATH;
use backoffd::stats::Summary;
use loadgen::{FastUpstream, LoadSpec, Offered};

const TARGET_CPU: usize = 1;
const REQUEST: &[u8] = b"GET /bench HTTP/1.1\r\nHost: bench\r\n\r\n";

fn var<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let (seconds, conns, rounds) = (var("SECONDS", 3.0), var("CONNS", 16), var("ROUNDS", 3));
    let pinned = pin(0, 0);
    let mut upstream = FastUpstream::bind("127.0.0.1:0".parse().unwrap()).expect("upstream");
    let up = upstream.local_addr().unwrap();
    let (_proxy, coap, http) = start_proxy(up, pinned);
    let run = Duration::from_secs_f64(seconds);
    wait_until_answering(coap, &mut upstream);
    eprintln!(
        "http_throughput: {seconds} s per run, {conns} outstanding, {rounds} rounds, {}",
        if pinned {
            "proxy on CPU 1, harness on CPU 0"
        } else {
            "not pinned"
        }
    );
    // Warm up both paths once.
    coap_run(coap, conns, run / 3, &mut upstream);
    http_run(http, conns, run / 3, &mut upstream);
    let (mut coap_rates, mut http_rates) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let c = coap_run(coap, conns, run, &mut upstream);
        let h = http_run(http, conns, run, &mut upstream);
        eprintln!("round {round}: coap {:.0}/s, http {:.0}/s", c.0, h.0);
        coap_rates.push(c.0);
        http_rates.push(h.0);
    }
    let (c1, h1) = (
        coap_run(coap, 1, run, &mut upstream),
        http_run(http, 1, run, &mut upstream),
    );
    report(&coap_rates, &http_rates, (c1, h1), conns);
}

/// Starts the proxy on the target CPU; it, its CoAP and its HTTP address.
fn start_proxy(up: SocketAddr, pinned: bool) -> (ChildGuard, SocketAddr, SocketAddr) {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (coap, http) = (free(), free());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_backoffd"));
    cmd.args([
        "proxy",
        "--listen",
        &coap.to_string(),
        "--upstream",
        &up.to_string(),
    ])
    .args([
        "--http-listen",
        &http.to_string(),
        "--client-bytes-per-sec",
        "0",
    ])
    .env("RUST_LOG", "warn")
    .stdin(Stdio::null());
    // SAFETY: only sched_setaffinity between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if pinned {
                pin(0, TARGET_CPU);
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("backoffd runs");
    (ChildGuard(child), coap, http)
}

/// Waits until the proxy answers CoAP through to the upstream, and takes HTTP connections.
fn wait_until_answering(coap: SocketAddr, upstream: &mut FastUpstream) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        // Refused (not listening yet) or no answer: try again.
        let spec = coap_spec(coap, 1, Duration::from_millis(100));
        if loadgen::run(&spec, Some(upstream)).is_ok_and(|r| r.answered > 0) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the proxy never answered");
}

/// CON GETs with `window` outstanding: answers per second and their round trips.
fn coap_run(
    to: SocketAddr,
    window: usize,
    duration: Duration,
    upstream: &mut FastUpstream,
) -> (f64, Summary) {
    let spec = coap_spec(to, window, duration);
    let r = loadgen::run(&spec, Some(upstream)).expect("coap run");
    (r.rate(), r.latency)
}

fn coap_spec(to: SocketAddr, window: usize, duration: Duration) -> LoadSpec {
    LoadSpec {
        target: to,
        confirmable: true,
        options: vec![(URI_PATH, b"bench".to_vec())],
        offered: Offered::Window(window),
        warmup: Duration::from_millis(200),
        duration,
        timeout: Duration::from_secs(1),
        burst: 16,
    }
}

/// One keep-alive connection with at most one request outstanding.
struct Conn {
    stream: TcpStream,
    sent_at: Option<Instant>,
    buf: Vec<u8>,
}

/// `conns` keep-alive connections, one GET outstanding each, for `duration`, serving the
/// upstream in the same loop: answers per second and their round trips.
fn http_run(
    to: SocketAddr,
    conns: usize,
    duration: Duration,
    upstream: &mut FastUpstream,
) -> (f64, Summary) {
    let mut all: Vec<Conn> = (0..conns)
        .map(|_| {
            let stream = TcpStream::connect(to).expect("connect");
            stream.set_nodelay(true).unwrap();
            stream.set_nonblocking(true).unwrap();
            Conn {
                stream,
                sent_at: None,
                buf: Vec::with_capacity(512),
            }
        })
        .collect();
    let start = Instant::now();
    let measure_from = start + Duration::from_millis(200);
    let end = measure_from + duration;
    let (mut answered, mut trips) = (0u64, Vec::new());
    while Instant::now() < end {
        upstream.serve(16).expect("upstream");
        for c in &mut all {
            if c.sent_at.is_none() {
                c.stream.write_all(REQUEST).expect("write");
                c.sent_at = Some(Instant::now());
            }
            if let Some(sent) = read_answer(c) {
                let now = Instant::now();
                if sent >= measure_from {
                    answered += 1;
                    trips.push((now - sent).as_nanos() as i64);
                }
            }
        }
    }
    let seconds = (Instant::now() - measure_from).as_secs_f64();
    (answered as f64 / seconds, Summary::from_nanos(&mut trips))
}

/// Reads what is there; the send time of the answer completed, if one is.
fn read_answer(c: &mut Conn) -> Option<Instant> {
    let mut chunk = [0u8; 4096];
    match c.stream.read(&mut chunk) {
        Ok(0) => panic!("the proxy closed a keep-alive connection"),
        Ok(n) => c.buf.extend_from_slice(&chunk[..n]),
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Err(e) => panic!("read: {e}"),
    }
    let head_end = c.buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&c.buf[..head_end]).expect("an ASCII head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let length: usize = (head.lines())
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .map_or(0, |v| v.trim().parse().unwrap());
    if c.buf.len() < head_end + length {
        return None;
    }
    c.buf.drain(..head_end + length);
    c.sent_at.take()
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn report(coap: &[f64], http: &[f64], (c1, h1): ((f64, Summary), (f64, Summary)), conns: usize) {
    let range = |v: &[f64]| {
        let (lo, hi) = (
            v.iter().copied().fold(f64::MAX, f64::min),
            v.iter().copied().fold(0.0, f64::max),
        );
        format!("{lo:.0}..{hi:.0}")
    };
    println!("\n| path ({conns} outstanding) | requests/s (median) | range | vs CoAP |");
    println!("|---|---:|---|---:|");
    println!(
        "| CoAP, CON GET | {:.0} | {} | 1.00 |",
        median(coap),
        range(coap)
    );
    println!(
        "| HTTP/1.1 keep-alive GET | {:.0} | {} | {:.2} |",
        median(http),
        range(http),
        median(http) / median(coap)
    );
    println!("\n| path (1 outstanding) | p50 µs | p99 µs |");
    println!("|---|---:|---:|");
    println!("| CoAP | {:.1} | {:.1} |", c1.1.p50_us, c1.1.p99_us);
    println!("| HTTP | {:.1} | {:.1} |", h1.1.p50_us, h1.1.p99_us);
    println!(
        "| added by the cross-proxy | {:.1} | {:.1} |",
        h1.1.p50_us - c1.1.p50_us,
        h1.1.p99_us - c1.1.p99_us
    );
}

struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Pins `pid` (0: this thread) to `cpu`, if the machine has a CPU for the proxy too.
fn pin(pid: libc::pid_t, cpu: usize) -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus <= TARGET_CPU {
        return false;
    }
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}
