//! The proxy's response cache (RFC 7252 §5.6, §5.7.1, §5.9; RFC 7959 §2.10; RFC 8132 §2):
//! upstream responses kept to answer later requests for the same thing without asking the
//! origin, as long as they are fresh, and revalidated with their ETag once they are not.
//!
//! Not to be confused with the answer store (`answer_cache.rs`), which replays one answer to
//! one client's retransmissions of one request. This one serves many clients and requests.
//!
//! A sans-IO core: it takes `now`, requests and responses already parsed, and returns what to
//! do; the engine forwards, encodes and counts. Its parts:
//! - [`CacheKey`] (`key.rs`): what makes two requests the same (§5.6 item 2, §5.4.2): the
//!   method, the target, every option but NoCacheKey ones and those the cache interprets
//!   or the engine consumes, and FETCH's payload; and the [`Resource`] it belongs to, for
//!   invalidation (§5.9.1.1/2/4, §5.10.7; RFC 8132 §3).
//! - [`CachedResponse`] (`entry.rs`): which responses are kept (see [`NotStored`]), their
//!   Max-Age (default 60 s, §5.10.5) and ETag, and the answers a [`Hit`] writes: the stored
//!   response with Max-Age reduced by its age, rounded down (§5.7.1), or 2.03 for a client
//!   whose own ETag matches (§5.10.6.2).
//! - `lru.rs`: the recency order; the least recently used entry goes first when the budget
//!   is full.
//!
//! How the engine drives it: [`CacheKey::for_request`] (a [`Bypass`]: forward, store nothing);
//! [`ResponseCache::lookup`]: `Fresh(hit)` is answered with [`Hit::encode_valid`] if
//! [`Hit::client_etag_matches`], else [`Hit::encode`]; `Stale { etag }` and `Miss` are
//! forwarded, the former with that ETag added to the client's. The upstream's 2.03 goes to
//! [`ResponseCache::revalidated`] (a hit to answer with, or `None`: the 2.03 names the client's
//! ETag, so it goes to the client and to `store`, which drops the outdated entry); any other
//! answer, notifications included, to [`ResponseCache::store`]. A successful unsafe request
//! invalidates [`Resource::of_request`], and a 2.01 [`Resource::of_location`] too.
//!
//! **Block-wise (RFC 7959 §2.10): per block, not reassembled.** Each Block2 response is its
//! own entry under its request's key plus the block asked for ([`BlockRef`]: NUM and SZX). The
//! proxy forwards block requests as the client makes them, so it needs no reassembly buffer
//! and no transfer state, its memory stays bounded by entry, any block size a client picks
//! works, and a block-wise GET of a cached resource is answered block by block with no upstream
//! traffic. Blocks of one key are kept consistent by ETag (§2.4): storing a block drops every
//! other block of its key that does not carry the same ETag (untagged blocks count as one
//! representation), and validating one block validates those that do (§2.10). The cost: each block size is an entry of its own, and a
//! request without Block2 is a different entry from one asking for block 0.
//!
//! **Memory.** `ResponseCache::new(budget)` bounds what the cache holds, counted in bytes:
//! each entry's response bytes and slab slot (with its LRU links) and its place in its key's
//! block list, each key's bytes and index slot, and each resource's. An index slot is the map's
//! key and value plus one control byte, at the map's maximum load of 7/8; a shared byte string
//! (`Rc<[u8]>`) counts its two reference counts. Capacity the allocator or a grown table holds
//! beyond that is not counted. The least recently used entries are evicted until a new one fits.

mod entry;
mod key;
mod lru;
#[cfg(test)]
mod tests;

use std::mem::size_of;
use std::rc::Rc;

use crate::coap::{Code, Message};
use crate::time::Timestamp;

use super::keyed_hash::{KeyedMap, KeyedState};
pub(crate) use entry::{CachedResponse, Etag, Freshness, Hit, NotStored};
pub(crate) use key::{BlockRef, Bypass, CacheKey, Resource};
use lru::{Lru, LruId};

