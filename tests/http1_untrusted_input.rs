//! The HTTP/1.1 connection on arbitrary peer input: random, mutated and oversized bytes in any
//! fragmentation, with an application and a clock acting at random. It must never panic, never
//! hold more than its bounds, never wait without a timer, and always send well-framed answers.
//!
//! The seed is printed; rerun a failure with `HTTP1_SEED=<seed>`.

use std::time::Duration;

use backoffd::http1::{Config, Http1Connection};
use backoffd::time::Timestamp;

// The library's seeded test randomness, shared with its unit tests (it is not public API).
#[path = "../src/test_support.rs"]
mod test_support;
use test_support::Rng;

const RUNS: usize = 20_000;
/// Steps of one connection; enough for every connection to end by a timeout.
const MAX_STEPS: usize = 20_000;
/// The largest answer body the simulated application sends.
const MAX_BODY: usize = 2_000;

fn seed() -> u64 {
    let seed = std::env::var("HTTP1_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            t.map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("http1 robustness seed = {seed} (rerun with HTTP1_SEED={seed})");
    seed
}

fn pick<'a>(rng: &mut Rng, items: &[&'a str]) -> &'a str {
    items[rng.below(items.len())]
}

/// A request head: mostly ones the server accepts and keeps the connection open for, some
/// it refuses or closes after.
fn request(rng: &mut Rng) -> Vec<u8> {
    let method = pick(rng, &["GET", "GET", "GET", "HEAD", "POST", "get"]);
    let path = pick(
        rng,
        &["/metrics", "/healthz", "/x?y=1", "http://h/metrics", "*"],
    );
    if rng.below(8) > 0 {
        return format!("{method} {path} HTTP/1.1\r\nHost: h\r\n\r\n").into_bytes();
    }
    let version = pick(rng, &["HTTP/1.1", "HTTP/1.0"]);
    let mut head = format!("{method} {path} {version}\r\n");
    if rng.below(10) > 0 {
        head.push_str("Host: h\r\n");
    }
    for _ in 0..rng.below(3) {
        head.push_str(pick(
            rng,
            &[
                "Connection: close\r\n",
                "Connection: keep-alive\r\n",
                "Content-Length: 0\r\n",
                "Content-Length: 3\r\n",
                "Transfer-Encoding: chunked\r\n",
                "Accept: */*\r\n",
                "X-Long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
            ],
        ));
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// Flips, inserts, deletes and duplicates bytes.
fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    for _ in 0..rng.below(4) {
        let i = rng.below(bytes.len() + 1);
        match rng.below(4) {
            0 if i < bytes.len() => bytes[i] = rng.next() as u8,
            1 => bytes.insert(i, pick(rng, &["\r", "\n", ":", " ", "\0"]).as_bytes()[0]),
            2 if i < bytes.len() => drop(bytes.remove(i)),
            _ => {
                let end = (i + rng.below(64)).min(bytes.len());
                let copy = bytes[i..end].to_vec();
                bytes.splice(i..i, copy);
            }
        }
    }
}

/// One connection's worth of peer input: a third of the peers only pipeline good requests.
fn peer_input(rng: &mut Rng) -> Vec<u8> {
    let hostile = rng.below(3) > 0;
    let mut input = Vec::new();
    for _ in 0..1 + rng.below(40) {
        let mut piece = match rng.below(40) {
            _ if !hostile => b"GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n".to_vec(),
            0 => (0..rng.below(300)).map(|_| rng.next() as u8).collect(),
            1 => b"\r\n".repeat(rng.below(5_000)),
            2 => format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(rng.below(12_000))).into(),
            _ => request(rng),
        };
        if hostile && rng.below(12) == 0 {
            mutate(rng, &mut piece);
        }
        input.extend_from_slice(&piece);
    }
    input
}

/// Answers recorded by the simulated application, to check the output's framing.
struct App {
    expected: Vec<(u16, bool)>,
}

impl App {
    fn act(&mut self, rng: &mut Rng, c: &mut Http1Connection) {
        while rng.below(4) > 0 {
            let Some(req) = c.poll_request() else {
                return;
            };
            let status = [200, 404, 405, 500][rng.below(4)];
            let body = vec![b'x'; rng.below(MAX_BODY)];
            assert!(c.respond(status, "text/plain", &body));
            self.expected.push((status, req.method == "HEAD"));
        }
    }
}

/// Parses the written output as a sequence of answers: each must be the next expected one.
/// A truncated tail is allowed (an idle timeout drops unread output).
fn check_framing(mut out: &[u8], expected: &[(u16, bool)]) {
    for &(status, head_only) in expected {
        let mut fields = [httparse::EMPTY_HEADER; 16];
        let mut resp = httparse::Response::new(&mut fields);
        let len = match resp.parse(out).expect("well-formed answer head") {
            httparse::Status::Complete(len) => len,
            httparse::Status::Partial => return,
        };
        assert_eq!(resp.code, Some(status));
        let length = resp.headers.iter().find(|h| h.name == "Content-Length");
        let length: usize = std::str::from_utf8(length.expect("Content-Length").value)
            .unwrap()
            .parse()
            .unwrap();
        let body = if head_only { 0 } else { length };
        out = out.get(len + body..).unwrap_or_default();
    }
    assert!(out.is_empty(), "output after the last answer");
}

