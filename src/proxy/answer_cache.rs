//! Finished answers, kept so that a client's retransmission of an answered request is answered
//! again from memory and never forwarded a second time (RFC 7252 §4.5).
//!
//! At a hundred thousand requests a second answers come and go as fast as requests do, so the
//! cost of keeping one is mostly the cost of letting it go. An [`AnswerRing`] keeps them in the
//! order they finished: a queue of small fixed-size entries, and one byte queue holding the
//! encoded answers back to back. Both grow at the back and shrink at the front, and every entry
//! lives equally long, so the oldest entry is always the next to expire. Expiry and eviction
//! take it from the front: no allocation or free per answer, no timer per answer, and the only
//! memory touched out of order is the caller's index entry for it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use crate::coap::params::MAX_TRANSMIT_WAIT;
use crate::time::Timestamp;

use super::clients::ClientSlot;
use super::exchange::CoapToken;

/// How a client request is recognised when it comes again: source, token and Message ID.
pub(super) type ClientKey = (SocketAddr, CoapToken, u16);

/// What a client's retransmission of an answered request gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Replay<B> {
    /// Nothing: a NON request, whose duplicates are ignored (RFC 7252 §4.3).
    Nothing,
    /// An empty ACK with the request's MID: the answer travelled separately (§5.2.2).
    EmptyAck,
    /// This piggybacked answer again.
    Answer(B),
}

/// Where an entry's answer bytes are: absolute offsets into the byte queue.
#[derive(Clone, Copy, Debug)]
enum Stored {
    Nothing,
    EmptyAck,
    Answer { start: u64, len: u32 },
}

#[derive(Debug)]
struct Entry<K> {
    key: K,
    /// When the answer was kept; it expires a lifetime later.
    kept: Timestamp,
    stored: Stored,
    client: Option<ClientSlot>,
}

/// An entry that left the ring, for the caller to unindex.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Gone<K> {
    pub key: K,
    pub seq: u64,
    /// The answer carried a Message ID of the proxy's towards this client, whose numbering
    /// had to live as long as it (see `clients.rs`): the reference to release.
    pub client: Option<ClientSlot>,
    /// Evicted for room while the client could still retransmit the request.
    pub early: bool,
}

/// Answers kept for `lifetime` after they finished, at most `max` of them, oldest first, each
/// under the key `K` its duplicates are recognised by (the caller keeps the index).
#[derive(Debug)]
pub(super) struct AnswerRing<K> {
    entries: VecDeque<Entry<K>>,
    bytes: VecDeque<u8>,
    /// Sequence number of `entries.front()`; numbers never repeat.
    first_seq: u64,
    /// Absolute offset of `bytes.front()`.
    first_byte: u64,
    lifetime: Duration,
    max: usize,
}

