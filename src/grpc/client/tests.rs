//! The client call layer against our gRPC server connection and against a raw HTTP/2 server
//! that answers whatever a test scripts, bytes shuttled in memory, in virtual time.

use super::*;
use crate::grpc::server::{ServerConnection, ServerEvent};
use crate::grpc::status::encode_message as encode_grpc_message;

const T0: Timestamp = Timestamp::from_nanos(1_000_000_000);
const PATH: &str = "/grpc.testing.ReconnectService/Start";

fn client() -> ClientConnection {
    ClientConnection::new(T0, "localhost:8080", false, Config::default())
}

fn pump_to_server(c: &mut ClientConnection, s: &mut ServerConnection) {
    let out = c.pending_output().to_vec();
    c.consume_output(T0, out.len());
    s.handle_input(T0, &out);
}

fn pump_to_client(s: &mut ServerConnection, c: &mut ClientConnection) {
    let out = s.pending_output().to_vec();
    s.consume_output(T0, out.len());
    c.handle_input(T0, &out);
}

fn responses(c: &mut ClientConnection) -> Vec<(u32, Result<Vec<u8>, Status>)> {
    let mut out = Vec::new();
    while let Some(event) = c.poll_event() {
        if let ClientEvent::Response { stream, result } = event {
            out.push((stream, result));
        }
    }
    out
}

/// A raw HTTP/2 server that has read the client's request on stream 1.
fn raw_server(c: &mut ClientConnection) -> Connection {
    let mut s = Connection::new(Role::Server, Config::default(), T0);
    let out = c.pending_output().to_vec();
    c.consume_output(T0, out.len());
    s.handle_input(T0, &out);
    while s.poll_event().is_some() {}
    s
}

fn raw_to_client(s: &mut Connection, c: &mut ClientConnection) {
    let out = s.pending_output().to_vec();
    s.consume_output(T0, out.len());
    c.handle_input(T0, &out);
}

/// Sends `headers` on stream 1 from the raw server, then returns the client's only response.
fn answer(fields: &[(&[u8], &[u8])], end_stream: bool) -> Result<Vec<u8>, Status> {
    let mut c = client();
    c.call(T0, PATH, b"req", None).unwrap();
    let mut s = raw_server(&mut c);
    s.send_headers(T0, 1, fields, end_stream).unwrap();
    raw_to_client(&mut s, &mut c);
    let mut r = responses(&mut c);
    assert_eq!(r.len(), 1, "{r:?}");
    r.pop().unwrap().1
}

#[test]
fn request_headers_are_what_a_grpc_server_expects() {
    let mut c = client();
    let stream = c
        .call(T0, PATH, b"hello", Some(Duration::from_millis(1500)))
        .unwrap();
    assert_eq!(stream, 1);
    let mut s = Connection::new(Role::Server, Config::default(), T0);
    let out = c.pending_output().to_vec();
    s.handle_input(T0, &out);
    let mut seen = None;
    let mut body = Vec::new();
    while let Some(event) = s.poll_event() {
        match event {
            Event::Headers { headers, .. } => seen = Some(headers),
            Event::Data { data, .. } => body.extend(data),
            _ => {}
        }
    }
    let headers = seen.expect("request headers");
    let get = |name: &[u8]| {
        headers
            .iter()
            .find(|h| h.name == name)
            .map(|h| String::from_utf8(h.value.clone()).unwrap())
    };
    assert_eq!(get(b":method").as_deref(), Some("POST"));
    assert_eq!(get(b":scheme").as_deref(), Some("http"));
    assert_eq!(get(b":path").as_deref(), Some(PATH));
    assert_eq!(get(b":authority").as_deref(), Some("localhost:8080"));
    assert_eq!(get(b"content-type").as_deref(), Some("application/grpc"));
    assert_eq!(get(b"te").as_deref(), Some("trailers"));
    assert_eq!(get(b"user-agent").as_deref(), Some(USER_AGENT));
    assert_eq!(get(b"grpc-timeout").as_deref(), Some("1500000u"));
    assert_eq!(body, b"\0\0\0\0\x05hello");
}

