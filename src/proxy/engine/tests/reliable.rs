//! Peers without a message layer (issue 41): a stream connection (RFC 8323) has no types,
//! Message IDs, ACKs or retransmissions (§2.2, §3.2), and the engine keeps none with it. Its
//! requests carry a placeholder header, which the engine ignores; its answers and
//! notifications go once each, with a placeholder header the transport drops, and an
//! exchange retires as soon as its answer is handed over.

use std::time::Duration;

use crate::coap::option::{OBSERVE, URI_PATH};
use crate::coap::{Code, Message, MessageBuilder, MessageType};
use crate::proxy::engine::exchange::RELIABLE_HEADER;
use crate::proxy::{ConnectionId, Destination, Peer, Proxy, Transmit};

use super::observers::{notification, reverse, t};
use super::{drain, EP0};

/// Stream connection `n`, as the stream listener names it to the engine.
fn stream(n: u32) -> Peer {
    Peer::Stream(ConnectionId::new(n, 0))
}

/// A GET of `/path` as a stream core hands it to the engine: the fixed placeholder header
/// (`coap_tcp::frame::ENGINE_HEADER`: a CON with Message ID 0) unless `header` says another.
fn get(token: &[u8], path: &str, header: (MessageType, u16), observe: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let (ty, mid) = header;
    let mut b = MessageBuilder::new(&mut out, ty, Code::GET, mid, token);
    if observe {
        b.option(OBSERVE, &[]);
    }
    b.option(URI_PATH, path.as_bytes());
    b.finish().unwrap();
    out
}

const PLACEHOLDER: (MessageType, u16) = (MessageType::Con, 0);

/// What went to `client`, parsed.
fn to_client(out: &[Transmit], client: Peer) -> Vec<Message<'_>> {
    (out.iter())
        .filter(|tx| tx.to == Destination::Client(client))
        .map(|tx| Message::parse(&tx.payload).unwrap())
        .collect()
}

/// The requests that went upstream: their Message IDs and tokens.
fn upstream_requests(out: &[Transmit]) -> Vec<(u16, Vec<u8>)> {
    (out.iter())
        .filter(|tx| tx.to == Destination::Upstream(EP0))
        .map(|tx| Message::parse(&tx.payload).unwrap())
        .filter(|m| m.code().is_request())
        .map(|m| (m.message_id(), m.token().to_vec()))
        .collect()
}

/// The upstream's piggybacked 2.05 to the request `(mid, token)`.
fn content(mid: u16, token: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, MessageType::Ack, Code::CONTENT, mid, token);
    b.payload(b"hello");
    b.finish().unwrap();
    out
}

/// Runs every timer due up to `until`, and returns everything sent meanwhile.
fn run_until(p: &mut Proxy, until: crate::time::Timestamp) -> Vec<Transmit> {
    let mut out = Vec::new();
    while let Some(at) = p.poll_timeout().filter(|&at| at <= until) {
        p.handle_timeout(at);
        out.extend(drain(p));
    }
    out
}

#[test]
fn an_answer_to_a_stream_peer_retires_the_exchange_at_once() {
    let mut p = reverse(|_| {});
    let client = stream(1);
    p.handle_client_datagram(t(0), client, &get(b"t1", "a", PLACEHOLDER, false));
    let (mid, token) = upstream_requests(&drain(&mut p)).remove(0);
    assert_eq!(p.live_exchanges(), 1);
    p.handle_upstream_datagram(t(5), EP0, &content(mid, &token));
    let out = drain(&mut p);
    let answers = to_client(&out, client);
    assert_eq!(answers.len(), 1, "the answer, and no empty ACK before it");
    let a = &answers[0];
    assert_eq!(
        (a.code(), a.token(), a.payload()),
        (Code::CONTENT, &b"t1"[..], &b"hello"[..])
    );
    assert_eq!((a.msg_type(), a.message_id()), RELIABLE_HEADER);
    // Gone when handed over: nothing delivered, tracked, indexed or kept for it.
    assert_eq!(p.live_exchanges(), 0);
    assert_eq!(p.deliveries.sizes(), (0, 0, 0));
    let kept = p.kept.sizes();
    assert_eq!(
        (kept.by_client, kept.answers, kept.local_answers),
        (0, 0, 0)
    );
    assert!(to_client(&run_until(&mut p, t(600_000)), client).is_empty());
    assert_eq!(p.counters().traffic.client_retransmissions, 0);
}

#[test]
fn no_empty_ack_goes_to_a_stream_peer_however_slow_the_upstream() {
    let mut p = reverse(|_| {});
    let client = stream(2);
    p.handle_client_datagram(t(0), client, &get(b"s", "slow", PLACEHOLDER, false));
    let (mid, token) = upstream_requests(&drain(&mut p)).remove(0);
    // Far past `--ack-delay` (100 ms); the upstream is retried meanwhile, the client hears
    // nothing.
    let waited = run_until(&mut p, t(10_000));
    assert!(to_client(&waited, client).is_empty(), "no empty ACK");
    assert!(
        !upstream_requests(&waited).is_empty(),
        "the upstream was retried"
    );
    assert_eq!(p.counters().traffic.empty_acks_sent, 0);
    p.handle_upstream_datagram(t(10_000), EP0, &content(mid, &token));
    let answers = drain(&mut p);
    let answers = to_client(&answers, client);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].code(), Code::CONTENT);
    assert_eq!(p.live_exchanges(), 0, "retired at once, not delivering");
}

