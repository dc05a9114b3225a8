//! Each source's share of the observations (issue 40, row 5): 4 coap+tcp connections from one
//! address x 256 registrations took all 1,000 observations, and every other client's
//! registration was answered without Observe. Now a source (an address's network, whatever
//! the transport or port) holds `--max-observations-per-source` at most, and what it held is
//! given back however its observations end.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::coap::option::{encode_uint, OBSERVE, URI_PATH};
use crate::coap::{Code, Message, MessageBuilder, MessageType};
use crate::proxy::engine::observation_shares::SourceKey;
use crate::proxy::{ClientOrigin, ConnectionId, Destination, Limits, LocalClient, Peer, Proxy};
use crate::source_prefix::PrefixLengths;
use crate::time::Timestamp;

use super::observers::{notification, reverse, t};
use super::{drain, EP0};

/// Stream connection `n` from `ip`, as the stream listener names it to the engine.
fn conn(n: u32, ip: [u8; 4]) -> ClientOrigin {
    Peer::Stream(ConnectionId::new(n, 0)).connected_from(IpAddr::from(ip))
}

/// A CON GET of `/path` with Observe `observe` (0 registers, 1 deregisters).
fn observe_request(token: &[u8], mid: u16, path: &str, observe: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, MessageType::Con, Code::GET, mid, token);
    b.option(OBSERVE, &encode_uint(observe));
    b.option(URI_PATH, path.as_bytes());
    b.finish().unwrap();
    out
}

/// The one request the proxy sent upstream since the last drain: its Message ID and token.
fn upstream_request(p: &mut Proxy) -> (u16, Vec<u8>) {
    let sent = drain(p);
    let up = (sent.iter())
        .find(|tx| tx.to == Destination::Upstream(EP0))
        .expect("a request upstream");
    let m = Message::parse(&up.payload).unwrap();
    (m.message_id(), m.token().to_vec())
}

/// What a client got, of what the proxy sent since the last drain, for `token`.
fn answer_to(p: &mut Proxy, client: Peer, token: &[u8]) -> Option<Vec<u8>> {
    (drain(p).into_iter())
        .filter(|tx| tx.to == Destination::Client(client))
        .map(|tx| tx.payload)
        .find(|m| Message::parse(m).is_ok_and(|m| m.token() == token))
}

/// `from` registers `token` for `/path`; the upstream answers at once with notification 1.
/// Whether the client's answer carries Observe (it is registered), and the upstream token.
fn register(
    p: &mut Proxy,
    now: Timestamp,
    from: impl Into<ClientOrigin>,
    (token, mid, path): (&[u8], u16, &str),
) -> (bool, Vec<u8>) {
    let from = from.into();
    p.prove_source(now, from.peer);
    p.handle_client_datagram(now, from, &observe_request(token, mid, path, 0));
    let (up_mid, up_token) = upstream_request(p);
    let ack = notification(MessageType::Ack, up_mid, &up_token, 1);
    p.handle_upstream_datagram(now, EP0, &ack);
    let answer = answer_to(p, from.peer, token).expect("an answer");
    let registered = Message::parse(&answer).unwrap().option(OBSERVE).is_some();
    (registered, up_token)
}

#[test]
fn four_connections_from_one_address_get_no_more_than_its_share_and_another_client_is_notified() {
    let mut p = reverse(|_| {});
    let limits = Limits::default();
    let share = limits.max_observations_per_source;
    assert_eq!((limits.max_observations, share), (1000, 125));
    let mut registered = 0;
    for c in 0..4u32 {
        for i in 0..256u16 {
            let token = [c as u8, (i >> 8) as u8, i as u8];
            let (yes, _) = register(&mut p, t(0), conn(c, [127, 0, 0, 2]), (&token, i, "obs"));
            registered += usize::from(yes);
        }
    }
    assert_eq!(registered, share, "one address, 4 connections: its share");
    let c = p.counters();
    assert_eq!(c.observe.observations, share as u64);
    assert_eq!(
        (c.observe.refused_share, c.observe.refused_table),
        (1024 - 125, 0)
    );
    let second = conn(9, [127, 0, 0, 3]);
    let (yes, up_token) = register(&mut p, t(10), second, (b"second", 1, "obs"));
    assert!(yes, "another address's registration is accepted");
    let n = notification(MessageType::Non, 900, &up_token, 2);
    p.handle_upstream_datagram(t(1000), EP0, &n);
    let relayed = answer_to(&mut p, second.peer, b"second").expect("notified");
    let relayed = Message::parse(&relayed).unwrap();
    assert_eq!(relayed.code(), Code::CONTENT);
    assert!(relayed.option(OBSERVE).is_some());
}