/// What a lookup found.
#[derive(Debug)]
pub(crate) enum Lookup<'c> {
    /// A fresh response: answer from it (RFC 7252 §5.6.1).
    Fresh(Hit<'c>),
    /// A stale response with this ETag: ask upstream with it; 2.03 goes to
    /// [`ResponseCache::revalidated`], anything else to [`ResponseCache::store`] (§5.6.2).
    Stale {
        /// The stored response's ETag, to send upstream.
        etag: Etag,
        /// A copy of it: the 2.03 may come back after the entry went.
        stale: CachedResponse,
    },
    /// Nothing usable (a stale response without ETag is dropped on the way): forward.
    Miss,
}

/// What the response cache did, for metrics and tests ([`crate::proxy::Proxy::cache_counters`]).
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct CacheCounters {
    /// Lookups answered fresh.
    pub hits: u64,
    /// Lookups that found nothing usable.
    pub misses: u64,
    /// Lookups that found a stale response with ETag: revalidations started.
    pub revalidations: u64,
    /// Revalidations a 2.03 confirmed.
    pub revalidated: u64,
    /// Invalidations that found cached entries of their resource.
    pub invalidations: u64,
    /// Entries evicted to make room.
    pub evictions: u64,
    /// Stale entries without ETag dropped on lookup: they cannot be revalidated.
    pub expired: u64,
    /// Responses stored.
    pub stored: u64,
}

/// One entry: a response, the key and block it answers.
#[derive(Debug)]
struct Entry {
    key: Rc<[u8]>,
    block2: Option<BlockRef>,
    response: CachedResponse,
}

/// The entries of one key, one per block asked for, sorted by block.
#[derive(Debug)]
struct KeyEntries {
    resource: Rc<[u8]>,
    blocks: Vec<(Option<BlockRef>, LruId)>,
}

/// A resource with entries.
#[derive(Debug)]
struct ResourceState {
    /// The operation count at its latest invalidation: entries validated before are stale.
    invalidated_seq: u64,
    /// Keys with entries of it.
    keys: usize,
}

/// Bytes an index slot costs: key, value and a control byte, at a load of 7/8.
const fn slot_bytes<K, V>() -> usize {
    (size_of::<(K, V)>() + 1) * 8 / 7 + 1
}

/// The reference counts of an `Rc<[u8]>`'s allocation.
const RC_HEADER: usize = 2 * size_of::<usize>();
/// One element of a key's block list.
const BLOCK_SLOT: usize = size_of::<(Option<BlockRef>, LruId)>();
/// What an entry costs besides its response bytes.
const ENTRY_FIXED: usize = Lru::<Entry>::SLOT_BYTES;
/// What a key costs besides its bytes and block list.
const KEY_FIXED: usize = slot_bytes::<Rc<[u8]>, KeyEntries>() + RC_HEADER;
/// What a resource costs besides its bytes.
const RESOURCE_FIXED: usize = slot_bytes::<Rc<[u8]>, ResourceState>() + RC_HEADER;

/// Upstream responses to GET and FETCH, kept within a byte budget (see the module docs).
#[derive(Debug)]
pub(crate) struct ResponseCache {
    budget: usize,
    bytes: usize,
    lru: Lru<Entry>,
    keys: KeyedMap<Rc<[u8]>, KeyEntries>,
    resources: KeyedMap<Rc<[u8]>, ResourceState>,
    /// Counts stores, revalidations and invalidations, to order them.
    seq: u64,
    counters: CacheCounters,
}

impl ResponseCache {
    /// A cache holding at most `budget` bytes (0: off); its index hashes with `secrets`
    /// (given, like the engine's, so clients cannot aim for collisions).
    pub(crate) fn new(budget: usize, secrets: [u64; 2]) -> Self {
        let hash = KeyedState::new(secrets);
        ResponseCache {
            budget,
            bytes: 0,
            lru: Lru::new(),
            keys: hash.map(),
            resources: hash.map(),
            seq: 0,
            counters: CacheCounters::default(),
        }
    }

