//! The response cache in the engine (issue 14; RFC 7252 §5.6, §5.9, §5.10.6): what is
//! answered from it, what goes upstream, and what it keeps, in virtual time.

use std::net::SocketAddr;
use std::time::Duration;

use crate::coap::option::{
    decode_uint, BLOCK2, ETAG, LOCATION_PATH, MAX_AGE, NO_RESPONSE, OBSERVE, OSCORE, URI_PATH,
};
use crate::coap::{Code, Message, MessageBuilder, MessageType};
use crate::proxy::{Destination, Proxy, ProxyConfig, Routing, Transmit};
use crate::time::Timestamp;

use super::{drain, started_at, EP0};

type Opt<'a> = (u16, &'a [u8]);

fn cached_proxy() -> Proxy {
    let config = ProxyConfig {
        routing: Routing {
            upstream: Some("127.0.0.1:5683".parse().unwrap()),
            allow: Vec::new(),
            forward: false,
        },
        cache_size: 1 << 20,
        seed: Some(7),
        ..ProxyConfig::default()
    };
    // These tests are about the cache; `budget.rs` tests hits to clients not yet proven.
    let mut p = started_at(config, Timestamp::ZERO);
    p.prove_source(Timestamp::ZERO, CLIENT);
    p
}

const CLIENT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 40_001);

fn at(s: f64) -> Timestamp {
    Timestamp::ZERO + Duration::from_secs_f64(s)
}

fn message(
    ty: MessageType,
    code: Code,
    mid: u16,
    token: &[u8],
    opts: &[Opt],
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, code, mid, token);
    for (n, v) in opts {
        b.option(*n, v);
    }
    b.payload(body);
    b.finish().unwrap();
    out
}

/// A CON request for /r (plus `opts`) with the given MID (the token follows it).
fn req(code: Code, mid: u16, opts: &[Opt]) -> Vec<u8> {
    let mut all = vec![(URI_PATH, &b"r"[..])];
    all.extend_from_slice(opts);
    all.sort_by_key(|o| o.0);
    message(MessageType::Con, code, mid, &mid.to_be_bytes(), &all, b"")
}

/// Sends `request` from the client at `now`; what went upstream and to the client.
fn send(p: &mut Proxy, now: Timestamp, request: &[u8]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    p.handle_client_datagram(now, CLIENT, request);
    split(drain(p))
}

fn split(out: Vec<Transmit>) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let (up, client): (Vec<_>, Vec<_>) = out
        .into_iter()
        .partition(|t| t.to == Destination::Upstream(EP0));
    (
        up.into_iter().map(|t| t.payload).collect(),
        client.into_iter().map(|t| t.payload).collect(),
    )
}

/// The upstream answers its request `up` piggybacked; what reaches the client.
fn answer(
    p: &mut Proxy,
    now: Timestamp,
    up: &[u8],
    code: Code,
    opts: &[Opt],
    body: &[u8],
) -> Vec<Vec<u8>> {
    let up = Message::parse(up).unwrap();
    let ack = message(
        MessageType::Ack,
        code,
        up.message_id(),
        up.token(),
        opts,
        body,
    );
    p.handle_upstream_datagram(now, EP0, &ack);
    split(drain(p)).1
}

/// A GET that goes upstream and gets a 2.05 of `body` with `opts`: caches it.
fn fill(p: &mut Proxy, now: Timestamp, mid: u16, opts: &[Opt], body: &[u8]) {
    let (up, _) = send(p, now, &req(Code::GET, mid, &[]));
    assert_eq!(up.len(), 1, "a miss goes upstream");
    let got = answer(p, now, &up[0], Code::CONTENT, opts, body);
    assert_eq!(got.len(), 1);
}

fn parse(bytes: &[u8]) -> Message<'_> {
    Message::parse(bytes).unwrap()
}

fn max_age(m: &Message) -> Option<u32> {
    m.option(MAX_AGE).map(|v| decode_uint(v).unwrap())
}

