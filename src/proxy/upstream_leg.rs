//! The upstream leg: the proxy's own retry policy, matching answers, and upstream failures.

use std::time::Duration;

use rand::Rng;

use crate::coap::option::{self, ETAG, OBSERVE};
use crate::coap::{empty_ack, peek_header, Message, MessageType};
use crate::time::Timestamp;

use super::endpoints::EndpointId;
use super::engine::{Destination, Proxy};
use super::events::{ProxyEvent, Source};
use super::exchange::{ExchangeKey, State, TimerKind};
use super::gate::Charge;
use crate::coap::Code;

impl Proxy {
    /// A datagram arrived on the socket of endpoint `up` (from the upstream it is connected to).
    pub fn handle_upstream_datagram(&mut self, now: Timestamp, up: EndpointId, bytes: &[u8]) {
        self.gate.clock(now);
        let msg = match Message::parse(bytes) {
            Ok(msg) => msg,
            Err(e) => return self.on_malformed_upstream(now, up, bytes, e),
        };
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
        self.gate.clock(now);
        let Some(up) = self.upstreams.endpoints().upstream_of(endpoint) else {
            return;
        };
        let waiting: Vec<ExchangeKey> = (self.exchanges.iter())
            .filter(|(_, x)| x.upstream == up && x.upstream_pending())
            .map(|(key, _)| key)
            .collect();
        for key in waiting {
            self.give_up(now, key, Code::BAD_GATEWAY, "upstream unreachable (ICMP)");
        }
    }

    /// Sends (or resends) the request upstream and arms the next step of the retry policy.
    pub(super) fn transmit_upstream(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        let State::Waiting(leg) = &mut x.state else {
            debug_assert!(false, "only a waiting exchange goes upstream");
            return;
        };
        leg.attempts += 1;
        let attempts = leg.attempts;
        let policy = self.policy_of(self.get(key).expect("checked above"));
        // delay_k = timeout * factor^(k-1) * U[1-jitter, 1+jitter]; after the last retry the
        // same timer means "retries exhausted".
        let spread = self
            .rng
            .random_range(1.0 - policy.jitter..=1.0 + policy.jitter);
        let nominal = policy.nominal_delay(attempts).as_nanos() as f64;
        let delay = Duration::from_nanos((nominal * spread).min(u64::MAX as f64) as u64);
        self.set_deadline(key, TimerKind::UpstreamRetransmit, Some(now + delay));
        self.push_from(key, |x| {
            let request = x.state.leg()?.request.as_deref()?;
            Some((Destination::Upstream(x.endpoint), request))
        });
    }

    /// The retransmission timer fired while still `Waiting`.
    pub(super) fn retransmit_upstream(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.get(key) else { return };
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
        up: EndpointId,
        bytes: &[u8],
        e: crate::coap::FormatError,
    ) {
        self.counters.strays.upstream_format_errors += 1;
        let from = Source::Upstream(up);
        self.events.push(ProxyEvent::Malformed { from, error: e });
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
                self.get(k)
                    .is_some_and(|x| matches!(&x.state, State::Waiting(leg) if leg.mid == mid))
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
        let x = self.get_mut(key).expect("maps hold live keys");
        // §5.2.2: the upstream will answer separately; stop retransmitting.
        if matches!(x.state, State::Waiting(_)) {
            self.usage.drop_request(&mut self.exchanges, key);
            let x = self.get_mut(key).expect("checked above");
            if let State::Waiting(leg) = std::mem::replace(&mut x.state, State::Answered) {
                x.state = State::AwaitingSeparate(leg);
            }
            self.set_deadline(key, TimerKind::UpstreamRetransmit, None);
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
        let key = self.key_for_token(up, msg.token());
        // Whether it is a notification (observing), or the answer (the leg is open).
        let observing = key.and_then(|k| self.get(k)).and_then(|x| match x.state {
            State::Observing(_) => Some(true),
            State::Waiting(_) | State::AwaitingSeparate(_) => Some(false),
            State::Answered | State::AwaitingProof => None,
        });
        let (Some(key), Some(observing)) = (key, observing) else {
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
        let sent = (self.get(key)).and_then(|x| x.state.leg()?.request.as_deref());
        match sent.map(Message::parse) {
            Some(Ok(request)) => request.options().any(|(n, v)| n == ETAG && v == etag),
            // The copy is gone only once nothing can go upstream again; the ETag is there.
            _ => true,
        }
    }

    /// The upstream's answer to a pending request: relay it, or 5.02 if it carries an unsafe
    /// option we do not recognise (RFC 7252 §5.7.1). Safe-to-forward ones pass, critical or
    /// not: an OSCORE response (option 9) is for the client to verify, not for the proxy.
    fn on_upstream_answer(&mut self, now: Timestamp, key: ExchangeKey, msg: &Message) {
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
        let registers = self.get(key).is_some_and(|x| x.observe.is_some())
            && msg.code().class() == 2
            && msg.option(OBSERVE).is_some();
        self.close_upstream_leg(now, key);
        let cache = self.get_mut(key).and_then(|x| x.cache.take());
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
        if registers && !self.usage.room_to_observe(&self.config.limits) {
            if let Some(client) = self.get(key).map(|x| x.client) {
                self.events.push(ProxyEvent::ObservationLimit { client });
            }
            return self.relay_without_observe(now, key, msg);
        }
        self.answer_client(now, key, msg, registers);
        if let Some(group_key) = group_key {
            self.found_group(key, group_key);
        }
    }
}
