//! Peers that hold slots or memory without making progress: the first-head deadline, the
//! minimum body rate, the eviction rank at the connection cap, and the body allowance (503).

use std::time::Duration;

use super::{answer_all, at, conn, sent, statuses, GET};
use crate::http1::{Config, EvictionRank, Http1Connection};
use crate::time::Timestamp;

/// A connection that accepts bodies of up to 64 KiB, opened at `opened`.
fn body_conn_at(opened: Timestamp) -> Http1Connection {
    let config = Config {
        max_body_len: 64 << 10,
        ..Config::default()
    };
    Http1Connection::new(opened, config)
}

fn post(framing: &str, body: &str) -> String {
    format!("POST /hc/coap://h/r HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\n{body}")
}

fn ms(millis: u64) -> Timestamp {
    Timestamp::ZERO + Duration::from_millis(millis)
}

#[test]
fn a_silent_new_connection_closes_at_the_first_head_timeout() {
    let mut c = conn();
    assert_eq!(
        c.poll_timeout(),
        Some(at(3)),
        "3 s, not the 10 s of later heads"
    );
    c.handle_timeout(at(2));
    assert!(!c.is_closed());
    c.handle_timeout(at(3));
    assert!(
        c.is_closed() && c.pending_output().is_empty(),
        "nothing to answer"
    );
}

#[test]
fn a_dribbled_first_head_gets_408_at_the_first_head_timeout() {
    let mut c = conn();
    c.handle_input(at(1), b"GET / HTTP/1.1\r\n");
    c.handle_input(at(2), b"Host: x\r\n");
    assert_eq!(
        c.poll_timeout(),
        Some(at(3)),
        "counted from the connection's start"
    );
    c.handle_timeout(at(3));
    assert_eq!(statuses(&sent(&mut c)), ["408"]);
    assert!(c.is_closed());
}

#[test]
fn a_prompt_first_request_is_untouched_by_the_first_head_timeout() {
    let mut c = conn();
    c.handle_input(ms(2_999), GET);
    assert_eq!(answer_all(&mut c).len(), 1);
    sent(&mut c);
    assert_eq!(c.poll_timeout(), Some(ms(62_999)), "idle from here on");
}

#[test]
fn a_dribbled_body_is_cut_with_408_once_behind_the_minimum_rate() {
    let mut c = body_conn_at(at(0));
    c.handle_input(at(1), post("Content-Length: 10000", "a").as_bytes());
    // The head start of the grace, plus a byte's worth (1/1024 s) of the rate.
    assert_eq!(
        c.poll_timeout(),
        Some(at(3) + Duration::from_nanos(976_562)),
        "the grace, not the 30 s body timeout"
    );
    c.handle_input(at(2), b"b");
    c.handle_timeout(at(3));
    assert!(!c.is_closed(), "within the grace and two bytes' worth");
    c.handle_timeout(ms(3_002));
    assert_eq!(statuses(&sent(&mut c)), ["408"]);
    assert!(c.is_closed());
}

#[test]
fn a_body_at_the_minimum_rate_passes_however_long_it_takes() {
    let mut c = body_conn_at(at(0));
    let total = 20 * 1100;
    c.handle_input(
        at(1),
        post(&format!("Content-Length: {total}"), "").as_bytes(),
    );
    for second in 1..=20 {
        // 1100 bytes a second, after a second of nothing: on average above 1 KiB/s.
        let now = at(1 + second);
        assert!(
            c.poll_timeout().is_some_and(|t| t >= now),
            "cut at {second}"
        );
        c.handle_timeout(now);
        c.handle_input(now, &[b'x'; 1100]);
    }
    let reqs = answer_all(&mut c);
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].body.len(), total);
}

#[test]
fn the_body_timeout_still_caps_a_body_at_the_minimum_rate() {
    let mut c = body_conn_at(at(0));
    c.handle_input(at(1), post("Content-Length: 60000", "").as_bytes());
    for second in 2..=31 {
        c.handle_input(at(second), &[b'x'; 1500]);
        c.handle_timeout(at(second));
    }
    assert_eq!(
        statuses(&sent(&mut c)),
        ["408"],
        "at 31 s, 30 s after the head"
    );
}

#[test]
fn expect_100_continue_then_nothing_is_cut_from_when_the_100_was_sent() {
    let mut c = body_conn_at(at(0));
    let head = post("Content-Length: 5\r\nExpect: 100-continue", "");
    c.handle_input(at(1), &[GET, head.as_bytes()].concat());
    assert_eq!(
        c.poll_timeout(),
        Some(at(31)),
        "only the body timeout while the client waits for its 100 behind an owed answer"
    );
    c.poll_request().unwrap();
    c.handle_timeout(at(20));
    assert!(c.respond(200, "text/plain", b""));
    assert_eq!(statuses(&sent(&mut c)), ["200", "100"]);
    assert_eq!(
        c.poll_timeout(),
        Some(at(22)),
        "the 100 went at 20: its grace"
    );
    c.handle_timeout(at(22));
    assert_eq!(statuses(&sent(&mut c)), ["408"]);
}

