//! The per-source send budget through the engine (issue 13, row 3): whatever requests cost
//! it, the proxy sends one source no more than its budget.

use std::net::SocketAddr;

use crate::coap::option::URI_PATH;
use crate::coap::{Code, Message, MessageBuilder, MessageType};

use super::drain;
use super::observers::{notification, register, reverse, t};
use super::EP0;
use crate::proxy::{ClientBudget, Destination};

fn victim() -> SocketAddr {
    "192.0.2.7:5683".parse().unwrap()
}

/// A 12-byte CON GET (the finding's request), MID `mid`.
fn small_get(mid: u16) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, MessageType::Con, Code::GET, mid, b"abcd");
    b.option(URI_PATH, b"big");
    b.finish().unwrap();
    out
}

/// A 1,000-byte piggybacked answer to the upstream request `req`.
fn big_answer(req: &[u8]) -> Vec<u8> {
    let req = Message::parse(req).unwrap();
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(
        &mut out,
        MessageType::Ack,
        Code::CONTENT,
        req.message_id(),
        req.token(),
    );
    b.payload(&[0x55; 1000]);
    b.finish().unwrap();
    out
}

#[test]
fn a_flooded_victim_gets_its_burst_then_its_rate_and_the_rest_is_counted() {
    let mut p = reverse(|c| c.max_inflight_per_client = 100_000);
    let (mut bytes_in, mut bytes_out) = (0u64, 0u64);
    // 100 spoofed requests every 100 ms for 10 s, each answered by the upstream at once.
    for step in 0..100u64 {
        for i in 0..100u16 {
            let req = small_get(step as u16 * 100 + i);
            bytes_in += req.len() as u64;
            p.handle_client_datagram(t(step * 100), victim(), &req);
            for tx in drain(&mut p) {
                if tx.to == Destination::Upstream(EP0) {
                    p.handle_upstream_datagram(t(step * 100), EP0, &big_answer(&tx.payload));
                }
            }
            for tx in drain(&mut p) {
                assert_eq!(tx.to, Destination::Client(victim()));
                bytes_out += tx.payload.len() as u64;
            }
        }
    }
    let b = ClientBudget::DEFAULT;
    // The last requests come at 9.9 s: the burst and 9.9 s of the rate.
    let allowed = u64::from(b.burst_bytes) + 99 * u64::from(b.bytes_per_sec) / 10;
    assert!(bytes_out <= allowed, "{bytes_out} > {allowed}");
    assert!(
        bytes_out >= allowed - 2048,
        "the budget is used: {bytes_out}"
    );
    let c = p.counters();
    assert!(c.over_budget_dropped > 0 && c.over_budget_dropped_bytes > 0);
    assert_eq!(bytes_in, 10_000 * 12);
}

#[test]
fn notifications_count_against_the_observers_budget() {
    let mut p = reverse(|c| {
        c.client_budget.burst_datagrams = 10;
        c.client_budget.datagrams_per_sec = 1;
        c.observe_con_every = 1000;
    });
    let token = register(&mut p, victim(), b"ob");
    // 50 notifications within one second: the ACK of the registration took one datagram.
    let mut sent = 0;
    for i in 1..=50u16 {
        let n = notification(MessageType::Non, i, &token, 1 + u32::from(i));
        p.handle_upstream_datagram(t(100 + u64::from(i)), EP0, &n);
        sent += drain(&mut p).len();
    }
    assert_eq!(sent, 9);
    assert_eq!(p.counters().over_budget_dropped, 41);
}

/// `small_get` with an Echo option.
fn get_with_echo(mid: u16, echo: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, MessageType::Con, Code::GET, mid, b"abcd");
    b.option(URI_PATH, b"big");
    b.option(crate::coap::option::ECHO, echo);
    b.finish().unwrap();
    out
}

#[test]
fn with_validate_sources_a_client_that_echoes_is_validated_and_served() {
    let mut p = reverse(|c| c.validate_sources = true);
    p.handle_client_datagram(t(0), victim(), &small_get(1));
    let out = drain(&mut p);
    assert_eq!(out.len(), 1, "nothing goes upstream");
    let m = Message::parse(&out[0].payload).unwrap();
    assert_eq!(m.code(), Code::UNAUTHORIZED);
    let echo = m.option(crate::coap::option::ECHO).unwrap().to_vec();
    p.handle_client_datagram(t(500), victim(), &get_with_echo(2, &echo));
    let up = drain(&mut p).remove(0);
    assert_eq!(up.to, Destination::Upstream(EP0));
    p.handle_upstream_datagram(t(510), EP0, &big_answer(&up.payload));
    let out = drain(&mut p);
    let m = Message::parse(&out[0].payload).unwrap();
    assert_eq!((m.code(), m.payload().len()), (Code::CONTENT, 1000));
    // Validated for a while: the next request needs no Echo.
    p.handle_client_datagram(t(1000), victim(), &small_get(3));
    assert_eq!(drain(&mut p)[0].to, Destination::Upstream(EP0));
    // A stale or another source's Echo validates nothing.
    let other: SocketAddr = "192.0.2.8:5683".parse().unwrap();
    p.handle_client_datagram(t(2000), other, &get_with_echo(1, &echo));
    let m = drain(&mut p);
    assert_eq!(
        Message::parse(&m[0].payload).unwrap().code(),
        Code::UNAUTHORIZED
    );
    assert_eq!(p.counters().echo_challenges, 2);
}

#[test]
fn with_validate_sources_a_client_that_does_not_echo_gets_at_most_3x_what_it_sent() {
    let mut p = reverse(|c| c.validate_sources = true);
    let (mut bytes_in, mut bytes_out) = (0, 0);
    for mid in 0..1000u16 {
        let req = small_get(mid);
        bytes_in += req.len();
        p.handle_client_datagram(t(u64::from(mid)), victim(), &req);
        // Once the 4.01s' savings add up to a likely answer, a request is forwarded; its
        // answer still goes only within the 3x allowance.
        for tx in drain(&mut p) {
            if tx.to == Destination::Upstream(EP0) {
                p.handle_upstream_datagram(t(u64::from(mid)), EP0, &big_answer(&tx.payload));
            }
        }
        for tx in drain(&mut p) {
            assert_eq!(tx.to, Destination::Client(victim()));
            bytes_out += tx.payload.len();
        }
    }
    assert!(bytes_out <= 3 * bytes_in, "{bytes_out} > 3 x {bytes_in}");
    let c = p.counters();
    assert!(c.echo_challenges > 900 && c.forwarded > 0, "{c:?}");
}
