//! The upstream leg: the proxy's own retry policy, matching what comes back from upstream
//! (ACKs, piggybacked and separate answers, RSTs, notifications; a reliable upstream's
//! responses by token alone, `reliable_upstream.rs`), upstream failures (5.02, 5.04), and
//! the Observe relays those answers keep alive (RFC 7641).

use std::time::Duration;

use rand::Rng;

use crate::coap::option::{self, decode_uint, ETAG, MAX_AGE, OBSERVE};
use crate::coap::{empty_ack, peek_header, rewrite, Code, Message, MessageType};
use crate::time::Timestamp;

use super::awaiting_proof::GiveUp;
use super::cache::CacheKey;
use super::endpoints::EndpointId;
use super::events::{ObserverLoss, ProxyEvent, Source};
use super::exchange::{Exchange, ExchangeKey, Relay, Reply, State, RELIABLE_HEADER};
use super::gate::Charge;
use super::limits::ObservationRefusal;
use super::local_answer::{encode_local, LocalAnswer};
use super::peer::Peer;
use super::reliable_upstream::upstream_type;
use super::{Destination, Proxy};

impl Proxy {
    /// A datagram arrived on the socket of endpoint `up` (from the upstream it is connected to).
    pub fn handle_upstream_datagram(&mut self, now: Timestamp, up: EndpointId, bytes: &[u8]) {
        self.gate.clock(now);
        let reliable = self.upstreams.endpoint_is_reliable(up);
        let msg = match Message::parse(bytes) {
            Ok(msg) => msg,
            Err(e) => return self.on_malformed_upstream(now, (up, reliable), bytes, e),
        };
        if reliable {
            // No message layer (RFC 8323 §2.2): the header is a placeholder.
            return self.on_reliable_upstream(now, up, &msg);
        }
        match msg.msg_type() {
            MessageType::Ack => self.on_upstream_ack(now, up, &msg),
            MessageType::Rst => match self.upstreams.exchange_for(up, msg.message_id()) {
                Some(key) => {
                    self.give_up(now, key, Code::BAD_GATEWAY, "upstream reset the request")
                }
                None => self.counters.strays.unmatched_upstream += 1,
            },
            MessageType::Con | MessageType::Non if msg.code().is_response() => {
                self.on_upstream_response_message(now, up, &msg)
            }
            // Pings and requests from an upstream are not ours to serve: reject (§4.2, §4.3).
            MessageType::Con => {
                self.counters.strays.unmatched_upstream += 1;
                self.send_rst(Destination::Upstream(up), msg.message_id());
            }
            MessageType::Non => self.counters.strays.unmatched_upstream += 1,
        }
    }

    /// An endpoint's socket reported ICMP port unreachable (ECONNREFUSED): nobody listens at
    /// its upstream, so every request still waiting on that upstream, from whichever endpoint,
    /// gets 5.02 (RFC 7252 §5.7.1).
    pub fn handle_upstream_unreachable(&mut self, now: Timestamp, endpoint: EndpointId) {
        self.fail_endpoint(now, endpoint, "upstream unreachable (ICMP)");
    }

    /// The coaps upstream behind `endpoint` refused the DTLS handshake (a wrong key, a
    /// certificate that does not verify): the requests waiting there get 5.02 at once.
    pub fn handle_upstream_refused(&mut self, now: Timestamp, endpoint: EndpointId) {
        self.fail_endpoint(now, endpoint, "upstream refused the DTLS handshake");
    }

    pub(super) fn fail_endpoint(
        &mut self,
        now: Timestamp,
        endpoint: EndpointId,
        why: &'static str,
    ) {
        self.gate.clock(now);
        let Some(up) = self.upstreams.endpoints().upstream_of(endpoint) else {
            return;
        };
        let waiting: Vec<ExchangeKey> = (self.exchanges.iter())
            .filter(|(_, x)| x.upstream == up && x.upstream_pending())
            .map(|(key, _)| key)
            .collect();
        for key in waiting {
            self.give_up(now, key, Code::BAD_GATEWAY, why);
        }
    }

