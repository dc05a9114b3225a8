//! The real `backoffd` binary's metrics endpoint (`--metrics`), over loopback TCP, while the
//! proxy it reports on serves CoAP over loopback UDP.

mod common;

use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use backoffd::coap::option::URI_PATH;
use backoffd::coap::{Code, Message, MessageBuilder, MessageType};
use common::exposition::Exposition;
use common::http::{self, closed_by_server, connect, exchange, get, read_answers};
use common::upstream::{Rule, Script, Upstream};
use common::{daemon, Proc};

/// A CoAP server on a thread that answers requests with a piggybacked 2.05 "hello", except
/// that it ignores the first copy of a request to `flaky`, so the proxy must retransmit (and a
/// reactor timer must fire).
fn test_upstream() -> Upstream {
    Script::new()
        .payload(b"hello")
        .on_path("flaky", Rule::DropFirstCopy)
        .start()
}

/// A proxy with a metrics endpoint: (its upstream, daemon, CoAP address, metrics address).
fn proxy_with_metrics() -> (Upstream, Proc, SocketAddr, SocketAddr) {
    let upstream = test_upstream();
    let flags = ["--timeout", "30ms", "--jitter", "0"];
    let (daemon, coap, metrics) = common::daemon::proxy_with_metrics(upstream.addr, &flags);
    (upstream, daemon, coap, metrics)
}

/// Sends one confirmable GET of `path` through the proxy and returns the answer's code.
fn coap_get(proxy: SocketAddr, mid: u16, path: &str) -> Code {
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let token = mid.to_be_bytes();
    let mut b = MessageBuilder::new(&mut out, MessageType::Con, Code::GET, mid, &token);
    b.option(URI_PATH, path.as_bytes());
    b.finish().unwrap();
    c.send_to(&out, proxy).unwrap();
    let mut buf = [0u8; 2048];
    let n = c.recv(&mut buf).expect("an answer from the proxy");
    Message::parse(&buf[..n]).unwrap().code()
}

fn scrape(metrics: SocketAddr) -> Exposition {
    let answer = get(metrics, "/metrics");
    assert_eq!(answer.status, 200);
    let ct = answer.field("Content-Type").unwrap();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    Exposition::parse(&answer.body)
}

#[test]
fn metrics_count_the_coap_requests_sent_through_the_proxy() {
    let (_upstream, _daemon, coap, metrics) = proxy_with_metrics();
    const SENT: u16 = 5;
    for mid in 1..SENT {
        assert_eq!(coap_get(coap, mid, "hello"), Code::CONTENT);
    }
    assert_eq!(coap_get(coap, SENT, "flaky"), Code::CONTENT);
    let doc = scrape(metrics);
    assert_eq!(doc.get("backoffd_coap_requests_total"), f64::from(SENT));
    assert_eq!(
        doc.get("backoffd_coap_answers_total{code=\"2.xx\"}"),
        f64::from(SENT)
    );
    assert_eq!(doc.get("backoffd_coap_upstream_retransmissions_total"), 1.0);
    let fired = doc.get("backoffd_timer_lateness_seconds_count");
    assert!(fired > 0.0, "the retransmission timer fired");
    assert_eq!(doc.types["backoffd_timer_lateness_seconds"], "histogram");
    assert!(doc.has_family_prefix("backoffd_http_requests_total"));
    // The scrape itself is counted once it has been answered.
    let again = scrape(metrics);
    assert!(again.get("backoffd_http_requests_total{code=\"200\"}") >= 1.0);
}

#[test]
fn healthz_answers_ok() {
    let (_upstream, _daemon, _, metrics) = proxy_with_metrics();
    let answer = get(metrics, "/healthz");
    assert_eq!((answer.status, answer.body.as_str()), (200, "ok\n"));
}

