//! The proxy engine: exchanges, their timers, and what goes out. Sans-IO: datagrams and `now`
//! come in through `handle_*`, datagrams leave through [`Proxy::poll_transmit`], and the driver
//! asks [`Proxy::poll_timeout`] when to call [`Proxy::handle_timeout`].
//!
//! The client leg lives in `client_leg.rs`, the upstream leg in `upstream_leg.rs`; this file
//! holds the state they share and the life cycle of an exchange (answer, give up, expire).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slab::Slab;

use crate::coap::option::{encode_uint, MAX_AGE};
use crate::coap::{params, peek_header, rewrite, Code, Message, MessageBuilder, MessageType};
use crate::time::Timestamp;
use crate::timer::{TimerId, TimerWheel};

use super::exchange::{
    ClientDelivery, Exchange, ExchangeKey, State, TimerKind, TimerRef, Token, UpstreamId,
};
use super::{Counters, ProxyConfig};

/// Which socket a datagram leaves through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    /// The client-facing socket, to this client.
    Client(SocketAddr),
    /// The socket connected to this upstream.
    Upstream(UpstreamId),
}

/// A datagram to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Which socket sends it, and to whom.
    pub to: Destination,
    /// The encoded CoAP datagram.
    pub payload: Vec<u8>,
}

/// Allocates upstream Message IDs so that none is reused within the configured lifetime
/// (RFC 7252 §4.4). IDs go up one by one; the 65536 IDs form 64 blocks of 1024, and a block may
/// be entered again only when its last ID was handed out at least `lifetime` ago.
#[derive(Debug)]
pub(super) struct MidAllocator {
    next: u16,
    block_left: [Option<Timestamp>; 64],
    /// Requests refused for want of an ID since the last warning, and when that was: a
    /// sustained overload must not log a line per request.
    refused: u64,
    warned: Option<Timestamp>,
}

/// Shortest interval between two "Message IDs exhausted" warnings for one upstream.
const EXHAUSTION_WARNING_INTERVAL: Duration = Duration::from_secs(10);

impl MidAllocator {
    fn new(first: u16) -> Self {
        MidAllocator {
            next: first,
            block_left: [None; 64],
            refused: 0,
            warned: None,
        }
    }

    /// Counts a request refused because [`allocate`](Self::allocate) had no ID; returns how
    /// many were refused since the last warning when it is time for another one.
    pub(super) fn refused(&mut self, now: Timestamp) -> Option<u64> {
        self.refused += 1;
        if self
            .warned
            .is_some_and(|at| now < at + EXHAUSTION_WARNING_INTERVAL)
        {
            return None;
        }
        self.warned = Some(now);
        Some(std::mem::take(&mut self.refused))
    }

    /// The next free MID, or `None` when the ID space is still reserved (rate too high).
    pub(super) fn allocate(&mut self, now: Timestamp, lifetime: Duration) -> Option<u16> {
        let mid = self.next;
        let block = usize::from(mid / 1024);
        if mid % 1024 == 0 {
            if let Some(left) = self.block_left[block] {
                if now < left + lifetime {
                    return None;
                }
            }
        }
        self.next = mid.wrapping_add(1);
        if self.next % 1024 == 0 {
            self.block_left[block] = Some(now);
        }
        Some(mid)
    }
}

/// Message IDs of the proxy's own messages to one client. RFC 7252 §4.4 forbids reusing one
/// towards an endpoint within EXCHANGE_LIFETIME; a single counter for all clients wraps after
/// 65536 answers in total, well within that at a few hundred answers per second. Counting per
/// client, a MID repeats only after 65536 messages to that client. Each exchange holds its
/// client's entry and outlives the MIDs it sent by their lifetime (see [`Proxy::finish`]), so
/// the entry goes with the client's last exchange and a returning client starts afresh.
#[derive(Debug)]
pub(super) struct ClientMids {
    next: u16,
    exchanges: usize,
}

/// One upstream endpoint.
#[derive(Debug)]
pub(super) struct Upstream {
    pub(super) addr: SocketAddr,
    pub(super) inflight: usize,
    pub(super) mids: MidAllocator,
}