    /// Sends (or resends) the request upstream and arms the next step of the retry policy.
    pub(super) fn transmit_upstream(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(non_idempotent) = self.exchanges.get(key).map(|x| x.non_idempotent) else {
            return;
        };
        let policy = self.policy(non_idempotent);
        let reliable =
            (self.exchanges.get(key)).is_some_and(|x| self.upstreams.is_reliable(x.upstream));
        let x = self.exchanges.get_mut(key).expect("checked above");
        let State::Waiting { leg, resend_at } = &mut x.state else {
            debug_assert!(false, "only a waiting exchange goes upstream");
            return;
        };
        leg.attempts += 1;
        // delay_k = timeout * factor^(k-1) * U[1-jitter, 1+jitter]; after the last retry the
        // same timer means "retries exhausted".
        let spread = self
            .rng
            .random_range(1.0 - policy.jitter..=1.0 + policy.jitter);
        let nominal = policy.nominal_delay(leg.attempts).as_nanos() as f64;
        let delay = Duration::from_nanos((nominal * spread).min(u64::MAX as f64) as u64);
        // A reliable transport delivers or fails the connection (RFC 8323 §2.2): no resend,
        // and the total timeout bounds the wait.
        *resend_at = (!reliable).then_some(now + delay);
        self.exchanges.rearm(key);
        self.push_from(key, |x| {
            let request = x.state.leg()?.request.as_deref()?;
            Some((Destination::Upstream(x.endpoint), request))
        });
    }

    /// The retransmission timer fired while still `Waiting`.
    pub(super) fn retransmit_upstream(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        let attempts = x.state.leg().map_or(0, |leg| leg.attempts);
        if attempts > self.policy_of(x).max_retries {
            return self.give_up(now, key, Code::GATEWAY_TIMEOUT, "retries exhausted");
        }
        self.counters.traffic.upstream_retransmissions += 1;
        self.transmit_upstream(now, key);
    }

    /// A malformed datagram from upstream: RST a CON (§4.2); a malformed piggybacked answer
    /// fails its exchange with 5.02 (§5.7.1) rather than leaving the client waiting.
    fn on_malformed_upstream(
        &mut self,
        now: Timestamp,
        (up, reliable): (EndpointId, bool),
        bytes: &[u8],
        e: crate::coap::FormatError,
    ) {
        self.counters.strays.upstream_format_errors += 1;
        let from = Source::Upstream(up);
        self.events.push(ProxyEvent::Malformed { from, error: e });
        if reliable {
            return self.on_malformed_reliable(now, up, bytes);
        }
        match peek_header(bytes) {
            Some((MessageType::Con, mid, _)) => self.send_rst(Destination::Upstream(up), mid),
            Some((MessageType::Ack, mid, _)) => {
                if let Some(key) = self.upstreams.exchange_for(up, mid) {
                    self.give_up(
                        now,
                        key,
                        Code::BAD_GATEWAY,
                        "malformed response from upstream",
                    );
                }
            }
            _ => {}
        }
    }

    /// An ACK from upstream: empty (the answer will come separately) or a piggybacked answer.
    /// Both must match the request's endpoint and MID; a piggybacked answer also its token
    /// (§5.3.2), which names the exchange, so that one needs no MID lookup.
    fn on_upstream_ack(&mut self, now: Timestamp, up: EndpointId, msg: &Message) {
        let mid = msg.message_id();
        if !msg.code().is_empty() {
            let waiting = self.key_for_token(up, msg.token()).filter(|&k| {
                self.exchanges.get(k).is_some_and(
                    |x| matches!(&x.state, State::Waiting { leg, .. } if leg.mid == mid),
                )
            });
            return match waiting {
                Some(key) => self.on_upstream_answer(now, key, msg),
                // A duplicate ACK, or one that does not match the request (§5.3.2).
                None => self.counters.strays.unmatched_upstream += 1,
            };
        }
        let Some(key) = self.upstreams.exchange_for(up, mid) else {
            self.counters.strays.unmatched_upstream += 1;
            return;
        };
        let x = self.exchanges.get_mut(key).expect("maps hold live keys");
        // §5.2.2: the upstream will answer separately; stop retransmitting.
        if matches!(x.state, State::Waiting { .. }) {
            self.usage.drop_request(&mut self.exchanges, key);
            self.exchanges.update(key, |x| {
                if let State::Waiting { leg, .. } = std::mem::replace(&mut x.state, State::Answered)
                {
                    x.state = State::AwaitingSeparate(leg);
                }
            });
        }
    }

