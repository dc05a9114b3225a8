//! The WebSocket session: RFC 6455's handshake example, masking, fragments, control frames,
//! and the refusals.

use super::*;

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

fn handshake(path: &str, protocol: &str) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n"
    )
    .into_bytes()
}

/// A client frame: masked with a fixed key.
fn client_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x11, 0x22, 0x33, 0x44];
    let mut out = vec![(u8::from(fin) << 7) | opcode];
    match payload.len() {
        n @ 0..=125 => out.push(0x80 | n as u8),
        n => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

fn open_session() -> WsSession {
    let mut ws = WsSession::new(1152);
    ws.handle_input(&handshake(WELL_KNOWN_PATH, "coap"), |_| {
        panic!("no message yet")
    });
    assert!(ws.is_open());
    let n = ws.pending_output().len();
    ws.consume_output(n);
    ws
}

#[test]
fn the_handshake_is_answered_with_rfc_6455s_accept_value() {
    let mut ws = WsSession::new(1152);
    let bytes = handshake(WELL_KNOWN_PATH, "coap");
    // Split anywhere.
    let (a, b) = bytes.split_at(17);
    ws.handle_input(a, |_| {});
    assert!(!ws.is_open());
    ws.handle_input(b, |_| {});
    assert!(ws.is_open());
    let answer = String::from_utf8(ws.pending_output().to_vec()).unwrap();
    assert!(answer.starts_with("HTTP/1.1 101 "), "{answer}");
    assert!(answer.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
    assert!(answer.contains("Sec-WebSocket-Protocol: coap\r\n"));
}

#[test]
fn handshakes_that_are_not_for_coap_are_refused() {
    for (bytes, status) in [
        (handshake("/other", "coap"), "404"),
        (handshake(WELL_KNOWN_PATH, "mqtt"), "400"),
        (b"POST /.well-known/coap HTTP/1.1\r\n\r\n".to_vec(), "405"),
        (b"\x16\x03\x01\x00\x00\r\n\r\n".to_vec(), "400"),
        (
            String::from_utf8(handshake(WELL_KNOWN_PATH, "coap"))
                .unwrap()
                .replace("Version: 13", "Version: 8")
                .into_bytes(),
            "426",
        ),
    ] {
        let mut ws = WsSession::new(1152);
        ws.handle_input(&bytes, |_| panic!("no message"));
        let answer = String::from_utf8_lossy(ws.pending_output()).to_string();
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{answer}"
        );
        assert!(ws.closed().is_some());
    }
    let mut ws = WsSession::new(1152);
    ws.handle_input(&vec![b'a'; MAX_HEAD + 1], |_| {});
    assert!(ws.closed().is_some(), "a head that never ends");
}

#[test]
fn binary_messages_whole_or_in_fragments_reach_coap_and_ours_go_unmasked() {
    let mut ws = open_session();
    let mut got = Vec::new();
    let mut input = client_frame(true, OP_BINARY, b"one");
    input.extend(client_frame(false, OP_BINARY, b"tw"));
    input.extend(client_frame(true, OP_PING, b"p")); // control frames may interleave
    input.extend(client_frame(true, OP_CONTINUATION, b"o"));
    for b in &input {
        ws.handle_input(std::slice::from_ref(b), |m| got.push(m.to_vec()));
    }
    assert_eq!(got, vec![b"one".to_vec(), b"two".to_vec()]);
    assert_eq!(ws.pending_output(), &[0x80 | OP_PONG, 1, b'p']);
    ws.consume_output(3);
    ws.send(&[0u8; 200]);
    let out = ws.pending_output();
    assert_eq!(
        &out[..4],
        &[0x80 | OP_BINARY, 126, 0, 200],
        "unmasked, 16-bit length"
    );
    assert_eq!(out.len(), 204);
}

#[test]
fn protocol_errors_close_with_their_codes() {
    let unmasked = vec![0x82, 0x01, 0x00];
    let oversized = client_frame(true, OP_BINARY, &[0u8; 1153]);
    for (bytes, code) in [
        (client_frame(true, OP_TEXT, b"hi"), 1003u16),
        (unmasked, 1002),
        (oversized, 1009),
        (client_frame(true, OP_CONTINUATION, b"x"), 1002),
        (client_frame(false, OP_PING, b"x"), 1002),
    ] {
        let mut ws = open_session();
        ws.handle_input(&bytes, |_| panic!("no message"));
        assert!(ws.closed().is_some());
        let mut want = vec![0x80 | OP_CLOSE, 2];
        want.extend_from_slice(&code.to_be_bytes());
        assert_eq!(ws.pending_output(), &want[..]);
    }
}

#[test]
fn a_close_is_echoed() {
    let mut ws = open_session();
    ws.handle_input(
        &client_frame(true, OP_CLOSE, &1000u16.to_be_bytes()),
        |_| {},
    );
    assert_eq!(ws.pending_output(), &[0x80 | OP_CLOSE, 2, 0x03, 0xE8]);
    assert!(ws.closed().is_some());
    ws.send(b"late");
    assert_eq!(ws.pending_output().len(), 4, "nothing after the close");
}
