//! Request targets, fields and bodies (RFC 9112 §6, §7.1), `Expect` (RFC 9110 §10.1.1).

use std::time::Duration;

use proptest::prelude::*;

use super::{answer_all, at, conn, sent, statuses, GET};
use crate::http1::{Config, Http1Connection, Request};

/// A connection that accepts bodies of up to 64 bytes.
fn body_conn() -> Http1Connection {
    let config = Config {
        max_body_len: 64,
        ..Config::default()
    };
    Http1Connection::new(at(0), config)
}

fn post(framing: &str, body: &str) -> String {
    format!("POST /hc/coap://h/r HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\n{body}")
}

/// The bodies of the requests `input` holds, answered as they come.
fn bodies_of(c: &mut Http1Connection, input: &[u8]) -> Vec<Vec<u8>> {
    c.handle_input(at(1), input);
    answer_all(c).into_iter().map(|r| r.body).collect()
}

/// The one answer `input` gets from a fresh [`body_conn`].
fn refusal_of(input: &str) -> Vec<String> {
    let mut c = body_conn();
    c.handle_input(at(1), input.as_bytes());
    assert!(c.poll_request().is_none(), "{input:?}");
    let out = sent(&mut c);
    assert!(c.is_closed(), "{input:?}");
    statuses(&out).into_iter().map(str::to_string).collect()
}

#[test]
fn the_target_keeps_path_and_query_as_sent() {
    let mut c = conn();
    c.handle_input(
        at(1),
        b"GET /hc/coap://127.0.0.1:5683/a%20b?x=1 HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let r = c.poll_request().unwrap();
    assert_eq!(r.target, "/hc/coap://127.0.0.1:5683/a%20b?x=1");
    assert_eq!(r.path, "/hc/coap://127.0.0.1:5683/a%20b");
}

#[test]
fn an_absolute_form_target_is_reduced_to_its_path_and_query() {
    let mut c = conn();
    c.handle_input(at(1), b"GET http://x:8080/s?q HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.poll_request().unwrap().target, "/s?q");
}

#[test]
fn repeated_fields_are_combined_in_order_and_names_are_case_insensitive() {
    let mut c = conn();
    let head = "GET / HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\nX-One:  1 \t\r\n\
                accept: application/cbor\r\nIf-None-Match: \"a\"\r\n\r\n";
    c.handle_input(at(1), head.as_bytes());
    let r = c.poll_request().unwrap();
    assert_eq!(
        r.field("ACCEPT").as_deref(),
        Some(&b"text/plain, application/cbor"[..])
    );
    assert_eq!(r.field_lines("accept").count(), 2);
    assert_eq!(r.field("if-none-match").as_deref(), Some(&b"\"a\""[..]));
    assert_eq!(r.field("x-absent"), None);
    assert_eq!(
        r.field("x-one").as_deref(),
        Some(&b"1"[..]),
        "without whitespace"
    );
    assert_eq!(r.fields.len(), 5);
}

#[test]
fn any_token_method_is_handed_over() {
    for method in ["FETCH", "PATCH", "iPATCH", "BREW"] {
        let mut c = body_conn();
        let req = format!("{method} / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}");
        c.handle_input(at(1), req.as_bytes());
        let r = c.poll_request().unwrap();
        assert_eq!((r.method.as_str(), r.body.as_slice()), (method, &b"{}"[..]));
    }
}

#[test]
fn a_content_length_body_is_handed_over_with_its_request() {
    let mut c = body_conn();
    assert_eq!(
        bodies_of(&mut c, post("Content-Length: 5", "hello").as_bytes()),
        [b"hello"]
    );
    assert!(c.wants_input() && !c.is_closed());
}

#[test]
fn a_chunked_body_split_at_every_byte_is_reassembled() {
    let input = post(
        "Transfer-Encoding: chunked",
        "3;name=value\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nX-Trailer: t\r\n\r\n",
    );
    let mut c = body_conn();
    for b in input.as_bytes() {
        c.handle_input(at(1), std::slice::from_ref(b));
    }
    let reqs = answer_all(&mut c);
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].body, b"abc0123456789abcdef");
}

