//! CoAP over TCP, TLS and WebSockets (RFC 8323, issue 29): the real `backoffd proxy
//! --listen-tcp` (and `--listen-tls`, `--listen-ws`) between
//! independently written clients and a UDP origin.
//!
//! Clients: Debian's libcoap 4.3.1 (`coap-client-notls` with `coap+tcp://` URIs,
//! `coap-client-openssl` with `coaps+tcp://`) and aiocoap 0.4.17 (its `tcpclient` and `ws`
//! transports), installed by tests/interop/setup.sh, and a raw client
//! written here on `backoffd::coap_tcp`'s framing for what the others cannot show (the first
//! bytes on the wire, a connection that never sends its CSM). Origins: the aiocoap server of
//! tests/interop/aiocoap_server.py over UDP, a UDP origin written here that drops the
//! first datagram, and libcoap's `coap-server-notls` over TCP (`--upstream coap+tcp://`) and
//! `coap-server-openssl` over TLS (`--upstream coaps+tcp://`).
//!
//! | test                                                      | peers                   |
//! |-----------------------------------------------------------|-------------------------|
//! | libcoap_get_post_4kib_and_observe                          | libcoap notls, aiocoap server |
//! | aiocoap_get_post_4kib_and_observe                          | aiocoap tcp, aiocoap server   |
//! | the_first_message_on_a_connection_is_the_proxys_csm       | raw                     |
//! | a_tcp_request_is_retransmitted_to_a_udp_origin_that_...   | raw, dropping origin    |
//! | connections_without_a_csm_are_closed_and_clients_served   | raw x200, libcoap notls |
//! | at_the_caps_a_connection_without_a_csm_makes_room         | raw, libcoap notls      |
//! | libcoap_over_tls_get_post_4kib_and_observe                | libcoap openssl (`-R` our CA) |
//! | a_client_trusting_another_ca_gets_nothing                 | libcoap openssl         |
//! | tls_alone_opens_no_plain_port                              | libcoap notls, openssl  |
//! | aiocoap_over_websockets_get_post_4kib_and_observe         | aiocoap ws              |
//! | aiocoap_over_websockets_over_tls_on_the_tls_port          | aiocoap ws (coaps+ws), curl |
//! | a_websocket_handshake_not_for_coap_is_refused             | raw HTTP                |
//! | udp_and_tcp_clients_reach_libcoap_over_tcp                | libcoap notls both ends |
//! | a_gone_tcp_origin_gets_5_02_and_is_reconnected            | libcoap notls both ends |
//! | udp_clients_reach_libcoap_over_tls_and_a_wrong_ca_gets_5_02 | libcoap notls, openssl server |
//!
//! Issue 40's bounds (`bounds.rs`), with raw clients and the scripted Rust origin: clients
//! that never read, idle connections filling the listener, a CSM no answer fits in, half a
//! message left hanging.

#![cfg(feature = "tcp")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use backoffd::coap::{Code, Message, MessageBuilder, MessageType};
use backoffd::coap_tcp::frame::{self, Framing};
use backoffd::coap_tcp::signal::{self, Settings};

mod common;
mod peers;

#[path = "coap_tcp_interop/bounds.rs"]
mod bounds;
#[allow(dead_code)]
#[path = "coaps_interop/certs.rs"]
mod certs;
#[path = "coap_tcp_interop/hostile.rs"]
mod hostile;
#[path = "coap_tcp_interop/tls_ws.rs"]
mod tls_ws;
#[path = "coap_tcp_interop/upstream.rs"]
mod upstream;

use common::exposition::scrape;
use peers::*;

const T20: Duration = Duration::from_secs(20);

