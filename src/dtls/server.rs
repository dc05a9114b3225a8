//! A coaps listener's sessions (RFC 7252 §9, RFC 6347), as a sans-IO state machine: it takes
//! `now` and datagrams, and gives back datagrams to send, decrypted CoAP datagrams, events
//! and its next deadline.
//!
//! **Nothing is kept before the cookie** (RFC 6347 §4.2.1). A ClientHello without a valid
//! cookie gets a HelloVerifyRequest made here, statelessly (`hello.rs`, `cookie.rs`), which
//! is shorter than the hello: a forged source is never sent more than it sent. Only a
//! ClientHello that echoes a valid cookie, and so proves that its address receives, opens a
//! session, within bounds in total and per source, on all sessions and on those still
//! handshaking; at a bound the oldest handshake past its 1 s grace makes room
//! (`admission.rs`).
//!
//! **A session is not ended by a hello it cannot tell from a forgery.** A ClientHello
//! without a cookie from the address of a session could be its client starting again
//! after losing its state (RFC 6347 §4.2.8), or an off-path forgery: our
//! HelloVerifyRequest would then reach the real client inside its session, and OpenSSL's
//! client drops its session at that. §4.2.8 asks for the cookie exchange and for the old
//! session to be kept until the new hello proves its address, which we do, but we answer
//! only once the session has heard nothing from its client for `rehello_quiet` (10 s): a
//! client that sent an authenticated record that lately has not lost its state, and one
//! that has keeps sending its hello on its retransmission timer (1 s, doubling, §4.2.4), so
//! it gets the HelloVerifyRequest within 10 s more.
//!
//! **The library sees the handshake it expects.** rtc-dtls (docs/dtls.md) does the cookie
//! exchange itself, with its own cookie and state from the first hello on. So a new session
//! is shown first the client's first ClientHello as it must have been (the verified one
//! without its cookie, `hello.rs`), while the library's cookie draw is given the cookie the
//! client holds (`draws.rs`); its HelloVerifyRequest is dropped, and the real hello then
//! matches. The handshake hash covers only the second ClientHello (§4.2.1), so the
//! transcript is the client's.
//!
//! **Record numbers follow the client's.** The library numbers its plaintext records from
//! 0, its dropped HelloVerifyRequest first, but the client has already seen ours, which
//! carry the numbers of the hellos they answer (§4.2.1). A client whose first hello was
//! lost or repeated saw a HelloVerifyRequest numbered 1 or more, and would drop the
//! library's ServerHello flight as a replay. So, as OpenSSL does, the flight is numbered on
//! from the verified hello's record number: each session's epoch-0 records are moved up
//! by that number less one.
//!
//! **Each session has one wheel timer**, at the earliest of the library's retransmission
//! (§4.2.4), the handshake deadline and the idle deadline.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rtc_dtls::config::HandshakeConfig;
use rtc_dtls::crypto_provider::RTCCryptoProvider;
use rtc_dtls::endpoint::{Endpoint, EndpointEvent};
use slab::Slab;

use super::admission::{source_of, Admission, Age, Verdict};
use super::clock::Clock;
use super::config::{server_handshake, DtlsServerConfig, SessionLimits};
use super::cookie::{CookieJar, COOKIE_LEN};
use super::counters::DtlsCounters;
use super::draws::{lend, SeededProvider};
use super::hello::{shift_plaintext_seqs, ClientHello, HelloError};
use crate::slot_id::SessionId;
use crate::source_prefix::SourcePrefix;
use crate::time::Timestamp;
use crate::timer::{TimerId, TimerWheel};

/// What happened to a session, for the driver to log and the proxy to learn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DtlsEvent {
    /// The handshake finished: the session carries CoAP from now on.
    Established(SessionId, SocketAddr),
    /// The session is gone; answers for it are dropped.
    Ended(SessionId, SocketAddr, Ending),
}

