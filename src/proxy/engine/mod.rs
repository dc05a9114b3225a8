//! The proxy engine: its public face, its timers, and the life cycle of an exchange once it
//! has an answer. Sans-IO: datagrams and `now` come in through `handle_*`, datagrams leave
//! through [`Proxy::poll_transmit`], sockets are asked for through
//! [`Proxy::poll_endpoint_event`], and the driver asks [`Proxy::poll_timeout`] when to call
//! [`Proxy::handle_timeout`].
//!
//! `Proxy` is made of parts that own their state, each in its own file, and that it calls
//! with explicit access to what each needs: the exchanges and their timers (`table.rs`), the
//! duplicate index and the kept answers (`kept.rs`), the client Message IDs and CON
//! deliveries (`deliveries.rs`), the upstreams, endpoints and upstream Message IDs
//! (`upstreams.rs`), the response cache and observe groups (`caching.rs`), what is held
//! against the limits (`limits.rs`), the clients (`clients.rs`), and the send decision with
//! the outbox (`gate.rs`). What moves between the parts is `impl Proxy`, in three files:
//! `client_leg.rs` (requests in), `upstream_leg.rs` (what comes back from upstream: answers,
//! give-ups, Observe relays), and this one (answers out to clients, and retiring).

mod answer_cache;
mod awaiting_proof;
mod budget;
#[cfg(feature = "cache")]
mod cache;
#[cfg(feature = "cache")]
mod cache_use;
#[cfg(feature = "cache")]
mod caching;
mod client_leg;
mod clients;
mod config;
mod counters;
mod deliveries;
mod endpoints;
mod events;
mod exchange;
#[cfg(feature = "cache")]
mod fanout;
mod gate;
mod held;
mod index;
mod kept;
mod keyed_hash;
mod limits;
mod local_answer;
pub(super) mod metrics;
#[cfg(not(feature = "cache"))]
mod no_cache;
// Without the `cache` feature one stand-in answers to the names of the four cache modules,
// so that the engine's paths and calls stay as they are.
#[cfg(not(feature = "cache"))]
use no_cache::{self as cache, self as cache_use, self as caching, self as fanout};
mod observation_shares;
mod outbox;
mod peer;
mod reliable_upstream;
pub(super) mod report;
pub mod route;
mod table;
#[cfg(test)]
mod tests;
mod upstream_leg;
mod upstream_request;
mod upstreams;
mod validation;

pub use budget::ClientBudget;
#[cfg(feature = "cache")]
pub use cache::CacheCounters;
pub use config::{
    AllowedTarget, ConfigError, KeptBounds, Limits, ProxyConfig, RetryPolicy, Routing, Seeds,
};
pub use counters::{
    Counters, KeptAnswers, Load, ObserveCounters, OwnAnswers, Proof, Refusals, Strays, Traffic,
};
pub use endpoints::{EndpointEvent, EndpointId, UpstreamId};
pub use events::{ObserverLoss, ProxyEvent, Source};
pub use exchange::{Relay, State, UpstreamLeg};
pub use peer::{ClientOrigin, ConnectionId, LocalClient, Peer, SessionId, SlotId};

use std::net::SocketAddr;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::coap::{empty_ack, rewrite, Code, Message, MessageType};
use crate::stats::LatencyHistogram;
use crate::time::Timestamp;

use self::answer_cache::{ClientKey, Replay};
use self::budget::SendBudget;
use self::cache::ResponseCache;
use self::caching::Sharing;
use self::clients::{ClientSlot, Clients};
use self::deliveries::{Deliveries, Retransmitted};
pub use self::endpoints::UpstreamStats;
use self::events::Events;
use self::exchange::{CoapToken, Exchange, ExchangeKey, Reply, TimerKind, RELIABLE_HEADER};
use self::fanout::Fanout;
use self::gate::{Charge, SendGate};
use self::held::HeldAnswers;
use self::kept::Kept;
use self::keyed_hash::{KeyedMap, KeyedState};
use self::limits::Usage;
pub use self::outbox::{Destination, Transmit};
use self::table::Exchanges;
use self::upstreams::Upstreams;
use self::validation::{ProvedBy, SourceValidation};

