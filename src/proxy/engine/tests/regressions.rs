//! Regressions: each was found by the simulation in `tests/proxy_sim.rs` (or a benchmark) and is
//! reduced here to the few datagrams that show it.

use std::net::SocketAddr;
use std::time::Duration;

use crate::coap::option::{decode_uint, PROXY_URI, URI_PATH};
use crate::coap::{Code, Message, MessageBuilder, MessageType};
use crate::time::Timestamp;

use super::{drain, started_at, EP0};
use crate::proxy::{Destination, Proxy, ProxyConfig, RetryPolicy, Routing, Transmit};

/// A proxy whose endpoint sockets are open at time zero.
fn started(config: ProxyConfig) -> Proxy {
    started_at(config, Timestamp::ZERO)
}

/// A reverse proxy to one upstream (UpstreamId 0), adjusted by `edit`.
pub(super) fn proxy(edit: impl FnOnce(&mut ProxyConfig)) -> Proxy {
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
        .filter(|t| t.to == Destination::Client(c.into()))
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
    assert_eq!(
        (c.own_answers.gateway_timeout_5_04, c.traffic.relayed_5xx),
        (1, 0)
    );
}

#[test]
fn a_retransmission_after_5_03_gets_the_same_5_03_and_is_not_forwarded() {
    let mut p = proxy(|c| c.limits.max_inflight = 1);
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
    // (1000 answers at one instant: past any sane send budget, which is not under test.)
    let mut p = proxy(|c| c.client_budget.bytes_per_sec = 0);
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
    // A client that has proven its address: every retransmission goes (`budget.rs` tests
    // those withheld from one that has not).
    p.prove_source(secs(0.0), client(1));
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
    let kept = |p: &Proxy| (p.live_exchanges(), p.kept.sizes().answers, p.clients.len());
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
        ("timers", p.exchanges.pending_timers()),
        ("by_client", p.kept.sizes().by_client),
        ("by_upstream_mid", p.upstreams.mids_mapped()),
        ("by_client_mid", p.deliveries.sizes().0),
        ("clients", p.clients.len()),
        ("observers", p.observers.len()),
        ("answers", p.kept.sizes().answers),
        ("local_answers", p.kept.sizes().local_answers),
        ("upstream_cons", p.kept.sizes().upstream_cons),
        ("by_upstream_con", p.kept.sizes().by_upstream_con),
        ("delivering", p.deliveries.sizes().1),
        ("delivering_count", p.deliveries.sizes().2),
        ("inflight", p.usage.inflight()),
        (
            "inflight_bytes",
            p.usage.gauges(0).0.in_flight_bytes as usize,
        ),
        ("answer_bytes", p.usage.answer_bytes()),
        ("out", p.gate.queued()),
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

// Issue 13: what one datagram, one request and one source may cost.

/// A forward proxy allowed to reach 127.0.0.1:5690, adjusted by `edit`.
fn forward_proxy(edit: impl FnOnce(&mut ProxyConfig)) -> Proxy {
    proxy(|c| {
        c.routing = Routing {
            upstream: None,
            allow: vec![crate::proxy::AllowedTarget {
                host: "127.0.0.1".into(),
                port: 5690,
                addr: "127.0.0.1:5690".parse().unwrap(),
            }],
            forward: true,
        };
        edit(c);
    })
}

/// A CON GET with the given options and payload.
fn con(mid: u16, options: &[(u16, &[u8])], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, MessageType::Con, Code::GET, mid, b"tk");
    options.iter().for_each(|&(n, v)| _ = b.option(n, v));
    b.payload(payload);
    b.finish().unwrap();
    out
}

/// The one answer to client 1, parsed.
fn only_answer(out: &[Transmit]) -> Message<'_> {
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].to, Destination::Client(client(1).into()));
    Message::parse(&out[0].payload).unwrap()
}

#[test]
fn a_60k_segment_proxy_uri_gets_4_13_with_size1_and_nothing_goes_upstream() {
    // The audit's datagram: 60,000 empty path segments, 8 s of work when it was forwarded.
    let mut p = forward_proxy(|_| {});
    let uri = format!("coap://127.0.0.1:5690{}", "/".repeat(60_000));
    let req = con(1, &[(PROXY_URI, uri.as_bytes())], &[]);
    p.handle_client_datagram(secs(0.0), client(1), &req);
    let out = drain(&mut p);
    let answer = only_answer(&out);
    assert_eq!(answer.code(), Code::REQUEST_ENTITY_TOO_LARGE);
    // No entity fits next to a 60 kB option: Size1 says so (RFC 7252 §5.10.9).
    let size1 = answer.option(crate::coap::option::SIZE1).map(decode_uint);
    assert_eq!(size1, Some(Ok(0)));
    let c = p.counters();
    assert_eq!(
        (c.traffic.forwarded, c.own_answers.request_too_large_4_13),
        (0, 1)
    );
    // Its retransmission gets the same answer from the kept ones.
    p.handle_client_datagram(secs(2.0), client(1), &req);
    assert_eq!(drain(&mut p), out);
}

