//! The proxy as a reflector (issue 13, row 3), against the real binary over loopback.
//!
//! Reflection at defaults: a "victim" socket sends requests, as a spoofer would in its name,
//! and nothing else (no ACK, no RST, no Echo). Whatever its requests cost (1 KiB answers
//! piggybacked or as NONs, separate answers, an observation, the proxy's own errors) it
//! receives at most 3x what it sent plus one datagram (the CON that asks for a proof of
//! receipt), counted until [`WINDOW`] after its last request, from `backoffd proxy` with no
//! flag but --listen, --upstream and --metrics. A client that acknowledges that CON gets every
//! answer. With the opt-in send rate, a proven client past it gets 5.03 with Max-Age, never
//! silence.
//!
//! Observations end when their client's socket is closed (ICMP port unreachable, read from
//! the client socket's error queue, or, for a client never proven, the CON asking for its
//! proof unacknowledged) or when the client resets a notification, and the upstream then sees
//! the deregistration (an RST to its next notification, RFC 7641 §3.6).
//!
//! `benches/attack.rs` (probe `reflection`) prints the figures of [`reflect`] as a table.

// Public for benches/attack.rs, which takes the tests' helpers from here.
pub mod common;

use std::collections::{HashSet, VecDeque};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use backoffd::coap::option::{
    decode_uint, encode_uint, ECHO, MAX_AGE, OBSERVE, PROXY_URI, URI_PATH,
};
use backoffd::coap::{empty_ack, rst, Code, Message, MessageBuilder, MessageType};
use common::exposition::{scrape, Exposition};

/// The payload of every answer and notification: a 1 KiB resource.
pub const BODY: usize = 1024;
/// What an unproven source may be sent past 3x what it sent: one datagram (RFC 7252 §4.6's
/// message size), the CON that asks for the proof.
pub const ONE_DATAGRAM: usize = 1152;
/// How long the victim keeps counting after its last request: past the slow resource's
/// answers (1 s), the observation's notifications (6 s) and the first retransmissions of any
/// CON (2-3 s after it, then 4-6 s later).
pub const WINDOW: Duration = Duration::from_secs(10);
/// Time between two of a socket's requests.
const SPACING: Duration = Duration::from_millis(10);
/// How long the slow resource takes to answer, separately.
const SLOW_BY: Duration = Duration::from_secs(1);

// ------------------------------------------------------------------------------------------
// The upstream

/// How the test upstream serves.
#[derive(Clone, Copy, Debug)]
pub struct Serving {
    /// A CON GET is answered with an empty ACK at once and the answer as a separate CON
    /// [`SLOW_BY`] later, instead of piggybacked at once.
    pub slow: bool,
    /// Each observer is notified every `min..=max` ms (a NON of [`BODY`] bytes) ...
    pub notify_ms: (u64, u64),
    /// ... for this long after its registration.
    pub notify_for: Duration,
}

impl Serving {
    /// Fast answers; notifications every 20 ms for as long as the test runs.
    pub const FAST: Serving = Serving {
        slow: false,
        notify_ms: (20, 20),
        notify_for: Duration::MAX,
    };

    /// The wait before notification `seq`: spread over `notify_ms`, the same in every run.
    fn interval(&self, seq: u32) -> Duration {
        let (min, max) = self.notify_ms;
        Duration::from_millis(min + u64::from(seq).wrapping_mul(7919) % (max - min + 1))
    }
}

/// What the upstream saw.
#[derive(Default)]
pub struct Seen {
    /// RSTs from the proxy (to notifications of a cancelled observation).
    pub rsts: AtomicUsize,
    /// Notifications sent.
    pub notified: AtomicUsize,
}

struct Observer {
    to: SocketAddr,
    token: Vec<u8>,
    since: Instant,
    next: Instant,
}

