//! The listener against rtc-dtls's own client, in virtual time: the cookie exchange, the
//! suite each credential picks, data both ways, caps, and a wrong key.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rtc_dtls::cipher_suite::CipherSuiteId;
use rtc_dtls::config::{ConfigBuilder, ExtendedMasterSecretType};
use rtc_dtls::crypto_provider::default_provider;
use rtc_dtls::endpoint::{Endpoint, EndpointEvent};

use super::*;
use crate::time::Timestamp;

pub(super) const SERVER: &str = "127.0.0.1:5684";

pub(super) fn psk_server(limits: SessionLimits) -> DtlsServer {
    let mut credentials = Credentials::default();
    credentials
        .psk
        .insert(b"client1".to_vec(), b"secretkey".to_vec());
    let config = DtlsServerConfig {
        credentials,
        limits,
    };
    let clock = (Instant::now(), Timestamp::from_nanos(1_000_000_000));
    DtlsServer::new(
        SERVER.parse().unwrap(),
        &config,
        7,
        default_provider().unwrap(),
        clock,
    )
    .unwrap()
}

fn certificate_server() -> DtlsServer {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let credentials = Credentials {
        certificate: Some(CertifiedKey {
            chain: vec![cert.cert.der().clone()],
            key_pkcs8: cert.key_pair.serialize_der(),
        }),
        ..Credentials::default()
    };
    let config = DtlsServerConfig {
        credentials,
        limits: SessionLimits::default(),
    };
    let clock = (Instant::now(), Timestamp::from_nanos(1_000_000_000));
    DtlsServer::new(
        SERVER.parse().unwrap(),
        &config,
        8,
        default_provider().unwrap(),
        clock,
    )
    .unwrap()
}

fn certificate_client(port: u16, suite: CipherSuiteId) -> Client {
    let config = ConfigBuilder::default()
        .with_insecure_skip_verify(true)
        .with_cipher_suites(vec![suite])
        .with_extended_master_secret(ExtendedMasterSecretType::Require)
        .with_crypto_provider(default_provider().unwrap())
        .build(true, None)
        .unwrap();
    connect(port, config)
}

pub(super) struct Client {
    pub(super) addr: SocketAddr,
    pub(super) endpoint: Endpoint,
    pub(super) events: Vec<String>,
}

pub(super) fn psk_client(port: u16, key: &'static [u8], suite: CipherSuiteId) -> Client {
    connect(port, psk_config(key, suite))
}

/// A PSK client's configuration: identity client1, `key`, only `suite`.
pub(super) fn psk_config(
    key: &'static [u8],
    suite: CipherSuiteId,
) -> rtc_dtls::config::HandshakeConfig {
    ConfigBuilder::default()
        .with_psk(Some(Arc::new(move |_: &[u8]| Ok(key.to_vec()))))
        .with_psk_identity_hint(Some(b"client1".to_vec()))
        .with_cipher_suites(vec![suite])
        .with_extended_master_secret(ExtendedMasterSecretType::Require)
        .with_crypto_provider(default_provider().unwrap())
        .build(true, None)
        .unwrap()
}

fn connect(port: u16, config: rtc_dtls::config::HandshakeConfig) -> Client {
    connect_from(format!("127.0.0.1:{port}").parse().unwrap(), config)
}

/// A client at `addr` whose first hello is queued.
pub(super) fn connect_from(addr: SocketAddr, config: rtc_dtls::config::HandshakeConfig) -> Client {
    let mut endpoint = Endpoint::new(addr, rtc_shared::TransportProtocol::UDP, None);
    endpoint
        .connect(
            Instant::now(),
            SERVER.parse().unwrap(),
            Arc::new(config),
            None,
        )
        .unwrap();
    Client {
        addr,
        endpoint,
        events: Vec::new(),
    }
}