/// `backoffd proxy --listen 127.0.0.1:0 --listen-tcp 127.0.0.1:0 --upstream 127.0.0.1:PORT
/// --metrics 127.0.0.1:0 <args>`; the daemon and its TCP address.
fn tcp_proxy(upstream: u16, args: &[&str]) -> (Proxy, SocketAddr) {
    let upstream = format!("127.0.0.1:{upstream}");
    let mut argv = vec![
        "--listen",
        "127.0.0.1:0",
        "--listen-tcp",
        "127.0.0.1:0",
        "--upstream",
        &upstream,
        "--metrics",
        "127.0.0.1:0",
    ];
    argv.extend_from_slice(args);
    let p = daemon::proxy("debug", &argv);
    let tcp = p.tcp.expect("a coap+tcp listener");
    (p, tcp)
}

/// GET, POST read back byte for byte, a 4 KiB block-wise GET (sha256 checked) and an
/// Observe of 3 notifications or more, from libcoap's client over TCP.
#[test]
fn libcoap_get_post_4kib_and_observe() {
    let dir = scratch("coap-tcp-libcoap");
    let (_origin, port) = aiocoap_server();
    let (_proxy, tcp) = tcp_proxy(port, &[]);
    let run = |args: &[&str]| coap_client_ok(&[&["-B", "10"], args].concat(), T20);
    libcoap_get_post_4kib_and_observe_at(&format!("coap+tcp://{tcp}"), &dir, run);
}

/// GET, POST read back byte for byte, a 4 KiB block-wise GET (sha256 checked) and an
/// Observe of 3 notifications or more, from a libcoap client that `run` runs with the
/// arguments given (a URI last) at `base` (`coap+tcp://ADDR`, `coaps+tcp://ADDR`).
pub fn libcoap_get_post_4kib_and_observe_at(base: &str, dir: &Path, run: impl Fn(&[&str]) -> Proc) {
    let uri = |path: &str| format!("{base}/{path}");
    let hello = dir.join("hello.txt");
    run(&["-o", hello.to_str().unwrap(), &uri("hello")]);
    assert!(
        text(&hello).contains("hello"),
        "GET gave {:?}",
        text(&hello)
    );

    let sent = dir.join("post.bin");
    let body: Vec<u8> = (0..=255u8).rev().chain(0..=255).collect();
    std::fs::write(&sent, &body).unwrap();
    run(&["-m", "post", "-f", sent.to_str().unwrap(), &uri("upload")]);
    let back = dir.join("back.bin");
    run(&["-o", back.to_str().unwrap(), &uri("upload")]);
    assert_eq!(std::fs::read(&back).unwrap(), body, "POST then GET");

    let big = dir.join("big.bin");
    run(&["-o", big.to_str().unwrap(), &uri("big")]);
    let want = dir.join("want.bin");
    std::fs::write(&want, big_body()).unwrap();
    assert_eq!(sha256(&big), sha256(&want), "4 KiB GET");

    // -w: a newline after each payload.
    let observed = run(&["-s", "3", "-w", &uri("clock")]);
    let values: Vec<u64> = (observed.stdout().iter())
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(
        values.len() >= 3,
        "Observe gave {values:?}\n{}",
        observed.dump()
    );
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
}

/// The same from aiocoap's client over TCP.
#[test]
fn aiocoap_get_post_4kib_and_observe() {
    let (_origin, port) = aiocoap_server();
    let (_proxy, tcp) = tcp_proxy(port, &[]);
    let dir = scratch("coap-tcp-aiocoap");
    aiocoap_get_post_4kib_and_observe_at(&format!("coap+tcp://{tcp}"), &dir, &[]);
}

