//! Observe (RFC 7641) through the proxy: one upstream registration per client registration,
//! each notification relayed to the client with the client's token, for as long as the
//! observation lives.

use std::time::Duration;

use crate::coap::option::decode_uint;
use crate::coap::option::{MAX_AGE, OBSERVE};
use crate::coap::{rewrite, Message, MessageType};
use crate::time::Timestamp;

use super::cache::CacheKey;
use super::endpoints::EndpointId;
use super::engine::Proxy;
use super::events::{ObserverLoss, ProxyEvent};
use super::exchange::{Exchange, ExchangeKey, Relay, State, TimerKind};
use super::peer::Peer;

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
        let Some(x) = self.get_mut(key) else { return };
        x.state = State::Observing(Relay {
            last_notification: (observe_seq(msg), now),
            // The registration's answer came on the client's CON, or was the first NON: the
            // count towards the next CON starts here.
            since_con: (0, now),
        });
        let (id, endpoint) = ((x.client, x.client_token), x.endpoint);
        self.usage.count_observation(true);
        self.observers.insert(id, key);
        // Notifications come to the endpoint the registration left from: it stays open.
        self.upstreams.endpoints_mut().acquire(endpoint);
        self.arm_stale_timer(now, key, msg);
    }

    /// Relays one notification, unless it is older than the last one (RFC 7641 §3.4).
    pub(super) fn relay_notification(&mut self, now: Timestamp, key: ExchangeKey, msg: &Message) {
        let Some(x) = self.get(key) else { return };
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
        let (slot, client) = (x.client_slot, x.client);
        let len = msg.as_bytes().len() - msg.token().len() + x.client_token.as_bytes().len();
        // Past an unproven observer's allowance a notification goes as a CON, whose ACK
        // proves the observer (`validation.rs`); one that never acknowledges loses its
        // observation when that CON times out.
        let upstream_type = match self.gate.fits(client, len) {
            true => msg.msg_type(),
            false => MessageType::Con,
        };
        let ty = self.notification_type(now, key, upstream_type);
        let mid = self.clients.fresh_mid(slot);
        let x = self.get(key).expect("checked above");
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
        if let Some(relay) = self.get_mut(key).and_then(|x| x.state.relay_mut()) {
            relay.last_notification = (seq, now);
        }
        if self.get(key).is_some_and(|x| x.delivery.is_some()) {
            self.supersede_in_flight(key, mid, bytes);
        } else {
            if ty == MessageType::Con {
                self.counters.observe.notifications_con += 1;
            }
            self.usage.keep_answer(
                (&mut self.exchanges, &mut self.clients),
                key,
                Some(Box::from(&bytes[..])),
            );
            self.send_to_client(now, key, ty, mid, &bytes);
        }
        if last {
            self.end_observation(now, key);
        } else {
            self.arm_stale_timer(now, key, msg);
        }
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
        let Some(x) = self.get_mut(key) else {
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
        let Some(x) = self.get_mut(key) else { return };
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
    /// the driver reads from the client socket's error queue): every observation of it ends. Requests it has in flight finish as
    /// usual; their answers go nowhere, within its budget.
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
    }

    /// Ends an observation (deregistration, client RST, final response, or staleness).
    pub(super) fn end_observation(&mut self, now: Timestamp, key: ExchangeKey) {
        if self
            .get(key)
            .is_some_and(|x| matches!(x.state, State::Observing(_)))
        {
            self.leave_observing(now, key);
            self.finish(now, key);
        }
    }

    fn leave_observing(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        x.state = State::Answered;
        let (id, endpoint) = ((x.client, x.client_token), x.endpoint);
        self.set_deadline(key, TimerKind::ObserveStale, None);
        self.usage.count_observation(false);
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
        self.set_deadline(key, TimerKind::ObserveStale, Some(at));
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
