//! One test per rule of the HTTP/1.1 server connection, in virtual time.

mod bodies;
mod hostile;
mod streams;

use std::time::Duration;

use super::{Config, Http1Connection, Request};
use crate::time::Timestamp;

pub(super) const GET: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

pub(super) fn at(secs: u64) -> Timestamp {
    Timestamp::ZERO + Duration::from_secs(secs)
}

pub(super) fn conn() -> Http1Connection {
    Http1Connection::new(at(0), Config::default())
}

/// Takes everything the connection wants to send.
pub(super) fn sent(c: &mut Http1Connection) -> String {
    let out = String::from_utf8_lossy(c.pending_output()).into_owned();
    c.consume_output(out.len());
    out
}

pub(super) fn answer_all(c: &mut Http1Connection) -> Vec<Request> {
    let mut seen = Vec::new();
    while let Some(r) = c.poll_request() {
        assert!(c.respond(200, "text/plain", r.path.as_bytes()));
        seen.push(r);
    }
    seen
}

pub(super) fn statuses(out: &str) -> Vec<&str> {
    out.match_indices("HTTP/1.1 ")
        .map(|(i, _)| &out[i + 9..i + 12])
        .collect()
}

#[test]
fn get_is_answered_and_the_connection_persists() {
    let mut c = conn();
    c.handle_input(at(1), GET);
    let r = c.poll_request().unwrap();
    assert_eq!(
        (r.method.as_str(), r.path.as_str(), r.keep_alive),
        ("GET", "/metrics", true)
    );
    assert!(c.respond(200, "text/plain", b"hi"));
    assert_eq!(
        sent(&mut c),
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi"
    );
    assert!(!c.is_closed() && c.wants_input());
}

#[test]
fn pipelined_requests_in_one_read_are_answered_in_order() {
    let mut c = conn();
    let input = [
        &b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"HEAD /b HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n",
    ]
    .concat();
    c.handle_input(at(1), &input);
    let paths: Vec<String> = answer_all(&mut c).into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/a", "/b", "/c"]);
    let out = sent(&mut c);
    let answers: Vec<&str> = out.split("HTTP/1.1 200 OK").skip(1).collect();
    assert_eq!(answers.len(), 3);
    assert!(answers[0].ends_with("\r\n\r\n/a"), "{out}");
    assert!(
        answers[1].ends_with("Content-Length: 2\r\n\r\n"),
        "HEAD: no body"
    );
    assert!(answers[2].ends_with("\r\n\r\n/c"), "{out}");
}

#[test]
fn byte_at_a_time_input_gives_the_same_requests() {
    let mut c = conn();
    let input = [GET, GET].concat();
    for b in &input {
        c.handle_input(at(1), std::slice::from_ref(b));
    }
    assert_eq!(answer_all(&mut c).len(), 2);
}

#[test]
fn leading_empty_line_is_ignored() {
    // RFC 9112 §2.2: a server SHOULD ignore at least one empty line before the request-line.
    let mut c = conn();
    c.handle_input(at(1), &[b"\r\n", GET].concat());
    assert_eq!(answer_all(&mut c).len(), 1);
}

#[test]
fn head_answer_has_the_length_but_no_body() {
    let mut c = conn();
    c.handle_input(at(1), b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    c.poll_request().unwrap();
    c.respond(200, "text/plain", b"ok\n");
    let out = sent(&mut c);
    assert!(
        out.contains("Content-Length: 3\r\n") && out.ends_with("\r\n\r\n"),
        "{out}"
    );
}

#[test]
fn oversized_head_gets_431_and_closes() {
    let mut c = conn();
    let long = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n",
        "a".repeat(9000)
    );
    c.handle_input(at(1), long.as_bytes());
    assert!(c.poll_request().is_none());
    assert_eq!(statuses(&sent(&mut c)), ["431"]);
    assert!(c.is_closed());
    assert_eq!(c.poll_refusal(), Some(431));
    assert_eq!(c.poll_refusal(), None, "reported once");
}

#[test]
fn too_many_fields_get_431() {
    let mut c = conn();
    let mut head = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    for i in 0..100 {
        head.push_str(&format!("X-{i}: 1\r\n"));
    }
    head.push_str("\r\n");
    c.handle_input(at(1), head.as_bytes());
    assert_eq!(statuses(&sent(&mut c)), ["431"]);
}

