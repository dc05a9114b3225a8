//! The HTTP/2 connection state machine in virtual time: a client/server `Pair`
//! shuttling bytes in memory, and hand-made frames against one side.

use std::time::Duration;

use backoffd::http2::error::ErrorCode;
use backoffd::http2::frame::{self, Frame};
use backoffd::http2::hpack::{Encoder, Header};
use backoffd::http2::{Config, Connection, Event, Role, SendError};
use backoffd::time::Timestamp;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Fields<'a> = &'a [(&'a [u8], &'a [u8])];

const T0: Timestamp = Timestamp::ZERO;
const REQUEST: Fields = &[
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/grpc.testing.ReconnectService/Start"),
    (b":authority", b"localhost"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
];
const RESPONSE: Fields = &[(b":status", b"200"), (b"content-type", b"application/grpc")];
const TRAILERS: Fields = &[(b"grpc-status", b"0")];

fn owned(fields: Fields) -> Vec<Header> {
    let header = |&(n, v): &(&[u8], &[u8])| Header {
        name: n.to_vec(),
        value: v.to_vec(),
        sensitive: false,
    };
    fields.iter().map(header).collect()
}

fn headers(stream: u32, fields: Fields, end_stream: bool) -> Event {
    let headers = owned(fields);
    Event::Headers {
        stream,
        headers,
        end_stream,
    }
}

fn data(stream: u32, data: &[u8], end_stream: bool) -> Event {
    let data = data.to_vec();
    Event::Data {
        stream,
        data,
        end_stream,
    }
}

/// Takes everything the connection wants to send.
fn drain(conn: &mut Connection) -> Vec<u8> {
    drain_at(conn, T0)
}

fn drain_at(conn: &mut Connection, now: Timestamp) -> Vec<u8> {
    let out = conn.pending_output().to_vec();
    conn.consume_output(now, out.len());
    out
}

fn events(conn: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| conn.poll_event()).collect()
}

/// The frames in `out`, after the client preface if it starts with one.
fn frames(out: &[u8]) -> Vec<Frame<'_>> {
    let mut rest = out.strip_prefix(&frame::PREFACE[..]).unwrap_or(out);
    let mut frames = Vec::new();
    while let Some((f, n)) = frame::decode(rest, frame::MAX_ALLOWED_FRAME_SIZE).unwrap() {
        frames.push(f);
        rest = &rest[n..];
    }
    assert!(rest.is_empty(), "trailing partial frame");
    frames
}

fn goaway_code(out: &[u8]) -> Option<ErrorCode> {
    frames(out).into_iter().find_map(|f| match f {
        Frame::GoAway { code, .. } => Some(code),
        _ => None,
    })
}

fn resets(out: &[u8]) -> Vec<(u32, ErrorCode)> {
    let reset = |f| match f {
        Frame::RstStream { stream_id, code } => Some((stream_id, code)),
        _ => None,
    };
    frames(out).into_iter().filter_map(reset).collect()
}

fn data_sent(out: &[u8]) -> (usize, bool) {
    frames(out).iter().fold((0, false), |(n, end), f| match f {
        Frame::Data {
            data, end_stream, ..
        } => (n + data.len(), end || *end_stream),
        _ => (n, end),
    })
}

/// A server that has read a client preface, empty SETTINGS and an ACK, with
/// its output drained.
fn server_with(config: Config) -> Connection {
    let mut server = Connection::new(Role::Server, config, T0);
    let mut input = frame::PREFACE.to_vec();
    frame::encode_settings(&mut input, &[]);
    frame::encode_settings_ack(&mut input);
    server.handle_input(T0, &input);
    drain(&mut server);
    events(&mut server);
    server
}

fn server() -> Connection {
    server_with(Config::default())
}

/// A client that has read a server's SETTINGS (plus `settings`) and an ACK.
fn client_with_peer_settings(settings: &[(u16, u32)]) -> Connection {
    let mut client = Connection::new(Role::Client, Config::default(), T0);
    let mut input = Vec::new();
    frame::encode_settings(&mut input, settings);
    frame::encode_settings_ack(&mut input);
    client.handle_input(T0, &input);
    drain(&mut client);
    events(&mut client);
    client
}

fn block(encoder: &mut Encoder, fields: Fields) -> Vec<u8> {
    let mut block = Vec::new();
    encoder.encode(fields.iter().copied(), &mut block);
    block
}

