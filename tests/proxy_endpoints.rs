//! The proxy's upstream endpoints over real sockets, with default flags: many Message ID
//! spaces' worth of requests through one upstream without a 5.03 or a reused (source, MID),
//! and a flood from one source that leaves the other clients served.

mod common;

// The load generator is benchmark support, shared with tests, not library API; each user
// takes part of it.
#[allow(dead_code, unused_imports)]
#[path = "../benches/loadgen/mod.rs"]
mod loadgen;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use backoffd::coap::option::URI_PATH;
use backoffd::coap::{Code, Message, MessageBuilder, MessageType};
use common::exposition::scrape;
use common::upstream::{Script, Upstream};
use common::Proc;
use loadgen::{FastUpstream, LoadSpec, Offered};

/// Starts `backoffd proxy` in front of `upstream` with default flags (and metrics).
fn default_proxy(upstream: SocketAddr) -> (Proc, SocketAddr, SocketAddr) {
    common::daemon::proxy_with_metrics(upstream, &[])
}

/// The two load tests of this file run one at a time: on two cores, the 200,000 requests of
/// one took the CPU that the other's polite clients and proxy measure their service with, and
/// a polite request once waited past its client's 2 s.
static ONE_LOAD_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn over_200_000_requests_through_one_upstream_need_no_5_03_and_reuse_no_message_id() {
    let _alone = ONE_LOAD_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // One socket's Message IDs last 247 s by default (RFC 7252 §4.4): 65,536 requests. This
    // sends more than three times that, as fast as the proxy takes them.
    const REQUESTS: u64 = 210_000;
    let mut upstream = FastUpstream::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    upstream.watch_message_ids();
    let (_daemon, proxy, metrics) = default_proxy(upstream.local_addr().unwrap());
    let (mut answered, mut refused, mut lost) = (0, 0, 0);
    let start = Instant::now();
    while upstream.answered < REQUESTS {
        assert!(start.elapsed() < Duration::from_secs(150), "too slow");
        let spec = LoadSpec {
            target: proxy,
            confirmable: true,
            options: vec![(URI_PATH, b"endpoints".to_vec())],
            offered: Offered::Window(64),
            warmup: Duration::ZERO,
            duration: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
            burst: 16,
        };
        let r = loadgen::run(&spec, Some(&mut upstream)).unwrap();
        (answered, refused, lost) = (answered + r.answered, refused + r.errors, lost + r.lost);
    }
    let mids = upstream.mid_counts();
    let doc = scrape(metrics);
    let endpoints = doc.get(&format!(
        "backoffd_coap_upstream_endpoints{{upstream=\"{}\"}}",
        upstream.local_addr().unwrap()
    ));
    eprintln!(
        "{} requests upstream in {:.1} s: {answered} answered 2.05 at the client, {refused} \
         other answers, {lost} unanswered; upstream saw {} sources, {} MIDs reused with a new \
         token, {} repeated with the same; {endpoints} endpoints open",
        upstream.answered,
        start.elapsed().as_secs_f64(),
        mids.sources,
        mids.reused,
        mids.repeated
    );
    assert_eq!(
        refused, 0,
        "answers other than 2.05 (a 5.03 means no Message ID)"
    );
    assert_eq!(
        doc.get("backoffd_coap_answers_total{code=\"5.03\"}"),
        0.0,
        "5.03 from the proxy"
    );
    assert_eq!(mids.reused, 0, "a (source, MID) reused within its lifetime");
    // At least ceil(210000 / 65536) = 4 sources carried the requests, plus the spare open.
    assert!(mids.sources >= 4, "{} sources", mids.sources);
    assert!(endpoints >= 5.0, "{endpoints} endpoints open");
    assert!(
        lost * 100 <= answered,
        "{lost} unanswered of {answered}: more than datagram drops on a busy machine explain"
    );
}

/// An upstream that answers every request with an empty 2.05 after `delay` (CON:
/// piggybacked ACK; NON: NON), on its own thread until dropped.
fn slow_upstream(delay: Duration) -> Upstream {
    Script::new().delay(delay).start()
}

fn get(ty: MessageType, mid: u16, token: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, Code::GET, mid, token);
    b.option(URI_PATH, b"sensor");
    b.finish().unwrap();
    out
}

/// Where the polite clients are in the test: the flood still on, over, or time to stop.
/// A request is counted in the phase it was sent in.
#[derive(Default)]
struct Phase {
    flood_over: AtomicBool,
    stop: AtomicBool,
}

