//! The proxy's messages to clients that a client's ACK or RST answers: which exchange each
//! Message ID belongs to (RFC 7252 §4.2, §4.3; RFC 7641 §3.6), and the answered exchanges
//! still delivering a CON answer, bounded in number like the kept answers.

use std::collections::VecDeque;

use super::exchange::{ExchangeKey, State};
use super::index::Index;
use super::keyed_hash::KeyedState;
use super::peer::Peer;
use super::table::Exchanges;

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

    /// Entries of the Message ID index, the queue, and live deliveries, for tests.
    #[cfg(test)]
    pub(super) fn sizes(&self) -> (usize, usize, usize) {
        (self.by_client_mid.len(), self.queue.len(), self.count)
    }
}

/// Whether the exchange `key` is live and answered, which a queued one is while delivering.
fn delivering(exchanges: &Exchanges, key: ExchangeKey) -> bool {
    (exchanges.get(key)).is_some_and(|x| matches!(x.state, State::Answered))
}