#[test]
fn a_fresh_hit_is_answered_without_going_upstream() {
    let mut p = cached_proxy();
    fill(&mut p, at(0.0), 1, &[(MAX_AGE, &[30])], b"22.5 C");
    let (up, client) = send(&mut p, at(1.0), &req(Code::GET, 2, &[]));
    assert!(up.is_empty(), "a hit asks nobody");
    let hit = parse(&client[0]);
    assert_eq!(
        (
            hit.msg_type(),
            hit.code(),
            hit.message_id(),
            hit.token(),
            hit.payload()
        ),
        (
            MessageType::Ack,
            Code::CONTENT,
            2,
            &2u16.to_be_bytes()[..],
            &b"22.5 C"[..]
        ),
        "piggybacked on the client's CON, with its token and MID"
    );
    assert_eq!(p.cache_stats().0.hits, 1);
}

#[test]
fn max_age_is_reduced_by_age_on_a_hit() {
    let mut p = cached_proxy();
    fill(&mut p, at(0.0), 1, &[(MAX_AGE, &[30])], b"v");
    let (_, client) = send(&mut p, at(10.5), &req(Code::GET, 2, &[]));
    assert_eq!(
        max_age(&parse(&client[0])),
        Some(19),
        "30 s less 10.5 s, rounded down"
    );
    let (up, _) = send(&mut p, at(30.0), &req(Code::GET, 3, &[]));
    assert_eq!(up.len(), 1, "stale at its Max-Age: upstream again");
}

#[test]
fn a_response_without_max_age_is_fresh_for_60_s() {
    let mut p = cached_proxy();
    fill(&mut p, at(0.0), 1, &[], b"v");
    let (up, client) = send(&mut p, at(59.0), &req(Code::GET, 2, &[]));
    assert!(up.is_empty());
    assert_eq!(max_age(&parse(&client[0])), Some(1));
    let (up, _) = send(&mut p, at(60.0), &req(Code::GET, 3, &[]));
    assert_eq!(up.len(), 1);
}

#[test]
fn a_stale_entry_is_revalidated_with_its_etag_and_2_03_serves_the_stored_response() {
    let mut p = cached_proxy();
    fill(
        &mut p,
        at(0.0),
        1,
        &[(ETAG, b"v1"), (MAX_AGE, &[10])],
        b"stored",
    );
    let (up, client) = send(&mut p, at(20.0), &req(Code::GET, 2, &[]));
    assert!(client.is_empty());
    assert_eq!(
        parse(&up[0]).option(ETAG),
        Some(&b"v1"[..]),
        "the stored ETag goes upstream"
    );
    let got = answer(
        &mut p,
        at(20.0),
        &up[0],
        Code::VALID,
        &[(ETAG, b"v1"), (MAX_AGE, &[40])],
        b"",
    );
    let refreshed = parse(&got[0]);
    assert_eq!(
        (
            refreshed.code(),
            refreshed.payload(),
            max_age(&refreshed),
            refreshed.message_id()
        ),
        (Code::CONTENT, &b"stored"[..], Some(40), 2),
        "the client gets the stored 2.05 with the 2.03's Max-Age"
    );
    let (up, _) = send(&mut p, at(50.0), &req(Code::GET, 3, &[]));
    assert!(up.is_empty(), "fresh again for 40 s");
    assert_eq!(p.cache_stats().0.revalidated, 1);
}

#[test]
fn a_2_03_that_returns_after_its_entry_was_replaced_still_serves_what_it_validated() {
    // Two stale GETs revalidate with v1; the first is answered with a new v2, which
    // replaces the entry; then the second's 2.03 for v1 comes back. Its client sent no
    // ETag, so the 2.03 alone means nothing to it (RFC 7252 §5.10.6.2): it gets v1's
    // representation, which the origin has just vouched for.
    let mut p = cached_proxy();
    fill(
        &mut p,
        at(0.0),
        1,
        &[(ETAG, b"v1"), (MAX_AGE, &[10])],
        b"one",
    );
    let (first, _) = send(&mut p, at(20.0), &req(Code::GET, 2, &[]));
    let (second, _) = send(&mut p, at(20.0), &req(Code::GET, 3, &[]));
    assert_eq!(parse(&second[0]).option(ETAG), Some(&b"v1"[..]));
    let new = [(ETAG, &b"v2"[..]), (MAX_AGE, &[30][..])];
    answer(&mut p, at(20.1), &first[0], Code::CONTENT, &new, b"two");
    let valid = [(ETAG, &b"v1"[..]), (MAX_AGE, &[5][..])];
    let got = answer(&mut p, at(20.2), &second[0], Code::VALID, &valid, b"");
    let got = parse(&got[0]);
    assert_eq!(
        (got.code(), got.payload(), max_age(&got), got.message_id()),
        (Code::CONTENT, &b"one"[..], Some(5), 3),
    );
    let (up, client) = send(&mut p, at(21.0), &req(Code::GET, 4, &[]));
    assert!(up.is_empty(), "the newer v2 stays the entry");
    assert_eq!(parse(&client[0]).payload(), b"two");
}

