//! The real `backoffd proxy` binary under overload and under loss, over loopback UDP.

mod common;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backoffd::coap::option::MAX_AGE;
use backoffd::coap::{empty_ack, rst, Code, Message, MessageBuilder, MessageType};
use common::daemon;
use common::exposition::{scrape, Exposition};
use common::upstream::{Script, Upstream};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn metric(doc: &Exposition, series: &str) -> f64 {
    doc.get(series)
}

fn token_of(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

fn id_of_token(token: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(token.try_into().ok()?))
}

const OVERLOAD_REQUESTS: u32 = 1000;
const MAX_INFLIGHT: u32 = 100;

#[test]
fn ten_times_max_inflight_against_a_silent_upstream_gets_5_03_and_frees_all_state() {
    // An upstream that reads nothing and never answers.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let up = silent.local_addr().unwrap().to_string();
    let daemon::Proxy {
        proc: daemon,
        coap: proxy,
        metrics,
        ..
    } = overload_proxy(&up);
    let metrics = metrics.expect("a metrics listener");
    let before = scrape(metrics);
    let rss_before = daemon.status_kib("VmRSS:");

    let mut client = OverloadClient::new(proxy);
    let send_phase = client.send_in_batches();
    client.await_the_rest();

    let (unavailable, timeout) = count_overload_answers(&client.answers);
    assert_eq!(client.received, OVERLOAD_REQUESTS as usize);

    let after = scrape(metrics);
    let forwarded = check_overload_counters(&before, &after, send_phase, unavailable, timeout);
    let fired = check_overload_state_and_timers(&before, &after, forwarded);
    let rss_after = daemon.status_kib("VmRSS:");
    assert!(
        rss_after <= rss_before + 4 * 1024,
        "VmRSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    let (pings, cons) = (client.pings, client.cons);
    eprintln!(
        "overload: {unavailable} x 5.03, {timeout} x 5.04, send phase {send_phase:?}, \
         VmRSS {rss_before} -> {rss_after} KiB, {fired} timers; the client was pinged {pings} \
         times, sent {cons} answers as CON"
    );
    drop(silent);
}

/// The proxy of the overload test: max-inflight 100, two 200 ms attempts, a 1 s total timeout.
fn overload_proxy(up: &str) -> daemon::Proxy {
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        up,
        "--seed",
        "7",
        "--max-inflight",
        "100",
        "--timeout",
        "200ms",
        "--jitter",
        "0",
        "--max-retries",
        "1",
        "--total-timeout",
        "1s",
        "--non-idempotent-total-timeout",
        "1s",
        "--max-cached",
        "2000",
        "--metrics",
        "127.0.0.1:0",
    ];
    daemon::proxy("debug", &args)
}

/// The overload test's client: its socket, the answers per request id, and what the proxy
/// asked of it.
struct OverloadClient {
    c: UdpSocket,
    proxy: SocketAddr,
    answers: HashMap<u32, Vec<(Code, bool)>>,
    received: usize,
    buf: [u8; 2048],
    /// The client behaves as RFC 7252 §4.2-4.3 say: it acknowledges a CON and resets a ping
    /// (an empty CON). Past 3x what it sent, the proxy asks it so for a proof of its address.
    pings: u32,
    cons: u32,
}

impl OverloadClient {
    fn new(proxy: SocketAddr) -> OverloadClient {
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        OverloadClient {
            c,
            proxy,
            answers: HashMap::new(),
            received: 0,
            buf: [0u8; 2048],
            pings: 0,
            cons: 0,
        }
    }

    /// Receives one datagram, answering a CON; true if it was an answer (counted in `received`).
    fn take(&mut self) -> bool {
        let Ok(n) = self.c.recv(&mut self.buf) else {
            return false;
        };
        let m = Message::parse(&self.buf[..n]).expect("a well-formed answer");
        if m.msg_type() == MessageType::Con {
            let mut reply = Vec::new();
            match m.code() {
                Code::EMPTY => (rst(&mut reply, m.message_id()), self.pings += 1).0,
                _ => (empty_ack(&mut reply, m.message_id()), self.cons += 1).0,
            }
            self.c.send_to(&reply, self.proxy).unwrap();
        }
        if m.code() == Code::EMPTY {
            return false;
        }
        let id = id_of_token(m.token()).expect("one of our tokens");
        let entry = self.answers.entry(id).or_default();
        entry.push((m.code(), m.option(MAX_AGE).is_some()));
        self.received += 1;
        true
    }