/// A CoAP server on a thread until `stop`: every request gets a 2.05 of [`BODY`] bytes, as
/// `serving` says; a GET with Observe registers an observer (one observation at a time: an
/// RST from the proxy cancels it, RFC 7641 §3.6).
pub fn upstream(serving: Serving, stop: Arc<AtomicBool>) -> (SocketAddr, Arc<Seen>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(5)))
        .unwrap();
    let addr = socket.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let counts = Arc::clone(&seen);
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut observers: Vec<Observer> = Vec::new();
        let mut separate: VecDeque<(Instant, SocketAddr, Vec<u8>)> = VecDeque::new();
        let (mut seq, mut mid) = (2u32, 100u16);
        while !stop.load(Ordering::SeqCst) {
            if let Ok((n, from)) = socket.recv_from(&mut buf) {
                let Ok(m) = Message::parse(&buf[..n]) else {
                    continue;
                };
                match m.msg_type() {
                    MessageType::Rst => {
                        counts.rsts.fetch_add(1, Ordering::SeqCst);
                        observers.clear();
                    }
                    MessageType::Con | MessageType::Non if m.code().is_request() => {
                        let registers = m.option(OBSERVE) == Some(&[][..]);
                        let observe = registers.then_some(1);
                        let now = Instant::now();
                        if serving.slow && m.msg_type() == MessageType::Con {
                            let mut ack = Vec::new();
                            empty_ack(&mut ack, m.message_id());
                            let _ = socket.send_to(&ack, from);
                            mid = mid.wrapping_add(1);
                            let answer = content(MessageType::Con, mid, m.token(), observe);
                            separate.push_back((now + SLOW_BY, from, answer));
                        } else {
                            let (ty, id) = match m.msg_type() {
                                MessageType::Con => (MessageType::Ack, m.message_id()),
                                _ => {
                                    mid = mid.wrapping_add(1);
                                    (MessageType::Non, mid)
                                }
                            };
                            let _ = socket.send_to(&content(ty, id, m.token(), observe), from);
                        }
                        if registers {
                            observers.push(Observer {
                                to: from,
                                token: m.token().to_vec(),
                                since: now,
                                next: now + serving.interval(seq),
                            });
                        }
                    }
                    _ => {}
                }
            }
            let now = Instant::now();
            while separate.front().is_some_and(|(at, _, _)| *at <= now) {
                let (_, to, answer) = separate.pop_front().unwrap();
                let _ = socket.send_to(&answer, to);
            }
            for o in &mut observers {
                if o.next > now || now.duration_since(o.since) >= serving.notify_for {
                    continue;
                }
                let out = content(MessageType::Non, mid, &o.token, Some(seq));
                let _ = socket.send_to(&out, o.to);
                counts.notified.fetch_add(1, Ordering::SeqCst);
                o.next = now + serving.interval(seq);
                (seq, mid) = (seq + 1, mid.wrapping_add(1));
            }
        }
    });
    (addr, seen)
}

/// A 2.05 of [`BODY`] bytes, with Observe `observe` if given.
fn content(ty: MessageType, mid: u16, token: &[u8], observe: Option<u32>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, Code::CONTENT, mid, token);
    if let Some(seq) = observe {
        b.option(OBSERVE, &encode_uint(seq));
    }
    b.payload(&[0x55; BODY]);
    b.finish().unwrap();
    out
}

// ------------------------------------------------------------------------------------------
// Clients

