//! Streamed answers (Server-Sent Events) and answers without content.

use super::{at, conn, sent, statuses, GET};
use crate::http1::{Config, Http1Connection};

const SSE: &str = "text/event-stream";
const CACHE: &[(&str, &str)] = &[("Cache-Control", "no-cache")];

/// A connection with `input` read and its first request taken.
fn with_request(input: &[u8]) -> Http1Connection {
    let mut c = conn();
    c.handle_input(at(1), input);
    assert!(c.poll_request().is_some());
    c
}

#[test]
fn a_stream_is_chunked_and_ends_with_the_last_chunk() {
    let mut c = with_request(GET);
    assert!(c.start_stream(200, CACHE, SSE));
    assert!(c.stream_data(b"data: 1\n\n"));
    assert!(c.end_stream());
    assert_eq!(
        sent(&mut c),
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\
         Cache-Control: no-cache\r\n\r\n9\r\ndata: 1\n\n\r\n0\r\n\r\n"
    );
    assert!(!c.is_closed() && c.wants_input());
}

#[test]
fn an_empty_chunk_does_not_end_the_stream() {
    let mut c = with_request(GET);
    c.start_stream(200, &[], SSE);
    sent(&mut c);
    assert!(c.stream_data(b""));
    assert!(sent(&mut c).is_empty());
    assert!(c.stream_data(b"x"));
    assert_eq!(sent(&mut c), "1\r\nx\r\n");
}

#[test]
fn a_stream_keeps_the_next_pipelined_answer_waiting() {
    let mut c = with_request(&GET.repeat(2));
    assert!(c.start_stream(200, &[], SSE));
    assert!(!c.start_stream(200, &[], SSE), "one stream at a time");
    let next = c.poll_request().unwrap();
    assert!(c.respond(200, "text/plain", next.path.as_bytes()));
    c.stream_data(b"a");
    let during = sent(&mut c);
    assert_eq!(statuses(&during), ["200"], "only the stream so far");
    assert!(during.ends_with("1\r\na\r\n"));
    c.end_stream();
    let after = sent(&mut c);
    assert!(after.starts_with("0\r\n\r\nHTTP/1.1 200 OK\r\n"), "{after}");
    assert!(after.ends_with("\r\n\r\n/metrics"));
}

#[test]
fn requests_after_a_stream_are_still_parsed() {
    let mut c = with_request(GET);
    c.start_stream(200, &[], SSE);
    c.handle_input(at(2), GET);
    assert!(c.poll_request().is_some());
    assert_eq!(c.backlog(), 1);
}

#[test]
fn a_peer_that_closes_during_a_stream_is_reported() {
    let mut c = with_request(GET);
    c.start_stream(200, &[], SSE);
    assert!(!c.stream_gone());
    c.handle_eof();
    assert!(c.stream_gone());
    assert!(
        !c.stream_data(b"late"),
        "nothing more for a client that left"
    );
    assert!(!c.is_closed(), "until the application ends the stream");
    c.end_stream();
    assert!(c.is_closed());
}

#[test]
fn a_refused_next_request_during_a_stream_reports_the_stream_gone() {
    let mut c = with_request(GET);
    c.start_stream(200, &[], SSE);
    c.handle_input(at(2), b"GET / HTTP/1.1\r\nbad\r\n\r\n");
    assert!(c.stream_gone());
    assert_eq!(c.poll_timeout(), Some(at(62)), "the idle timer runs again");
    c.end_stream();
    assert_eq!(statuses(&sent(&mut c)), ["200", "400"]);
    assert!(c.is_closed());
}

#[test]
fn the_idle_timeout_does_not_fire_during_a_stream() {
    let mut c = with_request(GET);
    c.start_stream(200, &[], SSE);
    sent(&mut c);
    assert_eq!(c.poll_timeout(), None);
    c.handle_timeout(at(1000));
    assert!(c.stream_data(b"x"));
}

#[test]
fn a_gone_stream_does_not_hold_the_connection_past_the_idle_timeout() {
    let mut c = with_request(GET);
    c.start_stream(200, &[], SSE);
    c.handle_eof();
    assert_eq!(c.poll_timeout(), Some(at(61)));
    c.handle_timeout(at(61));
    assert!(c.is_closed() && c.pending_output().is_empty());
    assert!(!c.stream_gone() && !c.stream_data(b"x") && !c.end_stream());
}

#[test]
fn a_stream_to_http10_is_unframed_and_closes_at_its_end() {
    let http10 = b"GET /s HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    let mut c = with_request(&[&http10[..], b"GET /next HTTP/1.0\r\n\r\n"].concat());
    assert!(c.start_stream(200, &[], SSE));
    assert!(c.stream_data(b"data: 1\n\n"));
    c.end_stream();
    assert_eq!(
        sent(&mut c),
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: 1\n\n"
    );
    assert!(c.is_closed());
    assert!(
        c.poll_request().is_none(),
        "nothing follows a close-delimited answer"
    );
}

#[test]
fn a_head_stream_sends_only_the_head() {
    let mut c = with_request(b"HEAD /s HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(c.start_stream(200, &[], SSE));
    assert!(c.stream_data(b"data: 1\n\n"));
    c.end_stream();
    let out = sent(&mut c);
    assert!(out.ends_with("Transfer-Encoding: chunked\r\n\r\n"), "{out}");
}

#[test]
fn a_client_that_does_not_read_loses_stream_data_beyond_the_output_bound() {
    let config = Config {
        max_pending_output: 100,
        ..Config::default()
    };
    let mut c = Http1Connection::new(at(0), config);
    c.handle_input(at(1), GET);
    c.poll_request().unwrap();
    c.start_stream(200, &[], SSE);
    while c.stream_data(&[b'x'; 30]) {}
    assert!(c.unsent_len() >= 100 && c.unsent_len() < 140);
    sent(&mut c);
    assert_eq!(c.unsent_len(), 0);
    assert!(c.stream_data(b"x"));
}

#[test]
fn no_content_length_on_204() {
    let mut c = with_request(GET);
    c.respond(204, "", b"");
    assert_eq!(sent(&mut c), "HTTP/1.1 204 No Content\r\n\r\n");
}

#[test]
fn a_304_has_no_body() {
    let mut c = with_request(GET);
    c.respond_with(304, &[("ETag", "\"v1\"")], "", b"ignored");
    assert_eq!(
        sent(&mut c),
        "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n"
    );
}

#[test]
fn an_empty_content_type_writes_no_content_type() {
    let mut c = with_request(GET);
    c.respond(200, "", b"ab");
    assert_eq!(
        sent(&mut c),
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab"
    );
}

#[test]
fn every_status_the_cross_proxy_sends_has_its_reason_phrase() {
    let statuses = [
        100, 200, 201, 204, 304, 400, 403, 404, 405, 406, 408, 409, 412, 413, 414, 415, 417, 422,
        429, 431, 500, 501, 502, 503, 504, 505,
    ];
    for status in statuses {
        assert!(!crate::http1::reason_phrase(status).is_empty(), "{status}");
    }
    assert_eq!(crate::http1::reason_phrase(422), "Unprocessable Content");
}
