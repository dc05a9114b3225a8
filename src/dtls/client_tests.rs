//! The upstream sessions against our own listener, in virtual time: requests queued while
//! the handshake runs, a stray datagram during it, a wrong key, a silent origin and its
//! backoff, and an origin that restarted and forgot the session.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rtc_dtls::crypto_provider::default_provider;

use super::tests::{psk_server, SERVER};
use super::*;
use crate::slot_id::SessionId;
use crate::time::Timestamp;

const LOCAL: &str = "127.0.0.1:40000";
const START: Timestamp = Timestamp::from_nanos(1_000_000_000);

/// One upstream endpoint (key 0) and the origin it talks to, on a virtual clock.
struct Pair {
    clients: DtlsClients,
    /// None: the origin is down and what is sent to it is lost.
    origin: Option<DtlsServer>,
    now: Timestamp,
    /// What the origin decrypted, in order.
    at_origin: Vec<Vec<u8>>,
    events: Vec<ClientEvent>,
}

impl Pair {
    fn new(key: &[u8]) -> Pair {
        let credentials = ClientCredentials {
            psk: Some((b"client1".to_vec(), key.to_vec())),
            roots: Vec::new(),
            server_name: "127.0.0.1".into(),
        };
        let config = DtlsClientConfig::new(credentials);
        let clock = (Instant::now(), START);
        let mut clients = DtlsClients::new(&config, 3, default_provider().unwrap(), clock)
            .expect("client config");
        clients.open(0, LOCAL.parse().unwrap(), SERVER.parse().unwrap());
        Pair {
            clients,
            origin: Some(psk_server(SessionLimits::default())),
            now: START,
            at_origin: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Moves records both ways until neither side has any.
    fn pump(&mut self) {
        let local: SocketAddr = LOCAL.parse().unwrap();
        for _ in 0..50 {
            let mut quiet = true;
            while let Some((key, record)) = self.clients.poll_transmit() {
                assert_eq!(key, 0);
                quiet = false;
                if let Some(origin) = self.origin.as_mut() {
                    origin.handle_datagram(self.now, local, &record);
                }
            }
            if let Some(origin) = self.origin.as_mut() {
                while let Some((_, plain)) = origin.poll_received() {
                    self.at_origin.push(plain);
                }
                while let Some((to, record)) = origin.poll_transmit() {
                    assert_eq!(to, local);
                    quiet = false;
                    self.clients.handle_datagram(self.now, 0, &record);
                }
            }
            self.events
                .extend(std::iter::from_fn(|| self.clients.poll_event()));
            if quiet {
                return;
            }
        }
        panic!("records kept flowing");
    }

    /// Runs both sides' timers, in order, up to `now + span`.
    fn run_for(&mut self, span: Duration) {
        let until = self.now + span;
        loop {
            self.pump();
            let origin = self.origin.as_ref().and_then(DtlsServer::poll_timeout);
            let next = [self.clients.poll_timeout(), origin]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    self.clients.handle_timeout(self.now);
                    if let Some(origin) = self.origin.as_mut() {
                        origin.handle_timeout(self.now);
                    }
                }
                _ => break,
            }
        }
        self.now = until;
    }

    /// The origin answers every datagram it has decrypted with `answer`.
    fn origin_answers(&mut self, answer: &[u8]) {
        let origin = self.origin.as_mut().expect("origin up");
        let session = origin_session(origin);
        origin.send(self.now, session, answer).expect("session up");
        self.pump();
    }
}

/// The origin's one established session.
fn origin_session(origin: &mut DtlsServer) -> SessionId {
    let mut session = None;
    while let Some(event) = origin.poll_event() {
        if let DtlsEvent::Established(id, _) = event {
            session = Some(id);
        }
    }
    session.expect("the origin saw a session")
}

/// A CoAP CON GET with Message ID `mid` (RFC 7252 §3).
fn con(mid: u16) -> Vec<u8> {
    let [hi, lo] = mid.to_be_bytes();
    vec![0x40, 0x01, hi, lo]
}