/// A request of type `ty` with options (in order), Message ID `i` and a 4-byte token `i`.
pub fn request(ty: MessageType, i: u16, options: &[(u16, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let token = u32::from(i).to_be_bytes();
    let mut b = MessageBuilder::new(&mut out, ty, Code::GET, i, &token);
    options.iter().for_each(|&(n, v)| _ = b.option(n, v));
    b.finish().unwrap();
    out
}

/// The finding's 12-byte GET for the 1 KiB resource.
fn big_get(ty: MessageType, i: u16) -> Vec<u8> {
    request(ty, i, &[(URI_PATH, b"big")])
}

/// A 13-byte Observe registration.
fn registration() -> Vec<u8> {
    let mut req = Vec::new();
    let mut b = MessageBuilder::new(&mut req, MessageType::Con, Code::GET, 1, b"obs");
    b.option(OBSERVE, &[]);
    b.option(URI_PATH, b"temp");
    b.finish().unwrap();
    req
}

/// What a client sends back for `m`, if anything: an RST to a CoAP ping (an empty CON, RFC
/// 7252 §4.3), an empty ACK to any other CON.
fn reply_to(m: &Message) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match (m.msg_type(), m.code()) {
        (MessageType::Con, Code::EMPTY) => rst(&mut out, m.message_id()),
        (MessageType::Con, _) => empty_ack(&mut out, m.message_id()),
        _ => return None,
    }
    Some(out)
}

/// What a socket sent the proxy and received back.
#[derive(Debug, Default)]
pub struct Tally {
    /// Bytes sent and received.
    pub sent: usize,
    pub received: usize,
    /// Every datagram received.
    pub datagrams: Vec<Vec<u8>>,
}

impl Tally {
    fn messages(&self) -> impl Iterator<Item = Message<'_>> {
        self.datagrams.iter().filter_map(|d| Message::parse(d).ok())
    }

    /// The distinct tokens answered with the whole resource.
    pub fn full_answers(&self) -> HashSet<Vec<u8>> {
        self.messages()
            .filter(|m| m.code() == Code::CONTENT && m.payload().len() == BODY)
            .map(|m| m.token().to_vec())
            .collect()
    }

    /// Datagrams with code `code`.
    pub fn with_code(&self, code: Code) -> usize {
        self.messages().filter(|m| m.code() == code).count()
    }

    /// Datagrams of type `ty` carrying a payload.
    pub fn with_payload(&self, ty: MessageType) -> usize {
        self.messages()
            .filter(|m| m.msg_type() == ty && !m.payload().is_empty())
            .count()
    }
}

/// Sends `requests` to `proxy` from one socket, [`SPACING`] apart, and counts what comes
/// back until `window` after the last one, or until `done`. With `acks` the socket answers
/// what asks for it as a client does ([`reply_to`]); without, it sends nothing but the
/// requests, as the victim whose address a spoofer used would.
pub fn exchange(
    proxy: SocketAddr,
    requests: &[Vec<u8>],
    acks: bool,
    window: Duration,
    done: impl Fn(&Tally) -> bool,
) -> Tally {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(2)))
        .unwrap();
    let mut tally = Tally::default();
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    let (mut next, mut last) = (0, start);
    loop {
        let now = Instant::now();
        if let Some(req) = requests.get(next) {
            if now >= start + SPACING * next as u32 {
                tally.sent += socket.send_to(req, proxy).unwrap();
                (next, last) = (next + 1, now);
            }
        } else if now >= last + window || done(&tally) {
            return tally;
        }
        let Ok(n) = socket.recv(&mut buf) else {
            continue;
        };
        tally.received += n;
        if let Ok(m) = Message::parse(&buf[..n]) {
            if let Some(reply) = reply_to(&m).filter(|_| acks) {
                tally.sent += socket.send_to(&reply, proxy).unwrap();
            }
        }
        tally.datagrams.push(buf[..n].to_vec());
    }
}

// ------------------------------------------------------------------------------------------
// Reflection at defaults

/// What a victim's requests are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// 100 CON GETs of 12 B for the 1 KiB resource, answered piggybacked by a fast upstream.
    Piggybacked,
    /// The same with NON.
    Non,
    /// 50 CON GETs of a slow resource: the upstream's empty ACK, its answer as a separate CON
    /// 1 s later.
    Separate,
    /// One Observe registration of 13 B; the upstream notifies 1 KiB every 20-200 ms for 6 s.
    Observe,
    /// 100 CON GETs with a Proxy-Uri to a proxy without --forward: 5.05 from the proxy.
    NotProxying,
    /// 100 NON GETs with a Proxy-Uri to a forward proxy that does not allow the target: 4.03.
    NotAllowed,
}