#[test]
fn head_gets_the_fields_without_the_body() {
    let (_upstream, _daemon, _, metrics) = proxy_with_metrics();
    let mut s = connect(metrics);
    s.write_all(
        b"HEAD /metrics HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .unwrap();
    let answers = read_answers(&mut s, &[true, false]);
    assert_eq!(answers[0].status, 200);
    assert!(
        answers[0]
            .field("Content-Length")
            .unwrap()
            .parse::<usize>()
            .unwrap()
            > 0
    );
    assert_eq!(
        answers[1].body, "ok\n",
        "nothing of a body between the two answers"
    );
}

#[test]
fn two_pipelined_requests_on_one_connection_are_answered_in_order() {
    let (_upstream, _daemon, _, metrics) = proxy_with_metrics();
    let mut s = connect(metrics);
    s.write_all(
        b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\nGET /metrics HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .unwrap();
    let answers = read_answers(&mut s, &[false, false]);
    assert_eq!(answers[0].body, "ok\n");
    Exposition::parse(&answers[1].body);
    // Still open: a third request on the same connection is answered too.
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let last = read_answers(&mut s, &[false]);
    assert_eq!(last[0].field("Connection"), Some("close"));
    assert!(closed_by_server(&mut s));
}

#[test]
fn bad_request_gets_400_and_close() {
    let (_upstream, _daemon, _, metrics) = proxy_with_metrics();
    let mut s = connect(metrics);
    s.write_all(b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n")
        .unwrap();
    let answer = read_answers(&mut s, &[false]).remove(0);
    assert_eq!(answer.status, 400);
    assert!(closed_by_server(&mut s));
}

#[test]
fn oversized_head_gets_431() {
    let (_upstream, _daemon, _, metrics) = proxy_with_metrics();
    let head = format!(
        "GET /metrics HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let answer = exchange(metrics, head.as_bytes());
    assert_eq!(answer.status, 431);
}

#[test]
fn post_to_metrics_gets_405_with_allow() {
    let (_upstream, _daemon, _, metrics) = proxy_with_metrics();
    let answer = exchange(
        metrics,
        b"POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(answer.status, 405);
    assert_eq!(answer.field("Allow"), Some("GET, HEAD"));
}

#[test]
fn unknown_path_gets_404() {
    let (_upstream, _daemon, _, metrics) = proxy_with_metrics();
    assert_eq!(get(metrics, "/nope").status, 404);
}

#[test]
fn refusals_are_counted_by_code() {
    let (_upstream, _daemon, _, metrics) = proxy_with_metrics();
    let mut s = connect(metrics);
    s.write_all(b"BROKEN\r\n\r\n").unwrap();
    assert_eq!(read_answers(&mut s, &[false])[0].status, 400);
    assert!(closed_by_server(&mut s));
    let doc = scrape(metrics);
    assert_eq!(doc.get("backoffd_http_requests_total{code=\"400\"}"), 1.0);
}

#[test]
fn the_proxy_keeps_serving_coap_while_http_clients_stall() {
    let (_upstream, _daemon, coap, metrics) = proxy_with_metrics();
    // A slowloris head, an idle keep-alive connection and an unread pipeline stay open...
    let mut slow = connect(metrics);
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHo").unwrap();
    let mut idle = connect(metrics);
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut unread = connect(metrics);
    unread
        .write_all(&b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n".repeat(64))
        .unwrap();
    // ...while CoAP and other scrapes are answered.
    for mid in 1..=3 {
        assert_eq!(coap_get(coap, mid, "hello"), Code::CONTENT);
    }
    assert_eq!(read_answers(&mut idle, &[false])[0].body, "ok\n");
    let doc = scrape(metrics);
    assert_eq!(doc.get("backoffd_coap_requests_total"), 3.0);
    assert!(doc.get("backoffd_http_connections_open") >= 4.0);
}

#[test]
fn sigterm_with_open_metrics_connections_exits_zero() {
    let (_upstream, mut daemon, _, metrics) = proxy_with_metrics();
    let mut idle = connect(metrics);
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    read_answers(&mut idle, &[false]);
    assert_eq!(daemon.terminate_code(), Some(0));
    assert!(closed_by_server(&mut idle));
}

#[test]
fn metrics_flag_must_be_an_address() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_backoffd"))
        .args([
            "proxy",
            "--upstream",
            "127.0.0.1:5683",
            "--metrics",
            "nowhere",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--metrics"));
}

#[test]
fn reconnect_server_exposes_its_families() {
    let [control, retry] = common::free_wildcard_ports();
    let (control_arg, retry_arg) = (
        format!("--control_port={control}"),
        format!("--retry_port={retry}"),
    );
    let args = [
        "reconnect-server",
        &control_arg,
        &retry_arg,
        "--metrics",
        "127.0.0.1:0",
    ];
    let (_daemon, metrics) = daemon::start(&args, "metrics listening on ");
    drop(std::net::TcpStream::connect(("127.0.0.1", control)).unwrap());
    let mut doc = scrape(metrics);
    for _ in 0..50 {
        if doc.get("backoffd_reconnect_control_connections_total") >= 1.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        doc = scrape(metrics);
    }
    assert_eq!(doc.get("backoffd_reconnect_control_connections_total"), 1.0);
    for family in [
        "backoffd_reconnect_starts_total",
        "backoffd_reconnect_verdicts_total",
    ] {
        assert!(doc.types.contains_key(family), "{family}");
    }
    assert!(doc.get("backoffd_timer_wheel_timers") >= 0.0);
    let _ = http::get(metrics, "/healthz");
}