#[test]
fn the_ports_of_one_address_and_the_hosts_of_one_ipv6_slash_64_share_one_share() {
    let mut p = reverse(|c| c.limits.max_observations_per_source = 3);
    let udp = |s: &str| s.parse::<SocketAddr>().unwrap();
    let mut got = Vec::new();
    for (i, from) in [
        "192.0.2.7:40000",
        "192.0.2.7:40001",
        "192.0.2.7:40002",
        "192.0.2.7:40003",
    ]
    .into_iter()
    .enumerate()
    {
        got.push(register(&mut p, t(0), udp(from), (b"a", i as u16, "obs")).0);
    }
    assert_eq!(got, [true, true, true, false]);
    let v6 = [
        "[2001:db8::1]:5683",
        "[2001:db8::2]:5683",
        "[2001:db8::3]:5683",
    ];
    let v6: Vec<bool> = (v6.iter().enumerate())
        .map(|(i, a)| register(&mut p, t(0), udp(a), (b"b", i as u16, "obs")).0)
        .collect();
    assert_eq!(v6, [true, true, true]);
    let (yes, _) = register(&mut p, t(0), udp("[2001:db8::9]:5683"), (b"c", 9, "obs"));
    assert!(!yes, "another host of the same /64");
    let (yes, _) = register(
        &mut p,
        t(0),
        udp("[2001:db8:0:1::1]:5683"),
        (b"c", 9, "obs"),
    );
    assert!(yes, "another /64");
    assert_eq!(p.counters().observe.refused_share, 2);
}

#[test]
fn in_process_clients_are_each_a_source_of_their_own() {
    let mut p = reverse(|c| c.limits.max_observations_per_source = 1);
    for n in 1..=3 {
        let local = Peer::Local(LocalClient::new(n));
        assert!(register(&mut p, t(0), local, (b"l", n as u16, "obs")).0);
    }
    assert_eq!(p.counters().observe.observations, 3);
}

#[test]
fn the_table_limit_is_counted_apart_from_the_share() {
    let mut p = reverse(|c| {
        c.limits.max_observations = 4;
        c.limits.max_observations_per_source = 2;
    });
    let got: Vec<bool> = (0..6u8)
        .map(|i| {
            register(
                &mut p,
                t(0),
                conn(u32::from(i), [10, 0, 0, i / 2]),
                (&[i], 1, "o"),
            )
            .0
        })
        .collect();
    assert_eq!(got, [true, true, true, true, false, false]);
    let c = p.counters();
    assert_eq!((c.observe.refused_table, c.observe.refused_share), (2, 0));
}

/// With the response cache on, a registration that would join another's upstream registration
/// (RFC 7641 §5) counts towards its source's share too: past it, it registers upstream on its
/// own and is answered without Observe.
#[cfg(feature = "cache")]
#[test]
fn registrations_joining_a_shared_observation_count_towards_the_share() {
    let mut p = reverse(|c| {
        c.cache_size = 64 << 10;
        c.limits.max_observations_per_source = 2;
    });
    let from = conn(1, [192, 0, 2, 1]);
    assert!(register(&mut p, t(0), from, (b"1", 1, "obs")).0);
    p.handle_client_datagram(t(1), from, &observe_request(b"2", 2, "obs", 0));
    let joined = answer_to(&mut p, from.peer, b"2").expect("answered from the cache");
    assert!(Message::parse(&joined).unwrap().option(OBSERVE).is_some());
    assert!(!register(&mut p, t(2), from, (b"3", 3, "obs")).0);
    let c = p.counters();
    assert_eq!((c.observe.observers_joined, c.observe.observations), (1, 2));
    assert_eq!(c.observe.refused_share, 1);
}

/// What the simulation below keeps of each live observation.
struct Live {
    from: ClientOrigin,
    token: Vec<u8>,
    up_token: Vec<u8>,
}

/// Observations begun and ended every way there is (deregistration, re-registration with
/// the same token, a final response from the upstream, an RST from the client, the client
/// unreachable, staleness), at random, by clients of a few sources over UDP and streams:
/// after each step each source holds exactly its live observations, and once all have ended
/// no source holds any.
/// A notification that a client, picked at random among those with a message layer, resets
/// (RFC 7641 §3.6): a UDP client's. A stream peer has no RST (RFC 8323 §2.2): it deregisters
/// or goes.
fn reset_a_notification(
    p: &mut Proxy,
    rng: &mut SmallRng,
    live: &mut Vec<Live>,
    now: Timestamp,
    mid: u16,
) {
    let resets: Vec<usize> = (0..live.len())
        .filter(|&i| live[i].from.peer.has_message_layer())
        .collect();
    let l = live.swap_remove(resets[rng.random_range(0..resets.len())]);
    let n = notification(MessageType::Non, mid, &l.up_token, 2 + u32::from(mid));
    p.handle_upstream_datagram(now, EP0, &n);
    let relayed = answer_to(p, l.from.peer, &l.token).expect("notified");
    let mut rst = Vec::new();
    crate::coap::rst(&mut rst, Message::parse(&relayed).unwrap().message_id());
    p.handle_client_datagram(now, l.from, &rst);
}