    /// A separate response or a notification (CON or NON), matched by our token and the
    /// endpoint it came to. A CON is acknowledged, and its retransmissions (when our ACK was
    /// lost) are acknowledged again but not taken twice (RFC 7252 §4.5).
    fn on_upstream_response_message(&mut self, now: Timestamp, up: EndpointId, msg: &Message) {
        let (mid, con) = (msg.message_id(), msg.msg_type() == MessageType::Con);
        if con && self.kept.acked_upstream_con(up, mid) {
            return self.ack_upstream(up, mid);
        }
        if self.sharing.fanout().has_registration(up, msg.token()) {
            if con {
                self.ack_upstream(up, mid);
                self.kept.keep_upstream_con(now, up, mid);
            }
            self.notify_group(now, up, msg);
            return;
        }
        let Some((key, observing)) = self.match_response(up, msg.token()) else {
            // Unknown token or a finished exchange: RST, which also cancels an
            // observation the upstream still holds (RFC 7641 §3.6).
            self.counters.strays.unmatched_upstream += 1;
            return self.send_rst(Destination::Upstream(up), mid);
        };
        if con {
            self.ack_upstream(up, mid);
            self.kept.keep_upstream_con(now, up, mid);
        }
        match observing {
            true => self.relay_notification(now, key, msg),
            false => self.on_upstream_answer(now, key, msg),
        }
    }

    fn ack_upstream(&mut self, up: EndpointId, mid: u16) {
        self.gate
            .send_encoded(Charge::Relayed, Destination::Upstream(up), |b| {
                empty_ack(b, mid)
            });
    }

    /// The exchange a response with `token` on `up` is for, and whether it is a notification
    /// (observing) or the answer (the leg is open); `None` for an unknown token or a
    /// finished exchange.
    pub(super) fn match_response(
        &self,
        up: EndpointId,
        token: &[u8],
    ) -> Option<(ExchangeKey, bool)> {
        let key = self.key_for_token(up, token)?;
        match self.exchanges.get(key)?.state {
            State::Observing(_) => Some((key, true)),
            State::Waiting { .. } | State::AwaitingSeparate(_) => Some((key, false)),
            State::Answered | State::AwaitingProof { .. } => None,
        }
    }

    /// Our tokens start with the exchange's slab index; the full token and the endpoint must
    /// match.
    fn key_for_token(&self, up: EndpointId, token: &[u8]) -> Option<ExchangeKey> {
        let index = u32::from_be_bytes(token.get(..4)?.try_into().ok()?);
        let (key, x) = self.exchanges.at_index(index)?;
        (x.upstream_token.as_bytes() == token && x.endpoint == up).then_some(key)
    }

    /// Whether a 2.03 names one of the ETags the request sent upstream carried. A 2.03 says
    /// "the response with this ETag is still valid" and MUST carry that ETag (RFC 7252
    /// §5.9.1.3): one without, or for an ETag nobody asked about, validates nothing, and the
    /// client (which may have sent no ETag at all) would get an answer with no content.
    fn validates_what_was_asked(&self, key: ExchangeKey, msg: &Message) -> bool {
        let mut named = msg.options().filter(|&(n, _)| n == ETAG).map(|(_, v)| v);
        let Some(etag) = named.next() else {
            return false;
        };
        let sent = (self.exchanges.get(key)).and_then(|x| x.state.leg()?.request.as_deref());
        match sent.map(Message::parse) {
            Some(Ok(request)) => request.options().any(|(n, v)| n == ETAG && v == etag),
            // The copy is gone only once nothing can go upstream again; the ETag is there.
            _ => true,
        }
    }

