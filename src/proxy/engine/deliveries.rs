//! The proxy's messages to clients that a client's ACK or RST answers: which exchange each
//! Message ID belongs to (RFC 7252 §4.2, §4.3; RFC 7641 §3.6), and the answered exchanges
//! still delivering a CON answer, bounded in number like the kept answers.

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::Rng;

use crate::coap::{params, MessageType};
use crate::time::Timestamp;

use super::exchange::{ClientDelivery, ExchangeKey, State};
use super::gate::{Charge, SendGate};
use super::index::Index;
use super::keyed_hash::KeyedState;
use super::outbox::Destination;
use super::peer::Peer;
use super::table::Exchanges;

/// What sending to clients touches besides this part: the exchanges (their delivery state
/// and timers) and the gate every datagram passes.
pub(super) type Wire<'a> = (&'a mut Exchanges, &'a mut SendGate);

/// What a CON's retransmission timer did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Retransmitted {
    /// Nothing: no CON is being delivered.
    Nothing,
    /// Sent (again, if `again`: the first transmission was withheld for a proof otherwise).
    Sent { again: bool },
    /// Given up after MAX_RETRANSMIT or the exchange lifetime: `mid` to `client` was never
    /// acknowledged.
    GaveUp { client: Peer, mid: u16 },
}

/// The Message IDs clients may acknowledge or reset, and the delivering exchanges.
pub(super) struct Deliveries {
    /// ACK/RST from clients to our CON/NON answers: (client, our MID).
    by_client_mid: Index<(Peer, u16), ExchangeKey>,
    /// Answered exchanges still delivering a CON answer, oldest first, with stale keys of
    /// those already delivered (dropped at the front, or in bulk by `compact`).
    queue: VecDeque<ExchangeKey>,
    /// How many keys of `queue` are live.
    count: usize,
}

impl Deliveries {
    pub(super) fn new(hash: &KeyedState) -> Self {
        Deliveries {
            by_client_mid: Index::new(hash.clone()),
            queue: VecDeque::new(),
            count: 0,
        }
    }

    /// A message with `mid` went to `client` for exchange `key`: its ACK or RST finds it.
    #[inline]
    pub(super) fn track(&mut self, client: Peer, mid: u16, key: ExchangeKey) {
        self.by_client_mid.insert((client, mid), key);
    }

    /// No ACK or RST for (`client`, `mid`) is expected any more.
    pub(super) fn untrack(&mut self, client: Peer, mid: u16) {
        self.by_client_mid.remove(&(client, mid));
    }

    /// Like [`untrack`](Self::untrack), unless a newer message of another exchange took
    /// the Message ID.
    pub(super) fn untrack_for(&mut self, client: Peer, mid: u16, key: ExchangeKey) {
        if self.by_client_mid.get(&(client, mid)) == Some(&key) {
            self.by_client_mid.remove(&(client, mid));
        }
    }

    /// The exchange an ACK or RST from `client` with `mid` answers, no longer tracked.
    pub(super) fn answered_by(&mut self, client: Peer, mid: u16) -> Option<ExchangeKey> {
        let key = *self.by_client_mid.get(&(client, mid))?;
        self.by_client_mid.remove(&(client, mid));
        Some(key)
    }

    /// The answered exchange `key` delivers a CON answer from now on.
    pub(super) fn started(&mut self, key: ExchangeKey) {
        self.queue.push_back(key);
        self.count += 1;
    }

    /// One delivery ended (the exchange is about to retire).
    pub(super) fn ended(&mut self) {
        self.count -= 1;
    }

    /// Drops the keys at the front of those that ended.
    pub(super) fn drop_ended_front(&mut self, exchanges: &Exchanges) {
        while let Some(&front) = self.queue.front() {
            if delivering(exchanges, front) {
                break;
            }
            self.queue.pop_front();
        }
    }

    /// The oldest delivery while more than `max` are under way: the one to give up (it has
    /// been retransmitted longest).
    pub(super) fn over_bound(&mut self, max: usize, exchanges: &Exchanges) -> Option<ExchangeKey> {
        while self.count > max {
            let oldest = self.queue.pop_front()?;
            if delivering(exchanges, oldest) {
                return Some(oldest);
            }
        }
        None
    }

    /// Keys of exchanges already delivered stay until they reach the front; drop them when
    /// they are most of the queue, so it stays proportional to the live deliveries.
    pub(super) fn compact(&mut self, exchanges: &Exchanges) {
        if self.queue.len() > 2 * self.count + 64 {
            self.queue.retain(|&k| delivering(exchanges, k));
        }
    }

