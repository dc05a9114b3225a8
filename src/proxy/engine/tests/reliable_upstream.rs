//! A reliable upstream (CoAP over TCP or TLS, issue 41): its messages have no type or
//! Message ID (RFC 8323 §2.2, §3.2), so the engine takes any response by its token, sends it
//! no ACK or RST, and ends an observation it no longer wants with a GET deregistration
//! (RFC 7641 §3.6, RFC 8323 §7.4).

use crate::coap::option::{encode_uint, ACCEPT, OBSERVE, URI_PATH};
use crate::coap::{Code, Message, MessageBuilder, MessageType};
use crate::proxy::{Destination, Proxy, Transmit};

use super::observers::{observer, reverse, t};
use super::{drain, EP0};

/// The header a stream core hands every message over with (`coap_tcp::frame::ENGINE_HEADER`).
const PLACEHOLDER: (MessageType, u16) = (MessageType::Con, 0);

/// A reverse proxy whose upstream is reached over TCP.
fn reliable() -> Proxy {
    let mut p = reverse(|_| {});
    p.set_reliable_upstream("127.0.0.1:5684".parse().unwrap());
    p
}

/// A proven UDP client's CON GET of `/obs`, registering if `observe`: the upstream token.
fn request(p: &mut Proxy, token: &[u8], observe: bool) -> Vec<u8> {
    p.prove_source(t(0), observer());
    let mut req = Vec::new();
    let mut b = MessageBuilder::new(&mut req, MessageType::Con, Code::GET, 7, token);
    if observe {
        b.option(OBSERVE, &[]);
    }
    b.option(URI_PATH, b"obs");
    b.option(ACCEPT, &[50]);
    b.finish().unwrap();
    p.handle_client_datagram(t(0), observer(), &req);
    let out = drain(p);
    let sent = upstream(&out);
    assert_eq!(sent.len(), 1);
    Message::parse(&sent[0].payload).unwrap().token().to_vec()
}

/// A 2.05 from the upstream with `header`, and Observe `seq` if given.
fn response(header: (MessageType, u16), token: &[u8], seq: Option<u32>) -> Vec<u8> {
    let mut out = Vec::new();
    let (ty, mid) = header;
    let mut b = MessageBuilder::new(&mut out, ty, Code::CONTENT, mid, token);
    if let Some(seq) = seq {
        b.option(OBSERVE, &encode_uint(seq));
    }
    b.payload(b"v");
    b.finish().unwrap();
    out
}

fn upstream(out: &[Transmit]) -> Vec<&Transmit> {
    (out.iter())
        .filter(|tx| matches!(tx.to, Destination::Upstream(_)))
        .collect()
}

fn to_client(out: &[Transmit]) -> Vec<Message<'_>> {
    (out.iter())
        .filter(|tx| matches!(tx.to, Destination::Client(_)))
        .map(|tx| Message::parse(&tx.payload).unwrap())
        .collect()
}

fn strays(p: &Proxy) -> u64 {
    p.counters().strays.unmatched_upstream
}

#[test]
fn a_reliable_upstreams_response_is_matched_by_token_whatever_its_type_and_message_id() {
    let mut p = reliable();
    // A CON with Message ID 0, a NON and an ACK of a Message ID the request never had: each
    // is the answer, since only the token counts.
    for (i, header) in [
        PLACEHOLDER,
        (MessageType::Non, 999),
        (MessageType::Ack, 4321),
    ]
    .into_iter()
    .enumerate()
    {
        let token = request(&mut p, format!("c{i}").as_bytes(), false);
        p.handle_upstream_datagram(t(5), EP0, &response(header, &token, None));
        let out = drain(&mut p);
        assert!(upstream(&out).is_empty(), "{header:?}: no ACK, no RST");
        let answers = to_client(&out);
        assert_eq!(answers.len(), 1, "{header:?}");
        let a = &answers[0];
        assert_eq!((a.code(), a.payload()), (Code::CONTENT, &b"v"[..]));
        assert_eq!((a.msg_type(), a.message_id()), (MessageType::Ack, 7));
        // Again: the exchange is gone, so it is a stray, dropped without an RST.
        let before = strays(&p);
        p.handle_upstream_datagram(t(6), EP0, &response(header, &token, None));
        assert!(drain(&mut p).is_empty());
        assert_eq!(strays(&p), before + 1);
    }
    // A token that never went: a stray.
    p.handle_upstream_datagram(t(7), EP0, &response(PLACEHOLDER, b"nobody", None));
    assert!(drain(&mut p).is_empty());
    assert_eq!(p.counters().traffic.relayed_2xx, 3);
    assert_eq!(p.live_exchanges(), 0);
}

