//! The cross-proxy's core in virtual time: the test plays the proxy engine, answering the
//! CoAP requests [`HcFront`] sends as the engine would.

use std::time::Duration;

use crate::coap::option::{
    decode_uint, encode_uint, BlockValue, BLOCK1, BLOCK2, ECHO, ETAG, OBSERVE, SIZE1,
};
use crate::coap::{Code, Message, MessageBuilder, MessageType};
use crate::http1::Request;
use crate::proxy::LocalClient;
use crate::time::Timestamp;

use super::{ConnId, HcConfig, HcFront, HttpAnswer};

const C: ConnId = ConnId(7);

fn front() -> HcFront {
    let mut f = HcFront::new(HcConfig {
        prefix: "/hc/".into(),
        forward: false,
        reverse: true,
        max_body: 64 << 10,
        max_request: 1152,
        timeout: Duration::from_secs(60),
        cors: None,
        max_streams: 4,
    });
    f.open(C);
    f
}

fn at(s: f64) -> Timestamp {
    Timestamp::ZERO + Duration::from_secs_f64(s)
}

fn request(method: &str, target: &str, fields: &[(&str, &str)], body: &[u8]) -> Request {
    Request {
        method: method.into(),
        target: target.into(),
        path: target.split('?').next().unwrap_or(target).into(),
        fields: (fields.iter())
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect(),
        body: body.to_vec(),
        keep_alive: true,
    }
}

/// What the core sent the engine since the last call.
fn sent(f: &mut HcFront) -> Vec<(LocalClient, Vec<u8>)> {
    std::iter::from_fn(|| f.poll_to_engine()).collect()
}

fn answers(f: &mut HcFront) -> Vec<HttpAnswer> {
    std::iter::from_fn(|| f.poll_answer())
        .map(|(_, a)| a)
        .collect()
}

fn status(a: &HttpAnswer) -> u16 {
    match a {
        HttpAnswer::Full { status, .. } => *status,
        other => panic!("not a whole answer: {other:?}"),
    }
}

fn body(a: &HttpAnswer) -> &[u8] {
    match a {
        HttpAnswer::Full { body, .. } => body,
        other => panic!("not a whole answer: {other:?}"),
    }
}

/// The engine answers `request` piggybacked with `code`, `options` and `payload`.
fn reply(
    f: &mut HcFront,
    now: Timestamp,
    (to, request): &(LocalClient, Vec<u8>),
    code: Code,
    options: &[(u16, &[u8])],
    payload: &[u8],
) {
    let req = Message::parse(request).unwrap();
    let ty = MessageType::Ack;
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, code, req.message_id(), req.token());
    for (n, v) in options {
        b.option(*n, v);
    }
    b.payload(payload);
    b.finish().unwrap();
    f.from_engine(now, *to, &out);
}

fn block(value: &[u8]) -> BlockValue {
    BlockValue::decode(value).unwrap()
}

#[test]
fn answers_go_out_in_request_order_though_their_coap_answers_do_not() {
    let mut f = front();
    f.request(at(0.0), C, &request("GET", "/a", &[], b""));
    f.request(at(0.0), C, &request("GET", "/b", &[], b""));
    let out = sent(&mut f);
    assert_eq!(out.len(), 2);
    reply(&mut f, at(0.1), &out[1], Code::CONTENT, &[], b"second");
    assert!(answers(&mut f).is_empty(), "the second waits for the first");
    reply(&mut f, at(0.2), &out[0], Code::CONTENT, &[], b"first");
    let got = answers(&mut f);
    assert_eq!(
        (body(&got[0]), body(&got[1])),
        (&b"first"[..], &b"second"[..])
    );
}

