//! The security audit's probes (issue 13), against the release binary on loopback, each
//! printing the figures the issue measured, so that they can be measured again on any host.
//!
//! `cargo bench --bench attack` runs every probe; `PROBES=datagram,rapid_reset` picks some.
//! Every probe is bounded in count and time and targets 127.0.0.1 only. What each measures:
//!
//! | probe | issue row | figure |
//! |---|---|---|
//! | `datagram` | 1 | the worst single datagram's cost, and a legit request's answer time behind it |
//! | `grpc_memory` | 2 | RSS growth from 10 streams of unfinished 4 MiB gRPC messages |
//! | `reflection` | 3 | a victim that never ACKs, default flags: bytes in, out, ratio, 3x + 1 datagram |
//! | `cache_flood` | 4 | others' answers evicted, and requests run twice, under one source's flood |
//! | `inflight_bytes` | 5 | RSS growth from 400 large CONs to a silent upstream |
//! | `descriptors` | 6 | a waiting client's answer time once exhausted descriptors are back |
//! | `control_flood` | 7 | `serve`'s CoAP round trips while the control port is flooded |
//! | `rapid_reset` | 8 | HEADERS+RST_STREAM pairs accepted before the cut-off, Starts dispatched |
//! | `settings_flood` | 9 | big SETTINGS frames taken before the cut-off, another connection's PING time |
//! | `empty_frames` | 10 | empty CONTINUATIONs taken before the cut-off; an unfinished header block's life |
//! | `non_reader` | 11 | a peer that never reads: held output, and when it is given up; the connection cap |
//! | `metrics_idle` | 12 | a scrape's time with every metrics slot held by an idle keep-alive |
//! | `retry_flood` | 13 | retry-port connects in one session: intervals kept, the verdict, log lines |
//!
//! Issue 25's probes (the HTTP front and the answer store) are in `attack/hostile_http.rs`:
//! `http_slots`, `answer_store`, `http_bodies`, `sse_cr` and `pipelined_local`.

// The reflection cases are the test's (tests/proxy_reflection.rs), so that the figures printed
// here are the ones it asserts on; the tests themselves are not compiled into the bench. It
// brings the tests' helpers (tests/common/) with it.
#[allow(dead_code, unused_imports)]
#[path = "../tests/proxy_reflection.rs"]
mod reflection;

#[path = "attack/hostile_http.rs"]
mod hostile_http;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use backoffd::coap::option::{PROXY_URI, URI_PATH, URI_QUERY};
use backoffd::coap::{Code, Message, MessageBuilder, MessageType};
use backoffd::grpc::proto::testing::ReconnectInfo;
use backoffd::http2::error::ErrorCode;
use backoffd::http2::frame::{
    encode_data, encode_headers, encode_ping, encode_rst_stream, encode_settings, PREFACE,
};
use backoffd::http2::hpack::Encoder;
use prost::Message as _;
use reflection::common::exposition::scrape;
use reflection::common::http::{connect, read_answers};
use reflection::common::{self, daemon, free_port, Proc};

type Probe = fn() -> Vec<(String, String)>;

const PROBES: &[(&str, Probe)] = &[
    ("datagram", datagram),
    ("grpc_memory", grpc_memory),
    ("reflection", reflection),
    ("cache_flood", cache_flood),
    ("inflight_bytes", inflight_bytes),
    ("descriptors", descriptors),
    ("control_flood", control_flood),
    ("rapid_reset", rapid_reset),
    ("settings_flood", settings_flood),
    ("empty_frames", empty_frames),
    ("non_reader", non_reader),
    ("metrics_idle", metrics_idle),
    ("retry_flood", retry_flood),
    ("http_slots", hostile_http::http_slots),
    ("answer_store", hostile_http::answer_store),
    ("http_bodies", hostile_http::http_bodies),
    ("sse_cr", hostile_http::sse_cr),
    ("pipelined_local", hostile_http::pipelined_local),
];