#[test]
fn no_timeout_means_no_grpc_timeout_header_and_no_deadline() {
    let mut c = client();
    c.call(T0, PATH, b"", None).unwrap();
    let mut s = Connection::new(Role::Server, Config::default(), T0);
    s.handle_input(T0, c.pending_output());
    while let Some(event) = s.poll_event() {
        if let Event::Headers { headers, .. } = event {
            assert!(headers.iter().all(|h| h.name != b"grpc-timeout"));
        }
    }
    assert!(c
        .poll_timeout()
        .is_some_and(|t| t > T0 + Duration::from_secs(10)));
}

#[test]
fn unary_call_round_trip_with_our_server() {
    let mut c = client();
    let mut s = ServerConnection::new(T0, Config::default());
    let stream = c.call(T0, PATH, b"ping", None).unwrap();
    pump_to_server(&mut c, &mut s);
    let Some(ServerEvent::Request(req)) = s.poll_event() else {
        panic!("no request");
    };
    assert_eq!(
        (req.service.as_str(), req.method.as_str()),
        ("grpc.testing.ReconnectService", "Start")
    );
    assert_eq!(req.message, b"ping");
    s.respond(T0, req.stream, Ok(b"pong".to_vec()));
    pump_to_client(&mut s, &mut c);
    assert_eq!(c.poll_event(), Some(ClientEvent::SettingsReceived));
    assert!(c.is_ready());
    assert_eq!(responses(&mut c), [(stream, Ok(b"pong".to_vec()))]);
    assert_eq!(c.calls_in_flight(), 0);
}

#[test]
fn empty_response_message_is_a_success() {
    let mut c = client();
    let mut s = ServerConnection::new(T0, Config::default());
    c.call(T0, PATH, b"", None).unwrap();
    pump_to_server(&mut c, &mut s);
    let Some(ServerEvent::Request(req)) = s.poll_event() else {
        panic!("no request");
    };
    s.respond(T0, req.stream, Ok(Vec::new()));
    pump_to_client(&mut s, &mut c);
    assert_eq!(responses(&mut c), [(1, Ok(Vec::new()))]);
}

#[test]
fn trailers_only_error_carries_code_and_percent_decoded_message() {
    let mut c = client();
    let mut s = ServerConnection::new(T0, Config::default());
    c.call(T0, "/grpc.testing.Nope/Start", b"", None).unwrap();
    pump_to_server(&mut c, &mut s);
    let Some(ServerEvent::Request(req)) = s.poll_event() else {
        panic!("no request");
    };
    s.respond(
        T0,
        req.stream,
        Err(Status::new(Code::Unavailable, "100% gone ✓")),
    );
    pump_to_client(&mut s, &mut c);
    assert_eq!(
        responses(&mut c),
        [(1, Err(Status::new(Code::Unavailable, "100% gone ✓")))]
    );
}

#[test]
fn trailers_with_error_after_headers() {
    let msg = encode_grpc_message("bad\nthing");
    let mut c = client();
    c.call(T0, PATH, b"", None).unwrap();
    let mut s = raw_server(&mut c);
    s.send_headers(
        T0,
        1,
        &[
            (b":status", b"200"),
            (b"content-type", b"application/grpc+proto"),
        ],
        false,
    )
    .unwrap();
    s.send_headers(
        T0,
        1,
        &[(b"grpc-status", b"9"), (b"grpc-message", &msg)],
        true,
    )
    .unwrap();
    raw_to_client(&mut s, &mut c);
    assert_eq!(
        responses(&mut c),
        [(1, Err(Status::new(Code::FailedPrecondition, "bad\nthing")))]
    );
}

#[test]
fn non_200_status_maps_per_http_grpc_status_mapping() {
    for (http, code) in [
        (&b"400"[..], Code::Internal),
        (b"401", Code::Unauthenticated),
        (b"403", Code::PermissionDenied),
        (b"404", Code::Unimplemented),
        (b"429", Code::Unavailable),
        (b"502", Code::Unavailable),
        (b"503", Code::Unavailable),
        (b"504", Code::Unavailable),
        (b"500", Code::Unknown),
    ] {
        let result = answer(&[(b":status", http)], true);
        assert_eq!(
            result.unwrap_err().code,
            code,
            "{}",
            String::from_utf8_lossy(http)
        );
        // The same status on headers that do not end the stream.
        let result = answer(
            &[(b":status", http), (b"content-type", b"text/html")],
            false,
        );
        assert_eq!(result.unwrap_err().code, code);
    }
}

