//! Observers that go away (issue 13, row 3): an observation ends when its client stops
//! acknowledging, resets a notification or is unreachable (RFC 7641 §3.6, §4.5), and the
//! upstream then learns it; notifications go as CON often enough for the proxy to notice.

use std::net::SocketAddr;
use std::time::Duration;

use crate::coap::option::{encode_uint, OBSERVE, URI_PATH};
use crate::coap::{Code, Message, MessageBuilder, MessageType};
use crate::time::Timestamp;

use super::{drain, started_at, EP0};
use crate::proxy::{Destination, Peer, Proxy, ProxyConfig, Routing, Transmit};

pub(super) fn observer() -> SocketAddr {
    "127.0.0.1:40000".parse().unwrap()
}

pub(super) fn t(ms: u64) -> Timestamp {
    Timestamp::from_nanos(1_000_000_000) + Duration::from_millis(ms)
}

pub(super) fn reverse(edit: impl FnOnce(&mut ProxyConfig)) -> Proxy {
    let mut config = ProxyConfig {
        routing: Routing {
            upstream: Some("127.0.0.1:5684".parse().unwrap()),
            allow: Vec::new(),
            forward: false,
        },
        seed: Some(1),
        ..ProxyConfig::default()
    };
    edit(&mut config);
    started_at(config, t(0))
}

/// A registration through `p` from a client that has proven its address (these tests are
/// about observers that go; `budget.rs` tests those never proven), answered by the upstream
/// (notification 1 on the ACK): returns the upstream token.
pub(super) fn register(p: &mut Proxy, from: impl Into<Peer>, token: &[u8]) -> Vec<u8> {
    let from = from.into();
    p.prove_source(t(0), from);
    let mut req = Vec::new();
    let mut b = MessageBuilder::new(&mut req, MessageType::Con, Code::GET, 1, token);
    b.option(OBSERVE, &[]);
    b.option(URI_PATH, b"slow");
    b.finish().unwrap();
    p.handle_client_datagram(t(0), from, &req);
    let sent = drain(p).remove(0);
    let up = Message::parse(&sent.payload).unwrap();
    let up_token = up.token().to_vec();
    p.handle_upstream_datagram(
        t(10),
        EP0,
        &notification(MessageType::Ack, up.message_id(), &up_token, 1),
    );
    drain(p);
    up_token
}

pub(super) fn notification(ty: MessageType, mid: u16, token: &[u8], seq: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, Code::CONTENT, mid, token);
    b.option(OBSERVE, &encode_uint(seq));
    b.payload(&[0x55; 1000]);
    b.finish().unwrap();
    out
}

/// The upstream notifies 5 times a second from `t(200)` for `secs` seconds (timers run in
/// between); returns everything the proxy sent.
fn notify_for(p: &mut Proxy, token: &[u8], secs: u64) -> Vec<Transmit> {
    let mut out = Vec::new();
    for i in 1..=secs * 5 {
        let now = t(200 * i);
        while let Some(at) = p.poll_timeout().filter(|&at| at <= now) {
            p.handle_timeout(at);
        }
        let n = notification(MessageType::Non, i as u16, token, 1 + i as u32);
        p.handle_upstream_datagram(now, EP0, &n);
        out.extend(drain(p));
    }
    out
}

fn to_client(out: &[Transmit], c: impl Into<Peer>) -> Vec<Message<'_>> {
    let c = c.into();
    (out.iter())
        .filter(|t| t.to == Destination::Client(c))
        .map(|t| Message::parse(&t.payload).unwrap())
        .collect()
}

fn rsts_upstream(out: &[Transmit]) -> usize {
    (out.iter())
        .filter(|t| t.to == Destination::Upstream(EP0))
        .filter(|t| Message::parse(&t.payload).unwrap().msg_type() == MessageType::Rst)
        .count()
}

#[test]
fn an_observer_that_never_acknowledges_gets_19_nons_and_one_con_then_the_upstream_an_rst() {
    let mut p = reverse(|_| {});
    let token = register(&mut p, observer(), b"ob");
    assert_eq!(p.counters().observe.observations, 1);
    // 120 s of 5 notifications a second (the finding: relayed for ever).
    let out = notify_for(&mut p, &token, 120);
    let sent = to_client(&out, observer());
    let types: Vec<MessageType> = sent.iter().map(|m| m.msg_type()).collect();
    let mut want = vec![MessageType::Non; 19];
    want.extend([MessageType::Con; 5]);
    assert_eq!(types, want, "19 NONs, one CON and its 4 retransmissions");
    let c = p.counters();
    assert_eq!((c.observe.observations, c.observe.observers_lost), (0, 1));
    assert!(
        rsts_upstream(&out) >= 1,
        "the upstream's next notification gets RST"
    );
    // The retransmissions carry the newest notification (RFC 7641 §4.5.2).
    assert_ne!(sent[19].message_id(), sent[23].message_id());
}

