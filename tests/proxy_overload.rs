//! The real `backoffd proxy` binary under overload and under loss, over loopback UDP.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backoffd::coap::option::MAX_AGE;
use backoffd::coap::{empty_ack, Code, Message, MessageBuilder, MessageType};
use common::exposition::Exposition;
use common::http::get;
use common::Daemon;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn scrape(metrics: SocketAddr) -> Exposition {
    let answer = get(metrics, "/metrics");
    assert_eq!(answer.status, 200);
    Exposition::parse(&answer.body)
}

fn metric(doc: &Exposition, series: &str) -> f64 {
    *doc.samples
        .get(series)
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}

/// VmRSS of a process in KiB, from /proc/<pid>/status.
fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS line");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
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
    let args = [
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
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
    let (mut daemon, proxy) = Daemon::start(&args, "CoAP proxy listening on ");
    let metrics = daemon.wait_for_addr("metrics listening on ");
    let pid = daemon.child.id();
    let before = scrape(metrics);
    let rss_before = vm_rss_kib(pid);

    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut answers: HashMap<u32, Vec<(Code, bool)>> = HashMap::new();
    let mut received = 0usize;
    let mut buf = [0u8; 2048];
    let mut take = |c: &UdpSocket, answers: &mut HashMap<u32, Vec<(Code, bool)>>| -> bool {
        let Ok(n) = c.recv(&mut buf) else {
            return false;
        };
        let m = Message::parse(&buf[..n]).expect("a well-formed answer");
        let id = id_of_token(m.token()).expect("one of our tokens");
        let entry = answers.entry(id).or_default();
        entry.push((m.code(), m.option(MAX_AGE).is_some()));
        true
    };

    // Batches of 50, each followed by draining the immediate 5.03s, so neither socket's
    // receive buffer overflows (a NON lost there would never be answered).
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
            c.send_to(&out, proxy).unwrap();
            sent += 1;
        }
        let expected = (sent as usize).saturating_sub(MAX_INFLIGHT as usize);
        let deadline = Instant::now() + Duration::from_secs(5);
        while received < expected && Instant::now() < deadline {
            if take(&c, &mut answers) {
                received += 1;
            }
        }
    }
    let send_phase = start.elapsed();

    // Every forwarded request ends in 5.04 after 200 ms + 300 ms (two attempts); wait for
    // the rest of the answers, bounded, then a little longer to catch any second answer.
    let deadline = Instant::now() + Duration::from_secs(15);
    while received < OVERLOAD_REQUESTS as usize && Instant::now() < deadline {
        if take(&c, &mut answers) {
            received += 1;
        }
    }
    let quiet = Instant::now() + Duration::from_millis(500);
    while Instant::now() < quiet {
        if take(&c, &mut answers) {
            received += 1;
        }
    }

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
    assert_eq!(received, OVERLOAD_REQUESTS as usize);

    let after = scrape(metrics);
    let forwarded = metric(&after, "backoffd_coap_forwarded_total")
        - metric(&before, "backoffd_coap_forwarded_total");
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
    let delta = |series: &str| metric(&after, series) - metric(&before, series);
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
    // State stays bounded: finished answers are cached (up to --max-cached), nothing more.
    let live = metric(&after, "backoffd_coap_live_exchanges");
    assert!(
        live <= f64::from(OVERLOAD_REQUESTS),
        "{live} live exchanges"
    );
    // The loop kept dispatching timers: every 5.04 comes from one. (The proxy keeps one
    // reactor timer for its earliest deadline, not one per exchange, so the histogram counts
    // wake-ups, a handful here, not exchanges.)
    let fired = delta("backoffd_timer_lateness_seconds_count");
    assert!(
        fired >= 1.0,
        "no timer dispatched for {forwarded} forwarded"
    );
    let rss_after = vm_rss_kib(pid);
    assert!(
        rss_after <= rss_before + 4 * 1024,
        "VmRSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    eprintln!(
        "overload: {unavailable} x 5.03, {timeout} x 5.04, send phase {send_phase:?}, \
         VmRSS {rss_before} -> {rss_after} KiB, {fired} timers"
    );
    drop(silent);
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
/// answering retransmissions from its cache (RFC 7252 §4.5).
fn counter_upstream() -> (SocketAddr, Arc<Mutex<Executions>>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    let state = Arc::new(Mutex::new(Executions::default()));
    let shared = Arc::clone(&state);
    std::thread::spawn(move || {
        let mut seen: HashMap<(SocketAddr, u16), Vec<u8>> = HashMap::new();
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let Ok(req) = Message::parse(&buf[..n]) else {
                continue;
            };
            if req.code() != Code::POST {
                continue;
            }
            let key = (from, req.message_id());
            if let Some(answer) = seen.get(&key) {
                let _ = socket.send_to(answer, from);
                continue;
            }
            let id: u64 = std::str::from_utf8(req.payload())
                .ok()
                .and_then(|s| s.parse().ok())
                .expect("a request id payload");
            {
                let mut s = shared.lock().unwrap();
                *s.per_id.entry(id).or_default() += 1;
                s.counter += 1;
            }
            let (ty, mid) = match req.msg_type() {
                MessageType::Con => (MessageType::Ack, req.message_id()),
                _ => (MessageType::Non, req.message_id().wrapping_add(0x8000)),
            };
            let mut out = Vec::new();
            let mut b = MessageBuilder::new(&mut out, ty, Code::CHANGED, mid, req.token());
            b.payload(req.payload());
            b.finish().unwrap();
            let _ = socket.send_to(&out, from);
            seen.insert(key, out);
        }
    });
    (addr, state)
}

