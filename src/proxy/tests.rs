//! Engine behaviours driven in virtual time, one per test. Most are regressions found by the
//! simulation in `tests/proxy_sim.rs`, reduced to the few datagrams that show them.

use std::net::SocketAddr;
use std::time::Duration;

use crate::coap::option::URI_PATH;
use crate::coap::{Code, Message, MessageBuilder, MessageType};
use crate::time::Timestamp;

use super::{Destination, Proxy, ProxyConfig, Routing, Transmit};

/// A reverse proxy to one upstream (UpstreamId 0), adjusted by `edit`.
fn proxy(edit: impl FnOnce(&mut ProxyConfig)) -> Proxy {
    let mut config = ProxyConfig {
        routing: Routing {
            upstream: Some("127.0.0.1:5683".parse().unwrap()),
            allow: Vec::new(),
            forward: false,
        },
        seed: 7,
        ..ProxyConfig::default()
    };
    edit(&mut config);
    Proxy::new(config)
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

fn sent(p: &mut Proxy) -> Vec<Transmit> {
    std::iter::from_fn(|| p.poll_transmit()).collect()
}

/// Runs every timer due up to `end`, returning what was sent.
fn run_until(p: &mut Proxy, end: Timestamp) -> Vec<Transmit> {
    while let Some(at) = p.poll_timeout().filter(|&at| at <= end) {
        p.handle_timeout(at);
    }
    sent(p)
}

fn to_upstream(out: &[Transmit]) -> Vec<&[u8]> {
    out.iter()
        .filter(|t| t.to == Destination::Upstream(0))
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
    let forwarded = sent(&mut p).remove(0).payload;
    let post = request(MessageType::Con, Code::POST, 7, b"b");
    p.handle_client_datagram(secs(0.01), b, &post);
    let first = sent(&mut p);
    assert_eq!(codes_to(&first, b), [Code::SERVICE_UNAVAILABLE]);
    // The load goes away, then B's retransmission arrives.
    p.handle_upstream_datagram(secs(0.02), 0, &piggybacked(&forwarded, Code::CONTENT));
    sent(&mut p);
    p.handle_client_datagram(secs(2.5), b, &post);
    let again = sent(&mut p);
    assert!(
        to_upstream(&again).is_empty(),
        "a rejected request went upstream"
    );
    assert_eq!(again, first, "the retransmission gets the same answer");
}
