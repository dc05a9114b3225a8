//! CoAP over TCP (issue 29), against the release binary on loopback, default flags:
//!
//! - `throughput`: GETs per second through `--listen-tcp` and through `--listen` (UDP) of
//!   one proxy, side by side in one run, ROUNDS rounds interleaved, WINDOW requests
//!   outstanding (closed loop) from one client, against one fast UDP upstream
//!   (`benches/loadgen/`) served by the same thread;
//! - `memory`: RSS per open connection (CSMs exchanged), over CONNS connections held open
//!   from as many loopback addresses as the per-source cap (64) needs; and per connection
//!   that never sends its CSM.
//!
//! `cargo bench --bench coap_tcp`. Environment: SECONDS (per throughput run, default 3),
//! WINDOW (default 32), ROUNDS (default 3), CONNS (default 500, under the default cap of 512).

#[allow(dead_code, unused_imports)]
#[path = "loadgen/mod.rs"]
mod loadgen;

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use backoffd::coap_tcp::frame::{decode_stream, Framing};
use backoffd::coap_tcp::signal::{self, Settings};
use common::daemon;
use loadgen::FastUpstream;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The same GET framed for TCP (RFC 8323 §3.2): Len 2, TKL 2, code, token, Uri-Path.
fn tcp_request(out: &mut Vec<u8>, n: u16) {
    let [a, b] = n.to_be_bytes();
    out.extend_from_slice(&[0x22, 0x01, a, b, 0xb1, b'x']);
}

fn csm() -> Vec<u8> {
    let mut out = Vec::new();
    signal::encode_csm(&mut out, Framing::Stream, Settings::default());
    out
}

/// Writes all of `bytes` to a non-blocking stream, serving the upstream while it is full.
fn write_all(s: &mut TcpStream, mut bytes: &[u8], upstream: &mut FastUpstream) {
    while !bytes.is_empty() {
        match s.write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let _ = upstream.serve(64);
            }
            Err(e) => panic!("write: {e}"),
        }
    }
}

/// Closed loop over TCP for `seconds`: answers per second.
fn tcp_rate(server: SocketAddr, upstream: &mut FastUpstream, window: u16, seconds: u64) -> f64 {
    let mut s = TcpStream::connect(server).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_nonblocking(true).unwrap();
    let mut out = csm();
    let mut next = 0u16;
    for _ in 0..window {
        tcp_request(&mut out, next);
        next = next.wrapping_add(1);
    }
    write_all(&mut s, &out, upstream);
    let (start, mut answers) = (Instant::now(), 0u64);
    let (mut input, mut buf) = (Vec::new(), vec![0u8; 64 * 1024]);
    while start.elapsed() < Duration::from_secs(seconds) {
        let _ = upstream.serve(64);
        match s.read(&mut buf) {
            Ok(0) => panic!("the proxy closed the connection"),
            Ok(n) => input.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
            Err(e) => panic!("read: {e}"),
        }
        let (mut used, mut got) = (0, 0);
        while let Ok(Some((f, n))) = decode_stream(&input[used..], usize::MAX) {
            used += n;
            got += usize::from(f.code.class() == 2);
        }
        input.drain(..used);
        answers += got as u64;
        out.clear();
        for _ in 0..got {
            tcp_request(&mut out, next);
            next = next.wrapping_add(1);
        }
        write_all(&mut s, &out, upstream);
    }
    answers as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// One proxy with both listeners, default flags otherwise.
fn proxy(upstream: SocketAddr) -> daemon::Proxy {
    let up = upstream.to_string();
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--listen-tcp",
        "127.0.0.1:0",
        "--upstream",
        &up,
    ];
    daemon::proxy("warn,backoffd=info", &args)
}

fn throughput() {
    let (seconds, window, rounds) = (
        env("SECONDS", 3),
        env("WINDOW", 32) as u16,
        env("ROUNDS", 3),
    );
    let mut upstream = FastUpstream::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let p = proxy(upstream.local_addr().unwrap());
    let (udp, tcp) = (p.coap, p.tcp.unwrap());
    let (mut t_rates, mut u_rates) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        t_rates.push(tcp_rate(tcp, &mut upstream, window, seconds));
        u_rates.push(loadgen::udp_closed_loop(
            udp,
            &mut upstream,
            window,
            seconds,
        ));
    }
    let (t, tlo, thi) = median(t_rates);
    let (u, ulo, uhi) = median(u_rates);
    println!("| client leg | GETs/s (median of {rounds}, window {window}) | range |");
    println!("|---|---|---|");
    println!("| `--listen-tcp` (one connection) | {t:.0} | {tlo:.0}-{thi:.0} |");
    println!("| `--listen` (UDP, CON) | {u:.0} | {ulo:.0}-{uhi:.0} |");
    println!("| TCP / UDP | {:.2} | |\n", t / u);
}

/// RSS growth per connection over `n` connections, with the CSM sent or not.
fn rss_per_connection(p: &daemon::Proxy, tcp: SocketAddr, n: usize, send_csm: bool) -> f64 {
    std::thread::sleep(Duration::from_millis(300));
    let before = p.proc.status_kib("VmRSS");
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let from = std::net::Ipv4Addr::new(127, 0, 0, 2 + (i / 64) as u8);
        let mut s = common::tcp_connect_from(from, tcp);
        if send_csm {
            s.write_all(&csm()).unwrap();
        }
        held.push(s);
    }
    // Each connection's CSM from the proxy shows that it was accepted and set up.
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut first = [0u8; 64];
        assert!(s.read(&mut first).unwrap() > 0, "no CSM from the proxy");
    }
    std::thread::sleep(Duration::from_millis(300));
    let grown = p.proc.status_kib("VmRSS").saturating_sub(before);
    grown as f64 / n as f64
}

fn memory() {
    let n = env("CONNS", 500) as usize;
    let upstream = FastUpstream::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let p = proxy(upstream.local_addr().unwrap());
    let tcp = p.tcp.unwrap();
    let open = rss_per_connection(&p, tcp, n, true);
    drop(p);
    let p = proxy(upstream.local_addr().unwrap());
    let waiting = rss_per_connection(&p, p.tcp.unwrap(), n, false);
    println!("| figure | value |");
    println!("|---|---|");
    println!("| RSS per open connection ({n} held, CSMs exchanged) | {open:.1} KiB |");
    println!("| RSS per connection that sent no CSM ({n} held) | {waiting:.1} KiB |\n");
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!("## CoAP over TCP (issue 29)\n");
    throughput();
    memory();
}
