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
//! A ring is bounded twice: in answers, and in the bytes its byte queue holds, so that large
//! answers (a cached 8 KB resource asked for ten thousand times) cost at most the byte bound
//! and not ten thousand copies. The bytes counted are the queue's own, the dead ones below
//! included: the bound is on what the ring really holds. An answer longer than a ring lets
//! one client keep is kept without its bytes (its retransmissions get nothing, see
//! [`Replay::Nothing`]): keeping it would evict every other answer of its client first.
//!
//! A ring may also give each client (by its [`ClientSlot`]) a share, in answers and in
//! bytes: past it, the client's own oldest answer goes, so that one source flooding the proxy
//! cannot push other clients' answers out. That answer is usually not at the front: it is
//! marked dead in place (it no longer counts, replays or holds its client) and its room is
//! taken back when it reaches the front, or by a compaction once the dead are a third of the
//! entries or of the bytes (past one datagram's worth), or a quarter of the bytes of a ring at
//! its byte bound. A compaction moves entries, so an entry is found by its sequence number
//! (kept in it) with a binary search when it is not where it would be without one.

use std::collections::VecDeque;
use std::time::Duration;

use crate::coap::params::MAX_TRANSMIT_WAIT;
use crate::time::Timestamp;

use super::clients::ClientSlot;
use super::exchange::CoapToken;
use super::peer::Peer;

/// How a client request is recognised when it comes again: source, token and Message ID.
pub(super) type ClientKey = (Peer, CoapToken, u16);

/// What a client's retransmission of an answered request gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Replay<B> {
    /// Nothing: a NON request, whose duplicates are ignored (RFC 7252 §4.3); or an answer
    /// kept without its bytes (never sent, too long to keep, or to an in-process client,
    /// which has it): the key alone stops the request from being handled twice.
    Nothing,
    /// An empty ACK with the request's MID: the answer travelled separately (§5.2.2).
    EmptyAck,
    /// This piggybacked answer again.
    Answer(B),
}

/// How much a ring, or one client's share of it, may keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Bound {
    /// Answers.
    pub count: usize,
    /// Bytes of their encoded answers.
    pub bytes: usize,
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

impl Stored {
    /// Bytes it holds in the byte queue.
    fn len(self) -> usize {
        match self {
            Stored::Answer { len, .. } | Stored::Dead { len } => len as usize,
            Stored::Nothing | Stored::EmptyAck => 0,
        }
    }
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

/// One client's part of a ring with shares: answers kept, their bytes, and the sequence
/// number from which its oldest is looked for (every older one of its answers is gone).
#[derive(Clone, Copy, Debug, Default)]
struct Share {
    kept: u32,
    bytes: usize,
    from: u64,
    /// Where the entry at `from` or after it is, if known: no search then.
    place: Option<Place>,
}

/// The index of an entry, as it was when `popped` entries had left the front and
/// `compactions` compactions had run. Until the next compaction only pops at the front move
/// entries, every one alike, so the index now is that less the pops since. (A binary search
/// for every eviction was 3 % of the proxy's time at peak, issue 26.)
#[derive(Clone, Copy, Debug)]
struct Place {
    index: usize,
    popped: u64,
    compactions: u64,
}

/// The per-client shares of a ring: at most `max` each, counted by client slot.
#[derive(Debug)]
struct Shares {
    max: Bound,
    of: Vec<Share>,
}

/// Dead entries that may wait for the front before a compaction, on top of half the live
/// ones (so the ring holds at most 1.5 times its live entries plus this, and a compaction,
/// which moves every entry, comes once per as many evictions as a third of what it moves).
const DEAD_SLACK: usize = 64;

/// Bytes of dead entries that may wait for the front before a compaction, on top of half the
/// live ones: one datagram, so that a small ring does not compact at every eviction. (The
/// bytes a ring holds are then at most 1.5 times its live ones plus this.)
const DEAD_BYTES_SLACK: usize = 65_536;

/// A ring over its byte bound compacts rather than evicts once this fraction (1/N) of its
/// bytes are dead: the live answers are then at least three quarters of the bound, so a
/// client over its share (whose dead answers these are) never makes the ring evict others'
/// answers before they take most of the bound; and a compaction, which moves the live bytes,
/// moves at most three for each dead byte it frees.
const DEAD_BYTES_FRACTION: usize = 4;

/// Answers kept for `lifetime` after they finished, within `max`, oldest first, each under
/// the key `K` its duplicates are recognised by (the caller keeps the index).
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
    /// Bytes of the dead entries, still in the byte queue.
    dead_bytes: usize,
    /// Entries taken from the front so far, and compactions run: see [`Place`].
    popped: u64,
    compactions: u64,
    /// Answers kept without their bytes because they were longer than a client may keep.
    too_large: u64,
    lifetime: Duration,
    max: Bound,
    shares: Option<Shares>,
}

