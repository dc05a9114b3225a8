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
//! The probes live under `attack/`: rows 1 and 3-6 in `coap.rs`, rows 2 and 8-11 (and the
//! HTTP/2 client they share) in `http2.rs`, rows 7, 12 and 13 in `serve.rs`. Issue 25's probes
//! (the HTTP front and the answer store) are in `attack/hostile_http.rs`: `http_slots`,
//! `answer_store`, `http_bodies`, `sse_cr` and `pipelined_local`.
//!
//! Issue 40's probes (tables that forged or idle peers could fill) are in `attack/held.rs`
//! (rows 1 and 8), `attack/observe.rs` (row 5), `attack/dtls.rs` (rows 2, 6 and 9, with the
//! `dtls` feature) and `attack/stream.rs` (rows 3, 4 and 7, with the `tcp` feature):
//!
//! | probe | issue row | figure |
//! |---|---|---|
//! | `held_backlog` | issue 40 row 1 | a forged flood fills the answers held for proofs: new libcoap and aiocoap clients at +1 s and +15 s, the forged sources' ratio |
//! | `dtls_hello_flood` | issue 40 row 2 | 157 addresses x 64 ports of cookie-verified hellos, again every 10 s: handshaking sessions, RSS growth, a legitimate PSK client's 3 tries |
//! | `stream_non_reader` | issue 40 row 3 | RSS growth from 1, 10 and 40 coap+tcp connections pipelining cached GETs without reading, and 5 s after they close |
//! | `stream_idle_fill` | issue 40 row 4 | 8 addresses x 64 idle connections (CSM, then nothing) on the TCP and TLS listeners: a legitimate client's GET |
//! | `observe_share` | issue 40 row 5 | observations one address takes with 4 coap+tcp connections x 256 registrations; whether another address's registration is accepted and notified |
//! | `dtls_forged_hello` | issue 40 row 6 | a cookie-less hello from a live session's address and port: a HelloVerifyRequest into the session or not, the session after it |
//! | `stream_bad_csm` | issue 40 row 7 | a CSM with Max-Message-Size 0, and half a message after the CSM: what the client gets, when the connection ends |
//! | `icmp_observer` | issue 40 row 8 | an unproven observer closes its socket: how long its observation lives on |
//! | `dtls_sec1_key` | issue 40 row 9 | `--dtls-key` with a SEC1 key: whether the proxy starts and serves coap-client-openssl |

// The reflection cases are the test's (tests/proxy_reflection.rs), so that the figures printed
// here are the ones it asserts on; the tests themselves are not compiled into the bench. It
// brings the tests' helpers (tests/common/) with it.
#[allow(dead_code, unused_imports)]
#[path = "../tests/proxy_reflection.rs"]
mod reflection;

#[path = "attack/hostile_http.rs"]
mod hostile_http;

#[path = "attack/coap.rs"]
mod coap;

#[path = "attack/held.rs"]
mod held;

#[path = "attack/http2.rs"]
mod http2;

#[path = "attack/serve.rs"]
mod serve;

#[path = "attack/observe.rs"]
mod observe;

#[cfg(feature = "dtls")]
#[path = "attack/dtls.rs"]
mod dtls;

#[cfg(feature = "tcp")]
#[path = "attack/stream.rs"]
mod stream;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use backoffd::coap::{Code, Message, MessageBuilder, MessageType};
use reflection::common::{daemon, Proc};

type Probe = fn() -> Vec<(String, String)>;

const PROBES: &[(&str, Probe)] = &[
    ("datagram", coap::datagram),
    ("grpc_memory", http2::grpc_memory),
    ("reflection", coap::reflection),
    ("cache_flood", coap::cache_flood),
    ("inflight_bytes", coap::inflight_bytes),
    ("descriptors", coap::descriptors),
    ("control_flood", serve::control_flood),
    ("rapid_reset", http2::rapid_reset),
    ("settings_flood", http2::settings_flood),
    ("empty_frames", http2::empty_frames),
    ("non_reader", http2::non_reader),
    ("metrics_idle", serve::metrics_idle),
    ("retry_flood", serve::retry_flood),
    ("http_slots", hostile_http::http_slots),
    ("answer_store", hostile_http::answer_store),
    ("http_bodies", hostile_http::http_bodies),
    ("sse_cr", hostile_http::sse_cr),
    ("pipelined_local", hostile_http::pipelined_local),
    ("held_backlog", held::held_backlog),
    ("observe_share", observe::observe_share),
    ("icmp_observer", held::icmp_observer),
    #[cfg(feature = "dtls")]
    ("dtls_hello_flood", dtls::hello_flood),
    #[cfg(feature = "dtls")]
    ("dtls_forged_hello", dtls::forged_hello),
    #[cfg(feature = "dtls")]
    ("dtls_sec1_key", dtls::sec1_key),
    #[cfg(feature = "tcp")]
    ("stream_non_reader", stream::stream_non_reader),
    #[cfg(feature = "tcp")]
    ("stream_idle_fill", stream::stream_idle_fill),
    #[cfg(feature = "tcp")]
    ("stream_bad_csm", stream::stream_bad_csm),
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
