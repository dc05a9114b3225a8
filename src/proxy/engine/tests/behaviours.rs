//! The engine's rules one at a time (RFC 7252 and RFC 7641 as a proxy must apply them): each
//! test is one behaviour.

use std::net::SocketAddr;
use std::time::Duration;

use crate::coap::option::{
    self, decode_uint, encode_uint, HOP_LIMIT, OBSERVE, PROXY_URI, URI_PATH,
};
use crate::coap::{Code, Message, MessageBuilder, MessageType};
use crate::time::Timestamp;

use super::{drain, started_at, EP0};
use crate::proxy::{
    AllowedTarget, Destination, EndpointEvent, EndpointId, Proxy, ProxyConfig, RetryPolicy,
    Routing, Transmit,
};

/// A proxy whose endpoint sockets are open at `t(0)`, and to which `client()` has proven its
/// address (these tests are about other rules; `budget.rs` tests the proof).
fn started(config: ProxyConfig) -> Proxy {
    let mut p = started_at(config, t(0));
    p.prove_source(t(0), client());
    p
}

fn client() -> SocketAddr {
    "127.0.0.1:40000".parse().unwrap()
}

fn upstream_addr() -> SocketAddr {
    "127.0.0.1:5684".parse().unwrap()
}

fn t(ms: u64) -> Timestamp {
    Timestamp::from_nanos(1_000_000_000) + Duration::from_millis(ms)
}

fn reverse() -> Proxy {
    started(ProxyConfig {
        routing: Routing {
            upstream: Some(upstream_addr()),
            allow: Vec::new(),
            forward: false,
        },
        policy: RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::DEFAULT
        },
        seed: Some(1),
        ..ProxyConfig::default()
    })
}

fn forward() -> Proxy {
    started(ProxyConfig {
        routing: Routing {
            upstream: None,
            allow: vec![AllowedTarget {
                host: "127.0.0.1".into(),
                port: 5690,
                addr: "127.0.0.1:5690".parse().unwrap(),
            }],
            forward: true,
        },
        seed: Some(1),
        ..ProxyConfig::default()
    })
}

fn request(ty: MessageType, code: Code, mid: u16, options: &[(u16, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, code, mid, b"tk");
    for &(n, v) in options {
        b.option(n, v);
    }
    b.finish().unwrap();
    out
}

fn only_to_client(out: &[Transmit]) -> Message<'_> {
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].to, Destination::Client(client().into()));
    Message::parse(&out[0].payload).unwrap()
}

#[test]
fn unrecognised_unsafe_option_gets_4_02_and_nothing_goes_upstream() {
    // RFC 7252 §5.7.1: by class, not by criticality: elective (66) or critical (67) alike.
    for number in [66, 67] {
        let mut p = reverse();
        let req = request(MessageType::Con, Code::GET, 1, &[(number, b"x")]);
        p.handle_client_datagram(t(0), client(), &req);
        let out = drain(&mut p);
        let m = only_to_client(&out);
        assert_eq!(
            (m.msg_type(), m.code(), m.message_id()),
            (MessageType::Ack, Code::BAD_OPTION, 1),
            "option {number}"
        );
        assert_eq!(m.token(), b"tk");
        // The answer is remembered for retransmissions, but nothing is in flight upstream.
        assert_eq!((p.in_flight(), p.counters().traffic.forwarded), (0, 0));
    }
}

