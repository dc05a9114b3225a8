//! Throughput at pure defaults (issue 24): `backoffd proxy --listen 127.0.0.1:0 --upstream UP`
//! with no other flag serves one busy client completely. The client keeps [`IN_FLIGHT`] CON
//! POSTs of 16 B outstanding from one socket, each echoed by the upstream (an answer about
//! the size of its request, within what an unproven address may be sent), for [`REQUESTS`]
//! requests or [`RUN_FOR`], whichever comes first. Every request must be answered 2.04 (or
//! 2.05) with its payload byte for byte, without a retransmission (the client never makes
//! one: a request not answered within [`TIMEOUT`] is a failure) and without a 5.03. The rate
//! is printed, never asserted (the machine is small and shared).

mod common;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use backoffd::coap::option::URI_PATH;
use backoffd::coap::{empty_ack, rst, Code, Message, MessageBuilder, MessageType};
use common::daemon;
use common::upstream::{Script, Upstream};

/// Requests the client keeps outstanding.
const IN_FLIGHT: usize = 32;
/// Requests at most (fewer than 65,536: no Message ID of the client's comes twice).
const REQUESTS: u64 = 60_000;
/// Time to send requests at most.
const RUN_FOR: Duration = Duration::from_secs(5);
/// A request not answered this long after it was sent counts as timed out: a client would
/// have retransmitted it (RFC 7252 §4.2: after 2-3 s).
const TIMEOUT: Duration = Duration::from_secs(2);
/// Each request's payload.
const PAYLOAD: usize = 16;

/// A CoAP server on a thread that answers every request at once with its own payload: 2.04
/// Changed, piggybacked on the ACK of a CON, a NON to a NON.
fn echo_upstream() -> Upstream {
    Script::new().code(Code::CHANGED).echo().start()
}

/// Request `seq`'s payload: its sequence number, and its bitwise complement.
fn payload(seq: u64) -> [u8; PAYLOAD] {
    let mut p = [0u8; PAYLOAD];
    p[..8].copy_from_slice(&seq.to_be_bytes());
    p[8..].copy_from_slice(&(!seq).to_be_bytes());
    p
}

/// Request `seq`: a CON POST to /echo, Message ID and 8-byte token from `seq`.
fn post(seq: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(
        &mut out,
        MessageType::Con,
        Code::POST,
        seq as u16,
        &seq.to_be_bytes(),
    );
    b.option(URI_PATH, b"echo");
    b.payload(&payload(seq));
    b.finish().unwrap();
    out
}

/// What happened to the client's requests.
#[derive(Debug, Default)]
struct Outcome {
    sent: u64,
    /// Answered 2.04 or 2.05 with the request's payload.
    answered: u64,
    /// Answered 5.03.
    unavailable: u64,
    /// Answered otherwise: another code, or another payload.
    wrong: Vec<(u64, String)>,
    /// Not answered within [`TIMEOUT`].
    timeouts: u64,
    /// Answers that came separately (an empty ACK first).
    separate: u64,
    /// Answers to no outstanding request (a second answer, or one after the timeout).
    strays: u64,
    /// CoAP pings from the proxy (each answered with an RST).
    pings: u64,
    seconds: f64,
}

/// The client: one socket, [`IN_FLIGHT`] requests outstanding, no retransmission.
fn run(proxy: SocketAddr) -> Outcome {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(proxy).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    let mut outcome = Outcome::default();
    // Outstanding requests by sequence number: when each was sent.
    let mut waiting: HashMap<u64, Instant> = HashMap::new();
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    let mut last_expiry = start;
    loop {
        let sending = outcome.sent < REQUESTS && start.elapsed() < RUN_FOR;
        if !sending && waiting.is_empty() {
            break;
        }
        while sending && waiting.len() < IN_FLIGHT {
            let seq = outcome.sent;
            socket.send(&post(seq)).unwrap();
            waiting.insert(seq, Instant::now());
            outcome.sent += 1;
        }
        // One datagram a turn, so that each answer makes room for a request at once.
        if let Ok(n) = socket.recv(&mut buf) {
            take(&mut outcome, &mut waiting, &socket, &buf[..n]);
        }
        let now = Instant::now();
        if now.duration_since(last_expiry) >= Duration::from_millis(100) {
            last_expiry = now;
            let before = waiting.len();
            waiting.retain(|_, sent| now.duration_since(*sent) < TIMEOUT);
            outcome.timeouts += (before - waiting.len()) as u64;
        }
    }
    outcome.seconds = start.elapsed().as_secs_f64();
    outcome
}

/// One datagram from the proxy: an answer settles its request; a CON is acknowledged, a
/// CoAP ping (an empty CON) reset, as RFC 7252 §4.2-4.3 say.
fn take(o: &mut Outcome, waiting: &mut HashMap<u64, Instant>, socket: &UdpSocket, datagram: &[u8]) {
    let Ok(m) = Message::parse(datagram) else {
        o.wrong.push((u64::MAX, "an unparsable datagram".into()));
        return;
    };
    let mut reply = Vec::new();
    match (m.msg_type(), m.code()) {
        (MessageType::Ack, Code::EMPTY) => {
            o.separate += 1;
            return;
        }
        (MessageType::Con, Code::EMPTY) => {
            o.pings += 1;
            rst(&mut reply, m.message_id());
        }
        (MessageType::Con, _) => empty_ack(&mut reply, m.message_id()),
        _ => {}
    }
    if !reply.is_empty() {
        socket.send(&reply).unwrap();
    }
    let Some(seq) = m.token().try_into().ok().map(u64::from_be_bytes) else {
        return;
    };
    if waiting.remove(&seq).is_none() {
        o.strays += 1;
        return;
    }
    match m.code() {
        Code::CHANGED | Code::CONTENT if m.payload() == payload(seq) => o.answered += 1,
        Code::SERVICE_UNAVAILABLE => o.unavailable += 1,
        code => o.wrong.push((
            seq,
            format!("{code} with {} B of payload", m.payload().len()),
        )),
    }
}

#[test]
fn one_busy_client_is_served_completely_at_pure_defaults() {
    let upstream = echo_upstream();
    let up = upstream.addr.to_string();
    let daemon = daemon::proxy("info", &["--listen", "127.0.0.1:0", "--upstream", &up]);
    let proxy = daemon.coap;
    let o = run(proxy);
    drop(upstream);
    eprintln!(
        "pure defaults: {} of {} CON POSTs ({PAYLOAD} B, {IN_FLIGHT} in flight) answered with \
         their payload in {:.2} s: {:.0} requests/s; {} timeouts, {} x 5.03, {} wrong, {} \
         separate, {} strays, {} pings",
        o.answered,
        o.sent,
        o.seconds,
        o.answered as f64 / o.seconds,
        o.timeouts,
        o.unavailable,
        o.wrong.len(),
        o.separate,
        o.strays,
        o.pings,
    );
    assert_eq!(o.timeouts, 0, "requests unanswered within {TIMEOUT:?}");
    assert_eq!(o.unavailable, 0, "5.03s");
    let first = &o.wrong[..o.wrong.len().min(10)];
    assert!(
        o.wrong.is_empty(),
        "{} wrong answers, first {first:?}",
        o.wrong.len()
    );
    assert_eq!(o.answered, o.sent, "{o:?}");
    assert!(o.sent >= IN_FLIGHT as u64, "{o:?}");
}
