//! Header blocks (RFC 9113 §4.3, §6.10), SETTINGS (§6.5) and the preface (§3.4): what a
//! peer must send first and in one piece.

use super::*;

#[test]
fn continuation_frames_complete_a_header_block() {
    let mut server = server();
    let block = block(&mut Encoder::new(), REQUEST);
    let (a, rest) = block.split_at(5);
    let (b, c) = rest.split_at(5);
    let mut input = raw(frame::TYPE_HEADERS, frame::FLAG_END_STREAM, 1, a);
    input.extend(raw(frame::TYPE_CONTINUATION, 0, 1, b));
    input.extend(raw(frame::TYPE_CONTINUATION, frame::FLAG_END_HEADERS, 1, c));
    server.handle_input(T0, &input);
    assert_eq!(events(&mut server), [headers(1, REQUEST, true)]);
}

#[test]
fn frame_interleaved_in_a_header_block_is_protocol_error() {
    let mut server = server();
    let block = block(&mut Encoder::new(), REQUEST);
    let mut input = raw(frame::TYPE_HEADERS, 0, 1, &block[..5]);
    frame::encode_ping(&mut input, false, [0; 8]);
    input.extend(raw(
        frame::TYPE_CONTINUATION,
        frame::FLAG_END_HEADERS,
        1,
        &block[5..],
    ));
    server.handle_input(T0, &input);
    assert_eq!(
        goaway_code(&drain(&mut server)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
    assert!(server.is_closed());
}

#[test]
fn oversized_header_block_is_enhance_your_calm() {
    let mut server = server();
    let mut input = raw(frame::TYPE_HEADERS, 0, 1, &[0; 16_384]);
    for _ in 0..4 {
        input.extend(raw(frame::TYPE_CONTINUATION, 0, 1, &[0; 16_384]));
    }
    server.handle_input(T0, &input);
    assert_eq!(
        goaway_code(&drain(&mut server)),
        Some(ErrorCode::ENHANCE_YOUR_CALM)
    );
    assert!(server.buffered_bytes() < 1024);
}

#[test]
fn server_sends_settings_first_without_setting_0xfe03() {
    let mut server = Connection::new(Role::Server, Config::default(), T0);
    let out = drain(&mut server);
    match &frames(&out)[0] {
        Frame::Settings { ack: false, params } => {
            assert!(params.clone().all(|(id, _)| (1..=6).contains(&id)));
        }
        other => panic!("first frame {other:?}"),
    }
}

#[test]
fn every_peer_settings_is_acked_and_reported() {
    let mut server = server();
    let mut input = Vec::new();
    frame::encode_settings(&mut input, &[(frame::SETTINGS_MAX_FRAME_SIZE, 20_000)]);
    frame::encode_settings(&mut input, &[]);
    server.handle_input(T0, &input);
    let acks = frames(&drain(&mut server))
        .iter()
        .filter(|f| matches!(f, Frame::Settings { ack: true, .. }))
        .count();
    assert_eq!(acks, 2);
    assert_eq!(
        events(&mut server),
        [Event::SettingsReceived, Event::SettingsReceived]
    );
}

#[test]
fn garbage_instead_of_the_preface_gets_goaway_and_close() {
    let mut server = Connection::new(Role::Server, Config::default(), T0);
    server.handle_input(T0, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03");
    assert_eq!(
        goaway_code(&drain(&mut server)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
    assert!(server.is_closed());
}

#[test]
fn http1_request_is_a_garbage_preface() {
    let mut server = Connection::new(Role::Server, Config::default(), T0);
    server.handle_input(T0, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(
        goaway_code(&drain(&mut server)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
    assert!(server.is_closed());
}

#[test]
fn first_frame_other_than_settings_is_protocol_error() {
    let mut server = Connection::new(Role::Server, Config::default(), T0);
    let mut input = frame::PREFACE.to_vec();
    frame::encode_ping(&mut input, false, [0; 8]);
    server.handle_input(T0, &input);
    assert_eq!(
        goaway_code(&drain(&mut server)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
}

#[test]
fn hpack_garbage_is_compression_error() {
    let mut server = server();
    let mut input = Vec::new();
    // Indexed field 0 does not exist (RFC 7541 §6.1).
    frame::encode_headers(&mut input, 1, b"\x80", true, 16_384);
    server.handle_input(T0, &input);
    assert_eq!(
        goaway_code(&drain(&mut server)),
        Some(ErrorCode::COMPRESSION_ERROR)
    );
    assert!(server.is_closed());
}