#[test]
fn a_body_larger_than_one_request_goes_in_block1_blocks_at_the_size_the_server_asks() {
    let mut f = front();
    let data: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    let ct = [("Content-Type", "application/octet-stream")];
    f.request(at(0.0), C, &request("PUT", "/up", &ct, &data));
    let first = sent(&mut f).remove(0);
    let m = Message::parse(&first.1).unwrap();
    assert_eq!(
        block(m.option(BLOCK1).unwrap()),
        BlockValue::new(0, true, 6)
    );
    assert_eq!(decode_uint(m.option(SIZE1).unwrap()), Ok(3000));
    // The server takes 512-byte blocks from now on (RFC 7959 §2.5).
    let smaller = BlockValue::new(0, true, 5).encode().unwrap();
    reply(
        &mut f,
        at(0.1),
        &first,
        Code::CONTINUE,
        &[(BLOCK1, &smaller)],
        b"",
    );
    let mut received = m.payload().to_vec();
    let mut now = 0.1;
    loop {
        let next = sent(&mut f).remove(0);
        let m = Message::parse(&next.1).unwrap();
        let b = block(m.option(BLOCK1).unwrap());
        assert_eq!((b.szx, b.num as usize * 512), (5, received.len()));
        received.extend_from_slice(m.payload());
        now += 0.1;
        if !b.more {
            reply(&mut f, at(now), &next, Code::CHANGED, &[], b"");
            break;
        }
        let ack = b.encode().unwrap();
        reply(
            &mut f,
            at(now),
            &next,
            Code::CONTINUE,
            &[(BLOCK1, &ack)],
            b"",
        );
    }
    assert_eq!(received, data);
    assert_eq!(status(&answers(&mut f)[0]), 204, "2.04 without payload");
}

#[test]
fn a_block2_answer_is_reassembled_and_a_changed_etag_between_blocks_is_502() {
    let mut f = front();
    f.request(at(0.0), C, &request("GET", "/big", &[], b""));
    let first = sent(&mut f).remove(0);
    let b0 = BlockValue::new(0, true, 4).encode().unwrap();
    reply(
        &mut f,
        at(0.1),
        &first,
        Code::CONTENT,
        &[(ETAG, b"v1"), (BLOCK2, &b0)],
        &[1; 256],
    );
    let second = sent(&mut f).remove(0);
    let asked = Message::parse(&second.1).unwrap();
    assert_eq!(
        block(asked.option(BLOCK2).unwrap()),
        BlockValue::new(1, false, 4)
    );
    let b1 = BlockValue::new(1, false, 4).encode().unwrap();
    reply(
        &mut f,
        at(0.2),
        &second,
        Code::CONTENT,
        &[(ETAG, b"v1"), (BLOCK2, &b1)],
        &[2; 10],
    );
    let got = answers(&mut f);
    assert_eq!(body(&got[0]).len(), 266);

    f.request(at(1.0), C, &request("GET", "/big", &[], b""));
    let first = sent(&mut f).remove(0);
    reply(
        &mut f,
        at(1.1),
        &first,
        Code::CONTENT,
        &[(ETAG, b"v1"), (BLOCK2, &b0)],
        &[1; 256],
    );
    let second = sent(&mut f).remove(0);
    reply(
        &mut f,
        at(1.2),
        &second,
        Code::CONTENT,
        &[(ETAG, b"v2"), (BLOCK2, &b1)],
        &[2; 10],
    );
    assert_eq!(
        status(&answers(&mut f)[0]),
        502,
        "two representations are never spliced"
    );
}

#[test]
fn a_request_is_retransmitted_until_acknowledged_and_504_at_the_deadline() {
    let mut f = front();
    f.request(at(0.0), C, &request("GET", "/silent", &[], b""));
    let first = sent(&mut f).remove(0);
    let mut copies = 0;
    let mut now = at(0.0);
    while let Some(next) = f.poll_timeout() {
        now = next;
        f.handle_timeout(now);
        for (_, bytes) in sent(&mut f) {
            assert_eq!(bytes, first.1, "the same MID and token each time");
            copies += 1;
        }
        if !answers_pending(&mut f).is_empty() {
            break;
        }
    }
    assert_eq!(copies, 4, "MAX_RETRANSMIT copies");
    assert_eq!(
        now,
        at(60.0),
        "the deadline, not a retransmission, ended it"
    );
}

fn answers_pending(f: &mut HcFront) -> Vec<u16> {
    answers(f).iter().map(status).collect()
}