/// What the proxy answers with when it answers itself.
pub(super) struct LocalAnswer {
    pub(super) code: Code,
    pub(super) max_age: Option<u32>,
    /// Diagnostic payload (RFC 7252 §5.5.2): a short human-readable reason.
    pub(super) diagnostic: &'static str,
}

/// The sans-IO CoAP forwarding proxy. See the module docs of [`crate::proxy`].
pub struct Proxy {
    pub(super) config: ProxyConfig,
    pub(super) exchanges: Slab<Exchange>,
    pub(super) next_generation: u32,
    /// Client retransmission detection: (client, token, MID).
    pub(super) by_client: HashMap<(SocketAddr, Token, u16), ExchangeKey>,
    /// Piggybacked answers, empty ACKs and RSTs from upstream: (upstream, our MID).
    pub(super) by_upstream_mid: HashMap<(UpstreamId, u16), ExchangeKey>,
    /// ACK/RST from clients to our CON/NON answers: (client, our MID).
    pub(super) by_client_mid: HashMap<(SocketAddr, u16), ExchangeKey>,
    /// Live observations by (client, client token), for deregistration (RFC 7641 §3.6).
    pub(super) observers: HashMap<(SocketAddr, Token), ExchangeKey>,
    pub(super) upstreams: Vec<Upstream>,
    pub(super) timers: TimerWheel<TimerRef>,
    pub(super) out: VecDeque<Transmit>,
    pub(super) rng: SmallRng,
    pub(super) counters: Counters,
    /// Finished exchanges in the order they finished, for the bounded answer cache.
    pub(super) finished_order: VecDeque<ExchangeKey>,
    pub(super) finished: usize,
    pub(super) inflight: usize,
    pub(super) observations: usize,
    pub(super) client_mids: HashMap<SocketAddr, ClientMids>,
    /// Reused encode buffer.
    pub(super) scratch: Vec<u8>,
    /// Shutting down: new requests are refused with 5.03.
    pub(super) draining: bool,
}

impl Proxy {
    /// A proxy for a validated configuration.
    pub fn new(config: ProxyConfig) -> Self {
        let mut rng = match config.seed {
            0 => SmallRng::from_os_rng(),
            seed => SmallRng::seed_from_u64(seed),
        };
        let mut targets: Vec<SocketAddr> = config.routing.upstream.into_iter().collect();
        targets.extend(config.routing.allow.iter().map(|a| a.addr));
        let upstreams = targets
            .into_iter()
            .map(|addr| Upstream {
                addr,
                inflight: 0,
                mids: MidAllocator::new(rng.random()),
            })
            .collect();
        Proxy {
            config,
            exchanges: Slab::new(),
            next_generation: 1,
            by_client: HashMap::new(),
            by_upstream_mid: HashMap::new(),
            by_client_mid: HashMap::new(),
            client_mids: HashMap::new(),
            observers: HashMap::new(),
            upstreams,
            timers: TimerWheel::new(),
            out: VecDeque::new(),
            rng,
            counters: Counters::default(),
            finished_order: VecDeque::new(),
            finished: 0,
            inflight: 0,
            observations: 0,
            scratch: Vec::with_capacity(1500),
            draining: false,
        }
    }

    /// The upstream endpoints, by [`UpstreamId`]: the driver opens one socket for each.
    pub fn upstream_addrs(&self) -> Vec<SocketAddr> {
        self.upstreams.iter().map(|u| u.addr).collect()
    }