impl<K: Copy> AnswerRing<K> {
    /// A ring without shares.
    pub(super) fn new(lifetime: Duration, max: Bound) -> Self {
        AnswerRing {
            entries: VecDeque::new(),
            bytes: VecDeque::new(),
            first_seq: 0,
            next_seq: 0,
            first_byte: 0,
            dead: 0,
            dead_bytes: 0,
            popped: 0,
            compactions: 0,
            too_large: 0,
            lifetime,
            max,
            shares: None,
        }
    }

    /// A ring where one client keeps at most `share` (see
    /// [`pop_over_share`](Self::pop_over_share)).
    pub(super) fn with_shares(lifetime: Duration, max: Bound, share: Bound) -> Self {
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

    /// Bytes the byte queue holds: the live answers' and the dead ones' not yet dropped.
    pub(super) fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Answers kept without their bytes so far, being longer than a client may keep.
    pub(super) fn too_large(&self) -> u64 {
        self.too_large
    }

    /// The longest answer kept with its bytes: one client's share of bytes, or the whole
    /// bound. A longer one would take its client's every other answer, or all the ring's,
    /// and then itself.
    fn longest_kept(&self) -> usize {
        let share = self.shares.as_ref().map_or(usize::MAX, |s| s.max.bytes);
        share.min(self.max.bytes)
    }

    /// Keeps an answer for `key`; returns its sequence number. An answer longer than
    /// [`longest_kept`](Self::longest_kept) is kept as [`Replay::Nothing`]: its key still
    /// stops the request from being handled twice, and its bytes are not kept. May leave
    /// the ring over its bound or the client over its share:
    /// [`pop_over_share`](Self::pop_over_share) and [`pop_over_bound`](Self::pop_over_bound)
    /// make room.
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
            Replay::Answer(b) if b.len() > self.longest_kept() => {
                self.too_large += 1;
                Stored::Nothing
            }
            Replay::Answer(b) => {
                self.reserve(b.len());
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
            share.bytes += stored.len();
        }
        seq
    }