/// Moves datagrams both ways until neither side sends; returns what the server sent.
pub(super) fn exchange(
    server: &mut DtlsServer,
    client: &mut Client,
    now: Timestamp,
) -> Vec<Vec<u8>> {
    let mut sent = Vec::new();
    for _ in 0..20 {
        let mut quiet = true;
        while let Some(t) = client.endpoint.poll_transmit() {
            quiet = false;
            server.handle_datagram(now, client.addr, &t.message);
        }
        while let Some((to, datagram)) = server.poll_transmit() {
            quiet = false;
            assert_eq!(to, client.addr);
            sent.push(datagram.clone());
            let events = client.endpoint.read(
                Instant::now(),
                SERVER.parse().unwrap(),
                None,
                datagram.as_slice().into(),
            );
            for e in events.into_iter().flatten() {
                client.events.push(match e {
                    EndpointEvent::HandshakeComplete => "complete".into(),
                    EndpointEvent::ApplicationData(d) => String::from_utf8_lossy(&d).into_owned(),
                    _ => "other".into(),
                });
            }
        }
        if quiet {
            break;
        }
    }
    sent
}

/// The suite a ServerHello among `datagrams` picked.
fn chosen_suite(datagrams: &[Vec<u8>]) -> Option<u16> {
    datagrams.iter().find_map(|d| {
        let hs = d.get(hello::RECORD_HEADER..)?;
        if d[0] != 22 || hs[0] != 2 {
            return None;
        }
        let body = &hs[hello::HANDSHAKE_HEADER..];
        let at = 2 + 32 + 1 + usize::from(body[34]);
        Some(u16::from_be_bytes([body[at], body[at + 1]]))
    })
}

#[test]
fn a_psk_client_completes_after_the_cookie_and_ccm8_is_picked_when_it_is_all_it_offers() {
    let mut server = psk_server(SessionLimits::default());
    let mut client = psk_client(
        40001,
        b"secretkey",
        CipherSuiteId::Tls_Psk_With_Aes_128_Ccm_8,
    );
    let now = Timestamp::from_nanos(2_000_000_000);
    let sent = exchange(&mut server, &mut client, now);
    assert_eq!(client.events, ["complete"]);
    assert_eq!(chosen_suite(&sent), Some(0xc0a8));
    let c = server.counters();
    assert_eq!(
        (
            c.handshakes.verify_requests,
            c.handshakes.started,
            c.handshakes.completed
        ),
        (1, 1, 1)
    );
    let Some(DtlsEvent::Established(id, addr)) = server.poll_event() else {
        panic!("no established event");
    };
    assert_eq!(addr, client.addr);

    client
        .endpoint
        .write(Instant::now(), SERVER.parse().unwrap(), b"ping")
        .unwrap();
    exchange(&mut server, &mut client, now);
    assert_eq!(server.poll_received(), Some((id, b"ping".to_vec())));
    server.send(now, id, b"pong").unwrap();
    exchange(&mut server, &mut client, now);
    assert_eq!(client.events, ["complete", "pong"]);
}

#[test]
fn a_hello_without_the_cookie_leaves_no_state_and_gets_less_than_it_sent() {
    let mut server = psk_server(SessionLimits::default());
    let mut client = psk_client(
        40002,
        b"secretkey",
        CipherSuiteId::Tls_Psk_With_Aes_128_Ccm_8,
    );
    let hello = client.endpoint.poll_transmit().unwrap().message.to_vec();
    for port in 1..=100u16 {
        let from: SocketAddr = format!("127.0.0.2:{port}").parse().unwrap();
        server.handle_datagram(Timestamp::from_nanos(2_000_000_000), from, &hello);
        let (to, answer) = server.poll_transmit().unwrap();
        assert_eq!(to, from);
        assert!(
            answer.len() < hello.len(),
            "{} >= {}",
            answer.len(),
            hello.len()
        );
    }
    assert_eq!(server.session_counts(), (0, 0));
    assert_eq!(server.counters().handshakes.verify_requests, 100);
}