#[test]
fn size1_is_the_largest_entity_the_request_could_have_carried() {
    let mut p = proxy(|c| c.limits.max_request_size = 100);
    let req = con(1, &[(URI_PATH, b"r")], &[7; 200]);
    p.handle_client_datagram(secs(0.0), client(1), &req);
    let out = drain(&mut p);
    let answer = only_answer(&out);
    // Header 4, token 2, Uri-Path 2, marker 1: 91 bytes of entity fit in 100.
    let size1 = answer.option(crate::coap::option::SIZE1).map(decode_uint);
    assert_eq!(
        (answer.code(), size1),
        (Code::REQUEST_ENTITY_TOO_LARGE, Some(Ok(91)))
    );
    let fits = con(2, &[(URI_PATH, b"r")], &[7; 91]);
    p.handle_client_datagram(secs(0.0), client(1), &fits);
    assert_eq!(to_upstream(&drain(&mut p)).len(), 1);
}

#[test]
fn more_options_than_max_options_get_4_02_a_proxy_uri_counting_as_its_parts() {
    let mut p = forward_proxy(|c| c.limits.max_options = 8);
    let uri = |segments: usize| format!("coap://127.0.0.1:5690{}?q", "/s".repeat(segments));
    let codes: Vec<Code> = [7, 8]
        .into_iter()
        .enumerate()
        .map(|(i, parts)| {
            let uri = uri(parts - 1);
            let req = con(i as u16, &[(PROXY_URI, uri.as_bytes())], &[]);
            p.handle_client_datagram(secs(0.0), client(1), &req);
            let out = drain(&mut p);
            match to_upstream(&out).len() {
                1 => Code::GET,
                _ => only_answer(&out).code(),
            }
        })
        .collect();
    // 7 and 8 parts are within 8 options; 8 parts and an Accept are 9.
    assert_eq!(codes, [Code::GET, Code::GET]);
    let uri = uri(7);
    let req = con(9, &[(PROXY_URI, uri.as_bytes()), (17, &[0])], &[]);
    p.handle_client_datagram(secs(0.0), client(1), &req);
    assert_eq!(only_answer(&drain(&mut p)).code(), Code::BAD_OPTION);
    let paths = vec![(URI_PATH, &b"p"[..]); 9];
    let mut r = proxy(|c| c.limits.max_options = 8);
    r.handle_client_datagram(secs(0.0), client(1), &con(1, &paths, &[]));
    assert_eq!(only_answer(&drain(&mut r)).code(), Code::BAD_OPTION);
    assert_eq!(
        (
            p.counters().own_answers.too_many_options,
            r.counters().own_answers.too_many_options
        ),
        (1, 1)
    );
    assert_eq!(p.counters().own_answers.bad_option_4_02, 1);
}

#[test]
fn past_the_inflight_byte_budget_requests_get_5_03_until_an_answer_frees_room() {
    // 400 x 60 kB CONs to a silent upstream once held 15.5 MB; now the size limit refuses
    // them (above), and what the limit lets through is bounded in bytes as well.
    let mut p = proxy(|c| (c.limits.max_request_size, c.limits.max_inflight_bytes) = (1152, 3000));
    let req = |mid| con(mid, &[(URI_PATH, b"r")], &[mid as u8; 1000]);
    let mut forwarded = Vec::new();
    let mut codes = Vec::new();
    for mid in 0..5 {
        p.handle_client_datagram(secs(0.0), client(1), &req(mid));
        let out = drain(&mut p);
        match to_upstream(&out).first() {
            Some(up) => forwarded.push(up.to_vec()),
            None => codes.push(only_answer(&out).code()),
        }
    }
    assert_eq!(
        forwarded.len(),
        2,
        "two copies of about 1 kB fit 3000 bytes, not three"
    );
    assert_eq!(codes, [Code::SERVICE_UNAVAILABLE; 3]);
    let c = p.counters();
    let sizes: u64 = forwarded.iter().map(|f| f.len() as u64).sum();
    assert_eq!(
        (c.refusals.refused_inflight_bytes, c.load.in_flight_bytes),
        (3, sizes)
    );
    // The upstream answers one: its copy is dropped and the next request fits.
    p.handle_upstream_datagram(secs(0.1), EP0, &piggybacked(&forwarded[0], Code::CONTENT));
    drain(&mut p);
    p.handle_client_datagram(secs(0.2), client(1), &req(9));
    assert_eq!(to_upstream(&drain(&mut p)).len(), 1);
    run_until(&mut p, secs(100.0));
    assert_eq!(p.counters().load.in_flight_bytes, 0, "every copy released");
}

