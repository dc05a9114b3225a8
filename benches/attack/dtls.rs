//! Issue 40's coaps probes (built with the `dtls` feature): rows 2, 6 and 9
//! (`dtls_hello_flood`, `dtls_forged_hello`, `dtls_sec1_key`).

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::reflection::common::daemon;
use super::reflection::common::exposition::scrape;
use super::reflection::common::Proc;
use super::{ms, upstream};

#[allow(dead_code)]
#[path = "../../tests/coaps_interop/flood.rs"]
mod flood;

#[allow(dead_code)]
#[path = "../../tests/coaps_interop/hostile.rs"]
mod hostile;

/// The daemon's own default filter (`cli::init_logging`): the DTLS library's warnings about
/// every hello's unknown extensions would otherwise be written once per hello of the flood.
const DEFAULT_LOG: &str = "info,rtc_dtls=error";

/// A scratch directory for this probe's files.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("attack-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `backoffd proxy --listen-dtls` with the PSK client1/secretkey (and `extra`) in front of
/// an upstream that answers 5 bytes; the proxy, its coaps address, and the upstream's stop.
fn coaps_proxy(dir: &std::path::Path, extra: &[&str]) -> (daemon::Proxy, Arc<AtomicBool>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(5, false, stop.clone());
    let key = dir.join("psk.key");
    std::fs::write(&key, "secretkey").unwrap();
    let up = up.to_string();
    let mut args = vec!["--listen-dtls", "127.0.0.1:0", "--upstream", &up];
    let key = key.to_str().unwrap().to_string();
    args.extend_from_slice(&["--psk-identity", "client1", "--psk-key-file", &key]);
    args.extend_from_slice(extra);
    (daemon::proxy(DEFAULT_LOG, &args), stop)
}

/// `coap-client-openssl <args> -B bound -o FILE uri`: the time to an answer, or `None`.
fn libcoap_get(dir: &std::path::Path, args: &[&str], uri: &str, bound: u64) -> Option<Duration> {
    let out = dir.join("answer.txt");
    let _ = std::fs::remove_file(&out);
    let b = bound.to_string();
    let start = Instant::now();
    let mut p = Proc::spawn(
        "coap-client-openssl",
        Command::new("coap-client-openssl").args(args).args([
            "-B",
            &b,
            "-o",
            out.to_str().unwrap(),
            uri,
        ]),
    );
    p.wait_exit(Duration::from_secs(bound + 5));
    let took = start.elapsed();
    let answered = std::fs::read(&out).is_ok_and(|b| !b.is_empty());
    answered.then_some(took)
}

// ---------------------------------------------------------------------------------------------
// Row 2: cookie-verified hellos that never finish

/// 157 addresses x 64 ports of hellos echoing the cookie, then silence, again every 10 s (3
/// rounds); a legitimate PSK client (`coap-client-openssl -k -u`) 1 s into each round.
pub fn hello_flood() -> Vec<(String, String)> {
    let dir = scratch("dtls-hello-flood");
    let (proxy, stop) = coaps_proxy(&dir, &["--metrics", "127.0.0.1:0"]);
    let (coaps, metrics) = (proxy.coaps.unwrap(), proxy.metrics.unwrap());
    let before = proxy.proc.status_kib("VmRSS");
    let peak = Arc::new(AtomicU64::new(before));
    let handshaking_peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, hs, done) = (peak.clone(), handshaking_peak.clone(), done.clone());
        let status = format!("/proc/{}/status", proxy.proc.child.id());
        thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(kib) = vm_rss(&status) {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
                let m = scrape(metrics);
                let now = series(&m, "backoffd_dtls_sessions{phase=\"handshaking\"}") as u64;
                hs.fetch_max(now, Ordering::Relaxed);
                thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let attacker = thread::spawn(move || {
        let mut rounds = Vec::new();
        for round in 0..3 {
            let start = Instant::now();
            rounds.push(hostile::verified_flood(coaps, 157, 64, 10_048));
            if round < 2 {
                thread::sleep(Duration::from_secs(10).saturating_sub(start.elapsed()));
            }
        }
        rounds
    });
    let uri = format!("coaps://{coaps}/");
    let psk = ["-k", "secretkey", "-u", "client1"];
    let mut tries = Vec::new();
    for round in 0..3 {
        let round_start = Instant::now();
        thread::sleep(Duration::from_secs(1));
        tries.push(libcoap_get(&dir, &psk, &uri, 3));
        if round < 2 {
            thread::sleep(Duration::from_secs(10).saturating_sub(round_start.elapsed()));
        }
    }
    let rounds = attacker.join().unwrap();
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let m = scrape(metrics);
    let grown = peak.load(Ordering::Relaxed).saturating_sub(before);
    let handshaking = handshaking_peak.load(Ordering::Relaxed);
    let served = tries
        .iter()
        .filter(|t| t.is_some_and(|t| t < Duration::from_secs(3)));
    let times: Vec<String> = tries
        .iter()
        .map(|t| t.map_or("refused".to_string(), ms))
        .collect();
    let first = rounds[0];
    vec![
        (
            "verified hellos, round 1 of 3".into(),
            format!(
                "{} verified, {} sessions opened ({} datagrams in {:.1} s)",
                first.verified,
                first.opened,
                first.datagrams,
                first.took.as_secs_f64()
            ),
        ),
        ("handshaking sessions, peak".into(), handshaking.to_string()),
        (
            "RSS growth, peak".into(),
            format!("+{:.1} MiB", grown as f64 / 1024.0),
        ),
        (
            "RSS per handshaking session".into(),
            format!("{:.1} KiB", grown as f64 / handshaking.max(1) as f64),
        ),
        (
            "evicted / refused".into(),
            format!(
                "{} / {}",
                [
                    "sessions",
                    "handshakes",
                    "source_sessions",
                    "source_handshakes"
                ]
                .iter()
                .map(|b| series(&m, &format!("backoffd_dtls_evicted_total{{bound=\"{b}\"}}")))
                .sum::<f64>(),
                series(&m, "backoffd_dtls_handshakes_total{outcome=\"refused\"}")
            ),
        ),
        (
            "legitimate PSK client during the floods".into(),
            format!("{} of 3 within 3 s: {}", served.count(), times.join(", ")),
        ),
    ]
}