    /// Whether it keeps anything at all.
    pub(crate) fn is_on(&self) -> bool {
        self.budget > 0
    }

    /// Bytes held, as counted against the budget.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Entries held.
    pub(crate) fn entries(&self) -> usize {
        self.lru.len()
    }

    /// What it did so far.
    pub(crate) fn counters(&self) -> CacheCounters {
        self.counters
    }

    /// The fixed cost of an entry with its own key and resource, beyond the key, resource and
    /// response bytes: what "memory per entry" means in the metrics and the README (its tests
    /// hold the accounting to it).
    #[cfg(test)]
    pub(crate) const fn fixed_bytes_per_entry() -> usize {
        ENTRY_FIXED + BLOCK_SLOT + KEY_FIXED + RESOURCE_FIXED
    }

    /// The next operation's sequence number.
    fn next_seq(&mut self) -> u64 {
        self.seq = self.seq.saturating_add(1);
        self.seq
    }

    /// The entry for `key` and `block2`, and when its resource was last invalidated.
    fn find(&self, key: &[u8], block2: Option<BlockRef>) -> Option<(LruId, u64)> {
        let entries = self.keys.get(key)?;
        let at = entries.blocks.binary_search_by_key(&block2, |&(b, _)| b);
        let &(_, id) = entries.blocks.get(at.ok()?)?;
        let state = self.resources.get(&entries.resource);
        Some((id, state.map_or(0, |s| s.invalidated_seq)))
    }

