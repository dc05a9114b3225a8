//! The answers kept for retransmissions, in bytes: a store holds at most `--max-cached-bytes`,
//! one client at most `--max-cached-bytes-per-client`, and an answer that never went is not
//! kept as if it had (its key alone is, where a second forward must not happen).

use std::net::SocketAddr;
use std::time::Duration;

use crate::coap::option::{MAX_AGE, URI_PATH};
use crate::coap::{Code, Message, MessageBuilder, MessageType};
use crate::proxy::{Destination, Peer, Proxy, Transmit};
#[cfg(feature = "cache")]
use crate::proxy::{LocalClient, ProxyConfig};
use crate::time::Timestamp;

use super::regressions::proxy;
use super::{drain, EP0};

/// A client that has proven its address (its answers are not held for the proof).
fn client(p: &mut Proxy, n: u16) -> SocketAddr {
    let addr = SocketAddr::from(([127, 0, 0, 3], 40_000 + n));
    p.prove_source(Timestamp::ZERO, addr);
    addr
}

fn secs(s: f64) -> Timestamp {
    Timestamp::ZERO + Duration::from_secs_f64(s)
}

/// A CON request for `/path`, its token the MID's bytes.
fn request(code: Code, mid: u16, path: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, MessageType::Con, code, mid, &mid.to_be_bytes());
    b.option(URI_PATH, path);
    b.finish().unwrap();
    out
}

/// The upstream's piggybacked 2.05 to `up` (fresh for 10 minutes), `len` bytes of payload.
fn content(up: &[u8], len: usize) -> Vec<u8> {
    let up = Message::parse(up).unwrap();
    let mut out = Vec::new();
    let ty = MessageType::Ack;
    let mut b = MessageBuilder::new(&mut out, ty, Code::CONTENT, up.message_id(), up.token());
    b.option(MAX_AGE, &[2, 88]);
    b.payload(&vec![0x61; len]);
    b.finish().unwrap();
    out
}

/// `from` sends `req` at `now`; the upstream answers whatever reaches it with `len` bytes.
/// Returns what the client got, and how many requests went upstream.
fn ask(
    p: &mut Proxy,
    now: Timestamp,
    from: impl Into<Peer>,
    req: &[u8],
    len: usize,
) -> (Vec<Vec<u8>>, usize) {
    let from = from.into();
    p.handle_client_datagram(now, from, req);
    let (mut got, mut forwarded) = (Vec::new(), 0);
    let mut out = drain(p);
    while !out.is_empty() {
        for Transmit { to, payload } in std::mem::take(&mut out) {
            match to {
                Destination::Upstream(_) => {
                    forwarded += 1;
                    p.handle_upstream_datagram(now, EP0, &content(&payload, len));
                }
                Destination::Client(c) if c == from => got.push(payload),
                Destination::Client(_) => {}
            }
        }
        out = drain(p);
    }
    (got, forwarded)
}

#[test]
#[cfg(feature = "cache")]
fn ten_thousand_hits_of_8_kb_keep_a_share_of_bytes_and_the_others_still_replay() {
    // The finding: one source, 10,000 CON GETs of a cached 8,000-byte resource, every hit
    // copied whole into the store (80 MB, 10,000 being one client's share in answers).
    let mut p = proxy(|c| c.cache_size = 1 << 20);
    let (flooder, other) = (client(&mut p, 1), client(&mut p, 2));
    let (filled, forwarded) = ask(&mut p, secs(0.0), other, &request(Code::GET, 1, b"r"), 8000);
    assert_eq!((filled.len(), forwarded), (1, 1));
    // The other client's hit, and a relayed answer of its own.
    let hit = request(Code::GET, 2, b"r");
    let (first_hit, _) = ask(&mut p, secs(0.5), other, &hit, 8000);
    let relayed = request(Code::POST, 3, b"p");
    let (first_relayed, _) = ask(&mut p, secs(0.5), other, &relayed, 8000);
    for mid in 0..10_000u16 {
        let (got, forwarded) = ask(
            &mut p,
            secs(1.0),
            flooder,
            &request(Code::GET, mid, b"r"),
            0,
        );
        assert_eq!((got.len(), forwarded), (1, 0), "a hit");
    }
    // The flooder's share, the dead answers a compaction has not dropped yet (at most half
    // as many bytes, and one datagram), and the other client's three answers.
    let share = ProxyConfig::default().kept.max_cached_bytes_per_client;
    let kept = p.counters().kept.cached_answer_bytes as usize;
    assert!(
        kept <= share + share / 2 + 65_536 + 3 * 8100,
        "{kept} bytes kept"
    );
    assert!(kept <= ProxyConfig::default().kept.max_cached_bytes);
    assert!(p.counters().kept.share_evictions > 9_800);
    // The other client's retransmissions get their answers again, and nothing goes upstream.
    assert_eq!(ask(&mut p, secs(2.0), other, &hit, 0), (first_hit, 0));
    assert_eq!(
        ask(&mut p, secs(2.0), other, &relayed, 0),
        (first_relayed, 0)
    );
    // So does the flooder's latest.
    let latest = request(Code::GET, 9_999, b"r");
    assert_eq!(ask(&mut p, secs(2.0), flooder, &latest, 0).0.len(), 1);
    assert_eq!(p.counters().kept.early_evictions, 0);
}

