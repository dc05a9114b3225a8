//! Regressions: each was found by the simulation in `tests/proxy_sim.rs` (or a benchmark) and is
//! reduced here to the few datagrams that show it.

use std::net::SocketAddr;
use std::time::Duration;

use crate::coap::option::{PROXY_URI, URI_PATH};
use crate::coap::{Code, Message, MessageBuilder, MessageType};
use crate::time::Timestamp;

use super::{drain, started_at, EP0};
use crate::proxy::{Destination, Proxy, ProxyConfig, RetryPolicy, Routing, Transmit};

/// A proxy whose endpoint sockets are open at time zero.
fn started(config: ProxyConfig) -> Proxy {
    started_at(config, Timestamp::ZERO)
}

/// A reverse proxy to one upstream (UpstreamId 0), adjusted by `edit`.
fn proxy(edit: impl FnOnce(&mut ProxyConfig)) -> Proxy {
    let mut config = ProxyConfig {
        routing: Routing {
            upstream: Some("127.0.0.1:5683".parse().unwrap()),
            allow: Vec::new(),
            forward: false,
        },
        seed: Some(7),
        ..ProxyConfig::default()
    };
    edit(&mut config);
    started(config)
}

fn client(n: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 2], 40_000 + n))
}

fn secs(s: f64) -> Timestamp {
    Timestamp::ZERO + Duration::from_secs_f64(s)
}

fn request(ty: MessageType, code: Code, mid: u16, token: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, code, mid, token);
    b.option(URI_PATH, b"r");
    b.finish().unwrap();
    out
}

/// A NON forward-proxy request, which a reverse-only proxy answers itself (5.05, as a NON).
fn forward_request(mid: u16) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, MessageType::Non, Code::GET, mid, b"f");
    b.option(PROXY_URI, b"coap://example.org/r");
    b.finish().unwrap();
    out
}

/// A piggybacked answer to the upstream request `req`.
fn piggybacked(req: &[u8], code: Code) -> Vec<u8> {
    let req = Message::parse(req).unwrap();
    let mut out = Vec::new();
    let b = MessageBuilder::new(
        &mut out,
        MessageType::Ack,
        code,
        req.message_id(),
        req.token(),
    );
    b.finish().unwrap();
    out
}

/// Runs every timer due up to `end`, returning what was sent.
fn run_until(p: &mut Proxy, end: Timestamp) -> Vec<Transmit> {
    while let Some(at) = p.poll_timeout().filter(|&at| at <= end) {
        p.handle_timeout(at);
    }
    drain(p)
}

fn to_upstream(out: &[Transmit]) -> Vec<&[u8]> {
    out.iter()
        .filter(|t| t.to == Destination::Upstream(EP0))
        .map(|t| &t.payload[..])
        .collect()
}

fn codes_to(out: &[Transmit], c: SocketAddr) -> Vec<Code> {
    out.iter()
        .filter(|t| t.to == Destination::Client(c))
        .map(|t| Message::parse(&t.payload).unwrap().code())
        .collect()
}

#[test]
fn proxy_made_answers_are_not_counted_as_relayed() {
    let mut p = proxy(|c| c.policy.max_retries = 0);
    p.handle_client_datagram(
        secs(0.0),
        client(1),
        &request(MessageType::Con, Code::GET, 1, b"t"),
    );
    let out = run_until(&mut p, secs(60.0));
    assert!(codes_to(&out, client(1)).contains(&Code::GATEWAY_TIMEOUT));
    let c = p.counters();
    assert_eq!((c.gateway_timeout_5_04, c.relayed_5xx), (1, 0));
}

#[test]
fn a_retransmission_after_5_03_gets_the_same_5_03_and_is_not_forwarded() {
    let mut p = proxy(|c| c.max_inflight = 1);
    let (a, b) = (client(1), client(2));
    p.handle_client_datagram(secs(0.0), a, &request(MessageType::Con, Code::GET, 1, b"a"));
    let forwarded = drain(&mut p).remove(0).payload;
    let post = request(MessageType::Con, Code::POST, 7, b"b");
    p.handle_client_datagram(secs(0.01), b, &post);
    let first = drain(&mut p);
    assert_eq!(codes_to(&first, b), [Code::SERVICE_UNAVAILABLE]);
    // The load goes away, then B's retransmission arrives.
    p.handle_upstream_datagram(secs(0.02), EP0, &piggybacked(&forwarded, Code::CONTENT));
    drain(&mut p);
    p.handle_client_datagram(secs(2.5), b, &post);
    let again = drain(&mut p);
    assert!(
        to_upstream(&again).is_empty(),
        "a rejected request went upstream"
    );
    assert_eq!(again, first, "the retransmission gets the same answer");
}