#[test]
fn unrecognised_safe_options_are_forwarded_critical_or_not_both_ways() {
    // 2048: elective; 65001 and OSCORE (9): critical, safe-to-forward (RFC 7252 §5.7.2).
    for number in [2048, 65001, option::OSCORE] {
        let mut p = reverse();
        let req = request(MessageType::Con, Code::POST, 1, &[(number, b"x")]);
        p.handle_client_datagram(t(0), client(), &req);
        let out = drain(&mut p);
        assert_eq!(out[0].to, Destination::Upstream(EP0));
        let up = Message::parse(&out[0].payload).unwrap();
        assert_eq!(up.option(number), Some(&b"x"[..]), "option {number}");
        // The response carries it too, and reaches the client as it came.
        let mut answer = Vec::new();
        let ack = (MessageType::Ack, Code::CHANGED, up.message_id());
        let mut b = MessageBuilder::new(&mut answer, ack.0, ack.1, ack.2, up.token());
        b.option(number, b"y");
        b.finish().unwrap();
        p.handle_upstream_datagram(t(1), EP0, &answer);
        let out = drain(&mut p);
        let m = only_to_client(&out);
        assert_eq!(
            (m.code(), m.option(number)),
            (Code::CHANGED, Some(&b"y"[..]))
        );
    }
}

#[test]
fn a_repeated_unsafe_option_that_may_not_repeat_gets_4_02() {
    // RFC 7252 §5.4.5: the repeat counts as unrecognised; Proxy-Uri and Block2 are unsafe.
    let uri: &[u8] = b"coap://127.0.0.1:5690/a";
    let cases: [&[(u16, &[u8])]; 2] = [
        &[(PROXY_URI, uri), (PROXY_URI, uri)],
        &[(option::BLOCK2, &[0x02]), (option::BLOCK2, &[0x12])],
    ];
    for options in cases {
        let mut p = forward();
        p.handle_client_datagram(
            t(0),
            client(),
            &request(MessageType::Con, Code::GET, 1, options),
        );
        let out = drain(&mut p);
        assert_eq!(only_to_client(&out).code(), Code::BAD_OPTION, "{options:?}");
    }
    // Repeatable ones pass.
    let mut p = reverse();
    let paths: &[(u16, &[u8])] = &[(URI_PATH, b"a"), (URI_PATH, b"b")];
    p.handle_client_datagram(
        t(0),
        client(),
        &request(MessageType::Con, Code::GET, 1, paths),
    );
    assert_eq!(drain(&mut p)[0].to, Destination::Upstream(EP0));
}

#[test]
fn a_response_with_an_unrecognised_unsafe_option_gets_5_02() {
    let mut p = reverse();
    let req = request(MessageType::Con, Code::GET, 1, &[]);
    p.handle_client_datagram(t(0), client(), &req);
    let out = drain(&mut p);
    let up = Message::parse(&out[0].payload).unwrap();
    let mut answer = Vec::new();
    let ack = (MessageType::Ack, Code::CONTENT, up.message_id());
    let mut b = MessageBuilder::new(&mut answer, ack.0, ack.1, ack.2, up.token());
    b.option(66, b"?");
    b.finish().unwrap();
    p.handle_upstream_datagram(t(1), EP0, &answer);
    let out = drain(&mut p);
    assert_eq!(only_to_client(&out).code(), Code::BAD_GATEWAY);
}

#[test]
fn hop_limit_1_gets_5_08_and_others_are_decremented() {
    let mut p = reverse();
    p.handle_client_datagram(
        t(0),
        client(),
        &request(MessageType::Con, Code::GET, 1, &[(HOP_LIMIT, &[1])]),
    );
    assert_eq!(
        only_to_client(&drain(&mut p)).code(),
        Code::HOP_LIMIT_REACHED
    );
    p.handle_client_datagram(
        t(0),
        client(),
        &request(MessageType::Con, Code::GET, 2, &[(HOP_LIMIT, &[5])]),
    );
    let out = drain(&mut p);
    let up = Message::parse(&out[0].payload).unwrap();
    assert_eq!(up.option(HOP_LIMIT), Some(&[4u8][..]));
}

#[test]
fn missing_hop_limit_is_added_with_16() {
    let mut p = reverse();
    p.handle_client_datagram(
        t(0),
        client(),
        &request(MessageType::Con, Code::GET, 1, &[]),
    );
    let out = drain(&mut p);
    let up = Message::parse(&out[0].payload).unwrap();
    assert_eq!(
        up.option(HOP_LIMIT).map(|v| decode_uint(v).unwrap()),
        Some(16)
    );
}