#[test]
fn a_stale_entry_answered_with_a_new_representation_is_replaced() {
    let mut p = cached_proxy();
    fill(
        &mut p,
        at(0.0),
        1,
        &[(ETAG, b"v1"), (MAX_AGE, &[10])],
        b"old",
    );
    let (up, _) = send(&mut p, at(20.0), &req(Code::GET, 2, &[]));
    let got = answer(
        &mut p,
        at(20.0),
        &up[0],
        Code::CONTENT,
        &[(ETAG, b"v2")],
        b"new",
    );
    assert_eq!(parse(&got[0]).payload(), b"new");
    let (up, client) = send(&mut p, at(21.0), &req(Code::GET, 3, &[]));
    assert!(up.is_empty());
    assert_eq!(parse(&client[0]).payload(), b"new");
}

#[test]
fn a_client_etag_matching_the_fresh_entry_gets_2_03_from_the_cache() {
    let mut p = cached_proxy();
    fill(
        &mut p,
        at(0.0),
        1,
        &[(ETAG, b"v1"), (MAX_AGE, &[30])],
        b"body",
    );
    let (up, client) = send(
        &mut p,
        at(5.0),
        &req(Code::GET, 2, &[(ETAG, b"v0"), (ETAG, b"v1")]),
    );
    assert!(up.is_empty());
    let valid = parse(&client[0]);
    assert_eq!(
        (
            valid.code(),
            valid.option(ETAG),
            valid.payload(),
            max_age(&valid)
        ),
        (Code::VALID, Some(&b"v1"[..]), &b""[..], Some(25))
    );
}

#[test]
fn a_client_etag_that_does_not_match_goes_upstream() {
    let mut p = cached_proxy();
    fill(
        &mut p,
        at(0.0),
        1,
        &[(ETAG, b"v1"), (MAX_AGE, &[30])],
        b"body",
    );
    let (up, client) = send(&mut p, at(5.0), &req(Code::GET, 2, &[(ETAG, b"v9")]));
    assert!(client.is_empty());
    let etags: Vec<&[u8]> = parse(&up[0])
        .options()
        .filter(|o| o.0 == ETAG)
        .map(|o| o.1)
        .collect();
    assert_eq!(
        etags,
        [&b"v9"[..]],
        "the client's ETags pass on as they were"
    );
}

#[test]
fn a_successful_put_makes_the_next_get_go_upstream() {
    for code in [Code::CHANGED, Code::CREATED, Code::DELETED] {
        let mut p = cached_proxy();
        fill(&mut p, at(0.0), 1, &[(MAX_AGE, &[60])], b"v");
        let (up, _) = send(&mut p, at(1.0), &req(Code::PUT, 2, &[]));
        answer(&mut p, at(1.0), &up[0], code, &[], b"");
        let (up, _) = send(&mut p, at(2.0), &req(Code::GET, 3, &[]));
        assert_eq!(up.len(), 1, "after {code}: the entry is stale");
    }
}

#[test]
fn a_failed_unsafe_request_leaves_the_entry_fresh() {
    let mut p = cached_proxy();
    fill(&mut p, at(0.0), 1, &[(MAX_AGE, &[60])], b"v");
    let (up, _) = send(&mut p, at(1.0), &req(Code::POST, 2, &[]));
    answer(&mut p, at(1.0), &up[0], Code::BAD_REQUEST, &[], b"");
    let (up, _) = send(&mut p, at(2.0), &req(Code::GET, 3, &[]));
    assert!(up.is_empty());
}

#[test]
fn a_2_01_invalidates_the_entries_at_its_location() {
    let mut p = cached_proxy();
    let get_new = |mid| {
        message(
            MessageType::Con,
            Code::GET,
            mid,
            &[mid as u8],
            &[(URI_PATH, b"new")],
            b"",
        )
    };
    let (up, _) = send(&mut p, at(0.0), &get_new(1));
    answer(&mut p, at(0.0), &up[0], Code::CONTENT, &[], b"old");
    let (up, _) = send(&mut p, at(1.0), &req(Code::POST, 2, &[]));
    answer(
        &mut p,
        at(1.0),
        &up[0],
        Code::CREATED,
        &[(LOCATION_PATH, b"new")],
        b"",
    );
    let (up, _) = send(&mut p, at(2.0), &get_new(3));
    assert_eq!(up.len(), 1, "/new was created anew: asked upstream");
}