/// GET, POST read back byte for byte, a 4 KiB block-wise GET (sha256 checked) and an
/// Observe of 3 notifications or more, from aiocoap's client at `base` (`coap+tcp://ADDR`,
/// `coap+ws://ADDR`, `coaps+ws://ADDR`), scratch files under `dir`, with `env` set (a CA
/// to trust in `SSL_CERT_FILE`).
pub fn aiocoap_get_post_4kib_and_observe_at(base: &str, dir: &Path, env: &[(&str, &str)]) {
    let uri = |path: &str| format!("{base}/{path}");
    let run = |args: &[&str]| aiocoap_client_with_env(args, T20, env);

    let hello = run(&["request", "GET", &uri("hello")]);
    assert!(
        hello.stdout_text().contains("TEXT hello"),
        "{}",
        hello.dump()
    );

    let sent = dir.join("post.bin");
    let body: Vec<u8> = (0..=255u8).chain((0..=255).rev()).collect();
    std::fs::write(&sent, &body).unwrap();
    let post = run(&[
        "request",
        "POST",
        &uri("upload"),
        "--in",
        sent.to_str().unwrap(),
    ]);
    assert!(post.stdout_text().contains("CODE 2.04"), "{}", post.dump());
    let back = dir.join("back.bin");
    run(&[
        "request",
        "GET",
        &uri("upload"),
        "--out",
        back.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read(&back).unwrap(), body, "POST then GET");

    let big = dir.join("big.bin");
    run(&[
        "request",
        "GET",
        &uri("big"),
        "--out",
        big.to_str().unwrap(),
    ]);
    let want = dir.join("want.bin");
    std::fs::write(&want, big_body()).unwrap();
    assert_eq!(sha256(&big), sha256(&want), "4 KiB GET");

    let observed = run(&["observe", &uri("clock"), "--count", "3"]);
    let values: Vec<u64> = (observed.stdout().iter())
        .filter_map(|l| l.strip_prefix("NOTIFY ")?.trim().parse().ok())
        .collect();
    assert!(values.len() >= 3, "Observe: {}", observed.dump());
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
}

/// A raw RFC 8323 client: whole frames in and out.
pub struct RawClient {
    stream: TcpStream,
    input: Vec<u8>,
}

/// A frame as read: code, token, and the options and payload as a datagram would carry them.
pub struct Received {
    pub code: Code,
    pub token: Vec<u8>,
    pub datagram: Vec<u8>,
}

impl Received {
    pub fn payload(&self) -> Vec<u8> {
        Message::parse(&self.datagram).unwrap().payload().to_vec()
    }
}

impl RawClient {
    pub fn connect(addr: SocketAddr) -> RawClient {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        RawClient {
            stream,
            input: Vec::new(),
        }
    }

    pub fn send_csm(&mut self) {
        let mut out = Vec::new();
        signal::encode_csm(&mut out, Framing::Stream, Settings::default());
        self.stream.write_all(&out).unwrap();
    }

    /// A GET of `/path` with `token`.
    pub fn get(&mut self, token: &[u8], path: &str) {
        let mut datagram = Vec::new();
        let mut b = MessageBuilder::new(&mut datagram, MessageType::Con, Code::GET, 0, token);
        b.option(backoffd::coap::option::URI_PATH, path.as_bytes());
        b.finish().unwrap();
        let mut out = Vec::new();
        let f = frame::from_datagram(&datagram).unwrap();
        frame::encode(&mut out, Framing::Stream, &f);
        self.stream.write_all(&out).unwrap();
    }

    /// The next frame within `timeout`; `None` if the connection closed or nothing came.
    pub fn next(&mut self, timeout: Duration) -> Option<Received> {
        let until = Instant::now() + timeout;
        loop {
            if let Some((f, n)) = frame::decode_stream(&self.input, 1 << 20).expect("framing") {
                let mut datagram = Vec::new();
                f.to_datagram(&mut datagram, MessageType::Ack, 0);
                let read = Received {
                    code: f.code,
                    token: f.token.to_vec(),
                    datagram,
                };
                self.input.drain(..n);
                return Some(read);
            }
            let left = until.checked_duration_since(Instant::now())?;
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            let mut buf = [0u8; 4096];
            match self.stream.read(&mut buf) {
                Ok(0) => return None,
                Ok(n) => self.input.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return None,
                Err(_) => return None,
            }
        }
    }

    /// The next frame that is not a signal.
    pub fn answer(&mut self, timeout: Duration) -> Option<Received> {
        let until = Instant::now() + timeout;
        loop {
            let left = until.checked_duration_since(Instant::now())?;
            let read = self.next(left)?;
            if read.code.class() != 7 {
                return Some(read);
            }
        }
    }
}

/// The first bytes the listener writes are its CSM (RFC 8323 §5.3), before the client has
/// sent anything, announcing a Max-Message-Size of at least the default 1152.
#[test]
fn the_first_message_on_a_connection_is_the_proxys_csm() {
    let (_origin, port) = aiocoap_server();
    let (_proxy, tcp) = tcp_proxy(port, &[]);
    let mut client = RawClient::connect(tcp);
    let first = client
        .next(Duration::from_secs(5))
        .expect("a first message");
    assert_eq!(first.code, signal::CSM, "the first message is a CSM");
    let f = frame::Frame {
        code: first.code,
        token: &first.token,
        body: &first.datagram[4 + first.token.len()..],
    };
    let (read, _) = signal::parse(&f, Settings::default()).unwrap();
    let signal::Signal::Csm(settings) = read else {
        panic!("not a CSM: {read:?}");
    };
    assert!(settings.max_message_size >= 1152, "{settings:?}");
    // Then the connection serves.
    client.send_csm();
    client.get(b"t1", "hello");
    let answer = client.answer(T20).expect("an answer");
    assert_eq!(answer.code, Code::CONTENT);
    assert_eq!(answer.token, b"t1");
    assert!(String::from_utf8_lossy(&answer.payload()).contains("hello"));
}

/// A datagram, and when it came.
type Arrival = (Instant, Vec<u8>);

/// A UDP origin that drops the first datagram and answers the second (piggybacked 2.05
/// "late"); it reports both datagrams and when they came.
fn dropping_origin() -> (u16, std::thread::JoinHandle<Vec<Arrival>>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let thread = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 2048];
        while seen.len() < 2 {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                break;
            };
            seen.push((Instant::now(), buf[..n].to_vec()));
            if seen.len() == 2 {
                let request = Message::parse(&buf[..n]).unwrap();
                let mut answer = Vec::new();
                let mut b = MessageBuilder::new(
                    &mut answer,
                    MessageType::Ack,
                    Code::CONTENT,
                    request.message_id(),
                    request.token(),
                );
                b.payload(b"late");
                b.finish().unwrap();
                socket.send_to(&answer, from).unwrap();
            }
        }
        seen
    });
    (port, thread)
}

