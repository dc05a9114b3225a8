//! Issue 40's rows on the RFC 8323 listeners, against the real binary: a client that never
//! reads (row 3), idle connections that fill the listener (row 4), a CSM no answer fits in
//! and half a message left hanging (row 7). Raw clients and the scripted Rust origin of
//! tests/common/upstream.rs, so that each test is quick and bounded.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::*;
use common::upstream::{Rule, Script, Upstream};

/// An origin answering 1,000 bytes (cacheable: Max-Age 60 by default), silent on `/silent`.
fn origin() -> Upstream {
    Script::new()
        .payload(&[b'x'; 1000])
        .on_path("silent", Rule::Silent)
        .start()
}

fn raw_from(from: Ipv4Addr, to: SocketAddr) -> RawClient {
    let stream = common::tcp_connect_from(from, to);
    stream.set_nodelay(true).unwrap();
    RawClient {
        stream,
        input: Vec::new(),
    }
}

/// A CSM announcing `max` as Max-Message-Size.
fn csm(max: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let settings = Settings {
        max_message_size: max,
        block_wise: false,
    };
    signal::encode_csm(&mut out, Framing::Stream, settings);
    out
}

/// A GET of `/path` with `token`, framed.
fn get_frame(token: &[u8], path: &str) -> Vec<u8> {
    let mut datagram = Vec::new();
    let mut b = MessageBuilder::new(&mut datagram, MessageType::Con, Code::GET, 0, token);
    b.option(backoffd::coap::option::URI_PATH, path.as_bytes());
    b.finish().unwrap();
    let mut out = Vec::new();
    frame::encode(
        &mut out,
        Framing::Stream,
        &frame::from_datagram(&datagram).unwrap(),
    );
    out
}

fn sample(metrics: SocketAddr, series: &str) -> f64 {
    scrape(metrics).get(&format!("backoffd_coap_stream_{series}"))
}

fn rss_kib(p: &Proxy) -> u64 {
    p.proc.status_kib("VmRSS:")
}

/// Whether the proxy closed the client's connection within `timeout` (what it sent before
/// is read and dropped).
fn closed_within(c: &mut RawClient, timeout: Duration) -> bool {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if c.next(Duration::from_millis(100)).is_none() && is_eof(c) {
            return true;
        }
    }
    false
}

fn is_eof(c: &mut RawClient) -> bool {
    c.stream.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 1024];
    let eof = loop {
        match c.stream.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => c.input.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    c.stream.set_nonblocking(false).unwrap();
    eof
}