#[test]
fn notifications_to_a_stream_peer_go_once_each_and_are_never_retransmitted() {
    let mut p = reverse(|_| {});
    let client = stream(3);
    p.handle_client_datagram(t(0), client, &get(b"ob", "obs", PLACEHOLDER, true));
    let (mid, up_token) = upstream_requests(&drain(&mut p)).remove(0);
    let registered = notification(MessageType::Ack, mid, &up_token, 1);
    p.handle_upstream_datagram(t(10), EP0, &registered);
    let first = drain(&mut p);
    assert_eq!(
        to_client(&first, client).len(),
        1,
        "the registration's answer"
    );
    // 45 notifications, CON and NON from upstream, one every 50 s (within Max-Age): past
    // `--observe-con-every` (20), each still goes once, and none is retransmitted.
    for i in 1..=45u16 {
        let now = t(50_000 * u64::from(i));
        let mut out = run_until(&mut p, now);
        let ty = match i % 3 {
            0 => MessageType::Con,
            _ => MessageType::Non,
        };
        p.handle_upstream_datagram(
            now,
            EP0,
            &notification(ty, 100 + i, &up_token, 1 + u32::from(i)),
        );
        out.extend(drain(&mut p));
        out.extend(run_until(&mut p, now + Duration::from_secs(45)));
        let got = to_client(&out, client);
        assert_eq!(got.len(), 1, "notification {i} once");
        assert_eq!((got[0].msg_type(), got[0].message_id()), RELIABLE_HEADER);
        assert!(got[0].option(OBSERVE).is_some());
    }
    let c = p.counters();
    assert_eq!(c.observe.observations, 1, "the observation stays");
    assert_eq!(c.observe.notifications_relayed, 45);
    assert_eq!(c.observe.notifications_con, 0);
    assert_eq!(c.traffic.client_retransmissions, 0);
    assert_eq!(p.deliveries.sizes(), (0, 0, 0), "no Message ID to wait for");
    assert_eq!(p.usage.answer_bytes(), 0, "nothing kept for a replay");
    // It ends as any observation does: a final response goes once, and the exchange retires.
    let mut last = content(200, &up_token);
    last[0] = (last[0] & 0x0f) | 0x50; // a NON, without Observe
    p.handle_upstream_datagram(t(2_300_000), EP0, &last);
    assert_eq!(to_client(&drain(&mut p), client).len(), 1);
    assert_eq!(
        (p.counters().observe.observations, p.live_exchanges()),
        (0, 0)
    );
}

#[test]
fn requests_with_one_token_in_turn_are_each_forwarded() {
    let mut p = reverse(|_| {});
    let client = stream(4);
    // The same bytes twice, as a stream core hands them: each is a new request.
    let request = get(b"t1", "a", PLACEHOLDER, false);
    for round in 0..2u64 {
        p.handle_client_datagram(t(round * 10), client, &request);
        let sent = upstream_requests(&drain(&mut p));
        assert_eq!(sent.len(), 1, "request {round} forwarded");
        let (mid, token) = &sent[0];
        p.handle_upstream_datagram(t(round * 10 + 5), EP0, &content(*mid, token));
        assert_eq!(to_client(&drain(&mut p), client).len(), 1);
    }
    let c = p.counters();
    assert_eq!((c.traffic.forwarded, c.traffic.client_duplicates), (2, 0));
    // A UDP client's same bytes again are its retransmission: answered, not forwarded.
    let udp = super::observers::observer();
    p.prove_source(t(20), udp);
    for _ in 0..2 {
        p.handle_client_datagram(t(20), udp, &request);
    }
    assert_eq!(upstream_requests(&drain(&mut p)).len(), 1);
    assert_eq!(p.counters().traffic.client_duplicates, 1);
}

#[test]
fn the_header_a_stream_peer_sends_is_ignored() {
    let mut p = reverse(|_| {});
    let client = stream(5);
    // A NON with Message ID 77 gets what a CON with 0 gets: no duplicate check, the same
    // placeholder header back, no Message ID of ours.
    for header in [(MessageType::Non, 77), (MessageType::Non, 77), PLACEHOLDER] {
        p.handle_client_datagram(t(0), client, &get(b"h", "a", header, false));
        let (mid, token) = upstream_requests(&drain(&mut p)).remove(0);
        p.handle_upstream_datagram(t(1), EP0, &content(mid, &token));
        let out = drain(&mut p);
        let answers = to_client(&out, client);
        assert_eq!(answers.len(), 1);
        assert_eq!(
            (answers[0].msg_type(), answers[0].message_id()),
            RELIABLE_HEADER
        );
    }
    assert_eq!(p.counters().traffic.forwarded, 3);
    // The proxy's own answers too: forward proxying is off here, so a Proxy-Uri gets 5.05.
    let mut refused = Vec::new();
    let mut b = MessageBuilder::new(&mut refused, MessageType::Non, Code::GET, 9, b"r");
    b.option(crate::coap::option::PROXY_URI, b"coap://example.net/x");
    b.finish().unwrap();
    p.handle_client_datagram(t(2), client, &refused);
    let out = drain(&mut p);
    let answers = to_client(&out, client);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].code(), Code::PROXYING_NOT_SUPPORTED);
    assert_eq!(
        (answers[0].msg_type(), answers[0].message_id()),
        RELIABLE_HEADER
    );
    assert_eq!(p.kept.sizes().local_answers, 0, "nothing kept for a replay");
}
