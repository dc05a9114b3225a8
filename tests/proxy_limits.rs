//! What one datagram, one request and one source may cost the real `backoffd proxy` (issue 13),
//! over loopback UDP: oversized and option-heavy requests are refused (4.13 with Size1, 4.02),
//! large requests to a silent upstream stay within the in-flight byte budget (5.03), a flooding
//! client cannot push other clients' answers out of the cache, a request queued behind the
//! costliest datagram is still answered, and the opt-in send rate keeps its flags. Timings are
//! printed, never asserted: `cargo test --release --test proxy_limits -- --nocapture` (and
//! `--ignored` for the engine's per-datagram cost of the worst datagrams).

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use backoffd::coap::option::{decode_uint, MAX_AGE, PROXY_URI, SIZE1, URI_PATH};
use backoffd::coap::{Code, Message, MessageBuilder, MessageType};
use backoffd::proxy::{AllowedTarget, Destination, Proxy, ProxyConfig, Routing, Seeds};
use backoffd::time::Timestamp;
use common::daemon::proxy_with_metrics;
use common::exposition::scrape;
use common::upstream::{Script, Upstream};

/// A CoAP server on a thread that answers every request at once, piggybacked: 2.05 "ok".
fn fast_upstream() -> Upstream {
    Script::new().payload(b"ok").start()
}

fn client() -> UdpSocket {
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

/// A request of type `ty` with options (in order) and a payload.
fn message(ty: MessageType, mid: u16, token: &[u8], opts: &[(u16, &[u8])], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, Code::GET, mid, token);
    opts.iter().for_each(|&(n, v)| _ = b.option(n, v));
    b.payload(body);
    b.finish().unwrap();
    out
}

/// The costliest datagram to parse: as long as UDP over IPv4 allows, every byte after the
/// header and token an empty Uri-Path option (65,495 of them).
fn worst_datagram(mid: u16) -> Vec<u8> {
    let mut out = message(MessageType::Con, mid, &[0xee; 8], &[(URI_PATH, b"")], &[]);
    out.resize(65_507, 0x00); // 0x00: delta 0, length 0: one more empty Uri-Path
    assert!(Message::parse(&out).is_ok());
    out
}

/// The next datagram from the proxy, parsed into (type, code, MID, token).
fn answer(c: &UdpSocket) -> (MessageType, Code, u16, Vec<u8>, Option<u32>, Option<u32>) {
    let mut buf = [0u8; 2048];
    let n = c.recv(&mut buf).expect("an answer from the proxy");
    let m = Message::parse(&buf[..n]).expect("a well-formed answer");
    let uint = |n| m.option(n).map(|v| decode_uint(v).unwrap());
    (
        m.msg_type(),
        m.code(),
        m.message_id(),
        m.token().to_vec(),
        uint(SIZE1),
        uint(MAX_AGE),
    )
}

#[test]
fn oversized_and_option_heavy_requests_get_4_13_and_4_02_and_are_counted() {
    let upstream = fast_upstream();
    let (_daemon, proxy, metrics) = proxy_with_metrics(upstream.addr, &[]);
    let c = client();
    // The audit's 60 kB request: refused whole, Size1 telling how much entity would fit.
    c.send_to(
        &message(MessageType::Con, 1, b"a", &[(URI_PATH, b"r")], &[1; 60_000]),
        proxy,
    )
    .unwrap();
    let (ty, code, mid, _, size1, _) = answer(&c);
    assert_eq!(
        (ty, code, mid),
        (MessageType::Ack, Code::REQUEST_ENTITY_TOO_LARGE, 1)
    );
    // 1152 less header 4, token 1, Uri-Path 2 and the payload marker.
    assert_eq!(size1, Some(1152 - 8));
    // The largest request the default allows goes through.
    let fits = message(
        MessageType::Con,
        2,
        b"b",
        &[(URI_PATH, b"r")],
        &[1; 1152 - 8],
    );
    assert_eq!(fits.len(), 1152);
    c.send_to(&fits, proxy).unwrap();
    assert_eq!(answer(&c).1, Code::CONTENT);
    // 65 options are one more than the default allows.
    let paths = vec![(URI_PATH, &b"p"[..]); 65];
    c.send_to(&message(MessageType::Con, 3, b"c", &paths, &[]), proxy)
        .unwrap();
    assert_eq!(answer(&c).1, Code::BAD_OPTION);
    let doc = scrape(metrics);
    assert_eq!(doc.get("backoffd_coap_answers_total{code=\"4.13\"}"), 1.0);
    assert_eq!(doc.get("backoffd_coap_answers_total{code=\"4.02\"}"), 1.0);
    assert_eq!(doc.get("backoffd_coap_too_many_options_total"), 1.0);
    assert_eq!(doc.get("backoffd_coap_forwarded_total"), 1.0);
}