    /// The next datagram to send, if any.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.timers.next_deadline()
    }

    /// Runs every timer due at `now`. Calling it early or twice is harmless.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        while let Some(expired) = self.timers.poll(now) {
            let TimerRef { key, kind } = expired.value;
            if self.get(key).is_none() {
                self.counters.stale_timer_events += 1;
                continue;
            }
            self.on_timer(now, key, kind);
        }
    }

    /// Counters, with the gauges filled in.
    pub fn counters(&self) -> Counters {
        Counters {
            live_exchanges: self.exchanges.len() as u64,
            cached_answers: self.finished as u64,
            in_flight: self.inflight as u64,
            observations: self.observations as u64,
            ..self.counters.clone()
        }
    }

    /// Exchanges alive in any state (bounded by the configured limits).
    pub fn live_exchanges(&self) -> usize {
        self.exchanges.len()
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
        self.timers.len()
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
        self.exchanges
            .get(key.index as usize)
            .filter(|e| e.generation == key.generation)
    }

    pub(super) fn get_mut(&mut self, key: ExchangeKey) -> Option<&mut Exchange> {
        self.exchanges
            .get_mut(key.index as usize)
            .filter(|e| e.generation == key.generation)
    }

    pub(super) fn arm(&mut self, key: ExchangeKey, kind: TimerKind, at: Timestamp) -> TimerId {
        self.timers.insert(at, TimerRef { key, kind })
    }

    fn on_timer(&mut self, now: Timestamp, key: ExchangeKey, kind: TimerKind) {
        let Some(x) = self.get(key) else { return };
        // Each kind acts only in the states it belongs to: a finished exchange is never
        // forwarded again, whatever timer fires.
        let acts = match kind {
            TimerKind::UpstreamRetransmit => x.state == State::Waiting,
            TimerKind::TotalTimeout => x.upstream_pending(),
            TimerKind::AckDelay => !x.client_acked && x.client_type == MessageType::Con,
            TimerKind::ClientRetransmit => x.delivery.is_some(),
            TimerKind::ObserveStale => x.state == State::Observing,
            TimerKind::Expire => true,
        };
        if !acts {
            self.counters.stale_timer_events += 1;
            return;
        }
        match kind {
            TimerKind::UpstreamRetransmit => self.retransmit_upstream(now, key),
            TimerKind::TotalTimeout => {
                let reason = match x.state {
                    State::Waiting => "no answer after all retransmissions",
                    _ => "separate response never came",
                };
                self.give_up(now, key, Code::GATEWAY_TIMEOUT, reason);
            }
            TimerKind::AckDelay => self.send_empty_ack(key),
            TimerKind::ClientRetransmit => self.retransmit_to_client(now, key),
            TimerKind::ObserveStale => {
                log::debug!("observation {key:?} went stale");
                self.end_observation(now, key);
            }
            TimerKind::Expire => self.expire(now, key),
        }
    }

    /// The client's CON request was not answered quickly: ACK it now, answer separately later.
    pub(super) fn send_empty_ack(&mut self, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        x.client_acked = true;
        let (client, mid, ack_timer) = (x.client, x.client_mid, x.ack_timer.take());
        if let Some(t) = ack_timer {
            self.timers.cancel(t);
        }
        let mut buf = Vec::with_capacity(4);
        crate::coap::empty_ack(&mut buf, mid);
        self.counters.empty_acks_sent += 1;
        self.push(Destination::Client(client), buf);
    }

    pub(super) fn push(&mut self, to: Destination, payload: Vec<u8>) {
        self.out.push_back(Transmit { to, payload });
    }

    /// Gives up on the upstream and answers the client with a proxy error (5.02 or 5.04).
    pub(super) fn give_up(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        code: Code,
        why: &'static str,
    ) {
        let Some(x) = self.get(key) else { return };
        let addr = self.upstreams[usize::from(x.upstream)].addr;
        log::info!(
            "giving up on {} for {} after {} attempt(s): {why}; answering {code}",
            addr,
            x.client,
            x.attempts
        );
        match code {
            Code::BAD_GATEWAY => self.counters.bad_gateway_5_02 += 1,
            _ => self.counters.gateway_timeout_5_04 += 1,
        }
        self.close_upstream_leg(key);
        let answer = LocalAnswer {
            code,
            max_age: None,
            diagnostic: why,
        };
        let token = self.get(key).expect("checked above").client_token;
        let mut buf = std::mem::take(&mut self.scratch);
        encode_local(&mut buf, MessageType::Ack, 0, token.as_bytes(), &answer);
        self.answer_client(now, key, &buf, false);
        self.scratch = buf;
    }

    /// Leaves `Waiting`/`AwaitingSeparate`: no more retransmissions, MID and slot released.
    pub(super) fn close_upstream_leg(&mut self, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        if !x.upstream_pending() {
            return;
        }
        let timers = [x.retransmit_timer.take(), x.total_timer.take()];
        x.request = Box::default();
        let (up, mid, live) = (x.upstream, x.upstream_mid, x.upstream_mid_live);
        x.upstream_mid_live = false;
        x.state = State::Finished;
        for t in timers.into_iter().flatten() {
            self.timers.cancel(t);
        }
        if live {
            self.by_upstream_mid.remove(&(up, mid));
        }
        self.upstreams[usize::from(up)].inflight -= 1;
        self.inflight -= 1;
    }

    /// Sends an answer to the client: piggybacked on the ACK while the client's CON is not yet
    /// acknowledged, otherwise as a separate CON (retransmitted until ACKed) or a NON.
    /// `encoded` is a complete message whose type, MID and token are replaced here.
    /// `observing` keeps the exchange alive for notifications instead of finishing it.
    pub(super) fn answer_client(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        encoded: &[u8],
        observing: bool,
    ) {
        let Some(x) = self.get(key) else { return };
        let (ty, mid) = match (x.client_type, x.client_acked) {
            (MessageType::Con, false) => (MessageType::Ack, x.client_mid),
            (MessageType::Con, true) => (MessageType::Con, self.fresh_client_mid(x.client)),
            _ => (MessageType::Non, self.fresh_client_mid(x.client)),
        };
        let token = self.get(key).expect("checked above").client_token;
        let mut bytes = Vec::with_capacity(encoded.len());
        let encoded = Message::parse(encoded).ok().filter(|msg| {
            rewrite(&mut bytes, msg, (ty, mid, token.as_bytes()), |b, n, v| {
                b.option(n, v);
            })
            .finish()
            .is_ok()
        });
        let Some(msg) = encoded else {
            // Cannot happen for parsed input; finish anyway so no state is left behind.
            return self.finish(now, key);
        };
        self.send_to_client(now, key, ty, mid, bytes.clone());
        let x = self.get_mut(key).expect("checked above");
        x.answer = bytes.into_boxed_slice();
        if let Some(t) = x.ack_timer.take() {
            self.timers.cancel(t);
        }
        match observing {
            true => self.start_observation(now, key, &msg),
            false => self.finish(now, key),
        }
    }

    /// Sends a CON or NON to the client, tracking its MID for the ACK/RST; CON is retransmitted.
    ///
    /// A NON's MID is tracked only for an observation, where the client's RST cancels it
    /// (RFC 7641 §3.6); an RST to a plain NON answer would have nothing left to stop.
    pub(super) fn send_to_client(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        ty: MessageType,
        mid: u16,
        bytes: Vec<u8>,
    ) {
        let Some(x) = self.get(key) else { return };
        let (client, observe) = (x.client, x.wants_observe);
        if ty == MessageType::Non && observe {
            self.forget_non_mid(key);
            self.get_mut(key).expect("checked above").non_mid = Some(mid);
        }
        if ty == MessageType::Con || (ty == MessageType::Non && observe) {
            self.by_client_mid.insert((client, mid), key);
        }
        if ty == MessageType::Con {
            self.cancel_delivery(key);
            // RFC 7252 §4.8: initial timeout uniform in [ACK_TIMEOUT, ACK_TIMEOUT * 1.5].
            let timeout =
                params::ACK_TIMEOUT.mul_f64(self.rng.random_range(1.0..params::ACK_RANDOM_FACTOR));
            let timer = self.arm(key, TimerKind::ClientRetransmit, now + timeout);
            let x = self.get_mut(key).expect("checked above");
            x.delivery = Some(Box::new(ClientDelivery {
                mid,
                retransmits: 0,
                timeout,
                timer,
            }));
        }
        self.push(Destination::Client(client), bytes);
    }

    fn retransmit_to_client(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        let Some(d) = x.delivery.as_mut() else { return };
        if d.retransmits >= params::MAX_RETRANSMIT {
            let mid = d.mid;
            x.delivery = None;
            let client = x.client;
            self.by_client_mid.remove(&(client, mid));
            self.counters.client_delivery_failures += 1;
            log::info!("client {client} never acknowledged answer MID {mid}; giving up on it");
            return;
        }
        d.retransmits += 1;
        d.timeout *= 2;
        let (timeout, client) = (d.timeout, x.client);
        let bytes = x.answer.to_vec();
        let timer = self.arm(key, TimerKind::ClientRetransmit, now + timeout);
        if let Some(d) = self.get_mut(key).and_then(|x| x.delivery.as_mut()) {
            d.timer = timer;
        }
        self.counters.client_retransmissions += 1;
        self.push(Destination::Client(client), bytes);
    }

    /// Stops retransmitting to the client (ACK or RST arrived, or the exchange is going away).
    pub(super) fn cancel_delivery(&mut self, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        if let Some(d) = x.delivery.take() {
            let client = x.client;
            self.timers.cancel(d.timer);
            self.by_client_mid.remove(&(client, d.mid));
        }
    }

    /// Unmaps the latest NON to the client: superseded, or the exchange is going away.
    fn forget_non_mid(&mut self, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        if let Some(mid) = x.non_mid.take() {
            let id = (x.client, mid);
            if self.by_client_mid.get(&id) == Some(&key) {
                self.by_client_mid.remove(&id);
            }
        }
    }

    /// The next Message ID towards `client`, whose exchange holds its [`ClientMids`].
    pub(super) fn fresh_client_mid(&mut self, client: SocketAddr) -> u16 {
        match self.client_mids.get_mut(&client) {
            Some(m) => {
                m.next = m.next.wrapping_add(1);
                m.next
            }
            None => self.rng.random(),
        }
    }

    /// Counts an upstream's own answer (the proxy's 5.02/5.03/5.04 are counted where made).
    pub(super) fn track_answer_code(&mut self, code: Code) {
        match code.class() {
            2 => self.counters.relayed_2xx += 1,
            4 => self.counters.relayed_4xx += 1,
            _ => self.counters.relayed_5xx += 1,
        }
    }

    /// Enters `Finished`: kept to answer duplicates until its lifetime ends, within the cache bound.
    pub(super) fn finish(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        x.state = State::Finished;
        let lifetime = match x.client_type {
            MessageType::Con => params::EXCHANGE_LIFETIME,
            _ => params::NON_LIFETIME,
        };
        // A piggybacked answer carries the client's MID; any other carries one of ours, which
        // must stay reserved towards the client for the lifetime after it was sent (§4.4).
        let ours = peek_header(&x.answer).is_some_and(|(ty, _, _)| ty != MessageType::Ack);
        let expires = (if ours { now } else { x.created } + lifetime).max(now);
        if let Some(t) = x.life_timer.take() {
            self.timers.cancel(t);
        }
        let timer = self.arm(key, TimerKind::Expire, expires);
        self.get_mut(key).expect("checked above").life_timer = Some(timer);
        self.finished += 1;
        self.finished_order.push_back(key);
        self.enforce_cache_bound(now);
    }

    /// Keeps at most `max_cached` finished exchanges, evicting the oldest first. Memory stays
    /// bounded; the price of a cache smaller than ~100 s of answers is that a late client
    /// retransmission of an evicted answer is forwarded again (counted as `early_evictions`).
    fn enforce_cache_bound(&mut self, now: Timestamp) {
        while let Some(&oldest) = self.finished_order.front() {
            let alive_finished = self.get(oldest).is_some_and(|x| x.state == State::Finished);
            if alive_finished && self.finished <= self.config.max_cached {
                break;
            }
            self.finished_order.pop_front();
            if alive_finished {
                self.counters.cache_evictions += 1;
                if self
                    .get(oldest)
                    .is_some_and(|x| x.created + params::MAX_TRANSMIT_WAIT > now)
                {
                    // The client may still retransmit this request; it would be forwarded again.
                    if self.counters.early_evictions == 0 {
                        log::warn!("--max-cached is too small for this request rate: evicting answers clients may still retransmit for (size it to >= 100 s of answers)");
                    }
                    self.counters.early_evictions += 1;
                }
                self.free(oldest);
            }
        }
    }

    fn expire(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.get(key) else { return };
        if x.delivery.is_some() {
            // Still retransmitting to the client: that ends within MAX_TRANSMIT_WAIT.
            let timer = self.arm(key, TimerKind::Expire, now + params::MAX_TRANSMIT_WAIT);
            self.get_mut(key).expect("checked above").life_timer = Some(timer);
            return;
        }
        self.free(key);
    }

    /// Removes every trace of an exchange: maps, timers, counters, slab slot.
    pub(super) fn free(&mut self, key: ExchangeKey) {
        // Only exchanges that went through `finish` are counted as cached answers.
        let counted = self.get(key).is_some_and(|x| x.state == State::Finished);
        self.close_upstream_leg(key);
        if self.get(key).is_some_and(|x| x.state == State::Observing) {
            self.leave_observing(key);
        }
        self.cancel_delivery(key);
        self.forget_non_mid(key);
        let x = self.exchanges.remove(key.index as usize);
        for t in [x.retransmit_timer, x.total_timer, x.ack_timer, x.life_timer]
            .into_iter()
            .flatten()
        {
            self.timers.cancel(t);
        }
        if counted {
            self.finished -= 1;
        }
        if let Entry::Occupied(mut mids) = self.client_mids.entry(x.client) {
            mids.get_mut().exchanges -= 1;
            if mids.get().exchanges == 0 {
                mids.remove();
            }
        }
        self.by_client
            .remove(&(x.client, x.client_token, x.client_mid));
        self.trim_finished_order();
    }

    /// Drops freed exchanges from the front of the finish order, so it drains with them.
    fn trim_finished_order(&mut self) {
        while let Some(&front) = self.finished_order.front() {
            if self.get(front).is_some() {
                break;
            }
            self.finished_order.pop_front();
        }
    }

    /// Creates the exchange of a new client request and indexes it for duplicates.
    pub(super) fn insert_exchange(
        &mut self,
        now: Timestamp,
        from: SocketAddr,
        token: Token,
        msg: &Message,
        state: State,
        non_idempotent: bool,
    ) -> ExchangeKey {
        let generation = self.next_generation();
        let client_id = (msg.message_id(), token, msg.msg_type());
        let x = Exchange::new(generation, state, now, from, client_id, non_idempotent);
        let index = u32::try_from(self.exchanges.insert(x)).expect("fewer than 2^32 exchanges");
        let key = ExchangeKey { index, generation };
        self.by_client.insert((from, token, msg.message_id()), key);
        let rng = &mut self.rng;
        let mids = self.client_mids.entry(from).or_insert_with(|| ClientMids {
            next: rng.random(),
            exchanges: 0,
        });
        mids.exchanges += 1;
        key
    }

    /// A fresh generation for a new exchange (never 0, wraps after 2^32 exchanges).
    pub(super) fn next_generation(&mut self) -> u32 {
        let g = self.next_generation;
        self.next_generation = g.wrapping_add(1).max(1);
        g
    }
}