impl Case {
    pub const ALL: [Case; 6] = [
        Case::Piggybacked,
        Case::Non,
        Case::Separate,
        Case::Observe,
        Case::NotProxying,
        Case::NotAllowed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Case::Piggybacked => "100 CON GETs, 1 KiB piggybacked answers",
            Case::Non => "100 NON GETs, 1 KiB answers",
            Case::Separate => "50 CON GETs, 1 KiB separate answers 1 s later",
            Case::Observe => "1 Observe registration, 1 KiB every 20-200 ms for 6 s",
            Case::NotProxying => "100 CON Proxy-Uri GETs, no --forward (5.05)",
            Case::NotAllowed => "100 NON Proxy-Uri GETs, target not allowed (4.03)",
        }
    }

    fn requests(self) -> Vec<Vec<u8>> {
        let uri: &[u8] = b"coap://a/";
        match self {
            Case::Piggybacked => (0..100).map(|i| big_get(MessageType::Con, i)).collect(),
            Case::Non => (0..100).map(|i| big_get(MessageType::Non, i)).collect(),
            Case::Separate => (0..50).map(|i| big_get(MessageType::Con, i)).collect(),
            Case::Observe => vec![registration()],
            Case::NotProxying => (0..100)
                .map(|i| request(MessageType::Con, i, &[(PROXY_URI, uri)]))
                .collect(),
            Case::NotAllowed => (0..100)
                .map(|i| request(MessageType::Non, i, &[(PROXY_URI, uri)]))
                .collect(),
        }
    }
}

/// One case's figures.
#[derive(Debug)]
pub struct Reflection {
    pub case: Case,
    pub tally: Tally,
    /// The proxy's /metrics at the end.
    pub metrics: Exposition,
}

impl Reflection {
    /// What the victim may receive: 3x what it sent, plus one datagram.
    pub fn bound(&self) -> usize {
        3 * self.tally.sent + ONE_DATAGRAM
    }

    pub fn ratio(&self) -> f64 {
        self.tally.received as f64 / self.tally.sent as f64
    }

    /// `backoffd_coap_<name>` at the end.
    pub fn counter(&self, name: &str) -> f64 {
        self.metrics.get(&format!("backoffd_coap_{name}"))
    }

    /// The figure as CI logs show it.
    pub fn line(&self) -> String {
        format!(
            "reflection {}: sent {} B, received {} B ({:.2} x)",
            self.case.name(),
            self.tally.sent,
            self.tally.received,
            self.ratio()
        )
    }

    /// The proxy's side of it.
    pub fn details(&self) -> String {
        format!(
            "{} datagrams; bound 3 x {} + {ONE_DATAGRAM} = {} B; probes {}, answers made CON \
             {}, datagrams withheld {}, forwarded {}",
            self.tally.datagrams.len(),
            self.tally.sent,
            self.bound(),
            self.counter("amplification_probes_total"),
            self.counter("answers_made_confirmable_total"),
            self.counter("amplification_dropped_total"),
            self.counter("forwarded_total"),
        )
    }
}

/// Runs `case` against `backoffd proxy --upstream` at default flags (a forward proxy for
/// [`Case::NotAllowed`]): the victim's requests, then [`WINDOW`] of listening.
pub fn reflect(case: Case) -> Reflection {
    let stop = Arc::new(AtomicBool::new(false));
    let serving = Serving {
        slow: case == Case::Separate,
        notify_ms: (20, 200),
        notify_for: Duration::from_secs(6),
    };
    let (up, _) = upstream(serving, Arc::clone(&stop));
    let allow = up.to_string();
    let forward = ["--forward", "--allow", &allow];
    let extra: &[&str] = match case {
        Case::NotAllowed => &forward,
        _ => &[],
    };
    let (_daemon, proxy, metrics) = common::daemon::proxy_with_metrics(up, extra);
    let tally = exchange(proxy, &case.requests(), false, WINDOW, |_| false);
    let metrics = scrape(metrics);
    stop.store(true, Ordering::SeqCst);
    Reflection {
        case,
        tally,
        metrics,
    }
}