/// Row 3. 40 connections (from two addresses) pipeline 17-byte GETs of a cached 1,000-byte resource and never
/// read: reading pauses at 64 KiB of answers per connection, so the proxy grows by less than
/// 16 MiB (it was 630 MiB), a reading client is served meanwhile, and 5 s after the 40
/// close the RSS is back within 8 MiB of where it was (it stayed).
#[test]
fn clients_that_never_read_hold_little_and_give_it_back() {
    let up = origin();
    let (p, tcp) = tcp_proxy(up.addr.port(), &["--cache-size", "4MiB"]);
    let mut warm = RawClient::connect(tcp);
    warm.send_csm();
    warm.get(b"warm", "cached");
    assert_eq!(warm.answer(T20).map(|a| a.code), Some(Code::CONTENT));
    std::thread::sleep(Duration::from_millis(200));
    let start = rss_kib(&p);

    let stop = Arc::new(AtomicBool::new(false));
    let batch = get_frame(b"12345678", "cached").repeat(1024);
    assert_eq!(batch.len(), 17 * 1024);
    // From two addresses: 32 connections per source prefix at most by default.
    let writers: Vec<_> = (0..40)
        .map(|i| {
            let mut c = raw_from(Ipv4Addr::new(127, 0, 0, 2 + i % 2), tcp);
            c.send_csm();
            c.stream
                .set_write_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let (stop, batch) = (stop.clone(), batch.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Err(e) = c.stream.write(&batch) {
                        if !matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) {
                            break;
                        }
                    }
                }
                c
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    warm.get(b"later", "cached");
    let served = warm.answer(Duration::from_secs(2)).map(|a| a.code);
    let grown = rss_kib(&p).saturating_sub(start);
    stop.store(true, Ordering::Relaxed);
    let conns: Vec<RawClient> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    assert_eq!(served, Some(Code::CONTENT), "a reading client is served");
    assert!(
        grown < 16 * 1024,
        "RSS grew {grown} KiB with 40 non-readers"
    );
    assert!(sample(p.metrics.unwrap(), "output_pauses_total{transport=\"tcp\"}") >= 40.0);

    drop(conns);
    std::thread::sleep(Duration::from_secs(5));
    let after = rss_kib(&p);
    assert!(
        after < start + 8 * 1024,
        "RSS {after} KiB 5 s after they closed, {start} KiB before"
    );
}

/// Row 4, at the defaults. 8 addresses x 64 connections that send a CSM and then nothing:
/// each address keeps at most 32 (the 33rd closes that address's idle one quiet longest),
/// and a client from elsewhere is served within 2 s (it got EOF until the keepalive).
#[test]
fn idle_connections_from_eight_addresses_do_not_lock_a_client_out() {
    let up = origin();
    let (p, tcp) = tcp_proxy(up.addr.port(), &[]);
    let metrics = p.metrics.unwrap();
    let mut idle = Vec::new();
    for i in 0..8 {
        for _ in 0..64 {
            let mut c = raw_from(Ipv4Addr::new(127, 0, 0, 2 + i), tcp);
            c.send_csm();
            idle.push(c);
        }
    }
    let open = || {
        sample(metrics, "connections{transport=\"tcp\",phase=\"open\"}")
            + sample(
                metrics,
                "connections{transport=\"tcp\",phase=\"awaiting_csm\"}",
            )
    };
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(open(), 256.0, "32 per address");
    let evicted = sample(
        metrics,
        "closed_total{transport=\"tcp\",reason=\"evicted_idle\"}",
    ) + sample(
        metrics,
        "closed_total{transport=\"tcp\",reason=\"evicted\"}",
    );
    assert_eq!(evicted, 256.0);

    let started = Instant::now();
    let mut client = RawClient::connect(tcp);
    client.send_csm();
    client.get(b"legit", "r");
    let answer = client.answer(Duration::from_secs(2)).map(|a| a.code);
    assert_eq!(answer, Some(Code::CONTENT), "after {:?}", started.elapsed());
    drop(idle);
}

/// Row 4, at the total cap (`--tcp-max-connections 8`): a newcomer closes an idle connection
/// of the source holding the most, quiet longest, never a busy one (a request in flight);
/// with every connection busy it is refused.
#[test]
fn at_the_total_cap_an_idle_connection_of_the_heaviest_source_makes_room() {
    let up = origin();
    let (p, tcp) = tcp_proxy(up.addr.port(), &["--tcp-max-connections", "8"]);
    let metrics = p.metrics.unwrap();
    let open = || sample(metrics, "connections{transport=\"tcp\",phase=\"open\"}");
    let connect = |last: u8| {
        let mut c = raw_from(Ipv4Addr::new(127, 0, 0, last), tcp);
        c.send_csm();
        assert_eq!(c.next(T20).map(|m| m.code), Some(signal::CSM));
        c
    };
    // A lone client, quiet longest; then four idle ones from .3, three busy ones from .4.
    let mut lone = connect(2);
    std::thread::sleep(Duration::from_millis(50));
    let mut crowd: Vec<RawClient> = (0..4).map(|_| connect(3)).collect();
    let mut busy: Vec<RawClient> = (0..3).map(|_| connect(4)).collect();
    for c in &mut busy {
        c.get(b"slow", "silent");
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(open(), 8.0);

    let mut newcomer = connect(5);
    newcomer.get(b"n1", "r");
    assert_eq!(newcomer.answer(T20).map(|a| a.code), Some(Code::CONTENT));
    assert!(closed_within(&mut crowd[0], T20), "the crowd's first went");
    for c in crowd[1..].iter_mut().chain(&mut busy).chain([&mut lone]) {
        assert!(!closed_within(c, Duration::from_millis(100)), "kept");
    }
    assert_eq!(
        sample(
            metrics,
            "closed_total{transport=\"tcp\",reason=\"evicted_idle\"}"
        ),
        1.0
    );

    // Every connection busy: the next one is refused.
    for c in crowd[1..].iter_mut().chain([&mut lone, &mut newcomer]) {
        c.get(b"slow", "silent");
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut refused = raw_from(Ipv4Addr::new(127, 0, 0, 6), tcp);
    assert!(closed_within(&mut refused, Duration::from_secs(5)));
    assert_eq!(
        sample(
            metrics,
            "accepted_total{transport=\"tcp\",outcome=\"refused\"}"
        ),
        1.0
    );
}

/// Row 7. A CSM whose Max-Message-Size no answer fits in (0) gets an Abort naming
/// Max-Message-Size and the connection closes (every answer was dropped, the connection kept).
#[test]
fn a_csm_no_answer_fits_in_gets_an_abort_naming_it() {
    let up = origin();
    let (p, tcp) = tcp_proxy(up.addr.port(), &[]);
    let mut c = RawClient::connect(tcp);
    c.stream.write_all(&csm(0)).unwrap();
    c.get(b"t", "r");
    assert_eq!(c.next(T20).map(|m| m.code), Some(signal::CSM));
    let abort = c.next(T20).expect("an Abort");
    assert_eq!(abort.code, signal::ABORT);
    let why = String::from_utf8_lossy(&abort.payload()).into_owned();
    assert!(why.contains("Max-Message-Size"), "{why}");
    assert!(c.next(Duration::from_secs(5)).is_none(), "then the close");
    let metrics = p.metrics.unwrap();
    assert_eq!(
        sample(
            metrics,
            "closed_total{transport=\"tcp\",reason=\"bad_csm\"}"
        ),
        1.0
    );
}

/// Row 7. Half a message after the CSM, then nothing: an Abort at `--tcp-message-timeout`
/// (1 s here; 10 s by default), not at the 300 s keepalive.
#[test]
fn half_a_message_is_aborted_at_the_message_deadline() {
    let up = origin();
    let (p, tcp) = tcp_proxy(up.addr.port(), &["--tcp-message-timeout", "1s"]);
    let mut c = RawClient::connect(tcp);
    c.send_csm();
    let half = get_frame(b"half", "a-resource-name");
    c.stream.write_all(&half[..half.len() / 2]).unwrap();
    let started = Instant::now();
    assert_eq!(c.next(T20).map(|m| m.code), Some(signal::CSM));
    let abort = c.next(Duration::from_secs(5)).expect("an Abort");
    assert_eq!(abort.code, signal::ABORT);
    assert!(c.next(Duration::from_secs(5)).is_none(), "then the close");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let metrics = p.metrics.unwrap();
    assert_eq!(
        sample(
            metrics,
            "closed_total{transport=\"tcp\",reason=\"message_timeout\"}"
        ),
        1.0
    );
}