#[test]
fn grpc_status_wins_over_the_http_status() {
    let result = answer(
        &[
            (b":status", b"415"),
            (b"grpc-status", b"13"),
            (b"grpc-message", b"ct"),
        ],
        true,
    );
    assert_eq!(result, Err(Status::new(Code::Internal, "ct")));
}

#[test]
fn trailers_only_ok_without_a_message_is_internal() {
    let result = answer(
        &[
            (b":status", b"200"),
            (b"content-type", b"application/grpc"),
            (b"grpc-status", b"0"),
        ],
        true,
    );
    assert_eq!(result.unwrap_err().code, Code::Internal);
}

#[test]
fn ok_trailers_without_a_message_is_internal() {
    let mut c = client();
    c.call(T0, PATH, b"", None).unwrap();
    let mut s = raw_server(&mut c);
    s.send_headers(
        T0,
        1,
        &[(b":status", b"200"), (b"content-type", b"application/grpc")],
        false,
    )
    .unwrap();
    s.send_headers(T0, 1, &[(b"grpc-status", b"0")], true)
        .unwrap();
    raw_to_client(&mut s, &mut c);
    assert_eq!(
        responses(&mut c)[0].1.as_ref().unwrap_err().code,
        Code::Internal
    );
}

#[test]
fn two_response_messages_fail_the_unary_call() {
    let mut c = client();
    c.call(T0, PATH, b"", None).unwrap();
    let mut s = raw_server(&mut c);
    s.send_headers(
        T0,
        1,
        &[(b":status", b"200"), (b"content-type", b"application/grpc")],
        false,
    )
    .unwrap();
    s.send_data(T0, 1, b"\0\0\0\0\x01a\0\0\0\0\x01b", false)
        .unwrap();
    s.send_headers(T0, 1, &[(b"grpc-status", b"0")], true)
        .unwrap();
    raw_to_client(&mut s, &mut c);
    assert_eq!(
        responses(&mut c)[0].1.as_ref().unwrap_err().code,
        Code::Internal
    );
}

#[test]
fn a_body_without_trailers_is_an_error() {
    let mut c = client();
    c.call(T0, PATH, b"", None).unwrap();
    let mut s = raw_server(&mut c);
    s.send_headers(
        T0,
        1,
        &[(b":status", b"200"), (b"content-type", b"application/grpc")],
        false,
    )
    .unwrap();
    s.send_data(T0, 1, b"\0\0\0\0\x01a", true).unwrap();
    raw_to_client(&mut s, &mut c);
    assert_eq!(
        responses(&mut c)[0].1.as_ref().unwrap_err().code,
        Code::Internal
    );
}

#[test]
fn non_grpc_content_type_is_unknown() {
    let mut c = client();
    c.call(T0, PATH, b"", None).unwrap();
    let mut s = raw_server(&mut c);
    s.send_headers(
        T0,
        1,
        &[(b":status", b"200"), (b"content-type", b"application/json")],
        false,
    )
    .unwrap();
    s.send_data(T0, 1, b"\0\0\0\0\x01a", false).unwrap();
    s.send_headers(T0, 1, &[(b"grpc-status", b"0")], true)
        .unwrap();
    raw_to_client(&mut s, &mut c);
    assert_eq!(
        responses(&mut c)[0].1.as_ref().unwrap_err().code,
        Code::Unknown
    );
}

#[test]
fn rst_stream_codes_map_to_statuses() {
    for (code, expected) in [
        (ErrorCode::REFUSED_STREAM, Code::Unavailable),
        (ErrorCode::CANCEL, Code::Cancelled),
        (ErrorCode::ENHANCE_YOUR_CALM, Code::ResourceExhausted),
        (ErrorCode::INADEQUATE_SECURITY, Code::PermissionDenied),
        (ErrorCode::INTERNAL_ERROR, Code::Internal),
        (ErrorCode::NO_ERROR, Code::Internal),
    ] {
        let mut c = client();
        c.call(T0, PATH, b"", None).unwrap();
        let mut s = raw_server(&mut c);
        s.reset_stream(T0, 1, code);
        raw_to_client(&mut s, &mut c);
        assert_eq!(
            responses(&mut c)[0].1.as_ref().unwrap_err().code,
            expected,
            "{code}"
        );
    }
}