/// What one polite client got: outcomes by code (`None`: unanswered) of the requests it sent
/// during and after the flood, and all round trips.
#[derive(Default)]
struct PoliteRecord {
    during: HashMap<Option<Code>, u32>,
    after: HashMap<Option<Code>, u32>,
    round_trips: Vec<Duration>,
}

/// A well-behaved client (one request at a time, CON, retransmitted as RFC 7252 §4.2 says
/// but faster, and a separate response awaited after an empty ACK, §5.2.2) until told to
/// stop; `served_after` counts its 2.05 answers to requests sent after the flood.
fn polite_client(
    proxy: SocketAddr,
    phase: Arc<Phase>,
    served_after: Arc<AtomicU32>,
) -> PoliteRecord {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(250)))
        .unwrap();
    let mut record = PoliteRecord::default();
    let mut buf = [0u8; 1500];
    let mut mid = 0u16;
    while !phase.stop.load(Ordering::Relaxed) {
        mid = mid.wrapping_add(1);
        let after_flood = phase.flood_over.load(Ordering::Relaxed);
        let sent = Instant::now();
        let answer = polite_request(&socket, proxy, mid, &mut buf);
        let outcomes = if after_flood {
            &mut record.after
        } else {
            &mut record.during
        };
        *outcomes.entry(answer).or_insert(0) += 1;
        if after_flood && answer == Some(Code::CONTENT) {
            served_after.fetch_add(1, Ordering::Relaxed);
        }
        record.round_trips.push(sent.elapsed());
        thread::sleep(Duration::from_millis(2));
    }
    record
}

/// One CON GET through `proxy`, tried up to 8 times 250 ms apart; the answer's code.
fn polite_request(socket: &UdpSocket, proxy: SocketAddr, mid: u16, buf: &mut [u8]) -> Option<Code> {
    let request = get(MessageType::Con, mid, &mid.to_be_bytes());
    let mut acked = false;
    for _ in 0..8 {
        if !acked {
            socket.send_to(&request, proxy).unwrap();
        }
        while let Ok(n) = socket.recv(buf) {
            let Ok(m) = Message::parse(&buf[..n]) else {
                continue;
            };
            let ty = m.msg_type();
            if ty == MessageType::Ack && m.message_id() == mid && m.code() == Code::EMPTY {
                acked = true; // The answer comes separately; stop retransmitting.
            } else if ty == MessageType::Ack && m.message_id() == mid
                || ty != MessageType::Ack && m.token() == mid.to_be_bytes()
            {
                if ty == MessageType::Con {
                    let mut ack = Vec::new();
                    backoffd::coap::empty_ack(&mut ack, m.message_id());
                    socket.send_to(&ack, proxy).unwrap();
                }
                return Some(m.code());
            }
        }
    }
    None
}

