//! Issue 25's probes: the HTTP front and the answer store under hostile load, each at default
//! flags (plus `--cache-size` where the load is about cached answers, and `--metrics` to read
//! the counters), printing the figure the issue's "Done means" names.
//!
//! | probe | finding | figure (goal) |
//! |---|---|---|
//! | `http_slots` | 1 | legitimate GETs answered within 1 s while 128 slow connections hold or retake every slot (≥ 90 %) |
//! | `answer_store` | 2 | RSS growth from 10,000 CON GETs of a cached 8,000 B answer, and from 6,000 HTTP GETs of a cached 60 kB one (< 16 MiB; RSS < 48 MiB) |
//! | `http_bodies` | 3 | RSS growth from 120 connections pipelining 5 POSTs of 256 KiB to a silent upstream (< 16 MiB; RSS < 48 MiB) |
//! | `sse_cr` | 4 | events a spec parser reads from 5 notifications that inject fields with bare CRs (5, no fields) |
//! | `pipelined_local` | 5 | 40 pipelined cache hits on one connection: when the last is answered (< 1 s) |

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use backoffd::coap::option::{OBSERVE, URI_PATH};
use backoffd::coap::{Code, Message, MessageBuilder, MessageType};

use super::reflection::common::daemon::proxy_with_http as http_proxy;
use super::reflection::common::exposition::{scrape, Exposition};
use super::reflection::common::Proc;
use super::{ms, request, upstream};

/// A sample of the scraped metrics, or "-" if the proxy has no such series.
fn sample(m: &Exposition, series: &str) -> String {
    m.samples.get(series).map_or("-".into(), |v| v.to_string())
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// RSS growth from `before` and the RSS now, as the issue states them.
fn rss_figure(daemon: &Proc, before: u64) -> String {
    let now = daemon.status_kib("VmRSS:");
    format!("+{} (RSS {})", mib(now.saturating_sub(before)), mib(now))
}

/// Reads one HTTP answer (Content-Length framed) off `s`: its status and body length, or
/// `None` if the connection ended or timed out first. `carry` keeps bytes of the next.
fn read_answer(s: &mut TcpStream, carry: &mut Vec<u8>) -> Option<(u16, usize)> {
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut fields);
        if let Ok(httparse::Status::Complete(head)) = resp.parse(carry) {
            let status = resp.code?;
            let length: usize = (resp.headers.iter())
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
                .unwrap_or(0);
            if carry.len() >= head + length {
                carry.drain(..head + length);
                return Some((status, length));
            }
        }
        let mut chunk = [0u8; 65536];
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => carry.extend_from_slice(&chunk[..n]),
        }
    }
}

/// One GET on a fresh connection: its status and how long it took, `None` if no answer came
/// within `limit`.
fn timed_get(http: SocketAddr, path: &str, limit: Duration) -> Option<(u16, Duration)> {
    let started = Instant::now();
    let mut s = TcpStream::connect_timeout(&http, limit).ok()?;
    s.set_read_timeout(Some(limit)).ok()?;
    let get = format!("GET {path} HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n");
    s.write_all(get.as_bytes()).ok()?;
    let (status, _) = read_answer(&mut s, &mut Vec::new())?;
    Some((status, started.elapsed()))
}

// ---------------------------------------------------------------------------------------------
// Finding 1: connection slots

/// How one slow connection holds its slot.
#[derive(Clone, Copy)]
enum Slow {
    /// Connects and sends nothing.
    Silent,
    /// A request head, one byte a second.
    HeadDribble,
    /// A chunked POST body, one 1-byte chunk a second.
    BodyDribble,
    /// `Expect: 100-continue`, then no body.
    ExpectNoBody,
}

impl Slow {
    fn opening(self) -> &'static [u8] {
        match self {
            Slow::Silent | Slow::HeadDribble => b"",
            Slow::BodyDribble => {
                b"POST /r HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n"
            }
            Slow::ExpectNoBody => {
                b"POST /r HTTP/1.1\r\nHost: p\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n"
            }
        }
    }

    /// What the connection sends each second.
    fn dribble(self, tick: usize) -> &'static [u8] {
        const HEAD: &[u8] = b"GET /r HTTP/1.1\r\nHost: p\r\nX-Padding: ";
        match self {
            Slow::Silent | Slow::ExpectNoBody => b"",
            Slow::HeadDribble => &HEAD[tick % HEAD.len()..][..1],
            Slow::BodyDribble => b"1\r\na\r\n",
        }
    }
}