#[test]
fn an_observer_that_acknowledges_gets_every_20th_notification_as_a_con_and_stays() {
    let mut p = reverse(|_| {});
    let token = register(&mut p, observer(), b"ob");
    let mut types = Vec::new();
    for i in 1..=100u64 {
        let n = notification(MessageType::Non, i as u16, &token, 1 + i as u32);
        p.handle_upstream_datagram(t(200 * i), EP0, &n);
        for tx in drain(&mut p) {
            let m = Message::parse(&tx.payload).unwrap();
            types.push(m.msg_type());
            if m.msg_type() == MessageType::Con {
                let mut ack = Vec::new();
                crate::coap::empty_ack(&mut ack, m.message_id());
                p.handle_client_datagram(t(200 * i + 50), observer(), &ack);
            }
        }
    }
    let cons: Vec<usize> = (types.iter().enumerate())
        .filter(|(_, &ty)| ty == MessageType::Con)
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(cons, [20, 40, 60, 80, 100]);
    assert_eq!(p.counters().observe.observations, 1);
}

#[test]
fn a_notification_goes_as_a_con_at_least_every_24_hours() {
    let mut p = reverse(|c| c.observe_con_every = u32::MAX);
    // A client whose proof of address never lapses (an in-process one), so that no CON asks
    // for one: the 24 h rule alone is at work.
    let observer = crate::proxy::Peer::Local(crate::proxy::LocalClient::new(1));
    let token = register(&mut p, observer, b"ob");
    let hour = 3_600_000;
    let mut types = Vec::new();
    // One notification every 50 s (within Max-Age + margin) for a little over a day.
    for i in 1..=(25 * hour / 50_000) {
        let n = notification(MessageType::Non, i as u16, &token, 1 + i as u32);
        p.handle_upstream_datagram(t(50_000 * i), EP0, &n);
        types.extend(
            to_client(&drain(&mut p), observer)
                .iter()
                .map(|m| m.msg_type()),
        );
    }
    let first_con = types.iter().position(|&ty| ty == MessageType::Con);
    // Notification i comes at 50 s x i, and the registration a little after 0 s: the first
    // one a full day after it is number 1729.
    assert_eq!(first_con, Some(24 * 3600 / 50), "the first after 24 h");
}

#[test]
fn a_client_rst_to_a_non_notification_ends_the_observation_and_the_upstream_sees_it() {
    let mut p = reverse(|_| {});
    let token = register(&mut p, observer(), b"ob");
    p.handle_upstream_datagram(t(100), EP0, &notification(MessageType::Non, 7, &token, 2));
    let out = drain(&mut p);
    let mid = to_client(&out, observer())[0].message_id();
    let mut rst = Vec::new();
    crate::coap::rst(&mut rst, mid);
    p.handle_client_datagram(t(150), observer(), &rst);
    let c = p.counters();
    assert_eq!((c.observe.observations, c.observe.observers_lost), (0, 1));
    let out = notify_for(&mut p, &token, 1);
    assert!(to_client(&out, observer()).is_empty());
    assert_eq!(rsts_upstream(&out), 5, "each later notification is reset");
}

#[test]
fn icmp_unreachable_from_a_client_ends_its_observations_only() {
    let mut p = reverse(|_| {});
    let other: SocketAddr = "127.0.0.1:40001".parse().unwrap();
    let token = register(&mut p, observer(), b"ob");
    let kept = register(&mut p, other, b"ok");
    p.handle_client_unreachable(t(100), observer());
    let c = p.counters();
    assert_eq!((c.observe.observations, c.observe.observers_lost), (1, 1));
    let out = notify_for(&mut p, &token, 1);
    assert!(to_client(&out, observer()).is_empty());
    assert_eq!(rsts_upstream(&out), 5);
    p.handle_upstream_datagram(t(2000), EP0, &notification(MessageType::Non, 99, &kept, 50));
    assert_eq!(
        to_client(&drain(&mut p), other).len(),
        1,
        "the other observer is served"
    );
}

#[test]
fn observe_con_every_zero_is_refused_naming_the_flag() {
    let mut c = ProxyConfig::default();
    c.routing.upstream = Some("127.0.0.1:5683".parse().unwrap());
    c.observe_con_every = 0;
    assert!(c
        .validate()
        .unwrap_err()
        .0
        .starts_with("--observe-con-every"));
}
