//! coaps (issue 28), against the release binary on loopback, default flags:
//!
//! - `throughput`: CON GETs per second through `--listen-dtls` (PSK, AES-128-CCM-8) and
//!   through plain `--listen`, side by side in one run, ROUNDS rounds interleaved, WINDOW
//!   requests outstanding (closed loop) from one client, against one fast upstream
//!   (`benches/loadgen/`) served by the same thread;
//! - `handshakes`: PSK handshakes per second, one client after the other from new ports;
//! - `memory`: RSS per established session, over SESSIONS sessions held open;
//! - `flood`: 2,000 ClientHellos from 2,000 source ports, then a legitimate
//!   `coap-client-openssl`: the proxy, and libcoap 4.3.1's `coap-server-openssl -k` beside it.
//!
//! `cargo bench --bench coaps`. Environment: SECONDS (per throughput run, default 3),
//! WINDOW (default 32), ROUNDS (default 3), SESSIONS (default 1000).

#[allow(dead_code, unused_imports)]
#[path = "loadgen/mod.rs"]
mod loadgen;

#[path = "../tests/common/mod.rs"]
mod common;

#[allow(dead_code)]
#[path = "../tests/coaps_interop/flood.rs"]
mod flood;

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{daemon, Proc};
use loadgen::FastUpstream;
use rtc_dtls::cipher_suite::CipherSuiteId;
use rtc_dtls::config::ConfigBuilder;
use rtc_dtls::crypto_provider::default_provider;
use rtc_dtls::endpoint::{Endpoint, EndpointEvent};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn key_file() -> String {
    let path = std::env::temp_dir().join(format!("coaps-bench-{}.key", std::process::id()));
    std::fs::write(&path, "secretkey").unwrap();
    path.to_string_lossy().into_owned()
}

/// The proxy with `listen` flags in front of `upstream`; its client-facing address.
fn proxy(upstream: SocketAddr, listen: &[&str]) -> (daemon::Proxy, SocketAddr) {
    let up = upstream.to_string();
    let mut args = vec!["--upstream", up.as_str()];
    args.extend_from_slice(listen);
    let p = daemon::proxy("warn,backoffd=info", &args);
    let addr = p.coaps.unwrap_or(p.coap);
    (p, addr)
}

/// One DTLS client: an rtc-dtls endpoint over its own socket.
struct Client {
    socket: UdpSocket,
    endpoint: Endpoint,
    server: SocketAddr,
}

impl Client {
    fn connect(server: SocketAddr) -> Client {
        Client::connect_from(1, server)
    }

    /// Ends the session with close_notify.
    fn close(mut self) {
        self.endpoint.stop(Instant::now(), self.server);
        while let Some(t) = self.endpoint.poll_transmit() {
            let _ = self.socket.send_to(&t.message, self.server);
        }
    }

    /// A client from 127.0.0.`host` (the per-source session cap counts addresses).
    fn connect_from(host: u8, server: SocketAddr) -> Client {
        let socket = UdpSocket::bind(("127.0.0.".to_string() + &host.to_string(), 0)).unwrap();
        socket.set_nonblocking(true).unwrap();
        let config = ConfigBuilder::default()
            .with_psk(Some(Arc::new(|_: &[u8]| Ok(b"secretkey".to_vec()))))
            .with_psk_identity_hint(Some(b"client1".to_vec()))
            .with_cipher_suites(vec![CipherSuiteId::Tls_Psk_With_Aes_128_Ccm_8])
            .with_crypto_provider(default_provider().unwrap())
            .build(true, None)
            .unwrap();
        let local = socket.local_addr().unwrap();
        let mut endpoint = Endpoint::new(local, rtc_shared::TransportProtocol::UDP, None);
        endpoint
            .connect(Instant::now(), server, Arc::new(config), None)
            .unwrap();
        Client {
            socket,
            endpoint,
            server,
        }
    }

