//! The proxy engine: exchanges, their timers, and what goes out. Sans-IO: datagrams and `now`
//! come in through `handle_*`, datagrams leave through [`Proxy::poll_transmit`], sockets are
//! asked for through [`Proxy::poll_endpoint_event`], and the driver asks
//! [`Proxy::poll_timeout`] when to call [`Proxy::handle_timeout`].
//!
//! The client leg lives in `client_leg.rs` (requests in) and `delivery.rs` (answers out), the
//! upstream leg in `upstream_leg.rs`, the upstream sockets and their Message IDs in
//! `endpoints.rs`, the kept answers in `answer_cache.rs`; this file holds the state they share
//! and the life cycle of an exchange (start, give up, finish, retire).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::coap::{params, Code, Message, MessageType};
use crate::stats::LatencyHistogram;
use crate::time::Timestamp;

use super::answer_cache::{AnswerRing, Bound, ClientKey, Gone, Replay};
use super::budget::SendBudget;
use super::cache::{CacheCounters, ResponseCache};
use super::clients::{ClientSlot, Clients};
use super::counters::Load;
use super::endpoints::Upstream;
pub use super::endpoints::UpstreamStats;
use super::endpoints::{EndpointEvent, EndpointId, Endpoints, UpstreamId};
use super::events::{Events, ProxyEvent};
use super::exchange::{CoapToken, Exchange, ExchangeKey, Reply, State, TimerKind};
use super::fanout::Fanout;
use super::gate::SendGate;
use super::index::Index;
use super::keyed_hash::{KeyedMap, KeyedState};
use super::local_answer::{encode_local, LocalAnswer, LOCAL_ANSWER_LIFETIME};
use super::outbox::Outbox;
pub use super::outbox::{Destination, Transmit};
use super::peer::Peer;
use super::table::Exchanges;
use super::validation::SourceValidation;
use super::{Counters, ProxyConfig};

/// What the duplicate index knows of a client request (source, token, MID).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// Still being worked on.
    Live(ExchangeKey),
    /// Answered; the answer is this entry of the answer cache.
    Answered(u64),
    /// Answered by the proxy itself without going upstream; this entry of the local answers.
    AnsweredLocally(u64),
}

/// Kept answers expire in batches: at most this late, and one wake-up per batch rather than
/// one per answer at high request rates.
const EXPIRY_BATCH: Duration = Duration::from_millis(100);

/// The engine's randomness, given rather than drawn: the driver draws it from the OS (or takes
/// `--seed`), tests fix it. The core never touches OS randomness, and a seeded run replays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seeds {
    /// Seeds the jitter, the tokens and the first Message IDs.
    pub rng: u64,
    /// The secrets of the engine's maps' hash: keep them random (not from a seed a user
    /// may publish), or clients could choose keys that collide.
    pub hash: [u64; 2],
}