#[test]
fn informational_headers_are_skipped() {
    let mut c = client();
    c.call(T0, PATH, b"", None).unwrap();
    let mut s = raw_server(&mut c);
    // Our server connection never sends 1xx, so the 100 Continue is written by hand, after the
    // server's SETTINGS (which `raw_to_client` would otherwise send after it).
    raw_to_client(&mut s, &mut c);
    let mut block = Vec::new();
    crate::http2::hpack::Encoder::new().encode([(&b":status"[..], &b"100"[..])], &mut block);
    let mut frame = Vec::new();
    crate::http2::frame::encode_headers(&mut frame, 1, &block, false, 16_384);
    c.handle_input(T0, &frame);
    s.send_headers(
        T0,
        1,
        &[(b":status", b"200"), (b"content-type", b"application/grpc")],
        false,
    )
    .unwrap();
    s.send_data(T0, 1, b"\0\0\0\0\x02ok", false).unwrap();
    s.send_headers(T0, 1, &[(b"grpc-status", b"0")], true)
        .unwrap();
    raw_to_client(&mut s, &mut c);
    assert_eq!(responses(&mut c), [(1, Ok(b"ok".to_vec()))]);
}

#[test]
fn deadline_expiry_is_deadline_exceeded_and_cancels_the_stream() {
    let mut c = client();
    c.call(T0, PATH, b"", Some(Duration::from_secs(2))).unwrap();
    let mut s = raw_server(&mut c);
    let deadline = T0 + Duration::from_secs(2);
    assert_eq!(c.poll_timeout(), Some(deadline));
    c.handle_timeout(T0 + Duration::from_nanos(1_999_999_999));
    assert!(responses(&mut c).is_empty());
    c.handle_timeout(deadline);
    assert_eq!(
        responses(&mut c)[0].1.as_ref().unwrap_err().code,
        Code::DeadlineExceeded
    );
    s.handle_input(deadline, c.pending_output());
    let mut reset = false;
    while let Some(event) = s.poll_event() {
        reset |= event
            == Event::StreamReset {
                stream: 1,
                code: ErrorCode::CANCEL,
            };
    }
    assert!(reset, "the server learns the call was cancelled");
}

#[test]
fn transport_close_fails_open_calls_unavailable() {
    let mut c = client();
    let a = c.call(T0, PATH, b"", None).unwrap();
    let b = c.call(T0, PATH, b"", None).unwrap();
    c.on_transport_closed("peer closed");
    let r = responses(&mut c);
    assert_eq!(r.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [a, b]);
    assert!(r
        .iter()
        .all(|(_, res)| res.as_ref().unwrap_err().code == Code::Unavailable));
    assert_eq!(c.calls_in_flight(), 0);
}

#[test]
fn goaway_excluding_the_call_makes_it_unavailable() {
    let mut c = client();
    c.call(T0, PATH, b"", None).unwrap();
    let mut s = Connection::new(Role::Server, Config::default(), T0);
    // The server says goodbye before reading the request: stream 1 was never processed.
    s.go_away(T0, ErrorCode::NO_ERROR, b"");
    raw_to_client(&mut s, &mut c);
    let r = responses(&mut c);
    assert_eq!(r[0].1.as_ref().unwrap_err().code, Code::Unavailable);
    assert_eq!(
        c.call(T0, PATH, b"", None).unwrap_err().code,
        Code::Unavailable
    );
}

#[test]
fn garbage_from_the_server_fails_calls_instead_of_hanging() {
    let mut c = client();
    c.call(T0, PATH, b"", None).unwrap();
    c.handle_input(T0, b"HTTP/1.1 400 Bad Request\r\n\r\n");
    assert!(c.is_closed());
    assert_eq!(
        responses(&mut c)[0].1.as_ref().unwrap_err().code,
        Code::Unavailable
    );
}