/// Sends `n` CONs of 60 kB to the proxy one at a time, each after the previous one's first
/// answer (a 60 kB datagram fills a socket buffer fast); returns the codes of those answers.
fn send_large_cons(proxy: SocketAddr, n: u16) -> Vec<Code> {
    let c = client();
    (0..n)
        .map(|mid| {
            let req = message(MessageType::Con, mid, &mid.to_be_bytes(), &[], &[7; 60_000]);
            c.send_to(&req, proxy).unwrap();
            let (ty, code, got, _, _, max_age) = answer(&c);
            assert_eq!((ty, got), (MessageType::Ack, mid));
            if code == Code::SERVICE_UNAVAILABLE {
                assert!(max_age.is_some(), "5.03 without Max-Age");
            }
            code
        })
        .collect()
}

#[test]
fn large_requests_to_a_silent_upstream_stay_within_the_size_limit_and_the_byte_budget() {
    // 400 x 60 kB CONs to a silent resource once added 15.5 MB (about 600 MB at the default
    // --max-inflight). By default they are refused by size; let through, by the budget.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let up = silent.local_addr().unwrap();
    for (extra, name) in [
        (&["--ack-delay", "5ms"][..], "defaults"),
        (
            &["--ack-delay", "5ms", "--max-request-size", "65527"][..],
            "--max-request-size 65527",
        ),
    ] {
        let (daemon, proxy, metrics) = proxy_with_metrics(up, extra);
        let before = daemon.status_kib("VmRSS:");
        let codes = send_large_cons(proxy, 400);
        let rss = daemon.status_kib("VmRSS:");
        let count = |code| codes.iter().filter(|&&c| c == code).count();
        let doc = scrape(metrics);
        let held = doc.get("backoffd_coap_in_flight_bytes");
        eprintln!(
            "{name}: {} x 4.13, {} forwarded, {} x 5.03; {held} bytes held in flight; \
             VmRSS {before} -> {rss} KiB (+{} KiB)",
            count(Code::REQUEST_ENTITY_TOO_LARGE),
            count(Code::EMPTY),
            count(Code::SERVICE_UNAVAILABLE),
            rss.saturating_sub(before)
        );
        assert!(held <= f64::from(4 << 20), "{held} bytes in flight");
        if name == "defaults" {
            assert_eq!(count(Code::REQUEST_ENTITY_TOO_LARGE), 400);
        } else {
            // 4 MiB hold 69 copies of 60 kB; each refused one is counted by cause.
            assert_eq!(count(Code::EMPTY), 69, "{codes:?}");
            assert_eq!(count(Code::SERVICE_UNAVAILABLE), 400 - 69);
            let refused = doc.get("backoffd_coap_refusals_total{cause=\"inflight_bytes\"}");
            assert_eq!(refused, f64::from(400 - 69));
        }
        // A sanity bound only (the machine is shared): well under the 15.5 MB of before.
        assert!(rss <= before + 12 * 1024, "VmRSS {before} -> {rss} KiB");
    }
    drop(silent);
}

