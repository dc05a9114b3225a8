//! Issue 40's probes of the answers held for a proof of address: row 1 (`held_backlog`: a
//! forged flood fills the backlog; what new libcoap and aiocoap clients get after it, and the
//! forged sources' reflection ratio) and row 8 (`icmp_observer`: an unproven observer closes
//! its socket; how long its observation lives on).
//!
//! The forged sources are 20 loopback addresses (127.0.0.2 to 127.0.0.21, which Linux routes
//! to the loopback interface like 127.0.0.1): a spoofer writes any address, and the proxy
//! counts its shares per source network (`--source-prefix`, /32 for IPv4), so 20 ports of
//! one address would be one source. The new clients are on 127.0.0.1.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use backoffd::coap::option::{OBSERVE, URI_PATH};
use backoffd::coap::{Code, Message, MessageBuilder, MessageType};

use super::reflection::common::daemon;
use super::reflection::common::exposition::{scrape, Exposition};
use super::reflection::{self, Serving};
use super::upstream;

const SOURCES: u8 = 20;
const REQUESTS: u16 = 250;
const BODY: usize = 1000;

/// An 18-byte GET of the resource: type `ty`, MID and token `i`.
fn get(i: u16) -> Vec<u8> {
    let mut out = Vec::new();
    let token = u32::from(i).to_be_bytes();
    let mut b = MessageBuilder::new(&mut out, MessageType::Non, Code::GET, i, &token);
    b.option(URI_PATH, b"resource");
    b.finish().unwrap();
    out
}

/// A series of the proxy's metrics, `-` if this build has none (the before figure).
fn series(m: &Exposition, name: &str) -> String {
    let key = format!("backoffd_coap_{name}");
    m.samples.get(&key).map_or("-".into(), |v| v.to_string())
}

/// The peers' installer (idempotent; quick when installed): aiocoap's interpreter.
fn python() -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = root.join("target").join("interop-venv");
    let status = Command::new("bash")
        .arg(root.join("tests/interop/setup.sh"))
        .arg(&venv)
        .output()
        .expect("tests/interop/setup.sh");
    assert!(status.status.success(), "tests/interop/setup.sh failed");
    venv.join("bin").join("python")
}

/// One new client's GET of the resource: what it printed and how long it took.
fn new_client(kind: &str, proxy: SocketAddr, python: &Path) -> String {
    let uri = format!("coap://{proxy}/resource");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/aiocoap_client.py");
    let started = Instant::now();
    let out = match kind {
        "libcoap" => Command::new("coap-client-notls")
            .args(["-m", "get", "-B", "5", &uri])
            .output(),
        _ => Command::new(python)
            .arg(&script)
            .args(["--timeout", "5", "request", "get", &uri])
            .output(),
    }
    .expect("the client runs");
    let took = started.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let full = match kind {
        "libcoap" => stdout.trim_end().len() == BODY,
        _ => stdout.contains(&format!("CODE 2.05 {BODY}")),
    };
    let what = match (full, kind) {
        (true, _) => format!("2.05, {BODY} B"),
        (false, "libcoap") => format!(
            "no answer ({:?})",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        ),
        (false, _) => stdout.lines().next().unwrap_or("nothing").to_string(),
    };
    format!("{what} in {took:.2} s")
}

// ---------------------------------------------------------------------------------------------
// Row 1: the backlog of answers held for a proof