    /// The upstream's answer to a pending request: relay it, or 5.02 if it carries an unsafe
    /// option we do not recognise (RFC 7252 §5.7.1). Safe-to-forward ones pass, critical or
    /// not: an OSCORE response (option 9) is for the client to verify, not for the proxy.
    pub(super) fn on_upstream_answer(&mut self, now: Timestamp, key: ExchangeKey, msg: &Message) {
        if msg.options().any(|(n, _)| option::proxy_must_reject(n)) {
            return self.give_up(
                now,
                key,
                Code::BAD_GATEWAY,
                "unrecognised unsafe option in response",
            );
        }
        if msg.code() == Code::VALID && !self.validates_what_was_asked(key, msg) {
            return self.give_up(now, key, Code::BAD_GATEWAY, "2.03 for no ETag asked");
        }
        self.track_answer_code(msg.code());
        let registers = self.exchanges.get(key).is_some_and(|x| x.observe.is_some())
            && msg.code().class() == 2
            && msg.option(OBSERVE).is_some();
        if registers {
            // The upstream holds it from now on, whatever the proxy does with it.
            self.keep_registration(key);
        }
        self.close_upstream_leg(now, key);
        let cache = self.exchanges.get_mut(key).and_then(|x| x.cache.take());
        let group_key = cache
            .as_ref()
            .filter(|_| registers)
            .and_then(|c| c.stored_key());
        let instead = cache.and_then(|cache| self.sharing.answer(now, *cache, msg));
        let stored;
        let msg = match instead.as_deref().map(Message::parse) {
            Some(Ok(refreshed)) => {
                stored = refreshed;
                &stored
            }
            _ => msg,
        };
        if registers && self.observation_refused(key) {
            return self.relay_without_observe(now, key, msg);
        }
        self.answer_client(now, key, msg, registers);
        if let Some(group_key) = group_key {
            self.found_group(key, group_key);
        }
    }

    /// Whether the registration of exchange `key` must be refused: the table is full, or
    /// its client's source holds its share (`observation_shares.rs`). Counted and reported.
    fn observation_refused(&mut self, key: ExchangeKey) -> bool {
        let Some(x) = self.exchanges.get(key) else {
            return false;
        };
        let (client, source) = (x.client, self.clients.source(x.client_slot));
        let limits = &self.config.limits;
        let refusal = self.usage.observation_refusal(limits, &source);
        let observe = &mut self.counters.observe;
        match refusal {
            None => return false,
            Some(ObservationRefusal::Table) => {
                observe.refused_table += 1;
                self.events.push(ProxyEvent::ObservationLimit { client });
            }
            Some(ObservationRefusal::Share) => {
                observe.refused_share += 1;
                self.events.push(ProxyEvent::ObservationShare { client });
            }
        }
        true
    }

    /// Fails the exchange's upstream leg: the client gets `code` (5.02 or 5.04).
    pub(super) fn give_up(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        code: Code,
        why: &'static str,
    ) {
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
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
        let Some(x) = self.exchanges.get_mut(key).filter(|x| x.upstream_pending()) else {
            return;
        };
        let (up, endpoint, client) = (x.upstream, x.endpoint, x.client_slot);
        let (State::Waiting { leg, .. } | State::AwaitingSeparate(leg)) =
            std::mem::replace(&mut x.state, State::Answered)
        else {
            unreachable!("the leg is open: checked above");
        };
        self.usage.leg_closed(leg.request);
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
}

// Observe (RFC 7641) through the proxy: one upstream registration per client registration,
// each notification relayed to the client with the client's token, for as long as the
// observation lives.

/// RFC 7641 §3.4: notifications older than this are never compared by sequence number.
const REORDER_WINDOW: Duration = Duration::from_secs(128);
/// How long after its Max-Age a notification may be followed by the next one before the
/// observation is considered dead upstream.
const STALE_MARGIN: Duration = Duration::from_secs(30);
/// RFC 7641 §4.5: a notification goes as a CON at least this often, whatever the count.
const CON_AT_LEAST_EVERY: Duration = Duration::from_secs(24 * 3600);

impl Proxy {
    /// The registration succeeded: keep the exchange alive for notifications.
    pub(super) fn start_observation(&mut self, now: Timestamp, key: ExchangeKey, msg: &Message) {
        let Some(x) = self.exchanges.get_mut(key) else {
            return;
        };
        x.state = State::Observing(Relay {
            last_notification: (observe_seq(msg), now),
            // The registration's answer came on the client's CON, or was the first NON: the
            // count towards the next CON starts here.
            since_con: (0, now),
            stale_at: None,
        });
        let (id, endpoint) = ((x.client, x.client_token), x.endpoint);
        let source = self.clients.source(x.client_slot);
        self.usage.count_observation(true, source);
        self.observers.insert(id, key);
        // Notifications come to the endpoint the registration left from: it stays open.
        self.upstreams.endpoints_mut().acquire(endpoint);
        self.arm_stale_timer(now, key, msg);
    }

