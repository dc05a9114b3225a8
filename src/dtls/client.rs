//! The proxy's coaps sessions towards an origin (`--upstream coaps://`, RFC 7252 §9), as a
//! sans-IO state machine: it takes `now`, the engine's plaintext datagrams and what the
//! origin sent, and gives back records to send, decrypted datagrams, events and its next
//! deadline.
//!
//! **One session per upstream endpoint.** The engine already spreads its requests over
//! endpoints, each a socket of its own connected to the origin, and keeps Message IDs per
//! endpoint. A session is bound to its endpoint's socket, so its
//! Message IDs are per session with the same reasoning: a Message ID is matched within one
//! session and epoch (RFC 7252 §9.1.1), as within one source port for plain UDP.
//!
//! **Sessions are kept and reused**; none is opened before the endpoint's first datagram.
//! While one is being set up, the engine's datagrams wait in a bounded queue (a
//! retransmission replaces the copy it repeats) and go out in order once it is up.
//!
//! **A dead session is set up again without losing the queue.** A session ends when the
//! origin closes it, when it is idle, or when it is *stale*: the engine retransmits a
//! datagram and the origin has sent no record since (for at least [`STALE_AFTER`]), as after
//! a restart that forgot the session (a server drops records of sessions it does not know). The next datagram then starts a
//! new handshake and waits for it. A handshake that times out is tried again with backoff as
//! long as datagrams wait; one the origin refuses (a wrong key, a certificate that does not
//! verify) empties the queue and is reported, so the engine answers 5.02 at once.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use rtc_dtls::config::HandshakeConfig;
use rtc_dtls::crypto_provider::RTCCryptoProvider;
use rtc_dtls::endpoint::{Endpoint, EndpointEvent};

use super::clock::Clock;
use super::config::{client_handshake, DtlsClientConfig};
use super::counters::ClientCounters;
use super::draws::{lend, SeededProvider};
use crate::time::Timestamp;
use crate::timer::{TimerId, TimerWheel};

/// An established session is taken for dead when the engine repeats a datagram (the same
/// Message ID: a retransmission) at least this long after the first datagram the origin has
/// not answered with any record. A CoAP server acknowledges a confirmable request at once or
/// within ACK_TIMEOUT (RFC 7252 §5.2.2), so a retransmission that finds nothing heard since
/// means the origin no longer knows the session; the delay keeps a quick retransmission
/// policy from setting up sessions over a lost datagram or two.
pub const STALE_AFTER: Duration = Duration::from_secs(1);

/// The Message IDs kept of the datagrams sent since the origin's latest record.
const UNANSWERED_MIDS: usize = 16;

/// Datagrams that wait for a session, per endpoint; past it the oldest is dropped.
pub const MAX_QUEUED: usize = 64;

/// The pause after the first failed handshake; it doubles with each failure up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What happened to an endpoint's session, for the driver to log and the engine to learn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientEvent {
    /// A session is up; the datagrams that waited are sent.
    Established(u32),
    /// The origin refused the handshake: the waiting datagrams are dropped.
    Refused(u32, Refusal),
    /// The session ended; the next datagram sets up another.
    Ended(u32, SessionEnd),
}

/// How a handshake was refused, for the operator's log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The origin answered but never finished: it could not decrypt our Finished, which
    /// is what a wrong PSK looks like (RFC 6347 §4.1.2.7 drops it without an alert).
    Unfinished,
    /// The handshake failed on a record: an alert, or a certificate we do not trust.
    Failed(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Unfinished => f.write_str("answered but never finished (a wrong key?)"),
            Refusal::Failed(why) => write!(f, "failed: {why}"),
        }
    }
}

/// Why an endpoint's session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// The origin sent close_notify.
    Closed,
    /// No record either way for the idle timeout.
    Idle,
    /// No record from the origin for [`STALE_AFTER`] after an unanswered datagram.
    Stale,
    /// The handshake did not finish in time (it is tried again while datagrams wait).
    HandshakeTimeout,
}

/// Where an endpoint's session is; each state carries what it needs and its deadline.
enum State {
    /// No session: the next datagram starts a handshake.
    Idle,
    /// A handshake is under way; datagrams wait. `heard`: the origin has answered it.
    Handshaking {
        endpoint: Box<Endpoint>,
        until: Timestamp,
        heard: bool,
    },
    /// The session carries CoAP.
    Established {
        endpoint: Box<Endpoint>,
        /// The latest record either way, for the idle timeout.
        last_record: Timestamp,
        /// The datagrams sent since the origin's latest record.
        unanswered: Unanswered,
    },
    /// A handshake failed; datagrams wait for the next try at `until`.
    Backoff { until: Timestamp },
}

