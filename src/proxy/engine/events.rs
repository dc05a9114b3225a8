//! What the engine has to say: diagnostics are events, not log lines. The core stays pure (it
//! logs nothing), and the driver decides what to print, at which level and how often: a
//! failure that repeats under load must cost one line per interval, not one per request.

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::coap::{Code, FormatError};

use super::endpoints::EndpointId;
use super::peer::Peer;

/// Something worth knowing that happened in the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProxyEvent {
    /// The upstream leg of a request failed: the client got `code` (5.02 or 5.04).
    GaveUp {
        /// The upstream that failed it.
        upstream: SocketAddr,
        /// Whose request it was.
        client: Peer,
        /// Transmissions upstream (1 = only the first).
        attempts: u32,
        /// 5.02 Bad Gateway or 5.04 Gateway Timeout.
        code: Code,
        /// Why, in a few words.
        why: &'static str,
    },
    /// A request got 5.03 for want of a Message ID towards `upstream`: every endpoint the bound
    /// allows had its IDs reserved (`at_bound`), or no endpoint socket was open.
    NoMessageId {
        /// The upstream.
        upstream: SocketAddr,
        /// The endpoint bound was reached (otherwise a socket could not be opened).
        at_bound: bool,
    },
    /// The answer cache evicted an answer its client could still retransmit for: a
    /// retransmission would now be forwarded again. The cache is too small for the rate.
    EarlyEviction,
    /// A client never acknowledged a confirmable answer (RFC 7252 §4.2: given up after
    /// MAX_RETRANSMIT).
    ClientNeverAcked {
        /// The client.
        client: Peer,
        /// The answer's Message ID.
        mid: u16,
    },
    /// An observation got no notification for too long and ended (RFC 7641 §3.3.1).
    ObservationStale {
        /// The observer.
        client: Peer,
    },
    /// An observer went: the observation ended because of the client, not the upstream
    /// (RFC 7641 §3.6, §4.5); the upstream's next notification gets an RST.
    ObserverGone {
        /// The observer.
        client: Peer,
        /// How the proxy learnt it.
        why: ObserverLoss,
    },
    /// The observation limit was reached: a registration's answer was relayed without its
    /// Observe option, so the client knows it is not registered.
    ObservationLimit {
        /// Whose registration it was.
        client: Peer,
    },
    /// The client's source held its share of the observations
    /// (`--max-observations-per-source`): its registration's answer was relayed without
    /// Observe, as at the limit.
    ObservationShare {
        /// Whose registration it was.
        client: Peer,
    },
    /// A malformed datagram arrived (it was counted, and RST if confirmable).
    Malformed {
        /// Where it came from.
        from: Source,
        /// The rule it broke.
        error: FormatError,
    },
}

/// How the proxy learns that an observer has gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObserverLoss {
    /// A CON notification was never acknowledged, after all its retransmissions (§4.5).
    NeverAcked,
    /// The client answered a notification with RST (§3.6).
    Reset,
    /// ICMP said nobody listens at the client's address (RFC 7252 §4.2 lets that count as
    /// a rejection).
    Unreachable,
}

/// Where a datagram came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A client, on the client-facing socket.
    Client(Peer),
    /// An upstream, on one of the proxy's endpoints towards it.
    Upstream(EndpointId),
}

/// Events waiting for the driver: at most [`Events::CAP`]; past that they are dropped and
/// counted, so a peer cannot grow the queue however the driver lags.
#[derive(Debug, Default)]
pub(super) struct Events {
    queue: VecDeque<ProxyEvent>,
    dropped: u64,
}

impl Events {
    const CAP: usize = 1024;

    pub(super) fn push(&mut self, event: ProxyEvent) {
        if self.queue.len() < Self::CAP {
            self.queue.push_back(event);
        } else {
            self.dropped += 1;
        }
    }

    pub(super) fn pop(&mut self) -> Option<ProxyEvent> {
        self.queue.pop_front()
    }

    /// Events dropped because the queue was full.
    pub(super) fn dropped(&self) -> u64 {
        self.dropped
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
    fn a_full_queue_drops_and_counts() {
        let mut events = Events::default();
        for _ in 0..Events::CAP + 5 {
            events.push(ProxyEvent::EarlyEviction);
        }
        assert_eq!((events.len(), events.dropped()), (Events::CAP, 5));
        assert_eq!(events.pop(), Some(ProxyEvent::EarlyEviction));
    }
}
