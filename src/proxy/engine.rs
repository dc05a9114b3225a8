//! The proxy engine: exchanges, their timers, and what goes out. Sans-IO: datagrams and `now`
//! come in through `handle_*`, datagrams leave through [`Proxy::poll_transmit`], sockets are
//! asked for through [`Proxy::poll_endpoint_event`], and the driver asks
//! [`Proxy::poll_timeout`] when to call [`Proxy::handle_timeout`].
//!
//! The client leg lives in `client_leg.rs` (requests in) and `delivery.rs` (answers out), the
//! upstream leg in `upstream_leg.rs`, the upstream sockets and their Message IDs in
//! `endpoints.rs`, the kept answers in `answer_cache.rs`; this file holds the state they share
//! and the life cycle of an exchange (start, give up, finish, retire).

use std::net::SocketAddr;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::coap::{Code, Message, MessageType};
use crate::stats::LatencyHistogram;
use crate::time::Timestamp;

use super::answer_cache::{ClientKey, Replay};
use super::budget::SendBudget;
use super::cache::{CacheCounters, ResponseCache};
use super::caching::Sharing;
use super::clients::{ClientSlot, Clients};
use super::deliveries::Deliveries;
pub use super::endpoints::UpstreamStats;
use super::endpoints::{EndpointEvent, EndpointId, UpstreamId};
use super::events::{Events, ProxyEvent};
use super::exchange::{CoapToken, Exchange, ExchangeKey, Reply, State, TimerKind};
use super::fanout::Fanout;
use super::gate::SendGate;
use super::kept::Kept;
use super::keyed_hash::{KeyedMap, KeyedState};
use super::limits::Usage;
use super::local_answer::{encode_local, LocalAnswer};
pub use super::outbox::{Destination, Transmit};
use super::peer::Peer;
use super::table::Exchanges;
use super::upstreams::Upstreams;
use super::validation::SourceValidation;
use super::{Counters, ProxyConfig};

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
    /// The duplicate index and the answers kept for clients' retransmissions (`kept.rs`).
    pub(super) kept: Kept,
    /// Live observations by (client, client token), for deregistration (RFC 7641 §3.6).
    pub(super) observers: KeyedMap<(Peer, CoapToken), ExchangeKey>,
    /// The upstreams, their endpoints and Message IDs (`upstreams.rs`).
    pub(super) upstreams: Upstreams,
    /// Whether a datagram may go to a client now (`gate.rs`).
    pub(super) gate: SendGate,
    pub(super) rng: SmallRng,
    pub(super) counters: Counters,
    /// The response cache (`--cache-size`; RFC 7252 §5.6) and the observe groups that share
    /// its entries (`caching.rs`, `fanout.rs`). Not `kept`, which replays one answer to one
    /// request's copies.
    pub(super) sharing: Sharing,
    /// What a client's ACK or RST answers, and the deliveries under way (`deliveries.rs`).
    pub(super) deliveries: Deliveries,
    /// What the proxy holds against its limits, and whether it admits (`limits.rs`).
    pub(super) usage: Usage,
    pub(super) clients: Clients,
    /// Diagnostics for the driver to log.
    pub(super) events: Events,
    /// Reused encode buffer.
    pub(super) scratch: Vec<u8>,
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
        let endpoint_bounds = (
            config.upstream_exchange_lifetime,
            config.limits.max_upstream_endpoints,
        );
        let upstreams = Upstreams::new(targets, endpoint_bounds, rng.random(), &hash);
        let kept = Kept::new(&config.kept, &hash);
        let cache = ResponseCache::new(config.cache_size, [seeds.hash[1], !seeds.hash[0]]);
        let clients = Clients::new(rng.random(), &hash);
        let echo_key = crate::coap::echo::EchoKey::new([seeds.hash[1], seeds.hash[0] ^ 0xec40]);
        let budget = (config.client_budget.bytes_per_sec != 0)
            .then(|| SendBudget::new(config.client_budget, &hash));
        let gate = SendGate::new(SourceValidation::new(echo_key, &hash), budget);
        Proxy {
            config,
            exchanges: Exchanges::new(),
            kept,
            observers: hash.map(),
            upstreams,
            gate,
            rng,
            counters: Counters::default(),
            retransmit_lateness: LatencyHistogram::default(),
            sharing: Sharing::new(cache, Fanout::new(&hash)),
            deliveries: Deliveries::new(&hash),
            usage: Usage::default(),
            clients,
            events: Events::default(),
            scratch: Vec::with_capacity(1500),
        }
    }

    /// The next datagram to send, if any, handed to `send` with where it goes (without a
    /// copy); returns what `send` returned.
    pub fn poll_transmit_with<R>(
        &mut self,
        send: impl FnOnce(Destination, &[u8]) -> R,
    ) -> Option<R> {
        self.gate.pop_with(send)
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
        self.upstreams.endpoints_mut().poll_event()
    }

    /// The next diagnostic for the driver to log, if any (see [`ProxyEvent`]).
    pub fn poll_event(&mut self) -> Option<ProxyEvent> {
        self.events.pop()
    }

    /// The socket asked for by [`EndpointEvent::Open`] is open: the endpoint may be used.
    pub fn endpoint_opened(&mut self, now: Timestamp, id: EndpointId) {
        self.upstreams.endpoints_mut().opened(now, id);
    }

    /// The socket asked for by [`EndpointEvent::Open`] could not be opened (the reason is the
    /// driver's to log); another is asked for a little later.
    pub fn endpoint_failed(&mut self, now: Timestamp, id: EndpointId) {
        self.upstreams.endpoints_mut().failed(now, id);
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
        [
            self.exchanges.next_deadline(),
            self.kept.next_expiry(),
            self.upstreams.endpoints().next_deadline(),
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
        self.kept.expire(now, &mut self.clients);
        self.upstreams.endpoints_mut().sweep(now);
    }

    /// Counters, with the gauges filled in.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters.clone();
        (c.load, c.observe.observations) = self.usage.gauges(self.exchanges.len());
        self.kept.count(&mut c.kept);
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
        self.upstreams.stats(now)
    }

    /// What the response cache did so far.
    pub fn cache_counters(&self) -> CacheCounters {
        self.sharing.cache().counters()
    }

    /// The response cache's counters, entries and bytes, for metrics.
    pub(crate) fn cache_stats(&self) -> (CacheCounters, usize, usize) {
        let c = self.sharing.cache();
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
        self.usage.inflight()
    }

    /// Stop taking new requests (they get 5.03); what is in flight still completes.
    pub fn begin_drain(&mut self) {
        self.usage.drain();
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
        let upstream = self.upstreams.addr(x.upstream);
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
        (self.usage).leg_closed(leg.request.as_deref().map_or(0, <[u8]>::len));
        self.exchanges.rearm(key);
        self.upstreams.leg_closed(now, (up, endpoint), leg.mid);
        self.clients.count_inflight(client, false);
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
        self.deliveries.started(key);
        self.bound_deliveries(now);
    }

    /// A CON answer's delivery ended (acknowledged, rejected, or given up): the exchange retires.
    pub(super) fn delivered(&mut self, now: Timestamp, key: ExchangeKey) {
        if self
            .get(key)
            .is_some_and(|x| matches!(x.state, State::Answered))
        {
            self.deliveries.ended();
            self.retire(now, key, LastAnswer::Held);
            self.deliveries.drop_ended_front(&self.exchanges);
        }
    }

    /// At most `max_cached` answers are being delivered at once: past that, the oldest
    /// delivery is given up (it has been retransmitted longest).
    fn bound_deliveries(&mut self, now: Timestamp) {
        let max = self.config.kept.max_cached;
        while let Some(oldest) = self.deliveries.over_bound(max, &self.exchanges) {
            self.cancel_delivery(oldest);
            self.counters.traffic.client_delivery_failures += 1;
            self.delivered(now, oldest);
        }
        self.deliveries.compact(&self.exchanges);
    }

    /// Removes the exchange and keeps its answer for the client's duplicates (see
    /// [`LastAnswer`]). The key is kept whatever the answer: a request that went upstream is
    /// never forwarded again while it is.
    pub(super) fn retire(&mut self, now: Timestamp, key: ExchangeKey, last: LastAnswer) {
        self.deliveries.forget_non_mid(&mut self.exchanges, key);
        let Some(x) = self.exchanges.remove(key) else {
            return;
        };
        let kept = x.answer.as_deref().map_or(0, <[u8]>::len);
        (self.usage).count_answer_bytes(&mut self.clients, x.client_slot, 0, kept);
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
        let first_early = self.counters.kept.early_evictions == 0;
        let (clients, counters) = (&mut self.clients, &mut self.counters.kept);
        (self.kept).keep(now, (client_key, replay), x.client_slot, clients, counters);
        if first_early && self.counters.kept.early_evictions > 0 {
            // Said once: the counter tells how often.
            self.events.push(ProxyEvent::EarlyEviction);
        }
    }

    /// Keeps the proxy's own answer (see [`Kept::keep_local`]).
    pub(super) fn keep_local_answer(
        &mut self,
        now: Timestamp,
        client_key: ClientKey,
        replay: Replay<&[u8]>,
        client: ClientSlot,
    ) {
        let (clients, counters) = (&mut self.clients, &mut self.counters.kept);
        (self.kept).keep_local(now, (client_key, replay), client, clients, counters);
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
        self.kept.live((from.0, token, msg.message_id()), key);
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