#[test]
fn a_flood_from_one_source_leaves_other_clients_served() {
    let _alone = ONE_LOAD_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // The flood of the issue: 70,000 tiny NON requests in 1.6 s from one source. Without an
    // endpoint pool it used up the upstream's Message IDs for 247 s; with it, and with the
    // per-client cap, the source gets what its share allows and everyone else is served.
    // What is checked is counted, not timed: on a loaded machine the kernel may drop some
    // polite datagrams while the flood fills the socket's buffer, so the polite clients go on
    // after the flood until each has been served SERVED_AFTER times.
    const SERVED_AFTER: u32 = 20;
    let upstream = slow_upstream(Duration::from_millis(20));
    let (_daemon, proxy, metrics) = default_proxy(upstream.addr);
    let phase = Arc::new(Phase::default());
    let others: Vec<_> = (0..4)
        .map(|_| {
            let (phase, served) = (phase.clone(), Arc::new(AtomicU32::new(0)));
            let counter = served.clone();
            (
                served,
                thread::spawn(move || polite_client(proxy, phase, counter)),
            )
        })
        .collect();

    let mut flooder = Flooder::new(proxy);
    let flood_time = flooder.flood();
    phase.flood_over.store(true, Ordering::Relaxed);
    // Nothing the flood did may lock the others out afterwards.
    let deadline = Instant::now() + Duration::from_secs(30);
    let min_served = || {
        let served = others.iter().map(|(n, _)| n.load(Ordering::Relaxed));
        served.min().unwrap_or(0)
    };
    while min_served() < SERVED_AFTER && Instant::now() < deadline {
        flooder.drain();
        thread::sleep(Duration::from_millis(5));
    }
    let served_after_least = min_served();
    phase.stop.store(true, Ordering::Relaxed);
    let polite = join_polite_clients(others.into_iter().map(|(_, h)| h));
    let at = |q: f64| polite.round_trips[((polite.round_trips.len() - 1) as f64 * q) as usize];
    flooder.drain();
    drop(upstream);
    let doc = scrape(metrics);
    let refused = |cause: &str| {
        doc.get(&format!(
            "backoffd_coap_refusals_total{{cause=\"{cause}\"}}"
        ))
    };
    eprintln!(
        "flood: {FLOOD} NON in {:.2} s from one source; its answers {:?}; other clients' \
         requests during it {:?}, after it {:?}, round trip p50 {:?} p99 {:?} max {:?}; 5.03 \
         by cause: client {}, endpoints {}, inflight {}",
        flood_time.as_secs_f64(),
        flooder.answers,
        polite.during,
        polite.after,
        at(0.5),
        at(0.99),
        at(1.0),
        refused("client"),
        refused("endpoints"),
        refused("inflight"),
    );
    let answered_other_than = |outcomes: &HashMap<Option<Code>, u32>, code: Option<Code>| {
        outcomes
            .iter()
            .filter(|(c, _)| c.is_some() && **c != code)
            .map(|(_, n)| n)
            .sum::<u32>()
    };
    assert_eq!(
        answered_other_than(&polite.during, Some(Code::CONTENT)),
        0,
        "another client was refused during the flood: {:?}",
        polite.during
    );
    assert!(
        polite.during.contains_key(&Some(Code::CONTENT)),
        "no other client was served during the flood: {:?}",
        polite.during
    );
    assert!(
        served_after_least >= SERVED_AFTER,
        "a client was served {served_after_least} times in 30 s after the flood: {:?}",
        polite.after
    );
    let after_total: u32 = polite.after.values().sum();
    assert_eq!(
        polite.after.get(&Some(Code::CONTENT)).copied(),
        Some(after_total),
        "every other client's request after the flood answered 2.05: {:?}",
        polite.after
    );
    assert_eq!(refused("endpoints"), 0.0, "Message IDs ran out");
    assert!(
        refused("client") > 0.0,
        "the flood never met its per-client cap (upstream not slow enough?)"
    );
}

/// The requests of the flood.
const FLOOD: u32 = 70_000;

/// The flooding source: one non-blocking socket and the answers it got, by code.
struct Flooder {
    socket: UdpSocket,
    proxy: SocketAddr,
    answers: HashMap<Code, u32>,
    buf: [u8; 1500],
}

impl Flooder {
    fn new(proxy: SocketAddr) -> Flooder {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        Flooder {
            socket,
            proxy,
            answers: HashMap::new(),
            buf: [0u8; 1500],
        }
    }

    /// Counts every answer already received.
    fn drain(&mut self) {
        while let Ok(n) = self.socket.recv(&mut self.buf) {
            if let Ok(m) = Message::parse(&self.buf[..n]) {
                *self.answers.entry(m.code()).or_insert(0) += 1;
            }
        }
    }

    /// Sends [`FLOOD`] NON requests, 100 per 2.3 ms (70,000 in 1.6 s); returns how long it took.
    fn flood(&mut self) -> Duration {
        let start = Instant::now();
        for i in 0..FLOOD {
            if i % 100 == 0 {
                let at = start + Duration::from_micros(u64::from(i / 100) * 2_286);
                while Instant::now() < at {
                    self.drain();
                }
            }
            let request = get(MessageType::Non, i as u16, &i.to_be_bytes());
            let _ = self.socket.send_to(&request, self.proxy);
        }
        start.elapsed()
    }
}

/// Joins the polite clients and adds up what they saw (round trips sorted).
fn join_polite_clients(
    others: impl Iterator<Item = thread::JoinHandle<PoliteRecord>>,
) -> PoliteRecord {
    let mut sum = PoliteRecord::default();
    for h in others {
        let one = h.join().unwrap();
        for (code, n) in one.during {
            *sum.during.entry(code).or_insert(0) += n;
        }
        for (code, n) in one.after {
            *sum.after.entry(code).or_insert(0) += n;
        }
        sum.round_trips.extend(one.round_trips);
    }
    sum.round_trips.sort();
    sum
}
