//! Issue 40's probes of the RFC 8323 listeners (CoAP over TCP and TLS), each printing the
//! figure the issue measured. Built with the `tcp` feature only.
//!
//! | probe | issue 40 row | figure (goal) |
//! |---|---|---|
//! | `stream_non_reader` | 3 | RSS growth from 1, 10 and 40 coap+tcp connections pipelining 17-B cache hits (1,000-B answers) without reading, and 5 s after the 40 close (< 16 MiB; back within 8 MiB) |
//! | `stream_idle_fill` | 4 | 8 addresses x 64 connections that send a CSM (TLS: after the handshake) and nothing more, on the TCP and TLS listeners: a legitimate client's GET (answered within 2 s) |
//! | `stream_bad_csm` | 7 | a CSM with Max-Message-Size 0: what the client gets; half a message after the CSM: when the connection ends |

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use backoffd::coap::option::URI_PATH;
use backoffd::coap::{Code, MessageBuilder, MessageType};
use backoffd::coap_tcp::frame::{self, Framing};
use backoffd::coap_tcp::signal::{self, Settings};

use super::reflection::common::daemon::{self, Proxy};
use super::reflection::common::exposition::scrape;
use super::reflection::common::{tcp_connect_from, Proc};
use super::{ms, upstream};

#[allow(dead_code)]
#[path = "../../tests/coaps_interop/certs.rs"]
mod certs;

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn rss(daemon: &Proc) -> u64 {
    daemon.status_kib("VmRSS:")
}

/// The CPU time the daemon has used (user and system), from /proc/<pid>/stat.
fn cpu(daemon: &Proc) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", daemon.child.id())).unwrap();
    // Fields after the command name (which ends with ')'): utime and stime are the 12th and
    // 13th, in clock ticks (100 per second on Linux).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<u64> = rest.split(' ').map(|f| f.parse().unwrap_or(0)).collect();
    Duration::from_millis((fields[11] + fields[12]) * 10)
}

/// A CSM with `max` as its Max-Message-Size.
fn csm(max: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let settings = Settings {
        max_message_size: max,
        block_wise: false,
    };
    signal::encode_csm(&mut out, Framing::Stream, settings);
    out
}

/// A GET of `/path` with `token`, framed for a stream.
fn get(token: &[u8], path: &str) -> Vec<u8> {
    let mut datagram = Vec::new();
    let mut b = MessageBuilder::new(&mut datagram, MessageType::Con, Code::GET, 0, token);
    b.option(URI_PATH, path.as_bytes());
    b.finish().expect("a valid request");
    let mut out = Vec::new();
    let f = frame::from_datagram(&datagram).expect("a datagram");
    frame::encode(&mut out, Framing::Stream, &f);
    out
}

/// The next frame's code (skipping our CSM and other signals if `answers_only`), or `None`
/// if the connection closed or nothing came within `timeout`.
fn next_code(
    s: &mut impl Read,
    carry: &mut Vec<u8>,
    answers_only: bool,
    timeout: Duration,
) -> Option<Code> {
    let until = Instant::now() + timeout;
    loop {
        while let Ok(Some((f, n))) = frame::decode_stream(carry, 1 << 20) {
            let code = f.code;
            carry.drain(..n);
            if !answers_only || code.class() != 7 {
                return Some(code);
            }
        }
        if Instant::now() >= until {
            return None;
        }
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => carry.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return None,
        }
    }
}

/// `backoffd proxy` with a coap+tcp listener (and the TLS one if `pki` is given), in front
/// of an origin answering 1,000 bytes, with `extra` flags.
fn stream_proxy(pki: Option<&certs::Pki>, extra: &[&str]) -> (Arc<AtomicBool>, Proxy) {
    let stop = Arc::new(AtomicBool::new(false));
    let (up, _) = upstream(1000, false, stop.clone());
    let up = up.to_string();
    let mut args = vec![
        "--listen",
        "127.0.0.1:0",
        "--listen-tcp",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--metrics",
        "127.0.0.1:0",
    ];
    let (cert, key);
    if let Some(pki) = pki {
        (cert, key) = (
            pki.server_cert.display().to_string(),
            pki.server_key.display().to_string(),
        );
        args.extend([
            "--listen-tls",
            "127.0.0.1:0",
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
        ]);
    }
    args.extend_from_slice(extra);
    (stop, daemon::proxy("info", &args))
}