    /// Relays one notification, unless it is older than the last one (RFC 7641 §3.4).
    pub(super) fn relay_notification(&mut self, now: Timestamp, key: ExchangeKey, msg: &Message) {
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        let Some(&Relay {
            last_notification: (last, at),
            ..
        }) = x.state.relay()
        else {
            return;
        };
        let seq = observe_seq(msg);
        if !is_newer(seq, last, now.saturating_since(at)) && msg.option(OBSERVE).is_some() {
            return;
        }
        // A response without Observe, or an error, ends the observation (RFC 7641 §3.2).
        let last = msg.option(OBSERVE).is_none() || msg.code().class() != 2;
        let len = msg.as_bytes().len() - msg.token().len() + x.client_token.as_bytes().len();
        let upstream = upstream_type(self.upstreams.is_reliable(x.upstream), msg);
        let (ty, mid) = self.notification_header(now, key, upstream, len);
        let x = self.exchanges.get(key).expect("checked above");
        let reliable = x.reply == Reply::Reliable;
        let token = x.client_token;
        let mut bytes = Vec::with_capacity(msg.as_bytes().len());
        let ok = rewrite(&mut bytes, msg, (ty, mid, token.as_bytes()), |b, n, v| {
            b.option(n, v);
        })
        .finish();
        if ok.is_err() {
            return;
        }
        self.counters.observe.notifications_relayed += 1;
        if let Some(relay) = self
            .exchanges
            .get_mut(key)
            .and_then(|x| x.state.relay_mut())
        {
            relay.last_notification = (seq, now);
        }
        if self
            .exchanges
            .get(key)
            .is_some_and(|x| x.delivery.is_some())
        {
            self.supersede_in_flight(key, mid, bytes);
        } else {
            if ty == MessageType::Con && !reliable {
                self.counters.observe.notifications_con += 1;
            }
            if !reliable {
                // Kept for a retransmission or a replay, which a peer without a message
                // layer never needs: its notifications go once each.
                self.usage.keep_answer(
                    (&mut self.exchanges, &mut self.clients),
                    key,
                    Some(Box::from(&bytes[..])),
                );
            }
            self.send_to_client(now, key, ty, mid, &bytes);
        }
        if last {
            self.end_observation(now, key);
        } else {
            self.arm_stale_timer(now, key, msg);
        }
    }

    /// The type and Message ID of the next notification to the observer of exchange `key`,
    /// `len` bytes, which came from upstream as `upstream`: a placeholder
    /// ([`RELIABLE_HEADER`]) for an observer without a message layer (RFC 8323 §2.2);
    /// else a fresh Message ID, and CON or NON ([`notification_type`](Self::notification_type)).
    fn notification_header(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        upstream: MessageType,
        len: usize,
    ) -> (MessageType, u16) {
        let Some(x) = self.exchanges.get(key) else {
            return RELIABLE_HEADER;
        };
        if x.reply == Reply::Reliable {
            return RELIABLE_HEADER;
        }
        let (slot, client) = (x.client_slot, x.client);
        // Past an unproven observer's allowance a notification goes as a CON, whose ACK
        // proves the observer (`validation.rs`); one that never acknowledges loses its
        // observation when that CON times out.
        let upstream_type = match self.gate.fits(client, len) {
            true => upstream,
            false => MessageType::Con,
        };
        let ty = self.notification_type(now, key, upstream_type);
        (ty, self.clients.fresh_mid(slot))
    }

