//! A ClientHello flood from many source ports, shared by tests/coaps_interop.rs and the
//! coaps benchmark: a real first ClientHello (rtc-dtls's client, PSK suites, EMS and the
//! renegotiation marker) sent once from each of `n` fresh sockets, and the answers counted.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rtc_dtls::cipher_suite::CipherSuiteId;
use rtc_dtls::config::ConfigBuilder;
use rtc_dtls::crypto_provider::default_provider;
use rtc_dtls::endpoint::Endpoint;

/// What a flood saw.
#[derive(Debug, Clone, Copy)]
pub struct Flood {
    /// ClientHellos sent.
    pub sent: usize,
    /// HelloVerifyRequests received (one per source at most).
    pub verify_requests: usize,
    /// Other answers (a ServerHello would mean state before the cookie).
    pub other_answers: usize,
    /// From the first send to the last.
    pub send_time: Duration,
    /// Bytes sent and received.
    pub bytes_in: usize,
    pub bytes_out: usize,
}

/// A first ClientHello as rtc-dtls's client sends it.
pub fn first_hello() -> Vec<u8> {
    let config = ConfigBuilder::default()
        .with_psk(Some(Arc::new(|_: &[u8]| Ok(b"secretkey".to_vec()))))
        .with_psk_identity_hint(Some(b"client1".to_vec()))
        .with_cipher_suites(vec![CipherSuiteId::Tls_Psk_With_Aes_128_Ccm_8])
        .with_crypto_provider(default_provider().unwrap())
        .build(true, None)
        .unwrap();
    let local: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut client = Endpoint::new(local, rtc_shared::TransportProtocol::UDP, None);
    let server: SocketAddr = "127.0.0.1:5684".parse().unwrap();
    client
        .connect(Instant::now(), server, Arc::new(config), None)
        .unwrap();
    client.poll_transmit().unwrap().message.to_vec()
}

/// Sends one ClientHello from each of `n` new sockets, all before reading any answer (so
/// a slow server cannot stretch the flood), then reads each socket's first answer within
/// 2 s. Only if the descriptor limit stops the sockets from being opened at once does it
/// go in rounds of as many as it could open.
pub fn client_hellos(target: SocketAddr, n: usize) -> Flood {
    let hello = first_hello();
    let mut flood = Flood {
        sent: 0,
        verify_requests: 0,
        other_answers: 0,
        send_time: Duration::ZERO,
        bytes_in: 0,
        bytes_out: 0,
    };
    let start = Instant::now();
    while flood.sent < n {
        let sockets = open_up_to(n - flood.sent);
        for s in &sockets {
            s.send_to(&hello, target).unwrap();
            flood.sent += 1;
            flood.bytes_out += hello.len();
        }
        flood.send_time = start.elapsed();
        read_answers(&sockets, &mut flood);
    }
    flood
}

/// Up to `n` nonblocking sockets on loopback, fewer if the descriptor limit is reached
/// (at least one).
fn open_up_to(n: usize) -> Vec<UdpSocket> {
    let mut sockets = Vec::with_capacity(n);
    while sockets.len() < n {
        match UdpSocket::bind("127.0.0.1:0") {
            Ok(s) => sockets.push(s),
            Err(e) if sockets.is_empty() => panic!("no socket for the flood: {e}"),
            Err(_) => break,
        }
    }
    // Leave room for the rest of the process (the answer file, a child's pipes).
    if sockets.len() < n {
        sockets.truncate(sockets.len().saturating_sub(32).max(1));
    }
    for s in &sockets {
        s.set_nonblocking(true).unwrap();
    }
    sockets
}

/// Each socket's first answer, within 2 s for them all.
fn read_answers(sockets: &[UdpSocket], flood: &mut Flood) {
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut waiting: Vec<&UdpSocket> = sockets.iter().collect();
    while !waiting.is_empty() && Instant::now() < deadline {
        waiting.retain(|s| match s.recv(&mut buf) {
            Ok(len) => {
                flood.bytes_in += len;
                // A HelloVerifyRequest: a handshake record whose message is type 3.
                match (buf[0], buf.get(13)) {
                    (22, Some(3)) => flood.verify_requests += 1,
                    _ => flood.other_answers += 1,
                }
                false
            }
            Err(_) => true,
        });
        std::thread::sleep(Duration::from_millis(1));
    }
}