#[test]
fn requests_sent_during_the_handshake_go_out_in_order_once_it_is_up() {
    let mut pair = Pair::new(b"secretkey");
    for mid in 1..=3 {
        pair.clients.send(pair.now, 0, &con(mid));
    }
    pair.run_for(Duration::from_millis(10));
    assert_eq!(pair.events, [ClientEvent::Established(0)]);
    assert_eq!(pair.at_origin, [con(1), con(2), con(3)]);
    pair.origin_answers(&[0x60, 0x45, 0, 1]);
    assert_eq!(
        pair.clients.poll_received(),
        Some((0, vec![0x60, 0x45, 0, 1]))
    );
    assert_eq!(pair.clients.session_counts(), (1, 0));
}

#[test]
fn a_stray_datagram_during_the_handshake_is_dropped_and_the_handshake_goes_on() {
    let mut pair = Pair::new(b"secretkey");
    pair.clients.send(pair.now, 0, &con(7));
    // A plain CoAP RST from the origin's address, or anyone forging it.
    pair.clients
        .handle_datagram(pair.now, 0, &[0x70, 0x00, 0, 7]);
    pair.clients
        .handle_datagram(pair.now, 0, &[0x16, 0xfe, 0xfd, 0, 0]);
    pair.run_for(Duration::from_millis(10));
    assert_eq!(pair.events, [ClientEvent::Established(0)]);
    assert_eq!(pair.at_origin, [con(7)]);
    assert_eq!(pair.clients.counters().rejected_records, 2);
}

#[test]
fn a_wrong_key_is_refused_and_what_waited_is_dropped() {
    let mut pair = Pair::new(b"not-the-key");
    pair.clients.send(pair.now, 0, &con(1));
    pair.run_for(Duration::from_secs(11));
    assert!(
        matches!(pair.events.as_slice(), [ClientEvent::Refused(0, _)]),
        "{:?}",
        pair.events
    );
    assert!(pair.at_origin.is_empty());
    assert_eq!(pair.clients.counters().handshakes.failed, 1);
    // After the backoff a new request tries again, and is refused again: nothing leaks.
    pair.events.clear();
    pair.run_for(Duration::from_secs(2));
    pair.clients.send(pair.now, 0, &con(2));
    pair.run_for(Duration::from_secs(11));
    assert!(matches!(
        pair.events.as_slice(),
        [ClientEvent::Refused(0, _)]
    ));
    assert_eq!(pair.clients.session_counts(), (0, 0));
}

#[test]
fn a_silent_origin_times_out_keeps_the_queue_and_is_tried_again_after_a_pause() {
    let mut pair = Pair::new(b"secretkey");
    let origin = pair.origin.take();
    pair.clients.send(pair.now, 0, &con(1));
    pair.run_for(Duration::from_secs(10));
    assert_eq!(
        pair.events,
        [ClientEvent::Ended(0, SessionEnd::HandshakeTimeout)]
    );
    assert_eq!(pair.clients.counters().handshakes.timed_out, 1);
    pair.origin = origin;
    pair.events.clear();
    // The first pause is 1 s; the queued request goes out on the session after it.
    pair.run_for(Duration::from_millis(1_100));
    assert_eq!(pair.events, [ClientEvent::Established(0)]);
    assert_eq!(pair.at_origin, [con(1)]);
}

#[test]
fn a_retransmission_to_a_restarted_origin_sets_up_a_new_session() {
    let mut pair = Pair::new(b"secretkey");
    pair.clients.send(pair.now, 0, &con(1));
    pair.run_for(Duration::from_millis(10));
    pair.origin_answers(&[0x60, 0x45, 0, 1]);
    // The origin restarts: it knows no session, and drops the old epoch's records.
    pair.origin = Some(psk_server(SessionLimits::default()));
    pair.at_origin.clear();
    pair.events.clear();
    pair.clients.send(pair.now, 0, &con(2));
    pair.run_for(Duration::from_millis(999));
    pair.clients.send(pair.now, 0, &con(2));
    assert!(
        pair.events.is_empty(),
        "not stale before 1 s: {:?}",
        pair.events
    );
    pair.run_for(Duration::from_millis(2_000));
    pair.clients.send(pair.now, 0, &con(2));
    pair.run_for(Duration::from_millis(10));
    assert_eq!(
        pair.events,
        [
            ClientEvent::Ended(0, SessionEnd::Stale),
            ClientEvent::Established(0)
        ]
    );
    assert_eq!(pair.at_origin, [con(2)]);
}