/// Runs `case`, prints its figures and checks the bound, and that the victim proved nothing.
fn at_defaults(case: Case) -> Reflection {
    let r = reflect(case);
    eprintln!("{}", r.line());
    eprintln!("  {}", r.details());
    assert!(
        r.tally.received <= r.bound(),
        "{}: {} B > 3 x {} B + {ONE_DATAGRAM} B",
        case.name(),
        r.tally.received,
        r.tally.sent
    );
    assert_eq!(r.counter("sources_proved_by_ack_total"), 0.0);
    assert_eq!(r.counter("validation_sources"), 1.0, "the victim");
    r
}

/// A victim of 1 KiB answers: every request went upstream, and the rest of the bound holds.
fn check_big_answers(r: &Reflection, requests: f64) {
    assert_eq!(r.counter("forwarded_total"), requests, "{}", r.details());
    check_one_probe_and_withheld(r);
}

/// At most one CON asked for the proof (the next may only take its place once it has been
/// given up, EXCHANGE_LIFETIME later), and what went past the allowance was withheld, not
/// dropped (each waits for the proof).
fn check_one_probe_and_withheld(r: &Reflection) {
    let probes = r.counter("amplification_probes_total");
    assert!(
        probes <= 1.0,
        "one CON at a time asks for the proof: {}",
        r.details()
    );
    assert!(
        r.counter("amplification_dropped_total") > 0.0,
        "withheld: {}",
        r.details()
    );
}

#[test]
fn reflection_at_defaults_con_gets_answered_piggybacked() {
    let r = at_defaults(Case::Piggybacked);
    check_big_answers(&r, 100.0);
}

#[test]
fn reflection_at_defaults_non_gets() {
    let r = at_defaults(Case::Non);
    check_big_answers(&r, 100.0);
}

#[test]
fn reflection_at_defaults_con_gets_of_a_slow_resource() {
    let r = at_defaults(Case::Separate);
    check_big_answers(&r, 50.0);
    // Every request got its empty ACK (4 B each, well within 3x).
    let empty_acks = (r.tally.messages())
        .filter(|m| m.msg_type() == MessageType::Ack && m.code() == Code::EMPTY)
        .count();
    assert_eq!(empty_acks, 50);
}

#[test]
fn reflection_at_defaults_an_observation_never_acknowledged() {
    let r = at_defaults(Case::Observe);
    let probes = r.counter("amplification_probes_total");
    assert!(probes <= 1.0, "one CON asks for the proof: {}", r.details());
    // That CON unacknowledged for 2 s ended the observation (issue 40, row 8), before any
    // retransmission of it was due.
    assert_eq!(r.counter("observations"), 0.0, "{}", r.details());
    assert_eq!(r.counter("observers_lost_total"), 1.0, "{}", r.details());
}

#[test]
fn reflection_at_defaults_the_proxys_own_errors() {
    for (case, code) in [
        (Case::NotProxying, Code::PROXYING_NOT_SUPPORTED),
        (Case::NotAllowed, Code::FORBIDDEN),
    ] {
        let r = at_defaults(case);
        // An error is no longer than the request: each goes, none needs a CON.
        assert_eq!(r.tally.with_code(code), 100, "{}", r.details());
        assert_eq!(r.tally.datagrams.len(), 100, "{}", r.details());
        assert_eq!(r.counter("amplification_probes_total"), 0.0);
        assert_eq!(r.counter("forwarded_total"), 0.0);
    }
}

#[test]
fn a_client_that_acknowledges_gets_every_answer_in_full() {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(Serving::FAST, Arc::clone(&stop));
    let (_daemon, proxy, metrics) = common::daemon::proxy_with_metrics(up, &[]);
    let requests: Vec<Vec<u8>> = (0..50).map(|i| big_get(MessageType::Con, i)).collect();
    let start = Instant::now();
    let limit = Duration::from_secs(20);
    let tally = exchange(proxy, &requests, true, limit, |t| {
        t.full_answers().len() == requests.len()
    });
    let took = start.elapsed();
    let doc = scrape(metrics);
    stop.store(true, Ordering::SeqCst);
    let counter = |name: &str| doc.get(&format!("backoffd_coap_{name}"));
    eprintln!(
        "a client that ACKs: {} of 50 CON GETs answered with {BODY} B in {took:.2?}; \
         {} datagrams, {} of them CONs; sent {} B, received {} B; proved by ACK {}, \
         answers made CON {}",
        tally.full_answers().len(),
        tally.datagrams.len(),
        tally.with_payload(MessageType::Con),
        tally.sent,
        tally.received,
        counter("sources_proved_by_ack_total"),
        counter("answers_made_confirmable_total"),
    );
    assert_eq!(tally.full_answers().len(), 50, "every answer, in full");
    assert_eq!(counter("sources_proved_by_ack_total"), 1.0);
}

