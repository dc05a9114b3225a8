//! The upstream connection core in virtual time: requests out as frames, their header
//! dropped; every response back with the placeholder header, none numbered, acknowledged or
//! reset here; keepalive pings and the CSM deadline.

use std::time::Duration;

use super::*;
use crate::coap::option::OBSERVE;
use crate::coap::{rst, Code, MessageBuilder, MessageType};

const T0: Timestamp = Timestamp::ZERO;

fn datagram(ty: MessageType, code: Code, mid: u16, token: &[u8], observe: Option<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, code, mid, token);
    if let Some(v) = observe {
        b.option(OBSERVE, &[v][..usize::from(v != 0)]);
    }
    b.option(crate::coap::option::URI_PATH, b"time");
    b.finish().unwrap();
    out
}

/// The origin's frames: its CSM, then what `frames` hold (datagrams as frames).
fn from_origin(conn: &mut UpstreamConn, datagrams: &[Vec<u8>]) {
    let mut bytes = Vec::new();
    signal::encode_csm(&mut bytes, Framing::Stream, Settings::default());
    for d in datagrams {
        frame::encode(
            &mut bytes,
            Framing::Stream,
            &frame::from_datagram(d).unwrap(),
        );
    }
    conn.handle_input(T0, &bytes);
}

fn sent_frames(conn: &mut UpstreamConn) -> Vec<Code> {
    let bytes = conn.pending_output().to_vec();
    conn.consume_output(bytes.len());
    let mut codes = Vec::new();
    let mut at = 0;
    while let Some((f, n)) = frame::decode_stream(&bytes[at..], usize::MAX).unwrap() {
        codes.push(f.code);
        at += n;
    }
    codes
}

/// The engine's layout of what the connection handed over: (type, Message ID), code, token.
fn to_engine(conn: &mut UpstreamConn) -> Vec<((MessageType, u16), Code, Vec<u8>)> {
    std::iter::from_fn(|| conn.poll_to_engine())
        .map(|d| {
            let m = Message::parse(&d).unwrap();
            ((m.msg_type(), m.message_id()), m.code(), m.token().to_vec())
        })
        .collect()
}

#[test]
fn a_request_goes_out_after_our_csm_and_its_answer_comes_back_with_the_placeholder_header() {
    let mut conn = UpstreamConn::new(T0, ConnLimits::default());
    conn.send(&datagram(MessageType::Con, Code::GET, 77, b"t1", None));
    assert_eq!(
        sent_frames(&mut conn),
        vec![signal::CSM, Code::GET],
        "CSM first"
    );
    from_origin(
        &mut conn,
        &[datagram(MessageType::Ack, Code::CONTENT, 0, b"t1", None)],
    );
    let header = frame::ENGINE_HEADER;
    assert_eq!(
        to_engine(&mut conn),
        vec![(header, Code::CONTENT, b"t1".to_vec())],
        "not the ACK of Message ID 77: RFC 8323 has none"
    );
    // A second response for the token goes on too: the engine, which matches by token,
    // knows it is for nobody.
    from_origin(
        &mut conn,
        &[datagram(MessageType::Ack, Code::CONTENT, 0, b"t1", None)],
    );
    assert_eq!(to_engine(&mut conn).len(), 1);
    assert_eq!(conn.strays, 0);
}

#[test]
fn every_request_type_is_framed_and_nothing_else_the_engine_sends() {
    let mut conn = UpstreamConn::new(T0, ConnLimits::default());
    from_origin(&mut conn, &[]);
    sent_frames(&mut conn);
    // A NON request and a deregistration as the engine sends them: each one frame.
    conn.send(&datagram(MessageType::Non, Code::GET, 1, b"a", None));
    conn.send(&datagram(MessageType::Con, Code::GET, 2, b"ob", Some(1)));
    assert_eq!(sent_frames(&mut conn), vec![Code::GET, Code::GET]);
    // ACKs, RSTs and empty CONs have no meaning on a reliable transport.
    let mut ack = Vec::new();
    crate::coap::empty_ack(&mut ack, 5);
    let mut reset = Vec::new();
    rst(&mut reset, 5);
    let mut ping = Vec::new();
    crate::coap::ping(&mut ping, 5);
    for message in [ack, reset, ping] {
        conn.send(&message);
    }
    assert!(sent_frames(&mut conn).is_empty());
}