#[test]
fn a_reliable_upstreams_notifications_are_relayed_by_token_as_nons_and_never_acknowledged() {
    let mut p = reliable();
    let token = request(&mut p, b"ob", true);
    p.handle_upstream_datagram(t(10), EP0, &response(PLACEHOLDER, &token, Some(1)));
    let out = drain(&mut p);
    assert_eq!(to_client(&out)[0].msg_type(), MessageType::Ack);
    assert_eq!(p.upstreams.registrations_kept(), 1, "kept to deregister");
    for seq in 2..6 {
        p.handle_upstream_datagram(
            t(10 * u64::from(seq)),
            EP0,
            &response(PLACEHOLDER, &token, Some(seq)),
        );
        let out = drain(&mut p);
        assert!(upstream(&out).is_empty(), "no ACK for the placeholder CON");
        let got = to_client(&out);
        assert_eq!(got.len(), 1);
        // The placeholder is no CON of the upstream's: the relay's own cadence decides.
        assert_eq!(got[0].msg_type(), MessageType::Non, "notification {seq}");
    }
    assert_eq!(p.counters().observe.notifications_relayed, 4);
    // A final response (no Observe) ends it upstream: nothing left to deregister.
    p.handle_upstream_datagram(t(100), EP0, &response(PLACEHOLDER, &token, None));
    assert_eq!(to_client(&drain(&mut p)).len(), 1);
    assert_eq!(p.upstreams.registrations_kept(), 0);
    assert_eq!(p.live_exchanges(), 0);
}

#[test]
fn a_notification_after_the_client_left_ends_in_a_deregistration_get() {
    let mut p = reliable();
    let token = request(&mut p, b"ob", true);
    p.handle_upstream_datagram(t(10), EP0, &response(PLACEHOLDER, &token, Some(1)));
    drain(&mut p);
    // The client goes (ICMP): its observation ends, and the upstream does not know yet.
    p.handle_client_unreachable(t(20), observer());
    assert!(upstream(&drain(&mut p)).is_empty());
    let before = strays(&p);
    p.handle_upstream_datagram(t(30), EP0, &response(PLACEHOLDER, &token, Some(2)));
    let out = drain(&mut p);
    assert!(to_client(&out).is_empty());
    assert_eq!(strays(&p), before + 1);
    let sent = upstream(&out);
    assert_eq!(sent.len(), 1, "one deregistration, no RST");
    let get = Message::parse(&sent[0].payload).unwrap();
    assert_eq!((get.code(), get.token()), (Code::GET, &token[..]));
    assert_eq!(
        get.option(OBSERVE),
        Some(&[1u8][..]),
        "Observe: 1 (deregister)"
    );
    assert_eq!(
        get.option(URI_PATH),
        Some(&b"obs"[..]),
        "the registration's options"
    );
    assert_eq!(get.option(ACCEPT), Some(&[50u8][..]));
    // Its answer, or a notification already on its way, finds nothing: dropped, once.
    p.handle_upstream_datagram(t(40), EP0, &response(PLACEHOLDER, &token, None));
    assert!(drain(&mut p).is_empty());
    assert_eq!(strays(&p), before + 2);
    assert_eq!(p.upstreams.registrations_kept(), 0);
}

#[test]
fn a_closed_connection_takes_its_registrations_with_it() {
    let mut p = reliable();
    let token = request(&mut p, b"ob", true);
    p.handle_upstream_datagram(t(10), EP0, &response(PLACEHOLDER, &token, Some(1)));
    drain(&mut p);
    p.handle_client_unreachable(t(20), observer());
    p.handle_upstream_closed(t(30), EP0);
    drain(&mut p);
    assert_eq!(
        p.upstreams.registrations_kept(),
        0,
        "the origin dropped them (RFC 8323 §7.4)"
    );
    // A new connection on the endpoint holds no such observation: nothing to deregister.
    p.handle_upstream_datagram(t(40), EP0, &response(PLACEHOLDER, &token, Some(2)));
    assert!(drain(&mut p).is_empty());
}