/// What was sent since the origin's latest record: when the first went, and the Message IDs.
#[derive(Default)]
struct Unanswered {
    since: Option<Timestamp>,
    mids: VecDeque<[u8; 2]>,
}

impl Unanswered {
    /// Whether sending `datagram` at `now` shows the session dead (see [`STALE_AFTER`]).
    fn repeats(&self, now: Timestamp, datagram: &[u8]) -> bool {
        let waited = self.since.is_some_and(|t| now >= t + STALE_AFTER);
        waited && mid(datagram).is_some_and(|m| self.mids.contains(&m))
    }

    fn sent(&mut self, now: Timestamp, datagram: &[u8]) {
        self.since.get_or_insert(now);
        if let Some(m) = mid(datagram) {
            if self.mids.len() == UNANSWERED_MIDS {
                self.mids.pop_front();
            }
            self.mids.push_back(m);
        }
    }

    fn heard(&mut self) {
        self.since = None;
        self.mids.clear();
    }
}

/// A CoAP datagram's Message ID (RFC 7252 §3).
fn mid(datagram: &[u8]) -> Option<[u8; 2]> {
    datagram.get(2..4).map(|m| [m[0], m[1]])
}

struct Leg {
    local: SocketAddr,
    remote: SocketAddr,
    state: State,
    queue: VecDeque<Vec<u8>>,
    timer: Option<TimerId>,
    /// Handshakes failed in a row, for the backoff.
    failures: u32,
}

/// The coaps sessions of one upstream's endpoints, by endpoint number.
pub struct DtlsClients {
    handshake: Arc<HandshakeConfig>,
    config: DtlsClientConfig,
    rng: Option<StdRng>,
    clock: Clock,
    legs: Vec<Option<Leg>>,
    timers: TimerWheel<u32>,
    transmits: VecDeque<(u32, Vec<u8>)>,
    received: VecDeque<(u32, Vec<u8>)>,
    events: VecDeque<ClientEvent>,
    counters: ClientCounters,
}

impl DtlsClients {
    /// Sessions made with `config`. `seed` drives the library's draws; `clock` is one
    /// `Instant` and the `Timestamp` read with it.
    pub fn new(
        config: &DtlsClientConfig,
        seed: u64,
        crypto: Arc<dyn RTCCryptoProvider>,
        clock: (Instant, Timestamp),
    ) -> Result<Self, String> {
        let provider: Arc<dyn RTCCryptoProvider> = Arc::new(SeededProvider::new(crypto));
        Ok(DtlsClients {
            handshake: Arc::new(client_handshake(&config.credentials, provider)?),
            config: config.clone(),
            rng: Some(StdRng::seed_from_u64(seed)),
            clock: Clock::new(clock),
            legs: Vec::new(),
            timers: TimerWheel::new(),
            transmits: VecDeque::new(),
            received: VecDeque::new(),
            events: VecDeque::new(),
            counters: ClientCounters::default(),
        })
    }

    /// Endpoint `key` opened, from `local` to the origin at `remote`; no session yet.
    pub fn open(&mut self, key: u32, local: SocketAddr, remote: SocketAddr) {
        self.close_quietly(key);
        let index = key as usize;
        if self.legs.len() <= index {
            self.legs.resize_with(index + 1, || None);
        }
        self.legs[index] = Some(Leg {
            local,
            remote,
            state: State::Idle,
            queue: VecDeque::new(),
            timer: None,
            failures: 0,
        });
    }

    /// Endpoint `key` closes: its session says close_notify (RFC 5246 §7.2.1) and is gone.
    pub fn close(&mut self, now: Timestamp, key: u32) {
        let instant = self.clock.instant(now);
        if let Some(Leg {
            state: State::Established { endpoint, .. },
            remote,
            ..
        }) = self.legs.get_mut(key as usize).and_then(Option::as_mut)
        {
            let remote = *remote;
            let endpoint = &mut **endpoint;
            lend(&mut self.rng, None, || endpoint.stop(instant, remote));
            self.drain(key);
        }
        self.close_quietly(key);
    }

