//! The gRPC parsers on arbitrary peer input: no panics, and fragmenting never changes the result.

use backoffd::grpc::message::{encode_message, MessageDecoder};
use backoffd::grpc::status::{decode_message, encode_message as encode_grpc_message};
use backoffd::grpc::timeout::{format_timeout, parse_timeout};
use proptest::prelude::*;
use std::time::Duration;

/// Pushes `wire` cut at `cuts` and returns the messages and the first error.
fn decode_in_pieces(wire: &[u8], cuts: &[usize]) -> (Vec<Vec<u8>>, Option<String>) {
    let mut decoder = MessageDecoder::new(64, false);
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
    points.push(0);
    points.push(wire.len());
    points.sort_unstable();
    let mut error = None;
    for piece in points.windows(2) {
        if let Err(status) = decoder.push(&wire[piece[0]..piece[1]]) {
            error.get_or_insert(status.to_string());
        }
    }
    let messages = std::iter::from_fn(|| decoder.pop())
        .map(|m| m.payload)
        .collect();
    (messages, error)
}

proptest! {
    #[test]
    fn message_decoder_result_is_independent_of_fragmentation(
        wire in prop::collection::vec(prop_oneof![Just(0u8), Just(1), any::<u8>()], 0..200),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        prop_assert_eq!(decode_in_pieces(&wire, &cuts), decode_in_pieces(&wire, &[]));
    }

    #[test]
    fn framed_messages_come_back_whole(
        messages in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..8),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let mut wire = Vec::new();
        for m in &messages {
            encode_message(&mut wire, m).unwrap();
        }
        prop_assert_eq!(decode_in_pieces(&wire, &cuts), (messages, None));
    }

    #[test]
    fn grpc_timeout_parser_never_panics(value in prop::collection::vec(any::<u8>(), 0..12)) {
        let _ = parse_timeout(&value);
    }

    #[test]
    fn grpc_timeout_round_trips_without_shortening(nanos in any::<u64>()) {
        let d = Duration::from_nanos(nanos);
        let parsed = parse_timeout(format_timeout(d).as_bytes()).unwrap();
        prop_assert!(parsed >= d);
    }

    #[test]
    fn grpc_message_decoding_never_panics(value in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode_message(&value);
    }

    #[test]
    fn grpc_message_encoding_is_header_safe_and_reversible(text in any::<String>()) {
        let encoded = encode_grpc_message(&text);
        prop_assert!(encoded.iter().all(|b| (0x20..=0x7e).contains(b)));
        prop_assert_eq!(decode_message(&encoded), text);
    }
}

// The server call layer against hostile clients (issue 13, rows 2 and 8), in virtual time.

use backoffd::grpc::server::{ServerConnection, ServerEvent};
use backoffd::grpc::status::Code;
use backoffd::http2::error::ErrorCode;
use backoffd::http2::frame::{self, Frame};
use backoffd::http2::hpack::{Decoder, Encoder, Header};
use backoffd::http2::{Config, Cutoff};
use backoffd::time::Timestamp;

const T0: Timestamp = Timestamp::ZERO;

/// A hand-driven client: frames built here, the server's answers parsed back.
struct Client {
    encoder: Encoder,
    decoder: Decoder,
    server: ServerConnection,
}

impl Client {
    /// Connected: preface, SETTINGS and the ACK of the server's exchanged.
    fn new() -> Self {
        Self::with(Config::default())
    }

    fn with(config: Config) -> Self {
        let mut server = ServerConnection::new(T0, config);
        let mut input = frame::PREFACE.to_vec();
        frame::encode_settings(&mut input, &[]);
        frame::encode_settings_ack(&mut input);
        server.handle_input(T0, &input);
        let mut client = Client {
            encoder: Encoder::new(),
            decoder: Decoder::new(4096, 1 << 16),
            server,
        };
        client.answers();
        client
    }

