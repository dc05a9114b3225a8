//! Datagrams waiting for the driver, back to back in one buffer: queuing one costs a copy,
//! not an allocation, and the driver sends each straight from there. What may be queued for
//! a client is decided before, in `gate.rs`.

use std::collections::VecDeque;

use super::endpoints::EndpointId;
use super::peer::Peer;

/// Which socket a datagram leaves through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    /// The client's transport, to this client.
    Client(Peer),
    /// This upstream endpoint's socket (connected to its upstream).
    Upstream(EndpointId),
}

/// A datagram to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Which socket sends it, and to whom.
    pub to: Destination,
    /// The encoded CoAP datagram.
    pub payload: Vec<u8>,
}

/// The engine's queue of datagrams to send.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    /// Each datagram's destination and length, oldest first.
    queue: VecDeque<(Destination, usize)>,
    /// Their bytes, in the same order; `read` of them have been taken.
    bytes: Vec<u8>,
    read: usize,
    /// A buffer an encoder writes a datagram into before it is queued.
    scratch: Vec<u8>,
}

impl Outbox {
    /// Queues `payload` for `to`.
    pub(super) fn push(&mut self, to: Destination, payload: &[u8]) {
        self.bytes.extend_from_slice(payload);
        self.queue.push_back((to, payload.len()));
    }

    /// The encode buffer, to give back with [`put_scratch`](Self::put_scratch).
    pub(super) fn take_scratch(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.scratch)
    }

    pub(super) fn put_scratch(&mut self, scratch: Vec<u8>) {
        self.scratch = scratch;
    }

    /// Hands the oldest datagram and where it goes to `send`, then drops it from the queue.
    #[inline]
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

    /// Bytes queued and not yet taken: what a stream connection's requests just added is
    /// the growth of this (`stream_listener.rs` bounds it by the connection's output).
    pub(super) fn queued_bytes(&self) -> usize {
        self.bytes.len() - self.read
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
        let a = Destination::Client(Peer::Udp("127.0.0.1:1".parse().unwrap()));
        out.push(a, b"first");
        out.push(a, b"second");
        let take = |out: &mut Outbox| out.pop_with(|to, b| (to, b.to_vec()));
        assert_eq!(take(&mut out), Some((a, b"first".to_vec())));
        out.push(a, b"third");
        assert_eq!(take(&mut out), Some((a, b"second".to_vec())));
        assert_eq!(take(&mut out), Some((a, b"third".to_vec())));
        assert_eq!((out.len(), take(&mut out)), (0, None));
    }
}