/// A series of `m`, 0 when the build does not export it (the baseline's families).
fn series(m: &super::reflection::common::exposition::Exposition, name: &str) -> f64 {
    m.samples.get(name).copied().unwrap_or(0.0)
}

fn vm_rss(status: &str) -> Option<u64> {
    let text = std::fs::read_to_string(status).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

// ---------------------------------------------------------------------------------------------
// Row 6: a cookie-less hello from a live session's address and port

/// A session is set up (rtc-dtls's client over its own socket); then a first ClientHello
/// is sent from that same socket, as an off-path forger who knows the address and port
/// would. Whether a HelloVerifyRequest went into the session, and whether it still
/// answers; then, after 11 s without a record from the client, whether a hello gets the
/// cookie exchange (RFC 6347 §4.2.8: a client that lost its state has a way forward).
pub fn forged_hello() -> Vec<(String, String)> {
    let dir = scratch("dtls-forged-hello");
    let (proxy, stop) = coaps_proxy(&dir, &[]);
    let coaps = proxy.coaps.unwrap();
    let mut client = hostile::Client::connect(coaps);
    let up = client.handshake(Duration::from_secs(5));
    let first = client.get(1, "x", Duration::from_secs(3)).is_some();
    client.send_raw(&flood::first_hello());
    let into_session = client.got_verify_request(Duration::from_millis(500));
    let still = client.get(2, "x", Duration::from_secs(3)).is_some();
    thread::sleep(Duration::from_secs(11));
    client.send_raw(&flood::first_hello());
    let after_quiet = client.got_verify_request(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    vec![
        (
            "session up, answered".into(),
            format!("{}, {}", yes(up), yes(first)),
        ),
        (
            "HelloVerifyRequest into the live session".into(),
            yes(into_session),
        ),
        ("the session answers after it".into(), yes(still)),
        (
            "HelloVerifyRequest once the client was quiet 11 s".into(),
            yes(after_quiet),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// Row 9: a SEC1 certificate key

/// `openssl ecparam -genkey` (SEC1, `BEGIN EC PRIVATE KEY`) as `--dtls-key`: whether the
/// proxy starts, and whether `coap-client-openssl` trusting the certificate is answered.
pub fn sec1_key() -> Vec<(String, String)> {
    let dir = scratch("dtls-sec1-key");
    let openssl = |args: &[&str]| {
        Command::new("openssl")
            .current_dir(&dir)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let made = openssl(&[
        "ecparam",
        "-genkey",
        "-name",
        "prime256v1",
        "-noout",
        "-out",
        "sec1.key",
    ]) && openssl(&[
        "req",
        "-new",
        "-x509",
        "-key",
        "sec1.key",
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
        "-days",
        "2",
        "-out",
        "sec1.crt",
    ]);
    assert!(made, "openssl could not make the key");
    let (cert, key) = (dir.join("sec1.crt"), dir.join("sec1.key"));
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(5, false, stop.clone());
    let up = up.to_string();
    let args = [
        "proxy",
        "--listen-dtls",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--dtls-cert",
        cert.to_str().unwrap(),
        "--dtls-key",
        key.to_str().unwrap(),
    ];
    let mut p = daemon::spawn(&args, "info");
    let exited = p.wait_exit(Duration::from_secs(1));
    let verdict = match exited {
        Some(status) => {
            let why = p.stderr().last().cloned().unwrap_or_default();
            vec![
                (
                    "proxy with the SEC1 key".into(),
                    format!("refused ({status}): {why}"),
                ),
                ("coap-client-openssl answered".into(), "no".into()),
            ]
        }
        None => {
            p.kill();
            let proxy = daemon::proxy(DEFAULT_LOG, &args[1..]);
            let coaps = proxy.coaps.unwrap();
            let uri = format!("coaps://{coaps}/");
            let crt = cert.to_str().unwrap();
            let got = libcoap_get(&dir, &["-R", crt], &uri, 5);
            vec![
                ("proxy with the SEC1 key".into(), "starts".into()),
                (
                    "coap-client-openssl answered".into(),
                    got.map_or("no".to_string(), |t| format!("yes, {}", ms(t))),
                ),
            ]
        }
    };
    stop.store(true, Ordering::Relaxed);
    verdict
}
