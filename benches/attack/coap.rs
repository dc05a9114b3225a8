//! Issue 13's CoAP probes: rows 1 and 3 to 6 (`datagram`, `reflection`, `cache_flood`,
//! `inflight_bytes`, `descriptors`).

use std::collections::HashMap;
use std::io::Write;
use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use backoffd::coap::option::{PROXY_URI, URI_PATH, URI_QUERY};
use backoffd::coap::{Code, Message, MessageBuilder, MessageType};

use super::reflection::common::exposition::scrape;
use super::reflection::common::http::{connect, read_answers};
use super::reflection::common::{self, daemon};
use super::{answer, ms, reflection, request, reverse_proxy, upstream, CoapOption};

// ---------------------------------------------------------------------------------------------
// Row 1: the worst single datagram

pub fn datagram() -> Vec<(String, String)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(2, false, stop.clone());
    let allow = up.to_string();
    let daemon = daemon::proxy(
        "debug",
        &["--listen", "127.0.0.1:0", "--forward", "--allow", &allow],
    );
    let proxy = daemon.coap;
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    let segments = format!("coap://{up}/{}", "/".repeat(65_000 - 30));
    let named = format!("coap://{up}/{}", "a/".repeat(32_480));
    let empty: &[u8] = b"";
    let many_options: Vec<CoapOption> = (0..65_400).map(|_| (URI_QUERY, empty)).collect();
    let shapes: [(&str, Vec<CoapOption>); 3] = [
        (
            "a Proxy-Uri of 65k empty segments",
            vec![(PROXY_URI, segments.as_bytes())],
        ),
        (
            "a Proxy-Uri of 32k one-letter segments",
            vec![(PROXY_URI, named.as_bytes())],
        ),
        ("65k empty options", many_options),
    ];
    let legit_uri = format!("coap://{up}/x");
    let mut figures = Vec::new();
    for (shape, options) in shapes {
        let size = request(0, b"bad", &options).len();
        let (mut worst_own, mut worst_legit, mut code) = (Duration::ZERO, Duration::ZERO, None);
        for round in 0..20u16 {
            let hostile = request(2 * round, b"bad", &options);
            let legit = request(2 * round + 1, b"good", &[(PROXY_URI, legit_uri.as_bytes())]);
            let sent = Instant::now();
            client.send_to(&hostile, proxy).unwrap();
            client.send_to(&legit, proxy).unwrap();
            // Both answers come back; read them in any order.
            let mut got = HashMap::new();
            let mut buf = [0u8; 65536];
            client
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            while got.len() < 2 {
                let Ok(n) = client.recv(&mut buf) else { break };
                if let Ok(m) = Message::parse(&buf[..n]) {
                    got.insert(m.token().to_vec(), (m.code(), sent.elapsed()));
                }
            }
            if let Some((c, t)) = got.get(&b"bad"[..]) {
                (worst_own, code) = (worst_own.max(*t), Some(*c));
            }
            let legit_time = got
                .get(&b"good"[..])
                .map_or(Duration::from_secs(2), |a| a.1);
            worst_legit = worst_legit.max(legit_time);
        }
        figures.push((
            format!("{shape} ({size} B): its answer"),
            format!(
                "{}, worst of 20 {}",
                code.map_or("none".into(), |c| c.to_string()),
                ms(worst_own)
            ),
        ));
        figures.push((
            format!("{shape}: a legit request sent right after, worst of 20"),
            ms(worst_legit),
        ));
    }
    stop.store(true, Ordering::Relaxed);
    figures
}

// ---------------------------------------------------------------------------------------------
// Row 3: reflection at default flags