#[test]
fn a_flooding_client_cannot_push_other_clients_answers_out_of_the_cache() {
    // Default flags but the cache's size and share, which are what is tested. Every answer
    // is no longer than its request, so the flooder gets them all without proving its
    // address (tests/proxy_reflection.rs).
    let extra = ["--max-cached", "2000", "--max-cached-per-client", "200"];
    let upstream = fast_upstream();
    let (_daemon, proxy, metrics) = proxy_with_metrics(upstream.addr, &extra);
    let legit = client();
    let requests: Vec<Vec<u8>> = (0..20)
        .map(|mid| message(MessageType::Con, mid, b"legit", &[(URI_PATH, b"r")], &[]))
        .collect();
    for req in &requests {
        legit.send_to(req, proxy).unwrap();
        assert_eq!(answer(&legit).1, Code::CONTENT);
    }
    // 5000 requests from one source, 50 at a time so no socket buffer overflows.
    let flooder = client();
    for batch in 0..100u16 {
        for i in 0..50 {
            let mid = batch * 50 + i;
            let req = message(
                MessageType::Non,
                mid,
                &mid.to_be_bytes(),
                &[(URI_PATH, b"f")],
                &[],
            );
            flooder.send_to(&req, proxy).unwrap();
        }
        (0..50).for_each(|_| _ = answer(&flooder));
    }
    let before = scrape(metrics);
    // The legitimate client's retransmissions are answered from the cache, not forwarded.
    for req in &requests {
        legit.send_to(req, proxy).unwrap();
        assert_eq!(answer(&legit).1, Code::CONTENT);
    }
    let after = scrape(metrics);
    let delta = |s: &str| after.get(s) - before.get(s);
    assert_eq!(delta("backoffd_coap_forwarded_total"), 0.0);
    assert_eq!(delta("backoffd_coap_client_duplicates_total"), 20.0);
    assert_eq!(after.get("backoffd_coap_early_evictions_total"), 0.0);
    assert_eq!(
        after.get("backoffd_coap_share_evictions_total"),
        5000.0 - 200.0
    );
    assert_eq!(after.get("backoffd_coap_cached_answers"), 220.0);
}

/// Round trips of a legitimate CON sent right behind `ahead` copies of the worst datagram
/// (the socket's receive buffer holds only a few of those), `runs` times.
fn behind_worst(proxy: SocketAddr, ahead: usize, runs: u16) -> Vec<Duration> {
    let (attacker, c) = (client(), client());
    (0..runs)
        .map(|run| {
            for k in 0..ahead {
                let mid = run.wrapping_mul(8).wrapping_add(k as u16);
                attacker.send_to(&worst_datagram(mid), proxy).unwrap();
            }
            let req = message(MessageType::Con, run, b"ok", &[(URI_PATH, b"r")], &[]);
            let sent = Instant::now();
            c.send_to(&req, proxy).unwrap();
            let (_, code, mid, _, _, _) = answer(&c);
            let rtt = sent.elapsed();
            assert_eq!((code, mid), (Code::CONTENT, run));
            // The attacker's answers (4.13), so its socket never fills.
            (0..ahead).for_each(|_| _ = answer(&attacker));
            rtt
        })
        .collect()
}

#[test]
fn a_request_queued_behind_the_costliest_datagrams_is_answered() {
    // The attacker waits for each 4.13 it causes (a few bytes for each 64 KiB it sent).
    let upstream = fast_upstream();
    let (_daemon, proxy, metrics) = proxy_with_metrics(upstream.addr, &[]);
    let show = |mut d: Vec<Duration>| {
        d.sort();
        format!(
            "median {:?}, p90 {:?}, max {:?}",
            d[d.len() / 2],
            d[d.len() * 9 / 10],
            d[d.len() - 1]
        )
    };
    let alone = behind_worst(proxy, 0, 200);
    let behind_one = behind_worst(proxy, 1, 200);
    let behind_three = behind_worst(proxy, 3, 200);
    eprintln!("legitimate CON round trip alone: {}", show(alone));
    eprintln!(
        "behind one 65,507-byte datagram of 65,495 options: {}",
        show(behind_one)
    );
    eprintln!("behind three of them: {}", show(behind_three));
    let doc = scrape(metrics);
    assert_eq!(doc.get("backoffd_coap_answers_total{code=\"4.13\"}"), 800.0);
}

