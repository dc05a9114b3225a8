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
//!
//! The bytes of answers its exchanges keep are also counted per source network
//! ([`SourcePrefix`], `--source-prefix`): that is what the share of answers held for a proof
//! of address is counted against (`validation::MAX_HELD_BYTES`), since one host has 65,536
//! ports and an IPv6 subscriber a /64.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slab::Slab;

use super::keyed_hash::{KeyedMap, KeyedState};
use super::observation_shares::SourceKey;
use super::peer::Peer;
use crate::source_prefix::{PrefixLengths, SourcePrefix};

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
    /// The source its per-source shares count, fixed when the entry is made: what is
    /// counted against it is given back against the same one.
    source: SourceKey,
    /// The network of its claimed address (none for a peer that cannot be forged), which
    /// the answers held for its proof count against.
    prefix: Option<SourcePrefix>,
}

/// Every client something is still kept for.
#[derive(Debug)]
pub(super) struct Clients {
    slab: Slab<ClientState>,
    by_peer: KeyedMap<Peer, ClientSlot>,
    /// Draws each new client's first Message ID (RFC 7252 §4.4 asks for a random start).
    rng: SmallRng,
    /// How a claimed address maps to its source network.
    prefixes: PrefixLengths,
    /// Bytes of the answers the live exchanges of a source network's clients keep (held for
    /// proof, being delivered, the latest notification), for those with any.
    prefix_answer_bytes: KeyedMap<SourcePrefix, usize>,
}

impl Clients {
    pub(super) fn new(seed: u64, prefixes: PrefixLengths, hash: &KeyedState) -> Self {
        Clients {
            slab: Slab::new(),
            by_peer: hash.map(),
            rng: SmallRng::seed_from_u64(seed),
            prefixes,
            prefix_answer_bytes: hash.map(),
        }
    }

    /// The entry of `peer`, made counting towards its own address if there is none (tests).
    #[cfg(test)]
    pub(super) fn slot(&mut self, peer: Peer) -> ClientSlot {
        self.slot_from(peer, SourceKey::of(peer.into(), self.prefixes))
    }

    /// The entry of `peer`, made without references and counting towards `source` if there
    /// is none; release it with [`forget_if_unused`](Self::forget_if_unused) if no reference is taken.
    pub(super) fn slot_from(&mut self, peer: Peer, source: SourceKey) -> ClientSlot {
        if let Some(&slot) = self.by_peer.get(&peer) {
            return slot;
        }
        let slot = ClientSlot(
            self.slab.insert(ClientState {
                peer,
                next_mid: self.rng.random(),
                refs: 0,
                inflight: 0,
                source,
                prefix: peer
                    .claimed_address()
                    .map(|a| self.prefixes.source_of(a.ip())),
            }) as u32,
        );
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

    /// The client's exchanges now keep `added` answer bytes more and `removed` fewer: counted
    /// for its source network.
    pub(super) fn count_answer_bytes(&mut self, slot: ClientSlot, added: usize, removed: usize) {
        let Some(prefix) = self.slab[slot.0 as usize]
            .prefix
            .filter(|_| added != removed)
        else {
            return;
        };
        let bytes = self.prefix_answer_bytes.entry(prefix).or_default();
        *bytes = *bytes + added - removed;
        if *bytes == 0 {
            self.prefix_answer_bytes.remove(&prefix);
        }
    }

    /// Bytes of the answers the live exchanges of every client in `peer`'s source network
    /// keep (0 for a peer that cannot be forged, which has no share to keep within).
    pub(super) fn prefix_answer_bytes(&self, peer: Peer) -> usize {
        let prefix = peer
            .claimed_address()
            .map(|a| self.prefixes.source_of(a.ip()));
        prefix.map_or(0, |p| {
            self.prefix_answer_bytes.get(&p).copied().unwrap_or(0)
        })
    }

    /// The source the client's per-source shares count.
    pub(super) fn source(&self, slot: ClientSlot) -> SourceKey {
        self.slab[slot.0 as usize].source
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

    fn clients() -> Clients {
        Clients::new(1, PrefixLengths::DEFAULT, &KeyedState::new([1, 2]))
    }

    #[test]
    fn an_entry_lives_while_referenced_and_numbers_on_from_a_random_start() {
        let mut clients = clients();
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

    #[test]
    fn answer_bytes_count_per_source_network_not_per_port() {
        let mut clients = clients();
        let udp = |s: &str| Peer::Udp(s.parse().unwrap());
        let (a, b) = (udp("192.0.2.7:1000"), udp("192.0.2.7:2000"));
        let (v6a, v6b) = (udp("[2001:db8::1]:5683"), udp("[2001:db8::2]:5683"));
        for (peer, bytes) in [(a, 100), (b, 50), (v6a, 10), (v6b, 20)] {
            let slot = clients.slot(peer);
            clients.count_answer_bytes(slot, bytes, 0);
        }
        assert_eq!(
            clients.prefix_answer_bytes(a),
            150,
            "one address, two ports"
        );
        assert_eq!(clients.prefix_answer_bytes(v6b), 30, "one /64");
        assert_eq!(clients.prefix_answer_bytes(udp("192.0.2.8:1000")), 0);
        let slot = clients.slot(a);
        clients.count_answer_bytes(slot, 0, 100);
        let slot = clients.slot(b);
        clients.count_answer_bytes(slot, 0, 50);
        assert_eq!(clients.prefix_answer_bytes(b), 0);
        assert!(!clients
            .prefix_answer_bytes
            .contains_key(&PrefixLengths::DEFAULT.source_of("192.0.2.7".parse().unwrap())));
    }
}
