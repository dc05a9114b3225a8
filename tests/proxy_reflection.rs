//! The proxy as a reflector (issue 13, row 3), against the real binary over loopback: an
//! observation ends when its client's socket is closed (ICMP port unreachable, read from the
//! client socket's error queue) or when the client resets a notification, and the upstream
//! then sees the deregistration (an RST to its next notification, RFC 7641 §3.6); one
//! source's answers stay within its send budget.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use backoffd::coap::option::{encode_uint, OBSERVE, URI_PATH};
use backoffd::coap::{rst, Code, Message, MessageBuilder, MessageType};
use common::exposition::scrape;

/// What the observable upstream saw.
#[derive(Default)]
struct Seen {
    /// RSTs from the proxy (to notifications of a cancelled observation).
    rsts: AtomicUsize,
    /// Notifications sent.
    notified: AtomicUsize,
}

/// An upstream with one observable resource: it answers a registration with Observe and
/// then sends a NON notification every 20 ms (50 a second) until told to stop.
fn observable_upstream(stop: Arc<AtomicBool>) -> (SocketAddr, Arc<Seen>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let addr = socket.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let seen2 = Arc::clone(&seen);
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let (mut observers, mut seq, mut mid) = (Vec::new(), 2u32, 100u16);
        let mut last = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            if let Ok((n, from)) = socket.recv_from(&mut buf) {
                let Ok(m) = Message::parse(&buf[..n]) else {
                    continue;
                };
                match m.msg_type() {
                    // The observation is cancelled (RFC 7641 §3.6); one observer per test.
                    MessageType::Rst => {
                        seen2.rsts.fetch_add(1, Ordering::SeqCst);
                        observers.clear();
                    }
                    MessageType::Con if m.code().is_request() => {
                        let out = answer(MessageType::Ack, m.message_id(), m.token(), 1);
                        socket.send_to(&out, from).unwrap();
                        if m.option(OBSERVE) == Some(&[][..]) {
                            observers.push((from, m.token().to_vec()));
                        }
                    }
                    _ => {}
                }
            }
            if last.elapsed() < Duration::from_millis(20) {
                continue;
            }
            last = Instant::now();
            for (to, token) in &observers {
                let out = answer(MessageType::Non, mid, token, seq);
                socket.send_to(&out, to).unwrap();
                seen2.notified.fetch_add(1, Ordering::SeqCst);
                (seq, mid) = (seq + 1, mid.wrapping_add(1));
            }
        }
    });
    (addr, seen)
}

fn answer(ty: MessageType, mid: u16, token: &[u8], seq: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, Code::CONTENT, mid, token);
    b.option(OBSERVE, &encode_uint(seq));
    b.payload(&[0x55; 1000]);
    b.finish().unwrap();
    out
}

fn register(c: &UdpSocket, proxy: SocketAddr) {
    let mut req = Vec::new();
    let mut b = MessageBuilder::new(&mut req, MessageType::Con, Code::GET, 1, b"obs");
    b.option(OBSERVE, &[]);
    b.option(URI_PATH, b"temp");
    b.finish().unwrap();
    c.send_to(&req, proxy).unwrap();
}

/// The next datagram from the proxy.
fn next(c: &UdpSocket) -> (MessageType, u16) {
    let mut buf = [0u8; 2048];
    let n = c.recv(&mut buf).expect("a datagram from the proxy");
    let m = Message::parse(&buf[..n]).unwrap();
    (m.msg_type(), m.message_id())
}

fn client() -> UdpSocket {
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c
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
    let (up, seen) = observable_upstream(Arc::clone(&stop));
    let (_daemon, proxy, metrics) = common::proxy_with_metrics(up, &[]);
    let c = client();
    register(&c, proxy);
    assert_eq!(next(&c).0, MessageType::Ack, "registered");
    for _ in 0..5 {
        next(&c);
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

#[test]
fn a_client_that_resets_a_notification_ends_its_observation_and_the_upstream_sees_it() {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, seen) = observable_upstream(Arc::clone(&stop));
    let (_daemon, proxy, metrics) = common::proxy_with_metrics(up, &[]);
    let c = client();
    register(&c, proxy);
    assert_eq!(next(&c).0, MessageType::Ack, "registered");
    let (ty, mid) = next(&c);
    assert_eq!(ty, MessageType::Non);
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
    stop.store(true, Ordering::SeqCst);
}

#[test]
fn a_flooded_source_is_sent_no_more_than_its_budget() {
    // The finding's 12-byte request, each answered with ~1 KiB: 2000 of them from one
    // source in well under a second.
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = observable_upstream(Arc::clone(&stop));
    let extra = ["--max-inflight-per-client", "100000"];
    let (_daemon, proxy, metrics) = common::proxy_with_metrics(up, &extra);
    let c = client();
    c.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let (mut bytes_in, mut bytes_out) = (0usize, 0usize);
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    for mid in 0..2000u16 {
        let mut req = Vec::new();
        let mut b = MessageBuilder::new(&mut req, MessageType::Con, Code::GET, mid, b"abcd");
        b.option(URI_PATH, b"big");
        b.finish().unwrap();
        bytes_in += c.send_to(&req, proxy).unwrap();
        if mid % 32 == 31 {
            // Read what came so far, so the client socket never overflows.
            while let Ok(n) = c.recv(&mut buf) {
                bytes_out += n;
                if start.elapsed() > Duration::from_secs(60) {
                    break;
                }
                c.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
            }
        }
    }
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    while let Ok(n) = c.recv(&mut buf) {
        bytes_out += n;
    }
    let secs = start.elapsed().as_secs_f64();
    let dropped = scrape(metrics).get("backoffd_coap_over_budget_dropped_total");
    eprintln!(
        "one source: {bytes_in} bytes in, {bytes_out} bytes out in {secs:.2} s \
         ({:.1} out per byte in), {dropped} datagrams dropped over budget",
        bytes_out as f64 / bytes_in as f64
    );
    let allowed = 256.0 * 1024.0 + 64.0 * 1024.0 * secs;
    assert!((bytes_out as f64) <= allowed, "{bytes_out} > {allowed}");
    assert!(dropped > 0.0);
    stop.store(true, Ordering::SeqCst);
}

#[test]
fn with_validate_sources_a_client_that_echoes_is_served_over_loopback() {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = observable_upstream(Arc::clone(&stop));
    let (_daemon, proxy, _) = common::proxy_with_metrics(up, &["--validate-sources"]);
    let c = client();
    let get = |mid, echo: Option<&[u8]>| {
        let mut req = Vec::new();
        let mut b = MessageBuilder::new(&mut req, MessageType::Con, Code::GET, mid, b"abcd");
        b.option(URI_PATH, b"big");
        if let Some(e) = echo {
            b.option(backoffd::coap::option::ECHO, e);
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
    let echo = m.option(backoffd::coap::option::ECHO).unwrap().to_vec();
    c.send_to(&get(2, Some(&echo)), proxy).unwrap();
    let n = c.recv(&mut buf).unwrap();
    let m = Message::parse(&buf[..n]).unwrap();
    assert_eq!((m.code(), m.payload().len()), (Code::CONTENT, 1000));
    stop.store(true, Ordering::SeqCst);
}