/// The sans-IO CoAP forwarding proxy. See the module docs of [`crate::proxy`].
pub struct Proxy {
    pub(super) config: ProxyConfig,
    /// The live exchanges and their timers (`table.rs`).
    pub(super) exchanges: Exchanges,
    /// Client retransmission detection: every request live or answered, and no other. An
    /// answer that leaves its store takes its entry with it (`forget_answer`). (It was once
    /// swept in bulk, to save a lookup per answer; with per-client shares evicting all the
    /// time, the sweeps came every few thousand requests and paused the loop long enough to
    /// overflow the client socket's receive buffer.)
    pub(super) by_client: Index<ClientKey, Seen>,
    /// Piggybacked answers, empty ACKs and RSTs from upstream: (endpoint, our MID).
    pub(super) by_upstream_mid: Index<(EndpointId, u16), ExchangeKey>,
    /// ACK/RST from clients to our CON/NON answers: (client, our MID).
    pub(super) by_client_mid: Index<(Peer, u16), ExchangeKey>,
    /// Live observations by (client, client token), for deregistration (RFC 7641 §3.6).
    pub(super) observers: KeyedMap<(Peer, CoapToken), ExchangeKey>,
    pub(super) upstreams: Vec<Upstream>,
    pub(super) endpoints: Endpoints,
    pub(super) out: Outbox,
    /// Whether a datagram may go to a client now (`gate.rs`).
    pub(super) gate: SendGate,
    pub(super) rng: SmallRng,
    pub(super) counters: Counters,
    /// Answers to requests that went upstream, for the clients' retransmissions: kept
    /// EXCHANGE_LIFETIME (NON answers too, so all expire in the order they came), bounded in
    /// all and per client, in answers and in bytes.
    pub(super) answers: AnswerRing<ClientKey>,
    /// Answers the proxy made without asking an upstream (4.xx, 5.03, 5.05, 5.08): cheap to
    /// make again, so kept only [`LOCAL_ANSWER_LIFETIME`], and apart, so that a flood of them
    /// never pushes a real answer out of `answers`.
    pub(super) local_answers: AnswerRing<ClientKey>,
    /// Separate responses and notifications the upstreams sent as CON and we acknowledged: a
    /// retransmission (our ACK was lost) is acknowledged again and not taken twice (§4.5).
    pub(super) upstream_cons: AnswerRing<(EndpointId, u16)>,
    pub(super) by_upstream_con: Index<(EndpointId, u16), u64>,
    /// Upstream responses kept to answer other requests for the same thing (`--cache-size`;
    /// RFC 7252 §5.6). Not `answers`, which replays one answer to one request's copies.
    pub(super) cache: ResponseCache,
    /// Observers of one resource sharing one upstream registration (with the cache on).
    pub(super) fanout: Fanout,
    /// Answered exchanges still delivering a CON answer, oldest first (with stale keys of
    /// those already delivered), and how many are live: bounded like the answer cache.
    pub(super) delivering: VecDeque<ExchangeKey>,
    pub(super) delivering_count: usize,
    pub(super) inflight: usize,
    /// Bytes of the request copies exchanges keep (`Exchange::request`), within
    /// `max_inflight_bytes`.
    pub(super) inflight_bytes: usize,
    /// Bytes of the answers live exchanges keep (`Exchange::answer`): held for a client's
    /// proof, being delivered as CONs, an observation's latest notification.
    pub(super) answer_bytes: usize,
    pub(super) observations: usize,
    pub(super) clients: Clients,
    /// Diagnostics for the driver to log.
    pub(super) events: Events,
    /// Reused encode buffer.
    pub(super) scratch: Vec<u8>,
    /// Shutting down: new requests are refused with 5.03.
    pub(super) draining: bool,
    /// How late retransmission deadlines were handled (`now` minus the deadline): the whole
    /// way from the deadline through the driver's timer and this wheel to the send decision.
    pub(super) retransmit_lateness: LatencyHistogram,
}

