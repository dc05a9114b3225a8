//! Values in least-recently-used order: a doubly linked list threaded through a slab.
//!
//! Every operation the cache does per request (keep, touch, forget, find the oldest) is O(1)
//! and allocates only when the slab grows; an id stays valid until its value is removed.

use slab::Slab;

/// Names one value in an [`Lru`] while it is there (a slab index; reused after removal).
pub(super) type LruId = usize;

/// No neighbour: the end of the list.
const NIL: LruId = usize::MAX;

/// A value and its neighbours in recency order.
#[derive(Debug)]
struct Node<T> {
    value: T,
    /// The next more recently used value.
    newer: LruId,
    /// The next less recently used value.
    older: LruId,
}

/// Values ordered from most to least recently used.
#[derive(Debug)]
pub(super) struct Lru<T> {
    nodes: Slab<Node<T>>,
    newest: LruId,
    oldest: LruId,
}

impl<T> Lru<T> {
    /// Bytes one value takes in the slab, links included: slab slots are an enum of the value
    /// and a free-list index, so at most the larger of the two plus a word for the tag.
    pub(super) const SLOT_BYTES: usize = {
        let node = std::mem::size_of::<Node<T>>();
        let word = std::mem::size_of::<usize>();
        (if node > word { node } else { word }) + word
    };

    /// An empty list.
    pub(super) fn new() -> Self {
        Lru {
            nodes: Slab::new(),
            newest: NIL,
            oldest: NIL,
        }
    }

    /// How many values it holds.
    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Keeps `value` as the most recently used one.
    pub(super) fn push(&mut self, value: T) -> LruId {
        let id = self.nodes.insert(Node {
            value,
            newer: NIL,
            older: NIL,
        });
        self.link_newest(id);
        id
    }

    /// The value `id`, if it is still here.
    pub(super) fn get(&self, id: LruId) -> Option<&T> {
        self.nodes.get(id).map(|n| &n.value)
    }

    /// The value `id` to change, if it is still here.
    pub(super) fn get_mut(&mut self, id: LruId) -> Option<&mut T> {
        self.nodes.get_mut(id).map(|n| &mut n.value)
    }

    /// Makes `id` the most recently used value.
    pub(super) fn touch(&mut self, id: LruId) {
        if self.nodes.contains(id) && self.newest != id {
            self.unlink(id);
            self.link_newest(id);
        }
    }

    /// The least recently used value, the next to evict.
    pub(super) fn oldest(&self) -> Option<LruId> {
        (self.oldest != NIL).then_some(self.oldest)
    }

    /// Takes `id` out of the list.
    pub(super) fn remove(&mut self, id: LruId) -> Option<T> {
        if !self.nodes.contains(id) {
            return None;
        }
        self.unlink(id);
        Some(self.nodes.remove(id).value)
    }

    /// Puts `id` (not linked) at the newest end.
    fn link_newest(&mut self, id: LruId) {
        let old_newest = self.newest;
        if let Some(n) = self.nodes.get_mut(id) {
            (n.newer, n.older) = (NIL, old_newest);
        }
        match self.nodes.get_mut(old_newest) {
            Some(n) => n.newer = id,
            None => self.oldest = id,
        }
        self.newest = id;
    }

    /// Joins the neighbours of `id` (linked) to each other.
    fn unlink(&mut self, id: LruId) {
        let Some(&Node { newer, older, .. }) = self.nodes.get(id) else {
            return;
        };
        match self.nodes.get_mut(newer) {
            Some(n) => n.older = older,
            None => self.newest = older,
        }
        match self.nodes.get_mut(older) {
            Some(n) => n.newer = newer,
            None => self.oldest = newer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from least to most recently used.
    fn order(lru: &Lru<u32>) -> Vec<u32> {
        let mut out = Vec::new();
        let mut at = lru.oldest;
        while let Some(n) = lru.nodes.get(at) {
            out.push(n.value);
            at = n.newer;
        }
        out
    }

    #[test]
    fn touch_makes_a_value_the_last_to_be_evicted() {
        let mut lru = Lru::new();
        let ids: Vec<_> = (0..4).map(|v| lru.push(v)).collect();
        lru.touch(ids[0]);
        lru.touch(ids[2]);
        assert_eq!(order(&lru), [1, 3, 0, 2]);
        assert_eq!(lru.oldest(), Some(ids[1]));
    }

    #[test]
    fn removal_from_either_end_or_the_middle_keeps_the_order() {
        let mut lru = Lru::new();
        let ids: Vec<_> = (0..5).map(|v| lru.push(v)).collect();
        assert_eq!(lru.remove(ids[2]), Some(2));
        assert_eq!(lru.remove(ids[0]), Some(0));
        assert_eq!(lru.remove(ids[4]), Some(4));
        assert_eq!((order(&lru), lru.len()), (vec![1, 3], 2));
        assert_eq!(lru.remove(ids[4]), None);
        lru.remove(ids[1]);
        lru.remove(ids[3]);
        assert_eq!((lru.oldest(), lru.newest), (None, NIL));
        lru.push(9);
        assert_eq!(order(&lru), [9]);
    }
}