/// A coap+tcp connection that sent its CSM, with a read timeout of `timeout`.
fn tcp_client(addr: SocketAddr, from: Ipv4Addr, timeout: Duration) -> TcpStream {
    let mut s = tcp_connect_from(from, addr);
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    s.write_all(&csm(1152)).unwrap();
    s
}

// ---------------------------------------------------------------------------------------------
// Row 3: clients that pipeline cache hits and never read

/// `n` connections pipelining 17-B GETs of a cached 1,000-B resource for 3 s, never reading;
/// the RSS growth, and the connections (to close later).
fn non_readers(p: &Proxy, n: usize, before: u64) -> (String, Vec<TcpStream>) {
    let tcp = p.tcp.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // 17 bytes: Len/TKL, code, an 8-byte token, Uri-Path "cached".
    let one = get(b"12345678", "cached");
    assert_eq!(one.len(), 17);
    let batch = one.repeat(1024);
    // From two addresses: 32 connections per source prefix at most by default.
    let workers: Vec<_> = (0..n)
        .map(|i| {
            let from = Ipv4Addr::new(127, 0, 0, 2 + (i % 2) as u8);
            let mut s = tcp_client(tcp, from, Duration::from_secs(1));
            s.set_write_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let (stop, batch) = (stop.clone(), batch.clone());
            thread::spawn(move || {
                let mut sent = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    match s.write(&batch) {
                        Ok(k) => sent += k,
                        Err(e)
                            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                        Err(_) => break,
                    }
                }
                (s, sent)
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(1));
    let busy_from = cpu(&p.proc);
    thread::sleep(Duration::from_secs(2));
    let busy = cpu(&p.proc) - busy_from;
    let peak = rss(&p.proc);
    stop.store(true, Ordering::Relaxed);
    let (conns, sent): (Vec<TcpStream>, Vec<usize>) =
        workers.into_iter().map(|w| w.join().unwrap()).unzip();
    let figure = format!(
        "+{} (RSS {}); {} KiB of GETs taken by the kernel; the proxy's CPU in the last 2 s: {}",
        mib(peak.saturating_sub(before)),
        mib(peak),
        sent.iter().sum::<usize>() / 1024,
        ms(busy)
    );
    (figure, conns)
}

pub fn stream_non_reader() -> Vec<(String, String)> {
    let mut rows = Vec::new();
    for n in [1, 10, 40] {
        let (stop, p) = stream_proxy(None, &["--cache-size", "4MiB"]);
        // One reading client fills the cache.
        let mut warm = tcp_client(p.tcp.unwrap(), Ipv4Addr::LOCALHOST, Duration::from_secs(3));
        warm.write_all(&get(b"warm", "cached")).unwrap();
        let answered = next_code(&mut warm, &mut Vec::new(), true, Duration::from_secs(3));
        assert_eq!(answered, Some(Code::CONTENT), "the cache is warmed");
        drop(warm);
        thread::sleep(Duration::from_millis(300));
        let before = rss(&p.proc);
        let (figure, conns) = non_readers(&p, n, before);
        rows.push((
            format!("{n} non-reading connection(s) pipelining cached GETs, after 3 s"),
            figure,
        ));
        if n == 40 {
            let kept = |m: &super::reflection::common::exposition::Exposition| {
                m.samples
                    .get("backoffd_coap_cached_answers")
                    .map_or("-".into(), |v| v.to_string())
            };
            let during = kept(&scrape(p.metrics.unwrap()));
            drop(conns);
            thread::sleep(Duration::from_secs(5));
            let after = rss(&p.proc);
            rows.push((
                "5 s after the 40 closed, from the start".into(),
                format!(
                    "{:+.1} MiB (RSS {})",
                    (after as f64 - before as f64) / 1024.0,
                    mib(after)
                ),
            ));
            let m = scrape(p.metrics.unwrap());
            rows.push((
                "answers kept for retransmission (backoffd_coap_cached_answers): with the 40, 5 s after".into(),
                format!("{during}, {}", kept(&m)),
            ));
            let get = |s: &str| m.samples.get(s).map_or("-".into(), |v| v.to_string());
            rows.push((
                "closed slow_reader / write_stall; output pauses".into(),
                format!(
                    "{} / {}; {}",
                    get("backoffd_coap_stream_closed_total{transport=\"tcp\",reason=\"slow_reader\"}"),
                    get("backoffd_coap_stream_closed_total{transport=\"tcp\",reason=\"write_stall\"}"),
                    get("backoffd_coap_stream_output_pauses_total{transport=\"tcp\"}"),
                ),
            ));
        }
        stop.store(true, Ordering::Relaxed);
    }
    rows
}

// ---------------------------------------------------------------------------------------------
// Row 4: idle connections holding the listeners

/// A TLS client connection from `from` to `addr` that completed its handshake (ALPN coap)
/// and sent a CSM.
fn tls_client(
    addr: SocketAddr,
    from: Ipv4Addr,
    config: &Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Option<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    let s = tcp_connect_from(from, addr);
    s.set_nodelay(true).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").ok()?;
    let conn = rustls::ClientConnection::new(config.clone(), name).ok()?;
    let mut tls = rustls::StreamOwned::new(conn, s);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).ok()?;
    }
    tls.write_all(&csm(1152)).ok()?;
    tls.flush().ok()?;
    Some(tls)
}