    /// Looks up the response to the request with `key` asking for `block2`; a hit or a stale
    /// entry becomes the most recently used (RFC 7252 §5.6, §5.6.1, §5.6.2; RFC 7959 §2.10).
    pub(crate) fn lookup(
        &mut self,
        now: Timestamp,
        key: &CacheKey,
        block2: Option<BlockRef>,
    ) -> Lookup<'_> {
        let found = self.find(key.as_bytes(), block2).filter(|_| self.is_on());
        let Some((id, invalidated)) = found else {
            self.counters.misses += u64::from(self.is_on());
            return Lookup::Miss;
        };
        let Some(response) = self.lru.get(id).map(|e| &e.response) else {
            return Lookup::Miss;
        };
        match (response.freshness(now, invalidated), response.etag()) {
            (Freshness::Fresh { max_age_left }, _) => {
                self.lru.touch(id);
                self.counters.hits += 1;
                let hit = self.lru.get(id).and_then(|e| e.response.hit(max_age_left));
                hit.map_or(Lookup::Miss, Lookup::Fresh)
            }
            (Freshness::Stale, Some(etag)) => {
                let stale = response.clone();
                self.lru.touch(id);
                self.counters.revalidations += 1;
                Lookup::Stale { etag, stale }
            }
            (Freshness::Stale, None) => {
                self.remove(id);
                self.counters.expired += 1;
                self.counters.misses += 1;
                Lookup::Miss
            }
        }
    }

    /// Stores the upstream `response` to the request with `key` and `block2`, replacing the
    /// entry there: a newer response wins (RFC 7252 §5.6.1, §5.6.2), and one that cannot be
    /// stored (a 2.03 that [`revalidated`](Self::revalidated) refused too) still removes the
    /// old. Never call it with an answer the proxy made itself.
    pub(crate) fn store(
        &mut self,
        now: Timestamp,
        key: &CacheKey,
        block2: Option<BlockRef>,
        response: &Message,
    ) -> Result<(), NotStored> {
        if !self.is_on() {
            return Err(NotStored::Off);
        }
        if let Some((old, _)) = self.find(key.as_bytes(), block2) {
            self.remove(old);
        }
        let seq = self.next_seq();
        let response = CachedResponse::new(now, seq, response)?;
        let cost = ENTRY_FIXED + response.heap_bytes() + BLOCK_SLOT;
        let cost = cost + KEY_FIXED + key.as_bytes().len();
        if cost + RESOURCE_FIXED + key.resource_bytes().len() > self.budget {
            return Err(NotStored::TooLarge);
        }
        self.drop_other_representations(key.as_bytes(), response.etag());
        let key_rc = self.key_entries(key);
        self.bytes += ENTRY_FIXED + response.heap_bytes();
        let (key, response) = (key_rc.clone(), response);
        let id = self.lru.push(Entry {
            key,
            block2,
            response,
        });
        self.add_block(&key_rc, block2, id);
        self.evict_over_budget();
        if self.lru.get(id).is_none() {
            return Err(NotStored::TooLarge);
        }
        self.counters.stored += 1;
        Ok(())
    }

    /// Drops the entries of `key` that are not of the representation tagged `etag`: blocks
    /// of one key must come from one representation (RFC 7959 §2.4). Untagged blocks are
    /// taken as one representation, as a client reassembling them from the origin would
    /// take them: telling representations apart is what the ETag a server SHOULD send is
    /// for (§2.4), and dropping every other untagged block would make a block-wise GET of
    /// such a resource miss on all blocks but the last.
    fn drop_other_representations(&mut self, key: &[u8], etag: Option<Etag>) {
        let Some(entries) = self.keys.get(key) else {
            return;
        };
        let other = |id: &LruId| {
            let theirs = self.lru.get(*id).and_then(|e| e.response.etag());
            theirs != etag
        };
        let ids = entries.blocks.iter().map(|&(_, id)| id);
        let others: Vec<LruId> = ids.filter(other).collect();
        others.into_iter().for_each(|id| self.remove(id));
    }

    /// The shared bytes of `key`, with its entry list and resource created if new.
    fn key_entries(&mut self, key: &CacheKey) -> Rc<[u8]> {
        if let Some((rc, _)) = self.keys.get_key_value(key.as_bytes()) {
            return rc.clone();
        }
        let resource = self.resource(key.resource_bytes());
        let rc: Rc<[u8]> = Rc::from(key.as_bytes());
        let blocks = Vec::with_capacity(1);
        self.bytes += KEY_FIXED + rc.len() + BLOCK_SLOT * blocks.capacity();
        self.keys
            .insert(rc.clone(), KeyEntries { resource, blocks });
        rc
    }

    /// The shared bytes of `resource`, counting one more key of it.
    fn resource(&mut self, resource: &[u8]) -> Rc<[u8]> {
        if let Some((rc, _)) = self.resources.get_key_value(resource) {
            let rc = rc.clone();
            if let Some(state) = self.resources.get_mut(resource) {
                state.keys += 1;
            }
            return rc;
        }
        let rc: Rc<[u8]> = Rc::from(resource);
        self.bytes += RESOURCE_FIXED + rc.len();
        let state = ResourceState {
            invalidated_seq: 0,
            keys: 1,
        };
        self.resources.insert(rc.clone(), state);
        rc
    }

    /// Lists entry `id` under its key and block, counting any growth of the list.
    fn add_block(&mut self, key: &[u8], block2: Option<BlockRef>, id: LruId) {
        let Some(entries) = self.keys.get_mut(key) else {
            return;
        };
        let before = entries.blocks.capacity();
        let at = entries.blocks.partition_point(|&(b, _)| b < block2);
        entries.blocks.insert(at, (block2, id));
        let grown = entries.blocks.capacity().saturating_sub(before);
        self.bytes += grown * BLOCK_SLOT;
    }

    /// Forgets entry `id`, and its key and resource if it was their last.
    fn remove(&mut self, id: LruId) {
        let Some(entry) = self.lru.remove(id) else {
            return;
        };
        let freed = ENTRY_FIXED + entry.response.heap_bytes();
        self.bytes = self.bytes.saturating_sub(freed);
        let Some(entries) = self.keys.get_mut(&entry.key) else {
            return;
        };
        if let Ok(at) = entries
            .blocks
            .binary_search_by_key(&entry.block2, |&(b, _)| b)
        {
            entries.blocks.remove(at);
        }
        if !entries.blocks.is_empty() {
            return;
        }
        if let Some((rc, entries)) = self.keys.remove_entry(&entry.key) {
            let freed = KEY_FIXED + rc.len() + BLOCK_SLOT * entries.blocks.capacity();
            self.bytes = self.bytes.saturating_sub(freed);
            self.release_resource(&entries.resource);
        }
    }

    /// Counts one key less of `resource`, forgetting it with its last.
    fn release_resource(&mut self, resource: &[u8]) {
        let Some(state) = self.resources.get_mut(resource) else {
            return;
        };
        state.keys = state.keys.saturating_sub(1);
        if state.keys == 0 {
            self.resources.remove(resource);
            let freed = RESOURCE_FIXED + resource.len();
            self.bytes = self.bytes.saturating_sub(freed);
        }
    }

    /// Evicts the least recently used entries while over the budget.
    fn evict_over_budget(&mut self) {
        while self.bytes > self.budget {
            let Some(oldest) = self.lru.oldest() else {
                return;
            };
            self.remove(oldest);
            self.counters.evictions += 1;
        }
    }

    /// Applies an upstream 2.03 to the entry it validates: the one for `key` and `block2`,
    /// if its ETag is the 2.03's (RFC 7252 §5.6.2, §5.9.1.3), and, validating one block being
    /// validating them all (RFC 7959 §2.10), the key's other blocks with that ETag. Gives the
    /// refreshed response to answer the request with, even when the 2.03's Max-Age is 0
    /// (§5.6.2: the 2.03 makes it usable for this request); `None` if the 2.03 is about some
    /// other representation (the client's own ETag), which then goes to the client.
    pub(crate) fn revalidated(
        &mut self,
        now: Timestamp,
        key: &CacheKey,
        block2: Option<BlockRef>,
        valid: &Message,
    ) -> Option<Hit<'_>> {
        if !self.is_on() || valid.code() != Code::VALID {
            return None;
        }
        let (max_age, etag) = match entry::validators(valid) {
            Ok((max_age, Some(etag))) => (max_age, etag),
            _ => return None,
        };
        let (id, _) = self.find(key.as_bytes(), block2)?;
        let seq = self.next_seq();
        let entry = self.lru.get_mut(id);
        let entry = entry.filter(|e| e.response.etag() == Some(etag))?;
        let before = entry.response.heap_bytes();
        if !entry.response.revalidate(now, seq, valid) {
            return None;
        }
        let after = entry.response.heap_bytes();
        self.bytes = self.bytes.saturating_sub(before) + after;
        self.refresh_siblings(now, seq, key.as_bytes(), (etag, max_age));
        self.lru.touch(id);
        self.counters.revalidated += 1;
        self.evict_over_budget();
        self.lru.get(id)?.response.hit(max_age)
    }

    /// Makes the entries of `key` tagged `etag` fresh for `max_age` from `now` (RFC 7959 §2.10).
    fn refresh_siblings(&mut self, now: Timestamp, seq: u64, key: &[u8], tag: (Etag, u32)) {
        let Some(entries) = self.keys.get(key) else {
            return;
        };
        let (lru, (etag, max_age)) = (&mut self.lru, tag);
        for &(_, id) in &entries.blocks {
            match lru.get_mut(id) {
                Some(e) if e.response.etag() == Some(etag) => e.response.refresh(now, seq, max_age),
                _ => {}
            }
        }
    }

    /// Makes every entry of `resource` (any method, options or block) not fresh, after a
    /// successful unsafe request to it (RFC 7252 §5.9.1.1/2/4, §5.10.7; RFC 8132 §3). Entries
    /// with an ETag may still be revalidated; those without are dropped on their next lookup.
    /// Returns whether anything of it was cached.
    pub(crate) fn invalidate_resource(&mut self, resource: &Resource) -> bool {
        let seq = self.next_seq();
        let Some(state) = self.resources.get_mut(resource.as_bytes()) else {
            return false;
        };
        state.invalidated_seq = seq;
        self.counters.invalidations += 1;
        true
    }
}