#[test]
fn pipelined_requests_with_bodies_are_answered_in_order() {
    let input = [
        post("Content-Length: 1", "a"),
        post("Transfer-Encoding: chunked", "1\r\nb\r\n0\r\n\r\n"),
        String::from_utf8_lossy(GET).into_owned(),
        post("Content-Length: 1", "c"),
    ]
    .concat();
    let mut c = body_conn();
    assert_eq!(
        bodies_of(&mut c, input.as_bytes()),
        [&b"a"[..], b"b", b"", b"c"]
    );
    assert_eq!(statuses(&sent(&mut c)), ["200"; 4]);
}

#[test]
fn content_length_and_transfer_encoding_together_is_400() {
    let both = post(
        "Content-Length: 3\r\nTransfer-Encoding: chunked",
        "0\r\n\r\n",
    );
    assert_eq!(refusal_of(&both), ["400"]);
}

#[test]
fn differing_content_lengths_are_400_and_equal_ones_are_one() {
    assert_eq!(
        refusal_of(&post("Content-Length: 1\r\nContent-Length: 2", "ab")),
        ["400"]
    );
    let mut c = body_conn();
    let same = post("Content-Length: 2, 2\r\nContent-Length: 2", "ab");
    assert_eq!(bodies_of(&mut c, same.as_bytes()), [b"ab"]);
}

#[test]
fn a_transfer_coding_other_than_chunked_is_501() {
    for coding in ["gzip, chunked", "gzip", "identity"] {
        let req = post(&format!("Transfer-Encoding: {coding}"), "");
        assert_eq!(refusal_of(&req), ["501"], "{coding}");
    }
}

#[test]
fn chunked_twice_or_transfer_encoding_in_http10_is_400() {
    assert_eq!(
        refusal_of(&post("Transfer-Encoding: chunked, chunked", "")),
        ["400"]
    );
    let http10 = "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    assert_eq!(refusal_of(http10), ["400"]);
}

#[test]
fn a_bad_chunk_is_400_after_the_owed_answers() {
    let mut c = body_conn();
    let input = [GET, post("Transfer-Encoding: chunked", "zz\r\n").as_bytes()].concat();
    c.handle_input(at(1), &input);
    assert_eq!(answer_all(&mut c).len(), 1);
    assert_eq!(statuses(&sent(&mut c)), ["200", "400"]);
    assert!(c.is_closed());
    assert_eq!(c.poll_refusal(), Some(400));
}

#[test]
fn a_body_over_the_limit_is_413_before_it_is_read() {
    // Only the head arrives: the length alone decides.
    assert_eq!(refusal_of(&post("Content-Length: 65", "")), ["413"]);
    assert_eq!(
        refusal_of(&post("Content-Length: 99999999999999999999", "")),
        ["400"],
        "a length past u64 is not a number we can trust"
    );
}

#[test]
fn a_chunked_body_over_the_limit_is_413_at_the_chunk_that_passes_it() {
    let over = post(
        "Transfer-Encoding: chunked",
        &format!("40\r\n{}\r\n1\r\n", "a".repeat(64)),
    );
    assert_eq!(refusal_of(&over), ["413"]);
}

#[test]
fn with_no_body_allowed_a_chunked_request_is_413_at_its_head() {
    let mut c = conn();
    c.handle_input(at(1), post("Transfer-Encoding: chunked", "").as_bytes());
    assert_eq!(statuses(&sent(&mut c)), ["413"]);
}

#[test]
fn a_slow_body_gets_408_at_the_body_timeout() {
    // The absolute cap, whatever the pace (tests/hostile.rs has the minimum rate).
    let config = Config {
        max_body_len: 64,
        min_body_rate: 0,
        ..Config::default()
    };
    let mut c = Http1Connection::new(at(0), config);
    c.handle_input(at(1), post("Content-Length: 10", "abc").as_bytes());
    assert_eq!(
        c.poll_timeout(),
        Some(at(31)),
        "timed from the end of the head"
    );
    c.handle_input(at(20), b"d");
    assert_eq!(
        c.poll_timeout(),
        Some(at(31)),
        "a dribble does not extend it"
    );
    c.handle_timeout(at(30));
    assert!(!c.is_closed());
    c.handle_timeout(at(31));
    assert_eq!(statuses(&sent(&mut c)), ["408"]);
    assert!(c.is_closed());
}

#[test]
fn a_peer_that_closes_mid_body_gets_the_owed_answers_only() {
    let mut c = body_conn();
    let input = [GET, post("Content-Length: 10", "abc").as_bytes()].concat();
    c.handle_input(at(1), &input);
    c.handle_eof();
    assert_eq!(answer_all(&mut c).len(), 1);
    assert_eq!(statuses(&sent(&mut c)), ["200"]);
    assert!(c.is_closed());
}

