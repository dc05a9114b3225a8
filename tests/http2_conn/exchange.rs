//! Requests and answers between a client and a server in memory: bodies, flow control
//! (RFC 9113 §6.9) and PING (§6.7).

use super::*;

#[test]
fn request_response_with_headers_data_and_trailers() {
    let mut p = Pair::new();
    let id = p.request(b"hello");
    assert_eq!(
        p.server_events,
        [headers(id, REQUEST, false), data(id, b"hello", true)]
    );
    p.respond(id, b"world");
    assert_eq!(
        p.client_events,
        [
            headers(id, RESPONSE, false),
            data(id, b"world", false),
            headers(id, TRAILERS, true)
        ]
    );
    assert_eq!((p.client.open_streams(), p.server.open_streams()), (0, 0));
}

#[test]
fn many_sequential_requests_share_one_connection() {
    let mut p = Pair::new();
    for i in 0..1000u32 {
        let id = p.request(&i.to_be_bytes());
        assert_eq!(id, 2 * i + 1);
        p.respond(id, &i.to_le_bytes());
        assert_eq!(
            body(&p.client_events, id),
            (i.to_le_bytes().to_vec(), false)
        );
        p.client_events.clear();
    }
    assert!(!p.client.is_closed() && !p.server.is_closed());
    assert_eq!(p.server.open_streams(), 0);
}

#[test]
fn one_mib_upload_and_download_need_window_updates() {
    let small = Config {
        initial_window_size: 65_535,
        connection_window_size: 65_535,
        ..Config::default()
    };
    let mut p = Pair::with(small.clone(), small, false);
    let payload: Vec<u8> = (0..1 << 20).map(|i: u32| ((i * 31) >> 3) as u8).collect();
    let id = p.request(&payload);
    assert_eq!(body(&p.server_events, id), (payload.clone(), true));
    p.respond(id, &payload);
    assert_eq!(body(&p.client_events, id), (payload, false));
    assert_eq!(p.client_events.last(), Some(&headers(id, TRAILERS, true)));
}

#[test]
fn settings_initial_window_size_change_applies_to_open_streams() {
    let mut client = client_with_peer_settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 10)]);
    let id = client.open_stream(T0).unwrap();
    client.send_headers(T0, id, REQUEST, false).unwrap();
    client.send_data(T0, id, &[7; 100], true).unwrap();
    assert_eq!(data_sent(&drain(&mut client)), (10, false));
    let mut settings = |value| {
        let mut input = Vec::new();
        frame::encode_settings(&mut input, &[(frame::SETTINGS_INITIAL_WINDOW_SIZE, value)]);
        client.handle_input(T0, &input);
        data_sent(&drain(&mut client))
    };
    assert_eq!(settings(50), (40, false));
    // 0 leaves the window at -50; 100 then allows the last 50 octets.
    assert_eq!(settings(0), (0, false));
    assert_eq!(settings(100), (50, true));
}

#[test]
fn initial_window_size_overflowing_a_stream_window_is_flow_control_error() {
    let mut client = client_with_peer_settings(&[]);
    let id = client.open_stream(T0).unwrap();
    client.send_headers(T0, id, REQUEST, false).unwrap();
    let mut input = Vec::new();
    frame::encode_window_update(&mut input, id, frame::MAX_WINDOW_SIZE - 65_535);
    frame::encode_settings(&mut input, &[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 65_536)]);
    client.handle_input(T0, &input);
    assert_eq!(
        goaway_code(&drain(&mut client)),
        Some(ErrorCode::FLOW_CONTROL_ERROR)
    );
    assert!(client.is_closed());
}

#[test]
fn window_update_overflow_is_flow_control_error() {
    let mut server = server();
    let mut input = Vec::new();
    frame::encode_window_update(&mut input, 0, frame::MAX_WINDOW_SIZE);
    server.handle_input(T0, &input);
    assert_eq!(
        goaway_code(&drain(&mut server)),
        Some(ErrorCode::FLOW_CONTROL_ERROR)
    );
    assert!(server.is_closed());
}

#[test]
fn data_beyond_the_stream_window_is_flow_control_error() {
    let config = Config {
        initial_window_size: 65_535,
        ..Config::default()
    };
    let mut server = server_with(config);
    let mut input = request_frame(1, REQUEST, false);
    frame::encode_data(&mut input, 1, &[0; 65_536], false, 16_384);
    server.handle_input(T0, &input);
    assert_eq!(
        resets(&drain(&mut server)),
        [(1, ErrorCode::FLOW_CONTROL_ERROR)]
    );
    assert!(!server.is_closed());
}

#[test]
fn ping_is_echoed_with_ack_but_an_ack_is_not() {
    let mut server = server();
    let mut input = Vec::new();
    frame::encode_ping(&mut input, false, *b"12345678");
    frame::encode_ping(&mut input, true, *b"abcdefgh");
    server.handle_input(T0, &input);
    let out = drain(&mut server);
    let ack = Frame::Ping {
        ack: true,
        data: *b"12345678",
    };
    assert_eq!(frames(&out), [ack]);
    assert_eq!(events(&mut server), []);
}

#[test]
fn ping_round_trip_reports_the_ack() {
    let mut p = Pair::new();
    p.client.ping(T0, *b"backoffd");
    p.drive();
    assert_eq!(p.client_events, [Event::PingAcked { data: *b"backoffd" }]);
}