#[test]
fn notifications_come_with_the_same_placeholder_header_and_no_made_up_message_id() {
    let mut conn = UpstreamConn::new(T0, ConnLimits::default());
    conn.send(&datagram(MessageType::Con, Code::GET, 5, b"ob", Some(0)));
    let note = |seq| datagram(MessageType::Ack, Code::CONTENT, 0, b"ob", Some(seq));
    from_origin(&mut conn, &[note(1), note(2), note(3)]);
    let got = to_engine(&mut conn);
    assert_eq!(got.len(), 3);
    assert!(
        got.iter().all(|(header, code, token)| {
            (*header, *code, &token[..]) == (frame::ENGINE_HEADER, Code::CONTENT, &b"ob"[..])
        }),
        "no NON, no ACK, no Message ID of the connection's: {got:?}"
    );
    // Observe goes through as the origin sent it.
    from_origin(&mut conn, &[note(4)]);
    let last = conn.poll_to_engine().unwrap();
    assert_eq!(
        Message::parse(&last).unwrap().option(OBSERVE),
        Some(&[4u8][..])
    );
}

#[test]
fn a_pong_is_taken_here_and_requests_from_the_origin_are_strays() {
    let mut conn = UpstreamConn::new(T0, ConnLimits::default());
    from_origin(&mut conn, &[]);
    sent_frames(&mut conn);
    let mut pong = Vec::new();
    signal::encode_pong(&mut pong, Framing::Stream, &0x1234u16.to_be_bytes());
    conn.handle_input(T0, &pong);
    // A request from the origin: not ours to serve.
    let mut bytes = Vec::new();
    let request = datagram(MessageType::Con, Code::GET, 9, b"r", None);
    frame::encode(
        &mut bytes,
        Framing::Stream,
        &frame::from_datagram(&request).unwrap(),
    );
    conn.handle_input(T0, &bytes);
    assert!(conn.poll_to_engine().is_none(), "no RST for the engine");
    assert_eq!(conn.strays, 1);
    assert!(conn.ended().is_none());
}

#[test]
fn a_message_of_a_reserved_code_class_is_a_stray_not_a_response() {
    // Classes 1, 3 and 6 are reserved (RFC 7252 §12.1): such a message answers nothing, and
    // the engine takes only responses from this connection (the fuzz smoke found a 3.xx).
    let mut conn = UpstreamConn::new(T0, ConnLimits::default());
    let reserved: Vec<Vec<u8>> = [0x21u8, 0x61, 0xc1]
        .iter()
        .map(|&code| datagram(MessageType::Con, Code(code), 1, b"t", None))
        .collect();
    from_origin(&mut conn, &reserved);
    assert!(conn.poll_to_engine().is_none());
    assert_eq!(conn.strays, 3);
    from_origin(&mut conn, &[]);
    let content = datagram(MessageType::Ack, Code::CONTENT, 1, b"t", None);
    from_origin(&mut conn, &[content]);
    assert!(
        conn.poll_to_engine().is_some(),
        "a 2.05 still goes to the engine"
    );
}

#[test]
fn an_origin_without_a_csm_is_aborted_at_the_deadline_and_a_quiet_one_pinged() {
    let limits = ConnLimits::default();
    let mut conn = UpstreamConn::new(T0, limits);
    sent_frames(&mut conn);
    conn.handle_timeout(T0 + limits.csm_timeout);
    assert_eq!(conn.ended(), Some(&Ending::NoCsm));
    assert_eq!(sent_frames(&mut conn), vec![signal::ABORT]);

    let mut conn = UpstreamConn::new(T0, limits);
    from_origin(&mut conn, &[]);
    sent_frames(&mut conn);
    let ping_at = conn.poll_timeout().unwrap();
    assert_eq!(ping_at, T0 + limits.idle_timeout);
    conn.handle_timeout(ping_at);
    assert_eq!(sent_frames(&mut conn), vec![signal::PING]);
    conn.handle_timeout(ping_at + (limits.csm_timeout - Duration::from_millis(1)));
    assert!(conn.ended().is_none());
    conn.handle_timeout(ping_at + limits.csm_timeout);
    assert_eq!(conn.ended(), Some(&Ending::NoPong));
}