#[test]
fn answers_the_proxy_made_are_never_stored() {
    let mut p = cached_proxy();
    p.handle_client_datagram(at(0.0), CLIENT, &req(Code::GET, 1, &[]));
    drain(&mut p);
    while let Some(t) = p.poll_timeout().filter(|&t| t <= at(200.0)) {
        p.handle_timeout(t);
    }
    let (_, client) = split(drain(&mut p));
    assert!(client
        .iter()
        .any(|m| parse(m).code() == Code::GATEWAY_TIMEOUT));
    let (up, _) = send(&mut p, at(201.0), &req(Code::GET, 2, &[]));
    assert_eq!(up.len(), 1, "the 5.04 was the proxy's: nothing cached");
    assert_eq!(p.cache_stats().1, 0);
}

#[test]
fn a_non_request_hit_is_answered_with_a_non() {
    let mut p = cached_proxy();
    fill(&mut p, at(0.0), 1, &[], b"v");
    let non = message(
        MessageType::Non,
        Code::GET,
        2,
        b"n",
        &[(URI_PATH, b"r")],
        b"",
    );
    let (up, client) = send(&mut p, at(1.0), &non);
    assert!(up.is_empty());
    let hit = parse(&client[0]);
    assert_eq!((hit.msg_type(), hit.token()), (MessageType::Non, &b"n"[..]));
}

#[test]
fn a_retransmitted_request_answered_from_cache_gets_the_same_answer() {
    let mut p = cached_proxy();
    fill(&mut p, at(0.0), 1, &[(MAX_AGE, &[30])], b"v");
    let (_, first) = send(&mut p, at(1.0), &req(Code::GET, 2, &[]));
    let (up, again) = send(&mut p, at(3.0), &req(Code::GET, 2, &[]));
    assert!(up.is_empty());
    assert_eq!(
        again, first,
        "the kept answer, Max-Age and all (RFC 7252 §4.5)"
    );
}

#[test]
fn requests_with_no_response_are_not_served_from_cache() {
    let mut p = cached_proxy();
    fill(&mut p, at(0.0), 1, &[], b"v");
    let (up, _) = send(&mut p, at(1.0), &req(Code::GET, 2, &[(NO_RESPONSE, &[2])]));
    assert_eq!(up.len(), 1);
}

#[test]
fn each_block_of_a_cached_representation_is_served_from_the_cache() {
    let mut p = cached_proxy();
    // Block2 NUM 0 and 1 at SZX 2 (64 bytes), M set on the first.
    let blocks: [(&[u8], &[u8]); 2] = [(&[0x0a], &[0x0a]), (&[0x12], &[0x12])];
    for (i, (asked, given)) in blocks.iter().enumerate() {
        let mid = i as u16 + 1;
        let (up, _) = send(&mut p, at(0.0), &req(Code::GET, mid, &[(BLOCK2, asked)]));
        let body = [b'a' + i as u8; 64];
        answer(
            &mut p,
            at(0.0),
            &up[0],
            Code::CONTENT,
            &[(ETAG, b"e"), (BLOCK2, given)],
            &body,
        );
    }
    for (i, (asked, _)) in blocks.iter().enumerate() {
        let (up, client) = send(
            &mut p,
            at(5.0),
            &req(Code::GET, 10 + i as u16, &[(BLOCK2, asked)]),
        );
        assert!(up.is_empty(), "block {i} from the cache");
        assert_eq!(parse(&client[0]).payload(), [b'a' + i as u8; 64]);
    }
}

// --- Observe fan-out (RFC 7641 §3.1, §5) ---

fn observer(n: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 3], 41_000 + n))
}

/// A CON registration for /obs from `from`, token [n].
fn register(p: &mut Proxy, now: Timestamp, from: SocketAddr, n: u8) -> Vec<Transmit> {
    let reg = message(
        MessageType::Con,
        Code::GET,
        100 + u16::from(n),
        &[n],
        &[(OBSERVE, &[]), (URI_PATH, b"obs")],
        b"",
    );
    p.handle_client_datagram(now, from, &reg);
    drain(p)
}