    /// Sends a CON or NON to the client of exchange `key`, tracking its MID for the ACK/RST;
    /// a CON is retransmitted. Returns whether the gate queued it (a CON it withheld still
    /// goes, retransmitted).
    ///
    /// A NON's MID is tracked only for an observation, where the client's RST cancels it
    /// (RFC 7641 §3.6); an RST to a plain NON answer would have nothing left to stop.
    pub(super) fn send(
        &mut self,
        (exchanges, gate): Wire<'_>,
        rng: &mut SmallRng,
        now: Timestamp,
        key: ExchangeKey,
        (ty, mid, bytes): (MessageType, u16, &[u8]),
    ) -> bool {
        let Some(x) = exchanges.get(key) else {
            return false;
        };
        let (client, observe) = (x.client, x.observe.is_some());
        if ty == MessageType::Non && observe {
            self.forget_non_mid(exchanges, key);
            if let Some(observer) = exchanges.get_mut(key).and_then(|x| x.observe.as_mut()) {
                observer.non_mid = Some(mid);
            }
        }
        if ty == MessageType::Con || (ty == MessageType::Non && observe) {
            self.track(client, mid, key);
        }
        let to = Destination::Client(client);
        if ty != MessageType::Con {
            return gate.send(Charge::Relayed, to, bytes);
        }
        self.cancel((exchanges, gate), key);
        // RFC 7252 §4.8: initial timeout uniform in [ACK_TIMEOUT, ACK_TIMEOUT * 1.5].
        let timeout = params::ACK_TIMEOUT.mul_f64(rng.random_range(1.0..params::ACK_RANDOM_FACTOR));
        exchanges.update(key, |x| {
            x.delivery = Some(Box::new(ClientDelivery {
                mid,
                sent: 0,
                timeout,
                since: now,
                next_at: Some(now + timeout),
            }));
        });
        let queued = gate.send(Charge::Con(key), to, bytes);
        if queued {
            count_sent(exchanges, key);
        }
        queued
    }

    /// The retransmission timer of exchange `key`'s CON fired: send it again, or give up
    /// after MAX_RETRANSMIT (RFC 7252 §4.2).
    pub(super) fn retransmit(
        &mut self,
        (exchanges, gate): Wire<'_>,
        now: Timestamp,
        key: ExchangeKey,
    ) -> Retransmitted {
        let Some(x) = exchanges.get_mut(key) else {
            return Retransmitted::Nothing;
        };
        let Some(d) = x.delivery.as_mut() else {
            return Retransmitted::Nothing;
        };
        let lifetime_over = now.saturating_since(d.since) >= params::EXCHANGE_LIFETIME;
        if d.sent > params::MAX_RETRANSMIT || lifetime_over {
            let (client, mid) = (x.client, d.mid);
            x.delivery = None;
            self.untrack(client, mid);
            gate.delivery_ended(client, key);
            return Retransmitted::GaveUp { client, mid };
        }
        let again = d.sent > 0;
        d.timeout *= 2;
        d.next_at = Some((now + d.timeout).min(d.since + params::EXCHANGE_LIFETIME));
        exchanges.rearm(key);
        self.resend((exchanges, gate), key);
        Retransmitted::Sent { again }
    }

    /// Sends the CON exchange `key` is delivering (again).
    pub(super) fn resend(&mut self, (exchanges, gate): Wire<'_>, key: ExchangeKey) {
        let Some(x) = exchanges.get(key).filter(|x| x.delivery.is_some()) else {
            return;
        };
        let Some(answer) = x.answer.as_deref() else {
            return;
        };
        if gate.send(Charge::Con(key), Destination::Client(x.client), answer) {
            count_sent(exchanges, key);
        }
    }

    /// Stops retransmitting to the client (ACK or RST arrived, or a newer message replaces it).
    pub(super) fn cancel(&mut self, (exchanges, gate): Wire<'_>, key: ExchangeKey) {
        let Some(x) = exchanges.get_mut(key) else {
            return;
        };
        if let Some(d) = x.delivery.take() {
            let client = x.client;
            self.untrack(client, d.mid);
            gate.delivery_ended(client, key);
            exchanges.rearm(key);
        }
    }

    /// Unmaps the latest NON to the client: superseded, or the exchange is going away.
    pub(super) fn forget_non_mid(&mut self, exchanges: &mut Exchanges, key: ExchangeKey) {
        let Some(x) = exchanges.get_mut(key) else {
            return;
        };
        if let Some(mid) = x.observe.as_mut().and_then(|o| o.non_mid.take()) {
            self.untrack_for(x.client, mid, key);
        }
    }

    /// Entries of the Message ID index, the queue, and live deliveries, for tests.
    #[cfg(test)]
    pub(super) fn sizes(&self) -> (usize, usize, usize) {
        (self.by_client_mid.len(), self.queue.len(), self.count)
    }
}

/// One more transmission of exchange `key`'s CON went.
fn count_sent(exchanges: &mut Exchanges, key: ExchangeKey) {
    if let Some(d) = exchanges.get_mut(key).and_then(|x| x.delivery.as_mut()) {
        d.sent += 1;
    }
}

/// Whether the exchange `key` is live and answered, which a queued one is while delivering.
fn delivering(exchanges: &Exchanges, key: ExchangeKey) -> bool {
    (exchanges.get(key)).is_some_and(|x| matches!(x.state, State::Answered))
}
