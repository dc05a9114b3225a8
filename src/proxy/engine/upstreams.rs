//! The upstream side's state: each upstream's address and requests in flight, its endpoints
//! (sockets and their Message IDs, `endpoints.rs`), and which exchange an upstream ACK, RST or
//! piggybacked answer belongs to (RFC 7252 §4.4: the Message ID, per endpoint).

use std::net::SocketAddr;
use std::time::Duration;

use crate::time::Timestamp;

use super::endpoints::{EndpointId, Endpoints, Upstream, UpstreamId, UpstreamStats};
use super::exchange::ExchangeKey;
use super::index::Index;
use super::keyed_hash::KeyedState;

/// The upstreams, their endpoints, and the exchanges by upstream Message ID.
pub(super) struct Upstreams {
    upstreams: Vec<Upstream>,
    endpoints: Endpoints,
    /// Piggybacked answers, empty ACKs and RSTs from upstream: (endpoint, our MID).
    by_mid: Index<(EndpointId, u16), ExchangeKey>,
}

impl Upstreams {
    /// The upstreams at `targets`, each with endpoints bounded by `max_endpoints`.
    pub(super) fn new(
        targets: Vec<SocketAddr>,
        (lifetime, max_endpoints): (Duration, usize),
        seed: u64,
        hash: &KeyedState,
    ) -> Self {
        Upstreams {
            endpoints: Endpoints::new(&targets, lifetime, max_endpoints, seed),
            upstreams: (targets.into_iter())
                .map(|addr| Upstream {
                    addr,
                    inflight: 0,
                    reliable: false,
                })
                .collect(),
            by_mid: Index::new(hash.clone()),
        }
    }

    /// The address of upstream `up`.
    pub(super) fn addr(&self, up: UpstreamId) -> SocketAddr {
        self.upstreams[usize::from(up)].addr
    }

    /// Marks the upstream at `addr` as reached over a reliable transport: no retransmissions.
    pub(super) fn set_reliable(&mut self, addr: SocketAddr) {
        for u in self.upstreams.iter_mut().filter(|u| u.addr == addr) {
            u.reliable = true;
        }
    }

    /// Whether upstream `up` is reached over a reliable transport.
    pub(super) fn is_reliable(&self, up: UpstreamId) -> bool {
        self.upstreams[usize::from(up)].reliable
    }

    /// Requests in flight to upstream `up`.
    pub(super) fn inflight(&self, up: UpstreamId) -> usize {
        self.upstreams[usize::from(up)].inflight
    }

    /// The exchange whose request went from `endpoint` with `mid`, while its leg is open.
    #[inline]
    pub(super) fn exchange_for(&self, endpoint: EndpointId, mid: u16) -> Option<ExchangeKey> {
        self.by_mid.get(&(endpoint, mid)).copied()
    }

    /// Exchange `key` sends its request to `up` from `endpoint` with `mid`, until
    /// [`leg_closed`](Self::leg_closed).
    pub(super) fn leg_opened(
        &mut self,
        (up, endpoint): (UpstreamId, EndpointId),
        mid: u16,
        key: ExchangeKey,
    ) {
        self.by_mid.insert((endpoint, mid), key);
        self.upstreams[usize::from(up)].inflight += 1;
        self.endpoints.acquire(endpoint);
    }

    /// The leg [`leg_opened`](Self::leg_opened) opened is closed: its Message ID no longer
    /// maps, and its endpoint is released (its MID stays reserved the exchange lifetime).
    pub(super) fn leg_closed(
        &mut self,
        now: Timestamp,
        (up, endpoint): (UpstreamId, EndpointId),
        mid: u16,
    ) {
        self.by_mid.remove(&(endpoint, mid));
        self.upstreams[usize::from(up)].inflight -= 1;
        self.endpoints.release(now, endpoint);
    }

    pub(super) fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    pub(super) fn endpoints_mut(&mut self) -> &mut Endpoints {
        &mut self.endpoints
    }

    /// Each upstream's endpoints and Message IDs at `now` (for metrics).
    pub(super) fn stats(&self, now: Timestamp) -> Vec<UpstreamStats> {
        (self.upstreams.iter().enumerate())
            .map(|(i, u)| UpstreamStats {
                addr: u.addr,
                endpoints: self.endpoints.count(i as UpstreamId),
                mids_reserved: self.endpoints.reserved(now, i as UpstreamId),
                in_flight: u.inflight,
            })
            .collect()
    }

    /// Entries of the Message ID index, for tests.
    #[cfg(test)]
    pub(super) fn mids_mapped(&self) -> usize {
        self.by_mid.len()
    }
}