#[test]
fn expect_100_continue_gets_an_interim_answer() {
    let mut c = body_conn();
    let head = post("Content-Length: 5\r\nExpect: 100-continue", "");
    c.handle_input(at(1), head.as_bytes());
    assert_eq!(sent(&mut c), "HTTP/1.1 100 Continue\r\n\r\n");
    c.handle_input(at(1), b"hello");
    assert_eq!(answer_all(&mut c)[0].body, b"hello");
    assert_eq!(statuses(&sent(&mut c)), ["200"]);
}

#[test]
fn expect_100_continue_waits_for_the_owed_answers() {
    let mut c = body_conn();
    let head = post("Content-Length: 5\r\nExpect: 100-Continue", "");
    c.handle_input(at(1), &[GET, head.as_bytes()].concat());
    assert!(
        sent(&mut c).is_empty(),
        "an answer to the GET is owed first"
    );
    answer_all(&mut c);
    assert_eq!(statuses(&sent(&mut c)), ["200", "100"]);
}

#[test]
fn expect_100_continue_is_not_answered_once_the_body_arrives() {
    let mut c = body_conn();
    let head = post("Content-Length: 5\r\nExpect: 100-continue", "");
    c.handle_input(at(1), &[GET, head.as_bytes(), b"he"].concat());
    answer_all(&mut c);
    assert_eq!(statuses(&sent(&mut c)), ["200"]);
}

#[test]
fn expect_100_continue_over_the_limit_is_413_without_reading() {
    let head = post("Content-Length: 100\r\nExpect: 100-continue", "");
    assert_eq!(refusal_of(&head), ["413"]);
}

#[test]
fn an_unknown_expectation_is_417() {
    assert_eq!(
        refusal_of(&post("Content-Length: 1\r\nExpect: magic", "a")),
        ["417"]
    );
}

#[test]
fn expect_100_continue_without_a_body_or_from_http10_gets_no_interim_answer() {
    let mut c = body_conn();
    let http10 = "POST / HTTP/1.0\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n";
    c.handle_input(at(1), http10.as_bytes());
    assert!(sent(&mut c).is_empty());
    let mut c = body_conn();
    c.handle_input(at(1), post("Expect: 100-continue", "").as_bytes());
    assert_eq!(answer_all(&mut c).len(), 1);
    assert_eq!(statuses(&sent(&mut c)), ["200"]);
}

#[test]
fn a_body_does_not_count_against_the_head_timeout() {
    let config = Config {
        max_body_len: 64,
        body_timeout: Duration::from_secs(60),
        min_body_rate: 0,
        ..Config::default()
    };
    let mut c = Http1Connection::new(at(0), config);
    c.handle_input(at(1), post("Content-Length: 2", "a").as_bytes());
    c.handle_timeout(at(15));
    c.handle_input(at(15), b"b");
    assert_eq!(answer_all(&mut c).len(), 1);
}

/// Requests as (method, target, body), to compare runs.
fn summary(requests: Vec<Request>) -> Vec<(String, String, Vec<u8>)> {
    requests
        .into_iter()
        .map(|r| (r.method, r.target, r.body))
        .collect()
}

proptest! {
    /// However the byte stream is cut into reads, the same requests come out.
    #[test]
    fn a_pipelined_stream_cut_anywhere_gives_the_same_requests(
        cuts in proptest::collection::vec(0usize..400, 0..12)
    ) {
        let input = [
            post("Content-Length: 3", "abc"),
            post("Transfer-Encoding: chunked", "2;x\r\nde\r\n1\r\nf\r\n0\r\nT: 1\r\n\r\n"),
            String::from_utf8_lossy(GET).into_owned(),
            post("Content-Length: 0", ""),
        ]
        .concat()
        .into_bytes();
        let whole = {
            let mut c = body_conn();
            c.handle_input(at(1), &input);
            summary(answer_all(&mut c))
        };
        prop_assert_eq!(whole.len(), 4);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|i| i.min(input.len())).collect();
        cuts.sort_unstable();
        let mut c = body_conn();
        let mut seen = Vec::new();
        let mut from = 0;
        for to in cuts.into_iter().chain([input.len()]) {
            c.handle_input(at(1), &input[from..to]);
            seen.extend(answer_all(&mut c));
            from = to;
        }
        prop_assert_eq!(summary(seen), whole);
    }
}