/// A slow connection, or `None` if the connect failed.
fn open_slow(http: SocketAddr, kind: Slow) -> Option<TcpStream> {
    let mut s = TcpStream::connect(http).ok()?;
    s.write_all(kind.opening()).ok()?;
    s.set_nonblocking(true).ok()?;
    Some(s)
}

/// Whether the server closed `s` (what it sent, a 408 or 100 Continue, is read and dropped).
fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

/// 128 slow connections (32 of each [`Slow`] kind) that reopen whatever the server closes,
/// until `stop`; how many times they reopened.
fn slow_attack(http: SocketAddr, stop: Arc<AtomicBool>) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let kinds = [
            Slow::Silent,
            Slow::HeadDribble,
            Slow::BodyDribble,
            Slow::ExpectNoBody,
        ];
        let plan: Vec<Slow> = (0..128).map(|i| kinds[i % 4]).collect();
        let mut conns: Vec<Option<TcpStream>> = plan.iter().map(|&k| open_slow(http, k)).collect();
        let (mut reopened, mut tick) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            thread::sleep(Duration::from_millis(100));
            tick += 1;
            for (conn, &kind) in conns.iter_mut().zip(&plan) {
                let gone = conn.as_mut().is_none_or(closed);
                let due = tick % 10 == 0;
                let sent = !due
                    || conn
                        .as_mut()
                        .is_some_and(|s| s.write_all(kind.dribble(tick / 10)).is_ok());
                if gone || !sent {
                    *conn = open_slow(http, kind);
                    reopened += 1;
                }
            }
        }
        reopened
    })
}