/// The upstream's notification (NON) on the registration `reg`, with Observe `seq`.
fn notify(p: &mut Proxy, now: Timestamp, reg: &[u8], seq: u8, body: &[u8]) -> Vec<Transmit> {
    let reg = parse(reg);
    let n = message(
        MessageType::Non,
        Code::CONTENT,
        9000 + u16::from(seq),
        reg.token(),
        &[(OBSERVE, &[seq]), (MAX_AGE, &[60])],
        body,
    );
    p.handle_upstream_datagram(now, EP0, &n);
    drain(p)
}

fn to(out: &[Transmit], who: SocketAddr) -> Vec<Message<'_>> {
    out.iter()
        .filter(|t| t.to == Destination::Client(who.into()))
        .map(|t| parse(&t.payload))
        .collect()
}

fn upstream_part(out: &[Transmit]) -> Vec<&[u8]> {
    out.iter()
        .filter(|t| t.to == Destination::Upstream(EP0))
        .map(|t| &t.payload[..])
        .collect()
}

/// Client 1 registers and the upstream accepts with Observe 5; the registration upstream.
fn first_observer(p: &mut Proxy) -> Vec<u8> {
    let out = register(p, at(0.0), observer(1), 1);
    let reg = upstream_part(&out)[0].to_vec();
    let up = parse(&reg);
    let ack = message(
        MessageType::Ack,
        Code::CONTENT,
        up.message_id(),
        up.token(),
        &[(OBSERVE, &[5]), (MAX_AGE, &[60])],
        b"t=1",
    );
    p.handle_upstream_datagram(at(0.0), EP0, &ack);
    let got = drain(p);
    assert_eq!(to(&got, observer(1))[0].option(OBSERVE), Some(&[5][..]));
    reg
}

#[test]
fn observers_of_one_resource_share_one_upstream_registration() {
    let mut p = cached_proxy();
    let reg = first_observer(&mut p);
    for n in 2..=3 {
        let out = register(&mut p, at(1.0), observer(n), n as u8);
        assert!(
            upstream_part(&out).is_empty(),
            "observer {n} joins: nothing upstream"
        );
        let first = &to(&out, observer(n))[0];
        assert_eq!(
            (
                first.msg_type(),
                first.token(),
                first.payload(),
                first.option(OBSERVE)
            ),
            (
                MessageType::Ack,
                &[n as u8][..],
                &b"t=1"[..],
                Some(&[5][..])
            ),
            "the cached representation at once, with the group's Observe value"
        );
    }
    let out = notify(&mut p, at(2.0), &reg, 6, b"t=2");
    for n in 1..=3 {
        let got = to(&out, observer(n));
        assert_eq!(got.len(), 1, "observer {n} notified");
        assert_eq!(
            (got[0].token(), got[0].payload()),
            (&[n as u8][..], &b"t=2"[..])
        );
    }
    assert_eq!(p.counters().observe.observers_joined, 2);
    assert_eq!(p.sharing.fanout().len(), 1);
}

#[test]
fn a_notification_updates_the_cache_entry() {
    let mut p = cached_proxy();
    let reg = first_observer(&mut p);
    notify(&mut p, at(2.0), &reg, 6, b"t=2");
    let get = message(
        MessageType::Con,
        Code::GET,
        7,
        b"g",
        &[(URI_PATH, b"obs")],
        b"",
    );
    let (up, client) = send(&mut p, at(3.0), &get);
    assert!(up.is_empty());
    assert_eq!(parse(&client[0]).payload(), b"t=2");
    assert_eq!(
        parse(&client[0]).option(OBSERVE),
        None,
        "a plain GET gets no Observe"
    );
}