    /// Batches of 50, each followed by draining the immediate 5.03s, so neither socket's
    /// receive buffer overflows (a NON lost there would never be answered). Returns how long
    /// the send phase took.
    fn send_in_batches(&mut self) -> Duration {
        let start = Instant::now();
        let mut sent = 0u32;
        while sent < OVERLOAD_REQUESTS {
            for _ in 0..50 {
                let mut out = Vec::new();
                let b = MessageBuilder::new(
                    &mut out,
                    MessageType::Non,
                    Code::GET,
                    sent as u16,
                    &token_of(sent),
                );
                b.finish().unwrap();
                self.c.send_to(&out, self.proxy).unwrap();
                sent += 1;
            }
            let expected = (sent as usize).saturating_sub(MAX_INFLIGHT as usize);
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.received < expected && Instant::now() < deadline {
                self.take();
            }
        }
        start.elapsed()
    }

    /// Every forwarded request ends in 5.04 after 200 ms + 300 ms (two attempts); waits for
    /// the rest of the answers, bounded, then a little longer to catch any second answer.
    fn await_the_rest(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.received < OVERLOAD_REQUESTS as usize && Instant::now() < deadline {
            self.take();
        }
        let quiet = Instant::now() + Duration::from_millis(500);
        while Instant::now() < quiet {
            self.take();
        }
    }
}

/// Checks that each request got exactly one answer, a 5.03 with Max-Age or a 5.04, and
/// returns how many of each.
fn count_overload_answers(answers: &HashMap<u32, Vec<(Code, bool)>>) -> (u32, u32) {
    let (mut unavailable, mut timeout) = (0u32, 0u32);
    for i in 0..OVERLOAD_REQUESTS {
        let got = answers.get(&i).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(got.len(), 1, "request {i} got {got:?}");
        match got[0] {
            (Code::SERVICE_UNAVAILABLE, has_max_age) => {
                assert!(has_max_age, "5.03 without Max-Age for request {i}");
                unavailable += 1;
            }
            (Code::GATEWAY_TIMEOUT, _) => timeout += 1,
            other => panic!("request {i} answered {other:?}"),
        }
    }
    (unavailable, timeout)
}

/// Checks the proxy's counters against what the client saw; returns how many it forwarded.
fn check_overload_counters(
    before: &Exposition,
    after: &Exposition,
    send_phase: Duration,
    unavailable: u32,
    timeout: u32,
) -> f64 {
    let forwarded = metric(after, "backoffd_coap_forwarded_total")
        - metric(before, "backoffd_coap_forwarded_total");
    // A request is forwarded only into a free slot; a slot frees only when its exchange ends,
    // which takes >= 500 ms (no jitter). A send phase shorter than that therefore forwards at
    // most max-inflight requests; on a machine so loaded it took longer, allow the slots that
    // may have turned over meanwhile (one generation per 500 ms) rather than flake.
    let generations = 1 + (send_phase.as_millis() / 500) as u32;
    assert!(
        forwarded <= f64::from(MAX_INFLIGHT * generations),
        "{forwarded} forwarded in a {send_phase:?} send phase"
    );
    if generations == 1 {
        assert!(
            unavailable >= OVERLOAD_REQUESTS - MAX_INFLIGHT,
            "{unavailable}"
        );
        assert!(timeout <= MAX_INFLIGHT, "{timeout}");
    } else {
        eprintln!("slow send phase ({send_phase:?}): bounds widened to {generations} generations");
    }
    // The proxy's own counters agree with what the client saw, and every forwarded request
    // ended (5.04 for each one forwarded): nothing is still in flight.
    assert_eq!(f64::from(timeout), forwarded);
    let delta = |series: &str| metric(after, series) - metric(before, series);
    assert_eq!(
        delta("backoffd_coap_answers_total{code=\"5.03\"}"),
        f64::from(unavailable)
    );
    assert_eq!(
        delta("backoffd_coap_answers_total{code=\"5.04\"}"),
        f64::from(timeout)
    );
    assert_eq!(
        delta("backoffd_coap_requests_total"),
        f64::from(OVERLOAD_REQUESTS)
    );
    forwarded
}