#[test]
fn expect_100_continue_at_once_then_nothing_is_cut_in_seconds() {
    let mut c = body_conn_at(at(0));
    c.handle_input(
        at(1),
        post("Content-Length: 5\r\nExpect: 100-continue", "").as_bytes(),
    );
    assert_eq!(statuses(&sent(&mut c)), ["100"]);
    c.handle_timeout(at(3));
    assert_eq!(statuses(&sent(&mut c)), ["408"]);
    assert!(c.is_closed());
}

/// Connections in every state the rank knows, opened in this order.
#[test]
fn the_eviction_rank_puts_no_head_then_idle_then_slow_bodies_first() {
    let now = at(10);
    let silent = body_conn_at(at(1));
    let mut dribbling = body_conn_at(at(2));
    dribbling.handle_input(at(9), b"GET / HT");
    let mut idle = body_conn_at(at(0));
    idle.handle_input(at(0), GET);
    answer_all(&mut idle);
    sent(&mut idle);
    let mut later_head = body_conn_at(at(0));
    later_head.handle_input(at(0), GET);
    answer_all(&mut later_head);
    sent(&mut later_head);
    later_head.handle_input(at(9), b"GE");
    let mut slow_body = body_conn_at(at(0));
    slow_body.handle_input(at(8), post("Content-Length: 9000", "abc").as_bytes());
    let mut paced_body = body_conn_at(at(0));
    paced_body.handle_input(
        at(9),
        post("Content-Length: 9000", &"x".repeat(2000)).as_bytes(),
    );
    let mut owing = body_conn_at(at(0));
    owing.handle_input(at(0), GET);
    owing.poll_request().unwrap();
    let mut streaming = body_conn_at(at(0));
    streaming.handle_input(at(0), GET);
    streaming.poll_request().unwrap();
    assert!(streaming.start_stream(200, &[], "text/event-stream"));
    sent(&mut streaming);

    assert_eq!(
        silent.eviction_rank(now),
        Some(EvictionRank::NoHead { since: at(1) })
    );
    assert_eq!(
        dribbling.eviction_rank(now),
        Some(EvictionRank::NoHead { since: at(2) }),
        "a dribble does not make it younger"
    );
    assert_eq!(
        later_head.eviction_rank(now),
        Some(EvictionRank::NoHead { since: at(9) })
    );
    assert_eq!(
        idle.eviction_rank(now),
        Some(EvictionRank::Idle { since: at(0) })
    );
    assert!(matches!(
        slow_body.eviction_rank(now),
        Some(EvictionRank::SlowBody { .. })
    ));
    assert_eq!(paced_body.eviction_rank(now), None, "on pace");
    assert_eq!(owing.eviction_rank(now), None, "owes an answer");
    assert_eq!(streaming.eviction_rank(now), None, "streams an answer");

    let mut ranks: Vec<(EvictionRank, &str)> = [
        (&slow_body, "slow body"),
        (&idle, "idle"),
        (&later_head, "later head"),
        (&dribbling, "dribbling"),
        (&silent, "silent"),
    ]
    .into_iter()
    .map(|(c, name)| (c.eviction_rank(now).unwrap(), name))
    .collect();
    ranks.sort();
    let order: Vec<&str> = ranks.into_iter().map(|(_, name)| name).collect();
    assert_eq!(
        order,
        ["silent", "dribbling", "later head", "idle", "slow body"]
    );
}

/// A driver at a cap of `CAP` connections, closing the least progressed for each newcomer,
/// in virtual time: `conns[i]` is (name, connection).
struct Capped {
    conns: Vec<(String, Http1Connection)>,
}

const CAP: usize = 8;

impl Capped {
    /// Admits a new connection at `now`, closing the lowest-ranked one when at the cap;
    /// returns the name of the one closed.
    fn open(&mut self, now: Timestamp, name: &str) -> Option<String> {
        let mut closed = None;
        if self.conns.len() == CAP {
            let (i, _) = (self.conns.iter().enumerate())
                .filter_map(|(i, (_, c))| Some((i, c.eviction_rank(now)?)))
                .min_by_key(|&(_, rank)| rank)
                .expect("one may be closed");
            closed = Some(self.conns.remove(i).0);
        }
        self.conns.push((name.into(), body_conn_at(now)));
        closed
    }

    fn get(&mut self, name: &str) -> Option<&mut Http1Connection> {
        (self.conns.iter_mut()).find_map(|(n, c)| (n == name).then_some(c))
    }
}

