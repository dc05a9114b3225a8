//! The HTTP cross-proxy against peers that hold what it has without using it, through real
//! sockets on loopback and the release binary with its defaults: connection slots held by
//! connections that send nothing or dribble a head (the client that sends a whole request
//! must still be served), and request bodies pipelined to a silent upstream (memory must stay
//! within the body budget). Timeouts here are liveness bounds only; what is asserted is how
//! many answers came and how much memory grew.
#![cfg(feature = "http")]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{daemon, Proc};

/// `--http-max-connections`' default: the figure is about the product's defaults.
const CAP: usize = 128;
const LEGIT: usize = 20;
/// `--http-max-body`'s default.
const BODY: usize = 256 << 10;

/// `backoffd proxy` with the cross-proxy on loopback and `extra` flags; its HTTP address.
fn proxy(extra: &[&str]) -> (Proc, SocketAddr) {
    let args = ["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"];
    let p = daemon::proxy("info", &[&args, extra].concat());
    (p.proc, p.http.expect("an HTTP listener"))
}

/// A connection that holds a slot: silent, or sending a head a byte at a time.
struct Holder {
    stream: TcpStream,
    dribbles: bool,
    sent: usize,
}

impl Holder {
    fn open(http: SocketAddr, dribbles: bool) -> Option<Holder> {
        let stream = TcpStream::connect(http).ok()?;
        stream.set_nonblocking(true).ok()?;
        Some(Holder {
            stream,
            dribbles,
            sent: 0,
        })
    }

    /// One step of holding on; false once the server closed it.
    fn hold(&mut self) -> bool {
        const HEAD: &[u8] = b"GET /hc/coap://127.0.0.2:9/slow HTTP/1.1\r\nHost: x\r\nX-Pad: ";
        let mut buf = [0u8; 512];
        match self.stream.read(&mut buf) {
            Ok(_) => return false,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return false,
        }
        if self.dribbles {
            let byte = HEAD.get(self.sent).copied().unwrap_or(b'a');
            self.sent += 1;
            return self.stream.write(&[byte]).is_ok();
        }
        true
    }
}

/// Keeps `CAP` slot holders open, reopening each as soon as the server closes it, until
/// `stop`; returns how many times it reopened one.
fn hold_every_slot(http: SocketAddr, stop: Arc<AtomicBool>) -> thread::JoinHandle<usize> {
    thread::spawn(move || {
        let mut holders: Vec<Option<Holder>> =
            (0..CAP).map(|i| Holder::open(http, i % 2 == 0)).collect();
        let mut reopened = 0;
        while !stop.load(Ordering::Relaxed) {
            for (i, slot) in holders.iter_mut().enumerate() {
                if !slot.as_mut().is_some_and(Holder::hold) {
                    *slot = Holder::open(http, i % 2 == 0);
                    reopened += 1;
                }
            }
            thread::sleep(Duration::from_millis(200));
        }
        reopened
    })
}

/// One whole GET on a new connection; its status, if an answer came within the bound.
fn legit_get(http: SocketAddr) -> Option<u16> {
    let mut s = TcpStream::connect(http).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    s.write_all(b"GET /hc/coap://127.0.0.2:9/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

#[test]
fn whole_requests_get_slots_while_every_slot_is_held_by_silent_or_dribbling_peers() {
    let (daemon, http) = proxy(&["--forward", "--allow", "127.0.0.1:9"]);
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = hold_every_slot(http, stop.clone());
    // Let the holders take every slot before the clients come.
    thread::sleep(Duration::from_secs(1));
    let answered: Vec<Option<u16>> = (0..LEGIT)
        .map(|_| {
            thread::sleep(Duration::from_millis(300));
            legit_get(http)
        })
        .collect();
    stop.store(true, Ordering::Relaxed);
    let reopened = attacker.join().unwrap();
    let served = answered.iter().filter(|a| **a == Some(403)).count();
    eprintln!(
        "{served}/{LEGIT} whole GETs answered (403, not allowed) while {CAP} connections held \
         the slots; the holders were closed and reopened {reopened} times; answers: {answered:?}"
    );
    assert!(served * 10 >= LEGIT * 9, "{served}/{LEGIT} served");
    drop(daemon);
}

/// Pipelines `count` POSTs with `BODY`-byte bodies on one connection, then reads what comes
/// back until the server closes or the bound passes; the answers' heads.
fn pipeline_posts(http: SocketAddr, count: usize) -> String {
    let Ok(mut s) = TcpStream::connect(http) else {
        return String::new();
    };
    let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let head = format!("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: {BODY}\r\n\r\n");
    let body = vec![b'b'; BODY];
    for _ in 0..count {
        if s.write_all(head.as_bytes()).is_err() || s.write_all(&body).is_err() {
            break;
        }
    }
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn pipelined_bodies_to_a_silent_upstream_stay_within_the_body_budget() {
    const CONNS: usize = 120;
    const POSTS: usize = 5;
    const BOUND_KIB: u64 = 32 << 10;
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let upstream = silent.local_addr().unwrap().to_string();
    let (daemon, http) = proxy(&["--upstream", &upstream]);
    // One request through first, so that what the first one allocates is in the baseline.
    let warm = pipeline_posts(http, 0);
    assert!(warm.is_empty());
    let before = daemon.status_kib("VmRSS:");
    let clients: Vec<_> = (0..CONNS)
        .map(|_| thread::spawn(move || pipeline_posts(http, POSTS)))
        .collect();
    let answers: Vec<String> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let peak = daemon.status_kib("VmHWM:");
    let now = daemon.status_kib("VmRSS:");
    let refused: Vec<&String> = answers
        .iter()
        .filter(|a| a.contains("HTTP/1.1 503 "))
        .collect();
    let with_retry_after = refused
        .iter()
        .filter(|a| a.contains("\r\nRetry-After: 1\r\n"))
        .count();
    let growth = peak.saturating_sub(before);
    eprintln!(
        "{CONNS} connections x {POSTS} POSTs of {BODY} bytes: {} refused with 503 \
         ({with_retry_after} with Retry-After); RSS {before} KiB before, peak {peak} KiB \
         (+{growth} KiB), {now} KiB after",
        refused.len()
    );
    assert!(!refused.is_empty(), "no 503 at all");
    assert_eq!(
        with_retry_after,
        refused.len(),
        "every 503 says when to retry"
    );
    assert!(growth < BOUND_KIB, "RSS grew {growth} KiB");
    drop(daemon);
}

#[test]
fn a_bad_http_max_inflight_bytes_exits_2_naming_the_flag() {
    for (value, why) in [
        ("0", "more than 0"),
        ("100KiB", "less than --http-max-body"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_backoffd"))
            .args([
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
            ])
            .args([
                "--http-listen",
                "127.0.0.1:0",
                "--http-max-inflight-bytes",
                value,
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("--http-max-inflight-bytes") && stderr.contains(why),
            "{stderr}"
        );
    }
}