/// Why a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The handshake failed (a wrong key, an unknown identity, no common suite).
    HandshakeFailed,
    /// The handshake did not finish in time.
    HandshakeTimeout,
    /// The peer sent close_notify.
    Closed,
    /// No record either way for the idle timeout.
    Idle,
    /// The client began a new handshake from the same address (RFC 6347 §4.2.8).
    Replaced,
    /// Still handshaking at a bound: a newcomer took its place (`admission.rs`).
    Evicted,
}

/// Why [`DtlsServer::send`] could not send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionGone;

/// Where a session is in its life; each state carries its deadline.
enum Phase {
    Handshaking { until: Timestamp },
    Established { last_record: Timestamp },
}

struct Session {
    addr: SocketAddr,
    /// What the session counts towards, and its age among the handshakes (`admission.rs`).
    source: SourcePrefix,
    age: Age,
    generation: u32,
    endpoint: Endpoint,
    /// The verified ClientHello's random: a hello repeating it is a retransmission.
    hello_random: [u8; 32],
    /// What the library's epoch-0 record numbers are moved up by (see the module doc).
    seq_shift: u64,
    phase: Phase,
    /// The latest proof that the client holds the session: the verified hello, the
    /// Finished, a decrypted record (see the module doc on hellos to a live session).
    last_heard: Timestamp,
    timer: Option<TimerId>,
}

/// The sessions of one coaps listener.
pub struct DtlsServer {
    handshake: Arc<HandshakeConfig>,
    limits: SessionLimits,
    jar: CookieJar,
    rng: Option<StdRng>,
    clock: Clock,
    local: SocketAddr,
    sessions: Slab<Session>,
    by_addr: BTreeMap<SocketAddr, usize>,
    admission: Admission,
    timers: TimerWheel<usize>,
    next_generation: u32,
    transmits: VecDeque<(SocketAddr, Vec<u8>)>,
    received: VecDeque<(SessionId, Vec<u8>)>,
    events: VecDeque<DtlsEvent>,
    counters: DtlsCounters,
}