#[test]
fn message_ids_towards_a_client_count_per_client() {
    // RFC 7252 §4.4: no MID may repeat towards a client within EXCHANGE_LIFETIME, so other
    // clients' traffic must not advance (and at scale wrap) this client's numbering.
    let mut p = proxy(|_| {});
    let mut answer_mid = |c, mid| {
        p.handle_client_datagram(secs(1.0), c, &forward_request(mid));
        let out = drain(&mut p);
        Message::parse(&out[0].payload).unwrap().message_id()
    };
    let first = answer_mid(client(1), 1);
    for mid in 0..1000 {
        answer_mid(client(2), mid);
    }
    assert_eq!(answer_mid(client(1), 2), first.wrapping_add(1));
}

#[test]
fn a_separate_answer_stays_reserved_for_the_lifetime_after_it_was_sent() {
    let mut p = proxy(|c| {
        c.policy = RetryPolicy {
            timeout: Duration::from_secs(10),
            max_retries: 0,
            jitter: 0.0,
            ..RetryPolicy::DEFAULT
        }
    });
    p.handle_client_datagram(
        secs(0.0),
        client(1),
        &request(MessageType::Con, Code::GET, 1, b"t"),
    );
    let out = run_until(&mut p, secs(10.0));
    assert!(codes_to(&out, client(1)).contains(&Code::GATEWAY_TIMEOUT));
    // The 5.04 went as a CON with the proxy's MID at 10 s, retransmitted unacknowledged until
    // MAX_TRANSMIT_WAIT at most; its answer (and the client's numbering) is kept a lifetime
    // after that.
    let kept = |p: &Proxy| (p.live_exchanges(), p.answers.len(), p.clients.len());
    run_until(&mut p, secs(10.0 + 93.0));
    assert_eq!(kept(&p), (0, 1, 1), "delivery given up, answer kept");
    run_until(&mut p, secs(10.0 + 247.0));
    assert_eq!(
        kept(&p),
        (0, 1, 1),
        "still within the lifetime after sending"
    );
    run_until(&mut p, secs(10.0 + 93.0 + 247.0 + 0.2));
    assert_eq!(kept(&p), (0, 0, 0));
}

/// Every index, queue and gauge of the engine, by name, with its size.
fn traces(p: &Proxy) -> Vec<(&'static str, usize)> {
    vec![
        ("exchanges", p.exchanges.len()),
        ("timers", p.timers.len()),
        ("by_client", p.by_client.len()),
        ("by_upstream_mid", p.by_upstream_mid.len()),
        ("by_client_mid", p.by_client_mid.len()),
        ("clients", p.clients.len()),
        ("observers", p.observers.len()),
        ("answers", p.answers.len()),
        ("local_answers", p.local_answers.len()),
        ("upstream_cons", p.upstream_cons.len()),
        ("by_upstream_con", p.by_upstream_con.len()),
        ("delivering", p.delivering.len()),
        ("delivering_count", p.delivering_count),
        ("inflight", p.inflight),
        ("out", p.out.len()),
    ]
}

#[test]
fn no_trace_is_left_after_every_deadline() {
    let mut p = proxy(|_| {});
    let mut upstream = Vec::new();
    for (n, ty) in [
        (1, MessageType::Con),
        (2, MessageType::Non),
        (3, MessageType::Con),
    ] {
        p.handle_client_datagram(secs(0.0), client(n), &request(ty, Code::GET, n, b"t"));
        upstream.extend(drain(&mut p).into_iter().map(|t| t.payload));
    }
    p.handle_client_datagram(secs(0.0), client(4), &forward_request(4));
    // Client 1 is answered piggybacked, clients 2 (NON) and 3 (after an empty ACK) get
    // answers with the proxy's MIDs; client 3 acknowledges its CON answer.
    p.handle_upstream_datagram(secs(0.01), EP0, &piggybacked(&upstream[0], Code::CONTENT));
    p.handle_upstream_datagram(secs(0.01), EP0, &piggybacked(&upstream[1], Code::CONTENT));
    run_until(&mut p, secs(0.5));
    p.handle_upstream_datagram(secs(1.0), EP0, &piggybacked(&upstream[2], Code::CONTENT));
    for t in drain(&mut p) {
        let msg = Message::parse(&t.payload).unwrap();
        if let (Destination::Client(c), MessageType::Con) = (t.to, msg.msg_type()) {
            let mut ack = Vec::new();
            crate::coap::empty_ack(&mut ack, msg.message_id());
            p.handle_client_datagram(secs(1.1), c, &ack);
        }
    }
    run_until(&mut p, secs(1000.0));
    let left: Vec<_> = traces(&p).into_iter().filter(|&(_, n)| n > 0).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