#[test]
fn malformed_request_gets_400_and_closes() {
    for bad in [
        &b"GET / HTTP/1.1\r\nHost x\r\n\r\n"[..],
        b"\x00\x01\x02\r\n\r\n",
        b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ] {
        let mut c = conn();
        c.handle_input(at(1), bad);
        assert_eq!(statuses(&sent(&mut c)), ["400"], "{bad:?}");
        assert!(c.is_closed());
    }
}

#[test]
fn http11_without_exactly_one_host_gets_400() {
    // RFC 9112 §3.2.
    for bad in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    ] {
        let mut c = conn();
        c.handle_input(at(1), bad);
        assert_eq!(statuses(&sent(&mut c)), ["400"]);
    }
}

#[test]
fn request_bodies_are_refused_with_413_and_bad_framing_with_400() {
    for (head, status) in [
        ("Content-Length: 5", "413"),
        ("Transfer-Encoding: chunked", "413"),
        ("Content-Length: 5\r\nTransfer-Encoding: chunked", "400"),
        ("Content-Length: abc", "400"),
        ("Content-Length: 1\r\nContent-Length: 2", "400"),
    ] {
        let mut c = conn();
        let req = format!("POST /metrics HTTP/1.1\r\nHost: x\r\n{head}\r\n\r\nhello");
        c.handle_input(at(1), req.as_bytes());
        assert!(c.poll_request().is_none(), "{head}");
        assert_eq!(statuses(&sent(&mut c)), [status], "{head}");
        assert!(c.is_closed(), "{head}");
    }
}

