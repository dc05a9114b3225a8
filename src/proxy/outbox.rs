//! Datagrams waiting for the driver, back to back in one buffer: queuing one costs a copy,
//! not an allocation, and the driver sends each straight from there.

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::time::Timestamp;

use super::budget::SendBudget;
use super::endpoints::EndpointId;
use super::local::is_local_client;
use super::validation::SourceValidation;

/// Which socket a datagram leaves through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    /// The client-facing socket, to this client.
    Client(SocketAddr),
    /// This upstream endpoint's socket (connected to its upstream).
    Upstream(EndpointId),
}

/// The engine's queue of datagrams to send.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    /// Each datagram's destination and length, oldest first.
    queue: VecDeque<(Destination, usize)>,
    /// Their bytes, in the same order; `read` of them have been taken.
    bytes: Vec<u8>,
    read: usize,
    /// Where [`push_encoded`](Self::push_encoded) lets an encoder write.
    scratch: Vec<u8>,
    /// What each client may still be sent (`budget.rs`); none in unit tests of the queue.
    budget: Option<SendBudget>,
    /// `--validate-sources`: what unvalidated sources may be sent (`validation.rs`).
    validation: Option<SourceValidation>,
    /// The engine's latest `now`, for the budget.
    now: Timestamp,
}

impl Outbox {
    /// An outbox whose datagrams to clients are within `budget`.
    pub(super) fn with_budget(budget: SendBudget) -> Self {
        Outbox {
            budget: Some(budget),
            ..Outbox::default()
        }
    }

    /// Turns on the 3x limit for unvalidated sources.
    pub(super) fn validate_sources(&mut self, v: SourceValidation) {
        self.validation = Some(v);
    }

    pub(super) fn validation(&self) -> Option<&SourceValidation> {
        self.validation.as_ref()
    }

    pub(super) fn validation_mut(&mut self) -> Option<&mut SourceValidation> {
        self.validation.as_mut()
    }

    /// A datagram of `len` bytes came from client `from` (its allowance grows).
    pub(super) fn received(&mut self, now: Timestamp, from: SocketAddr, len: usize) {
        if let Some(v) = self.validation.as_mut() {
            v.received(now, from, len);
        }
    }

    /// The engine's clock moved to `now` (it never goes back).
    pub(super) fn clock(&mut self, now: Timestamp) {
        self.now = self.now.max(now);
    }

    /// The budget, for its counters.
    pub(super) fn budget(&self) -> Option<&SendBudget> {
        self.budget.as_ref()
    }

    /// Queues `payload` for `to`, unless `to` is a client over its budget (then it is
    /// dropped and counted there).
    pub(super) fn push(&mut self, to: Destination, payload: &[u8]) {
        if let Destination::Client(addr) = to {
            if !self.admits(addr, payload.len()) {
                return;
            }
        }
        self.bytes.extend_from_slice(payload);
        self.queue.push_back((to, payload.len()));
    }

    /// Whether `len` more bytes may go to client `addr`: within its validation allowance and
    /// its budget, unless it is an in-process client, which no spoofer can be (`local.rs`).
    fn admits(&mut self, addr: SocketAddr, len: usize) -> bool {
        if is_local_client(&addr) {
            return true;
        }
        if let Some(v) = self.validation.as_mut() {
            if !v.may_send(self.now, addr, len) {
                return false;
            }
        }
        let now = self.now;
        self.budget.as_mut().is_none_or(|b| b.admit(now, addr, len))
    }

    /// Queues what `encode` writes (into a cleared buffer, as the CoAP encoders do) for `to`.
    pub(super) fn push_encoded(&mut self, to: Destination, encode: impl FnOnce(&mut Vec<u8>)) {
        let mut scratch = std::mem::take(&mut self.scratch);
        encode(&mut scratch);
        self.push(to, &scratch);
        self.scratch = scratch;
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
        let mut out = Outbox::default();
        let a = Destination::Client("127.0.0.1:1".parse().unwrap());
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
