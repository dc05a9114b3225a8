//! One CoAP-over-TCP connection's untrusted input (`backoffd::coap_tcp`, RFC 8323): the
//! peer's bytes (stream framing, split anywhere) and WebSocket messages, the engine's
//! datagrams for the peer, and time, interleaved. The same steps drive an upstream
//! connection (`coap_tcp::client`), whose peer is an origin: what it hands the engine must be
//! well-formed responses, each with the same placeholder header.
//!
//! The input is a list of steps, each a tag byte and, for bytes, a length byte. Invariants:
//! nothing panics; what reaches the engine is a well-formed request, each with the fixed
//! placeholder header (RFC 8323 has no type or Message ID); nothing reaches it before the
//! peer's CSM or after the connection ended; what the connection holds stays within its
//! bounds.
#![no_main]

use std::time::Duration;

use backoffd::coap::Message;
use backoffd::coap_tcp::frame::{decode_stream, ENGINE_HEADER};
use backoffd::coap_tcp::client::UpstreamConn;
use backoffd::coap_tcp::{ConnLimits, Ending, Framing, StreamConn};
use backoffd::time::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = ConnLimits::default();
    let framing = match data.first() {
        Some(b) if b & 1 == 1 => Framing::WebSocket,
        _ => Framing::Stream,
    };
    let mut now = Timestamp::ZERO;
    let mut conn = StreamConn::new(now, framing, limits);
    let mut upstream = UpstreamConn::new(now, limits);
    let mut rest = data.get(1..).unwrap_or_default();
    while let [tag, tail @ ..] = rest {
        let (len, tail) = match tail {
            [len, tail @ ..] => (usize::from(*len).min(tail.len()), tail),
            [] => (0, tail),
        };
        let (chunk, tail) = tail.split_at(len);
        rest = tail;
        let was_open = conn.is_open();
        match tag % 5 {
            0 => upstream.handle_input(now, chunk),
            2 => upstream.send(chunk),
            3 => upstream.handle_timeout(now),
            _ => upstream.consume_output(usize::from(*tag)),
        }
        while let Some(datagram) = upstream.poll_to_engine() {
            let msg = Message::parse(&datagram).expect("the engine gets well-formed datagrams");
            assert!(msg.code().is_response());
            assert_eq!((msg.msg_type(), msg.message_id()), ENGINE_HEADER);
        }
        match tag % 5 {
            0 => conn.handle_input(now, chunk),
            1 => conn.handle_ws_message(now, chunk),
            2 => conn.deliver(chunk),
            3 => {
                now = now + Duration::from_millis(u64::from(*tag) * 97);
                conn.handle_timeout(now);
            }
            _ => {
                let n = usize::from(*tag) * 7 % (conn.pending_output().len() + 1);
                conn.consume_output(n);
            }
        }
        // Requests can be pending only if the CSM came in this step or before: a connection
        // still open, or one the peer ended after its CSM (an end of ours drops them).
        let csm_came = was_open
            || conn.is_open()
            || matches!(conn.ended(), Some(Ending::Released | Ending::PeerAborted(_)));
        while let Some(datagram) = conn.poll_to_engine() {
            assert!(csm_came, "a request before the peer's CSM");
            let msg = Message::parse(&datagram).expect("the engine gets well-formed datagrams");
            assert_eq!((msg.msg_type(), msg.message_id()), ENGINE_HEADER);
            assert!(msg.code().is_request(), "only requests reach the engine");
        }
        let bound = 2 * limits.max_output + 2 * limits.max_message_size as usize + 64 * 1024;
        assert!(conn.buffered() <= bound, "holds {} bytes", conn.buffered());
    }
    if conn.ended().is_some() {
        conn.handle_input(now, b"\x00\x01");
        assert!(conn.poll_to_engine().is_none(), "nothing after the end");
    }
    // What it wrote is whole frames (stream framing only: WebSocket frames have no length).
    if framing == Framing::Stream {
        let out = conn.pending_output().to_vec();
        let _ = decode_stream(&out, usize::MAX);
    }
});
