//! Datagrams waiting for the driver, back to back in one buffer: queuing one costs a copy,
//! not an allocation, and the driver sends each straight from there.

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::time::Timestamp;

use super::budget::SendBudget;
use super::endpoints::EndpointId;
use super::exchange::ExchangeKey;
use super::local::is_local_client;
use super::validation::{SourceValidation, Verdict};

/// Which socket a datagram leaves through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    /// The client-facing socket, to this client.
    Client(SocketAddr),
    /// This upstream endpoint's socket (connected to its upstream).
    Upstream(EndpointId),
}

/// The engine's queue of datagrams to send, and the gate every datagram to a client passes:
/// the 3x allowance of sources not yet proven (`validation.rs`) and, opt-in, a send rate
/// (`budget.rs`).
#[derive(Debug)]
pub(super) struct Outbox {
    /// Each datagram's destination and length, oldest first.
    queue: VecDeque<(Destination, usize)>,
    /// Their bytes, in the same order; `read` of them have been taken.
    bytes: Vec<u8>,
    read: usize,
    /// Where [`push_encoded`](Self::push_encoded) lets an encoder write.
    scratch: Vec<u8>,
    /// What unproven sources may be sent (`validation.rs`).
    validation: SourceValidation,
    /// `--client-bytes-per-sec` and friends, when on: a send rate per client (`budget.rs`).
    budget: Option<SendBudget>,
    /// The engine's latest `now`, for the gate.
    now: Timestamp,
}

impl Outbox {
    /// An outbox whose datagrams to clients pass `validation` and, if given, `budget`.
    pub(super) fn new(validation: SourceValidation, budget: Option<SendBudget>) -> Self {
        Outbox {
            queue: VecDeque::new(),
            bytes: Vec::new(),
            read: 0,
            scratch: Vec::new(),
            validation,
            budget,
            now: Timestamp::ZERO,
        }
    }

    pub(super) fn validation(&self) -> &SourceValidation {
        &self.validation
    }

    pub(super) fn validation_mut(&mut self) -> &mut SourceValidation {
        &mut self.validation
    }

    /// A datagram of `len` bytes came from client `from` (its allowance grows).
    pub(super) fn received(&mut self, now: Timestamp, from: SocketAddr, len: usize) {
        if !is_local_client(&from) {
            self.validation.received(now, from, len);
        }
    }

    /// Whether client `to` has proven its address (an in-process client needs not).
    pub(super) fn proven(&self, to: SocketAddr) -> bool {
        is_local_client(&to) || self.validation.proven(self.now, to)
    }

    /// Whether `len` bytes may go to client `to` now without a proof of its address.
    pub(super) fn fits(&self, to: SocketAddr, len: usize) -> bool {
        is_local_client(&to) || self.validation.fits(self.now, to, len)
    }

    /// The engine's clock moved to `now` (it never goes back).
    pub(super) fn clock(&mut self, now: Timestamp) {
        self.now = self.now.max(now);
    }

    /// The budget, for its counters.
    pub(super) fn budget(&self) -> Option<&SendBudget> {
        self.budget.as_ref()
    }

    /// Queues `payload` for `to`, unless `to` is a client the gate holds it from (then it is
    /// counted there). Returns whether it was queued.
    pub(super) fn push(&mut self, to: Destination, payload: &[u8]) -> bool {
        self.push_gated(to, payload, None, true)
    }

    /// Queues an answer the proxy made itself for `to`: within an unproven client's
    /// allowance like anything else, but not charged to the opt-in send rate, whose refusals
    /// (5.03 with Max-Age) are such answers, one per request the client sends.
    pub(super) fn push_local(&mut self, to: Destination, payload: &[u8]) -> bool {
        self.push_gated(to, payload, None, false)
    }

    /// Queues a CON of exchange `key` for `to`: past an unproven client's allowance it may
    /// go as the one CON that asks for the proof, or waits for it (`validation.rs`).
    pub(super) fn push_con(&mut self, to: Destination, payload: &[u8], key: ExchangeKey) -> bool {
        self.push_gated(to, payload, Some(key), true)
    }

    fn push_gated(
        &mut self,
        to: Destination,
        payload: &[u8],
        con: Option<ExchangeKey>,
        rated: bool,
    ) -> bool {
        if let Destination::Client(addr) = to {
            if !self.admits(addr, payload.len(), con, rated) {
                return false;
            }
        }
        self.bytes.extend_from_slice(payload);
        self.queue.push_back((to, payload.len()));
        true
    }

    /// Whether `len` more bytes may go to client `addr`: within its allowance (or as its
    /// probe) and, if `rated`, its rate, unless it is an in-process client, which no spoofer
    /// can be (`local.rs`).
    fn admits(
        &mut self,
        addr: SocketAddr,
        len: usize,
        con: Option<ExchangeKey>,
        rated: bool,
    ) -> bool {
        if is_local_client(&addr) {
            return true;
        }
        let now = self.now;
        if self.validation.admit(now, addr, len, con) == Verdict::Withhold {
            return false;
        }
        let budget = self.budget.as_mut().filter(|_| rated);
        budget.is_none_or(|b| b.admit(now, addr, len))
    }

    /// Queues what `encode` writes (into a cleared buffer, as the CoAP encoders do) for `to`;
    /// whether it was queued, as [`push`](Self::push).
    pub(super) fn push_encoded(
        &mut self,
        to: Destination,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> bool {
        let mut scratch = std::mem::take(&mut self.scratch);
        encode(&mut scratch);
        let queued = self.push(to, &scratch);
        self.scratch = scratch;
        queued
    }

    /// Hands the oldest datagram and where it goes to `send`, then drops it from the queue.
    pub(super) fn pop_with<R>(&mut self, send: impl FnOnce(Destination, &[u8]) -> R) -> Option<R> {
        let (to, len) = self.queue.pop_front()?;
        let sent = send(to, &self.bytes[self.read..self.read + len]);
        self.read += len;
        if self.queue.is_empty() {
            self.bytes.clear();
            self.read = 0;
        }
        Some(sent)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagrams_come_out_in_order_and_whole() {
        let hash = super::super::keyed_hash::KeyedState::new([1, 2]);
        let key = crate::coap::echo::EchoKey::new([3, 4]);
        let mut out = Outbox::new(SourceValidation::new(key, &hash), None);
        let from: SocketAddr = "127.0.0.1:1".parse().unwrap();
        out.received(Timestamp::ZERO, from, 100);
        let a = Destination::Client(from);
        out.push(a, b"first");
        out.push_encoded(a, |b| {
            b.clear();
            b.extend_from_slice(b"second")
        });
        let take = |out: &mut Outbox| out.pop_with(|to, b| (to, b.to_vec()));
        assert_eq!(take(&mut out), Some((a, b"first".to_vec())));
        out.push(a, b"third");
        assert_eq!(take(&mut out), Some((a, b"second".to_vec())));
        assert_eq!(take(&mut out), Some((a, b"third".to_vec())));
        assert_eq!((out.len(), take(&mut out)), (0, None));
    }
}