/// Checks that no exchange state is left and that the timers kept firing, in time; returns
/// how many timers were dispatched.
fn check_overload_state_and_timers(before: &Exposition, after: &Exposition, forwarded: f64) -> f64 {
    let delta = |series: &str| metric(after, series) - metric(before, series);
    // All state of the forwarded requests is gone after the total timeout: nothing is in
    // flight or being worked on, none observing; what is left are answers kept for
    // retransmissions (bounded by --max-cached).
    assert_eq!(metric(after, "backoffd_coap_in_flight"), 0.0);
    let live = metric(after, "backoffd_coap_live_exchanges");
    let cached = metric(after, "backoffd_coap_cached_answers");
    assert_eq!(live, 0.0, "exchanges still being worked on");
    assert_eq!(metric(after, "backoffd_coap_observations"), 0.0);
    assert!(
        cached <= f64::from(OVERLOAD_REQUESTS),
        "{cached} cached answers"
    );
    // The loop kept dispatching timers: every 5.04 comes from one. (The proxy keeps one
    // reactor timer for its earliest deadline, not one per exchange, so the histogram counts
    // wake-ups, not exchanges.)
    let fired = delta("backoffd_timer_lateness_seconds_count");
    assert!(
        fired >= 1.0,
        "no timer dispatched for {forwarded} forwarded"
    );
    // Each forwarded request was retransmitted once (--max-retries 1) before its 5.04, and
    // each retransmission's lateness was recorded.
    let retransmitted = delta("backoffd_coap_retransmit_lateness_seconds_count");
    assert!(
        retransmitted >= forwarded,
        "{retransmitted} retransmissions timed for {forwarded} forwarded"
    );
    check_timer_lateness(after);
    fired
}

/// Timer lateness: the tight goal is a benchmark's to check (this machine is shared and
/// noisy); here only a sanity bound: at most 5 % of wake-ups (or one, as there are only
/// a few hundred) later than ~100 ms (the first bucket bound at or above 100 ms: 114.7 ms,
/// with 4 buckets per power of two).
fn check_timer_lateness(after: &Exposition) {
    let total = metric(after, "backoffd_timer_lateness_seconds_count");
    let lateness = after.histogram("backoffd_timer_lateness_seconds");
    // (bucket bound, wake-ups within it) for the first bucket at or above `bound`.
    let bucket_at = |bound: f64| {
        lateness
            .iter()
            .find(|(le, _)| *le >= bound)
            .copied()
            .unwrap_or((f64::INFINITY, total))
    };
    let p99 = lateness
        .iter()
        .find(|(_, n)| *n >= 0.99 * total)
        .map_or(f64::INFINITY, |&(le, _)| le);
    let (late_bound, within) = bucket_at(0.1);
    let late = total - within;
    assert!(
        late <= (0.05 * total).max(1.0),
        "{late} of {total} timer wake-ups later than {late_bound} s"
    );
    eprintln!(
        "timer lateness: p99 <= {p99} s, {} of {total} within 1 ms",
        bucket_at(0.001).1
    );
}

/// Forwards datagrams between whoever talks to its front address and `target`, dropping
/// `LOSS` of them in each direction with seeded RNGs. Returns the front address.
fn lossy_relay(target: SocketAddr, seed: u64) -> SocketAddr {
    const LOSS: f64 = 0.2;
    let front = UdpSocket::bind("127.0.0.1:0").unwrap();
    let back = UdpSocket::bind("127.0.0.1:0").unwrap();
    back.connect(target).unwrap();
    let addr = front.local_addr().unwrap();
    let peer: Arc<Mutex<Option<SocketAddr>>> = Arc::new(Mutex::new(None));
    let (front2, back2, peer2) = (
        front.try_clone().unwrap(),
        back.try_clone().unwrap(),
        peer.clone(),
    );
    std::thread::spawn(move || {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = front.recv_from(&mut buf) {
            *peer.lock().unwrap() = Some(from);
            if !rng.random_bool(LOSS) {
                let _ = back.send(&buf[..n]);
            }
        }
    });
    std::thread::spawn(move || {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        let mut buf = [0u8; 2048];
        while let Ok(n) = back2.recv(&mut buf) {
            let to = *peer2.lock().unwrap();
            if let Some(to) = to {
                if !rng.random_bool(LOSS) {
                    let _ = front2.send_to(&buf[..n], to);
                }
            }
        }
    });
    addr
}