    /// CON or NON for the next notification to this observer (RFC 7641 §4.5): CON if the
    /// upstream's was (or it must be, `upstream`), if one is still in flight (it takes that one's place), and at least
    /// every `observe_con_every` notifications and every 24 hours, so that an observer that
    /// has gone is noticed (its CON times out, and the observation ends); NON otherwise.
    fn notification_type(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        upstream: MessageType,
    ) -> MessageType {
        let every = self.config.observe_con_every;
        let Some(x) = self.exchanges.get_mut(key) else {
            return MessageType::Non;
        };
        let delivering = x.delivery.is_some();
        let Some(relay) = x.state.relay_mut() else {
            return MessageType::Non;
        };
        let (nons, since) = relay.since_con;
        let con = upstream == MessageType::Con
            || delivering
            || nons.saturating_add(1) >= every
            || now.saturating_since(since) >= CON_AT_LEAST_EVERY;
        if con {
            relay.since_con = (0, now);
            MessageType::Con
        } else {
            relay.since_con.0 = nons + 1;
            MessageType::Non
        }
    }

    /// A newer notification while a CON one awaits its ACK: it takes the older one's place
    /// and its retransmission state (RFC 7641 §4.5.2), and goes out at the next
    /// retransmission rather than now. So an observer has one CON in flight at most (RFC 7252
    /// §4.7's NSTART of 1), and one that never acknowledges gets the CON's 5 transmissions
    /// whatever the upstream's rate, after which the observation ends.
    fn supersede_in_flight(&mut self, key: ExchangeKey, mid: u16, bytes: Vec<u8>) {
        let Some(x) = self.exchanges.get_mut(key) else {
            return;
        };
        let Some(d) = x.delivery.as_mut() else { return };
        let old = std::mem::replace(&mut d.mid, mid);
        let client = x.client;
        self.usage.keep_answer(
            (&mut self.exchanges, &mut self.clients),
            key,
            Some(bytes.into_boxed_slice()),
        );
        self.counters.observe.notifications_superseded += 1;
        self.deliveries.untrack_for(client, old, key);
        self.deliveries.track(client, mid, key);
    }

    /// The client has gone (RFC 7641 §3.6, §4.5): its observation ends, and what is being
    /// retransmitted to it stops. The upstream learns at its next notification, which finds
    /// no observation and gets an RST (§3.6).
    pub(super) fn observer_gone(&mut self, now: Timestamp, key: ExchangeKey, why: ObserverLoss) {
        let Some(x) = self
            .exchanges
            .get(key)
            .filter(|x| matches!(x.state, State::Observing(_)))
        else {
            return;
        };
        let client = x.client;
        self.counters.observe.observers_lost += 1;
        self.events.push(ProxyEvent::ObserverGone { client, why });
        self.cancel_delivery(key);
        self.end_observation(now, key);
    }

    /// The client cannot be reached any more (for a UDP client: ICMP port unreachable, which
    /// the driver reads from the client socket's error queue), proven or not: every
    /// observation of it ends, and every answer held for its proof is given up (an unproven
    /// one is taken not to receive, `awaiting_proof.rs`). Requests it has in flight finish as
    /// usual; their answers go nowhere, within its allowance.
    pub fn handle_client_unreachable(&mut self, now: Timestamp, client: impl Into<Peer>) {
        let client = client.into();
        self.gate.clock(now);
        let keys: Vec<ExchangeKey> = (self.observers.iter())
            .filter(|((peer, _), _)| *peer == client)
            .map(|(_, &key)| key)
            .collect();
        for key in keys {
            self.observer_gone(now, key, ObserverLoss::Unreachable);
        }
        if let Some(addr) = client.claimed_address() {
            self.gate.validation_mut().unreachable(now, addr);
            self.give_up_held_for(now, addr, GiveUp::Unreachable);
        }
    }

    /// Ends an observation (deregistration, client RST, final response, or staleness).
    pub(super) fn end_observation(&mut self, now: Timestamp, key: ExchangeKey) {
        if self
            .exchanges
            .get(key)
            .is_some_and(|x| matches!(x.state, State::Observing(_)))
        {
            self.leave_observing(now, key);
            self.finish(now, key);
        }
    }

    fn leave_observing(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.exchanges.get_mut(key) else {
            return;
        };
        x.state = State::Answered;
        let (id, endpoint) = ((x.client, x.client_token), x.endpoint);
        let source = self.clients.source(x.client_slot);
        self.exchanges.rearm(key);
        self.usage.count_observation(false, source);
        if self.observers.get(&id) == Some(&key) {
            self.observers.remove(&id);
        }
        self.upstreams.endpoints_mut().release(now, endpoint);
        self.leave_group(key);
    }