#[test]
fn upstream_request_uses_the_proxys_own_mid_and_token() {
    let mut p = reverse();
    p.handle_client_datagram(
        t(0),
        client(),
        &request(MessageType::Non, Code::GET, 0xabcd, &[(URI_PATH, b"a")]),
    );
    let out = drain(&mut p);
    let up = Message::parse(&out[0].payload).unwrap();
    assert_eq!(up.msg_type(), MessageType::Con);
    assert_ne!(up.token(), b"tk");
    assert_eq!(up.token().len(), 8);
    assert_eq!(up.option(URI_PATH), Some(&b"a"[..]));
}

#[test]
fn retries_follow_the_policy_then_5_04() {
    let mut p = reverse();
    p.handle_client_datagram(
        t(0),
        client(),
        &request(MessageType::Con, Code::GET, 1, &[]),
    );
    assert_eq!(drain(&mut p).len(), 1);
    // No jitter: retransmissions at 2 s, 2+3 s, 5+4.5 s, 9.5+6.75 s; give-up after 16.25+10.125 s.
    let mut sent_at = Vec::new();
    while let Some(now) = p.poll_timeout() {
        p.handle_timeout(now);
        for tx in drain(&mut p) {
            sent_at.push((now.saturating_since(t(0)).as_millis(), tx.to));
        }
        if p.in_flight() == 0 {
            break;
        }
    }
    let upstream: Vec<u128> = sent_at
        .iter()
        .filter(|(_, to)| *to == Destination::Upstream(EP0))
        .map(|(ms, _)| *ms)
        .collect();
    assert_eq!(upstream, vec![2000, 5000, 9500, 16250]);
    let empty_ack_then_504: Vec<u128> = sent_at
        .iter()
        .filter(|(_, to)| *to == Destination::Client(client().into()))
        .map(|(ms, _)| *ms)
        .collect();
    assert_eq!(empty_ack_then_504, vec![100, 26375]);
}

/// A NON GET sent at 0 through a proxy with a 4 s total timeout and no jitter, its first
/// transmission drained: retransmission due at 2 s, 5.04 at 4 s.
fn non_get_with_a_4_s_total_timeout() -> Proxy {
    let mut p = started(ProxyConfig {
        policy: RetryPolicy {
            total_timeout: Duration::from_secs(4),
            jitter: 0.0,
            ..RetryPolicy::DEFAULT
        },
        ..reverse().config.clone()
    });
    p.handle_client_datagram(
        t(0),
        client(),
        &request(MessageType::Non, Code::GET, 1, &[]),
    );
    drain(&mut p);
    p
}

#[test]
fn total_timeout_cuts_the_schedule_short() {
    let mut p = non_get_with_a_4_s_total_timeout();
    p.handle_timeout(t(3999));
    assert_eq!(drain(&mut p).len(), 1, "one retransmission at 2 s");
    p.handle_timeout(t(4000));
    let out = drain(&mut p);
    assert_eq!(only_to_client(&out).code(), Code::GATEWAY_TIMEOUT);
}

/// The lateness histogram sees how late each retransmission was handled, and only those: the
/// total timeout's 5.04 is not a retransmission.
#[test]
fn retransmissions_record_how_late_they_were_handled() {
    let mut p = non_get_with_a_4_s_total_timeout();
    // Due at 2 s, handled 300 µs late.
    p.handle_timeout(t(2000) + Duration::from_micros(300));
    assert_eq!(drain(&mut p).len(), 1, "one retransmission");
    p.handle_timeout(t(4000));
    assert_eq!(only_to_client(&drain(&mut p)).code(), Code::GATEWAY_TIMEOUT);
    let lateness = p.retransmit_lateness();
    assert_eq!(lateness.samples(), 1);
    assert_eq!(lateness.samples_over_us(224), 1);
    assert_eq!(lateness.samples_over_us(320), 0);
}