#[derive(Default)]
struct Executions {
    /// Executions per request id.
    per_id: HashMap<u64, u32>,
    /// The counter the POSTs increment.
    counter: u64,
}

/// A CoAP server that executes each POST (payload: a request id) once per (source, MID),
/// answering retransmissions from its cache (RFC 7252 §4.5), with 2.04 and the payload.
fn counter_upstream() -> (Upstream, Arc<Mutex<Executions>>) {
    let state = Arc::new(Mutex::new(Executions::default()));
    let shared = Arc::clone(&state);
    let upstream = Script::new()
        .only(Code::POST)
        .code(Code::CHANGED)
        .echo()
        .once_per_message()
        .on_request(move |req| {
            let id: u64 = std::str::from_utf8(req.payload())
                .ok()
                .and_then(|s| s.parse().ok())
                .expect("a request id payload");
            let mut s = shared.lock().unwrap();
            *s.per_id.entry(id).or_default() += 1;
            s.counter += 1;
        })
        .start();
    (upstream, state)
}

/// The 10k POSTs.
const LOSSY_REQUESTS: u32 = 10_000;
/// Client requests outstanding at once: with a third of them waiting seconds for a
/// retransmission, a wide window keeps the run short.
const WINDOW: usize = 1000;
/// New requests started per loop turn, so the relays' receive buffers never see a burst.
const STARTS_PER_TURN: usize = 20;
/// The client's transmissions of one request, and its retransmission timeouts: the first
/// after `FIRST_WAIT`, each later one after `LATER_WAIT` (a capped backoff).
///
/// Why no request goes unanswered: the proxy's upstream leg (--timeout 30ms, x1.5, 6 retries,
/// jitter 0.1) ends within 1.1 x 30 ms x (1 + 1.5 + ... + 1.5^6) = 1.06 s of the first request
/// reaching it, with the upstream's answer or a 5.04, and `--ack-delay` is longer than that, so
/// the answer is always piggybacked on the ACK and cached; the client's next transmission
/// comes >= 1.5 s later and gets the cached answer again if the first one was lost. So each
/// transmission fails independently only if the request or the answer is lost:
/// 1 - 0.8^2 = 0.36. All 30 fail with 0.36^30 = 4.9e-14 per request, 4.9e-10 for 10k.
/// (A client retransmission that reaches the proxy before its upstream leg ended, possible only
/// if the machine stalls the proxy for ~0.5 s, makes the answer separate: the proxy then sends it
/// as a CON up to 5 times, lost with 0.2^5 = 3.2e-4, on top of that stall.)
const CLIENT_ATTEMPTS: u32 = 30;
const FIRST_WAIT: Duration = Duration::from_millis(1500);
const LATER_WAIT: Duration = Duration::from_millis(2000);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Client {
    Idle,
    /// Sent `attempts` times; the next retransmission is queued in the retransmission heap.
    Sent {
        attempts: u32,
    },
    /// Empty ACK received; the separate answer is due.
    Acked,
    Done(Code),
    GaveUp,
}

#[test]
fn posts_through_20_percent_loss_each_way_execute_exactly_once() {
    let (origin, executions) = counter_upstream();
    let up_relay = lossy_relay(origin.addr, 0xC0A9);
    let upstream = up_relay.to_string();
    let daemon = lossy_proxy(&upstream);
    let front = lossy_relay(daemon.coap, 0xF00D);

    let mut client = LossyClient::new(front, LOSSY_REQUESTS as usize);
    let start = Instant::now();
    let hard_deadline = start + Duration::from_secs(180);
    let n = client.state.len();
    while client.finished < n {
        let finished = client.finished;
        assert!(
            Instant::now() < hard_deadline,
            "only {finished} of {n} finished"
        );
        client.start_new();
        client.receive();
        client.retransmit_due();
    }
    let wall = start.elapsed();

    let exec = executions.lock().unwrap();
    let timeouts = check_lossy_outcomes(&client.state, &exec);
    let (transmissions, separate) = (client.transmissions, client.separate);
    eprintln!(
        "lossy: {n} POSTs answered in {wall:?} ({transmissions} client transmissions), \
         5.04 for {timeouts:?}, {separate} separate answers, {} executions",
        exec.counter
    );
}