/// The sans-IO CoAP forwarding proxy. See the module docs of [`crate::proxy`].
pub struct Proxy {
    config: ProxyConfig,
    /// The live exchanges and their timers (`table.rs`).
    exchanges: Exchanges,
    /// The duplicate index and the answers kept for clients' retransmissions (`kept.rs`).
    kept: Kept,
    /// Live observations by (client, client token), for deregistration (RFC 7641 §3.6).
    observers: KeyedMap<(Peer, CoapToken), ExchangeKey>,
    /// The upstreams, their endpoints and Message IDs (`upstreams.rs`).
    upstreams: Upstreams,
    /// Whether a datagram may go to a client now (`gate.rs`).
    gate: SendGate,
    rng: SmallRng,
    counters: Counters,
    /// The response cache (`--cache-size`; RFC 7252 §5.6) and the observe groups that share
    /// its entries (`caching.rs`, `fanout.rs`). Not `kept`, which replays one answer to one
    /// request's copies.
    sharing: Sharing,
    /// What a client's ACK or RST answers, and the deliveries under way (`deliveries.rs`).
    deliveries: Deliveries,
    /// What the proxy holds against its limits, and whether it admits (`limits.rs`).
    usage: Usage,
    /// The answers waiting for their client's proof, oldest first and by client (`held.rs`).
    held: HeldAnswers,
    clients: Clients,
    /// Diagnostics for the driver to log.
    events: Events,
    /// Reused encode buffer.
    scratch: Vec<u8>,
    /// How late retransmission deadlines were handled (`now` minus the deadline): the whole
    /// way from the deadline through the driver's timer and this wheel to the send decision.
    retransmit_lateness: LatencyHistogram,
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
        let clients = Clients::new(rng.random(), config.limits.source_prefix, &hash);
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
            held: HeldAnswers::new(&hash),
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

    /// Bytes queued for the transports and not yet taken by
    /// [`poll_transmit`](Self::poll_transmit): a stream connection takes its requests while
    /// they stay under its bound, and the driver asks for another turn while any are left.
    pub(in crate::proxy) fn queued_bytes(&self) -> usize {
        self.gate.queued_bytes()
    }