    /// Room for `len` more bytes: the capacity doubles as usual, but never past the bound
    /// plus this answer, the most the queue holds before the caller evicts. (A ring buffer's
    /// head goes round all of its capacity, so all of it ends up in memory.)
    fn reserve(&mut self, len: usize) {
        let (held, capacity) = (self.bytes.len(), self.bytes.capacity());
        if held + len <= capacity {
            return;
        }
        let target = (2 * capacity).min(self.max.bytes.saturating_add(len));
        self.bytes.reserve_exact(target.max(held + len) - held);
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

    /// The oldest answer, if the ring holds more than its bound in answers or in bytes (or
    /// spans more sequence numbers than an entry can name, which no real rate comes near).
    /// Over the byte bound with enough of its bytes dead, it compacts first (see
    /// [`DEAD_BYTES_FRACTION`]), which may be room enough.
    pub(super) fn pop_over_bound(&mut self, now: Timestamp) -> Option<Gone<K>> {
        let worth_compacting =
            self.dead_bytes > 0 && self.dead_bytes * DEAD_BYTES_FRACTION >= self.bytes.len();
        if self.bytes.len() > self.max.bytes && worth_compacting {
            self.compact();
        }
        let span = self.next_seq - self.first_seq;
        let over = self.len() > self.max.count || self.bytes.len() > self.max.bytes;
        match over || span >= u64::from(u32::MAX) {
            true => self.pop(now, true),
            false => None,
        }
    }

    /// The oldest answer of `client`, if it holds more than its share in answers or bytes:
    /// one client cannot take the room of the others, and its newest answers are the ones it
    /// may still ask for. (One call takes one answer; a long one may need several to go.)
    pub(super) fn pop_over_share(&mut self, now: Timestamp, client: ClientSlot) -> Option<Gone<K>> {
        let shares = self.shares.as_ref()?;
        let share = *shares.of.get(client.index())?;
        if share.kept as usize <= shares.max.count && share.bytes <= shares.max.bytes {
            return None;
        }
        let from = self.start_of(&share);
        let i = (from..self.entries.len()).find(|&i| {
            let e = &self.entries[i];
            e.client == Some(client) && !matches!(e.stored, Stored::Dead { .. })
        })?;
        let seq = self.first_seq + u64::from(self.offset_of(&self.entries[i]));
        let place = Place {
            index: i + 1,
            popped: self.popped,
            compactions: self.compactions,
        };
        if let Some(s) = self.share_mut(Some(client)) {
            s.from = seq + 1;
            s.place = Some(place);
        }
        if i == 0 {
            return self.pop(now, true);
        }
        let e = &mut self.entries[i];
        let held = e.stored;
        e.stored = Stored::Dead {
            len: held.len() as u32,
        };
        let gone = Gone {
            key: e.key,
            seq,
            client: e.client.take(),
            early: e.kept + MAX_TRANSMIT_WAIT > now,
        };
        self.dead += 1;
        self.dead_bytes += held.len();
        self.uncount(Some(client), held);
        let live_bytes = self.bytes.len() - self.dead_bytes;
        if self.dead > self.len() / 2 + DEAD_SLACK
            || self.dead_bytes > live_bytes / 2 + DEAD_BYTES_SLACK
        {
            self.compact();
        }
        Some(gone)
    }

    /// The index of the first entry at or after `share.from`: at its [`Place`] if no
    /// compaction ran since, else searched.
    fn start_of(&self, share: &Share) -> usize {
        let index = match share.place {
            Some(p) if p.compactions == self.compactions => {
                let popped = usize::try_from(self.popped - p.popped).unwrap_or(usize::MAX);
                p.index.saturating_sub(popped).min(self.entries.len())
            }
            _ => self.lower_bound(share.from),
        };
        #[cfg(test)]
        assert_eq!(index, self.lower_bound(share.from), "{share:?}");
        index
    }

    /// The index of the first entry with sequence number `seq` or later.
    fn lower_bound(&self, seq: u64) -> usize {
        let offset = seq.saturating_sub(self.first_seq).min(u64::from(u32::MAX)) as u32;
        // Where it is when no compaction moved it (a client evicting its own oldest, which is
        // then at the front, looks up the front on every answer): no search.
        match self.entries.get(offset as usize) {
            Some(e) if self.offset_of(e) == offset => offset as usize,
            _ => (self.entries).partition_point(|e| self.offset_of(e) < offset),
        }
    }

    /// The client's share no longer counts an answer that held `stored`.
    fn uncount(&mut self, client: Option<ClientSlot>, stored: Stored) {
        if let Some(share) = self.share_mut(client) {
            share.kept -= 1;
            share.bytes -= stored.len();
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
        self.dead_bytes = 0;
        self.compactions += 1;
    }

    /// Takes the front entry (live: the dead never stay in front), then the dead behind it.
    fn pop(&mut self, now: Timestamp, evicted: bool) -> Option<Gone<K>> {
        let e = self.entries.pop_front()?;
        self.popped += 1;
        let seq = self.first_seq;
        self.drop_bytes(e.stored);
        self.uncount(e.client, e.stored);
        while let Some(Stored::Dead { .. }) = self.entries.front().map(|e| e.stored) {
            let dead = self.entries.pop_front().expect("just seen");
            self.popped += 1;
            self.drop_bytes(dead.stored);
            self.dead -= 1;
            self.dead_bytes -= dead.stored.len();
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
mod tests;
