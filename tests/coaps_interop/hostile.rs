//! What a hostile peer does to a coaps listener (issue 40), shared by tests/coaps_interop.rs
//! and the attack benchmark (benches/attack/dtls.rs):
//! - [`verified_flood`]: ClientHellos that echo the cookie, from many loopback addresses and
//!   ports, then silence: sessions a peer with addresses but no key can open (row 2);
//! - [`Client`]: an rtc-dtls PSK client over its own socket, which can also send raw
//!   datagrams from that socket: a cookie-less hello from a live session's address and
//!   port, as an off-path forger would (row 6).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rtc_dtls::cipher_suite::CipherSuiteId;
use rtc_dtls::config::ConfigBuilder;
use rtc_dtls::crypto_provider::default_provider;
use rtc_dtls::endpoint::{Endpoint, EndpointEvent};

use super::flood::first_hello;

/// What a verified flood did.
#[derive(Debug, Clone, Copy, Default)]
pub struct VerifiedFlood {
    /// Datagrams sent: the first hellos, the hellos with our cookie and their repeats.
    pub datagrams: usize,
    /// HelloVerifyRequests received, each answered with a hello echoing its cookie.
    pub verified: usize,
    /// Sources whose hello with the cookie was answered with a ServerHello: a session
    /// opened for them, as far as they can tell.
    pub opened: usize,
    /// From the first datagram to the last.
    pub took: Duration,
}

/// Where one of the flood's sockets is.
enum Step {
    WaitingForCookie,
    /// The hello with the cookie went out (repeated while unanswered: the listener's
    /// socket drops what it cannot read in time, as a client's retransmission would).
    Verified(Vec<u8>),
    Opened,
}