pub fn http_slots() -> Vec<(String, String)> {
    const LEGIT: usize = 28;
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(8, false, stop.clone());
    let (_daemon, _, http, metrics) = http_proxy(up, &[]);
    let before: Vec<Duration> = (0..5)
        .filter_map(|_| timed_get(http, "/r", Duration::from_secs(3)))
        .map(|(_, t)| t)
        .collect();
    let attack = slow_attack(http, stop.clone());
    thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    let mut times: Vec<Duration> = Vec::new();
    let mut answered = 0;
    for _ in 0..LEGIT {
        if let Some((200, t)) = timed_get(http, "/r", Duration::from_secs(3)) {
            answered += 1;
            times.push(t);
        }
        thread::sleep(Duration::from_millis(300));
    }
    let span = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let reopened = attack.join().unwrap();
    times.sort();
    let within = times
        .iter()
        .filter(|t| **t <= Duration::from_secs(1))
        .count();
    let m = scrape(metrics);
    vec![
        (
            "before the attack: GETs answered, slowest".into(),
            format!(
                "{}/5, {}",
                before.len(),
                before.iter().max().map_or("-".into(), |t| ms(*t))
            ),
        ),
        (
            format!(
                "128 slow connections (silent, head and body dribbles, Expect with no body, \
                 reopened when closed): legit GETs over {:.1} s answered within 1 s",
                span.as_secs_f64()
            ),
            format!(
                "{within}/{LEGIT} ({answered} at all; median {}, slowest {})",
                times.get(times.len() / 2).map_or("-".into(), |t| ms(*t)),
                times.last().map_or("-".into(), |t| ms(*t))
            ),
        ),
        (
            "slow connections the server closed (attacker reopened), evicted for a new one".into(),
            format!(
                "{reopened}, {}",
                sample(&m, "backoffd_hc_connections_slow_closed_total")
            ),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Finding 2: the answer store

pub fn answer_store() -> Vec<(String, String)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (small_up, _) = upstream(8_000, false, stop.clone());
    let (daemon, coap, _, _) = http_proxy(small_up, &["--cache-size", "1MiB"]);
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .send_to(&request(0, b"first", &[(URI_PATH, b"r")]), coap)
        .unwrap();
    thread::sleep(Duration::from_millis(200));
    let before = daemon.status_kib("VmRSS:");
    let started = Instant::now();
    for i in 1..=10_000u16 {
        let req = request(i, &i.to_be_bytes(), &[(URI_PATH, b"r")]);
        let _ = client.send_to(&req, coap);
    }
    thread::sleep(Duration::from_secs(1));
    let coap_figure = rss_figure(&daemon, before);
    let coap_time = started.elapsed();
    drop(daemon);

    let (big_up, _) = upstream(60_000, false, stop.clone());
    let (daemon, _, http, _) = http_proxy(big_up, &["--cache-size", "1MiB"]);
    let _ = timed_get(http, "/r", Duration::from_secs(3));
    let before = daemon.status_kib("VmRSS:");
    let get = b"GET /r HTTP/1.1\r\nHost: p\r\n\r\n";
    let mut ok = 0;
    let workers: Vec<_> = (0..6)
        .map(|_| {
            thread::spawn(move || {
                let mut s = TcpStream::connect(http).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let (mut carry, mut ok) = (Vec::new(), 0);
                for _ in 0..1000 {
                    if s.write_all(get).is_err() {
                        break;
                    }
                    match read_answer(&mut s, &mut carry) {
                        Some((200, 60_000)) => ok += 1,
                        Some(_) => {}
                        None => break,
                    }
                }
                ok
            })
        })
        .collect();
    for w in workers {
        ok += w.join().unwrap();
    }
    let http_figure = rss_figure(&daemon, before);
    stop.store(true, Ordering::Relaxed);
    vec![
        (
            format!(
                "one source, 10,000 CON GETs of a cached 8,000 B answer, never ACKing ({})",
                ms(coap_time)
            ),
            coap_figure,
        ),
        (
            format!("6,000 keep-alive HTTP GETs of a cached 60 kB answer ({ok} answered 200)"),
            http_figure,
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Finding 3: request bodies in flight

pub fn http_bodies() -> Vec<(String, String)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(0, true, stop.clone());
    let (daemon, _, http, _) = http_proxy(up, &[]);
    let before = daemon.status_kib("VmRSS:");
    let body = vec![b'b'; 256 << 10];
    let mut post = b"POST /r HTTP/1.1\r\nHost: p\r\nContent-Length: 262144\r\n\r\n".to_vec();
    post.extend_from_slice(&body);
    let pipeline = post.repeat(5);
    let conns: Vec<TcpStream> = (0..120)
        .filter_map(|_| {
            let mut s = TcpStream::connect(http).ok()?;
            s.set_write_timeout(Some(Duration::from_millis(200))).ok()?;
            let _ = s.write_all(&pipeline);
            Some(s)
        })
        .collect();
    thread::sleep(Duration::from_secs(1));
    let during = rss_figure(&daemon, before);
    let mut refused = 0;
    for mut s in conns {
        s.set_nonblocking(true).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&got);
        if text.starts_with("HTTP/1.1 503") && text.contains("Retry-After") {
            refused += 1;
        }
    }
    thread::sleep(Duration::from_secs(1));
    let after = rss_figure(&daemon, before);
    stop.store(true, Ordering::Relaxed);
    vec![
        (
            "120 connections pipelining 5 POSTs of 256 KiB to a silent upstream".into(),
            during,
        ),
        (
            "... connections answered 503 with Retry-After at once".into(),
            format!("{refused}/120"),
        ),
        ("... once they closed".into(), after),
    ]
}

// ---------------------------------------------------------------------------------------------
// Finding 4: fields injected into an event stream

/// The payload each notification carries: every line end a bare CR.
const INJECTION: &str = "temp=21\rid: 999\rretry: 86400000\revent: admin\r\rdata: forged-event";

/// An origin that answers a registration, then sends 4 more notifications, 50 ms apart, all
/// with [`INJECTION`].
fn observable_upstream(stop: Arc<AtomicBool>) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let addr = socket.local_addr().unwrap();
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                continue;
            };
            let Ok(m) = Message::parse(&buf[..n]) else {
                continue;
            };
            if m.msg_type() != MessageType::Con || m.option(OBSERVE).is_none() {
                continue;
            }
            let token = m.token().to_vec();
            for seq in 1..=5u8 {
                let (kind, mid) = match seq {
                    1 => (MessageType::Ack, m.message_id()),
                    _ => (MessageType::Non, 1000 + u16::from(seq)),
                };
                let mut out = Vec::new();
                let mut b = MessageBuilder::new(&mut out, kind, Code::CONTENT, mid, &token);
                b.option(OBSERVE, &[seq]);
                b.option(12, &[]);
                b.payload(INJECTION.as_bytes());
                b.finish().unwrap();
                let _ = socket.send_to(&out, from);
                thread::sleep(Duration::from_millis(50));
            }
        }
    });
    addr
}