#[test]
fn a_wrong_key_fails_and_the_next_client_is_served() {
    let mut server = psk_server(SessionLimits::default());
    let now = Timestamp::from_nanos(2_000_000_000);
    let mut wrong = psk_client(
        40003,
        b"not-the-key",
        CipherSuiteId::Tls_Psk_With_Aes_128_Ccm_8,
    );
    exchange(&mut server, &mut wrong, now);
    assert!(!wrong.events.contains(&"complete".to_string()));
    assert_eq!(server.counters().handshakes.failed, 1);
    assert_eq!(server.session_counts(), (0, 0));
    let mut good = psk_client(
        40004,
        b"secretkey",
        CipherSuiteId::Tls_Psk_With_Aes_128_Gcm_Sha256,
    );
    exchange(&mut server, &mut good, now);
    assert_eq!(good.events, ["complete"]);
}

#[test]
fn the_caps_refuse_sessions_and_a_silent_handshake_times_out() {
    let limits = SessionLimits {
        max_sessions_per_source: 1,
        ..SessionLimits::default()
    };
    let mut server = psk_server(limits);
    let now = Timestamp::from_nanos(2_000_000_000);
    let mut first = psk_client(
        40005,
        b"secretkey",
        CipherSuiteId::Tls_Psk_With_Aes_128_Ccm_8,
    );
    exchange(&mut server, &mut first, now);
    let mut second = psk_client(
        40006,
        b"secretkey",
        CipherSuiteId::Tls_Psk_With_Aes_128_Ccm_8,
    );
    exchange(&mut server, &mut second, now);
    assert!(second.events.is_empty());
    assert_eq!(server.counters().handshakes.refused, 1);
    // The first session goes idle; then the second gets its turn.
    let later = now + limits.idle_timeout + Duration::from_secs(1);
    server.handle_timeout(later);
    assert_eq!(server.session_counts(), (0, 0));
    assert_eq!(server.counters().endings.idle, 1);
}

#[test]
fn a_certificate_client_offering_only_ecdhe_ecdsa_ccm8_gets_it() {
    let mut server = certificate_server();
    let now = Timestamp::from_nanos(2_000_000_000);
    for (port, suite, id) in [
        (
            40011,
            CipherSuiteId::Tls_Ecdhe_Ecdsa_With_Aes_128_Ccm_8,
            0xc0ae,
        ),
        (
            40012,
            CipherSuiteId::Tls_Ecdhe_Ecdsa_With_Aes_128_Gcm_Sha256,
            0xc02b,
        ),
    ] {
        let mut client = certificate_client(port, suite);
        let sent = exchange(&mut server, &mut client, now);
        assert_eq!(client.events, ["complete"], "{suite}");
        assert_eq!(chosen_suite(&sent), Some(id));
    }
}

/// A first ClientHello lost and sent again: our HelloVerifyRequest carries record number 1
/// (§4.2.1), so the ServerHello flight must be numbered past it or the client drops it as a
/// replay and the handshake stalls until its deadline.
#[test]
fn a_client_whose_first_hello_was_lost_completes() {
    let mut server = psk_server(SessionLimits::default());
    let mut client = psk_client(
        40005,
        b"secretkey",
        CipherSuiteId::Tls_Psk_With_Aes_128_Ccm_8,
    );
    let lost = client.endpoint.poll_transmit().unwrap();
    assert_eq!(&lost.message[3..11], &[0; 8], "epoch 0, record 0");
    let later = Instant::now() + Duration::from_secs(2);
    client
        .endpoint
        .handle_timeout(SERVER.parse().unwrap(), later)
        .unwrap();
    let sent = exchange(
        &mut server,
        &mut client,
        Timestamp::from_nanos(2_000_000_000),
    );
    assert_eq!(client.events, ["complete"]);
    assert_eq!(sent[0][10], 1, "the HelloVerifyRequest echoes record 1");
    assert!(sent[1][10] > 1, "the ServerHello is numbered past it");
}
