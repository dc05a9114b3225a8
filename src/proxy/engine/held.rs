//! The answers waiting for their client's proof of address (`validation.rs`): held while the
//! client is pinged, then withheld as CONs. Which they are, oldest first and by client, so
//! that the proxy can make room and give them up without a scan of every exchange:
//! - at the total bound ([`MAX_HELD_BYTES_TOTAL`](super::validation::MAX_HELD_BYTES_TOTAL)),
//!   the oldest goes for a newcomer's (it has waited longest for a proof that a real client
//!   gives in one round trip);
//! - all of one client's go at once when it shows that it does not receive: its first CON
//!   went unacknowledged, or ICMP port unreachable came back (`engine.rs`).
//!
//! Only the keys are kept here; the answers and their bytes are the exchanges'
//! (`Usage::keep_answer` counts them). A key stays after its exchange has moved on (proven
//! and delivered, retired): the caller says which are still waiting, and those that are not
//! are dropped as they reach the front, or all at once when they pile up.

use std::collections::VecDeque;
use std::net::SocketAddr;

use super::exchange::ExchangeKey;
use super::keyed_hash::{KeyedMap, KeyedState};

/// Keys kept before the first compaction; it then runs when the keys have doubled since the
/// last one, so each key is looked at a bounded number of times.
const FIRST_COMPACTION: usize = 1024;

/// The keys of the answers waiting for a proof. See the module docs.
#[derive(Debug)]
pub(super) struct HeldAnswers {
    /// Oldest first, with keys of exchanges no longer waiting among them.
    queue: VecDeque<(SocketAddr, ExchangeKey)>,
    /// By client address, in the order they were held.
    by_client: KeyedMap<SocketAddr, VecDeque<ExchangeKey>>,
    /// The queue's length at which it is next compacted.
    compact_at: usize,
}

impl HeldAnswers {
    pub(super) fn new(hash: &KeyedState) -> Self {
        HeldAnswers {
            queue: VecDeque::new(),
            by_client: hash.map(),
            compact_at: FIRST_COMPACTION,
        }
    }

    /// The answer of exchange `key` for `client` waits for the client's proof from now on.
    /// `waiting` tells which keys still wait, for the compaction.
    pub(super) fn push(
        &mut self,
        client: SocketAddr,
        key: ExchangeKey,
        waiting: impl Fn(ExchangeKey) -> bool,
    ) {
        if self.queue.len() >= self.compact_at {
            self.compact(&waiting);
        }
        self.queue.push_back((client, key));
        self.by_client.entry(client).or_default().push_back(key);
    }

    /// The oldest answer still waiting (`waiting`), taken out; those before it that no longer
    /// wait are dropped.
    pub(super) fn pop_oldest(
        &mut self,
        waiting: impl Fn(ExchangeKey) -> bool,
    ) -> Option<(SocketAddr, ExchangeKey)> {
        while let Some((client, key)) = self.queue.pop_front() {
            if let Some(list) = self.by_client.get_mut(&client) {
                // Held in the same order: it is the first of its client's, unless given up.
                match list.front() == Some(&key) {
                    true => _ = list.pop_front(),
                    false => list.retain(|&k| k != key),
                }
                if list.is_empty() {
                    self.by_client.remove(&client);
                }
            }
            if waiting(key) {
                return Some((client, key));
            }
        }
        None
    }

    /// Every key held for `client`, taken out (the queue's entries are dropped as they reach
    /// the front: they no longer wait once the caller has given them up).
    pub(super) fn take_client(&mut self, client: SocketAddr) -> Vec<ExchangeKey> {
        self.by_client
            .remove(&client)
            .map(Vec::from)
            .unwrap_or_default()
    }

    /// How many of `client`'s keys still wait (`waiting`).
    pub(super) fn count_client(
        &self,
        client: SocketAddr,
        waiting: impl Fn(ExchangeKey) -> bool,
    ) -> usize {
        (self.by_client.get(&client)).map_or(0, |list| list.iter().filter(|&&k| waiting(k)).count())
    }

    /// Drops every key that no longer waits.
    fn compact(&mut self, waiting: &impl Fn(ExchangeKey) -> bool) {
        self.queue.retain(|&(_, key)| waiting(key));
        self.by_client.retain(|_, list| {
            list.retain(|&key| waiting(key));
            !list.is_empty()
        });
        self.compact_at = (2 * self.queue.len()).max(FIRST_COMPACTION);
    }

    /// Keys kept (waiting or not), for tests.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(index: u32) -> ExchangeKey {
        ExchangeKey {
            index,
            generation: 1,
        }
    }

    fn addr(n: u8) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, n], 5683))
    }

    fn held() -> HeldAnswers {
        HeldAnswers::new(&KeyedState::new([1, 2]))
    }

    #[test]
    fn the_oldest_still_waiting_comes_first() {
        let mut h = held();
        (0..4).for_each(|i| h.push(addr(i as u8 % 2), key(i), |_| true));
        // Key 0 was delivered meanwhile: it is skipped and dropped.
        assert_eq!(h.pop_oldest(|k| k != key(0)), Some((addr(1), key(1))));
        assert_eq!(h.pop_oldest(|_| true), Some((addr(0), key(2))));
        assert_eq!(h.take_client(addr(1)), vec![key(3)]);
        assert!(h.take_client(addr(0)).is_empty(), "popped ones are gone");
    }

    #[test]
    fn a_clients_keys_come_out_together() {
        let mut h = held();
        for i in 0..6 {
            h.push(addr(i as u8 % 3), key(i), |_| true);
        }
        assert_eq!(h.take_client(addr(2)), vec![key(2), key(5)]);
        // Its queue entries no longer wait once given up, and are skipped.
        let gone = [key(2), key(5)];
        let oldest: Vec<_> = std::iter::from_fn(|| h.pop_oldest(|k| !gone.contains(&k)))
            .map(|(_, k)| k.index)
            .collect();
        assert_eq!(oldest, [0, 1, 3, 4]);
    }

    #[test]
    fn keys_that_no_longer_wait_do_not_pile_up() {
        let mut h = held();
        // A client proven every time: nothing waits for long, and nothing is ever evicted.
        for i in 0..100_000 {
            h.push(addr(1), key(i), |k| k.index + 1 >= i);
        }
        assert!(h.len() <= 2 * FIRST_COMPACTION, "{} keys kept", h.len());
    }
}