impl Proxy {
    /// A proxy for a validated configuration. It asks for each upstream's first endpoints at
    /// once: drain [`poll_endpoint_event`](Self::poll_endpoint_event) before any traffic.
    pub fn new(config: ProxyConfig, seeds: Seeds) -> Self {
        let mut rng = SmallRng::seed_from_u64(seeds.rng);
        let hash = KeyedState::new(seeds.hash);
        let mut targets: Vec<SocketAddr> = config.routing.upstream.into_iter().collect();
        targets.extend(config.routing.allow.iter().map(|a| a.addr));
        let endpoints = Endpoints::new(
            &targets,
            config.upstream_exchange_lifetime,
            config.limits.max_upstream_endpoints,
            rng.random(),
        );
        let bound = Bound {
            count: config.kept.max_cached,
            bytes: config.kept.max_cached_bytes,
        };
        let share = Bound {
            count: config.kept.max_cached_per_client,
            bytes: config.kept.max_cached_bytes_per_client,
        };
        let cache = ResponseCache::new(config.cache_size, [seeds.hash[1], !seeds.hash[0]]);
        let clients = Clients::new(rng.random(), &hash);
        let echo_key = crate::coap::echo::EchoKey::new([seeds.hash[1], seeds.hash[0] ^ 0xec40]);
        let budget = (config.client_budget.bytes_per_sec != 0)
            .then(|| SendBudget::new(config.client_budget, &hash));
        let gate = SendGate::new(SourceValidation::new(echo_key, &hash), budget);
        Proxy {
            config,
            exchanges: Exchanges::new(),
            by_client: Index::new(hash.clone()),
            by_upstream_mid: Index::new(hash.clone()),
            by_client_mid: Index::new(hash.clone()),
            observers: hash.map(),
            upstreams: (targets.into_iter())
                .map(|addr| Upstream { addr, inflight: 0 })
                .collect(),
            endpoints,
            out: Outbox::default(),
            gate,
            rng,
            counters: Counters::default(),
            retransmit_lateness: LatencyHistogram::default(),
            answers: AnswerRing::with_shares(params::EXCHANGE_LIFETIME, bound, share),
            local_answers: AnswerRing::with_shares(LOCAL_ANSWER_LIFETIME, bound, share),
            upstream_cons: AnswerRing::new(params::MAX_TRANSMIT_WAIT, bound),
            by_upstream_con: Index::new(hash.clone()),
            cache,
            fanout: Fanout::new(&hash),
            delivering: VecDeque::new(),
            delivering_count: 0,
            inflight: 0,
            inflight_bytes: 0,
            answer_bytes: 0,
            observations: 0,
            clients,
            events: Events::default(),
            scratch: Vec::with_capacity(1500),
            draining: false,
        }
    }

    /// The next datagram to send, if any, handed to `send` with where it goes (without a
    /// copy); returns what `send` returned.
    pub fn poll_transmit_with<R>(
        &mut self,
        send: impl FnOnce(Destination, &[u8]) -> R,
    ) -> Option<R> {
        self.out.pop_with(send)
    }