/// Each case of tests/proxy_reflection.rs (run side by side: each has its own proxy, upstream
/// and victim socket, which listens for `reflection::WINDOW` after its last request).
pub fn reflection() -> Vec<(String, String)> {
    let runs: Vec<_> = (reflection::Case::ALL.iter())
        .map(|&case| thread::spawn(move || reflection::reflect(case)))
        .collect();
    runs.into_iter()
        .map(|run| run.join().expect("a reflection case"))
        .map(|r| {
            eprintln!("{}", r.line());
            let verdict = match r.tally.received <= r.bound() {
                true => "within",
                false => "OVER",
            };
            (
                format!(
                    "{}: bytes in / out (ratio), bound 3x + {} B",
                    r.case.name(),
                    reflection::ONE_DATAGRAM
                ),
                format!(
                    "{} B / {} B ({:.2}x), bound {} B: {verdict}",
                    r.tally.sent,
                    r.tally.received,
                    r.ratio(),
                    r.bound()
                ),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Row 4: the answer cache under one source's flood

pub fn cache_flood() -> Vec<(String, String)> {
    const LEGIT: u16 = 100;
    let stop = Arc::new(AtomicBool::new(false));
    let (up, seen) = upstream(8, false, stop.clone());
    let (_daemon, proxy, metrics) = common::daemon::proxy_with_metrics(up, &[]);
    let legit = UdpSocket::bind("127.0.0.1:0").unwrap();
    let kept: Vec<Vec<u8>> = (0..LEGIT)
        .map(|i| request(i, &i.to_be_bytes(), &[(URI_PATH, b"r")]))
        .collect();
    let served = |label: &str| {
        let answered = kept
            .iter()
            .enumerate()
            .filter(|(i, req)| {
                legit.send_to(req, proxy).unwrap();
                answer(&legit, &(*i as u16).to_be_bytes(), Duration::from_secs(1)).is_some()
            })
            .count();
        assert_eq!(
            answered, LEGIT as usize,
            "{label}: every legit request answered"
        );
    };
    served("first");
    // One source, 110k NON requests as fast as the socket takes them; it never reads.
    let flooder = UdpSocket::bind("127.0.0.1:0").unwrap();
    let started = Instant::now();
    for i in 0..110_000u32 {
        let mut out = Vec::new();
        let mut b = MessageBuilder::new(
            &mut out,
            MessageType::Non,
            Code::GET,
            i as u16,
            &i.to_be_bytes(),
        );
        b.option(URI_PATH, b"r");
        b.finish().unwrap();
        let _ = flooder.send_to(&out, proxy);
    }
    let flood_time = started.elapsed();
    thread::sleep(Duration::from_millis(500));
    let before = seen.load(Ordering::Relaxed);
    served("retransmitted");
    thread::sleep(Duration::from_millis(200));
    let ran_twice = seen.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    let m = scrape(metrics);
    let count = |name: &str| m.get(&format!("backoffd_coap_{name}_total"));
    vec![
        (
            format!(
                "110k NONs from one source in {}; then {LEGIT} retransmissions of another \
                 client's answered CONs",
                ms(flood_time)
            ),
            format!("{ran_twice} ran upstream again"),
        ),
        (
            "evictions: early / cache full / over the source's share".into(),
            format!(
                "{} / {} / {}",
                count("early_evictions"),
                count("cache_evictions"),
                count("share_evictions")
            ),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Row 5: large requests in flight

pub fn inflight_bytes() -> Vec<(String, String)> {
    let (stop, daemon, proxy) = reverse_proxy(0, true);
    let before = daemon.status_kib("VmRSS:");
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    let big = vec![b'p'; 60_000];
    let mut sent = 0;
    for i in 0..400u16 {
        let mut out = Vec::new();
        let mut b =
            MessageBuilder::new(&mut out, MessageType::Con, Code::POST, i, &i.to_be_bytes());
        b.option(URI_PATH, b"silent");
        b.payload(&big);
        b.finish().unwrap();
        sent += out.len();
        client.send_to(&out, proxy).unwrap();
    }
    thread::sleep(Duration::from_millis(500));
    let after = daemon.status_kib("VmRSS:");
    stop.store(true, Ordering::Relaxed);
    vec![(
        format!(
            "400 CONs of 60 kB ({} MB) to a silent upstream",
            sent / 1_000_000
        ),
        format!(
            "RSS +{:.1} MB",
            (after.saturating_sub(before)) as f64 / 1024.0
        ),
    )]
}

// ---------------------------------------------------------------------------------------------
// Row 6: descriptor exhaustion

pub fn descriptors() -> Vec<(String, String)> {
    let mut daemon =
        daemon::spawn_with_fd_limit(&["serve", "--metrics", "127.0.0.1:0"], "info", 64);
    let metrics = daemon.wait_addr("metrics listening on ");
    let attackers: Vec<TcpStream> = (0..128)
        .filter_map(|_| TcpStream::connect(metrics).ok())
        .collect();
    thread::sleep(Duration::from_millis(200));
    let mut legit = connect(metrics);
    thread::sleep(Duration::from_millis(200));
    drop(attackers);
    let left = Instant::now();
    legit
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let status = read_answers(&mut legit, &[false])[0].status;
    let warnings = daemon
        .drain_log()
        .iter()
        .filter(|l| l.contains("accept:"))
        .count();
    vec![
        (
            "a client waiting in the backlog, once 128 attackers left (limit 64 fds)".into(),
            format!("{status} after {}", ms(left.elapsed())),
        ),
        ("accept warnings logged".into(), warnings.to_string()),
    ]
}