/// Answers `n` CON GETs of `from` (MIDs `first..`) piggybacked; returns their requests.
fn answered(p: &mut Proxy, from: SocketAddr, first: u16, n: u16) -> Vec<Vec<u8>> {
    (first..first + n)
        .map(|mid| {
            let req = request(MessageType::Con, Code::GET, mid, b"c");
            p.handle_client_datagram(secs(1.0), from, &req);
            let up = drain(p).remove(0).payload;
            p.handle_upstream_datagram(secs(1.0), EP0, &piggybacked(&up, Code::CONTENT));
            drain(p);
            req
        })
        .collect()
}

#[test]
fn request_copies_reuse_a_bounded_pool_of_buffers() {
    // 200 requests in flight at once, then all answered: their copies' buffers go back to a
    // pool that keeps 64, and the next requests take them again.
    let mut p = proxy(|_| {});
    let upstream: Vec<Vec<u8>> = (0..200)
        .map(|mid| {
            let req = request(MessageType::Con, Code::GET, mid, b"c");
            p.handle_client_datagram(secs(1.0), client(1), &req);
            drain(&mut p).remove(0).payload
        })
        .collect();
    assert_eq!((p.usage.inflight(), p.usage.spares()), (200, 0));
    for up in &upstream {
        p.handle_upstream_datagram(secs(1.0), EP0, &piggybacked(up, Code::CONTENT));
    }
    drain(&mut p);
    let in_flight_bytes = p.usage.gauges(0).0.in_flight_bytes;
    assert_eq!(
        (p.usage.inflight(), in_flight_bytes, p.usage.spares()),
        (0, 0, 64)
    );
    answered(&mut p, client(1), 200, 10);
    assert_eq!(p.usage.spares(), 64, "taken and given back");
}

#[test]
fn a_flooding_client_evicts_only_its_own_oldest_answers() {
    // 110k spoofed requests once evicted 41,578 legitimate answers, whose retransmissions
    // would have run twice. Now one source keeps its share and no more.
    let mut p = proxy(|c| (c.kept.max_cached, c.kept.max_cached_per_client) = (200, 50));
    let (legit, flooder) = (client(1), client(2));
    let kept = answered(&mut p, legit, 0, 10);
    let flood = answered(&mut p, flooder, 0, 1000);
    let forwarded = p.counters().traffic.forwarded;
    // The legitimate client's retransmissions get their answers from the cache...
    for req in &kept {
        p.handle_client_datagram(secs(3.0), legit, req);
        assert_eq!(codes_to(&drain(&mut p), legit), [Code::CONTENT]);
    }
    // ...and so do the flooder's latest, while its oldest went first.
    p.handle_client_datagram(secs(3.0), flooder, &flood[999]);
    assert_eq!(codes_to(&drain(&mut p), flooder), [Code::CONTENT]);
    assert_eq!(
        p.counters().traffic.forwarded,
        forwarded,
        "nothing forwarded twice"
    );
    p.handle_client_datagram(secs(3.0), flooder, &flood[0]);
    assert_eq!(
        to_upstream(&drain(&mut p)).len(),
        1,
        "its oldest answer was evicted"
    );
    let c = p.counters();
    assert_eq!(
        (
            c.kept.early_evictions,
            c.kept.cache_evictions,
            c.kept.share_evictions
        ),
        (0, 0, 950)
    );
    assert_eq!(p.kept.sizes().answers, 10 + 50);
}

#[test]
fn the_duplicate_index_holds_exactly_the_requests_live_or_kept() {
    // An evicted or expired answer takes its index entry with it. (Stale entries were once
    // swept in bulk: under per-client shares the sweeps came every few thousand requests and
    // paused the loop for milliseconds.)
    let mut p = proxy(|c| (c.kept.max_cached, c.kept.max_cached_per_client) = (200, 50));
    let refused = con(1, &[(PROXY_URI, b"coap://example.org/r")], &[]);
    p.handle_client_datagram(secs(0.0), client(9), &refused);
    drain(&mut p);
    answered(&mut p, client(1), 0, 10);
    answered(&mut p, client(2), 0, 1000);
    let kept = p.exchanges.len() + p.kept.sizes().answers + p.kept.sizes().local_answers;
    assert_eq!(
        (p.kept.sizes().answers, p.kept.sizes().local_answers),
        (60, 1)
    );
    assert_eq!(p.kept.sizes().by_client, kept);
    p.handle_timeout(secs(300.0));
    assert_eq!(
        (
            p.kept.sizes().answers,
            p.kept.sizes().local_answers,
            p.kept.sizes().by_client
        ),
        (0, 0, 0)
    );
}

