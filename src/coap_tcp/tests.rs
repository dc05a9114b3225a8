//! The connection core in virtual time: CSM first, requests to the engine and answers back,
//! keepalive, and the protocol errors that abort.

use std::time::Duration;

use super::frame::{self, Frame, Framing};
use super::signal::{self, Settings, Signal};
use super::*;
use crate::coap::{Code, Message, MessageBuilder, MessageType};
use crate::time::Timestamp;

const T0: Timestamp = Timestamp::ZERO;

fn frames(bytes: &[u8]) -> Vec<(Code, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some((f, n)) = frame::decode_stream(&bytes[at..], usize::MAX).unwrap() {
        out.push((f.code, f.token.to_vec(), f.body.to_vec()));
        at += n;
    }
    assert_eq!(at, bytes.len(), "whole frames only");
    out
}

fn csm(max: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let settings = Settings {
        max_message_size: max,
        block_wise: true,
    };
    signal::encode_csm(&mut out, Framing::Stream, settings);
    out
}

/// A GET of `/path` with `token`, framed for a stream.
fn get(token: &[u8], path: &str) -> Vec<u8> {
    let mut datagram = Vec::new();
    let mut b = MessageBuilder::new(&mut datagram, MessageType::Con, Code::new(0, 1), 0, token);
    b.option(11, path.as_bytes());
    b.finish().unwrap();
    let mut out = Vec::new();
    frame::encode(
        &mut out,
        Framing::Stream,
        &frame::from_datagram(&datagram).unwrap(),
    );
    out
}

/// The engine's answer to `mid`: type `ty`, 2.05 with `payload`.
fn answer(ty: MessageType, mid: u16, token: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, Code::new(2, 5), mid, token);
    b.payload(payload);
    b.finish().unwrap();
    out
}

fn open_conn() -> StreamConn {
    let mut conn = StreamConn::new(T0, Framing::Stream, ConnLimits::default());
    conn.handle_input(T0, &csm(1152));
    let n = conn.pending_output().len();
    conn.consume_output(n);
    assert!(conn.is_open());
    conn
}

#[test]
fn our_csm_is_the_first_thing_written() {
    let conn = StreamConn::new(T0, Framing::Stream, ConnLimits::default());
    let out = frames(conn.pending_output());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, signal::CSM);
    let f = Frame {
        code: out[0].0,
        token: &out[0].1,
        body: &out[0].2,
    };
    let (read, _) = signal::parse(&f, Settings::default()).unwrap();
    assert_eq!(
        read,
        Signal::Csm(Settings {
            max_message_size: 1152,
            block_wise: false
        })
    );
}

#[test]
fn requests_reach_the_engine_with_the_placeholder_header_and_answers_come_back() {
    let mut conn = open_conn();
    // Two requests with one token: both go, each with the same placeholder header (RFC 8323
    // §3.2: no type, no Message ID), which the engine ignores for a stream peer.
    let mut bytes = get(b"t1", "a");
    bytes.extend(get(b"t1", "b"));
    // Fed one byte at a time: framing does not depend on how reads split.
    for b in &bytes {
        conn.handle_input(T0, std::slice::from_ref(b));
    }
    let first = conn.poll_to_engine().unwrap();
    let second = conn.poll_to_engine().unwrap();
    assert_eq!(conn.poll_to_engine(), None);
    let (m1, m2) = (
        Message::parse(&first).unwrap(),
        Message::parse(&second).unwrap(),
    );
    assert_eq!(
        (m1.msg_type(), m1.token(), m1.option(11)),
        (MessageType::Con, &b"t1"[..], Some(&b"a"[..]))
    );
    assert_eq!(m2.option(11), Some(&b"b"[..]));
    let header = |m: &Message| (m.msg_type(), m.message_id());
    assert_eq!(
        (header(&m1), header(&m2)),
        (frame::ENGINE_HEADER, frame::ENGINE_HEADER)
    );

    // Whatever the engine's header says (an ACK, a CON, a NON), the answer is framed and
    // nothing goes back to the engine: `deliver` returns nothing to hand it.
    conn.deliver(&answer(MessageType::Ack, 0, b"t1", b"A"));
    conn.deliver(&answer(MessageType::Con, 900, b"t1", b"B"));
    conn.deliver(&answer(MessageType::Non, 0, b"t1", b"C"));
    // An empty ACK from the engine is nothing to the peer.
    let mut empty = Vec::new();
    crate::coap::empty_ack(&mut empty, 5);
    conn.deliver(&empty);
    let out = frames(conn.pending_output());
    let payloads: Vec<&[u8]> = out.iter().map(|(_, _, body)| &body[1..]).collect();
    assert_eq!(payloads, [&b"A"[..], &b"B"[..], &b"C"[..]]);
    assert!(out
        .iter()
        .all(|(code, token, _)| *code == Code::new(2, 5) && token == b"t1"));
    assert_eq!(conn.counters().answers, 3);
}