/// Memory the connection may hold: unparsed input, output up to the pause threshold plus the
/// answers to requests parsed before it (a full backlog), plus a refusal.
fn memory_bound(config: &Config) -> usize {
    const HEAD: usize = 256;
    config.max_buffered_input
        + config.max_pending_output
        + config.max_pipelined * (MAX_BODY + HEAD)
        + HEAD
}

fn check_invariants(c: &Http1Connection, config: &Config) {
    assert!(
        c.buffered() <= memory_bound(config),
        "{} bytes held",
        c.buffered()
    );
    assert!(c.backlog() <= config.max_pipelined);
    let waits_for_peer = c.backlog() == 0 && !(c.is_closed() && c.pending_output().is_empty());
    assert!(
        !waits_for_peer || c.poll_timeout().is_some(),
        "waits with no timer"
    );
}

fn run_one(rng: &mut Rng, config: &Config) {
    let input = peer_input(rng);
    let mut c = Http1Connection::new(Timestamp::ZERO, config.clone());
    let mut app = App {
        expected: Vec::new(),
    };
    let (mut now, mut at, mut written, mut was_closed) = (Timestamp::ZERO, 0, Vec::new(), false);
    for _ in 0..MAX_STEPS {
        let step = rng.below(10);
        if step < 5 && at < input.len() && (c.wants_input() || rng.below(20) == 0) {
            let n = (1 + rng.below(3_000)).min(input.len() - at);
            c.handle_input(now, &input[at..at + n]);
            at += n;
        } else if step < 7 {
            let n = rng.below(c.pending_output().len() + 1);
            written.extend_from_slice(&c.pending_output()[..n]);
            c.consume_output(n);
        } else if step < 9 {
            let ms = if rng.below(20) == 0 { 20_000 } else { 100 };
            now += Duration::from_millis(rng.below(ms) as u64);
            c.handle_timeout(now);
        } else if rng.below(40) == 0 {
            c.handle_eof();
            at = input.len();
        } else if rng.below(30) == 0 {
            c.close_after_answers();
        }
        app.act(rng, &mut c);
        check_invariants(&c, config);
        assert!(!was_closed || c.is_closed(), "reopened");
        was_closed = c.is_closed();
        if was_closed && c.pending_output().is_empty() {
            break;
        }
    }
    assert!(
        was_closed,
        "still open after {MAX_STEPS} steps of an idle clock"
    );
    app.expected.extend(c.poll_refusal().map(|s| (s, false)));
    check_framing(&written, &app.expected);
}

#[test]
fn random_input_never_panics_and_stays_bounded() {
    let mut rng = Rng::new(seed());
    let small = Config {
        max_head_len: 1_024,
        max_pipelined: 4,
        max_pending_output: 4_096,
        max_buffered_input: 8_192,
        ..Config::default()
    };
    for run in 0..RUNS {
        let config = if run % 2 == 0 {
            Config::default()
        } else {
            small.clone()
        };
        run_one(&mut rng, &config);
    }
}

/// Feeds `input` in pieces cut by `rng` (whole when `None`), answering every request at once,
/// then ends the input; returns what was written. (A malformed head without a line feed yet is
/// only noticed at the next one or at the end of input, so answers are compared then.)
fn serve(input: &[u8], mut rng: Option<&mut Rng>) -> Vec<u8> {
    let mut c = Http1Connection::new(Timestamp::ZERO, Config::default());
    let mut at = 0;
    let answer = |c: &mut Http1Connection| {
        while let Some(r) = c.poll_request() {
            c.respond(200, "text/plain", r.path.as_bytes());
        }
    };
    while at < input.len() && c.wants_input() {
        let n = rng.as_mut().map_or(input.len(), |r| 1 + r.below(64));
        let n = n.min(input.len() - at);
        c.handle_input(Timestamp::ZERO, &input[at..at + n]);
        at += n;
        answer(&mut c);
    }
    c.handle_eof();
    answer(&mut c);
    c.pending_output().to_vec()
}

#[test]
fn fragmentation_never_changes_the_answers() {
    let mut rng = Rng::new(seed());
    for _ in 0..RUNS {
        let mut input = Vec::new();
        for _ in 0..1 + rng.below(20) {
            let mut piece = request(&mut rng);
            if rng.below(8) == 0 {
                mutate(&mut rng, &mut piece);
            }
            input.extend_from_slice(&piece);
        }
        let whole = serve(&input, None);
        assert_eq!(serve(&input, Some(&mut rng)), whole, "{input:?}");
    }
}
