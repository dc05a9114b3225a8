//! Connections that ask for nothing: they must not lock out clients that ask, and they must
//! not stay.

use super::*;

fn raw_from(from: std::net::Ipv4Addr, to: SocketAddr) -> RawClient {
    RawClient {
        stream: common::tcp_connect_from(from, to),
        input: Vec::new(),
    }
}

fn gauge(metrics: SocketAddr, phase: &str) -> f64 {
    scrape(metrics).get(&format!(
        "backoffd_coap_stream_connections{{transport=\"tcp\",phase=\"{phase}\"}}"
    ))
}

fn counter(metrics: SocketAddr, family: &str, label: &str, value: &str) -> f64 {
    scrape(metrics).get(&format!(
        "backoffd_coap_stream_{family}_total{{transport=\"tcp\",{label}=\"{value}\"}}"
    ))
}

/// Waits until `check` holds, for at most `timeout`.
fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let until = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < until, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A GET /hello from libcoap's client over TCP gets the origin's text.
fn libcoap_is_served(tcp: SocketAddr) {
    let got = coap_client_ok(&["-B", "10", &format!("coap+tcp://{tcp}/hello")], T20);
    assert!(got.stdout_text().contains("hello"), "{}", got.dump());
}

/// 200 connections from eight addresses that never send a CSM, all open at once: a client
/// is served beside them, and each of them gets an Abort and is closed at the CSM deadline
/// (10 s by default, the bound the README documents; the is 30 s).
#[test]
fn connections_without_a_csm_are_closed_and_clients_served() {
    let (_origin, port) = aiocoap_server();
    let (proxy, tcp) = tcp_proxy(port, &[]);
    let metrics = proxy.metrics.unwrap();
    let opened = Instant::now();
    let mut idle: Vec<RawClient> = (0..200)
        .map(|i| raw_from(std::net::Ipv4Addr::new(127, 0, 0, 2 + i % 8), tcp))
        .collect();
    for c in &mut idle {
        let first = c.next(T20).expect("the proxy's CSM");
        assert_eq!(first.code, signal::CSM);
    }
    assert_eq!(gauge(metrics, "awaiting_csm"), 200.0);

    libcoap_is_served(tcp);
    assert_eq!(
        gauge(metrics, "awaiting_csm"),
        200.0,
        "none was closed for it"
    );

    for c in &mut idle {
        let abort = c
            .next(Duration::from_secs(30))
            .expect("an Abort before the close");
        assert_eq!(abort.code, Code::new(7, 5), "Abort (RFC 8323 §5.6)");
        assert!(c.next(Duration::from_secs(5)).is_none(), "then the close");
    }
    let took = opened.elapsed();
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(30),
        "closed after {took:?}"
    );
    eventually("the metrics count them", T20, || {
        counter(metrics, "closed", "reason", "no_csm") == 200.0
    });
    assert_eq!(gauge(metrics, "awaiting_csm"), 0.0);
}

/// At the per-source cap (32 by default) a new connection from that address closes the
/// oldest one of it that has sent no CSM; at the total cap (`--tcp-max-connections`) any
/// such one goes. (Idle connections that did send one make room too, and busy ones never:
/// `bounds.rs`.)
#[test]
fn at_the_caps_a_connection_without_a_csm_makes_room() {
    let (_origin, port) = aiocoap_server();
    let (proxy, tcp) = tcp_proxy(port, &["--tcp-max-connections", "64"]);
    let metrics = proxy.metrics.unwrap();
    let crowd = std::net::Ipv4Addr::new(127, 0, 0, 9);
    let mut idle: Vec<RawClient> = (0..32).map(|_| raw_from(crowd, tcp)).collect();
    eventually("32 connections", T20, || {
        gauge(metrics, "awaiting_csm") == 32.0
    });
    // A 33rd from the same address, which sends its CSM and asks: served.
    let mut asker = raw_from(crowd, tcp);
    asker.send_csm();
    asker.get(b"a1", "hello");
    let answer = asker.answer(T20).expect("served at the per-source cap");
    assert_eq!(answer.code, Code::CONTENT);
    let mut oldest = idle.remove(0);
    assert_eq!(oldest.next(T20).map(|m| m.code), Some(signal::CSM));
    assert!(oldest.next(T20).is_none(), "the oldest one was closed");
    assert_eq!(counter(metrics, "closed", "reason", "evicted"), 1.0);

    // 32 open connections (CSM sent) from elsewhere fill the total cap of 64 ...
    let open: Vec<RawClient> = (0..32)
        .map(|_| {
            let mut c = raw_from(std::net::Ipv4Addr::new(127, 0, 0, 10), tcp);
            c.send_csm();
            c
        })
        .collect();
    eventually("64 connections", T20, || {
        gauge(metrics, "open") + gauge(metrics, "awaiting_csm") == 64.0
    });
    // ... and libcoap, from a third address, is served: one without a CSM made room.
    libcoap_is_served(tcp);
    assert!(counter(metrics, "closed", "reason", "evicted") >= 2.0);
    assert_eq!(counter(metrics, "closed", "reason", "evicted_idle"), 0.0);
    drop(asker);
    drop(open);
    drop(idle);
}
