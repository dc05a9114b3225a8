//! The real `backoffd proxy` binary over loopback UDP, against a small test upstream.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use backoffd::coap::option::{MAX_AGE, URI_PATH};
use backoffd::coap::{empty_ack, Code, Message, MessageBuilder, MessageType};
use common::upstream::{Rule, Script, Upstream};
use common::{daemon, Proc};

/// A CoAP server on a thread that counts requests and answers by their first Uri-Path
/// segment: `slow` with an empty ACK and, 300 ms later, a separate CON 2.05 "late"; `silent`
/// not at all; anything else with a piggybacked 2.05 "hello".
fn test_upstream() -> Upstream {
    let late = Rule::Separate {
        after: Duration::from_millis(300),
        payload: b"late".to_vec(),
    };
    Script::new()
        .payload(b"hello")
        .on_path("slow", late)
        .on_path("silent", Rule::Silent)
        .start()
}

/// `backoffd proxy` at debug level in front of `upstream`, seeded; it and its CoAP address.
fn proxy(upstream: SocketAddr, extra: &[&str]) -> (Proc, SocketAddr) {
    let up = upstream.to_string();
    let args = ["--listen", "127.0.0.1:0", "--upstream", &up, "--seed", "7"];
    let p = daemon::proxy("debug", &[&args, extra].concat());
    (p.proc, p.coap)
}

fn client() -> UdpSocket {
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

fn request(ty: MessageType, code: Code, mid: u16, token: &[u8], path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, code, mid, token);
    b.option(URI_PATH, path.as_bytes());
    b.finish().unwrap();
    out
}

fn recv(c: &UdpSocket) -> Vec<u8> {
    let mut buf = [0u8; 2048];
    let n = c.recv(&mut buf).expect("answer from proxy");
    buf[..n].to_vec()
}

#[test]
fn fast_upstream_answer_is_piggybacked_with_the_clients_mid_and_token() {
    let upstream = test_upstream();
    let up = upstream.addr;
    let (_daemon, addr) = proxy(up, &[]);
    let c = client();
    c.send_to(
        &request(MessageType::Con, Code::GET, 0x1234, b"tok1", "hello"),
        addr,
    )
    .unwrap();
    let bytes = recv(&c);
    let m = Message::parse(&bytes).unwrap();
    assert_eq!(m.msg_type(), MessageType::Ack);
    assert_eq!(m.message_id(), 0x1234);
    assert_eq!(m.token(), b"tok1");
    assert_eq!(m.code(), Code::CONTENT);
    assert_eq!(m.payload(), b"hello");
}

#[test]
fn slow_upstream_gets_empty_ack_then_separate_con_answer() {
    let upstream = test_upstream();
    let up = upstream.addr;
    let (_daemon, addr) = proxy(up, &["--ack-delay", "50ms"]);
    let c = client();
    c.send_to(
        &request(MessageType::Con, Code::GET, 0x2222, b"s", "slow"),
        addr,
    )
    .unwrap();
    let ack = recv(&c);
    let ack = Message::parse(&ack).unwrap();
    assert_eq!(
        (ack.msg_type(), ack.code(), ack.message_id()),
        (MessageType::Ack, Code::EMPTY, 0x2222)
    );
    let answer = recv(&c);
    let answer = Message::parse(&answer).unwrap();
    assert_eq!(answer.msg_type(), MessageType::Con);
    assert_eq!(answer.token(), b"s");
    assert_eq!(answer.payload(), b"late");
    let mut out = Vec::new();
    empty_ack(&mut out, answer.message_id());
    c.send_to(&out, addr).unwrap();
}

#[test]
fn client_retransmissions_are_not_forwarded_again() {
    let upstream = test_upstream();
    let up = upstream.addr;
    let (_daemon, addr) = proxy(up, &[]);
    let c = client();
    let req = request(MessageType::Con, Code::POST, 0x3333, b"dup", "hello");
    for _ in 0..5 {
        c.send_to(&req, addr).unwrap();
        let m = recv(&c);
        assert_eq!(Message::parse(&m).unwrap().payload(), b"hello");
    }
    assert_eq!(upstream.requests(), 1);
}