/// The proxy of the loss test: quick upstream retransmissions, an ACK delay longer than its
/// whole upstream leg.
fn lossy_proxy(upstream: &str) -> daemon::Proxy {
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        upstream,
        "--seed",
        "7",
        "--timeout",
        "30ms",
        "--non-idempotent-timeout",
        "30ms",
        "--max-retries",
        "6",
        "--non-idempotent-max-retries",
        "6",
        "--backoff-factor",
        "1.5",
        "--non-idempotent-backoff-factor",
        "1.5",
        "--total-timeout",
        "10s",
        "--non-idempotent-total-timeout",
        "10s",
        "--ack-delay",
        "20s",
        // One client socket keeps WINDOW requests outstanding: more than one client may have
        // by default.
        "--max-inflight-per-client",
        "1000",
    ];
    daemon::proxy("debug", &args)
}

/// The loss test's client: one socket, each request's state, and its retransmission queue.
struct LossyClient {
    c: UdpSocket,
    front: SocketAddr,
    state: Vec<Client>,
    /// Due retransmissions: (when, request, its attempts when queued); stale entries (the
    /// request was answered or moved on) are skipped when popped.
    due: BinaryHeap<Reverse<(Instant, usize, u32)>>,
    next_idle: usize,
    outstanding: usize,
    finished: usize,
    transmissions: u64,
    /// Requests that got an empty ACK (their answer then came separately).
    separate: usize,
    buf: [u8; 2048],
}

impl LossyClient {
    fn new(front: SocketAddr, n: usize) -> LossyClient {
        LossyClient {
            c: UdpSocket::bind("127.0.0.1:0").unwrap(),
            front,
            state: vec![Client::Idle; n],
            due: BinaryHeap::new(),
            next_idle: 0,
            outstanding: 0,
            finished: 0,
            transmissions: 0,
            separate: 0,
            buf: [0u8; 2048],
        }
    }

    /// Request `i`: a CON POST with MID `i`, token `i` and payload `i`.
    fn encode(i: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut b = MessageBuilder::new(
            &mut out,
            MessageType::Con,
            Code::POST,
            i as u16,
            &token_of(i as u32),
        );
        b.payload(i.to_string().as_bytes());
        b.finish().unwrap();
        out
    }

    /// Starts up to [`STARTS_PER_TURN`] new requests while fewer than [`WINDOW`] are outstanding.
    fn start_new(&mut self) {
        let n = self.state.len();
        let mut started = 0;
        while self.outstanding < WINDOW && self.next_idle < n && started < STARTS_PER_TURN {
            let i = self.next_idle;
            self.c.send_to(&Self::encode(i), self.front).unwrap();
            self.transmissions += 1;
            self.state[i] = Client::Sent { attempts: 1 };
            self.due.push(Reverse((Instant::now() + FIRST_WAIT, i, 1)));
            self.next_idle += 1;
            self.outstanding += 1;
            started += 1;
        }
    }

    /// Waits for a datagram no longer than until the next retransmission is due, then drains
    /// everything that is already there before looking at the clock again.
    fn receive(&mut self) {
        let wait = self
            .due
            .peek()
            .map_or(Duration::from_millis(5), |Reverse((at, _, _))| {
                at.saturating_duration_since(Instant::now())
            });
        let wait = wait.clamp(Duration::from_micros(100), Duration::from_millis(5));
        self.c.set_read_timeout(Some(wait)).unwrap();
        let mut got = self.c.recv(&mut self.buf).ok();
        if got.is_some() {
            self.c.set_nonblocking(true).unwrap();
        }
        while let Some(len) = got {
            let datagram = self.buf[..len].to_vec();
            self.handle(&datagram);
            got = self.c.recv(&mut self.buf).ok();
        }
        self.c.set_nonblocking(false).unwrap();
    }

