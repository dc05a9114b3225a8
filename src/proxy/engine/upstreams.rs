//! The upstream side's state: each upstream's address and requests in flight, its endpoints
//! (sockets and their Message IDs, `endpoints.rs`), and which exchange an upstream ACK, RST or
//! piggybacked answer belongs to (RFC 7252 §4.4: the Message ID, per endpoint), and the
//! registrations a reliable upstream holds, for their deregistration (RFC 7641 §3.6).

use std::net::SocketAddr;
use std::time::Duration;

use crate::time::Timestamp;

use super::endpoints::{EndpointId, Endpoints, Upstream, UpstreamId, UpstreamStats};
use super::exchange::{CoapToken, ExchangeKey};
use super::index::Index;
use super::keyed_hash::{KeyedMap, KeyedState};

/// Registrations kept for their deregistration at most: past this, a new one on a reliable
/// upstream is not kept, and ends only with its connection (a bound on what a flood of
/// observations can make the proxy hold, each a request's copy).
pub(super) const MAX_REGISTRATIONS: usize = 4096;

/// The upstreams, their endpoints, and the exchanges by upstream Message ID.
pub(super) struct Upstreams {
    upstreams: Vec<Upstream>,
    endpoints: Endpoints,
    /// Piggybacked answers, empty ACKs and RSTs from upstream: (endpoint, our MID).
    by_mid: Index<(EndpointId, u16), ExchangeKey>,
    /// A reliable upstream's observations (RFC 8323 has no RST to cancel one: a GET
    /// deregisters it, §7.4): each
    /// registration as it went, by its endpoint and token, from its answer until a response
    /// for it finds no observer (it is then deregistered), the upstream ends it, or its
    /// connection closes.
    registrations: KeyedMap<(EndpointId, CoapToken), Box<[u8]>>,
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
            registrations: hash.map(),
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

    /// Whether endpoint `endpoint` leads to an upstream reached over a reliable transport:
    /// what comes from there has no message layer (RFC 8323 §2.2, §3.2).
    pub(super) fn endpoint_is_reliable(&self, endpoint: EndpointId) -> bool {
        (self.endpoints.upstream_of(endpoint)).is_some_and(|up| self.is_reliable(up))
    }

    /// Keeps `request`, a registration that endpoint `endpoint`'s upstream (a reliable one)
    /// accepted, until [`take_registration`](Self::take_registration); not past
    /// [`MAX_REGISTRATIONS`].
    pub(super) fn keep_registration(&mut self, endpoint: EndpointId, request: &[u8]) {
        let Ok(msg) = crate::coap::Message::parse(request) else {
            return;
        };
        let Some(token) = CoapToken::new(msg.token()) else {
            return;
        };
        if self.registrations.len() < MAX_REGISTRATIONS {
            self.registrations.insert((endpoint, token), request.into());
        }
    }

    /// The registration with `token` on `endpoint`, forgotten here: it is being
    /// deregistered, or the upstream ended it.
    pub(super) fn take_registration(
        &mut self,
        endpoint: EndpointId,
        token: &[u8],
    ) -> Option<Box<[u8]>> {
        let token = CoapToken::new(token)?;
        if self.registrations.is_empty() {
            return None;
        }
        self.registrations.remove(&(endpoint, token))
    }

    /// Endpoint `endpoint`'s connection closed: its upstream holds none of its
    /// registrations any more (the server drops a connection's observers when it closes, RFC
    /// 8323 §7.4).
    pub(super) fn forget_registrations(&mut self, endpoint: EndpointId) {
        self.registrations.retain(|(e, _), _| *e != endpoint);
    }

    /// Registrations kept for their deregistration, for tests.
    #[cfg(test)]
    pub(super) fn registrations_kept(&self) -> usize {
        self.registrations.len()
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