    /// The clients the engine holds an exchange for (a request in flight, an answer being
    /// delivered, an observation).
    pub(in crate::proxy) fn busy_clients(&self) -> impl Iterator<Item = Peer> + '_ {
        self.exchanges.iter().map(|(_, x)| x.client)
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
            // Armed for a deadline its state has since dropped, the timer finds nothing due.
            let mut acted = false;
            while let Some((kind, due)) = self.exchanges.get_mut(key).and_then(|x| x.take_due(now))
            {
                acted = true;
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
            self.counters.traffic.stale_timer_events += u64::from(!acted);
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
    #[cfg(feature = "cache")]
    pub fn cache_counters(&self) -> CacheCounters {
        self.sharing.cache().counters()
    }

    /// The response cache's counters, entries and bytes, for metrics.
    #[cfg(feature = "cache")]
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
    fn policy_of(&self, x: &Exchange) -> super::RetryPolicy {
        self.policy(x.non_idempotent)
    }

    /// The configured retry policy for non-idempotent requests (POST, PATCH, iPATCH) or others.
    fn policy(&self, non_idempotent: bool) -> super::RetryPolicy {
        match non_idempotent {
            true => self.config.non_idempotent,
            false => self.config.policy,
        }
    }

    fn on_timer(&mut self, now: Timestamp, key: ExchangeKey, kind: TimerKind) {
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        match kind {
            TimerKind::UpstreamRetransmit => self.retransmit_upstream(now, key),
            TimerKind::TotalTimeout => {
                let reason = match x.state {
                    State::Waiting { .. } if self.upstreams.is_reliable(x.upstream) => {
                        "no answer within the total timeout"
                    }
                    State::Waiting { .. } => "no answer after all retransmissions",
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

    /// The exchange has its answer. Once the client has it too (piggybacked, NON, a CON it
    /// acknowledged, or anything handed to a transport without a message layer), the
    /// exchange retires; until then it is `Answered`, retransmitting.
    fn finish(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.exchanges.get_mut(key) else {
            return;
        };
        if x.delivery.is_none() {
            return self.retire(now, key, LastAnswer::Held);
        }
        x.state = State::Answered;
        self.deliveries.started(key);
        self.bound_deliveries(now);
    }

    /// A CON answer's delivery ended (acknowledged, rejected, or given up): the exchange retires.
    fn delivered(&mut self, now: Timestamp, key: ExchangeKey) {
        if self
            .exchanges
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
    fn retire(&mut self, now: Timestamp, key: ExchangeKey, last: LastAnswer) {
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
            (Reply::Piggyback { .. }, LastAnswer::Queued(answer)) => Replay::Answer(answer),
            (Reply::Piggyback { .. }, LastAnswer::Held) => match x.answer.as_deref() {
                Some(answer) => Replay::Answer(answer),
                None => Replay::EmptyAck,
            },
            (Reply::Separate, _) => Replay::EmptyAck,
            (Reply::Non | Reply::Reliable, _) => Replay::Nothing,
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
    fn keep_local_answer(
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
    /// `route`'s endpoint, in `state`, and indexes it for duplicates, unless the client has no
    /// message layer: such a peer never sends a request twice (RFC 8323 §2.2), and its
    /// placeholder Message IDs would make each request after the first with the same token
    /// look like one.
    fn insert_exchange(
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
        if from.0.has_message_layer() {
            self.kept.live((from.0, token, msg.message_id()), key);
        }
        self.clients.take_ref(from.1);
        key
    }
}

/// What became of an exchange's last answer, for [`Proxy::retire`] to keep.
#[derive(Clone, Copy, Debug)]
enum LastAnswer<'a> {
    /// The one the exchange holds (`Exchange::answer`), if any, which went already: a CON
    /// delivered, a registration's answer, or none (its ACK was empty).
    Held,
    /// This one, just queued for the client.
    Queued(&'a [u8]),
    /// One the outbox did not queue: the client never got it.
    NotQueued,
}

// Answers out: to clients, piggybacked or separate, the confirmable ones delivered until
// acknowledged (RFC 7252 §4.2, §5.2; the delivery itself is `deliveries.rs`), and held for a
// client's proof of its address (`validation.rs`).

impl Proxy {
    /// The client's CON request was not answered quickly: ACK it now, answer separately later.
    fn send_empty_ack(&mut self, key: ExchangeKey) {
        let Some(x) = self.exchanges.get_mut(key) else {
            return;
        };
        x.reply = Reply::Separate;
        let (client, mid) = (x.client, x.client_mid);
        self.exchanges.rearm(key);
        self.counters.traffic.empty_acks_sent += 1;
        self.gate
            .send_encoded(Charge::Relayed, Destination::Client(client), |b| {
                empty_ack(b, mid)
            });
    }

    /// Sends an answer to the client: piggybacked on the ACK while the client's CON is not yet
    /// acknowledged, otherwise as a separate CON (retransmitted until ACKed) or a NON.
    /// `msg` is a complete message whose type, MID and token are replaced here.
    /// `observing` keeps the exchange alive for notifications instead of finishing it.
    ///
    /// An answer past what the client's address may be sent before it proves it receives
    /// there (`validation.rs`) is held, and the client pinged: its RST proves the address
    /// and the answer goes as it would have (piggybacked or NON) one round trip later
    /// (`awaiting_proof.rs`, which also says what happens when there is no room to hold it).
    /// A registration's answer is not held: it goes as a CON asking for the proof at once.
    fn answer_client(&mut self, now: Timestamp, key: ExchangeKey, msg: &Message, observing: bool) {
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        let len = msg.as_bytes().len() - msg.token().len() + x.client_token.as_bytes().len();
        let fits = x.reply == Reply::Separate || self.gate.fits(x.client, len);
        match (fits, observing) {
            (true, _) => self.send_answer(now, key, msg, observing, false),
            (false, true) => self.send_answer(now, key, msg, observing, true),
            (false, false) => self.answer_unproven(now, key, msg, len),
        }
    }

    /// Sends the answer (see [`answer_client`](Self::answer_client)); `confirm`: as a CON,
    /// whose ACK proves the client's address, since it is past the client's allowance:
    /// after an empty ACK for a CON request (RFC 7252 §5.2.2), in place of a NON for a NON
    /// request (§5.2.3).
    fn send_answer(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        msg: &Message,
        observing: bool,
        confirm: bool,
    ) {
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        let (slot, token) = (x.client_slot, x.client_token);
        let (reply, client_mid) = (x.reply, x.client_mid);
        if confirm {
            self.counters.proof.answers_made_confirmable += 1;
            if matches!(reply, Reply::Piggyback { .. }) {
                self.send_empty_ack(key);
            }
        }
        let (ty, mid) = match (reply, confirm) {
            (Reply::Reliable, _) => RELIABLE_HEADER,
            (Reply::Piggyback { .. }, false) => (MessageType::Ack, client_mid),
            (Reply::Non, false) => (MessageType::Non, self.clients.fresh_mid(slot)),
            _ => (MessageType::Con, self.clients.fresh_mid(slot)),
        };
        let mut bytes = std::mem::take(&mut self.scratch);
        let encoded = rewrite(&mut bytes, msg, (ty, mid, token.as_bytes()), |b, n, v| {
            b.option(n, v);
        })
        .finish();
        if encoded.is_err() {
            // Cannot happen for parsed input; finish anyway so no state is left behind.
            self.scratch = bytes;
            return self.finish(now, key);
        }
        let queued = self.send_to_client(now, key, ty, mid, &bytes);
        self.exchanges.update(key, |x| {
            if let Reply::Piggyback { ack_by } = &mut x.reply {
                *ack_by = None;
            }
        });
        let delivering = self
            .exchanges
            .get(key)
            .is_some_and(|x| x.delivery.is_some());
        if (observing && reply != Reply::Reliable) || delivering {
            // Retransmitted or replayed later: the exchange keeps it (a peer without a
            // message layer never asks for it again).
            self.usage.keep_answer(
                (&mut self.exchanges, &mut self.clients),
                key,
                Some(Box::from(&bytes[..])),
            );
        }
        match (observing, delivering) {
            (true, _) => self.start_observation(now, key, msg),
            (false, true) => self.finish(now, key),
            // Done: the answer goes straight to the cache, never boxed for the exchange; one
            // the outbox did not queue (over the client's send rate) is not kept.
            (false, false) => {
                let last = match queued {
                    true => LastAnswer::Queued(&bytes),
                    false => LastAnswer::NotQueued,
                };
                self.retire(now, key, last);
            }
        }
        self.scratch = bytes;
    }

    /// The retransmission timer of a CON to the client fired: sent again, or given up after
    /// MAX_RETRANSMIT (an answered exchange then retires), or at once if it was the CON that
    /// asked an unproven client for its proof (`awaiting_proof.rs`).
    fn retransmit_to_client(&mut self, now: Timestamp, key: ExchangeKey) {
        if self.client_silent(now, key) {
            return self.give_up_silent(now, key);
        }
        let wire = (&mut self.exchanges, &mut self.gate);
        match self.deliveries.retransmit(wire, now, key) {
            Retransmitted::Nothing | Retransmitted::Sent { again: false } => {}
            Retransmitted::Sent { again: true } => {
                self.counters.traffic.client_retransmissions += 1;
            }
            Retransmitted::GaveUp { client, mid } => {
                self.counters.traffic.client_delivery_failures += 1;
                self.events
                    .push(ProxyEvent::ClientNeverAcked { client, mid });
                // RFC 7641 §4.5: a CON notification that times out ends its observation.
                self.observer_gone(now, key, ObserverLoss::NeverAcked);
                self.delivered(now, key);
            }
        }
    }

    /// Sends a CON or NON to the client (see [`deliveries::Deliveries::send`]); to a
    /// client without a message layer ([`Reply::Reliable`]), hands the message to its
    /// transport once, with nothing to track: no ACK or RST will come for it.
    fn send_to_client(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        ty: MessageType,
        mid: u16,
        bytes: &[u8],
    ) -> bool {
        if let Some(x) = (self.exchanges.get(key)).filter(|x| x.reply == Reply::Reliable) {
            let to = Destination::Client(x.client);
            return self.gate.send(Charge::Relayed, to, bytes);
        }
        let wire = (&mut self.exchanges, &mut self.gate);
        (self.deliveries).send(wire, &mut self.rng, now, key, (ty, mid, bytes))
    }

    /// What was withheld from a client that has now proven its address (`validation.rs`)
    /// goes: a held answer, or the CON being delivered.
    fn resend_withheld(&mut self, now: Timestamp, key: ExchangeKey) {
        match self
            .exchanges
            .get(key)
            .map(|x| matches!(x.state, State::AwaitingProof { .. }))
        {
            Some(true) => self.release_held(now, key),
            Some(false) => (self.deliveries).resend((&mut self.exchanges, &mut self.gate), key),
            None => {}
        }
    }

    /// Queues bytes an exchange holds (its request or its answer) without copying them first.
    fn push_from(
        &mut self,
        key: ExchangeKey,
        part: impl FnOnce(&exchange::Exchange) -> Option<(Destination, &[u8])>,
    ) {
        if let Some((to, bytes)) = self.exchanges.get(key).and_then(part) {
            self.gate.send(Charge::Relayed, to, bytes);
        }
    }

    /// Stops retransmitting to the client (ACK or RST arrived, or a newer message replaces it).
    fn cancel_delivery(&mut self, key: ExchangeKey) {
        (self.deliveries).cancel((&mut self.exchanges, &mut self.gate), key);
    }

    /// The client acknowledged (or rejected) a confirmable answer or a notification.
    fn on_client_ack_or_rst(&mut self, now: Timestamp, from: Peer, msg: &Message) {
        if self.gate.answers_ping(from, msg.message_id()) {
            // The RST to our ping (`hold_for_proof`): the client receives at its address.
            return self.source_proved(now, from, ProvedBy::Ack);
        }
        let Some(key) = self.deliveries.answered_by(from, msg.message_id()) else {
            self.counters.strays.unmatched_client += 1;
            self.gate.wrong_proof(from);
            return;
        };
        let delivering = self
            .exchanges
            .get(key)
            .and_then(|x| x.delivery.as_ref())
            .map(|d| d.mid);
        if delivering == Some(msg.message_id()) {
            self.cancel_delivery(key);
            self.delivered(now, key);
        }
        // RFC 7641 §3.6: an RST in reply to a notification cancels the observation.
        if msg.msg_type() == MessageType::Rst {
            self.observer_gone(now, key, ObserverLoss::Reset);
        }
        // It carries a Message ID the proxy chose: the client receives at its address. Last,
        // so that what this message settled is not among what the proof sends again.
        self.source_proved(now, from, ProvedBy::Ack);
    }
}
