//! Stream states (RFC 9113 §5.1) and their errors and resets (§5.4.2, §6.4), GOAWAY (§6.8),
//! and the bounds on what a peer or an application that does not keep up can make us hold.

use super::*;

#[test]
fn input_delivered_one_byte_at_a_time() {
    let mut p = Pair::with(Config::default(), Config::default(), true);
    let id = p.request(b"slowly");
    assert_eq!(
        p.server_events,
        [headers(id, REQUEST, false), data(id, b"slowly", true)]
    );
    p.respond(id, b"still fine");
    assert_eq!(body(&p.client_events, id), (b"still fine".to_vec(), false));
}

#[test]
fn push_promise_to_a_server_is_protocol_error() {
    let mut server = server();
    server.handle_input(T0, &raw(frame::TYPE_PUSH_PROMISE, 4, 1, &[0, 0, 0, 2]));
    assert_eq!(
        goaway_code(&drain(&mut server)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
}

#[test]
fn even_stream_id_from_a_client_is_protocol_error() {
    let mut server = server();
    server.handle_input(T0, &request_frame(2, REQUEST, true));
    assert_eq!(
        goaway_code(&drain(&mut server)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
}

#[test]
fn decreasing_stream_id_is_protocol_error() {
    let mut server = server();
    let mut encoder = Encoder::new();
    let mut input = Vec::new();
    for id in [5, 3] {
        let block = block(&mut encoder, REQUEST);
        frame::encode_headers(&mut input, id, &block, true, 16_384);
    }
    server.handle_input(T0, &input);
    assert_eq!(
        goaway_code(&drain(&mut server)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
}

#[test]
fn data_on_a_half_closed_remote_stream_is_stream_closed() {
    let mut server = server();
    server.handle_input(T0, &request_frame(1, REQUEST, true));
    assert_eq!(events(&mut server), [headers(1, REQUEST, true)]);
    let mut input = Vec::new();
    frame::encode_data(&mut input, 1, b"late", false, 16_384);
    server.handle_input(T0, &input);
    assert_eq!(resets(&drain(&mut server)), [(1, ErrorCode::STREAM_CLOSED)]);
    let reset = Event::StreamReset {
        stream: 1,
        code: ErrorCode::STREAM_CLOSED,
    };
    assert_eq!(events(&mut server), [reset]);
    assert!(!server.is_closed());
}

#[test]
fn a_stream_error_on_a_request_not_yet_taken_drops_it_unseen() {
    let mut server = server();
    let mut input = request_frame(1, REQUEST, true);
    frame::encode_data(&mut input, 1, b"late", false, 16_384);
    server.handle_input(T0, &input);
    assert_eq!(resets(&drain(&mut server)), [(1, ErrorCode::STREAM_CLOSED)]);
    assert_eq!(events(&mut server), []);
    assert_eq!(server.abuse().reset_before_accept, 1);
    assert_eq!(server.abuse().local_error_resets, 1);
}

#[test]
fn data_after_our_reset_is_ignored() {
    let mut server = server();
    server.handle_input(T0, &request_frame(1, REQUEST, false));
    server.reset_stream(T0, 1, ErrorCode::CANCEL);
    assert_eq!(resets(&drain(&mut server)), [(1, ErrorCode::CANCEL)]);
    let mut input = Vec::new();
    frame::encode_data(&mut input, 1, &[0; 100], true, 16_384);
    frame::encode_window_update(&mut input, 1, 5);
    server.handle_input(T0, &input);
    assert!(drain(&mut server).is_empty());
    assert_eq!(events(&mut server), [headers(1, REQUEST, false)]);
    assert!(!server.is_closed());
}

#[test]
fn peer_reset_is_reported() {
    let mut server = server();
    server.handle_input(T0, &request_frame(1, REQUEST, false));
    assert_eq!(events(&mut server), [headers(1, REQUEST, false)]);
    let mut input = Vec::new();
    frame::encode_rst_stream(&mut input, 1, ErrorCode::CANCEL);
    server.handle_input(T0, &input);
    let reset = Event::StreamReset {
        stream: 1,
        code: ErrorCode::CANCEL,
    };
    assert_eq!(events(&mut server), [reset]);
    assert_eq!(server.open_streams(), 0);
}

#[test]
fn a_stream_reset_before_the_application_took_it_is_never_seen() {
    let mut server = server();
    let mut input = request_frame(1, REQUEST, false);
    frame::encode_data(&mut input, 1, &[1; 1000], false, 16_384);
    frame::encode_rst_stream(&mut input, 1, ErrorCode::CANCEL);
    server.handle_input(T0, &input);
    assert_eq!(events(&mut server), []);
    assert_eq!(server.open_streams(), 0);
    assert_eq!(server.abuse().reset_before_accept, 1);
    assert!(server.buffered_bytes() < 100, "{}", server.buffered_bytes());
}

#[test]
fn uppercase_header_name_is_stream_protocol_error() {
    let mut server = server();
    let mut fields = REQUEST.to_vec();
    fields.push((b"Content-Length", b"0"));
    server.handle_input(T0, &request_frame(1, &fields, true));
    assert_eq!(
        resets(&drain(&mut server)),
        [(1, ErrorCode::PROTOCOL_ERROR)]
    );
    assert_eq!(events(&mut server), []);
}

#[test]
fn request_without_path_is_stream_protocol_error() {
    let mut server = server();
    server.handle_input(T0, &request_frame(1, &REQUEST[..2], true));
    assert_eq!(
        resets(&drain(&mut server)),
        [(1, ErrorCode::PROTOCOL_ERROR)]
    );
}

#[test]
fn header_list_over_the_limit_is_reset_and_the_connection_survives() {
    let mut server = server_with(Config {
        max_header_list_size: 1000,
        ..Config::default()
    });
    let big = [b'x'; 1200];
    let mut fields = REQUEST.to_vec();
    fields.push((b"x-big", &big));
    server.handle_input(T0, &request_frame(1, &fields, true));
    assert_eq!(
        resets(&drain(&mut server)),
        [(1, ErrorCode::PROTOCOL_ERROR)]
    );
    server.handle_input(T0, &request_frame(3, REQUEST, true));
    assert_eq!(events(&mut server), [headers(3, REQUEST, true)]);
}

#[test]
fn unknown_frame_types_and_settings_are_ignored() {
    let mut server = server();
    let mut input = raw(0xfa, 0xff, 0, b"extension");
    input.extend(raw(0xfb, 0, 7, b""));
    frame::encode_settings(&mut input, &[(0xfe03, 1), (0x1234, 99)]);
    server.handle_input(T0, &input);
    let out = drain(&mut server);
    assert!(matches!(
        frames(&out)[..],
        [Frame::Settings { ack: true, .. }]
    ));
    assert!(!server.is_closed());
}

#[test]
fn priority_frames_are_accepted_and_ignored() {
    let mut server = server();
    let input = raw(frame::TYPE_PRIORITY, 0, 9, &[0, 0, 0, 1, 16]);
    server.handle_input(T0, &input);
    assert!(drain(&mut server).is_empty() && !server.is_closed());
}

#[test]
fn graceful_goaway_lets_open_streams_finish() {
    let mut p = Pair::new();
    let id = p.request(b"");
    p.server.go_away(T0, ErrorCode::NO_ERROR, b"shutting down");
    p.drive();
    let goaway = Event::GoAway {
        last_stream_id: id,
        code: ErrorCode::NO_ERROR,
        debug: b"shutting down".to_vec(),
    };
    assert_eq!(p.client_events, [goaway]);
    assert_eq!(p.client.open_stream(T0), Err(SendError::GoingAway));
    assert!(!p.server.is_closed());
    p.respond(id, b"last");
    assert_eq!(body(&p.client_events, id), (b"last".to_vec(), false));
    assert!(p.server.is_closed() && p.client.is_closed());
}

#[test]
fn goaway_refuses_our_streams_above_its_last_stream_id() {
    let mut client = client_with_peer_settings(&[]);
    for _ in 0..2 {
        let id = client.open_stream(T0).unwrap();
        client.send_headers(T0, id, REQUEST, true).unwrap();
    }
    let mut input = Vec::new();
    frame::encode_goaway(&mut input, 1, ErrorCode::NO_ERROR, b"");
    client.handle_input(T0, &input);
    let events = events(&mut client);
    let refused = Event::StreamReset {
        stream: 3,
        code: ErrorCode::REFUSED_STREAM,
    };
    assert_eq!(events[1..], [refused]);
    assert_eq!(client.open_streams(), 1);
}

#[test]
fn peer_that_never_reads_is_cut_off() {
    let mut server = server_with(Config {
        max_buffered_output: 4096,
        ..Config::default()
    });
    // 50 PINGs a second, within the control budget; the driver's writes take nothing.
    for i in 0..1000 {
        let now = T0 + Duration::from_millis(20 * i);
        let mut input = Vec::new();
        frame::encode_ping(&mut input, false, [1; 8]);
        server.handle_input(now, &input);
        server.consume_output(now, 0);
    }
    assert!(server.is_closed());
    assert_eq!(
        server.abuse().cutoff,
        Some(backoffd::http2::Cutoff::UnreadOutput)
    );
    assert_eq!(
        server.error().map(|e| e.code()),
        Some(ErrorCode::ENHANCE_YOUR_CALM)
    );
    assert!(server.pending_output().len() < 4096 + 100);
}

#[test]
fn application_that_never_polls_events_is_bounded() {
    let mut server = server_with(Config {
        max_queued_event_bytes: 4096,
        ..Config::default()
    });
    let mut encoder = Encoder::new();
    for id in (1..100).step_by(2) {
        let mut input = Vec::new();
        let block = block(&mut encoder, REQUEST);
        frame::encode_headers(&mut input, id, &block, false, 16_384);
        server.handle_input(T0, &input);
    }
    assert_eq!(
        goaway_code(&drain(&mut server)),
        Some(ErrorCode::ENHANCE_YOUR_CALM)
    );
    assert_eq!(
        server.abuse().cutoff,
        Some(backoffd::http2::Cutoff::UnpolledEvents)
    );
}

#[test]
fn client_rejects_an_http1_response() {
    let mut client = Connection::new(Role::Client, Config::default(), T0);
    client.handle_input(T0, b"HTTP/1.1 400 Bad Request\r\n\r\n");
    assert_eq!(
        goaway_code(&drain(&mut client)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
    assert!(client.is_closed());
}

#[test]
fn sends_out_of_order_are_refused() {
    let mut client = client_with_peer_settings(&[]);
    let (first, second) = (
        client.open_stream(T0).unwrap(),
        client.open_stream(T0).unwrap(),
    );
    assert_eq!(
        client.send_data(T0, first, b"x", false),
        Err(SendError::OutOfOrder)
    );
    client.send_headers(T0, second, REQUEST, false).unwrap();
    assert_eq!(
        client.send_headers(T0, first, REQUEST, false),
        Err(SendError::OutOfOrder)
    );
    assert_eq!(
        client.send_headers(T0, second, TRAILERS, false),
        Err(SendError::OutOfOrder)
    );
    client.send_data(T0, second, b"", true).unwrap();
    assert_eq!(
        client.send_data(T0, second, b"x", true),
        Err(SendError::StreamEnded)
    );
}