#[test]
fn with_the_opt_in_send_rate_a_client_past_it_gets_5_03_with_max_age_never_silence() {
    // 4 KiB/s with the smallest burst (64 KiB): about 63 answers of 1 KiB at once, then 4 a
    // second. The client sends one request at a time, as a polite one does, so that every
    // answer the rate let in is taken whole: nothing may be dropped on its way.
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(Serving::FAST, Arc::clone(&stop));
    let rate = [
        "--client-bytes-per-sec",
        "4096",
        "--client-burst-bytes",
        "65527",
    ];
    let (_daemon, proxy, metrics) = common::daemon::proxy_with_metrics(up, &rate);
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 2048];
    let (mut content, mut refused, mut unanswered) = (0, 0, 0);
    let mut max_ages = HashSet::new();
    for i in 0..150u16 {
        c.send_to(&big_get(MessageType::Con, i), proxy).unwrap();
        let answer = loop {
            let Ok(n) = c.recv(&mut buf) else {
                break None;
            };
            let m = Message::parse(&buf[..n]).unwrap();
            if let Some(reply) = reply_to(&m) {
                c.send_to(&reply, proxy).unwrap();
            }
            if m.token() == u32::from(i).to_be_bytes() && !m.code().is_empty() {
                let age = m.option(MAX_AGE).map(|v| decode_uint(v).unwrap());
                break Some((m.code(), m.payload().len(), age));
            }
        };
        match answer {
            Some((Code::CONTENT, BODY, _)) => content += 1,
            Some((Code::SERVICE_UNAVAILABLE, _, age)) => {
                refused += 1;
                max_ages.insert(age);
            }
            Some(other) => panic!("request {i}: {other:?}"),
            None => unanswered += 1,
        }
    }
    let doc = scrape(metrics);
    stop.store(true, Ordering::SeqCst);
    let counter = |name: &str| doc.get(&format!("backoffd_coap_{name}"));
    let by_rate = doc.get("backoffd_coap_refusals_total{cause=\"client_rate\"}");
    eprintln!(
        "opt-in rate 4096 B/s: 150 CON GETs one at a time: {content} x 2.05 ({BODY} B), \
         {refused} x 5.03 (Max-Age {max_ages:?}), {unanswered} unanswered; refused for the \
         rate {by_rate}, dropped over it {}",
        counter("over_budget_dropped_total"),
    );
    assert_eq!(unanswered, 0, "every request answered");
    assert!(content >= 60, "the burst: {content}");
    assert!(refused > 0 && by_rate == f64::from(refused));
    assert!(
        max_ages.iter().all(|age| age.is_some_and(|a| a >= 1)),
        "{max_ages:?}"
    );
    assert_eq!(counter("over_budget_dropped_total"), 0.0);
    assert_eq!(counter("sources_proved_by_ack_total"), 1.0);
}

// ------------------------------------------------------------------------------------------
// Observations ending

/// A client socket that waits up to 5 s for each datagram.
fn client() -> UdpSocket {
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c
}

/// The next datagram from the proxy: its type, Message ID and payload length. A CON is
/// acknowledged, as a client does (which proves its address the first time).
fn next(c: &UdpSocket, proxy: SocketAddr) -> (MessageType, u16, usize) {
    let mut buf = [0u8; 2048];
    let n = c.recv(&mut buf).expect("a datagram from the proxy");
    let m = Message::parse(&buf[..n]).unwrap();
    if let Some(reply) = reply_to(&m) {
        c.send_to(&reply, proxy).unwrap();
    }
    (m.msg_type(), m.message_id(), m.payload().len())
}