#[test]
fn upstream_rst_answers_5_02() {
    let mut p = reverse();
    p.handle_client_datagram(
        t(0),
        client(),
        &request(MessageType::Con, Code::GET, 1, &[]),
    );
    let up = drain(&mut p).remove(0);
    let mid = Message::parse(&up.payload).unwrap().message_id();
    let mut rst = Vec::new();
    crate::coap::rst(&mut rst, mid);
    p.handle_upstream_datagram(t(10), EP0, &rst);
    let out = drain(&mut p);
    let m = only_to_client(&out);
    assert_eq!(
        (m.msg_type(), m.code(), m.message_id()),
        (MessageType::Ack, Code::BAD_GATEWAY, 1)
    );
}

#[test]
fn forward_proxy_decomposes_proxy_uri_for_allowed_targets() {
    let mut p = forward();
    let uri = b"coap://127.0.0.1:5690/sensors/temp?u=c";
    p.handle_client_datagram(
        t(0),
        client(),
        &request(MessageType::Con, Code::GET, 1, &[(PROXY_URI, uri)]),
    );
    let out = drain(&mut p);
    assert_eq!(out[0].to, Destination::Upstream(EP0));
    let up = Message::parse(&out[0].payload).unwrap();
    assert!(up.option(PROXY_URI).is_none());
    assert!(
        up.option(option::URI_HOST).is_none(),
        "IP literal: no Uri-Host"
    );
    let paths: Vec<&[u8]> = up
        .options()
        .filter(|(n, _)| *n == URI_PATH)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(paths, vec![&b"sensors"[..], b"temp"]);
    assert_eq!(up.option(option::URI_PORT), Some(&encode_uint(5690)[..]));
}

/// Sends a CON GET with `Proxy-Uri: uri` and returns what the proxy itself answered.
fn answer_to_proxy_uri(p: &mut Proxy, mid: u16, uri: &[u8]) -> Code {
    let req = request(MessageType::Con, Code::GET, mid, &[(PROXY_URI, uri)]);
    p.handle_client_datagram(t(0), client(), &req);
    only_to_client(&drain(p)).code()
}

#[test]
fn forward_proxy_is_not_an_open_relay() {
    let mut p = forward();
    let code = answer_to_proxy_uri(&mut p, 1, b"coap://10.0.0.1/x");
    assert_eq!(code, Code::FORBIDDEN);
    let code = answer_to_proxy_uri(&mut p, 2, b"http://127.0.0.1:5690/x");
    assert_eq!(code, Code::PROXYING_NOT_SUPPORTED);
}

#[test]
fn reverse_proxy_refuses_proxy_uri() {
    let mut p = reverse();
    let code = answer_to_proxy_uri(&mut p, 1, b"coap://127.0.0.1:5690/x");
    assert_eq!(code, Code::PROXYING_NOT_SUPPORTED);
}

/// A client's Observe registration through a fresh reverse proxy: the proxy, and the
/// registration as it went upstream (endpoint, token, MID).
fn registered() -> (Proxy, Destination, Vec<u8>, u16) {
    let mut p = reverse();
    p.handle_client_datagram(
        t(0),
        client(),
        &request(MessageType::Con, Code::GET, 1, &[(OBSERVE, &[])]),
    );
    let reg = drain(&mut p).remove(0);
    let msg = Message::parse(&reg.payload).unwrap();
    let (token, mid) = (msg.token().to_vec(), msg.message_id());
    (p, reg.to, token, mid)
}

/// An upstream notification (or, as an ACK, the registration's answer) with sequence `seq`,
/// carrying `seq` as its payload.
fn notification(ty: MessageType, mid: u16, token: &[u8], seq: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, Code::CONTENT, mid, token);
    b.option(OBSERVE, &encode_uint(seq));
    b.payload(&seq.to_be_bytes());
    b.finish().unwrap();
    out
}