#[test]
fn the_upstream_registration_ends_with_its_last_observer() {
    let mut p = cached_proxy();
    let reg = first_observer(&mut p);
    register(&mut p, at(1.0), observer(2), 2);
    // The first observer goes (an RST to its notification); the second stays served.
    let out = notify(&mut p, at(2.0), &reg, 6, b"t=2");
    let mid = to(&out, observer(1))[0].message_id();
    p.handle_client_datagram(
        at(2.1),
        observer(1),
        &message(MessageType::Rst, Code::EMPTY, mid, &[], &[], b""),
    );
    let out = notify(&mut p, at(3.0), &reg, 7, b"t=3");
    assert!(to(&out, observer(1)).is_empty());
    assert_eq!(to(&out, observer(2))[0].payload(), b"t=3");
    assert!(upstream_part(&out).is_empty(), "the registration lives on");
    // Then the last one: the next notification is reset, which cancels it upstream.
    let mid = to(&out, observer(2))[0].message_id();
    p.handle_client_datagram(
        at(3.1),
        observer(2),
        &message(MessageType::Rst, Code::EMPTY, mid, &[], &[], b""),
    );
    assert_eq!(p.sharing.fanout().len(), 0);
    let out = notify(&mut p, at(4.0), &reg, 8, b"t=4");
    let reset: Vec<MessageType> = upstream_part(&out)
        .iter()
        .map(|m| parse(m).msg_type())
        .collect();
    assert_eq!(reset, [MessageType::Rst]);
}

#[test]
fn a_registration_without_a_fresh_representation_registers_upstream_itself() {
    let mut p = cached_proxy();
    first_observer(&mut p);
    // Max-Age 60 has passed with no notification.
    let out = register(&mut p, at(61.0), observer(2), 2);
    assert_eq!(upstream_part(&out).len(), 1);
}

// --- Every answer from the cache was fresh when given (random runs in virtual time) ---

mod fresh_when_given;

#[test]
fn fetch_responses_are_keyed_by_their_payload_and_never_answer_a_get() {
    use crate::coap::option::CONTENT_FORMAT;
    let mut p = cached_proxy();
    let fetch = |mid: u16, body: &[u8]| {
        let opts: [Opt; 2] = [(URI_PATH, b"r"), (CONTENT_FORMAT, &[60])];
        message(
            MessageType::Con,
            Code::FETCH,
            mid,
            &[mid as u8],
            &opts,
            body,
        )
    };
    let (up, _) = send(&mut p, at(0.0), &fetch(1, b"q=a"));
    answer(&mut p, at(0.0), &up[0], Code::CONTENT, &[], b"a's answer");
    let (up, client) = send(&mut p, at(1.0), &fetch(2, b"q=a"));
    assert!(up.is_empty(), "the same FETCH body: a hit (RFC 8132 §2)");
    assert_eq!(parse(&client[0]).payload(), b"a's answer");
    let (up, _) = send(&mut p, at(1.0), &fetch(3, b"q=b"));
    assert_eq!(up.len(), 1, "another body is another key");
    let (up, _) = send(&mut p, at(1.0), &req(Code::GET, 4, &[]));
    assert_eq!(up.len(), 1, "a FETCH's answer never answers a GET");
}

#[test]
fn oscore_registrations_are_never_served_from_the_cache_nor_fanned_out() {
    // RFC 8613: each is protected end to end for its client; the cache stays out of them.
    let mut p = cached_proxy();
    for n in 1..=2u8 {
        let from = observer(u16::from(n));
        let opts: [Opt; 3] = [(OBSERVE, &[]), (OSCORE, &[0x09, n]), (URI_PATH, b"obs")];
        let reg = message(
            MessageType::Con,
            Code::FETCH,
            200 + u16::from(n),
            &[n],
            &opts,
            b"c",
        );
        p.handle_client_datagram(at(f64::from(n)), from, &reg);
        let out = drain(&mut p);
        let up = upstream_part(&out);
        assert_eq!(up.len(), 1, "registration {n} goes upstream");
        let up = parse(up[0]);
        let answer_opts: [Opt; 3] = [(OBSERVE, &[5]), (OSCORE, &[]), (MAX_AGE, &[60])];
        let ack = message(
            MessageType::Ack,
            Code::CONTENT,
            up.message_id(),
            up.token(),
            &answer_opts,
            b"sealed",
        );
        p.handle_upstream_datagram(at(f64::from(n)), EP0, &ack);
        drain(&mut p);
    }
    let c = p.counters();
    assert_eq!(
        (
            c.traffic.forwarded,
            c.observe.observers_joined,
            c.observe.observations
        ),
        (2, 0, 2)
    );
    let cache = p.cache_counters();
    assert_eq!(
        (cache.stored, cache.hits),
        (0, 0),
        "nothing of OSCORE is stored"
    );
}