#[test]
fn content_length_zero_is_no_body() {
    let mut c = conn();
    c.handle_input(
        at(1),
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(answer_all(&mut c).len(), 1);
}

#[test]
fn http10_without_keep_alive_closes_after_the_answer() {
    let mut c = conn();
    c.handle_input(at(1), &[&b"GET / HTTP/1.0\r\n\r\n"[..], GET].concat());
    let reqs = answer_all(&mut c);
    assert_eq!(
        reqs.len(),
        1,
        "nothing after a closing request is processed"
    );
    assert!(!reqs[0].keep_alive);
    assert!(sent(&mut c).contains("Connection: close\r\n"));
    assert!(c.is_closed());
}

#[test]
fn http10_keep_alive_is_confirmed() {
    let mut c = conn();
    c.handle_input(at(1), b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    assert!(answer_all(&mut c)[0].keep_alive);
    assert!(sent(&mut c).contains("Connection: keep-alive\r\n"));
    assert!(!c.is_closed());
}

#[test]
fn connection_close_is_honoured() {
    let mut c = conn();
    let close = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, close\r\n\r\n";
    c.handle_input(at(1), &[&close[..], GET].concat());
    assert_eq!(answer_all(&mut c).len(), 1);
    assert!(sent(&mut c).contains("Connection: close\r\n"));
    assert!(c.is_closed() && !c.wants_input());
}

#[test]
fn slow_head_gets_408_at_the_header_timeout() {
    let mut c = conn();
    c.handle_input(at(1), GET);
    answer_all(&mut c);
    sent(&mut c);
    c.handle_input(at(2), b"GET / HTTP/1.1\r\n");
    c.handle_input(at(5), b"Host: x\r\n");
    c.handle_input(at(9), b"X: y");
    assert_eq!(
        c.poll_timeout(),
        Some(at(12)),
        "a later head is counted from its first byte"
    );
    c.handle_timeout(at(11));
    assert!(!c.is_closed(), "an early wake-up is a no-op");
    c.handle_timeout(at(12));
    assert_eq!(statuses(&sent(&mut c)), ["408"]);
    assert!(c.is_closed() && c.poll_timeout().is_none());
}

#[test]
fn next_head_is_timed_from_its_first_byte() {
    let mut c = conn();
    c.handle_input(at(1), GET);
    answer_all(&mut c);
    sent(&mut c);
    c.handle_input(at(30), b"GET");
    assert_eq!(c.poll_timeout(), Some(at(40)));
}

#[test]
fn silent_new_connection_closes_without_an_answer() {
    let mut c = conn();
    c.handle_timeout(at(10));
    assert!(c.is_closed() && c.pending_output().is_empty());
}

#[test]
fn idle_keep_alive_connection_closes_at_the_idle_timeout() {
    let mut c = conn();
    c.handle_input(at(1), GET);
    answer_all(&mut c);
    sent(&mut c);
    assert_eq!(c.poll_timeout(), Some(at(61)));
    c.handle_timeout(at(61));
    assert!(c.is_closed() && c.pending_output().is_empty());
}

#[test]
fn unread_answers_are_dropped_at_the_idle_timeout() {
    let mut c = conn();
    c.handle_input(at(1), GET);
    answer_all(&mut c);
    c.handle_timeout(at(61));
    assert!(c.is_closed() && c.pending_output().is_empty());
}

#[test]
fn pipelined_backlog_is_bounded_until_answered() {
    let mut c = conn();
    c.handle_input(at(1), &GET.repeat(20));
    assert_eq!(c.backlog(), 16);
    assert!(!c.wants_input());
    assert_eq!(c.poll_timeout(), None, "waiting for us, not for the peer");
    let first = answer_all(&mut c);
    assert_eq!(first.len() + answer_all(&mut c).len(), 20);
    assert!(c.wants_input());
    assert_eq!(statuses(&sent(&mut c)).len(), 20);
}

#[test]
fn unwritten_output_pauses_parsing() {
    let config = Config {
        max_pending_output: 100,
        ..Config::default()
    };
    let mut c = Http1Connection::new(at(0), config);
    c.handle_input(at(1), &GET.repeat(3));
    c.poll_request().unwrap();
    c.respond(200, "text/plain", &[b'x'; 200]);
    assert_eq!(
        answer_all(&mut c).len(),
        2,
        "parsed before the output filled up"
    );
    c.handle_input(at(1), GET);
    assert!(!c.wants_input() && c.poll_request().is_none());
    sent(&mut c);
    assert_eq!(answer_all(&mut c).len(), 1);
}

#[test]
fn refusal_waits_for_the_answers_owed_before_it() {
    let mut c = conn();
    c.handle_input(at(1), &[GET, b"BAD\r\n\r\n"].concat());
    assert!(sent(&mut c).is_empty());
    answer_all(&mut c);
    assert_eq!(statuses(&sent(&mut c)), ["200", "400"]);
    assert!(c.is_closed());
}

#[test]
fn respond_without_a_polled_request_is_refused() {
    let mut c = conn();
    assert!(!c.respond(200, "text/plain", b""));
    c.handle_input(at(1), GET);
    assert!(!c.respond(200, "text/plain", b""), "not polled yet");
}

#[test]
fn half_closed_peer_still_gets_its_answers() {
    let mut c = conn();
    c.handle_input(at(1), &[GET, b"GET /partial"].concat());
    c.handle_eof();
    assert_eq!(answer_all(&mut c).len(), 1);
    assert!(sent(&mut c).contains("Connection: close\r\n"));
    assert!(c.is_closed());
}

#[test]
fn close_after_answers_finishes_what_is_owed() {
    let mut c = conn();
    c.handle_input(at(1), GET);
    let r = c.poll_request().unwrap();
    c.close_after_answers();
    assert!(!c.is_closed());
    c.respond(200, "text/plain", r.path.as_bytes());
    assert!(sent(&mut c).contains("Connection: close\r\n"));
    assert!(c.is_closed());
}

#[test]
fn extra_fields_are_sent() {
    let mut c = conn();
    c.handle_input(at(1), b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    c.poll_request().unwrap();
    c.respond_with(405, &[("Allow", "GET, HEAD")], "text/plain", b"");
    let out = sent(&mut c);
    assert!(
        out.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
        "{out}"
    );
    assert!(out.contains("Allow: GET, HEAD\r\n"));
}

#[test]
fn input_past_the_buffer_bound_ends_the_connection_after_the_owed_answers() {
    let config = Config {
        max_pipelined: 1,
        max_buffered_input: 100,
        ..Config::default()
    };
    let mut c = Http1Connection::new(at(0), config);
    c.handle_input(at(1), GET);
    assert!(!c.wants_input(), "backlog full");
    c.handle_input(at(1), &GET.repeat(4));
    assert_eq!(c.buffered(), 0, "the overrun is not kept");
    assert_eq!(answer_all(&mut c).len(), 1);
    assert!(c.is_closed());
}