#[test]
fn notifications_are_relayed_with_the_clients_token_until_deregistration() {
    let (mut p, _, token, mid) = registered();
    let notify = |ty, mid, seq| notification(ty, mid, &token, seq);
    p.handle_upstream_datagram(t(5), EP0, &notify(MessageType::Ack, mid, 1));
    let first = drain(&mut p);
    assert_eq!(only_to_client(&first).msg_type(), MessageType::Ack);
    for (i, seq) in [2u32, 3, 4].into_iter().enumerate() {
        p.handle_upstream_datagram(
            t(100 * (i as u64 + 1)),
            EP0,
            &notify(MessageType::Non, 900 + seq as u16, seq),
        );
        let out = drain(&mut p);
        let m = only_to_client(&out);
        assert_eq!(
            (m.token(), m.payload()),
            (&b"tk"[..], &seq.to_be_bytes()[..])
        );
    }
    // An out-of-order older notification is dropped.
    p.handle_upstream_datagram(t(450), EP0, &notify(MessageType::Non, 950, 3));
    assert!(drain(&mut p).is_empty());
    // Deregistration (same token, Observe: 1) ends the observation; later notifications get RST.
    p.handle_client_datagram(
        t(500),
        client(),
        &request(MessageType::Con, Code::GET, 2, &[(OBSERVE, &[1])]),
    );
    drain(&mut p);
    p.handle_upstream_datagram(t(600), EP0, &notify(MessageType::Non, 960, 9));
    let out = drain(&mut p);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].to, Destination::Upstream(EP0));
    assert_eq!(
        Message::parse(&out[0].payload).unwrap().msg_type(),
        MessageType::Rst
    );
}

#[test]
fn an_observation_stays_on_its_endpoint_while_requests_move_on_and_keeps_it_open() {
    let (mut p, to, token, mid) = registered();
    assert_eq!(to, Destination::Upstream(EP0));
    let notify = |ty, mid, seq| notification(ty, mid, &token, seq);
    p.handle_upstream_datagram(t(1), EP0, &notify(MessageType::Ack, mid, 1));
    drain(&mut p);
    // One endpoint's 65,536 Message IDs, answered at once: the next request leaves from
    // another endpoint.
    let other = SocketAddr::from(([127, 0, 0, 3], 40_000));
    for i in 0..65_536u32 {
        let req = request(MessageType::Non, Code::GET, i as u16, &[]);
        p.handle_client_datagram(t(2), other, &req);
        for out in drain(&mut p) {
            if let Destination::Upstream(ep) = out.to {
                let m = Message::parse(&out.payload).unwrap();
                let mut answer = Vec::new();
                MessageBuilder::new(&mut answer, MessageType::Non, Code::CONTENT, 7, m.token())
                    .finish()
                    .unwrap();
                p.handle_upstream_datagram(t(2), ep, &answer);
            }
        }
        drain(&mut p);
        p.accept_endpoint_events(t(2));
    }
    assert_eq!(
        p.upstreams.endpoints().count(0),
        3,
        "the spare took over; a new spare opened"
    );
    // Notifications still come to the registration's endpoint, and only there.
    p.handle_upstream_datagram(t(10), EP0, &notify(MessageType::Non, 500, 2));
    assert_eq!(only_to_client(&drain(&mut p)).code(), Code::CONTENT);
    p.handle_upstream_datagram(t(11), EndpointId(1), &notify(MessageType::Non, 501, 3));
    let out = drain(&mut p);
    assert_eq!(out[0].to, Destination::Upstream(EndpointId(1)));
    assert_eq!(
        Message::parse(&out[0].payload).unwrap().msg_type(),
        MessageType::Rst,
        "a notification on another endpoint is not the observation's"
    );
    // A lifetime later every ID of the first endpoint is free, but the observation holds it.
    let later = t(2) + Duration::from_secs(250);
    p.handle_upstream_datagram(later, EP0, &notify(MessageType::Non, 502, 4));
    drain(&mut p);
    p.handle_timeout(later);
    let closed: Vec<_> = p.accept_endpoint_events(later);
    assert!(
        !closed.contains(&EndpointEvent::Close { id: EP0 }),
        "{closed:?}"
    );
}