/// Encodes a response the proxy makes itself (type, MID and token are placeholders until
/// [`Proxy::answer_client`] rewrites them, or final for a direct answer).
pub(super) fn encode_local(
    out: &mut Vec<u8>,
    ty: MessageType,
    mid: u16,
    token: &[u8],
    a: &LocalAnswer,
) {
    let mut b = MessageBuilder::new(out, ty, a.code, mid, token);
    if let Some(age) = a.max_age {
        b.option(MAX_AGE, &encode_uint(age));
    }
    b.payload(a.diagnostic.as_bytes());
    // Tokens come from parsed messages (<= 8 bytes), so encoding cannot fail.
    let _ = b.finish();
}

#[cfg(test)]
mod mid_tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn the_id_space_runs_out_within_a_lifetime_and_returns_after_it() {
        let lifetime = Duration::from_secs(1);
        let mut mids = MidAllocator::new(0);
        for i in 0..=u16::MAX {
            assert_eq!(mids.allocate(at(0), lifetime), Some(i));
        }
        assert_eq!(mids.allocate(at(999), lifetime), None);
        assert_eq!(mids.allocate(at(1000), lifetime), Some(0));
    }

    #[test]
    fn refusals_are_reported_at_most_once_per_interval_with_their_count() {
        let mut mids = MidAllocator::new(0);
        assert_eq!(mids.refused(at(0)), Some(1));
        for ms in 1..=4 {
            assert_eq!(mids.refused(at(ms * 1000)), None);
        }
        assert_eq!(mids.refused(at(9_999)), None);
        assert_eq!(mids.refused(at(10_000)), Some(6));
        assert_eq!(mids.refused(at(10_001)), None);
    }
}