#[test]
fn silent_upstream_gets_exactly_the_configured_attempts_then_5_04() {
    let upstream = test_upstream();
    let up = upstream.addr;
    let (_daemon, addr) = proxy(
        up,
        &[
            "--timeout",
            "30ms",
            "--max-retries",
            "2",
            "--backoff-factor",
            "1",
            "--jitter",
            "0",
            "--total-timeout",
            "5s",
            "--ack-delay",
            "2s",
        ],
    );
    let c = client();
    c.send_to(
        &request(MessageType::Con, Code::GET, 0x4444, b"t", "silent"),
        addr,
    )
    .unwrap();
    let m = recv(&c);
    let m = Message::parse(&m).unwrap();
    assert_eq!(m.code(), Code::GATEWAY_TIMEOUT);
    assert_eq!(m.message_id(), 0x4444);
    assert_eq!(upstream.requests(), 3, "first send + 2 retries");
}

#[test]
fn max_retries_zero_sends_once() {
    let upstream = test_upstream();
    let up = upstream.addr;
    let (_daemon, addr) = proxy(
        up,
        &[
            "--timeout",
            "30ms",
            "--max-retries",
            "0",
            "--non-idempotent-max-retries",
            "0",
        ],
    );
    let c = client();
    c.send_to(
        &request(MessageType::Non, Code::POST, 0x5555, b"n", "silent"),
        addr,
    )
    .unwrap();
    let m = recv(&c);
    let m = Message::parse(&m).unwrap();
    assert_eq!(
        (m.msg_type(), m.code()),
        (MessageType::Non, Code::GATEWAY_TIMEOUT)
    );
    assert_eq!(upstream.requests(), 1);
}

#[test]
fn unreachable_upstream_answers_5_02() {
    // Bind and drop a socket so the port is (almost certainly) closed: ICMP port unreachable.
    let closed = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (_daemon, addr) = proxy(closed, &["--timeout", "5s"]);
    let c = client();
    c.send_to(
        &request(MessageType::Con, Code::GET, 0x6666, b"u", "x"),
        addr,
    )
    .unwrap();
    let m = recv(&c);
    assert_eq!(Message::parse(&m).unwrap().code(), Code::BAD_GATEWAY);
}

#[test]
fn over_max_inflight_answers_5_03_with_max_age() {
    let upstream = test_upstream();
    let up = upstream.addr;
    let (_daemon, addr) = proxy(up, &["--max-inflight", "1", "--ack-delay", "10s"]);
    let c = client();
    c.send_to(
        &request(MessageType::Con, Code::GET, 1, b"a", "silent"),
        addr,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    c.send_to(
        &request(MessageType::Con, Code::GET, 2, b"b", "silent"),
        addr,
    )
    .unwrap();
    let m = recv(&c);
    let m = Message::parse(&m).unwrap();
    assert_eq!((m.message_id(), m.code()), (2, Code::SERVICE_UNAVAILABLE));
    assert!(m.option(MAX_AGE).is_some());
}

#[test]
fn malformed_con_gets_rst_and_the_proxy_keeps_serving() {
    let upstream = test_upstream();
    let up = upstream.addr;
    let (_daemon, addr) = proxy(up, &[]);
    let c = client();
    // Version 1, CON, TKL 9 (reserved): a format error.
    c.send_to(&[0x49, 0x01, 0x77, 0x77], addr).unwrap();
    let m = recv(&c);
    let m = Message::parse(&m).unwrap();
    assert_eq!((m.msg_type(), m.message_id()), (MessageType::Rst, 0x7777));
    c.send_to(&request(MessageType::Con, Code::GET, 9, b"", "hello"), addr)
        .unwrap();
    assert_eq!(Message::parse(&recv(&c)).unwrap().code(), Code::CONTENT);
}

#[test]
fn sigterm_exits_zero() {
    let upstream = test_upstream();
    let up = upstream.addr;
    let (mut daemon, _) = proxy(up, &[]);
    assert_eq!(daemon.terminate_code(), Some(0));
}

#[test]
fn invalid_configuration_exits_2_naming_the_flag() {
    for (args, flag) in [
        (
            &["proxy", "--upstream", "127.0.0.1:5684", "--jitter", "1.5"][..],
            "--jitter",
        ),
        (
            &[
                "proxy",
                "--upstream",
                "127.0.0.1:5684",
                "--backoff-factor",
                "0.5",
            ][..],
            "--backoff-factor",
        ),
        (
            &["proxy", "--upstream", "127.0.0.1:5684", "--timeout", "2"][..],
            "--timeout",
        ),
        (&["proxy"][..], "--upstream"),
        (&["proxy", "--forward"][..], "--allow"),
        (
            &["proxy", "--upstream", "127.0.0.1:5684", "--preset", "moon"][..],
            "--preset",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_backoffd"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(flag) && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
}