    /// Sends what the endpoint queued; reads what came, returning its events.
    fn pump(&mut self, upstream: Option<&mut FastUpstream>, out: &mut Vec<Vec<u8>>) -> bool {
        while let Some(t) = self.endpoint.poll_transmit() {
            let _ = self.socket.send_to(&t.message, self.server);
        }
        if let Some(u) = upstream {
            let _ = u.serve(64);
        }
        let mut complete = false;
        let mut buf = [0u8; 2048];
        while let Ok(n) = self.socket.recv(&mut buf) {
            let events = self
                .endpoint
                .read(Instant::now(), self.server, None, buf[..n].into());
            for e in events.into_iter().flatten() {
                match e {
                    EndpointEvent::HandshakeComplete => complete = true,
                    EndpointEvent::ApplicationData(d) => out.push(d.to_vec()),
                    _ => {}
                }
            }
        }
        let _ = self.endpoint.handle_timeout(self.server, Instant::now());
        complete
    }

    fn handshake(&mut self, upstream: &mut FastUpstream) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut sink = Vec::new();
        while Instant::now() < deadline {
            if self.pump(Some(upstream), &mut sink) {
                return true;
            }
        }
        false
    }
}

/// Closed loop over DTLS for `seconds`: answers per second.
fn dtls_rate(server: SocketAddr, upstream: &mut FastUpstream, window: u16, seconds: u64) -> f64 {
    let mut c = Client::connect(server);
    assert!(c.handshake(upstream), "no handshake with {server}");
    let mut next = 0u16;
    for _ in 0..window {
        c.endpoint
            .write(Instant::now(), server, &loadgen::udp_get(next))
            .unwrap();
        next = next.wrapping_add(1);
    }
    let (start, mut answers, mut got) = (Instant::now(), 0u64, Vec::new());
    let mut last_progress = Instant::now();
    while start.elapsed() < Duration::from_secs(seconds) {
        c.pump(Some(upstream), &mut got);
        if !got.is_empty() {
            last_progress = Instant::now();
        }
        // A lost datagram loses its slot of the window: refill after 50 ms without answers.
        let refill = if last_progress.elapsed() > Duration::from_millis(50) {
            last_progress = Instant::now();
            window as usize
        } else {
            got.len()
        };
        answers += got.len() as u64;
        got.clear();
        for _ in 0..refill {
            c.endpoint
                .write(Instant::now(), server, &loadgen::udp_get(next))
                .unwrap();
            next = next.wrapping_add(1);
        }
    }
    answers as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn throughput(key: &str) {
    let (seconds, window, rounds) = (
        env("SECONDS", 3),
        env("WINDOW", 32) as u16,
        env("ROUNDS", 3),
    );
    let mut upstream = FastUpstream::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let up = upstream.local_addr().unwrap();
    let psk = ["--psk-identity", "client1", "--psk-key-file", key];
    let (_d, coaps) = proxy(up, &[&["--listen-dtls", "127.0.0.1:0"][..], &psk].concat());
    let (_p, plain) = proxy(up, &["--listen", "127.0.0.1:0"]);
    let (mut d_rates, mut p_rates) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        d_rates.push(dtls_rate(coaps, &mut upstream, window, seconds));
        p_rates.push(loadgen::udp_closed_loop(
            plain,
            &mut upstream,
            window,
            seconds,
        ));
    }
    let (d, dlo, dhi) = median(d_rates);
    let (p, plo, phi) = median(p_rates);
    println!("| listener | CON GETs/s (median of {rounds}) | range |");
    println!("|---|---|---|");
    println!("| `--listen-dtls` (PSK, CCM_8) | {d:.0} | {dlo:.0}-{dhi:.0} |");
    println!("| `--listen` (plain) | {p:.0} | {plo:.0}-{phi:.0} |");
    println!("| coaps / plain | {:.2} | |\n", d / p);
}