    /// The next datagram as an owned [`Transmit`], for harnesses (tests, simulations) that
    /// keep what they send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.poll_transmit_with(|to, payload| Transmit {
            to,
            payload: payload.to_vec(),
        })
    }

    /// The next upstream socket to open or close. Handle these before the datagrams of
    /// [`poll_transmit`](Self::poll_transmit): nothing is sent from an endpoint before its
    /// socket is confirmed, and none is closed while anything may still go out of it.
    pub fn poll_endpoint_event(&mut self) -> Option<EndpointEvent> {
        self.endpoints.poll_event()
    }

    /// The next diagnostic for the driver to log, if any (see [`ProxyEvent`]).
    pub fn poll_event(&mut self) -> Option<ProxyEvent> {
        self.events.pop()
    }

    /// The socket asked for by [`EndpointEvent::Open`] is open: the endpoint may be used.
    pub fn endpoint_opened(&mut self, now: Timestamp, id: EndpointId) {
        self.endpoints.opened(now, id);
    }

    /// The socket asked for by [`EndpointEvent::Open`] could not be opened (the reason is the
    /// driver's to log); another is asked for a little later.
    pub fn endpoint_failed(&mut self, now: Timestamp, id: EndpointId) {
        self.endpoints.failed(now, id);
    }

    /// For in-process harnesses (simulations, tests, fuzzing): takes every pending endpoint
    /// event and confirms each [`EndpointEvent::Open`] as a driver that never fails would.
    /// Returns the events, so that a simulated network can follow the endpoints.
    pub fn accept_endpoint_events(&mut self, now: Timestamp) -> Vec<EndpointEvent> {
        let mut events = Vec::new();
        while let Some(event) = self.poll_endpoint_event() {
            if let EndpointEvent::Open { id, .. } = event {
                self.endpoint_opened(now, id);
            }
            events.push(event);
        }
        events
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let batched = |t: Option<Timestamp>| t.map(|t| t + EXPIRY_BATCH);
        [
            self.exchanges.next_deadline(),
            batched(self.answers.next_expiry()),
            batched(self.local_answers.next_expiry()),
            batched(self.upstream_cons.next_expiry()),
            self.endpoints.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs every timer due at `now`. Calling it early or twice is harmless.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.gate.clock(now);
        while let Some(due) = self.exchanges.poll_due(now) {
            let Some(key) = due else {
                self.counters.traffic.stale_timer_events += 1;
                continue;
            };
            while let Some((kind, due)) = self.get_mut(key).and_then(|x| x.deadlines.take_due(now))
            {
                if matches!(
                    kind,
                    TimerKind::UpstreamRetransmit | TimerKind::ClientRetransmit
                ) {
                    let late = now.saturating_since(due);
                    self.retransmit_lateness
                        .record_nanos(late.as_nanos() as u64);
                }
                self.on_timer(now, key, kind);
            }
            self.exchanges.rearm(key);
        }
        self.expire_answers(now);
        self.endpoints.sweep(now);
    }

    /// Counters, with the gauges filled in.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters.clone();
        c.load = Load {
            live_exchanges: self.exchanges.len() as u64,
            in_flight: self.inflight as u64,
            in_flight_bytes: self.inflight_bytes as u64,
            exchange_answer_bytes: self.answer_bytes as u64,
        };
        c.kept.cached_answers = (self.answers.len() + self.local_answers.len()) as u64;
        c.kept.cached_answer_bytes = (self.answers.bytes() + self.local_answers.bytes()) as u64;
        c.kept.answers_too_large_to_keep =
            self.answers.too_large() + self.local_answers.too_large();
        c.observe.observations = self.observations as u64;
        c.traffic.events_dropped = self.events.dropped();
        self.gate.count(&mut c.proof);
        c
    }

    /// How late the retransmission timers (upstream and to clients) were handled.
    pub fn retransmit_lateness(&self) -> &LatencyHistogram {
        &self.retransmit_lateness
    }

    /// Each upstream's endpoints and Message IDs at `now` (for metrics).
    pub fn upstream_stats(&self, now: Timestamp) -> Vec<UpstreamStats> {
        (self.upstreams.iter().enumerate())
            .map(|(i, u)| UpstreamStats {
                addr: u.addr,
                endpoints: self.endpoints.count(i as UpstreamId),
                mids_reserved: self.endpoints.reserved(now, i as UpstreamId),
                in_flight: u.inflight,
            })
            .collect()
    }

    /// What the response cache did so far.
    pub fn cache_counters(&self) -> CacheCounters {
        self.cache.counters()
    }

    /// The response cache's counters, entries and bytes, for metrics.
    pub(crate) fn cache_stats(&self) -> (CacheCounters, usize, usize) {
        let c = &self.cache;
        (c.counters(), c.entries(), c.bytes())
    }

    /// Exchanges being worked on (waiting upstream, observing, or delivering an answer);
    /// bounded by the in-flight, observation and cache limits.
    pub fn live_exchanges(&self) -> usize {
        self.exchanges.len()
    }

    /// The configured endpoint bound per upstream.
    pub fn max_upstream_endpoints(&self) -> usize {
        self.config.limits.max_upstream_endpoints
    }

    /// Requests still waiting on an upstream.
    pub fn in_flight(&self) -> usize {
        self.inflight
    }

    /// Stop taking new requests (they get 5.03); what is in flight still completes.
    pub fn begin_drain(&mut self) {
        self.draining = true;
    }

    /// Pending timers in the engine's wheel.
    pub fn pending_timers(&self) -> usize {
        self.exchanges.pending_timers()
    }

    /// The retry policy an exchange follows (its own flag picks one of the configured two).
    pub(super) fn policy_of(&self, x: &Exchange) -> super::RetryPolicy {
        self.policy(x.non_idempotent)
    }

    /// The configured retry policy for non-idempotent requests (POST, PATCH, iPATCH) or others.
    pub(super) fn policy(&self, non_idempotent: bool) -> super::RetryPolicy {
        match non_idempotent {
            true => self.config.non_idempotent,
            false => self.config.policy,
        }
    }

    pub(super) fn get(&self, key: ExchangeKey) -> Option<&Exchange> {
        self.exchanges.get(key)
    }

    pub(super) fn get_mut(&mut self, key: ExchangeKey) -> Option<&mut Exchange> {
        self.exchanges.get_mut(key)
    }

    /// Sets (`Some`) or clears (`None`) one of an exchange's deadlines.
    pub(super) fn set_deadline(
        &mut self,
        key: ExchangeKey,
        kind: TimerKind,
        at: Option<Timestamp>,
    ) {
        self.exchanges.set_deadline(key, kind, at);
    }

    fn on_timer(&mut self, now: Timestamp, key: ExchangeKey, kind: TimerKind) {
        let Some(x) = self.get(key) else { return };
        // Each kind acts only in the states it belongs to: a finished exchange is never
        // forwarded again, whatever timer fires.
        let acts = match kind {
            TimerKind::UpstreamRetransmit => matches!(x.state, State::Waiting(_)),
            TimerKind::TotalTimeout => x.upstream_pending(),
            TimerKind::AckDelay => x.reply == Reply::Piggyback,
            TimerKind::ClientRetransmit => x.delivery.is_some(),
            TimerKind::ObserveStale => matches!(x.state, State::Observing(_)),
            TimerKind::ProofWait => matches!(x.state, State::AwaitingProof),
        };
        if !acts {
            self.counters.traffic.stale_timer_events += 1;
            return;
        }
        match kind {
            TimerKind::UpstreamRetransmit => self.retransmit_upstream(now, key),
            TimerKind::TotalTimeout => {
                let reason = match x.state {
                    State::Waiting(_) => "no answer after all retransmissions",
                    _ => "separate response never came",
                };
                self.give_up(now, key, Code::GATEWAY_TIMEOUT, reason);
            }
            TimerKind::AckDelay => self.send_empty_ack(key),
            TimerKind::ClientRetransmit => self.retransmit_to_client(now, key),
            TimerKind::ObserveStale => {
                let client = x.client;
                self.events.push(ProxyEvent::ObservationStale { client });
                self.end_observation(now, key);
            }
            TimerKind::ProofWait => self.release_held(now, key),
        }
    }

    /// Fails the exchange's upstream leg: the client gets `code` (5.02 or 5.04).
    pub(super) fn give_up(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        code: Code,
        why: &'static str,
    ) {
        let Some(x) = self.get(key) else { return };
        let (client, token) = (x.client, x.client_token);
        let attempts = x.state.leg().map_or(0, |leg| leg.attempts);
        // The client's request was about as long as the copy that went upstream.
        let request = x.state.leg().and_then(|leg| leg.request.as_deref());
        let request_len = request.map_or(0, <[u8]>::len);
        let upstream = self.upstreams[usize::from(x.upstream)].addr;
        self.events.push(ProxyEvent::GaveUp {
            upstream,
            client,
            attempts,
            code,
            why,
        });
        match code {
            Code::BAD_GATEWAY => self.counters.own_answers.bad_gateway_5_02 += 1,
            _ => self.counters.own_answers.gateway_timeout_5_04 += 1,
        }
        self.close_upstream_leg(now, key);
        let answer = LocalAnswer {
            code,
            max_age: None,
            size1: None,
            echo: None,
            diagnostic: why,
        };
        let mut buf = std::mem::take(&mut self.scratch);
        encode_local(&mut buf, MessageType::Ack, 0, token.as_bytes(), &answer);
        if !self.diagnostic_fits(client, buf.len(), request_len) {
            let bare = LocalAnswer {
                diagnostic: "",
                ..answer
            };
            encode_local(&mut buf, MessageType::Ack, 0, token.as_bytes(), &bare);
        }
        match Message::parse(&buf) {
            Ok(msg) => self.answer_client(now, key, &msg, false),
            // Cannot happen for what `encode_local` writes; finish so no state is left.
            Err(_) => self.finish(now, key),
        }
        self.scratch = buf;
    }

    /// Leaves `Waiting`/`AwaitingSeparate`: no more retransmissions; MID, slot and endpoint
    /// released. The caller answers the client next, which settles the state.
    pub(super) fn close_upstream_leg(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.get_mut(key).filter(|x| x.upstream_pending()) else {
            return;
        };
        x.deadlines.set(TimerKind::UpstreamRetransmit, None);
        x.deadlines.set(TimerKind::TotalTimeout, None);
        let (up, endpoint, client) = (x.upstream, x.endpoint, x.client_slot);
        let (State::Waiting(leg) | State::AwaitingSeparate(leg)) =
            std::mem::replace(&mut x.state, State::Answered)
        else {
            unreachable!("the leg is open: checked above");
        };
        self.inflight_bytes -= leg.request.as_deref().map_or(0, <[u8]>::len);
        self.exchanges.rearm(key);
        self.by_upstream_mid.remove(&(endpoint, leg.mid));
        self.upstreams[usize::from(up)].inflight -= 1;
        self.inflight -= 1;
        self.clients.count_inflight(client, false);
        self.endpoints.release(now, endpoint);
    }

    /// Counts an upstream's own answer (the proxy's 5.02/5.03/5.04 are counted where made).
    pub(super) fn track_answer_code(&mut self, code: Code) {
        match code.class() {
            2 => self.counters.traffic.relayed_2xx += 1,
            4 => self.counters.traffic.relayed_4xx += 1,
            _ => self.counters.traffic.relayed_5xx += 1,
        }
    }

    /// The exchange has its answer. Once the client has it too (piggybacked, NON, or a CON it
    /// acknowledged), the exchange retires; until then it is `Answered`, retransmitting.
    pub(super) fn finish(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        if x.delivery.is_none() {
            return self.retire(now, key, LastAnswer::Held);
        }
        x.state = State::Answered;
        self.delivering.push_back(key);
        self.delivering_count += 1;
        self.bound_deliveries(now);
    }

    /// A CON answer's delivery ended (acknowledged, rejected, or given up): the exchange retires.
    pub(super) fn delivered(&mut self, now: Timestamp, key: ExchangeKey) {
        if self
            .get(key)
            .is_some_and(|x| matches!(x.state, State::Answered))
        {
            self.delivering_count -= 1;
            self.retire(now, key, LastAnswer::Held);
            while let Some(&front) = self.delivering.front() {
                if self
                    .get(front)
                    .is_some_and(|x| matches!(x.state, State::Answered))
                {
                    break;
                }
                self.delivering.pop_front();
            }
        }
    }

    /// At most `max_cached` answers are being delivered at once: past that, the oldest
    /// delivery is given up (it has been retransmitted longest).
    fn bound_deliveries(&mut self, now: Timestamp) {
        while self.delivering_count > self.config.kept.max_cached {
            let Some(oldest) = self.delivering.pop_front() else {
                break;
            };
            if self
                .get(oldest)
                .is_some_and(|x| matches!(x.state, State::Answered))
            {
                self.cancel_delivery(oldest);
                self.counters.traffic.client_delivery_failures += 1;
                self.delivered(now, oldest);
            }
        }
        // Keys of exchanges already delivered stay until they reach the front; drop them
        // when they are most of the queue, so it stays proportional to the live deliveries.
        if self.delivering.len() > 2 * self.delivering_count + 64 {
            let exchanges = &self.exchanges;
            self.delivering.retain(|&k| {
                (exchanges.get(k)).is_some_and(|x| matches!(x.state, State::Answered))
            });
        }
    }

    /// Removes the exchange and keeps its answer for the client's duplicates (see
    /// [`LastAnswer`]). The key is kept whatever the answer: a request that went upstream is
    /// never forwarded again while it is.
    pub(super) fn retire(&mut self, now: Timestamp, key: ExchangeKey, last: LastAnswer) {
        self.forget_non_mid(key);
        let Some(x) = self.exchanges.remove(key) else {
            return;
        };
        let kept = x.answer.as_deref().map_or(0, <[u8]>::len);
        self.count_answer_bytes(x.client_slot, 0, kept);
        let client_key = (x.client, x.client_token, x.client_mid);
        let replay = match (x.reply, last) {
            // Never sent (over the client's send rate): a retransmission gets nothing, not an
            // answer it was refused, nor an empty ACK promising one.
            (_, LastAnswer::NotQueued) => Replay::Nothing,
            (Reply::Piggyback, LastAnswer::Queued(answer)) => Replay::Answer(answer),
            (Reply::Piggyback, LastAnswer::Held) => match x.answer.as_deref() {
                Some(answer) => Replay::Answer(answer),
                None => Replay::EmptyAck,
            },
            (Reply::Separate, _) => Replay::EmptyAck,
            (Reply::Non, _) => Replay::Nothing,
        };
        // The kept answer takes over the exchange's reference on its client: it counts in the
        // client's share, and an answer with a MID of ours keeps its numbering (`clients.rs`).
        let replay = kept_for(&x.client, replay);
        let seq = self
            .answers
            .push(now, client_key, replay, Some(x.client_slot));
        self.by_client.insert(client_key, Seen::Answered(seq));
        while let Some(gone) = self.answers.pop_over_share(now, x.client_slot) {
            self.counters.kept.share_evictions += 1;
            self.forget_answer(gone, Seen::Answered);
        }
        while let Some(gone) = self.answers.pop_over_bound(now) {
            self.counters.kept.cache_evictions += 1;
            if gone.early {
                // The client may still retransmit this request; it would be forwarded again.
                // Said once: the counter tells how often.
                if self.counters.kept.early_evictions == 0 {
                    self.events.push(ProxyEvent::EarlyEviction);
                }
                self.counters.kept.early_evictions += 1;
            }
            self.forget_answer(gone, Seen::Answered);
        }
    }

    /// Keeps the proxy's own answer to a request that never went upstream, with a reference
    /// on its client taken for it. Only an answer that was queued: one the outbox did not
    /// queue is not kept at all, and the request's retransmission is handled afresh, which
    /// is allowed for these: it runs nothing twice (see [`LOCAL_ANSWER_LIFETIME`]; a cache
    /// hit answers a GET or FETCH, which are safe, RFC 7252 §5.1).
    pub(super) fn keep_local_answer(
        &mut self,
        now: Timestamp,
        client_key: ClientKey,
        replay: Replay<&[u8]>,
        client: ClientSlot,
    ) {
        let replay = kept_for(&client_key.0, replay);
        let seq = self
            .local_answers
            .push(now, client_key, replay, Some(client));
        self.by_client
            .insert(client_key, Seen::AnsweredLocally(seq));
        while let Some(gone) = self.local_answers.pop_over_share(now, client) {
            self.counters.kept.share_evictions += 1;
            self.forget_answer(gone, Seen::AnsweredLocally);
        }
        while let Some(gone) = self.local_answers.pop_over_bound(now) {
            self.counters.kept.local_answer_evictions += 1;
            self.forget_answer(gone, Seen::AnsweredLocally);
        }
    }

    /// What the duplicate index knows of a request, if it is still current.
    pub(super) fn seen(&self, key: &ClientKey) -> Option<Seen> {
        let seen = *self.by_client.get(key)?;
        let current = match seen {
            Seen::Live(_) => true,
            Seen::Answered(seq) => self.answers.holds(seq),
            Seen::AnsweredLocally(seq) => self.local_answers.holds(seq),
        };
        current.then_some(seen)
    }

    /// Remembers that the upstream CON `mid` on `endpoint` was acknowledged.
    pub(super) fn keep_upstream_con(&mut self, now: Timestamp, endpoint: EndpointId, mid: u16) {
        let seq = self
            .upstream_cons
            .push(now, (endpoint, mid), Replay::Nothing, None);
        self.by_upstream_con.insert((endpoint, mid), seq);
        while let Some(gone) = self.upstream_cons.pop_over_bound(now) {
            self.forget_upstream_con(gone);
        }
    }

    fn forget_upstream_con(&mut self, gone: Gone<(EndpointId, u16)>) {
        if self.by_upstream_con.get(&gone.key) == Some(&gone.seq) {
            self.by_upstream_con.remove(&gone.key);
        }
    }

    /// Drops every kept answer whose time is up.
    fn expire_answers(&mut self, now: Timestamp) {
        while let Some(gone) = self.answers.pop_expired(now) {
            self.forget_answer(gone, Seen::Answered);
        }
        while let Some(gone) = self.local_answers.pop_expired(now) {
            self.forget_answer(gone, Seen::AnsweredLocally);
        }
        while let Some(gone) = self.upstream_cons.pop_expired(now) {
            self.forget_upstream_con(gone);
        }
    }

    /// An answer left its store (`indexed_as` names which): its index entry goes, unless a
    /// newer request with the same key took it, and so does the client reference it held.
    fn forget_answer(&mut self, gone: Gone<ClientKey>, indexed_as: fn(u64) -> Seen) {
        if self.by_client.get(&gone.key) == Some(&indexed_as(gone.seq)) {
            self.by_client.remove(&gone.key);
        }
        if let Some(slot) = gone.client {
            self.clients.release(slot);
        }
    }

    /// Creates the exchange of a new client request (from a client and its slot) going out of
    /// `route`'s endpoint, in `state`, and indexes it for duplicates.
    pub(super) fn insert_exchange(
        &mut self,
        (from, state): ((Peer, ClientSlot), State),
        token: CoapToken,
        msg: &Message,
        route: (UpstreamId, EndpointId),
        non_idempotent: bool,
    ) -> ExchangeKey {
        let client_id = (msg.message_id(), token, msg.msg_type());
        let key = (self.exchanges).insert(|generation| {
            Exchange::new(generation, state, from, client_id, route, non_idempotent)
        });
        self.by_client
            .insert((from.0, token, msg.message_id()), Seen::Live(key));
        self.clients.take_ref(from.1);
        key
    }
}

/// What became of an exchange's last answer, for [`Proxy::retire`] to keep.
#[derive(Clone, Copy, Debug)]
pub(super) enum LastAnswer<'a> {
    /// The one the exchange holds (`Exchange::answer`), if any, which went already: a CON
    /// delivered, a registration's answer, or none (its ACK was empty).
    Held,
    /// This one, just queued for the client.
    Queued(&'a [u8]),
    /// One the outbox did not queue: the client never got it.
    NotQueued,
}

/// What a kept answer to `client` replays. A client on a reliable transport (the HTTP
/// cross-proxy's in-process clients) is handed every answer and never loses one: when its
/// request is retransmitted all the same (its timer ran out as the answer came), it has the
/// answer already, so only the key is kept (it still stops a second forward), not a second
/// copy of the answer, which for HTTP is often a large cached one.
fn kept_for<'a>(client: &Peer, replay: Replay<&'a [u8]>) -> Replay<&'a [u8]> {
    match replay {
        Replay::Answer(_) if client.is_reliable() => Replay::Nothing,
        replay => replay,
    }
}