#[test]
fn a_prompt_complete_request_is_never_the_one_evicted() {
    let mut capped = Capped { conns: Vec::new() };
    for i in 0..CAP {
        capped.open(ms(i as u64), &format!("slow{i}"));
        let head = capped.get(&format!("slow{i}")).unwrap();
        head.handle_input(ms(i as u64), b"GET / HTTP/1.1\r\n");
    }
    // The attacker reconnects whenever one of its connections goes; a client arrives among
    // them, and sends its request after all but one of the cap's worth of newer arrivals.
    let mut now = 100;
    let mut evicted = Vec::new();
    evicted.extend(capped.open(ms(now), "client"));
    for i in 0..CAP - 1 {
        now += 1;
        evicted.extend(capped.open(ms(now), &format!("again{i}")));
    }
    let client = capped.get("client").expect("still open");
    client.handle_input(ms(now), GET);
    for i in 0..10 * CAP {
        now += 1;
        evicted.extend(capped.open(ms(now), &format!("more{i}")));
    }
    assert!(!evicted.iter().any(|e| e == "client"), "{evicted:?}");
    let client = capped.get("client").expect("still open");
    assert_eq!(answer_all(client).len(), 1);
    assert_eq!(
        evicted[..CAP],
        ["slow0", "slow1", "slow2", "slow3", "slow4", "slow5", "slow6", "slow7"]
    );
}

#[test]
fn a_body_past_the_allowance_is_503_with_retry_after_after_the_owed_answers() {
    let mut c = body_conn_at(at(0));
    c.set_body_allowance(100);
    let input = [
        post("Content-Length: 60", &"a".repeat(60)),
        post("Content-Length: 60", &"b".repeat(60)),
        String::from_utf8_lossy(GET).into_owned(),
    ]
    .concat();
    c.handle_input(at(1), input.as_bytes());
    assert_eq!(
        c.held_body_bytes(),
        60,
        "the first body waits to be handed out"
    );
    assert!(
        sent(&mut c).is_empty(),
        "the 503 waits for the answer owed before it"
    );
    assert_eq!(answer_all(&mut c).len(), 1, "nothing after the refused one");
    let out = sent(&mut c);
    assert_eq!(statuses(&out), ["200", "503"]);
    let refusal = &out[out.rfind("HTTP/1.1 ").unwrap()..];
    assert!(refusal.contains("\r\nRetry-After: 1\r\n"), "{refusal}");
    assert!(refusal.contains("\r\nConnection: close\r\n"), "{refusal}");
    assert_eq!(c.poll_refusal(), Some(503));
    assert!(c.is_closed());
    assert_eq!((c.held_body_bytes(), c.buffered()), (0, 0), "nothing kept");
}

#[test]
fn a_chunked_body_is_503_at_the_chunk_that_passes_the_allowance() {
    let mut c = body_conn_at(at(0));
    c.set_body_allowance(100);
    c.handle_input(at(1), post("Transfer-Encoding: chunked", "").as_bytes());
    c.handle_input(at(1), format!("50\r\n{}\r\n", "a".repeat(80)).as_bytes());
    assert_eq!(c.held_body_bytes(), 80);
    c.handle_input(at(1), b"15\r\n");
    assert_eq!(statuses(&sent(&mut c)), ["503"]);
    assert_eq!(
        (c.held_body_bytes(), c.buffered()),
        (0, 0),
        "the body is freed"
    );
}

#[test]
fn a_body_handed_out_counts_against_the_allowance_until_the_driver_grants_again() {
    let mut c = body_conn_at(at(0));
    c.set_body_allowance(100);
    c.handle_input(
        at(1),
        post("Content-Length: 60", &"a".repeat(60)).as_bytes(),
    );
    let r = c.poll_request().unwrap();
    assert_eq!(c.held_body_bytes(), 0, "the application holds it now");
    assert!(c.respond(200, "text/plain", b""));
    // The driver learns the application let go of it and grants the whole budget again.
    drop(r);
    c.set_body_allowance(100);
    c.handle_input(
        at(1),
        post("Content-Length: 60", &"b".repeat(60)).as_bytes(),
    );
    assert_eq!(answer_all(&mut c).len(), 1);
    // Without a new grant, the body handed out still counts.
    c.handle_input(at(1), post("Content-Length: 60", "").as_bytes());
    assert_eq!(statuses(&sent(&mut c)), ["200", "200", "503"]);
}

#[test]
fn a_body_over_the_limit_is_413_whatever_the_allowance() {
    let mut c = body_conn_at(at(0));
    c.set_body_allowance(10);
    c.handle_input(at(1), post("Content-Length: 70000", "").as_bytes());
    assert_eq!(statuses(&sent(&mut c)), ["413"], "no budget could take it");
}

#[test]
fn a_body_within_the_allowance_is_taken() {
    let mut c = body_conn_at(at(0));
    c.set_body_allowance(60);
    c.handle_input(
        at(1),
        post("Content-Length: 60", &"a".repeat(60)).as_bytes(),
    );
    assert_eq!(answer_all(&mut c)[0].body.len(), 60);
}