fn handshakes_and_memory(key: &str) {
    let mut upstream = FastUpstream::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let up = upstream.local_addr().unwrap();
    let psk = ["--psk-identity", "client1", "--psk-key-file", key];
    let (d, coaps) = proxy(up, &[&["--listen-dtls", "127.0.0.1:0"][..], &psk].concat());
    let start = Instant::now();
    let mut done = 0;
    while start.elapsed() < Duration::from_secs(2) {
        let mut c = Client::connect(coaps);
        assert!(c.handshake(&mut upstream), "handshake {done}");
        c.close();
        done += 1;
    }
    let rate = done as f64 / start.elapsed().as_secs_f64();
    println!("| figure | value |");
    println!("|---|---|");
    println!("| PSK handshakes/s, one client after the other (each a new port) | {rate:.0} |");
    // Then SESSIONS sessions held open, from as many loopback addresses as the default
    // per-source cap (64) needs.
    std::thread::sleep(Duration::from_millis(300));
    let n = env("SESSIONS", 1000) as usize;
    let before = d.proc.status_kib("VmRSS");
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let mut c = Client::connect_from(2 + (i / 64) as u8, coaps);
        assert!(c.handshake(&mut upstream), "session {i}");
        held.push(c);
    }
    let grown = d.proc.status_kib("VmRSS").saturating_sub(before);
    println!(
        "| RSS per established session ({n} held) | {:.1} KiB |\n",
        grown as f64 / n as f64
    );
}

/// `coap-client-openssl` GET of `uri`: the time to its answer, or `None` within `bound` s.
fn legit_client(uri: &str, bound: u64) -> Option<Duration> {
    let out = std::env::temp_dir().join(format!("coaps-bench-{}.out", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let start = Instant::now();
    let b = bound.to_string();
    let mut p = Proc::spawn(
        "coap-client-openssl",
        Command::new("coap-client-openssl").args([
            "-k",
            "secretkey",
            "-u",
            "client1",
            "-B",
            &b,
            "-o",
            out.to_str().unwrap(),
            uri,
        ]),
    );
    p.wait_exit(Duration::from_secs(bound + 5));
    let took = start.elapsed();
    let answered = std::fs::read(&out).map(|b| !b.is_empty()).unwrap_or(false);
    answered.then_some(took)
}

fn flood_row(name: &str, target: SocketAddr, uri: &str, rss: impl Fn() -> u64) {
    let before = rss();
    let f = flood::client_hellos(target, 2000);
    let grown = rss().saturating_sub(before);
    let legit = legit_client(uri, 5).map_or("nothing within 5 s".to_string(), |t| {
        format!("{:.0} ms", t.as_secs_f64() * 1e3)
    });
    println!(
        "| {name} | {} in {:.0} ms | {} | {} | {:.2} | +{:.1} MiB | {legit} |",
        f.sent,
        f.send_time.as_secs_f64() * 1e3,
        f.verify_requests,
        f.other_answers,
        f.bytes_in as f64 / f.bytes_out as f64,
        grown as f64 / 1024.0
    );
}

/// libcoap's example server on a free port (`-k`: its coaps port is that + 1); and the port.
fn libcoap_server(binary: &str, extra: &[&str]) -> (Proc, u16) {
    let port = common::free_port_on("127.0.0.1");
    let mut args = vec![
        "-A".to_string(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let server = Proc::spawn(binary, Command::new(binary).args(&args));
    std::thread::sleep(Duration::from_millis(500));
    (server, port)
}

fn floods(key: &str) {
    // The origin: libcoap's example server, whose `/` answers with text.
    let (_origin, port) = libcoap_server("coap-server-notls", &[]);
    let up: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    println!("| server | ClientHellos sent | HelloVerifyRequests | other answers | bytes out/in | RSS | a legitimate client after it |");
    println!("|---|---|---|---|---|---|---|");
    let psk = ["--psk-identity", "client1", "--psk-key-file", key];
    let (d, coaps) = proxy(up, &[&["--listen-dtls", "127.0.0.1:0"][..], &psk].concat());
    flood_row(
        "backoffd `--listen-dtls`",
        coaps,
        &format!("coaps://{coaps}/"),
        || d.proc.status_kib("VmRSS"),
    );
    drop(d);
    let (server, port) = libcoap_server("coap-server-openssl", &["-k", "secretkey"]);
    let target: SocketAddr = format!("127.0.0.1:{}", port + 1).parse().unwrap();
    flood_row(
        "libcoap 4.3.1 `coap-server-openssl -k`",
        target,
        &format!("coaps://{target}/"),
        || server.status_kib("VmRSS"),
    );
    println!();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let key = key_file();
    println!("## coaps (issue 28)\n");
    throughput(&key);
    handshakes_and_memory(&key);
    floods(&key);
}