/// 2000 rather than the 10k: 2000 take about 30 s here on 2 shared cores (the
/// window of 100 and the 25 s tail of a client's last retransmission dominate), so 10k
/// would be well over a minute; 2000 exercises the same per-request loss paths.
const LOSSY_REQUESTS: u32 = 2000;
/// Client requests outstanding at once.
const WINDOW: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Client {
    Idle,
    /// Sent `attempts` times; next retransmission at `next`.
    Sent {
        attempts: u32,
        next: Instant,
    },
    /// Empty ACK received; the separate answer is due.
    Acked {
        since: Instant,
    },
    Done(Code),
    GaveUp,
}

#[test]
fn posts_through_20_percent_loss_each_way_execute_exactly_once() {
    let (up, executions) = counter_upstream();
    let up_relay = lossy_relay(up, 0xC0A9);
    let upstream = up_relay.to_string();
    let args = [
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &upstream,
        "--seed",
        "7",
        "--timeout",
        "100ms",
        "--max-retries",
        "6",
        "--non-idempotent-max-retries",
        "6",
        "--backoff-factor",
        "1.5",
        "--total-timeout",
        "10s",
        "--non-idempotent-total-timeout",
        "10s",
        "--ack-delay",
        "50ms",
    ];
    let (_daemon, proxy) = Daemon::start(&args, "CoAP proxy listening on ");
    let front = lossy_relay(proxy, 0xF00D);

    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
    let n = LOSSY_REQUESTS as usize;
    let mut state = vec![Client::Idle; n];
    let encode = |i: usize| {
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
    };
    let start = Instant::now();
    let hard_deadline = start + Duration::from_secs(120);
    let mut next_idle = 0usize;
    let mut outstanding = 0usize;
    let mut finished = 0usize;
    let mut buf = [0u8; 2048];
    while finished < n {
        assert!(
            Instant::now() < hard_deadline,
            "only {finished} of {n} finished"
        );
        while outstanding < WINDOW && next_idle < n {
            c.send_to(&encode(next_idle), front).unwrap();
            state[next_idle] = Client::Sent {
                attempts: 1,
                next: Instant::now() + Duration::from_millis(200),
            };
            next_idle += 1;
            outstanding += 1;
        }
        if let Ok(len) = c.recv(&mut buf) {
            let m = Message::parse(&buf[..len]).expect("a well-formed datagram");
            let by_mid = usize::from(m.message_id());
            match (m.msg_type(), m.code()) {
                (MessageType::Ack, Code::EMPTY) => {
                    if let Some(Client::Sent { .. }) = state.get(by_mid) {
                        state[by_mid] = Client::Acked {
                            since: Instant::now(),
                        };
                    }
                }
                (ty, code) if code.is_response() => {
                    if ty == MessageType::Con {
                        let mut ack = Vec::new();
                        empty_ack(&mut ack, m.message_id());
                        c.send_to(&ack, front).unwrap();
                    }
                    let i = id_of_token(m.token()).expect("one of our tokens") as usize;
                    if matches!(state[i], Client::Sent { .. } | Client::Acked { .. }) {
                        state[i] = Client::Done(code);
                        outstanding -= 1;
                        finished += 1;
                    }
                }
                _ => {}
            }
        }
        let now = Instant::now();
        for (i, s) in state[..next_idle].iter_mut().enumerate() {
            match *s {
                Client::Sent { attempts, next } if now >= next => {
                    if attempts > 6 {
                        *s = Client::GaveUp;
                        outstanding -= 1;
                        finished += 1;
                    } else {
                        c.send_to(&encode(i), front).unwrap();
                        *s = Client::Sent {
                            attempts: attempts + 1,
                            next: now + Duration::from_millis(200 << attempts),
                        };
                    }
                }
                Client::Acked { since } if now >= since + Duration::from_secs(30) => {
                    *s = Client::GaveUp;
                    outstanding -= 1;
                    finished += 1;
                }
                _ => {}
            }
        }
    }
    let wall = start.elapsed();

    let exec = executions.lock().unwrap();
    let mut timeouts = Vec::new();
    let mut gave_up = Vec::new();
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
            // p = 0.36^7 ≈ 8e-4 per request, so a few 5.04s in 2000 are expected. Whether
            // such a request executed upstream is unknowable, but it executed at most once.
            Client::Done(Code::GATEWAY_TIMEOUT) => timeouts.push(i),
            // The client's own 7 attempts fail alike (p ≈ 8e-4): it gives up, as RFC 7252
            // §4.2 lets it; the request still executed at most once.
            Client::GaveUp => gave_up.push(i),
            other => panic!("request {i} ended {other:?}"),
        }
    }
    // Expected about 1.6 of each in 2000; more than 20 of either means something is wrong.
    assert!(timeouts.len() <= 20, "5.04 for {timeouts:?}");
    assert!(gave_up.len() <= 20, "never answered: {gave_up:?}");
    let distinct: HashSet<u64> = exec.per_id.keys().copied().collect();
    for (id, times) in &exec.per_id {
        assert_eq!(*times, 1, "request id {id} executed {times} times");
        assert!(*id < u64::from(LOSSY_REQUESTS), "unknown id {id}");
    }
    assert_eq!(exec.counter, distinct.len() as u64);
    assert!(distinct.len() >= n - timeouts.len() - gave_up.len());
    eprintln!(
        "lossy: {n} POSTs in {wall:?}, 5.04 for {timeouts:?}, unanswered {gave_up:?}, {} executions",
        exec.counter
    );
}
