//! The send decision: whether a datagram may go to a client now. Every datagram passes here
//! on its way into the outbox, which the gate owns, as quinn-proto checks its anti-amplification limit
//! where it decides to transmit, so the queue itself only queues.
//!
//! Two rules apply, both to a peer known only by the address its datagrams claim
//! ([`Peer::claimed_address`]); a peer that cannot be forged passes at once:
//! - the allowance of a source that has not proven it receives (`validation.rs`, always on);
//! - the opt-in send rate per client (`budget.rs`, `--client-bytes-per-sec`).

use std::net::SocketAddr;

use crate::time::Timestamp;

use super::budget::SendBudget;
use super::counters::Proof;
use super::exchange::ExchangeKey;
use super::outbox::{Destination, Outbox};
use super::peer::Peer;
use super::validation::{SourceValidation, Verdict};

/// What a datagram to a client is, for the rules it passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Charge {
    /// An answer or message relayed to the client: within its allowance and its send rate.
    Relayed,
    /// An answer the proxy made itself: within the allowance, but not charged to the send
    /// rate, whose refusals (5.03 with Max-Age) are such answers, one per request.
    Local,
    /// A CON of this exchange: past an unproven client's allowance it may go as the one CON
    /// that asks for the proof, or waits for it (`validation.rs`).
    Con(ExchangeKey),
}

/// The rules, and the clock they read.
#[derive(Debug)]
pub(super) struct SendGate {
    validation: SourceValidation,
    /// `--client-bytes-per-sec` and friends, when on.
    budget: Option<SendBudget>,
    /// The engine's latest `now`.
    now: Timestamp,
    /// What passed, queued for the driver.
    out: Outbox,
}

impl SendGate {
    pub(super) fn new(validation: SourceValidation, budget: Option<SendBudget>) -> Self {
        SendGate {
            validation,
            budget,
            now: Timestamp::ZERO,
            out: Outbox::default(),
        }
    }

    /// The engine's clock moved to `now` (it never goes back).
    #[inline]
    pub(super) fn clock(&mut self, now: Timestamp) {
        self.now = self.now.max(now);
    }

    /// A datagram of `len` bytes came from `from` (its allowance grows).
    #[inline]
    pub(super) fn received(&mut self, from: Peer, len: usize) {
        if let Some(addr) = from.claimed_address() {
            self.validation.received(self.now, addr, len);
        }
    }

    /// Whether `to` has proven that it receives (or needs not).
    #[inline]
    pub(super) fn proven(&self, to: Peer) -> bool {
        to.claimed_address()
            .is_none_or(|addr| self.validation.proven(self.now, addr))
    }

    /// Whether `len` bytes may go to `to` now without a proof of its address.
    #[inline]
    pub(super) fn fits(&self, to: Peer, len: usize) -> bool {
        to.claimed_address()
            .is_none_or(|addr| self.validation.fits(self.now, addr, len))
    }

    /// Queues `payload` for `to` unless the rules hold it back (it is counted
    /// there). Returns whether it was queued. Datagrams to upstreams always are.
    #[inline]
    pub(super) fn send(&mut self, charge: Charge, to: Destination, payload: &[u8]) -> bool {
        let addr = match to {
            Destination::Client(peer) => peer.claimed_address(),
            Destination::Upstream(_) => None,
        };
        if addr.is_some_and(|addr| !self.admits(addr, payload.len(), charge)) {
            return false;
        }
        self.out.push(to, payload);
        true
    }

