//! The upstream connection core in virtual time: requests out as frames, answers back as
//! ACKs of their Message IDs, notifications as NONs, pings, and the CSM deadline.

use std::time::Duration;

use super::*;
use crate::coap::{Code, MessageBuilder};

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

#[test]
fn a_request_goes_out_after_our_csm_and_its_answer_comes_back_as_the_ack_of_its_mid() {
    let mut conn = UpstreamConn::new(T0, ConnLimits::default());
    conn.send(T0, &datagram(MessageType::Con, Code::GET, 77, b"t1", None));
    assert_eq!(
        sent_frames(&mut conn),
        vec![signal::CSM, Code::GET],
        "CSM first"
    );
    from_origin(
        &mut conn,
        &[datagram(MessageType::Ack, Code::CONTENT, 0, b"t1", None)],
    );
    let back = conn.poll_to_engine().expect("the answer");
    let msg = Message::parse(&back).unwrap();
    assert_eq!((msg.msg_type(), msg.message_id()), (MessageType::Ack, 77));
    assert_eq!(msg.code(), Code::CONTENT);
    assert_eq!(conn.pending(), 0, "answered, forgotten");
    // A second answer for the token is for nobody.
    from_origin(
        &mut conn,
        &[datagram(MessageType::Ack, Code::CONTENT, 0, b"t1", None)],
    );
    assert!(conn.poll_to_engine().is_none());
}

#[test]
fn notifications_come_as_nons_and_an_rst_from_the_engine_ends_them_here() {
    let mut conn = UpstreamConn::new(T0, ConnLimits::default());
    conn.send(
        T0,
        &datagram(MessageType::Con, Code::GET, 5, b"ob", Some(0)),
    );
    let note = |seq| datagram(MessageType::Ack, Code::CONTENT, 0, b"ob", Some(seq));
    from_origin(&mut conn, &[note(1), note(2), note(3)]);
    let first = conn.poll_to_engine().unwrap();
    assert_eq!(Message::parse(&first).unwrap().message_id(), 5);
    let later: Vec<Vec<u8>> = std::iter::from_fn(|| conn.poll_to_engine()).collect();
    assert_eq!(later.len(), 2);
    let mids: Vec<u16> = later
        .iter()
        .map(|d| Message::parse(d).unwrap().message_id())
        .collect();
    assert!(later
        .iter()
        .all(|d| Message::parse(d).unwrap().msg_type() == MessageType::Non));
    assert_ne!(mids[0], mids[1], "each notification its own Message ID");
    let mut reset = Vec::new();
    rst(&mut reset, mids[1]);
    conn.send(T0, &reset);
    conn.handle_input(T0, &{
        let mut b = Vec::new();
        frame::encode(
            &mut b,
            Framing::Stream,
            &frame::from_datagram(&note(4)).unwrap(),
        );
        b
    });
    assert!(
        conn.poll_to_engine().is_none(),
        "dropped after the engine's RST"
    );
}

#[test]
fn the_engines_ping_is_a_ping_and_the_pong_its_rst() {
    let mut conn = UpstreamConn::new(T0, ConnLimits::default());
    from_origin(&mut conn, &[]);
    sent_frames(&mut conn);
    let mut ping = Vec::new();
    crate::coap::ping(&mut ping, 0x1234);
    conn.send(T0, &ping);
    assert_eq!(sent_frames(&mut conn), vec![signal::PING]);
    let mut pong = Vec::new();
    signal::encode_pong(&mut pong, Framing::Stream, &0x1234u16.to_be_bytes());
    conn.handle_input(T0, &pong);
    let back = conn.poll_to_engine().unwrap();
    let msg = Message::parse(&back).unwrap();
    assert_eq!(
        (msg.msg_type(), msg.message_id()),
        (MessageType::Rst, 0x1234)
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