/// The engine's work for one datagram, timed in-process: each costly kind `runs` times under
/// fresh tokens and MIDs; checks that each gets `want` (an answer's code, or GET if it went
/// upstream) and prints the median, the 99th percentile and the maximum.
fn time_datagrams(config: ProxyConfig, make: &dyn Fn(u16) -> Vec<u8>, want: Code) -> String {
    let mut p = Proxy::new(
        config,
        Seeds {
            rng: 1,
            hash: [1, 2],
        },
    );
    p.accept_endpoint_events(Timestamp::ZERO);
    let mut times: Vec<Duration> = (0..1000)
        .map(|i| {
            // A source each: the per-client in-flight limit is not what is measured.
            let from = SocketAddr::from(([127, 0, 0, 1], 40_000 + i));
            let datagram = make(i);
            let start = Instant::now();
            p.handle_client_datagram(Timestamp::ZERO, from, &datagram);
            let took = start.elapsed();
            let sent = p.poll_transmit().expect("an answer or a forward");
            assert_eq!(Message::parse(&sent.payload).unwrap().code(), want);
            while p.poll_transmit().is_some() {}
            took
        })
        .collect();
    times.sort();
    let at = |q: usize| times[(times.len() - 1) * q / 100];
    format!("median {:?}, p99 {:?}, max {:?}", at(50), at(99), at(100))
}

/// A proxy configuration both reverse (to :5683) and forward (to :5690), adjusted by `edit`.
fn both_ways(edit: impl FnOnce(&mut ProxyConfig)) -> ProxyConfig {
    let mut c = ProxyConfig {
        routing: Routing {
            upstream: Some("127.0.0.1:5683".parse().unwrap()),
            allow: vec![AllowedTarget {
                host: "127.0.0.1".into(),
                port: 5690,
                addr: "127.0.0.1:5690".parse().unwrap(),
            }],
            forward: true,
        },
        ..ProxyConfig::default()
    };
    edit(&mut c);
    c
}