    /// Endpoint `key`'s origin is unreachable (ICMP): the session and the queue are dropped,
    /// as the engine answers the requests that wait.
    pub fn reset(&mut self, key: u32) {
        if let Some(leg) = self.leg_mut(key) {
            leg.state = State::Idle;
            leg.queue.clear();
        }
        self.rearm(key);
    }

    /// A CoAP datagram for endpoint `key`'s origin: encrypted if the session is up, else
    /// queued (and a handshake started if none is under way).
    pub fn send(&mut self, now: Timestamp, key: u32, plaintext: &[u8]) {
        let Some(leg) = self.leg_mut(key) else {
            return;
        };
        if let State::Established { unanswered, .. } = &leg.state {
            if unanswered.repeats(now, plaintext) {
                leg.state = State::Idle;
                self.counters.endings.stale += 1;
                self.events
                    .push_back(ClientEvent::Ended(key, SessionEnd::Stale));
            }
        }
        let leg = self.legs[key as usize].as_mut().expect("looked up above");
        if matches!(leg.state, State::Established { .. }) {
            return self.write(now, key, plaintext);
        }
        if enqueue(&mut leg.queue, plaintext) {
            self.counters.queue_dropped += 1;
        }
        if matches!(leg.state, State::Idle) {
            self.start_handshake(now, key);
        }
    }

    /// A datagram from endpoint `key`'s origin.
    pub fn handle_datagram(&mut self, now: Timestamp, key: u32, datagram: &[u8]) {
        if !super::hello::frames_records(datagram) {
            self.counters.rejected_records += 1;
            return;
        }
        let instant = self.clock.instant(now);
        let Some(leg) = self.legs.get_mut(key as usize).and_then(Option::as_mut) else {
            return;
        };
        let remote = leg.remote;
        let (endpoint, handshaking) = match &mut leg.state {
            State::Handshaking {
                endpoint, heard, ..
            } => {
                *heard = true;
                (&mut **endpoint, true)
            }
            State::Established { endpoint, .. } => (&mut **endpoint, false),
            State::Idle | State::Backoff { .. } => {
                self.counters.no_session += 1;
                return;
            }
        };
        let read = lend(&mut self.rng, None, || {
            endpoint.read(instant, remote, None, datagram.into())
        });
        self.drain(key);
        match read {
            Ok(events) => self.take_events(now, key, events),
            // A record an established session cannot take is dropped, the session kept: a
            // forged record must not end it (RFC 6347 §4.1.2.1).
            Err(_) if !handshaking => self.counters.rejected_records += 1,
            Err(e) => self.refused(now, key, Refusal::Failed(e.to_string())),
        }
        self.rearm(key);
    }

    /// Runs the timers due at `now`: handshake retransmissions (RFC 6347 §4.2.4) and
    /// deadlines, idle timeouts and backoffs.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        while let Some(expired) = self.timers.poll(now) {
            let key = expired.value;
            if let Some(leg) = self.leg_mut(key) {
                leg.timer = None;
                self.on_deadline(now, key);
                self.rearm(key);
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next run.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.timers.next_deadline()
    }

    /// The next record to send, and the endpoint whose socket sends it.
    pub fn poll_transmit(&mut self) -> Option<(u32, Vec<u8>)> {
        self.transmits.pop_front()
    }