#[test]
fn what_each_source_holds_is_given_back_however_its_observations_end() {
    let mut refused = [0u64; 2];
    for seed in 1..=8u64 {
        let mut p = reverse(|c| {
            c.limits.max_observations = 30;
            c.limits.max_observations_per_source = 6;
        });
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut live: Vec<Live> = Vec::new();
        let mut sources = BTreeSet::new();
        let mut now = t(0);
        for step in 0..600u16 {
            now += Duration::from_millis(10);
            let mid = step;
            match rng.random_range(0..20) {
                0..=11 => {
                    let from = random_client(&mut rng);
                    sources.insert(SourceKey::of(from, PrefixLengths::DEFAULT));
                    let token = vec![rng.random_range(0..4u8)];
                    // The same token again ends the older observation first (RFC 7641 §3.6).
                    live.retain(|l| !(l.from.peer == from.peer && l.token == token));
                    let (yes, up_token) = register(&mut p, now, from, (&token, mid, "obs"));
                    if yes {
                        live.push(Live {
                            from,
                            token,
                            up_token,
                        });
                    }
                }
                12 | 13 if !live.is_empty() => {
                    let l = live.swap_remove(rng.random_range(0..live.len()));
                    let deregister = observe_request(&l.token, mid, "obs", 1);
                    p.handle_client_datagram(now, l.from, &deregister);
                    let (up_mid, up_token) = upstream_request(&mut p);
                    let plain = plain_answer(MessageType::Ack, up_mid, &up_token, Code::CONTENT);
                    p.handle_upstream_datagram(now, EP0, &plain);
                }
                14 | 15 if !live.is_empty() => {
                    let l = live.swap_remove(rng.random_range(0..live.len()));
                    let gone = plain_answer(MessageType::Non, mid, &l.up_token, Code::NOT_FOUND);
                    p.handle_upstream_datagram(now, EP0, &gone);
                }
                16 | 17 if live.iter().any(|l| l.from.peer.has_message_layer()) => {
                    reset_a_notification(&mut p, &mut rng, &mut live, now, mid)
                }
                18 if !live.is_empty() => {
                    let peer = live[rng.random_range(0..live.len())].from.peer;
                    p.handle_client_unreachable(now, peer);
                    live.retain(|l| l.from.peer != peer);
                }
                _ => {}
            }
            drain(&mut p);
            check_held(&p, &sources, &live, seed, step);
        }
        let c = p.counters();
        refused[0] += c.observe.refused_share;
        refused[1] += c.observe.refused_table;
        // Whatever is left goes stale: no notification for its Max-Age (60 s) and 30 s more.
        let end = now + Duration::from_secs(200);
        while let Some(at) = p.poll_timeout().filter(|&at| at <= end) {
            p.handle_timeout(at);
            drain(&mut p);
        }
        live.clear();
        check_held(&p, &sources, &live, seed, u16::MAX);
        assert_eq!(p.usage.observing_sources(), 0, "seed {seed}");
    }
    assert!(
        refused.iter().all(|&n| n > 0),
        "both limits reached: {refused:?}"
    );
}

/// Every source holds as many observations as are alive for it, and they add up to the gauge.
fn check_held(p: &Proxy, sources: &BTreeSet<SourceKey>, live: &[Live], seed: u64, step: u16) {
    let key = |l: &Live| SourceKey::of(l.from, PrefixLengths::DEFAULT);
    for source in sources {
        let want = live.iter().filter(|l| key(l) == *source).count();
        let held = p.usage.observations_of(source);
        assert_eq!(held, want, "seed {seed}, step {step}: {source:?}");
    }
    let total = p.counters().observe.observations;
    assert_eq!(total, live.len() as u64, "seed {seed}, step {step}");
    assert_eq!(p.usage.observing_sources(), {
        let s: BTreeSet<SourceKey> = live.iter().map(key).collect();
        s.len()
    });
}

/// One of 24 clients: 8 addresses, each with two UDP ports and a stream connection.
fn random_client(rng: &mut SmallRng) -> ClientOrigin {
    let host = rng.random_range(1..=8u8);
    match rng.random_range(0..3) {
        0 => conn(u32::from(host), [198, 51, 100, host]),
        n => SocketAddr::from(([198, 51, 100, host], 40000 + n)).into(),
    }
}

/// A response without Observe: it ends an observation (RFC 7641 §3.2), or answers a
/// deregistration.
fn plain_answer(ty: MessageType, mid: u16, token: &[u8], code: Code) -> Vec<u8> {
    let mut out = Vec::new();
    MessageBuilder::new(&mut out, ty, code, mid, token)
        .finish()
        .unwrap();
    out
}