    /// HEADERS of a Start call (END_STREAM if `end_stream`).
    fn headers(&mut self, out: &mut Vec<u8>, id: u32, end_stream: bool) {
        let fields: [(&[u8], &[u8]); 5] = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/grpc.testing.ReconnectService/Start"),
            (b":authority", b"localhost"),
            (b"content-type", b"application/grpc"),
        ];
        let mut block = Vec::new();
        self.encoder.encode(fields, &mut block);
        frame::encode_headers(out, id, &block, end_stream, 16_384);
    }

    /// A whole unary call: HEADERS, then one message ending the stream.
    fn call(&mut self, out: &mut Vec<u8>, id: u32, message: &[u8]) {
        self.headers(out, id, false);
        let mut body = Vec::new();
        encode_message(&mut body, message).unwrap();
        frame::encode_data(out, id, &body, true, 16_384);
    }

    fn send(&mut self, now: Timestamp, input: &[u8]) {
        self.server.handle_input(now, input);
    }

    fn events(&mut self) -> Vec<ServerEvent> {
        std::iter::from_fn(|| self.server.poll_event()).collect()
    }

    /// What the server wrote since the last call: each stream's gRPC status, RST_STREAMs and
    /// GOAWAY, in order.
    fn answers(&mut self) -> Vec<Answer> {
        let out = self.server.pending_output().to_vec();
        self.server.consume_output(T0, out.len());
        let mut rest = &out[..];
        let mut answers = Vec::new();
        while let Some((f, n)) = frame::decode(rest, frame::MAX_ALLOWED_FRAME_SIZE).unwrap() {
            rest = &rest[n..];
            match f {
                Frame::Headers {
                    stream_id,
                    fragment,
                    ..
                } => {
                    let mut headers = Vec::new();
                    self.decoder.decode(fragment, &mut headers).unwrap();
                    if let Some(code) = grpc_status(&headers) {
                        answers.push(Answer::Status(stream_id, code));
                    }
                }
                Frame::RstStream { stream_id, code } => {
                    answers.push(Answer::Reset(stream_id, code))
                }
                Frame::GoAway {
                    last_stream_id,
                    code,
                    ..
                } => answers.push(Answer::GoAway(last_stream_id, code)),
                _ => {}
            }
        }
        answers
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Status(u32, Code),
    Reset(u32, ErrorCode),
    GoAway(u32, ErrorCode),
}

fn grpc_status(headers: &[Header]) -> Option<Code> {
    let h = headers.iter().find(|h| h.name == b"grpc-status")?;
    Code::from_header(&h.value)
}

fn requests(events: &[ServerEvent]) -> Vec<u32> {
    let request = |e: &ServerEvent| match e {
        ServerEvent::Request(r) => Some(r.stream),
        ServerEvent::Cancelled { .. } => None,
    };
    events.iter().filter_map(request).collect()
}

/// A DATA payload that starts a message of `declared` octets and carries `have` of them.
fn unfinished_message(declared: u32, have: usize) -> Vec<u8> {
    let mut body = vec![0];
    body.extend_from_slice(&declared.to_be_bytes());
    body.resize(5 + have, 7);
    body
}

#[test]
fn a_request_message_over_a_few_kib_is_resource_exhausted_before_its_body() {
    let mut c = Client::new();
    let mut input = Vec::new();
    c.headers(&mut input, 1, false);
    frame::encode_data(&mut input, 1, &unfinished_message(5000, 100), false, 16_384);
    c.send(T0, &input);
    assert_eq!(c.events(), []);
    assert_eq!(
        c.answers(),
        [
            Answer::Status(1, Code::ResourceExhausted),
            Answer::Reset(1, ErrorCode::NO_ERROR)
        ]
    );
    assert_eq!(c.server.abuse().oversized_messages, 1);
    assert!(c.server.buffered_bytes() < 100);
}

#[test]
fn unfinished_messages_on_many_streams_stay_within_the_connections_budget() {
    let mut c = Client::new();
    let mut input = Vec::new();
    // Row 2: 100 streams each holding most of a message (4 MiB then; 4,000 octets now).
    for id in (1..200).step_by(2) {
        c.headers(&mut input, id, false);
        frame::encode_data(
            &mut input,
            id,
            &unfinished_message(4096, 4000),
            false,
            16_384,
        );
    }
    c.send(T0, &input);
    assert_eq!(c.events(), []);
    let refused = c
        .answers()
        .iter()
        .filter(|a| matches!(a, Answer::Status(_, Code::ResourceExhausted)))
        .count();
    // 16 fit in 64 KiB; the other 84 were answered RESOURCE_EXHAUSTED and reset.
    assert_eq!(refused, 84);
    assert_eq!(c.server.abuse().over_budget, 84);
    assert!(
        c.server.buffered_bytes() < 64 * 1024 + 4096,
        "{}",
        c.server.buffered_bytes()
    );
    // The connection serves a well-behaved call meanwhile.
    let mut input = Vec::new();
    c.call(&mut input, 201, b"");
    c.send(T0, &input);
    assert_eq!(requests(&c.events()), [201]);
    assert_eq!(c.server.abuse().http2.cutoff, None);
}