    /// The next decrypted CoAP datagram, and the endpoint it came to.
    pub fn poll_received(&mut self) -> Option<(u32, Vec<u8>)> {
        self.received.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// The counters.
    pub fn counters(&self) -> ClientCounters {
        self.counters
    }

    /// Sessions at once: (established, handshaking).
    pub fn session_counts(&self) -> (usize, usize) {
        let legs = self.legs.iter().flatten();
        legs.fold((0, 0), |(up, shaking), leg| match leg.state {
            State::Established { .. } => (up + 1, shaking),
            State::Handshaking { .. } => (up, shaking + 1),
            _ => (up, shaking),
        })
    }

    /// Whether endpoint `key` is one of these sessions'.
    pub fn has(&self, key: u32) -> bool {
        matches!(self.legs.get(key as usize), Some(Some(_)))
    }

    fn leg_mut(&mut self, key: u32) -> Option<&mut Leg> {
        self.legs.get_mut(key as usize).and_then(Option::as_mut)
    }

    fn close_quietly(&mut self, key: u32) {
        if let Some(leg) = self.legs.get_mut(key as usize).and_then(Option::take) {
            if let Some(timer) = leg.timer {
                self.timers.cancel(timer);
            }
        }
    }

    /// Encrypts `plaintext` on the established session of `key`.
    fn write(&mut self, now: Timestamp, key: u32, plaintext: &[u8]) {
        let instant = self.clock.instant(now);
        let leg = self.legs[key as usize].as_mut().expect("caller checked");
        let remote = leg.remote;
        let State::Established {
            endpoint,
            last_record,
            unanswered,
        } = &mut leg.state
        else {
            return;
        };
        let endpoint = &mut **endpoint;
        let written = lend(&mut self.rng, None, || {
            endpoint.write(instant, remote, plaintext)
        });
        if written.is_err() {
            self.counters.rejected_writes += 1;
            return;
        }
        *last_record = now;
        unanswered.sent(now, plaintext);
        self.counters.datagrams_out += 1;
        self.drain(key);
        self.rearm(key);
    }

    fn start_handshake(&mut self, now: Timestamp, key: u32) {
        let instant = self.clock.instant(now);
        let until = now + self.config.handshake_timeout;
        let handshake = self.handshake.clone();
        let leg = self.legs[key as usize].as_mut().expect("caller checked");
        let remote = leg.remote;
        let mut endpoint = Box::new(Endpoint::new(
            leg.local,
            rtc_shared::TransportProtocol::UDP,
            None,
        ));
        let started = lend(&mut self.rng, None, || {
            endpoint.connect(instant, remote, handshake, None)
        });
        self.counters.handshakes.started += 1;
        leg.state = State::Handshaking {
            endpoint,
            until,
            heard: false,
        };
        self.drain(key);
        if let Err(e) = started {
            self.refused(now, key, Refusal::Failed(e.to_string()));
        }
        self.rearm(key);
    }

    fn take_events(&mut self, now: Timestamp, key: u32, events: Vec<EndpointEvent>) {
        for event in events {
            let leg = self.legs[key as usize].as_mut().expect("caller checked");
            match event {
                EndpointEvent::HandshakeComplete => {
                    let endpoint = match std::mem::replace(&mut leg.state, State::Idle) {
                        State::Handshaking { endpoint, .. } => endpoint,
                        other => {
                            leg.state = other;
                            continue;
                        }
                    };
                    leg.state = State::Established {
                        endpoint,
                        last_record: now,
                        unanswered: Unanswered::default(),
                    };
                    leg.failures = 0;
                    self.counters.handshakes.completed += 1;
                    self.events.push_back(ClientEvent::Established(key));
                    self.flush_queue(now, key);
                }
                EndpointEvent::ApplicationData(data) => {
                    if let State::Established {
                        last_record,
                        unanswered,
                        ..
                    } = &mut leg.state
                    {
                        *last_record = now;
                        unanswered.heard();
                    }
                    self.counters.datagrams_in += 1;
                    self.received.push_back((key, data.to_vec()));
                }
                EndpointEvent::PeerClosed => {
                    leg.state = State::Idle;
                    self.counters.endings.closed += 1;
                    self.events
                        .push_back(ClientEvent::Ended(key, SessionEnd::Closed));
                    if !leg.queue.is_empty() {
                        self.start_handshake(now, key);
                    }
                    return;
                }
                _ => {}
            }
        }
    }

    /// Sends what waited for the session, in order.
    fn flush_queue(&mut self, now: Timestamp, key: u32) {
        let leg = self.legs[key as usize].as_mut().expect("caller checked");
        let queued = std::mem::take(&mut leg.queue);
        for datagram in queued {
            self.write(now, key, &datagram);
        }
    }

    /// A deadline of `key`'s state came (or its retransmission timer).
    fn on_deadline(&mut self, now: Timestamp, key: u32) {
        let instant = self.clock.instant(now);
        let idle = self.config.idle_timeout;
        let leg = self.legs[key as usize].as_mut().expect("caller checked");
        let remote = leg.remote;
        match &mut leg.state {
            State::Handshaking { until, heard, .. } if now >= *until => {
                let heard = *heard;
                self.unfinished(now, key, heard)
            }
            State::Handshaking {
                endpoint, heard, ..
            } => {
                let (endpoint, heard) = (&mut **endpoint, *heard);
                let retransmitted = lend(&mut self.rng, None, || {
                    endpoint.handle_timeout(remote, instant)
                });
                self.drain(key);
                if retransmitted.is_err() {
                    self.unfinished(now, key, heard);
                }
            }
            State::Established {
                endpoint,
                last_record,
                ..
            } if now >= *last_record + idle => {
                let endpoint = &mut **endpoint;
                lend(&mut self.rng, None, || endpoint.stop(instant, remote));
                self.drain(key);
                let leg = self.legs[key as usize].as_mut().expect("caller checked");
                leg.state = State::Idle;
                self.counters.endings.idle += 1;
                self.events
                    .push_back(ClientEvent::Ended(key, SessionEnd::Idle));
            }
            State::Backoff { until } if now >= *until => {
                leg.state = State::Idle;
                if !leg.queue.is_empty() {
                    self.start_handshake(now, key);
                }
            }
            _ => {}
        }
    }

    /// The handshake did not finish in time. If the origin answered it, it does not take our
    /// keys: a peer drops a Finished it cannot decrypt without a word (RFC 6347 §4.1.2.7),
    /// so a wrong PSK looks like this, and is refused. If it never answered, it is not there
    /// (yet): try again after a pause while datagrams wait.
    fn unfinished(&mut self, now: Timestamp, key: u32, heard: bool) {
        if heard {
            return self.refused(now, key, Refusal::Unfinished);
        }
        self.counters.handshakes.timed_out += 1;
        self.events
            .push_back(ClientEvent::Ended(key, SessionEnd::HandshakeTimeout));
        self.back_off(now, key);
    }

    /// The origin refused the handshake: what waits is dropped and reported, and the next
    /// try waits too (refused again at once would only load the origin).
    fn refused(&mut self, now: Timestamp, key: u32, why: Refusal) {
        self.counters.handshakes.failed += 1;
        self.events.push_back(ClientEvent::Refused(key, why));
        if let Some(leg) = self.leg_mut(key) {
            leg.queue.clear();
        }
        self.back_off(now, key);
    }

    fn back_off(&mut self, now: Timestamp, key: u32) {
        let leg = self.legs[key as usize].as_mut().expect("caller checked");
        let pause = FIRST_BACKOFF
            .saturating_mul(1 << leg.failures.min(5))
            .min(MAX_BACKOFF);
        leg.failures = leg.failures.saturating_add(1);
        leg.state = State::Backoff { until: now + pause };
    }

    /// Moves what `key`'s library state queued to the transmit queue.
    fn drain(&mut self, key: u32) {
        let Some(leg) = self.legs.get_mut(key as usize).and_then(Option::as_mut) else {
            return;
        };
        let endpoint = match &mut leg.state {
            State::Handshaking { endpoint, .. } | State::Established { endpoint, .. } => endpoint,
            State::Idle | State::Backoff { .. } => return,
        };
        while let Some(t) = endpoint.poll_transmit() {
            self.transmits.push_back((key, t.message.to_vec()));
        }
    }

    /// Keeps `key`'s wheel timer at its state's earliest deadline.
    fn rearm(&mut self, key: u32) {
        let idle = self.config.idle_timeout;
        let clock = self.clock;
        let Some(leg) = self.legs.get_mut(key as usize).and_then(Option::as_mut) else {
            return;
        };
        let wanted = match &leg.state {
            State::Idle => None,
            State::Handshaking {
                endpoint, until, ..
            } => Some(
                (endpoint.poll_timeout(&leg.remote))
                    .map_or(*until, |i| clock.timestamp(i).min(*until)),
            ),
            State::Established { last_record, .. } => Some(*last_record + idle),
            State::Backoff { until } => Some(*until),
        };
        if let Some(id) = leg.timer {
            if wanted.is_some() && self.timers.deadline(id) == wanted {
                return;
            }
            self.timers.cancel(id);
            leg.timer = None;
        }
        if let Some(at) = wanted {
            leg.timer = Some(self.timers.insert(at, key));
        }
    }
}

/// Queues `datagram`, replacing a copy it repeats (a retransmission: the same Message ID,
/// RFC 7252 §4.5); true if the oldest had to go to make room.
fn enqueue(queue: &mut VecDeque<Vec<u8>>, datagram: &[u8]) -> bool {
    if let Some(repeat) = queue
        .iter_mut()
        .find(|q| mid(q).is_some() && mid(q) == mid(datagram))
    {
        repeat.clear();
        repeat.extend_from_slice(datagram);
        return false;
    }
    let full = queue.len() >= MAX_QUEUED;
    if full {
        queue.pop_front();
    }
    queue.push_back(datagram.to_vec());
    full
}