    /// A member stops observing: it leaves its group, and the group goes with its last.
    fn leave_group(&mut self, key: ExchangeKey) {
        let observer = self.exchanges.get_mut(key).and_then(|x| x.observe.as_mut());
        if let Some(group) = observer.and_then(|o| o.group.take()) {
            self.sharing.fanout_mut().leave(group, key);
        }
    }

    /// A registration answered upstream started observing: it founds the group of its
    /// resource, unless one exists (it registered on its own, see `fanout.rs`).
    pub(super) fn found_group(&mut self, key: ExchangeKey, cache_key: CacheKey) {
        let observing = |x: &&Exchange| matches!(x.state, State::Observing(_));
        let Some(x) = self.exchanges.get(key).filter(observing) else {
            return;
        };
        let Some(group) = self.sharing.fanout_mut().found(key, x, cache_key) else {
            return;
        };
        if let Some(observer) = self.exchanges.get_mut(key).and_then(|x| x.observe.as_mut()) {
            observer.group = Some(group);
        }
    }

    /// A notification for a group's registration: kept in the cache and relayed to every
    /// member. Returns false if `token` on `endpoint` is no group's.
    pub(super) fn notify_group(
        &mut self,
        now: Timestamp,
        endpoint: EndpointId,
        msg: &Message,
    ) -> bool {
        let fanout = self.sharing.fanout();
        let Some((members, key)) = fanout.for_registration(endpoint, msg.token()) else {
            return false;
        };
        self.sharing.store_notification(now, &key, msg);
        for member in members {
            self.relay_notification(now, member, msg);
        }
        true
    }

    /// Relays a registration answer we will not keep alive: without its Observe option, so the
    /// client knows it is not registered (RFC 7641 §3.2).
    pub(super) fn relay_without_observe(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        msg: &Message,
    ) {
        let mut stripped = Vec::with_capacity(msg.as_bytes().len());
        let token = msg.token();
        let ok = rewrite(
            &mut stripped,
            msg,
            (msg.msg_type(), msg.message_id(), token),
            |b, n, v| {
                if n != OBSERVE {
                    b.option(n, v);
                }
            },
        )
        .finish();
        match ok {
            Ok(()) => match Message::parse(&stripped) {
                Ok(stripped) => self.answer_client(now, key, &stripped, false),
                Err(_) => self.finish(now, key),
            },
            Err(_) => self.finish(now, key),
        }
    }

    fn arm_stale_timer(&mut self, now: Timestamp, key: ExchangeKey, msg: &Message) {
        let max_age = msg
            .option(MAX_AGE)
            .and_then(|v| decode_uint(v).ok())
            .unwrap_or(60);
        let at = now + Duration::from_secs(u64::from(max_age)) + STALE_MARGIN;
        self.exchanges.update(key, |x| {
            if let Some(relay) = x.state.relay_mut() {
                relay.stale_at = Some(at);
            }
        });
    }
}

fn observe_seq(msg: &Message) -> u32 {
    msg.option(OBSERVE)
        .and_then(|v| decode_uint(v).ok())
        .unwrap_or(0)
}

/// RFC 7641 §3.4: V2 is newer than V1 if (V1 < V2 and V2 - V1 < 2^23) or (V1 > V2 and
/// V1 - V2 > 2^23), or if more than 128 s passed since V1 arrived.
fn is_newer(v2: u32, v1: u32, since_v1: Duration) -> bool {
    const HALF: u32 = 1 << 23;
    (v1 < v2 && v2 - v1 < HALF) || (v1 > v2 && v1 - v2 > HALF) || since_v1 > REORDER_WINDOW
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_wrap_per_rfc_7641() {
        let fresh = Duration::ZERO;
        assert!(is_newer(5, 4, fresh));
        assert!(!is_newer(4, 5, fresh));
        assert!(!is_newer(4, 4, fresh));
        assert!(is_newer(1, (1 << 24) - 1, fresh), "wrapped around 24 bits");
        assert!(
            is_newer(4, 5, Duration::from_secs(129)),
            "old state expires"
        );
    }
}