pub fn held_backlog() -> Vec<(String, String)> {
    let python = python();
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(BODY, false, stop.clone());
    let (_daemon, proxy, metrics) = daemon::proxy_with_metrics(up, &[]);
    let forged: Vec<UdpSocket> = (0..SOURCES)
        .map(|i| {
            let s = UdpSocket::bind((Ipv4Addr::new(127, 0, 0, 2 + i), 0)).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    let (mut sent, mut received) = (vec![0usize; forged.len()], vec![0usize; forged.len()]);
    let started = Instant::now();
    for i in 0..REQUESTS {
        for (s, sent) in forged.iter().zip(&mut sent) {
            *sent += s.send_to(&get(i), proxy).unwrap();
        }
        // 250 rounds in about 250 ms: no socket buffer on the way overflows.
        thread::sleep(Duration::from_millis(1));
    }
    let drain = |received: &mut Vec<usize>| {
        let mut buf = [0u8; 2048];
        for (s, r) in forged.iter().zip(received.iter_mut()) {
            while let Ok(n) = s.recv(&mut buf) {
                *r += n;
            }
        }
    };
    let mut figures = vec![(
        format!(
            "{SOURCES} forged sources x {REQUESTS} NON GETs of a {BODY}-B resource, never \
             acknowledged"
        ),
        format!("{} B sent", sent.iter().sum::<usize>()),
    )];
    for at in [1, 15] {
        while started.elapsed() < Duration::from_secs(at) {
            drain(&mut received);
            thread::sleep(Duration::from_millis(20));
        }
        let m = scrape(metrics);
        figures.push((
            format!("+{at} s: bytes held for proofs"),
            series(&m, "exchange_answer_bytes"),
        ));
        for kind in ["libcoap", "aiocoap"] {
            figures.push((
                format!("+{at} s: a new {kind} client's GET"),
                new_client(kind, proxy, &python),
            ));
        }
    }
    thread::sleep(Duration::from_secs(2));
    drain(&mut received);
    let (worst, of) = (sent.iter().zip(&received))
        .map(|(&s, &r)| (r as f64 / s as f64, (r, s)))
        .fold((0.0, (0, 0)), |a, b| if b.0 > a.0 { b } else { a });
    let bound = 3 * of.1 + reflection::ONE_DATAGRAM;
    let verdict = if of.0 <= bound { "within" } else { "OVER" };
    figures.push((
        "forged sources: the worst received / sent (bound 3x + one datagram)".into(),
        format!(
            "{worst:.2}x ({} B of {} B sent; bound {bound} B): {verdict}",
            of.0, of.1
        ),
    ));
    let m = scrape(metrics);
    figures.push((
        "5.03 proof_backlog / held answers evicted / given up (unacknowledged) / 4.01+Echo".into(),
        format!(
            "{} / {} / {} / {}",
            series(&m, "refusals_total{cause=\"proof_backlog\"}"),
            series(&m, "held_answers_given_up_total{cause=\"evicted\"}"),
            series(&m, "held_answers_given_up_total{cause=\"unacknowledged\"}"),
            series(&m, "echo_challenges_total"),
        ),
    ));
    stop.store(true, Ordering::Relaxed);
    figures
}

// ---------------------------------------------------------------------------------------------
// Row 8: an unproven observer that closed its socket

pub fn icmp_observer() -> Vec<(String, String)> {
    let stop = Arc::new(AtomicBool::new(false));
    let serving = Serving {
        slow: false,
        notify_ms: (100, 100),
        notify_for: Duration::MAX,
    };
    let (up, _) = reflection::upstream(serving, stop.clone());
    let (_daemon, proxy, metrics) = daemon::proxy_with_metrics(up, &[]);
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut req = Vec::new();
    let mut b = MessageBuilder::new(&mut req, MessageType::Con, Code::GET, 1, b"o");
    b.option(OBSERVE, &[]);
    b.option(URI_PATH, b"t");
    b.finish().unwrap();
    client.send_to(&req, proxy).unwrap();
    // The registration's answer does not fit 3x the request: it comes as a CON, which the
    // client does not acknowledge before it closes its socket.
    let mut buf = [0u8; 2048];
    let got_con = (0..5).any(|_| {
        client.recv(&mut buf).is_ok_and(|n| {
            Message::parse(&buf[..n])
                .is_ok_and(|m| m.msg_type() == MessageType::Con && !m.payload().is_empty())
        })
    });
    drop(client);
    let closed = Instant::now();
    let observations = || scrape(metrics).get("backoffd_coap_observations");
    let mut ended = None;
    while closed.elapsed() < Duration::from_secs(8) && ended.is_none() {
        thread::sleep(Duration::from_millis(100));
        if observations() == 0.0 {
            ended = Some(closed.elapsed());
        }
    }
    let m = scrape(metrics);
    stop.store(true, Ordering::Relaxed);
    vec![
        (
            format!(
                "a {}-B Observe registration, its CON answer {}, then the socket closed: the \
                 observation",
                req.len(),
                if got_con { "received" } else { "NOT received" }
            ),
            match ended {
                Some(t) => format!("ended {:.1} s after the close", t.as_secs_f64()),
                None => "still there 8 s after the close".into(),
            },
        ),
        (
            "notifications superseded / observers lost / CONs sent past 3x".into(),
            format!(
                "{} / {} / {}",
                series(&m, "notifications_superseded_total"),
                series(&m, "observers_lost_total"),
                series(&m, "amplification_probes_total"),
            ),
        ),
    ]
}
