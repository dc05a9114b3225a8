//! A build without the `cache` feature (README, "A minimal build") has no response cache and
//! no observe groups; this stands in for `cache/`, `cache_use.rs`, `caching.rs` and
//! `fanout.rs` (`mod.rs` names it after each), so that the engine keeps its calls: each
//! answers as a cache that is off does. The types only the cache makes values of have none
//! here, so the compiler knows the code that would use one never runs.

use crate::coap::Message;
use crate::time::Timestamp;

use super::endpoints::{EndpointId, UpstreamId};
use super::exchange::{Exchange, ExchangeKey, GroupId};
use super::keyed_hash::KeyedState;
use super::table::Exchanges;

/// What a forwarded exchange does with the cache: nothing, as no value of this type exists,
/// so an exchange's `Option<Box<CacheUse>>` is always `None`. It stands for the cache's keys
/// and ETags too, which no request has either.
#[derive(Debug)]
pub(super) enum CacheUse {}

/// A cache key: none exists.
pub(super) type CacheKey = CacheUse;

impl CacheUse {
    pub(super) fn stored_key(&self) -> Option<CacheKey> {
        match *self {}
    }

    pub(super) fn etag_to_add(&self) -> Option<CacheUse> {
        match *self {}
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        match *self {}
    }
}

/// What the cache decided for a new request: always to forward it.
#[allow(
    dead_code,
    reason = "the engine matches every decision of the cache; without it, only Forward is made"
)]
pub(super) enum Decision {
    Hit,
    Join(GroupAt),
    Forward(Option<Box<CacheUse>>),
}

/// A group found for a resource, as in `fanout.rs`.
pub(super) type GroupAt = (GroupId, UpstreamId, EndpointId);

/// The response cache, with nothing to hold.
pub(super) struct ResponseCache;

impl ResponseCache {
    pub(super) fn new(_budget: usize, _secrets: [u64; 2]) -> Self {
        ResponseCache
    }
}

/// The observe groups: there are none, so every observer has its own upstream registration.
pub(super) struct Fanout;

impl Fanout {
    pub(super) fn new(_: &KeyedState) -> Self {
        Fanout
    }

    pub(super) fn has_registration(&self, _: EndpointId, _: &[u8]) -> bool {
        false
    }

    pub(super) fn for_registration(
        &self,
        _: EndpointId,
        _: &[u8],
    ) -> Option<(Vec<ExchangeKey>, CacheKey)> {
        None
    }

    pub(super) fn found(&mut self, _: ExchangeKey, _: &Exchange, key: CacheKey) -> Option<GroupId> {
        match key {}
    }

    pub(super) fn join(&mut self, _: GroupId, _: ExchangeKey) {}

    pub(super) fn leave(&mut self, _: GroupId, _: ExchangeKey) {}

    pub(super) fn latest_seq(&self, _: GroupId, _: &Exchanges) -> u32 {
        0
    }
}

/// Nothing is shared across clients: every request is forwarded.
pub(super) struct Sharing(Fanout);

impl Sharing {
    pub(super) fn new(_: ResponseCache, fanout: Fanout) -> Self {
        Sharing(fanout)
    }

    #[inline]
    pub(super) fn is_on(&self) -> bool {
        false
    }

    pub(super) fn fanout(&self) -> &Fanout {
        &self.0
    }

    pub(super) fn fanout_mut(&mut self) -> &mut Fanout {
        &mut self.0
    }

    pub(super) fn store_notification(&mut self, _: Timestamp, key: &CacheKey, _: &Message) {
        match *key {}
    }

    #[inline]
    pub(super) fn consult(
        &mut self,
        _: Timestamp,
        _: &Message,
        _: (u16, &Message),
        _: (&mut Vec<u8>, impl FnOnce() -> u16),
        _: bool,
    ) -> Decision {
        Decision::Forward(None)
    }

    pub(super) fn answer(&mut self, _: Timestamp, cache: CacheUse, _: &Message) -> Option<Vec<u8>> {
        match cache {}
    }
}