#[test]
fn rapid_reset_dispatches_nothing_and_is_cut_off() {
    let mut c = Client::new();
    let mut input = Vec::new();
    for id in (1..100_000).step_by(2) {
        c.call(&mut input, id, b"");
        frame::encode_rst_stream(&mut input, id, ErrorCode::CANCEL);
    }
    c.send(T0, &input);
    assert_eq!(c.events(), []);
    assert_eq!(
        c.server.abuse().http2.cutoff,
        Some(Cutoff::PendingAcceptResets)
    );
    assert_eq!(
        c.answers().last(),
        Some(&Answer::GoAway(41, ErrorCode::ENHANCE_YOUR_CALM))
    );
}

#[test]
fn a_request_reset_before_the_application_polled_it_is_not_dispatched() {
    let mut c = Client::new();
    let mut input = Vec::new();
    c.call(&mut input, 1, b"");
    c.send(T0, &input);
    // The driver reads on before it polls: the reset comes in the same wake-up.
    let mut rst = Vec::new();
    frame::encode_rst_stream(&mut rst, 1, ErrorCode::CANCEL);
    c.send(T0, &rst);
    assert_eq!(c.events(), []);
    assert_eq!(c.server.abuse().reset_before_dispatch, 1);
    // Once polled, a reset is a cancellation.
    let mut input = Vec::new();
    c.call(&mut input, 3, b"");
    c.send(T0, &input);
    assert_eq!(requests(&c.events()), [3]);
    let mut rst = Vec::new();
    frame::encode_rst_stream(&mut rst, 3, ErrorCode::CANCEL);
    c.send(T0, &rst);
    assert_eq!(c.events(), [ServerEvent::Cancelled { stream: 3 }]);
}

#[test]
fn a_connection_cut_off_dispatches_nothing_more() {
    let mut c = Client::new();
    let mut input = Vec::new();
    c.call(&mut input, 1, b"");
    for _ in 0..1000 {
        frame::encode_ping(&mut input, false, [0; 8]);
    }
    c.send(T0, &input);
    assert!(c.server.is_closed());
    assert_eq!(c.server.abuse().http2.cutoff, Some(Cutoff::ControlFlood));
    assert_eq!(c.events(), []);
}

#[test]
fn a_parked_call_keeps_its_connection_open_past_the_idle_timeout() {
    // The reconnect server's idle timeout.
    let mut c = Client::with(Config {
        idle_timeout: Some(Duration::from_secs(600)),
        ..Config::default()
    });
    let mut input = Vec::new();
    c.call(&mut input, 1, b"");
    c.send(T0, &input);
    assert_eq!(requests(&c.events()), [1]);
    // The interop client may hold a parked Start for 540 s, or longer.
    let later = T0 + Duration::from_secs(3600);
    assert_eq!(c.server.poll_timeout(), None);
    c.server.handle_timeout(later);
    assert!(!c.server.is_closed());
    c.server.respond(later, 1, Ok(vec![]));
    assert_eq!(c.answers(), [Answer::Status(1, Code::Ok)]);
    // Then idle: closed 10 minutes later.
    let idle = later + Duration::from_secs(600);
    assert_eq!(c.server.poll_timeout(), Some(idle));
    c.server.handle_timeout(idle);
    assert!(c.server.is_closed());
    assert_eq!(c.answers(), [Answer::GoAway(1, ErrorCode::NO_ERROR)]);
}

#[test]
fn a_call_past_its_deadline_while_still_sending_is_answered_and_reset() {
    let mut c = Client::new();
    let mut input = Vec::new();
    let mut block = Vec::new();
    let fields: [(&[u8], &[u8]); 6] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/grpc.testing.ReconnectService/Start"),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
        (b"grpc-timeout", b"1S"),
    ];
    c.encoder.encode(fields, &mut block);
    frame::encode_headers(&mut input, 1, &block, false, 16_384);
    c.send(T0, &input);
    let deadline = T0 + Duration::from_secs(1);
    assert_eq!(c.server.poll_timeout(), Some(deadline));
    c.server.handle_timeout(deadline);
    assert_eq!(
        c.answers(),
        [
            Answer::Status(1, Code::DeadlineExceeded),
            Answer::Reset(1, ErrorCode::NO_ERROR)
        ]
    );
    assert_eq!(c.events(), []);
}
