//! The scenario of issue 40, row 5, shared by the test (tests/observe_share.rs) and the attack
//! benchmark's `observe_share` probe: an origin that notifies, a raw coap+tcp client bound to a
//! chosen loopback address, and [`run`]. Its includer provides `common` (tests/common).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use backoffd::coap::option::{encode_uint, OBSERVE, URI_PATH};
use backoffd::coap::{Code, Message, MessageBuilder, MessageType};
use backoffd::coap_tcp::frame::{self, Framing};
use backoffd::coap_tcp::signal::{self, Settings};

use super::common::{self, daemon};

/// Connections from the first address, and registrations on each.
pub const CONNECTIONS: usize = 4;
pub const PER_CONNECTION: usize = 256;

/// What one run saw.
#[derive(Debug)]
pub struct Outcome {
    /// Of the first address's 1,024 registrations, those answered with Observe.
    pub first_address_registered: usize,
    /// The second client's registration was answered with Observe.
    pub second_registered: bool,
    /// A notification reached the second client (within 3 s).
    pub second_notified: bool,
}

/// An origin on 127.0.0.1 until `stop`: every GET gets a piggybacked 2.05, with Observe 1 if
/// it registers; the registrations of `/news` are notified every 200 ms (NON, Observe 2, 3,
/// ...). Nothing else is remembered, so the 1,024 of `/obs` cost it nothing.
fn origin(stop: Arc<AtomicBool>) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let addr = socket.local_addr().unwrap();
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut news: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        let (mut seq, mut mid, mut next) = (2u32, 1u16, Instant::now());
        while !stop.load(Ordering::Relaxed) {
            if let Ok((n, from)) = socket.recv_from(&mut buf) {
                if let Ok(m) = Message::parse(&buf[..n]) {
                    let registers = m.option(OBSERVE).is_some_and(|v| v.is_empty());
                    if m.msg_type() == MessageType::Con && m.code() == Code::GET {
                        let observe = registers.then_some(1);
                        let answer = content(MessageType::Ack, m.message_id(), m.token(), observe);
                        let _ = socket.send_to(&answer, from);
                        let path = m.option(URI_PATH).unwrap_or_default();
                        if registers && path == b"news" {
                            news.push((from, m.token().to_vec()));
                        }
                    }
                }
            }
            if Instant::now() >= next {
                for (to, token) in &news {
                    mid = mid.wrapping_add(1);
                    let n = content(MessageType::Non, mid, token, Some(seq));
                    let _ = socket.send_to(&n, *to);
                }
                (seq, next) = (seq + 1, Instant::now() + Duration::from_millis(200));
            }
        }
    });
    addr
}

/// A 2.05 with a short payload, and Observe `observe` if given.
fn content(ty: MessageType, mid: u16, token: &[u8], observe: Option<u32>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, Code::CONTENT, mid, token);
    if let Some(seq) = observe {
        b.option(OBSERVE, &encode_uint(seq));
    }
    b.payload(b"state");
    b.finish().unwrap();
    out
}

/// A coap+tcp client (RFC 8323) from `from`: frames in and out, a CSM first.
struct Client {
    stream: TcpStream,
    input: Vec<u8>,
}

impl Client {
    fn connect(from: Ipv4Addr, to: SocketAddr) -> Client {
        let mut stream = common::tcp_connect_from(from, to);
        stream.set_nodelay(true).unwrap();
        let mut csm = Vec::new();
        signal::encode_csm(&mut csm, Framing::Stream, Settings::default());
        stream.write_all(&csm).unwrap();
        Client {
            stream,
            input: Vec::new(),
        }
    }

    /// Registers `token` for `/path` (GET with Observe 0).
    fn register(&mut self, token: &[u8], path: &str) {
        let mut datagram = Vec::new();
        let mut b = MessageBuilder::new(&mut datagram, MessageType::Con, Code::GET, 0, token);
        b.option(OBSERVE, &[]);
        b.option(URI_PATH, path.as_bytes());
        b.finish().unwrap();
        let mut out = Vec::new();
        frame::encode(
            &mut out,
            Framing::Stream,
            &frame::from_datagram(&datagram).unwrap(),
        );
        self.stream.write_all(&out).unwrap();
    }

    /// The next answer (not a signal) within `timeout`: its token and whether it carries
    /// Observe.
    fn answer(&mut self, timeout: Duration) -> Option<(Vec<u8>, bool)> {
        let until = Instant::now() + timeout;
        loop {
            if let Some((f, n)) = frame::decode_stream(&self.input, 1 << 20).expect("framing") {
                let mut datagram = Vec::new();
                f.to_datagram(&mut datagram, MessageType::Ack, 0);
                let (signal, token) = (f.code.class() == 7, f.token.to_vec());
                self.input.drain(..n);
                if signal {
                    continue;
                }
                let observe = Message::parse(&datagram).unwrap().option(OBSERVE).is_some();
                return Some((token, observe));
            }
            let left = until.checked_duration_since(Instant::now())?;
            let left = left.max(Duration::from_millis(1));
            self.stream.set_read_timeout(Some(left)).unwrap();
            let mut buf = [0u8; 16384];
            match self.stream.read(&mut buf) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.input.extend_from_slice(&buf[..n]),
            }
        }
    }
}

/// The scenario at default flags (those of `extra` aside); see the module docs.
pub fn run(extra: &[&str]) -> Outcome {
    let stop = Arc::new(AtomicBool::new(false));
    let up = origin(Arc::clone(&stop)).to_string();
    let mut args = vec!["--listen", "127.0.0.1:0", "--listen-tcp", "127.0.0.1:0"];
    args.extend(["--upstream", &up]);
    args.extend_from_slice(extra);
    let mut proxy = daemon::proxy("info", &args);
    let tcp = proxy.tcp.expect("a coap+tcp listener");
    let mut first: Vec<Client> = (0..CONNECTIONS)
        .map(|_| Client::connect(Ipv4Addr::new(127, 0, 0, 2), tcp))
        .collect();
    for (c, client) in first.iter_mut().enumerate() {
        for i in 0..PER_CONNECTION {
            client.register(&[c as u8, (i >> 8) as u8, i as u8], "obs");
        }
    }
    let mut first_address_registered = 0;
    for client in &mut first {
        for _ in 0..PER_CONNECTION {
            let (_, observe) = client.answer(Duration::from_secs(5)).expect("an answer");
            first_address_registered += usize::from(observe);
        }
    }
    let mut second = Client::connect(Ipv4Addr::new(127, 0, 0, 3), tcp);
    second.register(b"second", "news");
    let (token, second_registered) = second.answer(Duration::from_secs(5)).expect("an answer");
    assert_eq!(token, b"second");
    let second_notified = second_registered
        && second
            .answer(Duration::from_secs(3))
            .is_some_and(|(token, observe)| token == b"second" && observe);
    stop.store(true, Ordering::Relaxed);
    proxy.proc.kill();
    Outcome {
        first_address_registered,
        second_registered,
        second_notified,
    }
}
