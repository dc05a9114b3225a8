//! Observe aggregation (RFC 7641 §3.1, §5): with the response cache on, the clients observing
//! one resource share one upstream registration. Each observer is an exchange of its own, with
//! its token, Message IDs, CON/NON cadence and delivery state (the Observe relay in `upstream_leg.rs`); a group joins
//! them to the registration: the upstream's (endpoint, token) its notifications come with, and
//! the cache key of the resource.
//!
//! A registration that finds a group for its key, and a fresh cached representation, joins it
//! at once: its answer is that representation, with the group's latest Observe value, and
//! nothing goes upstream. (With no fresh representation it registers upstream on its own, as
//! without the cache: joining would leave it waiting for a notification that may be long in
//! coming.) Each notification updates the cache entry and is relayed to every member. A member
//! that leaves (deregistration, RST, an unacknowledged CON, ICMP) leaves the group; the first
//! one's exchange may end while the others stay, because the group, not that exchange, now
//! owns the registration. When the last member goes the group goes, and the upstream's next
//! notification finds neither and gets an RST, which cancels its registration (§3.6).

use slab::Slab;

use super::cache::CacheKey;
use super::endpoints::{EndpointId, UpstreamId};
use super::exchange::{CoapToken, Exchange, ExchangeKey, GroupId};
use super::keyed_hash::{KeyedMap, KeyedState};
use super::table::Exchanges;

/// The observers of one resource and the one upstream registration they share.
#[derive(Debug)]
struct Group {
    key: CacheKey,
    registration: (EndpointId, CoapToken),
    upstream: UpstreamId,
    members: Vec<ExchangeKey>,
}

/// Every group, by cache key and by the upstream registration's (endpoint, token).
#[derive(Debug)]
pub(super) struct Fanout {
    groups: Slab<Group>,
    by_key: KeyedMap<Box<[u8]>, usize>,
    by_registration: KeyedMap<(EndpointId, CoapToken), usize>,
}

/// A group found for a resource: its id, and the upstream and endpoint of its registration.
pub(super) type GroupAt = (GroupId, UpstreamId, EndpointId);

impl Fanout {
    pub(super) fn new(hash: &KeyedState) -> Self {
        Fanout {
            groups: Slab::new(),
            by_key: hash.map(),
            by_registration: hash.map(),
        }
    }

    /// The group observing the resource with cache key `key`: its id, upstream and endpoint.
    pub(super) fn for_key(&self, key: &[u8]) -> Option<GroupAt> {
        let &g = self.by_key.get(key)?;
        let group = self.groups.get(g)?;
        Some((GroupId(g as u32), group.upstream, group.registration.0))
    }

    /// The group whose registration a notification with `token` on `endpoint` belongs to,
    /// with its members (a copy: relaying may end them) and its cache key.
    pub(super) fn for_registration(
        &self,
        endpoint: EndpointId,
        token: &[u8],
    ) -> Option<(Vec<ExchangeKey>, CacheKey)> {
        let token = CoapToken::new(token)?;
        let &g = self.by_registration.get(&(endpoint, token))?;
        let group = self.groups.get(g)?;
        Some((group.members.clone(), group.key.clone()))
    }

    /// Whether `token` on `endpoint` is a group's registration.
    /// (No group, no hashing: the common case, on every separate response.)
    pub(super) fn has_registration(&self, endpoint: EndpointId, token: &[u8]) -> bool {
        let registered = |t| self.by_registration.contains_key(&(endpoint, t));
        !self.groups.is_empty() && CoapToken::new(token).is_some_and(registered)
    }

    /// Founds the group of `cache_key` with `key`, an exchange that observes it through its
    /// own registration (`x`'s endpoint and token), unless one exists (it registered on its
    /// own, see the module docs). Returns the new group's id.
    pub(super) fn found(
        &mut self,
        key: ExchangeKey,
        x: &Exchange,
        cache_key: CacheKey,
    ) -> Option<GroupId> {
        if self.by_key.contains_key(cache_key.as_bytes()) {
            return None;
        }
        let registration = (x.endpoint, x.upstream_token);
        let by_key = Box::from(cache_key.as_bytes());
        let group = Group {
            key: cache_key,
            registration,
            upstream: x.upstream,
            members: vec![key],
        };
        let g = self.groups.insert(group);
        self.by_key.insert(by_key, g);
        self.by_registration.insert(registration, g);
        Some(GroupId(g as u32))
    }

    /// `key` joins `group`.
    pub(super) fn join(&mut self, GroupId(g): GroupId, key: ExchangeKey) {
        if let Some(group) = self.groups.get_mut(g as usize) {
            group.members.push(key);
        }
    }

    /// Member `key` leaves `group`, and the group goes with its last.
    pub(super) fn leave(&mut self, GroupId(g): GroupId, key: ExchangeKey) {
        let Some(group) = self.groups.get_mut(g as usize) else {
            return;
        };
        group.members.retain(|&m| m != key);
        if group.members.is_empty() {
            let group = self.groups.remove(g as usize);
            self.by_key.remove(group.key.as_bytes());
            self.by_registration.remove(&group.registration);
        }
    }

    /// The latest Observe value a member of `group` was given, for a new member's first
    /// answer: later notifications are newer than it (RFC 7641 §3.4).
    pub(super) fn latest_seq(&self, GroupId(g): GroupId, exchanges: &Exchanges) -> u32 {
        let members = self.groups.get(g as usize).map(|g| &g.members[..]);
        (members.unwrap_or_default().iter())
            .filter_map(|&m| Some(exchanges.get(m)?.state.relay()?.last_notification))
            .max_by_key(|&(_, at)| at)
            .map_or(0, |(seq, _)| seq)
    }

    /// Groups alive.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.groups.len()
    }
}