impl DtlsServer {
    /// A listener at `local` with `config`. `seed` drives its draws and cookie key;
    /// `clock` is one `Instant` and the `Timestamp` read with it, to give the library the
    /// instants it counts in.
    pub fn new(
        local: SocketAddr,
        config: &DtlsServerConfig,
        seed: u64,
        crypto: Arc<dyn RTCCryptoProvider>,
        clock: (Instant, Timestamp),
    ) -> Result<Self, String> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut key = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rng, &mut key);
        let provider: Arc<dyn RTCCryptoProvider> = Arc::new(SeededProvider::new(crypto.clone()));
        Ok(DtlsServer {
            handshake: Arc::new(server_handshake(&config.credentials, provider)?),
            limits: config.limits,
            jar: CookieJar::new(key, crypto),
            rng: Some(rng),
            clock: Clock::new(clock),
            local,
            sessions: Slab::new(),
            by_addr: BTreeMap::new(),
            admission: Admission::default(),
            timers: TimerWheel::new(),
            next_generation: 0,
            transmits: VecDeque::new(),
            received: VecDeque::new(),
            events: VecDeque::new(),
            counters: DtlsCounters::default(),
        })
    }

    /// A datagram from `from`.
    pub fn handle_datagram(&mut self, now: Timestamp, from: SocketAddr, datagram: &[u8]) {
        let hello = ClientHello::parse(datagram);
        match (self.by_addr.get(&from).copied(), hello) {
            (Some(index), Ok(hello)) => self.hello_to_session(now, index, from, &hello),
            (Some(index), Err(_)) => self.feed(now, index, datagram),
            (None, Ok(hello)) => self.hello_from_stranger(now, from, &hello),
            (None, Err(e)) => self.count_refused_hello(e),
        }
    }

    /// Encrypts `plaintext` for `session`.
    pub fn send(
        &mut self,
        now: Timestamp,
        session: SessionId,
        plaintext: &[u8],
    ) -> Result<(), SessionGone> {
        let index = session.index() as usize;
        let instant = self.clock.instant(now);
        let Some(s) = self.sessions.get_mut(index) else {
            self.counters.drops.ended_session += 1;
            return Err(SessionGone);
        };
        let established = matches!(s.phase, Phase::Established { .. });
        if s.generation != session.generation() || !established {
            self.counters.drops.ended_session += 1;
            return Err(SessionGone);
        }
        let addr = s.addr;
        let written = lend(&mut self.rng, None, || {
            s.endpoint.write(instant, addr, plaintext)
        });
        if written.is_err() {
            self.counters.drops.ended_session += 1;
            return Err(SessionGone);
        }
        s.phase = Phase::Established { last_record: now };
        self.counters.datagrams_out += 1;
        self.drain_transmits(index, true);
        Ok(())
    }

    /// Runs the timers due at `now`: retransmissions, handshake and idle deadlines.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        while let Some(expired) = self.timers.poll(now) {
            let index = expired.value;
            let Some(s) = self.sessions.get_mut(index) else {
                continue;
            };
            s.timer = None;
            match s.phase {
                Phase::Handshaking { until } if now >= until => {
                    self.end(index, Ending::HandshakeTimeout);
                    continue;
                }
                Phase::Established { last_record }
                    if now >= last_record + self.limits.idle_timeout =>
                {
                    self.end(index, Ending::Idle);
                    continue;
                }
                _ => {}
            }
            let (addr, instant) = (s.addr, self.clock.instant(now));
            let retransmit = lend(&mut self.rng, None, || {
                s.endpoint.handle_timeout(addr, instant)
            });
            if retransmit.is_err() {
                self.end(index, Ending::HandshakeTimeout);
                continue;
            }
            self.drain_transmits(index, true);
            self.rearm(index);
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next run.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.timers.next_deadline()
    }

    /// The next datagram to send, and where.
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.transmits.pop_front()
    }

    /// The next decrypted CoAP datagram, and the session it came in.
    pub fn poll_received(&mut self) -> Option<(SessionId, Vec<u8>)> {
        self.received.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<DtlsEvent> {
        self.events.pop_front()
    }

    /// The counters.
    pub fn counters(&self) -> DtlsCounters {
        self.counters
    }

    /// Sessions at once: (all, still handshaking).
    pub fn session_counts(&self) -> (usize, usize) {
        (self.sessions.len(), self.admission.handshaking())
    }

    /// The address a live session's records go to.
    pub fn peer_address(&self, session: SessionId) -> Option<SocketAddr> {
        let s = self.sessions.get(session.index() as usize)?;
        (s.generation == session.generation()).then_some(s.addr)
    }

    /// A ClientHello from an address that has a session: a retransmission of the hello that
    /// opened it goes to the session; a new handshake replaces it once its cookie is valid.
    fn hello_to_session(
        &mut self,
        now: Timestamp,
        index: usize,
        from: SocketAddr,
        hello: &ClientHello<'_>,
    ) {
        let cookie = self.valid_cookie(now, from, hello);
        if cookie.is_none() {
            if now < self.sessions[index].last_heard + self.limits.rehello_quiet {
                self.counters.drops.hello_to_live_session += 1;
                return;
            }
            return self.verify_request(now, from, hello);
        }
        if self.sessions[index].hello_random == hello.random() {
            return self.feed(now, index, hello.record());
        }
        self.end(index, Ending::Replaced);
        self.hello_from_stranger(now, from, hello);
    }

    /// A ClientHello from an address without a session.
    fn hello_from_stranger(&mut self, now: Timestamp, from: SocketAddr, hello: &ClientHello<'_>) {
        let Some(cookie) = self.valid_cookie(now, from, hello) else {
            return self.verify_request(now, from, hello);
        };
        let Some(first) = hello.as_first_hello() else {
            self.counters.drops.malformed_hello += 1;
            return;
        };
        if !self.make_room(now, source_of(&self.limits, from.ip())) {
            return;
        }
        let index = self.open(now, from, hello);
        self.counters.handshakes.started += 1;
        // The library's own cookie exchange, on the hello the client sent first: its
        // HelloVerifyRequest carries our cookie and is not sent (the client has ours).
        let instant = self.clock.instant(now);
        let s = &mut self.sessions[index];
        let shown = lend(&mut self.rng, Some(cookie), || {
            s.endpoint
                .read(instant, from, None, first.as_slice().into())
        });
        if shown.is_err() {
            self.counters.handshakes.failed += 1;
            return self.remove(index);
        }
        self.drain_transmits(index, false);
        self.feed(now, index, hello.record());
    }

    /// Whether a newcomer from `source` may open a session, once the oldest handshakes the
    /// bounds ask for have made room (`admission.rs`).
    fn make_room(&mut self, now: Timestamp, source: SourcePrefix) -> bool {
        loop {
            match self.admission.verdict(&self.limits, source, now) {
                Verdict::Admit => return true,
                Verdict::Evict(index, bound) => {
                    self.counters.evicted.count(bound);
                    self.end(index, Ending::Evicted);
                }
                Verdict::Refuse(bound) => {
                    self.counters.refused.count(bound);
                    self.counters.handshakes.refused += 1;
                    return false;
                }
            }
        }
    }

    /// Our cookie for `hello`, if it echoes it.
    fn valid_cookie(
        &self,
        now: Timestamp,
        from: SocketAddr,
        hello: &ClientHello<'_>,
    ) -> Option<[u8; COOKIE_LEN]> {
        let parts = hello.without_cookie();
        let echoed = hello.cookie();
        (echoed.len() == COOKIE_LEN && self.jar.is_valid(now, from, parts, echoed))
            .then(|| echoed.try_into().expect("length checked"))
    }

    fn verify_request(&mut self, now: Timestamp, from: SocketAddr, hello: &ClientHello<'_>) {
        let cookie = self.jar.cookie(now, from, hello.without_cookie());
        self.transmits
            .push_back((from, hello.verify_request(&cookie)));
        self.counters.handshakes.verify_requests += 1;
    }

    fn count_refused_hello(&mut self, e: HelloError) {
        let drops = &mut self.counters.drops;
        match e {
            HelloError::Fragmented => drops.fragmented_hello += 1,
            HelloError::Malformed => drops.malformed_hello += 1,
            HelloError::Truncated | HelloError::NotClientHello => drops.no_session += 1,
        }
    }

    /// A new session for `from` in the handshake phase.
    fn open(&mut self, now: Timestamp, from: SocketAddr, hello: &ClientHello<'_>) -> usize {
        self.next_generation = self.next_generation.wrapping_add(1);
        let endpoint = Endpoint::new(
            self.local,
            rtc_shared::TransportProtocol::UDP,
            Some(self.handshake.clone()),
        );
        let source = source_of(&self.limits, from.ip());
        let entry = self.sessions.vacant_entry();
        let age = self.admission.opened(entry.key(), source, now);
        let index = entry.key();
        entry.insert(Session {
            addr: from,
            source,
            age,
            generation: self.next_generation,
            endpoint,
            hello_random: hello.random(),
            seq_shift: hello.record_seq.saturating_sub(1),
            phase: Phase::Handshaking {
                until: now + self.limits.handshake_timeout,
            },
            last_heard: now,
            timer: None,
        });
        self.by_addr.insert(from, index);
        index
    }

    /// Gives a datagram to session `index`'s library state.
    fn feed(&mut self, now: Timestamp, index: usize, datagram: &[u8]) {
        let instant = self.clock.instant(now);
        let s = &mut self.sessions[index];
        let (addr, established) = (s.addr, matches!(s.phase, Phase::Established { .. }));
        let read = lend(&mut self.rng, None, || {
            s.endpoint.read(instant, addr, None, datagram.into())
        });
        match read {
            Ok(events) => self.take_events(now, index, events),
            // An established session keeps going past a record it could not take: a forged
            // record must not end it, and it is answered with nothing (RFC 6347 §4.1.2.1).
            Err(_) if established => {
                self.counters.drops.rejected_records += 1;
                self.drain_transmits(index, false);
            }
            Err(_) => {
                // The alert the library queued (a wrong key: decrypt_error) goes out.
                self.drain_transmits(index, true);
                self.counters.handshakes.failed += 1;
                self.end(index, Ending::HandshakeFailed);
            }
        }
    }

    fn take_events(&mut self, now: Timestamp, index: usize, events: Vec<EndpointEvent>) {
        let id = self.id(index);
        for event in events {
            match event {
                EndpointEvent::HandshakeComplete => {
                    let s = &mut self.sessions[index];
                    s.phase = Phase::Established { last_record: now };
                    s.last_heard = now;
                    self.admission.established(index, s.age, s.source);
                    self.counters.handshakes.completed += 1;
                    self.events.push_back(DtlsEvent::Established(id, s.addr));
                }
                EndpointEvent::ApplicationData(data) => {
                    let s = &mut self.sessions[index];
                    s.phase = Phase::Established { last_record: now };
                    s.last_heard = now;
                    self.counters.datagrams_in += 1;
                    self.received.push_back((id, data.to_vec()));
                }
                EndpointEvent::PeerClosed => {
                    self.drain_transmits(index, true);
                    return self.end(index, Ending::Closed);
                }
                _ => {}
            }
        }
        self.drain_transmits(index, true);
        self.rearm(index);
    }

    /// Moves what session `index` queued to the transmit queue, or drops it.
    fn drain_transmits(&mut self, index: usize, send: bool) {
        let s = &mut self.sessions[index];
        while let Some(t) = s.endpoint.poll_transmit() {
            if send {
                let mut record = t.message.to_vec();
                shift_plaintext_seqs(&mut record, s.seq_shift);
                self.transmits.push_back((s.addr, record));
            }
        }
    }

    /// Keeps session `index`'s wheel timer at its earliest deadline.
    fn rearm(&mut self, index: usize) {
        let s = &mut self.sessions[index];
        let phase_deadline = match s.phase {
            Phase::Handshaking { until } => until,
            Phase::Established { last_record } => last_record + self.limits.idle_timeout,
        };
        let retransmit = s
            .endpoint
            .poll_timeout(&s.addr)
            .map(|i| self.clock.timestamp(i));
        let wanted = retransmit.map_or(phase_deadline, |r| r.min(phase_deadline));
        if let Some(id) = s.timer {
            if self.timers.deadline(id) == Some(wanted) {
                return;
            }
            self.timers.cancel(id);
        }
        s.timer = Some(self.timers.insert(wanted, index));
    }

    fn end(&mut self, index: usize, why: Ending) {
        let s = &self.sessions[index];
        let (id, addr) = (self.id(index), s.addr);
        if matches!(s.phase, Phase::Established { .. }) {
            let endings = &mut self.counters.endings;
            match why {
                Ending::Closed => endings.closed += 1,
                Ending::Idle => endings.idle += 1,
                Ending::Replaced => endings.replaced += 1,
                Ending::HandshakeFailed | Ending::HandshakeTimeout | Ending::Evicted => {}
            }
        } else if why == Ending::HandshakeTimeout {
            self.counters.handshakes.timed_out += 1;
        }
        self.events.push_back(DtlsEvent::Ended(id, addr, why));
        self.remove(index);
    }

    fn remove(&mut self, index: usize) {
        let s = self.sessions.remove(index);
        if let Some(id) = s.timer {
            self.timers.cancel(id);
        }
        self.by_addr.remove(&s.addr);
        self.admission.removed(index, s.age, s.source);
    }

    fn id(&self, index: usize) -> SessionId {
        SessionId::new(index as u32, self.sessions[index].generation)
    }
}