#[test]
fn all_state_is_freed_by_the_last_deadline() {
    let mut p = reverse();
    for mid in 0..50u16 {
        let ty = if mid % 2 == 0 {
            MessageType::Con
        } else {
            MessageType::Non
        };
        p.handle_client_datagram(
            t(u64::from(mid)),
            client(),
            &request(ty, Code::GET, mid, &[]),
        );
    }
    drain(&mut p);
    while let Some(next) = p.poll_timeout() {
        p.handle_timeout(next);
        drain(&mut p);
    }
    assert_eq!(p.live_exchanges(), 0);
    assert_eq!(p.pending_timers(), 0);
    let c = p.counters();
    assert_eq!(
        (
            c.own_answers.gateway_timeout_5_04,
            c.kept.cached_answers,
            c.observe.observations
        ),
        (50, 0, 0)
    );
}

#[test]
fn proxy_uri_naming_the_proxy_itself_is_served_locally() {
    let mut p = started(ProxyConfig {
        local_addr: Some("127.0.0.1:5683".parse().unwrap()),
        routing: Routing {
            forward: true,
            allow: forward().config.routing.allow.clone(),
            upstream: Some(upstream_addr()),
        },
        ..reverse().config.clone()
    });
    let uri = b"coap://127.0.0.1:5683/local/thing";
    p.handle_client_datagram(
        t(0),
        client(),
        &request(MessageType::Con, Code::GET, 1, &[(PROXY_URI, uri)]),
    );
    let out = drain(&mut p);
    assert_eq!(
        out[0].to,
        Destination::Upstream(EP0),
        "the reverse upstream, not 4.03"
    );
    let up = Message::parse(&out[0].payload).unwrap();
    let paths: Vec<&[u8]> = up
        .options()
        .filter(|(n, _)| *n == URI_PATH)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(paths, vec![&b"local"[..], b"thing"]);
}

/// An upstream reached over TCP or TLS (RFC 8323 §2.2) gets each request once: no
/// retransmission, and the total timeout alone bounds the wait (5.04).
#[test]
fn a_reliable_upstream_is_not_retransmitted_to() {
    let mut p = reverse();
    p.set_reliable_upstream(upstream_addr());
    p.handle_client_datagram(
        t(0),
        client(),
        &request(MessageType::Con, Code::GET, 1, &[]),
    );
    let sent = drain(&mut p);
    assert_eq!(
        (sent.iter())
            .filter(|t| matches!(t.to, Destination::Upstream(_)))
            .count(),
        1
    );
    // Past every retransmission the UDP schedule would have made (2 s, 3 s, 4.5 s, ...).
    for ms in (100..30_000).step_by(100) {
        p.handle_timeout(t(ms));
        let out = drain(&mut p);
        assert!(
            out.iter()
                .all(|t| !matches!(t.to, Destination::Upstream(_))),
            "resent at {ms} ms"
        );
    }
    p.handle_timeout(t(30_000));
    let out = drain(&mut p);
    let answer = (out.iter())
        .find(|t| matches!(t.to, Destination::Client(_)) && !t.payload.is_empty())
        .map(|t| Message::parse(&t.payload).unwrap().code());
    assert_eq!(answer, Some(Code::GATEWAY_TIMEOUT));
}

/// When the connection to a reliable upstream closes, what waits on it gets 5.02 at once.
#[test]
fn a_closed_upstream_connection_answers_5_02() {
    let mut p = reverse();
    p.set_reliable_upstream(upstream_addr());
    p.handle_client_datagram(
        t(0),
        client(),
        &request(MessageType::Non, Code::GET, 1, &[]),
    );
    drain(&mut p);
    p.handle_upstream_closed(t(50), EP0);
    assert_eq!(only_to_client(&drain(&mut p)).code(), Code::BAD_GATEWAY);
}