/// A HEADERS frame carrying `fields`, as a fresh client encoder would send it.
fn request_frame(stream_id: u32, fields: Fields, end_stream: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let block = block(&mut Encoder::new(), fields);
    frame::encode_headers(&mut out, stream_id, &block, end_stream, 16_384);
    out
}

/// Raw frame bytes, for frames the encoders refuse to make.
fn raw(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream_id.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A client and a server connected in memory, in virtual time.
struct Pair {
    now: Timestamp,
    client: Connection,
    server: Connection,
    client_events: Vec<Event>,
    server_events: Vec<Event>,
    /// Deliver input one octet per `handle_input` call.
    trickle: bool,
}

impl Pair {
    fn new() -> Self {
        Self::with(Config::default(), Config::default(), false)
    }

    /// Connects and completes the handshake; its events are dropped.
    fn with(client: Config, server: Config, trickle: bool) -> Self {
        let mut pair = Pair {
            now: T0,
            client: Connection::new(Role::Client, client, T0),
            server: Connection::new(Role::Server, server, T0),
            client_events: Vec::new(),
            server_events: Vec::new(),
            trickle,
        };
        pair.drive();
        pair.client_events.clear();
        pair.server_events.clear();
        pair
    }

    /// Shuttles bytes both ways, polling events as an application would,
    /// until nothing moves.
    fn drive(&mut self) {
        loop {
            self.client_events.extend(events(&mut self.client));
            self.server_events.extend(events(&mut self.server));
            let (now, trickle) = (self.now, self.trickle);
            let moved = transfer(&mut self.client, &mut self.server, now, trickle)
                + transfer(&mut self.server, &mut self.client, now, trickle);
            if moved == 0 {
                return;
            }
        }
    }

    fn request(&mut self, body: &[u8]) -> u32 {
        let now = self.now;
        let id = self.client.open_stream(now).unwrap();
        self.client.send_headers(now, id, REQUEST, false).unwrap();
        self.client.send_data(now, id, body, true).unwrap();
        self.drive();
        id
    }

    fn respond(&mut self, id: u32, body: &[u8]) {
        let now = self.now;
        self.server.send_headers(now, id, RESPONSE, false).unwrap();
        self.server.send_data(now, id, body, false).unwrap();
        self.server.send_headers(now, id, TRAILERS, true).unwrap();
        self.drive();
    }
}

fn transfer(from: &mut Connection, to: &mut Connection, now: Timestamp, trickle: bool) -> usize {
    let out = drain_at(from, now);
    if trickle {
        out.chunks(1).for_each(|b| to.handle_input(now, b));
    } else {
        to.handle_input(now, &out);
    }
    out.len()
}

/// Joins the DATA of `stream` and tells whether it ended.
fn body(events: &[Event], stream: u32) -> (Vec<u8>, bool) {
    let mut joined = (Vec::new(), false);
    for e in events {
        if let Event::Data {
            stream: s,
            data,
            end_stream,
        } = e
        {
            if *s == stream {
                joined.0.extend_from_slice(data);
                joined.1 |= end_stream;
            }
        }
    }
    joined
}

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

#[test]
fn streams_over_max_concurrent_streams_are_refused() {
    let mut server = server_with(Config {
        max_concurrent_streams: 2,
        ..Config::default()
    });
    let mut encoder = Encoder::new();
    let mut input = Vec::new();
    for id in [1, 3, 5] {
        let block = block(&mut encoder, REQUEST);
        frame::encode_headers(&mut input, id, &block, true, 16_384);
    }
    server.handle_input(T0, &input);
    assert_eq!(
        resets(&drain(&mut server)),
        [(5, ErrorCode::REFUSED_STREAM)]
    );
    let opened: Vec<u32> = events(&mut server)
        .iter()
        .filter_map(|e| match e {
            Event::Headers { stream, .. } => Some(*stream),
            _ => None,
        })
        .collect();
    assert_eq!(opened, [1, 3]);
}

#[test]
fn client_respects_peer_max_concurrent_streams() {
    let mut client = client_with_peer_settings(&[(frame::SETTINGS_MAX_CONCURRENT_STREAMS, 1)]);
    let id = client.open_stream(T0).unwrap();
    assert_eq!(client.open_stream(T0), Err(SendError::StreamLimit));
    client.reset_stream(T0, id, ErrorCode::CANCEL);
    assert_eq!(client.open_stream(T0), Ok(3));
}

#[test]
fn handshake_timeout_closes_a_client_sending_a_byte_a_minute() {
    let mut server = Connection::new(Role::Server, Config::default(), T0);
    drain(&mut server);
    let mut now = T0;
    for &byte in frame::PREFACE {
        now += Duration::from_secs(60);
        if let Some(deadline) = server.poll_timeout().filter(|&t| t <= now) {
            server.handle_timeout(deadline);
            break;
        }
        server.handle_input(now, &[byte]);
    }
    assert_eq!(
        goaway_code(&drain(&mut server)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
    assert!(server.is_closed());
    assert_eq!(server.poll_timeout(), None);
}

#[test]
fn handshake_deadline_is_cleared_once_settings_are_exchanged() {
    let p = Pair::new();
    assert_eq!(
        (p.client.poll_timeout(), p.server.poll_timeout()),
        (None, None)
    );
}

#[test]
fn spurious_timeouts_are_no_ops() {
    let mut server = Connection::new(Role::Server, Config::default(), T0);
    drain(&mut server);
    server.handle_timeout(T0 + Duration::from_secs(1));
    assert!(!server.is_closed() && server.pending_output().is_empty());
}

fn idle_config() -> Config {
    Config {
        idle_timeout: Some(Duration::from_secs(30)),
        ..Config::default()
    }
}

#[test]
fn idle_timeout_sends_goaway_and_closes() {
    let mut p = Pair::with(Config::default(), idle_config(), false);
    let deadline = p.server.poll_timeout().unwrap();
    assert_eq!(deadline, T0 + Duration::from_secs(30));
    p.server.handle_timeout(deadline);
    assert_eq!(
        goaway_code(&drain(&mut p.server)),
        Some(ErrorCode::NO_ERROR)
    );
    assert!(p.server.is_closed());
}

#[test]
fn idle_clock_starts_when_an_application_call_ends_the_last_stream() {
    let mut p = Pair::with(Config::default(), idle_config(), false);
    let id = p.request(b"");
    p.now += Duration::from_secs(60);
    // The response ends the last stream; the call says when.
    p.respond(id, b"");
    let deadline = p.server.poll_timeout().unwrap();
    assert_eq!(deadline, p.now + Duration::from_secs(30));
    p.server.handle_timeout(p.now + Duration::from_secs(29));
    assert!(!p.server.is_closed());
    p.server.handle_timeout(deadline);
    assert!(p.server.is_closed());
}

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

/// A client that mostly plays by the rules: requests on increasing ids (with
/// HPACK state shared with the server), DATA and trailers on recent streams,
/// control frames, and now and then something random.
struct FuzzClient {
    rng: StdRng,
    encoder: Encoder,
    next_id: u32,
}

impl FuzzClient {
    fn recent_id(&mut self) -> u32 {
        self.next_id
            .saturating_sub(2 * self.rng.random_range(1..4))
            .max(1)
    }

    fn frame(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let end = self.rng.random_bool(0.3);
        let pick = match self.next_id {
            1 => 0, // no stream yet
            _ => self.rng.random_range(0..200),
        };
        match pick {
            0..=59 => {
                let id = self.next_id;
                self.next_id += 2;
                let block = block(&mut self.encoder, REQUEST);
                let max = if self.rng.random_bool(0.2) { 1 } else { 16_384 };
                split_headers(&mut out, id, &block, end, max);
            }
            60..=109 => {
                let (id, len) = (self.recent_id(), self.rng.random_range(0..3000));
                frame::encode_data(&mut out, id, &vec![1; len], end, 16_384);
            }
            110..=119 => {
                let (id, pad) = (self.recent_id(), self.rng.random_range(0..=255u8));
                let payload = [&[pad][..], b"abc", &vec![0; pad as usize]].concat();
                out = raw(frame::TYPE_DATA, frame::FLAG_PADDED, id, &payload);
            }
            120..=129 => {
                let block = block(&mut self.encoder, TRAILERS);
                split_headers(&mut out, self.recent_id(), &block, true, 16_384);
            }
            130..=149 => {
                let id = if end { 0 } else { self.recent_id() };
                frame::encode_window_update(&mut out, id, self.rng.random_range(1..100_000));
            }
            150..=159 => {
                let setting = [(1, 0), (1, 8192), (2, 0), (3, 1), (3, 100), (4, 0)]
                    [self.rng.random_range(0..6)];
                let window = (4, self.rng.random_range(0..100_000));
                frame::encode_settings(&mut out, &[setting, window, (5, 20_000), (9, 9)]);
            }
            160..=169 => frame::encode_ping(&mut out, end, [7; 8]),
            170..=179 => frame::encode_rst_stream(&mut out, self.recent_id(), ErrorCode::CANCEL),
            180..=189 => out = raw(frame::TYPE_PRIORITY, 0, self.recent_id(), &[0, 0, 0, 0, 9]),
            190..=197 => out = raw(0x42, 0, self.recent_id(), b"unknown"),
            198 => frame::encode_goaway(&mut out, 1, ErrorCode::NO_ERROR, b"bye"),
            _ => {
                out = (0..self.rng.random_range(1..64))
                    .map(|_| self.rng.random())
                    .collect()
            }
        }
        if self.rng.random_bool(0.01) {
            let at = self.rng.random_range(0..out.len());
            out[at] = self.rng.random();
        }
        out
    }
}

/// A header block as HEADERS plus CONTINUATIONs of at most `max` octets.
fn split_headers(out: &mut Vec<u8>, id: u32, block: &[u8], end_stream: bool, max: usize) {
    let mut chunks = block.chunks(max).peekable();
    let mut flags = if end_stream {
        frame::FLAG_END_STREAM
    } else {
        0
    };
    let mut kind = frame::TYPE_HEADERS;
    while let Some(chunk) = chunks.next() {
        if chunks.peek().is_none() {
            flags |= frame::FLAG_END_HEADERS;
        }
        out.extend(raw(kind, flags, id, chunk));
        (kind, flags) = (frame::TYPE_CONTINUATION, 0);
    }
}

/// One seeded run: a handshaken server fed a mostly well-behaved client's
/// frames in random pieces, answering requests as an application would.
fn fuzz_one(seed: u64) -> usize {
    let mut client = FuzzClient {
        rng: StdRng::seed_from_u64(seed),
        encoder: Encoder::new(),
        next_id: 1,
    };
    let config = Config {
        max_concurrent_streams: 8,
        max_header_list_size: 4096,
        ..Config::default()
    };
    let mut server = server_with(config);
    let mut now = T0;
    for round in 0..300 {
        let input = client.frame();
        let rng = &mut client.rng;
        for piece in input.chunks(rng.random_range(1..64)) {
            now += Duration::from_millis(rng.random_range(0..50));
            server.handle_input(now, piece);
        }
        for event in events(&mut server) {
            if let Event::Headers { stream, .. } = event {
                let _ = server.send_headers(T0, stream, RESPONSE, false);
                let _ = server.send_data(T0, stream, &[5; 1000], rng.random_bool(0.5));
            }
        }
        let out = server.pending_output().len();
        server.consume_output(T0, rng.random_range(0..=out));
        assert!(
            server.buffered_bytes() < 1 << 20,
            "{}",
            server.buffered_bytes()
        );
        assert!(server.open_streams() <= 8);
        if server.is_closed() {
            return round;
        }
    }
    300
}

/// The same frames fed to a client with requests in flight: no panic, bounded.
fn fuzz_client_one(seed: u64) {
    let mut peer = FuzzClient {
        rng: StdRng::seed_from_u64(seed),
        encoder: Encoder::new(),
        next_id: 1,
    };
    let mut client = client_with_peer_settings(&[]);
    for _ in 0..300 {
        while client.open_streams() < 4 {
            let Ok(id) = client.open_stream(T0) else {
                break;
            };
            client.send_headers(T0, id, REQUEST, false).unwrap();
            client.send_data(T0, id, &[3; 500], true).unwrap();
        }
        client.handle_input(T0, &peer.frame());
        events(&mut client);
        drain(&mut client);
        assert!(client.buffered_bytes() < 1 << 20);
        if client.is_closed() {
            return;
        }
    }
}

/// Prints the seed when a fuzz run panics.
struct SeedGuard(u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "failing seed: {} (rerun with H2_FUZZ_SEED={}; H2_FUZZ_RUNS=n runs more)",
                self.0, self.0
            );
        }
    }
}

#[test]
fn random_and_mutated_input_never_panics_and_memory_stays_bounded() {
    let env = |name| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let (base, runs) = match env("H2_FUZZ_SEED") {
        Some(seed) => (seed, 1),
        None => (0x5eed_0002, env("H2_FUZZ_RUNS").unwrap_or(5000)),
    };
    let mut rounds = 0;
    for seed in base..base + runs {
        let _guard = SeedGuard(seed);
        rounds += fuzz_one(seed);
        fuzz_client_one(seed);
    }
    // The client is well-behaved enough to get deep into most connections.
    assert!(
        rounds / runs as usize >= 20,
        "mean rounds {}",
        rounds / runs as usize
    );
}

#[path = "http2_conn/abuse.rs"]
mod abuse;