#[test]
fn a_flood_of_refused_requests_leaves_the_other_clients_refusals_alone() {
    // The proxy's own answers have their shares too: a source flooding with requests the
    // proxy refuses cannot make it forget another client's refusal (which would then be
    // answered afresh, perhaps differently, RFC 7252 §4.5).
    let mut p = proxy(|c| (c.kept.max_cached, c.kept.max_cached_per_client) = (100, 20));
    let refused = con(1, &[(PROXY_URI, b"coap://example.org/r")], &[]);
    p.handle_client_datagram(secs(0.0), client(1), &refused);
    let first = drain(&mut p);
    assert_eq!(only_answer(&first).code(), Code::PROXYING_NOT_SUPPORTED);
    for mid in 0..500 {
        p.handle_client_datagram(secs(0.5), client(2), &forward_request(mid));
    }
    drain(&mut p);
    p.handle_client_datagram(secs(2.0), client(1), &refused);
    assert_eq!(drain(&mut p), first);
    let c = p.counters();
    assert_eq!(
        (c.traffic.client_duplicates, c.kept.local_answer_evictions),
        (1, 0)
    );
    assert_eq!(c.kept.share_evictions, 480);
}

#[test]
fn the_proxys_own_answers_are_kept_max_transmit_wait_real_ones_exchange_lifetime() {
    // RFC 7252 §4.5 (see `LOCAL_ANSWER_LIFETIME`): a request the proxy refused went nowhere,
    // so its answer need only outlast the client's retransmissions.
    let mut p = proxy(|_| {});
    answered(&mut p, client(1), 0, 1);
    p.handle_client_datagram(secs(1.0), client(2), &forward_request(1));
    drain(&mut p);
    let kept = |p: &Proxy| (p.kept.sizes().answers, p.kept.sizes().local_answers);
    assert_eq!(kept(&p), (1, 1));
    run_until(&mut p, secs(1.0 + 93.2));
    assert_eq!(kept(&p), (1, 0));
    run_until(&mut p, secs(1.0 + 247.2));
    assert_eq!(kept(&p), (0, 0));
}

/// The upstream's answer to `req` with `code` and these options.
fn answer_with(req: &[u8], code: Code, options: &[(u16, &[u8])]) -> Vec<u8> {
    let req = Message::parse(req).unwrap();
    let mut out = Vec::new();
    let ty = MessageType::Ack;
    let mut b = MessageBuilder::new(&mut out, ty, code, req.message_id(), req.token());
    for &(n, v) in options {
        b.option(n, v);
    }
    b.finish().unwrap();
    out
}

#[test]
fn a_2_03_that_names_no_etag_the_request_carried_is_5_02() {
    use crate::coap::option::ETAG;
    let cases: [(&[u8], &[u8], Code); 4] = [
        (b"", b"", Code::BAD_GATEWAY),
        (b"", b"v1", Code::BAD_GATEWAY),
        (b"v1", b"v2", Code::BAD_GATEWAY),
        (b"v1", b"v1", Code::VALID),
    ];
    for (i, (asked, named, want)) in cases.into_iter().enumerate() {
        let mut p = proxy(|_| {});
        let mut req = Vec::new();
        let mut b = MessageBuilder::new(&mut req, MessageType::Con, Code::GET, 1, b"t");
        if !asked.is_empty() {
            b.option(ETAG, asked);
        }
        b.option(URI_PATH, b"r");
        b.finish().unwrap();
        p.handle_client_datagram(secs(0.0), client(1), &req);
        let out = drain(&mut p);
        let up = to_upstream(&out)[0].to_vec();
        let options: Vec<(u16, &[u8])> = match named {
            b"" => Vec::new(),
            etag => vec![(ETAG, etag)],
        };
        let answer = answer_with(&up, Code::VALID, &options);
        p.handle_upstream_datagram(secs(0.1), EP0, &answer);
        let got = codes_to(&drain(&mut p), client(1));
        assert_eq!(
            got,
            [want],
            "case {i}: asked {asked:?}, 2.03 named {named:?}"
        );
    }
}