#[test]
fn past_the_byte_bound_the_oldest_answer_goes_as_past_the_count_bound() {
    // Its retransmission is then a new request, as after any early eviction: forwarded
    // again, counted, and said once. Room for three answers of 1011 bytes, not four.
    let mut p = proxy(|c| c.kept.max_cached_bytes = 3100);
    let clients: Vec<_> = (1..=4).map(|n| client(&mut p, n)).collect();
    let reqs: Vec<_> = (1..=4).map(|mid| request(Code::GET, mid, b"r")).collect();
    for (c, req) in clients.iter().zip(&reqs) {
        assert_eq!(ask(&mut p, secs(1.0), *c, req, 1000).1, 1);
    }
    let counters = p.counters();
    assert_eq!(
        (counters.kept.cache_evictions, counters.kept.early_evictions),
        (1, 1)
    );
    assert_eq!(counters.kept.cached_answer_bytes, 3 * 1011);
    assert_eq!(ask(&mut p, secs(2.0), clients[1], &reqs[1], 0).1, 0, "kept");
    assert_eq!(
        ask(&mut p, secs(2.0), clients[0], &reqs[0], 0).1,
        1,
        "evicted"
    );
}

#[test]
fn an_answer_longer_than_a_clients_share_replays_nothing_and_never_runs_twice() {
    let mut p = proxy(|c| c.kept.max_cached_bytes_per_client = 1000);
    let c = client(&mut p, 1);
    let post = request(Code::POST, 1, b"p");
    let (got, forwarded) = ask(&mut p, secs(1.0), c, &post, 2000);
    assert_eq!((got.len(), forwarded), (1, 1));
    let small = request(Code::POST, 2, b"p");
    let (got_small, _) = ask(&mut p, secs(1.0), c, &small, 10);
    // The long answer's retransmission gets nothing and is not forwarded again; the small
    // one's gets its answer.
    assert_eq!(ask(&mut p, secs(3.0), c, &post, 0), (Vec::new(), 0));
    assert_eq!(ask(&mut p, secs(3.0), c, &small, 0), (got_small.clone(), 0));
    let counters = p.counters();
    assert_eq!(counters.kept.answers_too_large_to_keep, 1);
    assert_eq!(counters.kept.cached_answer_bytes, got_small[0].len() as u64);
}

#[test]
fn an_answer_the_send_rate_dropped_is_kept_without_its_bytes() {
    // It never went: kept as it was (bytes a client over its rate could pile up), its
    // retransmission would bring it once the rate allows, as if owed. Its key stays, so
    // the request is not forwarded again; the retransmission gets nothing.
    let mut p = proxy(|c| {
        c.client_budget.bytes_per_sec = 4096;
        c.client_budget.burst_bytes = 65_527;
    });
    let c = client(&mut p, 1);
    let (first, second) = (request(Code::GET, 1, b"a"), request(Code::GET, 2, b"b"));
    let (got, _) = ask(&mut p, secs(0.0), c, &first, 60_000);
    assert_eq!(got.len(), 1);
    assert_eq!(ask(&mut p, secs(0.0), c, &second, 60_000), (Vec::new(), 1));
    assert_eq!(p.counters().proof.over_budget_dropped, 1);
    assert_eq!(p.counters().kept.cached_answer_bytes, got[0].len() as u64);
    // Once the rate allows it again, the first answer is replayed, the second not, and
    // neither request goes upstream again.
    assert_eq!(ask(&mut p, secs(20.0), c, &first, 0), (got, 0));
    assert_eq!(ask(&mut p, secs(40.0), c, &second, 0), (Vec::new(), 0));
}

#[test]
#[cfg(feature = "cache")]
fn a_hit_the_send_rate_dropped_is_not_kept_and_its_retransmission_is_answered_afresh() {
    let mut p = proxy(|c| {
        c.cache_size = 1 << 20;
        c.client_budget.bytes_per_sec = 4096;
        c.client_budget.burst_bytes = 65_527;
    });
    let (filler, c) = (client(&mut p, 1), client(&mut p, 2));
    ask(
        &mut p,
        secs(0.0),
        filler,
        &request(Code::GET, 1, b"r"),
        40_000,
    );
    let (first, second) = (request(Code::GET, 1, b"r"), request(Code::GET, 2, b"r"));
    assert_eq!(ask(&mut p, secs(0.0), c, &first, 0).0.len(), 1);
    assert_eq!(ask(&mut p, secs(0.0), c, &second, 0), (Vec::new(), 0));
    assert_eq!(
        p.kept.sizes().local_answers,
        1,
        "only the hit that went is kept"
    );
    // A GET: its retransmission is a new request, answered from the cache, not forwarded.
    let (again, forwarded) = ask(&mut p, secs(20.0), c, &second, 0);
    assert_eq!((again.len(), forwarded), (1, 0));
    assert_eq!(p.kept.sizes().local_answers, 2);
}

#[test]
#[cfg(feature = "cache")]
fn answers_to_an_in_process_client_are_kept_without_their_bytes() {
    // The HTTP cross-proxy gets every answer in the process: its retransmission has it
    // already, and needs only the key that stops a second forward.
    let mut p = proxy(|c| c.cache_size = 1 << 20);
    let http = Peer::Local(LocalClient::new(1));
    let (fill, hit) = (request(Code::GET, 1, b"r"), request(Code::GET, 2, b"r"));
    assert_eq!(ask(&mut p, secs(0.0), http, &fill, 60_000).0.len(), 1);
    assert_eq!(ask(&mut p, secs(0.0), http, &hit, 0).0.len(), 1);
    assert_eq!(
        (p.kept.sizes().answers, p.kept.sizes().local_answers),
        (1, 1)
    );
    assert_eq!(p.counters().kept.cached_answer_bytes, 0);
    assert_eq!(ask(&mut p, secs(1.0), http, &fill, 0), (Vec::new(), 0));
    assert_eq!(ask(&mut p, secs(1.0), http, &hit, 0), (Vec::new(), 0));
}
