//! The listener under a flood of cookie-verified ClientHellos that never finish (issue 40
//! row 2), and under a forged cookie-less hello from a live session's address (row 6), in
//! virtual time against rtc-dtls's own client.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use rtc_dtls::cipher_suite::CipherSuiteId;

use super::tests::{connect_from, exchange, psk_client, psk_config, psk_server, SERVER};
use super::*;
use crate::time::Timestamp;

const CCM8: CipherSuiteId = CipherSuiteId::Tls_Psk_With_Aes_128_Ccm_8;

/// What a keyless attacker does from `addr`: a hello, our cookie back in a second hello,
/// then silence. The server's flight is dropped.
fn verified_hello(server: &mut DtlsServer, now: Timestamp, addr: SocketAddr) {
    let mut client = connect_from(addr, psk_config(b"no-key", CCM8));
    let first = client.endpoint.poll_transmit().unwrap().message;
    server.handle_datagram(now, addr, &first);
    let (to, verify) = server.poll_transmit().unwrap();
    assert_eq!(to, addr);
    let server_addr: SocketAddr = SERVER.parse().unwrap();
    let read = client
        .endpoint
        .read(Instant::now(), server_addr, None, verify.as_slice().into());
    read.unwrap();
    while let Some(t) = client.endpoint.poll_transmit() {
        server.handle_datagram(now, addr, &t.message);
    }
    while server.poll_transmit().is_some() {}
}

/// `n` attackers from `ips` (of 10.0.0.0/24) in turn, each from a port not used before.
fn flood(server: &mut DtlsServer, now: Timestamp, ips: Range<u8>, n: usize) {
    static NEXT_PORT: AtomicU16 = AtomicU16::new(20_000);
    let count = usize::from(ips.end - ips.start);
    for i in 0..n {
        let ip = ips.start + (i % count) as u8;
        let port = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
        verified_hello(server, now, format!("10.0.0.{ip}:{port}").parse().unwrap());
    }
}

fn small_limits() -> SessionLimits {
    SessionLimits {
        max_handshakes: 32,
        max_handshakes_per_source: 4,
        ..SessionLimits::default()
    }
}

#[test]
fn a_flood_of_verified_hellos_holds_no_more_than_the_bounds_and_the_oldest_go_first() {
    let limits = small_limits();
    let mut server = psk_server(limits);
    let now = Timestamp::from_nanos(2_000_000_000);
    flood(&mut server, now, 0..8, 32);
    assert_eq!(server.session_counts(), (32, 32));
    // Within their grace, the handshakes stay, and more from their sources are refused.
    flood(&mut server, now, 0..8, 8);
    assert_eq!(server.counters().refused.source_handshakes, 8);
    // Past it, each source's newcomers push out its own oldest.
    let later = now + Duration::from_secs(1);
    flood(&mut server, later, 0..8, 32);
    assert_eq!(server.session_counts(), (32, 32));
    let c = server.counters();
    assert_eq!(c.handshakes.started, 64);
    assert_eq!(c.evicted.source_handshakes, 32);
    // New addresses: the oldest handshakes anywhere make room.
    flood(&mut server, later + Duration::from_secs(1), 8..20, 12);
    assert_eq!(server.session_counts(), (32, 32));
    assert_eq!(server.counters().evicted.handshakes, 12);
}