    /// One datagram from the proxy: an empty ACK, or an answer (acknowledged if a CON).
    fn handle(&mut self, datagram: &[u8]) {
        let m = Message::parse(datagram).expect("a well-formed datagram");
        let by_mid = usize::from(m.message_id());
        match (m.msg_type(), m.code()) {
            (MessageType::Ack, Code::EMPTY) => {
                // Empty ACKs echo our MID (request index mod 2^16; all < 2^16 here).
                if let Some(Client::Sent { .. }) = self.state.get(by_mid) {
                    self.state[by_mid] = Client::Acked;
                    self.separate += 1;
                }
            }
            (ty, code) if code.is_response() => {
                if ty == MessageType::Con {
                    let mut ack = Vec::new();
                    empty_ack(&mut ack, m.message_id());
                    self.c.send_to(&ack, self.front).unwrap();
                }
                let i = id_of_token(m.token()).expect("one of our tokens") as usize;
                if matches!(self.state[i], Client::Sent { .. } | Client::Acked) {
                    self.state[i] = Client::Done(code);
                    self.outstanding -= 1;
                    self.finished += 1;
                }
            }
            _ => {}
        }
    }

    /// Retransmits the requests whose retransmission is due, or gives them up after
    /// [`CLIENT_ATTEMPTS`].
    fn retransmit_due(&mut self) {
        let now = Instant::now();
        while let Some(&Reverse((at, i, queued))) = self.due.peek() {
            if at > now {
                break;
            }
            self.due.pop();
            match self.state[i] {
                Client::Sent { attempts } if attempts == queued => {
                    if attempts >= CLIENT_ATTEMPTS {
                        self.state[i] = Client::GaveUp;
                        self.outstanding -= 1;
                        self.finished += 1;
                    } else {
                        self.c.send_to(&Self::encode(i), self.front).unwrap();
                        self.transmissions += 1;
                        self.state[i] = Client::Sent {
                            attempts: attempts + 1,
                        };
                        self.due.push(Reverse((now + LATER_WAIT, i, attempts + 1)));
                    }
                }
                // Answered, or acknowledged empty: the answer then comes as a CON that the
                // proxy retransmits (RFC 7252 §5.2.2), awaited until the hard deadline.
                _ => {}
            }
        }
    }
}

/// Checks that every request was answered, each 2.xx executed exactly once upstream and no
/// request more than once; returns the requests answered 5.04.
fn check_lossy_outcomes(state: &[Client], exec: &Executions) -> Vec<usize> {
    let n = state.len();
    let mut timeouts = Vec::new();
    for (i, s) in state.iter().enumerate() {
        match *s {
            Client::Done(code) if code.class() == 2 => {
                assert_eq!(
                    exec.per_id.get(&(i as u64)),
                    Some(&1),
                    "request {i} answered 2.xx"
                );
            }
            // The proxy gives up after 7 attempts each lost with p = 1 - 0.8^2 = 0.36:
            // p = 0.36^7 = 7.8e-4 per request, about 8 in 10k. Whether such a request
            // executed upstream is unknowable, but it executed at most once (checked below).
            Client::Done(Code::GATEWAY_TIMEOUT) => timeouts.push(i),
            other => panic!("request {i} ended {other:?} (every request must be answered)"),
        }
    }
    // Expected about 8 of 10k (Poisson: more than 60 has p < 1e-30); a stalled machine makes
    // the proxy give up more often, so the bound is loose: far more means a broken retry path.
    assert!(timeouts.len() <= 60, "5.04 for {timeouts:?}");
    let distinct: HashSet<u64> = exec.per_id.keys().copied().collect();
    for (id, times) in &exec.per_id {
        assert_eq!(*times, 1, "request id {id} executed {times} times");
        assert!(*id < u64::from(LOSSY_REQUESTS), "unknown id {id}");
    }
    assert_eq!(exec.counter, distinct.len() as u64);
    assert!(distinct.len() >= n - timeouts.len());
    timeouts
}