#[test]
fn a_connection_that_sends_no_csm_is_aborted_at_the_bound() {
    let limits = ConnLimits::default();
    let mut conn = StreamConn::new(T0, Framing::Stream, limits);
    assert_eq!(conn.poll_timeout(), Some(T0 + limits.csm_timeout));
    conn.handle_timeout(T0 + (limits.csm_timeout - Duration::from_millis(1)));
    assert_eq!(conn.ended(), None);
    conn.handle_timeout(T0 + limits.csm_timeout);
    assert_eq!(conn.ended(), Some(&Ending::NoCsm));
    assert_eq!(
        frames(conn.pending_output()).last().unwrap().0,
        signal::ABORT
    );
    assert_eq!(conn.poll_timeout(), None);
}

#[test]
fn a_request_before_the_csm_is_aborted() {
    let mut conn = StreamConn::new(T0, Framing::Stream, ConnLimits::default());
    conn.handle_input(T0, &get(b"x", "a"));
    assert!(matches!(conn.ended(), Some(Ending::Aborted(_))));
    assert_eq!(conn.poll_to_engine(), None);
}

#[test]
fn a_message_past_our_max_size_is_aborted_from_its_header() {
    let mut conn = open_conn();
    // Len 15: a 4-byte length of about 4 GiB, refused before any of it is buffered.
    conn.handle_input(T0, &[0xf0, 0xff, 0xff, 0xff, 0xff]);
    assert!(matches!(conn.ended(), Some(Ending::Aborted(_))));
    assert!(conn.buffered() < 100, "{}", conn.buffered());
}

#[test]
fn ping_is_answered_and_a_quiet_connection_is_pinged_then_closed() {
    let limits = ConnLimits::default();
    let mut conn = open_conn();
    let mut ping = Vec::new();
    signal::encode_ping(&mut ping, Framing::Stream, b"pp");
    conn.handle_input(T0, &ping);
    let out = frames(conn.pending_output());
    assert_eq!((out[0].0, out[0].1.as_slice()), (signal::PONG, &b"pp"[..]));
    conn.consume_output(conn.pending_output().len());

    let quiet = T0 + limits.idle_timeout;
    assert_eq!(conn.poll_timeout(), Some(quiet));
    conn.handle_timeout(quiet);
    assert_eq!(frames(conn.pending_output())[0].0, signal::PING);
    // A Pong (any input) keeps it; silence then ends it.
    let mut pong = Vec::new();
    signal::encode_pong(&mut pong, Framing::Stream, &[]);
    conn.handle_input(quiet, &pong);
    assert_eq!(conn.poll_timeout(), Some(quiet + limits.idle_timeout));
    conn.handle_timeout(quiet + limits.idle_timeout);
    conn.handle_timeout(quiet + limits.idle_timeout + limits.csm_timeout);
    assert_eq!(conn.ended(), Some(&Ending::NoPong));
}

#[test]
fn an_unknown_critical_csm_option_is_named_in_the_abort() {
    let mut conn = StreamConn::new(T0, Framing::Stream, ConnLimits::default());
    conn.consume_output(conn.pending_output().len());
    conn.handle_input(T0, &[0x10, 0xe1, 0x30]);
    assert!(matches!(conn.ended(), Some(Ending::Aborted(_))));
    let out = frames(conn.pending_output());
    assert_eq!(out[0].0, signal::ABORT);
    // Option 2 (Bad-CSM-Option) = 3.
    assert_eq!(&out[0].2[..2], &[0x21, 3]);
}

#[test]
fn answers_past_the_peers_max_size_are_dropped_and_counted() {
    let mut conn = StreamConn::new(T0, Framing::Stream, ConnLimits::default());
    conn.handle_input(T0, &csm(64));
    conn.consume_output(conn.pending_output().len());
    conn.deliver(&answer(MessageType::Ack, 1, b"t", &[7; 100]));
    assert!(conn.pending_output().is_empty());
    assert_eq!(conn.counters().oversized_answers, 1);
}

#[test]
fn release_and_abort_from_the_peer_end_it() {
    let mut conn = open_conn();
    let mut release = Vec::new();
    signal::encode_release(&mut release, Framing::Stream);
    conn.handle_input(T0, &release);
    assert_eq!(conn.ended(), Some(&Ending::Released));
    let mut conn = open_conn();
    let mut abort = Vec::new();
    signal::encode_abort(&mut abort, Framing::Stream, "bye", None);
    conn.handle_input(T0, &abort);
    assert_eq!(conn.ended(), Some(&Ending::PeerAborted("bye".into())));
}

#[test]
fn websocket_messages_carry_no_length() {
    let mut conn = StreamConn::new(T0, Framing::WebSocket, ConnLimits::default());
    assert_eq!(conn.pending_output()[0] >> 4, 0, "our CSM, Len 0");
    let mut csm = Vec::new();
    signal::encode_csm(&mut csm, Framing::WebSocket, Settings::default());
    conn.handle_ws_message(T0, &csm);
    assert!(conn.is_open());
    conn.handle_ws_message(T0, &[0x10, 0x01]);
    assert!(matches!(conn.ended(), Some(Ending::Aborted(_))));
}

#[path = "bounds_tests.rs"]
mod bounds;