#[test]
fn a_psk_client_in_the_middle_of_a_flood_completes_and_is_never_evicted() {
    let limits = small_limits();
    let mut server = psk_server(limits);
    let now = Timestamp::from_nanos(2_000_000_000);
    flood(&mut server, now, 0..8, 32);
    let now = now + Duration::from_secs(1);
    // The client's verified hello opens its session; the attacker goes on for fewer
    // newcomers than the bound before the client's next flight arrives.
    let mut client = psk_client(40100, b"secretkey", CCM8);
    let first = client.endpoint.poll_transmit().unwrap().message;
    server.handle_datagram(now, client.addr, &first);
    let (_, verify) = server.poll_transmit().unwrap();
    client
        .endpoint
        .read(
            Instant::now(),
            SERVER.parse().unwrap(),
            None,
            verify.as_slice().into(),
        )
        .unwrap();
    let second = client.endpoint.poll_transmit().unwrap().message;
    server.handle_datagram(now, client.addr, &second);
    let flight: Vec<_> = std::iter::from_fn(|| server.poll_transmit()).collect();
    flood(&mut server, now, 8..39, limits.max_handshakes - 1);
    for (_, datagram) in flight {
        let events = client.endpoint.read(
            Instant::now(),
            SERVER.parse().unwrap(),
            None,
            datagram.as_slice().into(),
        );
        events.unwrap();
    }
    exchange(&mut server, &mut client, now);
    assert_eq!(client.events, ["complete"]);
    // Established, it is never the one to go, however long the flood.
    flood(&mut server, now + Duration::from_secs(1), 40..70, 300);
    assert_eq!(server.session_counts(), (33, 32));
    // A newcomer while every handshake is in its grace is refused; its next hello, a
    // retransmission timer later, gets in.
    let mut another = psk_client(40101, b"secretkey", CCM8);
    exchange(&mut server, &mut another, now + Duration::from_secs(1));
    assert!(another.events.is_empty());
    let mut another = psk_client(40102, b"secretkey", CCM8);
    exchange(&mut server, &mut another, now + Duration::from_secs(2));
    assert_eq!(another.events, ["complete"]);
    assert_eq!(server.session_counts(), (33, 31));
}

#[test]
fn the_defaults_hold_a_flood_of_157_addresses_to_their_share() {
    let mut server = psk_server(SessionLimits::default());
    let now = Timestamp::from_nanos(2_000_000_000);
    // 157 addresses x 16 ports: each address keeps its 8 newest handshakes.
    flood(&mut server, now, 0..157, 157 * 8);
    flood(&mut server, now + Duration::from_secs(1), 0..157, 157 * 8);
    assert_eq!(server.session_counts(), (157 * 8, 157 * 8));
    assert_eq!(server.counters().evicted.source_handshakes, 157 * 8);
    let mut client = psk_client(40103, b"secretkey", CCM8);
    exchange(&mut server, &mut client, now + Duration::from_secs(1));
    assert_eq!(client.events, ["complete"]);
}

/// Issue 40 row 6: the forged hello would have sent a HelloVerifyRequest into the session,
/// which makes OpenSSL's client drop it.
#[test]
fn a_cookieless_hello_from_a_live_session_s_address_is_not_answered_until_it_is_quiet() {
    let limits = SessionLimits::default();
    let mut server = psk_server(limits);
    let now = Timestamp::from_nanos(2_000_000_000);
    let mut client = psk_client(40200, b"secretkey", CCM8);
    exchange(&mut server, &mut client, now);
    assert_eq!(client.events, ["complete"]);
    let Some(DtlsEvent::Established(id, _)) = server.poll_event() else {
        panic!("not established");
    };
    // Another client's first hello, sent as if from the live client's address and port.
    let forged = psk_client(40201, b"whatever", CCM8)
        .endpoint
        .poll_transmit()
        .unwrap()
        .message;
    let soon = now + Duration::from_secs(1);
    server.handle_datagram(soon, client.addr, &forged);
    assert_eq!(
        server.poll_transmit(),
        None,
        "nothing into the live session"
    );
    assert_eq!(server.counters().drops.hello_to_live_session, 1);
    assert_eq!(server.session_counts(), (1, 0));
    // The session still carries data both ways.
    client
        .endpoint
        .write(Instant::now(), SERVER.parse().unwrap(), b"ping")
        .unwrap();
    exchange(&mut server, &mut client, soon);
    assert_eq!(server.poll_received(), Some((id, b"ping".to_vec())));
    // A client heard from lately is protected for as long again.
    let later = soon + (limits.rehello_quiet - Duration::from_millis(1));
    server.handle_datagram(later, client.addr, &forged);
    assert_eq!(server.poll_transmit(), None);

    // A client that really lost its state sends nothing in the session: once it has been
    // quiet that long, its hello gets the cookie exchange (RFC 6347 §4.2.8), and the old
    // session is kept until the new hello proves the address.
    let quiet = soon + limits.rehello_quiet;
    let mut restarted = super::tests::connect_from(client.addr, psk_config(b"secretkey", CCM8));
    let sent = exchange(&mut server, &mut restarted, quiet);
    assert_eq!(
        sent[0][super::hello::RECORD_HEADER],
        3,
        "a HelloVerifyRequest"
    );
    assert_eq!(restarted.events, ["complete"]);
    assert_eq!(server.counters().endings.replaced, 1);
}
