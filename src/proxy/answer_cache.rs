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
//!
//! A ring may also give each client (by its [`ClientSlot`]) a share: past it, the client's own
//! oldest answer goes, so that one source flooding the proxy cannot push other clients'
//! answers out. That answer is usually not at the front: it is marked dead in place (it no
//! longer counts, replays or holds its client) and its room is taken back when it reaches the
//! front, or by a compaction once the dead are a third of the queue. A compaction moves
//! entries, so an entry is found by its sequence number (kept in it) with a binary search when
//! it is not where it would be without one.

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
    Answer {
        start: u64,
        len: u32,
    },
    /// Evicted out of order; its `len` bytes stay in the byte queue until it leaves.
    Dead {
        len: u32,
    },
}

#[derive(Debug)]
struct Entry<K> {
    key: K,
    /// When the answer was kept; it expires a lifetime later.
    kept: Timestamp,
    stored: Stored,
    client: Option<ClientSlot>,
    /// The low 32 bits of its sequence number: the ring never spans more than 2^32 of them.
    seq: u32,
}

/// An entry that left the ring, for the caller to unindex.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Gone<K> {
    pub key: K,
    pub seq: u64,
    /// The client reference the answer held (see `clients.rs`), to release.
    pub client: Option<ClientSlot>,
    /// Evicted for room while the client could still retransmit the request.
    pub early: bool,
}

/// One client's part of a ring with shares: answers kept, and the sequence number from which
/// its oldest is looked for (every older one of its answers is gone).
#[derive(Clone, Copy, Debug, Default)]
struct Share {
    kept: u32,
    from: u64,
}

/// The per-client shares of a ring: at most `max` answers each, counted by client slot.
#[derive(Debug)]
struct Shares {
    max: usize,
    of: Vec<Share>,
}

/// Dead entries that may wait for the front before a compaction, on top of half the live
/// ones (so the ring holds at most 1.5 times its live entries plus this, and a compaction,
/// which moves every entry, comes once per as many evictions as a third of what it moves).
const DEAD_SLACK: usize = 64;

/// Answers kept for `lifetime` after they finished, at most `max` of them, oldest first, each
/// under the key `K` its duplicates are recognised by (the caller keeps the index).
#[derive(Debug)]
pub(super) struct AnswerRing<K> {
    entries: VecDeque<Entry<K>>,
    bytes: VecDeque<u8>,
    /// Sequence number of `entries.front()` (the next one's when empty); numbers never repeat.
    first_seq: u64,
    /// Sequence number of the next entry pushed.
    next_seq: u64,
    /// Absolute offset of `bytes.front()`.
    first_byte: u64,
    /// Entries marked dead; never the front one.
    dead: usize,
    lifetime: Duration,
    max: usize,
    shares: Option<Shares>,
}

impl<K: Copy> AnswerRing<K> {
    /// A ring without shares.
    pub(super) fn new(lifetime: Duration, max: usize) -> Self {
        AnswerRing {
            entries: VecDeque::new(),
            bytes: VecDeque::new(),
            first_seq: 0,
            next_seq: 0,
            first_byte: 0,
            dead: 0,
            lifetime,
            max,
            shares: None,
        }
    }

    /// A ring where one client keeps at most `share` answers (see
    /// [`pop_over_share`](Self::pop_over_share)).
    pub(super) fn with_shares(lifetime: Duration, max: usize, share: usize) -> Self {
        AnswerRing {
            shares: Some(Shares {
                max: share,
                of: Vec::new(),
            }),
            ..Self::new(lifetime, max)
        }
    }

    /// Answers kept (the dead not counted).
    pub(super) fn len(&self) -> usize {
        self.entries.len() - self.dead
    }