fn main() {
    let wanted = std::env::var("PROBES").unwrap_or_default();
    let wanted: Vec<&str> = wanted.split(',').filter(|w| !w.is_empty()).collect();
    if let Some(bad) = wanted.iter().find(|w| PROBES.iter().all(|(n, _)| n != *w)) {
        eprintln!(
            "PROBES: no probe {bad:?}; known: {:?}",
            PROBES.iter().map(|(n, _)| *n).collect::<Vec<_>>()
        );
        std::process::exit(2);
    }
    println!("| probe | figure | value |\n|---|---|---|");
    for (name, probe) in PROBES {
        if wanted.is_empty() || wanted.contains(name) {
            for (figure, value) in probe() {
                println!("| {name} | {figure} | {value} |");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// CoAP helpers

/// An upstream that answers every request with a 2.05 of `payload` bytes (piggybacked on a
/// CON, a NON to a NON), until `stop`; `silent` answers nothing. Its address, and the number
/// of requests it has seen.
fn upstream(payload: usize, silent: bool, stop: Arc<AtomicBool>) -> (SocketAddr, Arc<AtomicU64>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let addr = socket.local_addr().unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    let counter = seen.clone();
    thread::spawn(move || {
        let (mut buf, mut out, body) = ([0u8; 65536], Vec::new(), vec![b'x'; payload]);
        let mut mid = 0u16;
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                continue;
            };
            let Ok(m) = Message::parse(&buf[..n]) else {
                continue;
            };
            let (kind, id) = match m.msg_type() {
                MessageType::Con => (MessageType::Ack, m.message_id()),
                MessageType::Non => (MessageType::Non, mid),
                _ => continue,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            if silent {
                continue;
            }
            mid = mid.wrapping_add(1);
            let mut b = MessageBuilder::new(&mut out, kind, Code::CONTENT, id, m.token());
            b.payload(&body);
            if b.finish().is_ok() {
                let _ = socket.send_to(&out, from);
            }
        }
    });
    (addr, seen)
}

/// `backoffd proxy` with default flags in front of an [`upstream`]; the upstream's stop flag,
/// the daemon and the proxy's address.
fn reverse_proxy(payload: usize, silent: bool) -> (Arc<AtomicBool>, Proc, SocketAddr) {
    let stop = Arc::new(AtomicBool::new(false));
    let up = upstream(payload, silent, stop.clone()).0.to_string();
    let p = daemon::proxy("debug", &["--listen", "127.0.0.1:0", "--upstream", &up]);
    (stop, p.proc, p.coap)
}

/// An option's number and value.
type CoapOption<'a> = (u16, &'a [u8]);

/// A CON GET with `options` (in order) and the given MID and token.
fn request(mid: u16, token: &[u8], options: &[CoapOption]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, MessageType::Con, Code::GET, mid, token);
    for (number, value) in options {
        b.option(*number, value);
    }
    b.finish().expect("a valid request");
    out
}

/// Waits for the answer to `token`; its code and when it came.
fn answer(socket: &UdpSocket, token: &[u8], timeout: Duration) -> Option<(Code, Instant)> {
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 65536];
    while Instant::now() < deadline {
        socket
            .set_read_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ))
            .unwrap();
        let Ok(n) = socket.recv(&mut buf) else {
            continue;
        };
        if let Ok(m) = Message::parse(&buf[..n]) {
            if m.token() == token && m.code() != Code::EMPTY {
                return Some((m.code(), Instant::now()));
            }
        }
    }
    None
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q) as usize]
}

// ---------------------------------------------------------------------------------------------
// Row 1: the worst single datagram

fn datagram() -> Vec<(String, String)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(2, false, stop.clone());
    let allow = up.to_string();
    let daemon = daemon::proxy(
        "debug",
        &["--listen", "127.0.0.1:0", "--forward", "--allow", &allow],
    );
    let proxy = daemon.coap;
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    let segments = format!("coap://{up}/{}", "/".repeat(65_000 - 30));
    let named = format!("coap://{up}/{}", "a/".repeat(32_480));
    let empty: &[u8] = b"";
    let many_options: Vec<CoapOption> = (0..65_400).map(|_| (URI_QUERY, empty)).collect();
    let shapes: [(&str, Vec<CoapOption>); 3] = [
        (
            "a Proxy-Uri of 65k empty segments",
            vec![(PROXY_URI, segments.as_bytes())],
        ),
        (
            "a Proxy-Uri of 32k one-letter segments",
            vec![(PROXY_URI, named.as_bytes())],
        ),
        ("65k empty options", many_options),
    ];
    let legit_uri = format!("coap://{up}/x");
    let mut figures = Vec::new();
    for (shape, options) in shapes {
        let size = request(0, b"bad", &options).len();
        let (mut worst_own, mut worst_legit, mut code) = (Duration::ZERO, Duration::ZERO, None);
        for round in 0..20u16 {
            let hostile = request(2 * round, b"bad", &options);
            let legit = request(2 * round + 1, b"good", &[(PROXY_URI, legit_uri.as_bytes())]);
            let sent = Instant::now();
            client.send_to(&hostile, proxy).unwrap();
            client.send_to(&legit, proxy).unwrap();
            // Both answers come back; read them in any order.
            let mut got = HashMap::new();
            let mut buf = [0u8; 65536];
            client
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            while got.len() < 2 {
                let Ok(n) = client.recv(&mut buf) else { break };
                if let Ok(m) = Message::parse(&buf[..n]) {
                    got.insert(m.token().to_vec(), (m.code(), sent.elapsed()));
                }
            }
            if let Some((c, t)) = got.get(&b"bad"[..]) {
                (worst_own, code) = (worst_own.max(*t), Some(*c));
            }
            let legit_time = got
                .get(&b"good"[..])
                .map_or(Duration::from_secs(2), |a| a.1);
            worst_legit = worst_legit.max(legit_time);
        }
        figures.push((
            format!("{shape} ({size} B): its answer"),
            format!(
                "{}, worst of 20 {}",
                code.map_or("none".into(), |c| c.to_string()),
                ms(worst_own)
            ),
        ));
        figures.push((
            format!("{shape}: a legit request sent right after, worst of 20"),
            ms(worst_legit),
        ));
    }
    stop.store(true, Ordering::Relaxed);
    figures
}