/// A costly kind of datagram: its name, the configuration, how to make one (by index), and
/// what it gets.
type Case = (&'static str, ProxyConfig, Box<dyn Fn(u16) -> Vec<u8>>, Code);

#[test]
#[ignore = "a measurement: cargo test --release --test proxy_limits -- --ignored --nocapture"]
fn cost_of_the_worst_datagrams() {
    let cases: Vec<Case> = refused_cases()
        .into_iter()
        .chain(forwarded_cases())
        .collect();
    time_parse_and_build();
    for (name, config, make, want) in cases {
        eprintln!("{name}: {}", time_datagrams(config, &make, want));
    }
}

/// The token of the `i`-th costly datagram.
fn case_token(i: u16) -> Vec<u8> {
    [i.to_be_bytes(), [0xaa; 2]].concat()
}

/// A Proxy-Uri to the allowed forward target with `segments` empty path segments.
fn case_uri(segments: usize) -> String {
    format!("coap://127.0.0.1:5690{}", "/".repeat(segments))
}

/// A CON with one Proxy-Uri option `u` and a payload.
fn with_proxy_uri(i: u16, u: &str, body: &[u8]) -> Vec<u8> {
    message(
        MessageType::Con,
        i,
        &case_token(i),
        &[(PROXY_URI, u.as_bytes())],
        body,
    )
}

/// The costliest datagrams the default limits refuse.
fn refused_cases() -> Vec<Case> {
    vec![
        (
            "65,507 bytes, 65,495 empty options (refused, 4.13)",
            both_ways(|_| {}),
            Box::new(worst_datagram),
            Code::REQUEST_ENTITY_TOO_LARGE,
        ),
        (
            "65,507 bytes, a Proxy-Uri of 65,4xx segments (refused, 4.13)",
            both_ways(|_| {}),
            Box::new(move |i| with_proxy_uri(i, &case_uri(65_470), &[])),
            Code::REQUEST_ENTITY_TOO_LARGE,
        ),
        (
            "1,152 bytes, 1,144 empty options (refused, 4.02)",
            both_ways(|_| {}),
            Box::new(move |i| {
                let mut m = message(MessageType::Con, i, &case_token(i), &[(URI_PATH, b"")], &[]);
                m.resize(1152, 0);
                m
            }),
            Code::BAD_OPTION,
        ),
        (
            "1,152 bytes, a Proxy-Uri of 1,119 segments (refused, 4.02)",
            both_ways(|_| {}),
            Box::new(move |i| with_proxy_uri(i, &case_uri(1119), &[])),
            Code::BAD_OPTION,
        ),
    ]
}

/// The costliest datagrams the proxy forwards, with the default limits and the maximum ones.
fn forwarded_cases() -> Vec<Case> {
    vec![
        (
            "1,152 bytes, 64 Uri-Path options and a payload (reverse, forwarded)",
            both_ways(|_| {}),
            Box::new(move |i| {
                let paths = vec![(URI_PATH, &b"seg"[..]); 64];
                let mut m = message(MessageType::Con, i, &case_token(i), &paths, &[1]);
                m.resize(1152, 1);
                m
            }),
            Code::GET,
        ),
        (
            "1,152 bytes, a Proxy-Uri of 64 segments and a payload (forward, forwarded)",
            both_ways(|_| {}),
            Box::new(move |i| {
                let u = format!("coap://127.0.0.1:5690{}", "/seg".repeat(64));
                let mut m = with_proxy_uri(i, &u, &[1]);
                m.resize(1152, 1);
                m
            }),
            Code::GET,
        ),
        (
            "limits raised to the maximum: the audit's 60,000-segment Proxy-Uri (forwarded)",
            both_ways(|c| {
                (c.limits.max_request_size, c.limits.max_options) = (65_527, 65_535);
                c.limits.max_inflight_bytes = 64 << 20;
            }),
            Box::new(move |i| with_proxy_uri(i, &case_uri(60_000), &[])),
            Code::GET,
        ),
    ]
}

/// Times `Message::parse` of the worst datagram, and the builder's own out-of-order path (the
/// proxy never takes it): 60,000 options added highest first are sorted once by `finish`.
fn time_parse_and_build() {
    let worst = worst_datagram(1);
    let mut parse: Vec<Duration> = (0..1000)
        .map(|_| {
            let start = Instant::now();
            assert!(Message::parse(std::hint::black_box(&worst)).is_ok());
            start.elapsed()
        })
        .collect();
    parse.sort();
    eprintln!("Message::parse alone of the first: median {:?}", parse[500]);
    let mut out = Vec::new();
    let start = Instant::now();
    let mut b = MessageBuilder::new(&mut out, MessageType::Con, Code::GET, 1, b"t");
    (0..60_000u16).rev().for_each(|i| _ = b.option(i, b""));
    assert_eq!((b.deferred_options(), b.finish()), (59_999, Ok(())));
    eprintln!(
        "MessageBuilder, 60,000 options in reverse: {:?}",
        start.elapsed()
    );
}

#[test]
fn the_new_limits_are_flags_that_refuse_nonsense() {
    for (flag, value) in [
        ("--max-request-size", "63"),
        ("--max-request-size", "70000"),
        ("--max-options", "0"),
        ("--max-inflight-bytes", "100"),
        ("--max-cached-per-client", "0"),
        ("--max-observations-per-source", "0"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_backoffd"))
            .args(["proxy", "--upstream", "127.0.0.1:5683", flag, value])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(flag), "{stderr}");
    }
}

#[test]
fn the_opt_in_send_rate_keeps_its_flags_and_refuses_nonsense() {
    // Off by default (tests/proxy_defaults.rs); each spelling still starts a proxy that
    // serves (tests/proxy_reflection.rs has what the rate does).
    let upstream = fast_upstream();
    let (_daemon, proxy, metrics) = proxy_with_metrics(
        upstream.addr,
        &[
            "--client-bytes-per-sec",
            "8192",
            "--client-burst-bytes",
            "65527",
            "--client-datagrams-per-sec",
            "100",
            "--client-burst-datagrams",
            "200",
        ],
    );
    let c = client();
    c.send_to(
        &message(MessageType::Con, 1, b"r", &[(URI_PATH, b"r")], &[]),
        proxy,
    )
    .unwrap();
    assert_eq!(answer(&c).1, Code::CONTENT);
    let doc = scrape(metrics);
    assert_eq!(
        doc.get("backoffd_coap_budget_sources"),
        1.0,
        "the rate is on"
    );
    // A rate that is not a number; with the rate on, a burst that cannot hold the longest
    // datagram, or no datagram a second: refused at start.
    let on = ["--client-bytes-per-sec", "8192"];
    for flags in [
        &["--client-bytes-per-sec", "-1"][..],
        &[on[0], on[1], "--client-burst-bytes", "1000"],
        &[on[0], on[1], "--client-datagrams-per-sec", "0"],
        &[on[0], on[1], "--client-burst-datagrams", "0"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_backoffd"))
            .args(["proxy", "--upstream", "127.0.0.1:5683"])
            .args(flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("--client-"), "{stderr}");
    }
}

/// Forwards `req` from `from` through `p` and answers it piggybacked at once; returns the
/// time the upstream's answer took the engine (where the answer is kept, and the cache makes
/// room: evictions, a compaction).
fn round_trip(p: &mut Proxy, from: SocketAddr, req: &[u8]) -> Duration {
    p.handle_client_datagram(Timestamp::ZERO, from, req);
    let sent = p.poll_transmit().expect("forwarded");
    let Destination::Upstream(endpoint) = sent.to else {
        panic!("answered locally: {sent:?}");
    };
    let up = Message::parse(&sent.payload).unwrap();
    let mut answer = Vec::new();
    let b = MessageBuilder::new(
        &mut answer,
        MessageType::Ack,
        Code::CONTENT,
        up.message_id(),
        up.token(),
    );
    b.finish().unwrap();
    let start = Instant::now();
    p.handle_upstream_datagram(Timestamp::ZERO, endpoint, &answer);
    let took = start.elapsed();
    while p.poll_transmit().is_some() {}
    p.accept_endpoint_events(Timestamp::ZERO);
    took
}

#[test]
#[ignore = "a measurement: cargo test --release --test proxy_limits -- --ignored --nocapture"]
fn cost_of_a_flood_against_a_full_answer_cache() {
    // The default cache (100,000 answers, 10,000 a client) full of 90,000 clients' answers,
    // then one client's 80,000: each past its share marks its own oldest dead, and once the
    // dead are a third of the ring one answer pays for a compaction of all of it.
    let mut p = Proxy::new(
        both_ways(|_| {}),
        Seeds {
            rng: 1,
            hash: [1, 2],
        },
    );
    p.accept_endpoint_events(Timestamp::ZERO);
    let req = |mid: u16| {
        message(
            MessageType::Con,
            mid,
            &mid.to_be_bytes(),
            &[(URI_PATH, b"r")],
            &[],
        )
    };
    for i in 0..90_000u32 {
        let from = SocketAddr::from(([127, 1 + (i >> 16) as u8, (i >> 8) as u8, i as u8], 40_000));
        round_trip(&mut p, from, &req(i as u16));
    }
    let flooder = SocketAddr::from(([127, 0, 0, 9], 40_000));
    let mut times: Vec<Duration> = (0..80_000u32)
        .map(|i| round_trip(&mut p, flooder, &req(i as u16)))
        .collect();
    let c = p.counters();
    assert_eq!(
        (c.kept.early_evictions, c.kept.share_evictions),
        (0, 70_000)
    );
    let slow: Vec<(usize, Duration)> = (times.iter().copied().enumerate())
        .filter(|&(_, t)| t > Duration::from_micros(500))
        .collect();
    // Expected: one compaction (at flood answer 10,000 + 50,065, when the dead pass half the
    // live), and one growth of the duplicate index's hash map (at 114,688 entries: a rehash,
    // once per doubling in the life of the process, not a cost the flood can repeat).
    eprintln!("answers that took over 0.5 ms (index, time): {slow:?}");
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    eprintln!(
        "the flooder's answers kept: median {:?}, p99.9 {:?}, max {:?}",
        at(0.5),
        at(0.999),
        at(1.0)
    );
}