    /// Keeps an answer for `key`; returns its sequence number. May leave the ring over its
    /// bound or the client over its share: [`pop_over_share`](Self::pop_over_share) and
    /// [`pop_over_bound`](Self::pop_over_bound) make room.
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
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.entries.is_empty() {
            self.first_seq = seq;
        }
        self.entries.push_back(Entry {
            key,
            kept: now,
            stored,
            client,
            seq: seq as u32,
        });
        if let Some(share) = self.share_mut(client) {
            share.kept += 1;
        }
        seq
    }

    /// The share of `client`, if this ring keeps shares (grown to hold its slot).
    fn share_mut(&mut self, client: Option<ClientSlot>) -> Option<&mut Share> {
        let (shares, slot) = (self.shares.as_mut()?, client?.index());
        if shares.of.len() <= slot {
            shares.of.resize(slot + 1, Share::default());
        }
        shares.of.get_mut(slot)
    }

    /// How far entry `e` is from the front in sequence numbers (the ring spans fewer than
    /// 2^32 of them, so its low 32 bits tell).
    fn offset_of(&self, e: &Entry<K>) -> u32 {
        e.seq.wrapping_sub(self.first_seq as u32)
    }

    /// Where entry `seq` is, dead or alive, if still in the ring: at its offset from the
    /// front unless a compaction moved it closer, and then found by a binary search.
    fn find(&self, seq: u64) -> Option<usize> {
        if seq < self.first_seq || seq >= self.next_seq {
            return None;
        }
        let offset = (seq - self.first_seq) as u32;
        match self.entries.get(offset as usize) {
            Some(e) if e.seq == seq as u32 => Some(offset as usize),
            _ => (self.entries)
                .binary_search_by_key(&offset, |e| self.offset_of(e))
                .ok(),
        }
    }

    /// The live entry `seq`, if kept.
    fn live(&self, seq: u64) -> Option<&Entry<K>> {
        let e = self.entries.get(self.find(seq)?)?;
        (!matches!(e.stored, Stored::Dead { .. })).then_some(e)
    }

    /// Whether entry `seq` is still kept.
    pub(super) fn holds(&self, seq: u64) -> bool {
        self.live(seq).is_some()
    }

    /// What the retransmission of entry `seq`'s request gets (`None` if it is gone).
    pub(super) fn replay(&self, seq: u64) -> Option<Replay<Vec<u8>>> {
        Some(match self.live(seq)?.stored {
            Stored::Nothing | Stored::Dead { .. } => Replay::Nothing,
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

    /// The oldest answer, if the ring holds more than its bound (or spans more sequence
    /// numbers than an entry can name, which no real rate comes near).
    pub(super) fn pop_over_bound(&mut self, now: Timestamp) -> Option<Gone<K>> {
        let span = self.next_seq - self.first_seq;
        match self.len() > self.max || span >= u64::from(u32::MAX) {
            true => self.pop(now, true),
            false => None,
        }
    }

    /// The oldest answer of `client`, if it holds more than its share: one client cannot
    /// take the room of the others, and its newest answers are the ones it may still ask for.
    pub(super) fn pop_over_share(&mut self, now: Timestamp, client: ClientSlot) -> Option<Gone<K>> {
        let shares = self.shares.as_ref()?;
        let share = *shares.of.get(client.index())?;
        if share.kept as usize <= shares.max {
            return None;
        }
        let from = self.lower_bound(share.from);
        let i = (from..self.entries.len()).find(|&i| {
            let e = &self.entries[i];
            e.client == Some(client) && !matches!(e.stored, Stored::Dead { .. })
        })?;
        let seq = self.first_seq + u64::from(self.offset_of(&self.entries[i]));
        if let Some(s) = self.share_mut(Some(client)) {
            s.from = seq + 1;
        }
        if i == 0 {
            return self.pop(now, true);
        }
        let e = &mut self.entries[i];
        let len = match e.stored {
            Stored::Answer { len, .. } => len,
            _ => 0,
        };
        e.stored = Stored::Dead { len };
        let gone = Gone {
            key: e.key,
            seq,
            client: e.client.take(),
            early: e.kept + MAX_TRANSMIT_WAIT > now,
        };
        self.dead += 1;
        self.uncount(Some(client));
        if self.dead > self.len() / 2 + DEAD_SLACK {
            self.compact();
        }
        Some(gone)
    }

    /// The index of the first entry with sequence number `seq` or later.
    fn lower_bound(&self, seq: u64) -> usize {
        let offset = seq.saturating_sub(self.first_seq).min(u64::from(u32::MAX)) as u32;
        (self.entries).partition_point(|e| self.offset_of(e) < offset)
    }

    fn uncount(&mut self, client: Option<ClientSlot>) {
        if let Some(share) = self.share_mut(client) {
            share.kept -= 1;
        }
    }

    /// Drops the dead entries and their bytes: every live entry and answer moves up.
    fn compact(&mut self) {
        let mut bytes = VecDeque::with_capacity(self.bytes.len());
        let (old, first_byte) = (&self.bytes, self.first_byte);
        self.entries.retain_mut(|e| match e.stored {
            Stored::Dead { .. } => false,
            Stored::Answer { start, len } => {
                let from = (start - first_byte) as usize;
                e.stored = Stored::Answer {
                    start: first_byte + bytes.len() as u64,
                    len,
                };
                bytes.extend(old.range(from..from + len as usize));
                true
            }
            _ => true,
        });
        self.bytes = bytes;
        self.dead = 0;
    }

    /// Takes the front entry (live: the dead never stay in front), then the dead behind it.
    fn pop(&mut self, now: Timestamp, evicted: bool) -> Option<Gone<K>> {
        let e = self.entries.pop_front()?;
        let seq = self.first_seq;
        self.drop_bytes(e.stored);
        self.uncount(e.client);
        while let Some(Stored::Dead { .. }) = self.entries.front().map(|e| e.stored) {
            let dead = self.entries.pop_front().expect("just seen");
            self.drop_bytes(dead.stored);
            self.dead -= 1;
        }
        self.first_seq = match self.entries.front() {
            Some(front) => seq + u64::from(front.seq.wrapping_sub(seq as u32)),
            None => self.next_seq,
        };
        // The client retransmits within MAX_TRANSMIT_WAIT of its first transmission, which
        // came before the answer was kept.
        Some(Gone {
            key: e.key,
            seq,
            client: e.client,
            early: evicted && e.kept + MAX_TRANSMIT_WAIT > now,
        })
    }

    fn drop_bytes(&mut self, stored: Stored) {
        if let Stored::Answer { len, .. } | Stored::Dead { len } = stored {
            self.bytes.drain(..len as usize);
            self.first_byte += u64::from(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::clients;

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
    fn a_client_over_its_share_loses_its_own_oldest_answer_not_the_others() {
        let (flooder, other) = (clients::tests::slot(1), clients::tests::slot(2));
        let mut ring = AnswerRing::with_shares(Duration::from_secs(247), 100, 3);
        let legit = ring.push(at(0), key(0), Replay::Answer(b"legit"), Some(other));
        let (mut seqs, mut gone) = (Vec::new(), Vec::new());
        for n in 1..=6 {
            seqs.push(ring.push(at(1), key(n), Replay::Answer(b"flood"), Some(flooder)));
            assert_eq!(ring.pop_over_share(at(1), other), None);
            gone.extend(
                ring.pop_over_share(at(1), flooder)
                    .map(|g| (g.key, g.client)),
            );
        }
        // Each push past the share took the flooder's own oldest.
        let want: Vec<_> = (1..=3).map(|n| (key(n), Some(flooder))).collect();
        assert_eq!((gone, ring.len()), (want, 4));
        assert_eq!(ring.replay(legit), Some(Replay::Answer(b"legit".to_vec())));
        assert!(seqs[..3]
            .iter()
            .all(|&s| !ring.holds(s) && ring.replay(s).is_none()));
        assert!(seqs[3..].iter().all(|&s| ring.holds(s)));
    }

    #[test]
    fn the_oldest_of_a_client_at_the_front_leaves_from_the_front() {
        let c = clients::tests::slot(0);
        let mut ring = AnswerRing::with_shares(Duration::from_secs(247), 100, 2);
        for n in 0..1000 {
            ring.push(at(1), key(n), Replay::Answer(b"x"), Some(c));
            if n >= 2 {
                let gone = ring.pop_over_share(at(1), c).unwrap();
                assert_eq!(gone.seq, u64::from(n) - 2);
            }
            assert_eq!(ring.dead, 0, "no entry left dead behind the front");
        }
        assert_eq!((ring.len(), ring.bytes.len()), (2, 2));
    }

    /// A model of the ring: every entry pushed with its client, bytes and whether it is kept.
    #[test]
    fn shares_bounds_and_expiry_agree_with_a_model_through_compactions() {
        let mut rng = crate::test_support::Rng::new(0x5eed_cafe);
        let (share, max) = (40, 150);
        let mut ring = AnswerRing::with_shares(Duration::from_secs(30), max, share);
        let mut model: Vec<(u64, u32, Vec<u8>, bool)> = Vec::new();
        let mut compactions = 0;
        for step in 0..20_000u32 {
            let now = at(u64::from(step / 100));
            // Client 0 floods; 1..=8 trickle.
            let client = if rng.below(3) > 0 {
                0
            } else {
                1 + rng.below(8) as u32
            };
            let body = format!("{step}:{}", "b".repeat(rng.below(20)));
            let seq = ring.push(
                now,
                key(step as u16),
                Replay::Answer(body.as_bytes()),
                Some(clients::tests::slot(client)),
            );
            model.push((seq, client, body.into_bytes(), true));
            let dead_before = ring.dead;
            if let Some(g) = ring.pop_over_share(now, clients::tests::slot(client)) {
                let oldest = model.iter_mut().find(|m| m.1 == client && m.3).unwrap();
                assert_eq!(g.seq, oldest.0, "step {step}: the client's own oldest");
                oldest.3 = false;
            }
            compactions += usize::from(ring.dead < dead_before);
            while let Some(g) = ring.pop_over_bound(now).or_else(|| ring.pop_expired(now)) {
                let oldest = model.iter_mut().find(|m| m.3).unwrap();
                assert_eq!(g.seq, oldest.0, "step {step}: the oldest of all");
                oldest.3 = false;
            }
            if step % 97 == 0 {
                for (seq, c, body, kept) in &model {
                    let want = kept.then(|| Replay::Answer(body.clone()));
                    assert_eq!(ring.replay(*seq), want, "step {step}, seq {seq} of {c}");
                }
                let live = model.iter().filter(|m| m.3).count();
                assert_eq!(ring.len(), live);
                assert!(ring.entries.len() <= live + live / 2 + DEAD_SLACK + 1);
                let per_client = |c| model.iter().filter(|m| m.1 == c && m.3).count();
                assert!((0..9).all(|c| per_client(c) <= share), "step {step}");
            }
        }
        assert!(compactions > 10, "{compactions} compactions");
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
