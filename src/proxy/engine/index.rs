//! A hash index without tombstones, for the engine's maps that take an insert and a removal
//! for nearly every request: the duplicate index, the upstream Message IDs (issue 26).
//!
//! A std `HashMap` (hashbrown) marks a removed slot as deleted when its probe group is full,
//! and a table whose free slots are used up by such marks rehashes itself in place: every
//! entry, all at once. Under steady churn that comes back again and again, a stop of the world
//! in proportion to the table (about 0.5 ms for the duplicate index at 200,000 requests per
//! second with the cache on, measured with `benches/engine_turns.rs`). Here entries sit in a
//! slab and each bucket heads a chain through them: a removal unlinks its node and frees its
//! slot at once, so nothing accumulates, and the only bulk work is doubling the buckets when
//! the entries outnumber them, which steady churn never does.
//!
//! Keys are hashed with the engine's secret [`KeyedState`], so chains stay short whatever
//! keys a client picks (see `keyed_hash.rs`).

use std::hash::{BuildHasher, Hash};

use slab::Slab;

use super::keyed_hash::KeyedState;

/// The end of a chain.
const NIL: u32 = u32::MAX;
/// Buckets of the first table.
const FIRST_BUCKETS: usize = 64;

struct Node<K, V> {
    key: K,
    value: V,
    /// The next node of the same bucket, or [`NIL`].
    next: u32,
}

/// See the module docs. The map operations the engine uses, with `HashMap`'s meaning.
pub(super) struct Index<K, V> {
    /// The first node of each bucket's chain, or [`NIL`]; a power of two of them (or none).
    heads: Vec<u32>,
    nodes: Slab<Node<K, V>>,
    state: KeyedState,
}

impl<K: Hash + Eq, V> Index<K, V> {
    pub(super) fn new(state: KeyedState) -> Self {
        Index {
            heads: Vec::new(),
            nodes: Slab::new(),
            state,
        }
    }

    /// Entries (the engine's tests count what its maps hold).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }

    #[inline]
    pub(super) fn get(&self, key: &K) -> Option<&V> {
        self.find(key).map(|i| &self.nodes[i].value)
    }

    #[inline]
    pub(super) fn contains_key(&self, key: &K) -> bool {
        self.find(key).is_some()
    }

    /// Inserts or replaces; the value replaced, if any. The key is hashed once (twice when
    /// the table grows).
    #[inline]
    pub(super) fn insert(&mut self, key: K, value: V) -> Option<V> {
        let mut bucket = (!self.heads.is_empty()).then(|| self.bucket(&key));
        if let Some(i) = bucket.and_then(|b| self.find_in(b, &key)) {
            return Some(std::mem::replace(&mut self.nodes[i].value, value));
        }
        if self.nodes.len() >= self.heads.len() {
            self.grow();
            bucket = None;
        }
        let bucket = bucket.unwrap_or_else(|| self.bucket(&key));
        let next = self.heads[bucket];
        let i = self.nodes.insert(Node { key, value, next });
        self.heads[bucket] = u32::try_from(i).expect("fewer than 2^32 entries");
        None
    }

    #[inline]
    pub(super) fn remove(&mut self, key: &K) -> Option<V> {
        if self.heads.is_empty() {
            return None;
        }
        let bucket = self.bucket(key);
        let (mut prev, mut at) = (NIL, self.heads[bucket]);
        while at != NIL {
            let node = &self.nodes[at as usize];
            if node.key == *key {
                let next = node.next;
                match prev {
                    NIL => self.heads[bucket] = next,
                    p => self.nodes[p as usize].next = next,
                }
                return Some(self.nodes.remove(at as usize).value);
            }
            (prev, at) = (at, node.next);
        }
        None
    }

    #[inline]
    fn bucket(&self, key: &K) -> usize {
        self.state.hash_one(key) as usize & (self.heads.len() - 1)
    }

    #[inline]
    fn find(&self, key: &K) -> Option<usize> {
        if self.heads.is_empty() {
            return None;
        }
        self.find_in(self.bucket(key), key)
    }

    /// The node of `key` in `bucket`, which must be the key's.
    #[inline]
    fn find_in(&self, bucket: usize, key: &K) -> Option<usize> {
        let mut at = self.heads[bucket];
        while at != NIL {
            let node = &self.nodes[at as usize];
            if node.key == *key {
                return Some(at as usize);
            }
            at = node.next;
        }
        None
    }

    /// Twice the buckets (at least [`FIRST_BUCKETS`]), every node relinked: at most one
    /// node per bucket on average.
    fn grow(&mut self) {
        let buckets = (self.heads.len() * 2).max(FIRST_BUCKETS);
        self.heads = vec![NIL; buckets];
        let (heads, state) = (&mut self.heads, &self.state);
        for (i, node) in self.nodes.iter_mut() {
            let bucket = state.hash_one(&node.key) as usize & (buckets - 1);
            node.next = heads[bucket];
            heads[bucket] = i as u32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;

    #[test]
    fn it_agrees_with_a_hash_map_through_growth_and_churn() {
        let mut index = Index::new(KeyedState::new([3, 5]));
        let mut model = HashMap::new();
        let mut rng = SmallRng::seed_from_u64(9);
        for step in 0..200_000u32 {
            // Keys from a range that grows, then stays: growth first, churn after.
            let key: u32 = rng.random_range(0..(step / 4 + 10).min(5_000));
            match rng.random_range(0..3) {
                0 => assert_eq!(index.insert(key, step), model.insert(key, step)),
                1 => assert_eq!(index.remove(&key), model.remove(&key)),
                _ => assert_eq!(index.get(&key), model.get(&key)),
            }
            assert_eq!(index.len(), model.len());
            assert_eq!(index.contains_key(&key), model.contains_key(&key));
        }
        for (k, v) in &model {
            assert_eq!(index.get(k), Some(v));
        }
    }

    #[test]
    fn steady_churn_never_grows_the_buckets() {
        let mut index = Index::new(KeyedState::new([1, 2]));
        for k in 0..1_000u64 {
            index.insert(k, ());
        }
        let buckets = index.heads.len();
        for k in 1_000..1_000_000u64 {
            index.insert(k, ());
            index.remove(&(k - 1_000));
        }
        assert_eq!((index.len(), index.heads.len()), (1_000, buckets));
    }
}