// ---------------------------------------------------------------------------------------------
// Row 3: reflection at default flags

/// Each case of tests/proxy_reflection.rs (run side by side: each has its own proxy, upstream
/// and victim socket, which listens for `reflection::WINDOW` after its last request).
fn reflection() -> Vec<(String, String)> {
    let runs: Vec<_> = (reflection::Case::ALL.iter())
        .map(|&case| thread::spawn(move || reflection::reflect(case)))
        .collect();
    runs.into_iter()
        .map(|run| run.join().expect("a reflection case"))
        .map(|r| {
            eprintln!("{}", r.line());
            let verdict = match r.tally.received <= r.bound() {
                true => "within",
                false => "OVER",
            };
            (
                format!(
                    "{}: bytes in / out (ratio), bound 3x + {} B",
                    r.case.name(),
                    reflection::ONE_DATAGRAM
                ),
                format!(
                    "{} B / {} B ({:.2}x), bound {} B: {verdict}",
                    r.tally.sent,
                    r.tally.received,
                    r.ratio(),
                    r.bound()
                ),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Row 4: the answer cache under one source's flood

fn cache_flood() -> Vec<(String, String)> {
    const LEGIT: u16 = 100;
    let stop = Arc::new(AtomicBool::new(false));
    let (up, seen) = upstream(8, false, stop.clone());
    let (_daemon, proxy, metrics) = common::daemon::proxy_with_metrics(up, &[]);
    let legit = UdpSocket::bind("127.0.0.1:0").unwrap();
    let kept: Vec<Vec<u8>> = (0..LEGIT)
        .map(|i| request(i, &i.to_be_bytes(), &[(URI_PATH, b"r")]))
        .collect();
    let served = |label: &str| {
        let answered = kept
            .iter()
            .enumerate()
            .filter(|(i, req)| {
                legit.send_to(req, proxy).unwrap();
                answer(&legit, &(*i as u16).to_be_bytes(), Duration::from_secs(1)).is_some()
            })
            .count();
        assert_eq!(
            answered, LEGIT as usize,
            "{label}: every legit request answered"
        );
    };
    served("first");
    // One source, 110k NON requests as fast as the socket takes them; it never reads.
    let flooder = UdpSocket::bind("127.0.0.1:0").unwrap();
    let started = Instant::now();
    for i in 0..110_000u32 {
        let mut out = Vec::new();
        let mut b = MessageBuilder::new(
            &mut out,
            MessageType::Non,
            Code::GET,
            i as u16,
            &i.to_be_bytes(),
        );
        b.option(URI_PATH, b"r");
        b.finish().unwrap();
        let _ = flooder.send_to(&out, proxy);
    }
    let flood_time = started.elapsed();
    thread::sleep(Duration::from_millis(500));
    let before = seen.load(Ordering::Relaxed);
    served("retransmitted");
    thread::sleep(Duration::from_millis(200));
    let ran_twice = seen.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    let m = scrape(metrics);
    let count = |name: &str| m.get(&format!("backoffd_coap_{name}_total"));
    vec![
        (
            format!(
                "110k NONs from one source in {}; then {LEGIT} retransmissions of another \
                 client's answered CONs",
                ms(flood_time)
            ),
            format!("{ran_twice} ran upstream again"),
        ),
        (
            "evictions: early / cache full / over the source's share".into(),
            format!(
                "{} / {} / {}",
                count("early_evictions"),
                count("cache_evictions"),
                count("share_evictions")
            ),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Row 5: large requests in flight

fn inflight_bytes() -> Vec<(String, String)> {
    let (stop, daemon, proxy) = reverse_proxy(0, true);
    let before = daemon.status_kib("VmRSS:");
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    let big = vec![b'p'; 60_000];
    let mut sent = 0;
    for i in 0..400u16 {
        let mut out = Vec::new();
        let mut b =
            MessageBuilder::new(&mut out, MessageType::Con, Code::POST, i, &i.to_be_bytes());
        b.option(URI_PATH, b"silent");
        b.payload(&big);
        b.finish().unwrap();
        sent += out.len();
        client.send_to(&out, proxy).unwrap();
    }
    thread::sleep(Duration::from_millis(500));
    let after = daemon.status_kib("VmRSS:");
    stop.store(true, Ordering::Relaxed);
    vec![(
        format!(
            "400 CONs of 60 kB ({} MB) to a silent upstream",
            sent / 1_000_000
        ),
        format!(
            "RSS +{:.1} MB",
            (after.saturating_sub(before)) as f64 / 1024.0
        ),
    )]
}

// ---------------------------------------------------------------------------------------------
// Row 6: descriptor exhaustion

fn descriptors() -> Vec<(String, String)> {
    let mut daemon =
        daemon::spawn_with_fd_limit(&["serve", "--metrics", "127.0.0.1:0"], "info", 64);
    let metrics = daemon.wait_addr("metrics listening on ");
    let attackers: Vec<TcpStream> = (0..128)
        .filter_map(|_| TcpStream::connect(metrics).ok())
        .collect();
    thread::sleep(Duration::from_millis(200));
    let mut legit = connect(metrics);
    thread::sleep(Duration::from_millis(200));
    drop(attackers);
    let left = Instant::now();
    legit
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let status = read_answers(&mut legit, &[false])[0].status;
    let warnings = daemon
        .drain_log()
        .iter()
        .filter(|l| l.contains("accept:"))
        .count();
    vec![
        (
            "a client waiting in the backlog, once 128 attackers left (limit 64 fds)".into(),
            format!("{status} after {}", ms(left.elapsed())),
        ),
        ("accept warnings logged".into(), warnings.to_string()),
    ]
}

// ---------------------------------------------------------------------------------------------
// HTTP/2 helpers

/// A control-port connection past the preface, with a thread watching what the server sends:
/// GOAWAY (and its code), RST_STREAM, the connection-level flow-control credit (WINDOW_UPDATE
/// on stream 0 added to the initial 65,535), PING ACKs, DATA payloads, and the end.
struct H2 {
    socket: TcpStream,
    goaway: Arc<AtomicU64>,
    resets: Arc<AtomicU64>,
    credit: Arc<AtomicU64>,
    pongs: mpsc::Receiver<Instant>,
    data: Arc<Mutex<Vec<u8>>>,
    closed: Arc<AtomicBool>,
}

const NO_GOAWAY: u64 = u64::MAX;

impl H2 {
    fn open(addr: SocketAddr) -> H2 {
        let mut socket = TcpStream::connect(addr).unwrap();
        let mut hello = PREFACE.to_vec();
        encode_settings(&mut hello, &[]);
        socket.write_all(&hello).unwrap();
        let (pong, pongs) = mpsc::channel();
        let h2 = H2 {
            socket,
            goaway: Arc::new(AtomicU64::new(NO_GOAWAY)),
            resets: Arc::new(AtomicU64::new(0)),
            credit: Arc::new(AtomicU64::new(65_535)),
            pongs,
            data: Arc::default(),
            closed: Arc::default(),
        };
        let mut reader = h2.socket.try_clone().unwrap();
        let (g, r, c) = (h2.goaway.clone(), h2.resets.clone(), h2.credit.clone());
        let (data, closed) = (h2.data.clone(), h2.closed.clone());
        thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 65536];
            while let Ok(n) = reader.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                while buf.len() >= 9 {
                    let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
                    if buf.len() < 9 + len {
                        break;
                    }
                    let payload = &buf[9..9 + len];
                    match buf[3] {
                        0x0 => data.lock().unwrap().extend_from_slice(payload),
                        0x3 => {
                            r.fetch_add(1, Ordering::Relaxed);
                        }
                        0x6 if buf[4] & 1 == 1 => {
                            let _ = pong.send(Instant::now());
                        }
                        0x8 if len == 4 && buf[5..9] == [0, 0, 0, 0] => {
                            let add = u32::from_be_bytes(payload.try_into().unwrap());
                            c.fetch_add(u64::from(add & 0x7fff_ffff), Ordering::Relaxed);
                        }
                        0x7 if len >= 8 => {
                            let code = u32::from_be_bytes(payload[4..8].try_into().unwrap());
                            g.store(u64::from(code), Ordering::Relaxed);
                        }
                        _ => {}
                    }
                    buf.drain(..9 + len);
                }
            }
            closed.store(true, Ordering::Relaxed);
        });
        h2
    }

    fn goaway(&self) -> Option<u64> {
        Some(self.goaway.load(Ordering::Relaxed)).filter(|&c| c != NO_GOAWAY)
    }

    /// The GOAWAY's error code by name, or "none".
    fn goaway_name(&self) -> String {
        self.goaway().map_or("none".into(), |c| {
            let code = ErrorCode(c as u32);
            code.name().map_or(format!("{c:#x}"), str::to_owned)
        })
    }

    /// One PING's round trip (a second if none comes back).
    fn ping_rtt(&mut self) -> Duration {
        let mut ping = Vec::new();
        encode_ping(&mut ping, false, [7; 8]);
        let sent = Instant::now();
        self.socket.write_all(&ping).unwrap();
        match self.pongs.recv_timeout(Duration::from_secs(1)) {
            Ok(at) => at - sent,
            Err(_) => Duration::from_secs(1),
        }
    }

    /// Waits up to `timeout` for the server to end the connection; how long it took.
    fn wait_closed(&self, timeout: Duration) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < timeout {
            if self.closed.load(Ordering::Relaxed) {
                return Some(started.elapsed());
            }
            thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

/// SO_RCVBUF on a connected socket: it also stops the kernel autotuning the buffer.
fn shrink_receive_buffer(socket: &TcpStream, bytes: libc::c_int) {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor and a c_int option value of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt(SO_RCVBUF)");
}

/// A frame's 9-byte header (RFC 9113 §4.1) and payload, for frames the library has no
/// encoder for, or that it would not write.
fn raw_frame(dst: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    dst.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    dst.extend_from_slice(&[kind, flags]);
    dst.extend_from_slice(&stream.to_be_bytes());
    dst.extend_from_slice(payload);
}

/// A HEADERS block for a unary call to ReconnectService's `method`.
fn call_headers(encoder: &mut Encoder, method: &str) -> Vec<u8> {
    let path = format!("/grpc.testing.ReconnectService/{method}");
    let fields: [(&[u8], &[u8]); 6] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.as_bytes()),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ];
    let mut block = Vec::new();
    encoder.encode(fields, &mut block);
    block
}

fn reconnect_server(extra: &[&str]) -> (Proc, SocketAddr, u16) {
    let (control, retry) = (free_port(), free_port());
    let (c, r) = (control.to_string(), retry.to_string());
    let mut args = vec!["reconnect-server", "--control_port", &c, "--retry_port", &r];
    args.extend_from_slice(extra);
    let mut daemon = daemon::spawn(&args, "info");
    daemon.wait_log("Server listening on", Duration::from_secs(10));
    (daemon, SocketAddr::from(([127, 0, 0, 1], control)), retry)
}

// ---------------------------------------------------------------------------------------------
// Row 2: gRPC memory

fn grpc_memory() -> Vec<(String, String)> {
    const MESSAGE: usize = 4 << 20;
    const CHUNK: usize = 16_384;
    let (daemon, control, _) = reconnect_server(&[]);
    let before = daemon.status_kib("VmRSS:");
    let mut h2 = H2::open(control);
    let mut encoder = Encoder::new();
    let mut out = Vec::new();
    for i in 0..10u32 {
        let block = call_headers(&mut encoder, "Start");
        encode_headers(&mut out, 2 * i + 1, &block, false, 16_384);
    }
    let _ = h2.socket.write_all(&out);
    // Each stream announces a 4 MiB message and sends all but its last byte, within the
    // connection's flow-control credit (streams start with 256 KiB each and get more as the
    // server reads; the connection's credit is the tighter bound, so it is the one tracked).
    let (mut sent, mut stalled) = (0usize, Instant::now());
    let total = 10 * (MESSAGE - CHUNK);
    while sent < total && h2.goaway().is_none() && stalled.elapsed() < Duration::from_secs(2) {
        let credit = h2.credit.load(Ordering::Relaxed) as usize;
        if credit < sent + CHUNK {
            thread::sleep(Duration::from_millis(1));
            continue;
        }
        let (stream, offset) = ((sent / CHUNK) % 10, (sent / CHUNK / 10) * CHUNK);
        let mut body = vec![0u8; CHUNK];
        if offset == 0 {
            body[..5].copy_from_slice(&[0, 0, 0x40, 0, 0]);
        }
        out.clear();
        encode_data(&mut out, 2 * stream as u32 + 1, &body, false, 16_384);
        if h2.socket.write_all(&out).is_err() {
            break;
        }
        sent += CHUNK;
        stalled = Instant::now();
    }
    thread::sleep(Duration::from_millis(300));
    let after = daemon.status_kib("VmRSS:");
    vec![(
        "10 streams of unfinished 4 MiB messages".into(),
        format!(
            "{:.1} MB sent before the server stopped taking; RSS +{:.1} MB; {} streams reset, \
             GOAWAY {}",
            sent as f64 / 1e6,
            after.saturating_sub(before) as f64 / 1024.0,
            h2.resets.load(Ordering::Relaxed),
            h2.goaway_name()
        ),
    )]
}

// ---------------------------------------------------------------------------------------------
// Row 8: Rapid Reset

fn rapid_reset() -> Vec<(String, String)> {
    let (_daemon, control, _) = {
        let metrics = format!("127.0.0.1:{}", free_port());
        let (d, c, r) = reconnect_server(&["--metrics", &metrics]);
        (d, (c, metrics.parse::<SocketAddr>().unwrap()), r)
    };
    let (control, metrics) = control;
    let mut h2 = H2::open(control);
    let mut encoder = Encoder::new();
    let started = Instant::now();
    let (mut pairs, mut batch) = (0u32, Vec::new());
    while pairs < 300_000 && h2.goaway().is_none() && started.elapsed() < Duration::from_secs(10) {
        batch.clear();
        for _ in 0..1000 {
            let stream = 2 * pairs + 1;
            encode_headers(
                &mut batch,
                stream,
                &call_headers(&mut encoder, "Start"),
                false,
                16_384,
            );
            encode_rst_stream(&mut batch, stream, ErrorCode::CANCEL);
            pairs += 1;
        }
        if h2.socket.write_all(&batch).is_err() {
            break;
        }
    }
    thread::sleep(Duration::from_millis(200));
    let starts = scrape(metrics).get("backoffd_reconnect_starts_total");
    vec![
        (
            "HEADERS+RST_STREAM pairs written before the cut-off".into(),
            format!("{pairs} in {}", ms(started.elapsed())),
        ),
        ("GOAWAY code".into(), h2.goaway_name()),
        ("Starts dispatched".into(), starts.to_string()),
    ]
}

// ---------------------------------------------------------------------------------------------
// Row 9: SETTINGS amplification

fn settings_flood() -> Vec<(String, String)> {
    let (_daemon, control, _) = reconnect_server(&[]);
    let mut flooder = H2::open(control);
    let mut encoder = Encoder::new();
    let mut out = Vec::new();
    for i in 0..100u32 {
        let block = call_headers(&mut encoder, "Start");
        encode_headers(&mut out, 2 * i + 1, &block, false, 16_384);
    }
    flooder.socket.write_all(&out).unwrap();
    // 2,730 entries fill a 16 KiB frame; each changes every open stream's window (§6.9.2).
    let entries: Vec<(u16, u32)> = (0..2730).map(|i| (0x4, 65_535 + i % 2)).collect();
    let mut frame = Vec::new();
    encode_settings(&mut frame, &entries);
    let mut legit = H2::open(control);
    let quiet = (0..10).map(|_| legit.ping_rtt()).max().unwrap();
    let flooding = Arc::new(AtomicBool::new(true));
    let still = flooding.clone();
    let writer = thread::spawn(move || {
        let mut frames = 0;
        while frames < 300 && flooder.goaway().is_none() && flooder.socket.write_all(&frame).is_ok()
        {
            frames += 1;
        }
        still.store(false, Ordering::Relaxed);
        thread::sleep(Duration::from_millis(100));
        (frames, flooder.goaway())
    });
    let mut busy = Duration::ZERO;
    while flooding.load(Ordering::Relaxed) {
        busy = busy.max(legit.ping_rtt());
        thread::sleep(Duration::from_millis(20));
    }
    let (frames, goaway) = writer.join().unwrap();
    let goaway = goaway.map_or("none", |c| ErrorCode(c as u32).name().unwrap_or("?"));
    vec![
        (
            "16 KiB SETTINGS frames (2,730 INITIAL_WINDOW_SIZE each, 100 open streams) written \
             until the GOAWAY came back"
                .into(),
            format!("{frames} of 300; GOAWAY {goaway}"),
        ),
        (
            "another connection's PING round trip, quiet / during the flood (max)".into(),
            format!("{} / {}", ms(quiet), ms(busy)),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Row 10: empty frames and unfinished header blocks

fn empty_frames() -> Vec<(String, String)> {
    const HEADERS: u8 = 0x1;
    const CONTINUATION: u8 = 0x9;
    let (_daemon, control, _) = reconnect_server(&[]);
    let mut encoder = Encoder::new();
    let block = call_headers(&mut encoder, "Start");
    // A header block that never ends, then empty CONTINUATIONs, 1,000 per write.
    let mut flooder = H2::open(control);
    let mut open = Vec::new();
    raw_frame(&mut open, HEADERS, 0, 1, &block);
    flooder.socket.write_all(&open).unwrap();
    let mut batch = Vec::new();
    for _ in 0..1000 {
        raw_frame(&mut batch, CONTINUATION, 0, 1, &[]);
    }
    let mut written = 0u32;
    while written < 1_000_000 && flooder.goaway().is_none() {
        if flooder.socket.write_all(&batch).is_err() {
            break;
        }
        written += 1000;
    }
    // A header block that is started and left alone.
    let mut idle = H2::open(control);
    let mut start = Vec::new();
    raw_frame(&mut start, HEADERS, 0, 1, &block);
    idle.socket.write_all(&start).unwrap();
    let closed = idle.wait_closed(Duration::from_secs(15));
    vec![
        (
            "empty CONTINUATION frames written until the GOAWAY came back (1,000 per write; \
             the server reads none after its cut-off, the rest wait in socket buffers)"
                .into(),
            format!("{written}; GOAWAY {}", flooder.goaway_name()),
        ),
        (
            "a header block left unfinished: the connection ends after".into(),
            format!(
                "{}; GOAWAY {}",
                closed.map_or("more than 15 s".into(), ms),
                idle.goaway_name()
            ),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Row 11: peers that never read, and idle connections

fn non_reader() -> Vec<(String, String)> {
    let mut daemon = daemon::spawn(&["serve", "--metrics", "127.0.0.1:0"], "debug");
    let metrics = daemon.wait_addr("metrics listening on ");
    let before = daemon.status_kib("VmRSS:");
    // Five connections pipeline 5,000 scrapes each (16 MB of answers) and read none of them;
    // a 4 KiB receive buffer keeps the kernel from holding it all for them.
    let scrapes = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(5000);
    let stuck: Vec<TcpStream> = (0..5)
        .map(|_| {
            let mut c = connect(metrics);
            shrink_receive_buffer(&c, 4096);
            c.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
            let _ = c.write_all(&scrapes);
            c
        })
        .collect();
    thread::sleep(Duration::from_secs(1));
    let held = daemon.status_kib("VmRSS:").saturating_sub(before);
    let started = Instant::now();
    let mut why: Vec<String> = (0..stuck.len())
        .map(|_| daemon.wait_log("closed: ", Duration::from_secs(40)))
        .map(|line| line.split("closed: ").nth(1).unwrap_or_default().to_owned())
        .collect();
    let after = started.elapsed();
    why.dedup();
    drop(stuck);
    // The control port's cap: 100 handshaked connections that open no stream.
    let (_server, control, _) = reconnect_server(&[]);
    let idle: Vec<H2> = (0..100).map(|_| H2::open(control)).collect();
    thread::sleep(Duration::from_millis(500));
    let kept = idle
        .iter()
        .filter(|c| !c.closed.load(Ordering::Relaxed))
        .count();
    vec![
        (
            "5 connections pipelining 5,000 scrapes each, never reading: RSS held".into(),
            format!("+{:.1} MB", held as f64 / 1024.0),
        ),
        (
            "... all five closed by the server within".into(),
            format!("{:.1} s ({})", after.as_secs_f64() + 1.0, why.join(", ")),
        ),
        (
            "100 handshaked control connections with no stream: kept (idle ones end after 600 s)"
                .into(),
            kept.to_string(),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Row 7: `serve` under a control-port flood

fn control_flood() -> Vec<(String, String)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(16, false, stop.clone());
    let (control, retry) = (free_port().to_string(), free_port().to_string());
    let upstream_flag = up.to_string();
    let (_daemon, proxy) = daemon::start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream_flag,
            "--control_port",
            &control,
            "--retry_port",
            &retry,
        ],
        "CoAP proxy listening on ",
    );
    let control: SocketAddr = format!("127.0.0.1:{control}").parse().unwrap();
    let quiet = coap_round_trips(proxy, 1000);
    let flooding = Arc::new(AtomicBool::new(true));
    let flooders: Vec<_> = (0..4)
        .map(|_| {
            let flooding = flooding.clone();
            thread::spawn(move || ping_flood(control, &flooding))
        })
        .collect();
    let busy = coap_round_trips(proxy, 1000);
    flooding.store(false, Ordering::Relaxed);
    let flooded: u64 = flooders.into_iter().map(|f| f.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    let row = |rtt: &[Duration]| {
        format!(
            "p50 {} p99 {} max {}",
            ms(percentile(rtt, 0.5)),
            ms(percentile(rtt, 0.99)),
            ms(percentile(rtt, 1.0))
        )
    };
    vec![
        ("CoAP round trips, quiet".into(), row(&quiet)),
        (
            format!(
                "CoAP round trips, 4 connections flooding PINGs ({} MB written)",
                flooded >> 20
            ),
            row(&busy),
        ),
    ]
}

/// `n` CON GETs one after another; their round trips, sorted.
fn coap_round_trips(proxy: SocketAddr, n: u16) -> Vec<Duration> {
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut rtt: Vec<Duration> = (0..n)
        .map(|i| {
            let token = i.to_be_bytes();
            let sent = Instant::now();
            client
                .send_to(&request(i, &token, &[(URI_PATH, b"x")]), proxy)
                .unwrap();
            let got = answer(&client, &token, Duration::from_secs(1));
            thread::sleep(Duration::from_millis(1));
            got.map_or(Duration::from_secs(1), |(_, at)| at - sent)
        })
        .collect();
    rtt.sort();
    rtt
}

/// PING frames as fast as the socket takes them, reconnecting when cut off; bytes written.
fn ping_flood(control: SocketAddr, flooding: &AtomicBool) -> u64 {
    let mut frames = Vec::new();
    for i in 0..4096u64 {
        encode_ping(&mut frames, false, i.to_be_bytes());
    }
    let mut written = 0;
    while flooding.load(Ordering::Relaxed) {
        let mut h2 = H2::open(control);
        while flooding.load(Ordering::Relaxed) && h2.goaway().is_none() {
            match h2.socket.write_all(&frames) {
                Ok(()) => written += frames.len() as u64,
                Err(_) => break,
            }
        }
    }
    written
}

// ---------------------------------------------------------------------------------------------
// Row 12: the metrics endpoint's cap

fn metrics_idle() -> Vec<(String, String)> {
    let (_daemon, metrics) = daemon::start(
        &["serve", "--metrics", "127.0.0.1:0"],
        "metrics listening on ",
    );
    let _idle: Vec<TcpStream> = (0..64)
        .map(|_| {
            let mut c = connect(metrics);
            c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            read_answers(&mut c, &[false]);
            c
        })
        .collect();
    let started = Instant::now();
    let mut c = connect(metrics);
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let status = read_answers(&mut c, &[false])[0].status;
    vec![(
        "a scrape with 64 idle keep-alive connections open".into(),
        format!("{status} in {}", ms(started.elapsed())),
    )]
}

// ---------------------------------------------------------------------------------------------
// Row 13: the retry port's record of one session

fn retry_flood() -> Vec<(String, String)> {
    const CONNECTS: usize = 20_000;
    let (mut daemon, control, retry) = reconnect_server(&[]);
    let mut h2 = H2::open(control);
    let mut encoder = Encoder::new();
    let call = |encoder: &mut Encoder, stream: u32, method: &str| {
        let mut out = Vec::new();
        encode_headers(
            &mut out,
            stream,
            &call_headers(encoder, method),
            false,
            16_384,
        );
        encode_data(&mut out, stream, &[0; 5], true, 16_384);
        out
    };
    h2.socket
        .write_all(&call(&mut encoder, 1, "Start"))
        .unwrap();
    daemon.wait_log("test tcp server listening", Duration::from_secs(5));
    daemon.drain_log();
    let retry = SocketAddr::from(([127, 0, 0, 1], retry));
    let started = Instant::now();
    let connected = (0..CONNECTS)
        .filter(|_| TcpStream::connect(retry).is_ok())
        .count();
    let took = started.elapsed();
    thread::sleep(Duration::from_millis(300));
    h2.data.lock().unwrap().clear();
    h2.socket.write_all(&call(&mut encoder, 3, "Stop")).unwrap();
    thread::sleep(Duration::from_secs(1));
    let data = h2.data.lock().unwrap().clone();
    let info = data
        .get(5..)
        .and_then(|m| ReconnectInfo::decode(m).ok())
        .unwrap_or_default();
    let lines: Vec<String> = daemon.drain_log();
    let ours = lines
        .iter()
        .filter(|l| !l.contains("reconnect server: new connection") && !l.contains("retry "))
        .count();
    vec![
        (
            format!(
                "{connected} connects to the retry port in one session ({})",
                ms(took)
            ),
            format!(
                "Stop returned {} intervals (10,000 accepts kept), passed={}",
                info.backoff_ms.len(),
                info.passed
            ),
        ),
        (
            "info lines logged from the first connect to Stop: in all / not the reference's".into(),
            format!("{} / {ours}", lines.len()),
        ),
    ]
}