#[test]
fn an_echo_challenge_is_answered_once_with_the_echo() {
    let mut f = front();
    f.request(at(0.0), C, &request("GET", "/a", &[], b""));
    let first = sent(&mut f).remove(0);
    reply(
        &mut f,
        at(0.0),
        &first,
        Code::UNAUTHORIZED,
        &[(ECHO, b"fresh")],
        b"",
    );
    let again = sent(&mut f).remove(0);
    assert_eq!(
        Message::parse(&again.1).unwrap().option(ECHO),
        Some(&b"fresh"[..])
    );
    reply(
        &mut f,
        at(0.1),
        &again,
        Code::UNAUTHORIZED,
        &[(ECHO, b"other")],
        b"",
    );
    assert_eq!(
        answers_pending(&mut f),
        [403],
        "4.01 is 403 (RFC 8075 §7 note 5)"
    );
}

#[test]
fn an_event_stream_relays_notifications_and_deregisters_when_its_client_goes() {
    let mut f = front();
    let accept = [("Accept", "text/event-stream")];
    f.request(at(0.0), C, &request("GET", "/clock", &accept, b""));
    let reg = sent(&mut f).remove(0);
    let registration = Message::parse(&reg.1).unwrap();
    assert_eq!(registration.option(OBSERVE), Some(&[][..]), "Observe: 0");
    reply(
        &mut f,
        at(0.1),
        &reg,
        Code::CONTENT,
        &[(OBSERVE, &encode_uint(5))],
        b"45",
    );
    let got = answers(&mut f);
    assert!(matches!(got[0], HttpAnswer::StreamStart { .. }));
    assert_eq!(
        got[1],
        HttpAnswer::StreamData(super::sse::event(Some(5), None, b"45"))
    );
    // A CON notification with the registration's token: ACKed, and the next event.
    let mut note = Vec::new();
    let token = registration.token().to_vec();
    let mut b = MessageBuilder::new(&mut note, MessageType::Con, Code::CONTENT, 900, &token);
    b.option(OBSERVE, &encode_uint(6));
    b.payload(b"46");
    b.finish().unwrap();
    f.from_engine(at(0.3), reg.0, &note);
    let acks = sent(&mut f);
    let ack = Message::parse(&acks[0].1).unwrap();
    assert_eq!((ack.msg_type(), ack.message_id()), (MessageType::Ack, 900));
    assert_eq!(
        answers(&mut f),
        [HttpAnswer::StreamData(super::sse::event(
            Some(6),
            None,
            b"46"
        ))]
    );
    f.close(at(0.5), C);
    let leave = sent(&mut f).remove(0);
    let leave = Message::parse(&leave.1).unwrap();
    assert_eq!((leave.code(), leave.token()), (Code::GET, &token[..]));
    assert_eq!(
        leave.option(OBSERVE).map(decode_uint),
        Some(Ok(1)),
        "deregistration"
    );
}

#[test]
fn a_notification_for_no_exchange_of_ours_is_reset() {
    let mut f = front();
    f.request(at(0.0), C, &request("GET", "/a", &[], b""));
    let (to, _) = sent(&mut f).remove(0);
    let mut stray = Vec::new();
    let b = MessageBuilder::new(&mut stray, MessageType::Con, Code::CONTENT, 77, b"nope");
    b.finish().unwrap();
    f.from_engine(at(0.1), to, &stray);
    let rst = Message::parse(&sent(&mut f)[0].1).unwrap().msg_type();
    assert_eq!(
        rst,
        MessageType::Rst,
        "an observation nobody wants ends (RFC 7641 §3.6)"
    );
}

#[test]
fn the_request_bodies_held_are_counted_while_their_exchanges_live() {
    let mut f = front();
    let text = [("Content-Type", "text/plain")];
    f.request(at(0.0), C, &request("POST", "/a", &text, &[b'a'; 100]));
    f.request(at(0.0), C, &request("PUT", "/b", &text, &[b'b'; 200]));
    f.request(at(0.0), C, &request("GET", "/c", &[], b""));
    assert_eq!(f.held_body_bytes(), 300);
    let out = sent(&mut f);
    reply(&mut f, at(0.1), &out[0], Code::CHANGED, &[], b"");
    assert_eq!(answers_pending(&mut f), [204]);
    assert_eq!(
        f.held_body_bytes(),
        200,
        "the answered one let go of its body"
    );
    f.close(at(0.2), C);
    assert_eq!(
        f.held_body_bytes(),
        0,
        "the connection's exchanges are gone"
    );
}