/// Registers `c` and waits for the registration's answer: a 1 KiB answer does not fit 3x
/// the 13-byte request, so it comes as a CON after an empty ACK, and [`next`] acknowledges it
/// (the client's proof of address).
fn register(c: &UdpSocket, proxy: SocketAddr) {
    c.send_to(&registration(), proxy).unwrap();
    let answered = (0..10).any(|_| next(c, proxy).2 > 0);
    assert!(answered, "the registration's answer");
}

/// Polls `until` for up to 5 s.
fn eventually(mut until: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if until() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn a_closed_client_socket_ends_its_observation_and_the_upstream_sees_it() {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, seen) = upstream(Serving::FAST, Arc::clone(&stop));
    let (_daemon, proxy, metrics) = common::daemon::proxy_with_metrics(up, &[]);
    let c = client();
    register(&c, proxy);
    for _ in 0..5 {
        next(&c, proxy);
    }
    let relayed = |m| scrape(m).get("backoffd_coap_notifications_relayed_total");
    drop(c);
    let at_close = relayed(metrics);
    assert!(
        eventually(|| seen.rsts.load(Ordering::SeqCst) > 0),
        "the upstream's notifications are reset"
    );
    let doc = scrape(metrics);
    assert_eq!(doc.get("backoffd_coap_observations"), 0.0);
    assert_eq!(doc.get("backoffd_coap_observers_lost_total"), 1.0);
    let after = relayed(metrics) - at_close;
    eprintln!(
        "notifications relayed to the closed socket after it closed: {after} \
         (the upstream sent {} in all)",
        seen.notified.load(Ordering::SeqCst)
    );
    assert!(
        after <= 3.0,
        "{after} notifications relayed after the close"
    );
    stop.store(true, Ordering::SeqCst);
}

/// Issue 40, row 8: a client that registers, gets the registration's answer as a CON (too
/// big for 3x its request) and closes its socket before it acknowledges: nothing more goes to
/// the closed port (the notifications wait behind that CON, its retransmissions are past
/// 3x), so no ICMP error comes; the CON unacknowledged ends the observation (it lived on for
/// EXCHANGE_LIFETIME before).
#[test]
fn an_unproven_client_that_closes_its_socket_before_acknowledging_loses_its_observation() {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, seen) = upstream(Serving::FAST, Arc::clone(&stop));
    let (_daemon, proxy, metrics) = common::daemon::proxy_with_metrics(up, &[]);
    let c = client();
    c.send_to(&registration(), proxy).unwrap();
    let mut buf = [0u8; 2048];
    let got_con = (0..5).any(|_| {
        c.recv(&mut buf).is_ok_and(|n| {
            Message::parse(&buf[..n])
                .is_ok_and(|m| m.msg_type() == MessageType::Con && m.payload().len() == BODY)
        })
    });
    assert!(got_con, "the registration's answer, as a CON");
    drop(c);
    assert!(
        eventually(|| scrape(metrics).get("backoffd_coap_observations") == 0.0),
        "the observation ends within 5 s of the close"
    );
    assert!(
        eventually(|| seen.rsts.load(Ordering::SeqCst) > 0),
        "the upstream's next notification is reset"
    );
    let doc = scrape(metrics);
    assert_eq!(doc.get("backoffd_coap_observers_lost_total"), 1.0);
    assert_eq!(doc.get("backoffd_coap_sources_proved_by_ack_total"), 0.0);
    stop.store(true, Ordering::SeqCst);
}