/// A TCP client's request to a UDP origin that drops the first datagram, through a proxy
/// with `--timeout 200ms`: the proxy retransmits (the reliable leg does not, the UDP leg
/// does), the same Message ID and token about 200 ms later, and the client gets the answer.
#[test]
fn a_tcp_request_is_retransmitted_to_a_udp_origin_that_drops_the_first_datagram() {
    let (port, origin) = dropping_origin();
    let (_proxy, tcp) = tcp_proxy(port, &["--timeout", "200ms"]);
    let mut client = RawClient::connect(tcp);
    client.send_csm();
    client.get(b"tok", "flaky");
    let answer = client
        .answer(T20)
        .expect("the answer, from the retransmission");
    assert_eq!(answer.code, Code::CONTENT);
    assert_eq!(answer.token, b"tok");
    assert_eq!(answer.payload(), b"late");
    let seen = origin.join().unwrap();
    assert_eq!(seen.len(), 2, "the origin saw the request twice");
    let (first, second) = (
        Message::parse(&seen[0].1).unwrap(),
        Message::parse(&seen[1].1).unwrap(),
    );
    assert_eq!(first.msg_type(), MessageType::Con);
    assert_eq!(first.message_id(), second.message_id(), "same Message ID");
    assert_eq!(first.token(), second.token(), "same token");
    assert_eq!(seen[0].1, seen[1].1, "the same datagram");
    let gap = seen[1].0 - seen[0].0;
    // --timeout 200ms with the default jitter of 0.1: 180 to 220 ms, plus scheduling.
    assert!(
        gap >= Duration::from_millis(170) && gap < Duration::from_millis(1000),
        "retransmitted after {gap:?}"
    );
}
