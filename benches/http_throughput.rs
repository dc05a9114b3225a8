//! The HTTP cross-proxy against the CoAP path, side by side in one run (issue 15).
//!
//! One `backoffd proxy --upstream UP --http-listen ...` runs alone on CPU 1, with default
//! flags. On CPU 0 one thread runs the fast upstream (`benches/loadgen/`) and, in turn, the
//! two clients:
//!
//! - `coap`: the CoAP load generator, CON GETs with CONNS requests outstanding (closed loop);
//! - `http`: CONNS HTTP/1.1 keep-alive connections, each with one GET outstanding, read and
//!   written without blocking in the same loop as the upstream.
//!
//! Both reach the same upstream through the same engine, so the difference is what the
//! HTTP side costs: parsing, translation, the in-process CoAP leg. ROUNDS rounds alternate
//! the two at full speed; then both run with one request outstanding, for latency (p50, p99)
//! without queueing, each from a busy loop written alike (a plain UDP socket for CoAP): the
//! HTTP round trip less the CoAP one is the latency the cross-proxy adds.
//!
//! `cargo bench --bench http_throughput`. Environment: SECONDS (per run, default 3), CONNS
//! (default 16), ROUNDS (default 3).

#[allow(dead_code, unused_imports)]
#[path = "loadgen/mod.rs"]
mod loadgen;

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use backoffd::coap::option::URI_PATH;
use backoffd::stats::Summary;
use common::{daemon, free_ports_on, Proc};
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
    let (proxy, coap, http) = start_proxy(up, pinned);
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
    let (mut coap_cpu, mut http_cpu) = (Vec::new(), Vec::new());
    let pid = proxy.child.id();
    for round in 1..=rounds {
        let before = cpu_seconds(pid);
        let c = coap_run(coap, conns, run, &mut upstream);
        let between = cpu_seconds(pid);
        let h = http_run(http, conns, run, &mut upstream);
        let after = cpu_seconds(pid);
        // The proxy's CPU time per answer: what each path costs it, whatever bounds the rate.
        let per = |cpu: f64, rate: f64| cpu * 1e6 / (rate * (run.as_secs_f64() + 0.2));
        coap_cpu.push(per(between - before, c.0));
        http_cpu.push(per(after - between, h.0));
        eprintln!(
            "round {round}: coap {:.0}/s ({:.1} µs CPU each), http {:.0}/s ({:.1} µs CPU each)",
            c.0,
            coap_cpu[round - 1],
            h.0,
            http_cpu[round - 1]
        );
        coap_rates.push(c.0);
        http_rates.push(h.0);
    }
    // One request at a time, both clients written alike (a busy loop that also serves the
    // upstream), so their round trips compare.
    let (c1, h1) = (
        (0.0, coap_one_at_a_time(coap, run, &mut upstream)),
        http_run(http, 1, run, &mut upstream),
    );
    report(&coap_rates, &http_rates, (c1, h1), conns);
    println!("\n| path | proxy CPU per request, µs (median) | range |");
    println!("|---|---:|---|");
    println!(
        "| CoAP | {:.1} | {} |",
        median(&coap_cpu),
        range(&coap_cpu, 1)
    );
    println!(
        "| HTTP | {:.1} | {} |",
        median(&http_cpu),
        range(&http_cpu, 1)
    );
}

/// User and system CPU time of process `pid` so far (`/proc/PID/stat`, fields 14 and 15).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    let after_name = &stat[stat.rfind(')').expect("(comm)") + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // After "pid (comm) ", field 3 (state) is index 0: utime is field 14, stime 15.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn range(v: &[f64], decimals: usize) -> String {
    let lo = v.iter().copied().fold(f64::MAX, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    format!("{lo:.decimals$}..{hi:.decimals$}")
}

/// Starts the proxy on the target CPU; it, its CoAP and its HTTP address. It logs warnings
/// only (no listening lines): [`wait_until_answering`] tells when it is up.
fn start_proxy(up: SocketAddr, pinned: bool) -> (Proc, SocketAddr, SocketAddr) {
    let [coap, http] = free_ports_on("127.0.0.1").map(|p| SocketAddr::from(([127, 0, 0, 1], p)));
    let (coap_arg, up_arg, http_arg) = (coap.to_string(), up.to_string(), http.to_string());
    let args = ["proxy", "--listen", &coap_arg, "--upstream", &up_arg];
    let mut cmd = daemon::command(&[&args[..], &["--http-listen", &http_arg]].concat(), "warn");
    // SAFETY: only sched_setaffinity between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if pinned {
                pin(0, TARGET_CPU);
            }
            Ok(())
        });
    }
    (Proc::spawn("backoffd proxy", &mut cmd), coap, http)
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
    if r.errors + r.lost > 0 {
        eprintln!(
            "coap: {} errors, {} lost of {}",
            r.errors,
            r.lost,
            r.answered + r.errors + r.lost
        );
    }
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

/// CON GETs one at a time from a plain socket, in a loop like [`http_run`]'s: round trips.
fn coap_one_at_a_time(to: SocketAddr, duration: Duration, upstream: &mut FastUpstream) -> Summary {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(to).unwrap();
    socket.set_nonblocking(true).unwrap();
    let measure_from = Instant::now() + Duration::from_millis(200);
    let end = measure_from + duration;
    let (mut mid, mut trips, mut buf) = (0u16, Vec::new(), [0u8; 256]);
    while Instant::now() < end {
        mid = mid.wrapping_add(1);
        let mut request = Vec::with_capacity(16);
        let ty = backoffd::coap::MessageType::Con;
        let code = backoffd::coap::Code::GET;
        let mut b = backoffd::coap::MessageBuilder::new(&mut request, ty, code, mid, &[1, 2]);
        b.option(URI_PATH, b"bench");
        b.finish().unwrap();
        let sent = Instant::now();
        socket.send(&request).unwrap();
        loop {
            upstream.serve(16).expect("upstream");
            match socket.recv(&mut buf) {
                Ok(n) if n >= 4 && u16::from_be_bytes([buf[2], buf[3]]) == mid => break,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("recv: {e}"),
            }
            assert!(Instant::now() < end + Duration::from_secs(1), "no answer");
        }
        if sent >= measure_from {
            trips.push((Instant::now() - sent).as_nanos() as i64);
        }
    }
    Summary::from_nanos(&mut trips)
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