/// What an EventSource makes of `stream` (WHATWG HTML, "event stream interpretation"): lines
/// end at CRLF, LF or CR; the events it dispatches, as (type, last event id, data), and the
/// retry values it would apply.
fn interpret(stream: &str) -> (Vec<(String, String, String)>, Vec<String>) {
    let (mut events, mut retries) = (Vec::new(), Vec::new());
    let (mut kind, mut data, mut last_id) = (String::new(), String::new(), String::new());
    let normalised = stream.replace("\r\n", "\n").replace('\r', "\n");
    for line in normalised.split('\n') {
        if line.is_empty() {
            if !data.is_empty() {
                data.pop();
                let name = if kind.is_empty() { "message" } else { &kind };
                events.push((name.to_string(), last_id.clone(), std::mem::take(&mut data)));
            }
            kind.clear();
            data.clear();
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => kind = value.to_string(),
            "data" => {
                data.push_str(value);
                data.push('\n');
            }
            "id" => last_id = value.to_string(),
            "retry" => retries.push(value.to_string()),
            _ => {}
        }
    }
    (events, retries)
}

pub fn sse_cr() -> Vec<(String, String)> {
    let stop = Arc::new(AtomicBool::new(false));
    let up = observable_upstream(stop.clone());
    let (_daemon, _, http, _) = http_proxy(up, &[]);
    let mut s = TcpStream::connect(http).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    s.write_all(b"GET /clock HTTP/1.1\r\nHost: p\r\nAccept: text/event-stream\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let mut buf = [0u8; 4096];
        if let Ok(n) = s.read(&mut buf) {
            raw.extend_from_slice(&buf[..n]);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let text = String::from_utf8_lossy(&raw);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let (events, retries) = interpret(&dechunk(body));
    let mut kinds: Vec<&str> = events.iter().map(|(k, _, _)| k.as_str()).collect();
    kinds.dedup();
    let mut ids: Vec<&str> = events.iter().map(|(_, id, _)| id.as_str()).collect();
    ids.dedup();
    vec![(
        "5 notifications whose payload injects id, retry, event and a second event with bare CRs"
            .into(),
        format!(
            "{} events; types {kinds:?}; ids {ids:?}; retry fields {retries:?}",
            events.len()
        ),
    )]
}

/// The content of a chunked body (RFC 9112 §7.1), as far as it goes.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            out.push_str(rest.get(..n.min(rest.len())).unwrap_or_default());
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Finding 5: pipelined requests the proxy answers itself

pub fn pipelined_local() -> Vec<(String, String)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(8, false, stop.clone());
    let (_daemon, _, http, metrics) = http_proxy(up, &["--cache-size", "1MiB"]);
    let _ = timed_get(http, "/r", Duration::from_secs(3));
    let mut s = TcpStream::connect(http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let started = Instant::now();
    s.write_all(&b"GET /r HTTP/1.1\r\nHost: p\r\n\r\n".repeat(40))
        .unwrap();
    let (mut carry, mut answered, mut last) = (Vec::new(), 0, Duration::ZERO);
    while answered < 40 {
        if read_answer(&mut s, &mut carry).is_none() {
            break;
        }
        answered += 1;
        last = started.elapsed();
    }
    stop.store(true, Ordering::Relaxed);
    let m = scrape(metrics);
    vec![(
        "40 pipelined cache hits on one connection: answered, the last after, requests seen twice"
            .into(),
        format!(
            "{answered}/40, {}, {}",
            ms(last),
            sample(&m, "backoffd_coap_client_duplicates_total")
        ),
    )]
}