#[test]
fn a_client_that_resets_a_notification_ends_its_observation_and_the_upstream_sees_it() {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, seen) = upstream(Serving::FAST, Arc::clone(&stop));
    let (_daemon, proxy, metrics) = common::daemon::proxy_with_metrics(up, &[]);
    let c = client();
    register(&c, proxy);
    // Proven by its ACK, the client gets NON notifications (a CON every 20th, acknowledged).
    let mid = (0..40)
        .map(|_| next(&c, proxy))
        .find(|&(ty, _, _)| ty == MessageType::Non)
        .expect("a NON notification")
        .1;
    let mut out = Vec::new();
    rst(&mut out, mid);
    c.send_to(&out, proxy).unwrap();
    assert!(
        eventually(|| seen.rsts.load(Ordering::SeqCst) > 0),
        "the upstream's next notification is reset"
    );
    let doc = scrape(metrics);
    assert_eq!(doc.get("backoffd_coap_observations"), 0.0);
    assert_eq!(doc.get("backoffd_coap_observers_lost_total"), 1.0);
    assert_eq!(doc.get("backoffd_coap_sources_proved_by_ack_total"), 1.0);
    stop.store(true, Ordering::SeqCst);
}

#[test]
fn an_unproven_client_that_resets_the_con_it_gets_ends_its_observation() {
    // The registration's answer does not fit 3x the request: it comes as a CON after an
    // empty ACK. An RST to it proves the address (it names the proxy's Message ID) and
    // cancels the observation (RFC 7641 §3.6).
    let stop = Arc::new(AtomicBool::new(false));
    let (up, seen) = upstream(Serving::FAST, Arc::clone(&stop));
    let (_daemon, proxy, metrics) = common::daemon::proxy_with_metrics(up, &[]);
    let c = client();
    c.send_to(&registration(), proxy).unwrap();
    let mut buf = [0u8; 2048];
    let con = loop {
        let n = c.recv(&mut buf).expect("a datagram from the proxy");
        let m = Message::parse(&buf[..n]).unwrap();
        if m.msg_type() == MessageType::Con && m.payload().len() == BODY {
            break m.message_id();
        }
    };
    let mut out = Vec::new();
    rst(&mut out, con);
    c.send_to(&out, proxy).unwrap();
    assert!(
        eventually(|| seen.rsts.load(Ordering::SeqCst) > 0),
        "the upstream's next notification is reset"
    );
    let doc = scrape(metrics);
    assert_eq!(doc.get("backoffd_coap_observations"), 0.0);
    assert_eq!(doc.get("backoffd_coap_observers_lost_total"), 1.0);
    assert_eq!(doc.get("backoffd_coap_sources_proved_by_ack_total"), 1.0);
    stop.store(true, Ordering::SeqCst);
}

#[test]
fn with_validate_sources_a_client_that_echoes_is_served_over_loopback() {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(Serving::FAST, Arc::clone(&stop));
    let (_daemon, proxy, metrics) = common::daemon::proxy_with_metrics(up, &["--validate-sources"]);
    let c = client();
    let get = |mid, echo: Option<&[u8]>| {
        let mut req = Vec::new();
        let mut b = MessageBuilder::new(&mut req, MessageType::Con, Code::GET, mid, b"abcd");
        b.option(URI_PATH, b"big");
        if let Some(e) = echo {
            b.option(ECHO, e);
        }
        b.finish().unwrap();
        req
    };
    let mut buf = [0u8; 2048];
    c.send_to(&get(1, None), proxy).unwrap();
    let n = c.recv(&mut buf).unwrap();
    let m = Message::parse(&buf[..n]).unwrap();
    assert_eq!(m.code(), Code::UNAUTHORIZED);
    assert!(n <= 3 * 12, "the 4.01 is within 3x: {n} bytes");
    let echo = m.option(ECHO).unwrap().to_vec();
    c.send_to(&get(2, Some(&echo)), proxy).unwrap();
    let n = c.recv(&mut buf).unwrap();
    let m = Message::parse(&buf[..n]).unwrap();
    assert_eq!(
        (m.msg_type(), m.code(), m.payload().len()),
        (MessageType::Ack, Code::CONTENT, BODY),
        "piggybacked: the Echo proved the client"
    );
    let doc = scrape(metrics);
    assert_eq!(doc.get("backoffd_coap_sources_proved_by_echo_total"), 1.0);
    stop.store(true, Ordering::SeqCst);
}