/// From `ips` addresses 127.0.1.1 on, `ports` sockets each: a first ClientHello, then the
/// same hello with the cookie of our HelloVerifyRequest (RFC 6347 §4.2.1), repeated every
/// 300 ms until a ServerHello shows that a session was opened, then silence. In rounds of
/// at most `batch` sockets (the descriptor limit), each given 3 s.
pub fn verified_flood(target: SocketAddr, ips: u8, ports: usize, batch: usize) -> VerifiedFlood {
    let hello = first_hello();
    let mut flood = VerifiedFlood::default();
    let start = Instant::now();
    let sources: Vec<Ipv4Addr> = (1..=ips).map(|i| Ipv4Addr::new(127, 0, 1, i)).collect();
    let all: Vec<Ipv4Addr> = (0..ports).flat_map(|_| sources.iter().copied()).collect();
    for round in all.chunks(batch) {
        let sockets: Vec<UdpSocket> = round
            .iter()
            .filter_map(|ip| UdpSocket::bind((*ip, 0)).ok())
            .collect();
        for s in &sockets {
            s.set_nonblocking(true).unwrap();
            if s.send_to(&hello, target).is_ok() {
                flood.datagrams += 1;
            }
        }
        let mut steps: Vec<Step> = sockets.iter().map(|_| Step::WaitingForCookie).collect();
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut repeat_at = Instant::now() + Duration::from_millis(300);
        let mut buf = [0u8; 2048];
        while Instant::now() < deadline && steps.iter().any(|s| !matches!(s, Step::Opened)) {
            for (s, step) in sockets.iter().zip(steps.iter_mut()) {
                while let Ok(n) = s.recv(&mut buf) {
                    let kind = (n > 13 && buf[0] == 22).then_some(buf[13]);
                    match (kind, &step) {
                        (Some(3), Step::WaitingForCookie) if n > 28 => {
                            let second = with_cookie(&hello, &buf[28..n]);
                            if s.send_to(&second, target).is_ok() {
                                flood.datagrams += 1;
                            }
                            flood.verified += 1;
                            *step = Step::Verified(second);
                        }
                        (Some(2), Step::Verified(_)) => {
                            flood.opened += 1;
                            *step = Step::Opened;
                        }
                        _ => {}
                    }
                }
            }
            if Instant::now() >= repeat_at {
                repeat_at = Instant::now() + Duration::from_millis(300);
                for (s, step) in sockets.iter().zip(&steps) {
                    let again = match step {
                        Step::WaitingForCookie => &hello,
                        Step::Verified(second) => second,
                        Step::Opened => continue,
                    };
                    if s.send_to(again, target).is_ok() {
                        flood.datagrams += 1;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    flood.took = start.elapsed();
    flood
}

/// `first` (a first ClientHello in record 0) as the client sends it again with `cookie`:
/// record 1, message_seq 1, the cookie in its place and the lengths grown.
pub fn with_cookie(first: &[u8], cookie: &[u8]) -> Vec<u8> {
    const BODY: usize = 13 + 12;
    let session_len = usize::from(first[BODY + 34]);
    let at = BODY + 35 + session_len;
    let mut out = first[..at].to_vec();
    out.push(cookie.len() as u8);
    out.extend_from_slice(cookie);
    out.extend_from_slice(&first[at + 1..]);
    let grow = |field: &mut [u8], by: usize, width: usize| {
        let mut n = 0usize;
        for b in field.iter().take(width) {
            n = (n << 8) | usize::from(*b);
        }
        let bytes = (n + by).to_be_bytes();
        field[..width].copy_from_slice(&bytes[bytes.len() - width..]);
    };
    out[10] = 1; // record sequence number 1
    grow(&mut out[11..13], cookie.len(), 2); // record length
    grow(&mut out[14..17], cookie.len(), 3); // handshake length
    out[18] = 1; // message_seq 1
    grow(&mut out[22..25], cookie.len(), 3); // fragment length
    out
}

/// An rtc-dtls PSK client (identity client1, `secretkey`) over its own socket.
pub struct Client {
    pub socket: UdpSocket,
    endpoint: Endpoint,
    server: SocketAddr,
}

impl Client {
    /// A client on 127.0.0.1 that starts its handshake with `server`.
    pub fn connect(server: SocketAddr) -> Client {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        let config = ConfigBuilder::default()
            .with_psk(Some(Arc::new(|_: &[u8]| Ok(b"secretkey".to_vec()))))
            .with_psk_identity_hint(Some(b"client1".to_vec()))
            .with_cipher_suites(vec![CipherSuiteId::Tls_Psk_With_Aes_128_Ccm_8])
            .with_crypto_provider(default_provider().unwrap())
            .build(true, None)
            .unwrap();
        let local = socket.local_addr().unwrap();
        let mut endpoint = Endpoint::new(local, rtc_shared::TransportProtocol::UDP, None);
        endpoint
            .connect(Instant::now(), server, Arc::new(config), None)
            .unwrap();
        Client {
            socket,
            endpoint,
            server,
        }
    }

    /// Moves datagrams both ways for `within`: whether the handshake completed, the
    /// application data received, and the raw datagrams that came.
    pub fn pump(&mut self, within: Duration) -> (bool, Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let (mut complete, mut data, mut raw) = (false, Vec::new(), Vec::new());
        let deadline = Instant::now() + within;
        let mut buf = [0u8; 2048];
        loop {
            while let Some(t) = self.endpoint.poll_transmit() {
                let _ = self.socket.send_to(&t.message, self.server);
            }
            while let Ok(n) = self.socket.recv(&mut buf) {
                raw.push(buf[..n].to_vec());
                let events = self
                    .endpoint
                    .read(Instant::now(), self.server, None, buf[..n].into());
                for e in events.into_iter().flatten() {
                    match e {
                        EndpointEvent::HandshakeComplete => complete = true,
                        EndpointEvent::ApplicationData(d) => data.push(d.to_vec()),
                        _ => {}
                    }
                }
            }
            let _ = self.endpoint.handle_timeout(self.server, Instant::now());
            if complete || !data.is_empty() || Instant::now() >= deadline {
                return (complete, data, raw);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Completes the handshake within `within`.
    pub fn handshake(&mut self, within: Duration) -> bool {
        self.pump(within).0
    }

    /// A CON GET of `path` in the session; the answer's payload within `within`.
    pub fn get(&mut self, mid: u16, path: &str, within: Duration) -> Option<Vec<u8>> {
        let mut request = vec![0x40, 0x01];
        request.extend_from_slice(&mid.to_be_bytes());
        request.push(0xb0 | path.len() as u8); // Uri-Path (11), short
        request.extend_from_slice(path.as_bytes());
        self.endpoint
            .write(Instant::now(), self.server, &request)
            .ok()?;
        let (_, data, _) = self.pump(within);
        let answer = data.into_iter().next()?;
        let at = answer.iter().position(|b| *b == 0xff)?;
        Some(answer[at + 1..].to_vec())
    }

    /// Sends `datagram` as it is from this client's socket (its address and port).
    pub fn send_raw(&self, datagram: &[u8]) {
        self.socket.send_to(datagram, self.server).unwrap();
    }

    /// Whether a HelloVerifyRequest came to this socket within `within`.
    pub fn got_verify_request(&mut self, within: Duration) -> bool {
        let (_, _, raw) = self.pump(within);
        raw.iter().any(|d| d.len() > 13 && d[0] == 22 && d[13] == 3)
    }
}