    /// [`send`](Self::send) for what `encode` writes (into a cleared buffer, as the CoAP
    /// encoders do).
    pub(super) fn send_encoded(
        &mut self,
        charge: Charge,
        to: Destination,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> bool {
        let mut scratch = self.out.take_scratch();
        encode(&mut scratch);
        let queued = self.send(charge, to, &scratch);
        self.out.put_scratch(scratch);
        queued
    }

    /// The next queued datagram, handed to `send` with where it goes.
    #[inline]
    pub(super) fn pop_with<R>(&mut self, send: impl FnOnce(Destination, &[u8]) -> R) -> Option<R> {
        self.out.pop_with(send)
    }

    /// Bytes queued for the driver (see `Outbox::queued_bytes`).
    pub(super) fn queued_bytes(&self) -> usize {
        self.out.queued_bytes()
    }

    /// Datagrams queued, for tests.
    #[cfg(test)]
    pub(super) fn queued(&self) -> usize {
        self.out.len()
    }

    /// Whether `len` more bytes may go to `addr`: within its allowance (or as its probe)
    /// and, unless the proxy made the answer itself, within its rate.
    #[inline]
    fn admits(&mut self, addr: SocketAddr, len: usize, charge: Charge) -> bool {
        let con = match charge {
            Charge::Con(key) => Some(key),
            Charge::Relayed | Charge::Local => None,
        };
        if self.validation.admit(self.now, addr, len, con) == Verdict::Withhold {
            return false;
        }
        let rated = charge != Charge::Local;
        let budget = self.budget.as_mut().filter(|_| rated);
        budget.is_none_or(|b| b.admit(self.now, addr, len))
    }

    /// The CON of exchange `key` to `to` is no longer being delivered: if it was the
    /// client's probe, another may take its place.
    pub(super) fn delivery_ended(&mut self, to: Peer, key: ExchangeKey) {
        if let Some(addr) = to.claimed_address() {
            self.validation.delivery_ended(addr, key);
        }
    }

    /// Whether an RST from `from` answers the ping that asked it for its proof.
    pub(super) fn answers_ping(&self, from: Peer, mid: u16) -> bool {
        from.claimed_address()
            .is_some_and(|addr| self.validation.answers_ping(addr, mid))
    }

    /// An ACK or RST from `from` matched nothing (see `SourceValidation::wrong_proof`).
    pub(super) fn wrong_proof(&mut self, from: Peer) {
        if let Some(addr) = from.claimed_address() {
            self.validation.wrong_proof(self.now, addr);
        }
    }

    /// Writes what the rules counted, and how many sources they track, into `c`.
    pub(super) fn count(&self, c: &mut Proof) {
        let v = &self.validation;
        c.amplification_dropped = v.withheld_datagrams;
        c.amplification_probes = v.probes;
        c.proof_pings = v.pings;
        c.sources_proved_by_ack = v.proved_by_ack;
        c.sources_proved_by_echo = v.proved_by_echo;
        c.ack_proofs_refused = v.ack_proofs_refused;
        c.validation_sources = v.sources() as u64;
        if let Some(b) = &self.budget {
            c.over_budget_dropped = b.dropped;
            c.over_budget_dropped_bytes = b.dropped_bytes;
            c.budget_sources = b.sources() as u64;
        }
    }

    /// What unproven sources may be sent, for the proofs and their counters.
    pub(super) fn validation(&self) -> &SourceValidation {
        &self.validation
    }

    pub(super) fn validation_mut(&mut self) -> &mut SourceValidation {
        &mut self.validation
    }

    /// The send rate, if on, for its counters and refill times.
    pub(super) fn budget(&self) -> Option<&SendBudget> {
        self.budget.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coap::echo::EchoKey;
    use crate::proxy::engine::endpoints::EndpointId;
    use crate::proxy::engine::keyed_hash::KeyedState;
    use crate::proxy::engine::peer::LocalClient;

    #[test]
    fn only_a_claimed_address_is_held_to_its_allowance() {
        let validation = SourceValidation::new(EchoKey::new([3, 4]), &KeyedState::new([1, 2]));
        let mut gate = SendGate::new(validation, None);
        let udp = Peer::Udp("127.0.0.1:5683".parse().unwrap());
        let local = Peer::Local(LocalClient::new(1));
        gate.received(udp, 10);
        gate.received(local, 10);
        let big = [0u8; 100];
        let mut send = |to, len| gate.send(Charge::Relayed, to, &big[..len]);
        assert!(!send(Destination::Client(udp), 31), "over 3x of 10 bytes");
        assert!(send(Destination::Client(udp), 30));
        assert!(send(Destination::Client(local), 100));
        assert!(send(Destination::Upstream(EndpointId(0)), 100));
        assert_eq!(gate.queued(), 3);
        assert!(!gate.proven(udp) && gate.proven(local));
    }
}
