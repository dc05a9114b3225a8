//! What the proxy keeps per client: its numbering of the proxy's own messages to it, and how
//! many of its requests are in flight.
//!
//! RFC 7252 §4.4 forbids reusing a Message ID of the proxy's own towards an endpoint within
//! EXCHANGE_LIFETIME. A single counter for all clients wraps after 65536 answers in total, well
//! within that at a few hundred answers per second; counting per client, a MID repeats only
//! after 65536 messages to that client. An entry lives while anything may still carry one of
//! its MIDs, and while the answer caches count answers under its slot (a client's share of
//! them, `answer_cache.rs`): every live exchange of the client and every answer kept for it
//! holds a reference on it, so a client that returns after all of them are gone starts afresh.
//!
//! Entries sit in a slab and are named by [`ClientSlot`]: an exchange looks its client up by
//! address once, when its request arrives, and by slot from then on.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slab::Slab;

use super::keyed_hash::{KeyedMap, KeyedState};
use super::peer::Peer;

/// Names a client's entry while references on it are held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ClientSlot(u32);

impl ClientSlot {
    /// Its index: slots are small and dense, so per-client tables are vectors by slot.
    pub(super) fn index(self) -> usize {
        self.0 as usize
    }
}

#[derive(Debug)]
struct ClientState {
    peer: Peer,
    next_mid: u16,
    refs: u32,
    /// Of the client's exchanges, those still waiting on an upstream.
    inflight: u32,
    /// Bytes of the answers its live exchanges keep (held for proof, being delivered, the
    /// latest notification): what the proxy holds for it besides the kept answers.
    answer_bytes: usize,
}

/// Every client something is still kept for.
#[derive(Debug)]
pub(super) struct Clients {
    slab: Slab<ClientState>,
    by_peer: KeyedMap<Peer, ClientSlot>,
    /// Draws each new client's first Message ID (RFC 7252 §4.4 asks for a random start).
    rng: SmallRng,
}

impl Clients {
    pub(super) fn new(seed: u64, hash: &KeyedState) -> Self {
        Clients {
            slab: Slab::new(),
            by_peer: hash.map(),
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The entry of `peer`, created without references if there is none; release it with
    /// [`forget_if_unused`](Self::forget_if_unused) if no reference is taken.
    pub(super) fn slot(&mut self, peer: Peer) -> ClientSlot {
        if let Some(&slot) = self.by_peer.get(&peer) {
            return slot;
        }
        let slot = ClientSlot(self.slab.insert(ClientState {
            peer,
            next_mid: self.rng.random(),
            refs: 0,
            inflight: 0,
            answer_bytes: 0,
        }) as u32);
        self.by_peer.insert(peer, slot);
        slot
    }

    fn state(&mut self, slot: ClientSlot) -> &mut ClientState {
        &mut self.slab[slot.0 as usize]
    }

    /// Something (an exchange, a kept answer) now depends on the entry.
    pub(super) fn take_ref(&mut self, slot: ClientSlot) {
        self.state(slot).refs += 1;
    }

    /// One dependent is gone; the entry goes with the last.
    pub(super) fn release(&mut self, slot: ClientSlot) {
        self.state(slot).refs -= 1;
        self.forget_if_unused(slot);
    }

    /// Drops the entry if nothing depends on it (and if it is still there: the last
    /// reference of a stream connection's request can go before its request is done with,
    /// since nothing is kept for it, `kept.rs`).
    pub(super) fn forget_if_unused(&mut self, slot: ClientSlot) {
        if self.slab.get(slot.0 as usize).is_some_and(|s| s.refs == 0) {
            let state = self.slab.remove(slot.0 as usize);
            self.by_peer.remove(&state.peer);
        }
    }

    /// The next Message ID of the proxy's own towards this client.
    pub(super) fn fresh_mid(&mut self, slot: ClientSlot) -> u16 {
        let state = self.state(slot);
        state.next_mid = state.next_mid.wrapping_add(1);
        state.next_mid
    }

    /// Requests of this client waiting on an upstream.
    pub(super) fn inflight(&self, slot: ClientSlot) -> usize {
        self.slab[slot.0 as usize].inflight as usize
    }

    /// One more (`true`) or one fewer (`false`) of its requests waits on an upstream.
    pub(super) fn count_inflight(&mut self, slot: ClientSlot, more: bool) {
        let state = self.state(slot);
        match more {
            true => state.inflight += 1,
            false => state.inflight -= 1,
        }
    }

    /// Bytes of the answers this client's live exchanges keep.
    pub(super) fn answer_bytes(&self, slot: ClientSlot) -> usize {
        self.slab[slot.0 as usize].answer_bytes
    }

    /// The client's exchanges now keep `added` bytes more and `removed` fewer.
    pub(super) fn count_answer_bytes(&mut self, slot: ClientSlot, added: usize, removed: usize) {
        let state = self.state(slot);
        state.answer_bytes = state.answer_bytes + added - removed;
    }

    /// Clients with an entry.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.slab.len()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A slot for tests of what holds one (never dereferenced).
    pub(in crate::proxy) fn some_slot() -> ClientSlot {
        ClientSlot(7)
    }

    /// Slot `n`, for tests of what counts by slot (never dereferenced).
    pub(in crate::proxy) fn slot(n: u32) -> ClientSlot {
        ClientSlot(n)
    }

    #[test]
    fn an_entry_lives_while_referenced_and_numbers_on_from_a_random_start() {
        let mut clients = Clients::new(1, &KeyedState::new([1, 2]));
        let peer = Peer::Udp("127.0.0.1:40000".parse().unwrap());
        let slot = clients.slot(peer);
        assert_eq!(clients.slot(peer), slot, "one entry per peer");
        clients.take_ref(slot);
        clients.take_ref(slot);
        let first = clients.fresh_mid(slot);
        assert_eq!(clients.fresh_mid(slot), first.wrapping_add(1));
        clients.release(slot);
        assert_eq!(clients.len(), 1);
        clients.release(slot);
        assert_eq!(clients.len(), 0);
        let unused = clients.slot(peer);
        clients.forget_if_unused(unused);
        assert_eq!(clients.len(), 0);
    }
}