/// A legitimate client's GET over `s` (a fresh connection that sent its CSM): the code and
/// how long it took, or what happened instead.
fn legit_get(mut s: impl Read + Write, started: Instant) -> String {
    if s.write_all(&get(b"legit", "r"))
        .and_then(|()| s.flush())
        .is_err()
    {
        return "write failed (closed)".into();
    }
    match next_code(&mut s, &mut Vec::new(), true, Duration::from_secs(5)) {
        Some(code) => format!("{code} after {}", ms(started.elapsed())),
        None => format!("EOF or nothing after {}", ms(started.elapsed())),
    }
}

pub fn stream_idle_fill() -> Vec<(String, String)> {
    let dir = std::env::temp_dir().join(format!("backoffd-attack-stream-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pki = certs::make(&dir);
    let (stop, p) = stream_proxy(Some(&pki), &[]);
    let (tcp, tls) = (p.tcp.unwrap(), p.tls.unwrap());
    let roots: Vec<_> = rustls_pemfile_certs(&pki.ca);
    let config = backoffd::coap_tcp::tls::client_config(&roots).unwrap();
    let before = rss(&p.proc);
    let started = Instant::now();
    let mut held_tcp = Vec::new();
    let mut held_tls = Vec::new();
    for i in 0..8u8 {
        let from = Ipv4Addr::new(127, 0, 0, 2 + i);
        for _ in 0..64 {
            held_tcp.push(tcp_client(tcp, from, Duration::from_millis(50)));
            if let Some(c) = tls_client(tls, from, &config, Duration::from_secs(2)) {
                held_tls.push(c);
            }
        }
    }
    let opening = started.elapsed();
    thread::sleep(Duration::from_millis(500));
    let m = scrape(p.metrics.unwrap());
    let gauge = |t: &str| {
        m.samples
            .get(&format!(
                "backoffd_coap_stream_connections{{transport=\"{t}\",phase=\"open\"}}"
            ))
            .map_or("-".into(), |v| v.to_string())
    };
    let held = format!(
        "tcp {}, tls {} open ({} TLS handshakes done)",
        gauge("tcp"),
        gauge("tls"),
        held_tls.len()
    );
    let t = Instant::now();
    let legit_tcp = legit_get(
        tcp_client(tcp, Ipv4Addr::LOCALHOST, Duration::from_secs(5)),
        t,
    );
    let t = Instant::now();
    let legit_tls = match tls_client(tls, Ipv4Addr::LOCALHOST, &config, Duration::from_secs(5)) {
        Some(c) => legit_get(c, t),
        None => format!("handshake failed after {}", ms(t.elapsed())),
    };
    let m = scrape(p.metrics.unwrap());
    let count = |s: &str| m.samples.get(s).map_or("-".into(), |v| v.to_string());
    let mut rows = vec![
        (
            format!("8 addresses x 64 connections, CSM then nothing, on TCP and TLS (opened in {})", ms(opening)),
            format!("{held}; RSS +{}", mib(rss(&p.proc).saturating_sub(before))),
        ),
        ("a legitimate coap+tcp client's GET".into(), legit_tcp),
        ("a legitimate coaps+tcp client's GET".into(), legit_tls),
        (
            "tcp: evicted idle / refused / refused per source".into(),
            format!(
                "{} / {} / {}",
                count("backoffd_coap_stream_closed_total{transport=\"tcp\",reason=\"evicted_idle\"}"),
                count("backoffd_coap_stream_accepted_total{transport=\"tcp\",outcome=\"refused\"}"),
                count("backoffd_coap_stream_accepted_total{transport=\"tcp\",outcome=\"refused_per_source\"}"),
            ),
        ),
    ];
    drop(held_tcp);
    drop(held_tls);
    stop.store(true, Ordering::Relaxed);
    let _ = std::fs::remove_dir_all(&dir);
    rows.extend(full_listener());
    rows
}

/// 16 addresses x 32 idle connections: the TCP listener full at its 512; a legitimate
/// client's GET.
fn full_listener() -> Vec<(String, String)> {
    let (stop, p) = stream_proxy(None, &[]);
    let tcp = p.tcp.unwrap();
    let held: Vec<TcpStream> = (0..16u8)
        .flat_map(|i| (0..32).map(move |_| Ipv4Addr::new(127, 0, 1, 2 + i)))
        .map(|from| tcp_client(tcp, from, Duration::from_millis(50)))
        .collect();
    thread::sleep(Duration::from_millis(500));
    let m = scrape(p.metrics.unwrap());
    let open = (m.samples)
        .get("backoffd_coap_stream_connections{transport=\"tcp\",phase=\"open\"}")
        .map_or("-".into(), |v| v.to_string());
    let t = Instant::now();
    let legit = legit_get(
        tcp_client(tcp, Ipv4Addr::LOCALHOST, Duration::from_secs(5)),
        t,
    );
    drop(held);
    stop.store(true, Ordering::Relaxed);
    vec![(
        format!(
            "16 addresses x 32 idle connections on TCP ({open} open): a legitimate client's GET"
        ),
        legit,
    )]
}

/// The certificates of a PEM file.
fn rustls_pemfile_certs(path: &std::path::Path) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_file_iter(path)
        .expect("a PEM file")
        .map(|c| c.expect("a certificate"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Row 7: a CSM no answer fits, and half a message

pub fn stream_bad_csm() -> Vec<(String, String)> {
    let (stop, p) = stream_proxy(None, &[]);
    let tcp = p.tcp.unwrap();

    let mut s = tcp_connect_from(Ipv4Addr::LOCALHOST, tcp);
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s.write_all(&csm(0)).unwrap();
    s.write_all(&get(b"zero", "r")).unwrap();
    let started = Instant::now();
    let mut carry = Vec::new();
    let mut seen = Vec::new();
    while let Some(code) = next_code(&mut s, &mut carry, false, Duration::from_secs(3)) {
        seen.push(code.to_string());
    }
    let zero = format!(
        "{} then {} after {}",
        seen.join(", "),
        closed_or_open(&mut s),
        ms(started.elapsed())
    );

    let mut s = tcp_connect_from(Ipv4Addr::LOCALHOST, tcp);
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s.write_all(&csm(1152)).unwrap();
    let half = get(b"half", "a-resource-name");
    s.write_all(&half[..half.len() / 2]).unwrap();
    let started = Instant::now();
    let mut carry = Vec::new();
    let mut seen = Vec::new();
    // Within 20 s (the old bound was the 300 s keepalive plus 10 s).
    let until = started + Duration::from_secs(20);
    while Instant::now() < until {
        match next_code(&mut s, &mut carry, false, Duration::from_millis(500)) {
            Some(code) => seen.push(code.to_string()),
            None if is_closed(&mut s) => break,
            None => {}
        }
    }
    let partial = format!(
        "{} then {} after {}",
        seen.join(", "),
        closed_or_open(&mut s),
        ms(started.elapsed())
    );
    let m = scrape(p.metrics.unwrap());
    let count = |r: &str| {
        m.samples
            .get(&format!(
                "backoffd_coap_stream_closed_total{{transport=\"tcp\",reason=\"{r}\"}}"
            ))
            .map_or("-".into(), |v| v.to_string())
    };
    stop.store(true, Ordering::Relaxed);
    vec![
        (
            "a CSM with Max-Message-Size 0, then a GET: frames received (7.01 CSM, 7.05 Abort)"
                .into(),
            zero,
        ),
        (
            "half a GET after the CSM, then silence (20 s watched)".into(),
            partial,
        ),
        (
            "closed bad_csm / message_timeout".into(),
            format!("{} / {}", count("bad_csm"), count("message_timeout")),
        ),
    ]
}

/// Whether the proxy closed `s` (what it still sent is read and dropped).
fn is_closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    s.set_nonblocking(true).unwrap();
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    s.set_nonblocking(false).unwrap();
    closed
}

fn closed_or_open(s: &mut TcpStream) -> &'static str {
    match is_closed(s) {
        true => "closed",
        false => "still open",
    }
}