impl<K: Copy> AnswerRing<K> {
    pub(super) fn new(lifetime: Duration, max: usize) -> Self {
        AnswerRing {
            entries: VecDeque::new(),
            bytes: VecDeque::new(),
            first_seq: 0,
            first_byte: 0,
            lifetime,
            max,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Keeps an answer for `key`; returns its sequence number. May leave the ring over its
    /// bound: [`pop_over_bound`](Self::pop_over_bound) makes room.
    pub(super) fn push(
        &mut self,
        now: Timestamp,
        key: K,
        replay: Replay<&[u8]>,
        client: Option<ClientSlot>,
    ) -> u64 {
        let stored = match replay {
            Replay::Nothing => Stored::Nothing,
            Replay::EmptyAck => Stored::EmptyAck,
            Replay::Answer(b) => {
                let start = self.first_byte + self.bytes.len() as u64;
                self.bytes.extend(b);
                Stored::Answer {
                    start,
                    len: b.len() as u32,
                }
            }
        };
        self.entries.push_back(Entry {
            key,
            kept: now,
            stored,
            client,
        });
        self.first_seq + self.entries.len() as u64 - 1
    }

    /// Whether entry `seq` is still kept.
    pub(super) fn holds(&self, seq: u64) -> bool {
        seq.checked_sub(self.first_seq)
            .is_some_and(|i| i < self.entries.len() as u64)
    }

    /// What the retransmission of entry `seq`'s request gets (`None` if it is gone).
    pub(super) fn replay(&self, seq: u64) -> Option<Replay<Vec<u8>>> {
        let entry = self
            .entries
            .get(usize::try_from(seq.checked_sub(self.first_seq)?).ok()?)?;
        Some(match entry.stored {
            Stored::Nothing => Replay::Nothing,
            Stored::EmptyAck => Replay::EmptyAck,
            Stored::Answer { start, len } => {
                let from = (start - self.first_byte) as usize;
                let (a, b) = self.bytes.as_slices();
                let mut out = Vec::with_capacity(len as usize);
                for (i, part) in [(0, a), (a.len(), b)] {
                    let lo = from.clamp(i, i + part.len()) - i;
                    let hi = (from + len as usize).clamp(i, i + part.len()) - i;
                    out.extend_from_slice(&part[lo..hi]);
                }
                Replay::Answer(out)
            }
        })
    }

    /// When the oldest answer expires.
    pub(super) fn next_expiry(&self) -> Option<Timestamp> {
        self.entries.front().map(|e| e.kept + self.lifetime)
    }

    /// The oldest answer, if it has expired by `now`.
    pub(super) fn pop_expired(&mut self, now: Timestamp) -> Option<Gone<K>> {
        match self.entries.front() {
            Some(e) if e.kept + self.lifetime <= now => self.pop(now, false),
            _ => None,
        }
    }

    /// The oldest answer, if the ring holds more than its bound.
    pub(super) fn pop_over_bound(&mut self, now: Timestamp) -> Option<Gone<K>> {
        match self.entries.len() > self.max {
            true => self.pop(now, true),
            false => None,
        }
    }

    fn pop(&mut self, now: Timestamp, evicted: bool) -> Option<Gone<K>> {
        let e = self.entries.pop_front()?;
        let seq = self.first_seq;
        self.first_seq += 1;
        if let Stored::Answer { len, .. } = e.stored {
            self.bytes.drain(..len as usize);
            self.first_byte += u64::from(len);
        }
        // The client retransmits within MAX_TRANSMIT_WAIT of its first transmission, which
        // came before the answer was kept.
        Some(Gone {
            key: e.key,
            seq,
            client: e.client,
            early: evicted && e.kept + MAX_TRANSMIT_WAIT > now,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u16) -> ClientKey {
        let addr = SocketAddr::from(([127, 0, 0, 1], 40_000 + n));
        (addr, CoapToken::new(b"t").unwrap(), n)
    }

    fn at(s: u64) -> Timestamp {
        Timestamp::from_nanos(s * 1_000_000_000)
    }

    #[test]
    fn answers_replay_until_they_expire_oldest_first() {
        let mut ring = AnswerRing::new(Duration::from_secs(10), 100);
        let slot = Some(crate::proxy::clients::tests::some_slot());
        let a = ring.push(at(1), key(1), Replay::Answer(b"first"), None);
        let b = ring.push(at(2), key(2), Replay::EmptyAck, slot);
        let c = ring.push(at(3), key(3), Replay::Answer(b"third"), None);
        assert!(ring.holds(a) && ring.holds(c) && !ring.holds(c + 1));
        assert_eq!(ring.replay(a), Some(Replay::Answer(b"first".to_vec())));
        assert_eq!(ring.replay(b), Some(Replay::EmptyAck));
        assert_eq!(ring.next_expiry(), Some(at(11)));
        assert_eq!(ring.pop_expired(at(10)), None);
        let gone = ring.pop_expired(at(11)).unwrap();
        assert_eq!((gone.key, gone.seq, gone.early), (key(1), a, false));
        assert_eq!(ring.replay(a), None);
        assert!(!ring.holds(a));
        assert_eq!(ring.replay(c), Some(Replay::Answer(b"third".to_vec())));
        assert_eq!(ring.pop_expired(at(12)).map(|g| g.client), Some(slot));
        assert_eq!(ring.len(), 1);
    }

    #[test]
    fn an_entry_is_small() {
        assert!(std::mem::size_of::<Entry<ClientKey>>() <= 80);
    }

    #[test]
    fn the_bound_evicts_the_oldest_and_says_if_a_client_could_still_ask() {
        let mut ring = AnswerRing::new(Duration::from_secs(247), 2);
        for n in 0..3 {
            ring.push(at(u64::from(n)), key(n), Replay::Nothing, None);
        }
        let gone = ring.pop_over_bound(at(3)).unwrap();
        assert_eq!((gone.key, gone.early), (key(0), true));
        assert_eq!(ring.pop_over_bound(at(3)), None);
        ring.push(at(200), key(9), Replay::Nothing, None);
        assert!(!ring.pop_over_bound(at(200)).unwrap().early, "93 s passed");
    }

    #[test]
    fn answers_survive_the_byte_queue_wrapping_around() {
        let mut ring = AnswerRing::new(Duration::from_secs(20), 1000);
        let mut live = VecDeque::new();
        for n in 0..5000u32 {
            let body = format!("answer {n} {}", "x".repeat((n % 37) as usize));
            let seq = ring.push(
                at(u64::from(n)),
                key(n as u16),
                Replay::Answer(body.as_bytes()),
                None,
            );
            live.push_back((seq, body));
            while ring.pop_expired(at(u64::from(n))).is_some() {
                live.pop_front();
            }
            for (seq, body) in &live {
                assert_eq!(
                    ring.replay(*seq),
                    Some(Replay::Answer(body.clone().into_bytes()))
                );
            }
        }
    }
}
