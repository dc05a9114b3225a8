//! The coaps listener's untrusted input (`backoffd::dtls`): datagrams from strangers (the
//! stateless cookie front, `hello.rs`) and records inside an established session (the
//! record layer, decryption, the replay window), interleaved.
//!
//! The first run completes a real PSK handshake with rtc-dtls's client, so the session's
//! record path is reachable; later runs go on with that server (a handshake per run would
//! cost a millisecond each), in time that only moves forward. Then the input is split into datagrams (a length byte each; its
//! top bit says who sends it: the client's address, or a stranger's). Invariants: nothing
//! panics; a stranger never gets a session, and is never sent more than it sent; the
//! established session survives every record it could not take.
#![no_main]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use backoffd::dtls::{Credentials, DtlsServer, DtlsServerConfig, SessionLimits};
use backoffd::time::Timestamp;
use libfuzzer_sys::fuzz_target;
use rtc_dtls::cipher_suite::CipherSuiteId;
use rtc_dtls::config::ConfigBuilder;
use rtc_dtls::crypto_provider::default_provider;
use rtc_dtls::endpoint::Endpoint;

const SERVER: &str = "127.0.0.1:5684";
const CLIENT: &str = "127.0.0.1:40000";

fn established() -> (DtlsServer, Endpoint) {
    let mut credentials = Credentials::default();
    credentials.psk.insert(b"id".to_vec(), b"key".to_vec());
    let config = DtlsServerConfig {
        credentials,
        limits: SessionLimits {
            // The session must outlive every run: records the fuzzer sends do not count as
            // activity unless they decrypt.
            idle_timeout: std::time::Duration::from_secs(1 << 40),
            ..SessionLimits::default()
        },
    };
    let clock = (Instant::now(), Timestamp::from_nanos(1 << 30));
    let crypto = default_provider().unwrap();
    let mut server = DtlsServer::new(SERVER.parse().unwrap(), &config, 1, crypto, clock).unwrap();
    let client_config = ConfigBuilder::default()
        .with_psk(Some(Arc::new(|_: &[u8]| Ok(b"key".to_vec()))))
        .with_psk_identity_hint(Some(b"id".to_vec()))
        .with_cipher_suites(vec![CipherSuiteId::Tls_Psk_With_Aes_128_Ccm_8])
        .with_crypto_provider(default_provider().unwrap())
        .build(true, None)
        .unwrap();
    let (client_addr, server_addr) = (CLIENT.parse().unwrap(), SERVER.parse().unwrap());
    let mut client = Endpoint::new(client_addr, rtc_shared::TransportProtocol::UDP, None);
    client
        .connect(Instant::now(), server_addr, Arc::new(client_config), None)
        .unwrap();
    let now = Timestamp::from_nanos(2 << 30);
    for _ in 0..10 {
        while let Some(t) = client.poll_transmit() {
            server.handle_datagram(now, client_addr, &t.message);
        }
        while let Some((_, d)) = server.poll_transmit() {
            let _ = client.read(Instant::now(), server_addr, None, d.as_slice().into());
        }
    }
    assert_eq!(server.session_counts(), (1, 0), "the handshake completes");
    (server, client)
}

struct Run {
    server: DtlsServer,
    _client: Endpoint,
    now: Timestamp,
}

thread_local! {
    static RUN: std::cell::RefCell<Option<Run>> = const { std::cell::RefCell::new(None) };
}

fuzz_target!(|data: &[u8]| {
    RUN.with(|run| {
        let mut run = run.borrow_mut();
        let run = run.get_or_insert_with(|| {
            let (server, client) = established();
            Run {
                server,
                _client: client,
                now: Timestamp::from_nanos(3 << 30),
            }
        });
        feed(run, data);
    });
});

fn feed(run: &mut Run, data: &[u8]) {
    let (server, now) = (&mut run.server, &mut run.now);
    let client: SocketAddr = CLIENT.parse().unwrap();
    let mut rest = data;
    while let Some((&head, tail)) = rest.split_first() {
        let len = usize::from(head & 0x7f).min(tail.len());
        let (datagram, after) = tail.split_at(len);
        rest = after;
        let from = match head & 0x80 {
            0 => client,
            _ => SocketAddr::from(([127, 0, 0, 2], 1000 + len as u16)),
        };
        server.handle_datagram(*now, from, datagram);
        while let Some((to, sent)) = server.poll_transmit() {
            if to != client {
                assert!(sent.len() < datagram.len().max(1), "a stranger was sent more than it sent");
            }
        }
        while server.poll_received().is_some() {}
        *now = *now + std::time::Duration::from_millis(1);
        server.handle_timeout(*now);
        assert_eq!(server.session_counts().0, 1, "only the verified client has a session");
    }
}
