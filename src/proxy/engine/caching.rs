//! The engine's side of the response cache (`cache/`; RFC 7252 §5.6, §5.9): a GET or FETCH
//! is answered from it while its entry is fresh, forwarded with the stored ETag once stale
//! (§5.6.2), and its upstream answer stored; a successful unsafe request makes the entries of
//! its resource stale (§5.9.1), and a 2.01 also those at its Location (§5.10.7).
//!
//! The key is taken from the request as it would go upstream (Proxy-Uri decomposed into
//! Uri-* options, RFC 7252 §5.7.2) plus the upstream it goes to, so the same resource asked
//! for with a Proxy-Uri or with Uri-* options is one entry, and two allowed targets never
//! share one.

use crate::coap::option::{decode_uint, ETAG, OBSERVE, URI_HOST, URI_PORT};
use crate::coap::{Code, Message, MessageBuilder, MessageType};
use crate::time::Timestamp;

use super::cache::{Bypass, CacheKey, Lookup, Resource, ResponseCache};
use super::cache_use::{carries_etag, CacheUse, Keyed};
use super::fanout::{Fanout, GroupAt};

/// What the cache decided for a new request.
pub(super) enum Decision {
    /// A fresh hit, encoded into the buffer given: it answers the request.
    Hit,
    /// A registration for a resource that `GroupAt` observes, whose representation (encoded
    /// into the buffer given) is fresh: the registration joins the group (`fanout.rs`).
    Join(GroupAt),
    /// Forward it, doing this with its answer.
    Forward(Option<Box<CacheUse>>),
}

/// The response cache and the observe groups that share its entries: what requests and
/// notifications share across clients.
pub(super) struct Sharing {
    cache: ResponseCache,
    fanout: Fanout,
}

impl Sharing {
    pub(super) fn new(cache: ResponseCache, fanout: Fanout) -> Self {
        Sharing { cache, fanout }
    }

    /// Whether the cache is on (`--cache-size`): without it nothing is shared.
    #[inline]
    pub(super) fn is_on(&self) -> bool {
        self.cache.is_on()
    }

    pub(super) fn cache(&self) -> &ResponseCache {
        &self.cache
    }

    pub(super) fn fanout(&self) -> &Fanout {
        &self.fanout
    }

    pub(super) fn fanout_mut(&mut self) -> &mut Fanout {
        &mut self.fanout
    }

    /// A notification for a group's registration is the newest representation of its
    /// resource, fresh for its Max-Age (RFC 7641 §3.3). (One the cache may not keep, an
    /// error say, still removes the older.)
    pub(super) fn store_notification(&mut self, now: Timestamp, key: &CacheKey, msg: &Message) {
        let _ = self.cache.store(now, key, None, msg);
    }

    /// Looks a new request up in the cache. `canonical` is the request as it would go to
    /// `upstream` (with any MID and token): what the key is made of. A hit or a group's
    /// representation is encoded into `out`; a NON request's hit goes with `non_mid()`.
    /// `room_to_observe`: whether one more observation of this client fits, in the table
    /// and in its source's share (`observation_shares.rs`).
    #[inline]
    pub(super) fn consult(
        &mut self,
        now: Timestamp,
        msg: &Message,
        (upstream, canonical): (u16, &Message),
        (out, non_mid): (&mut Vec<u8>, impl FnOnce() -> u16),
        room_to_observe: bool,
    ) -> Decision {
        if !self.cache.is_on() {
            return Decision::Forward(None);
        }
        let target = upstream.to_be_bytes();
        let keyed = match CacheKey::for_request(&target, canonical) {
            Ok((key, block2)) => Keyed { key, block2 },
            Err(Bypass::Method(code)) if is_unsafe(code) => {
                return Decision::Forward(Some(Box::new(invalidation(target, canonical))));
            }
            Err(_) => return Decision::Forward(None),
        };
        if msg.option(OBSERVE).is_some() {
            return self.consult_for_observer(now, msg, keyed, out, room_to_observe);
        }
        let con = msg.msg_type() == MessageType::Con;
        let answered = match self.cache.lookup(now, &keyed.key, keyed.block2) {
            // Its own ETags, none of them the entry's: the origin decides (§5.10.6.2).
            Lookup::Fresh(hit) if msg.option(ETAG).is_some() && !hit.client_etag_matches(msg) => {
                false
            }
            Lookup::Fresh(hit) => {
                let (ty, mid) = match con {
                    true => (MessageType::Ack, msg.message_id()),
                    false => (MessageType::Non, non_mid()),
                };
                let encoded = match hit.client_etag_matches(msg) {
                    true => hit.encode_valid(out, ty, mid, msg.token()),
                    false => hit.encode(out, ty, mid, msg.token()),
                };
                encoded.is_ok()
            }
            Lookup::Stale { etag, stale } => {
                let client_has_it = carries_etag(msg, etag);
                let revalidate = CacheUse::Revalidate {
                    keyed,
                    etag,
                    client_has_it,
                    stale,
                };
                return Decision::Forward(Some(Box::new(revalidate)));
            }
            Lookup::Miss => false,
        };
        match answered {
            true => Decision::Hit,
            false => Decision::Forward(Some(Box::new(CacheUse::Store(keyed)))),
        }
    }

    /// An Observe request: a registration joins the group observing its resource if there is
    /// one and its representation is fresh (`fanout.rs`); otherwise, and for a
    /// deregistration, it goes upstream, and its answer updates the entry.
    fn consult_for_observer(
        &mut self,
        now: Timestamp,
        msg: &Message,
        keyed: Keyed,
        out: &mut Vec<u8>,
        room: bool,
    ) -> Decision {
        let registers = msg.option(OBSERVE).and_then(|v| decode_uint(v).ok()) == Some(0);
        let group = self.fanout.for_key(keyed.key.as_bytes());
        let plain = msg.option(ETAG).is_none() && keyed.block2.is_none();
        if let (true, true, true, Some(group)) = (registers, room, plain, group) {
            let fresh = match self.cache.lookup(now, &keyed.key, None) {
                Lookup::Fresh(hit) => hit.encode(out, MessageType::Ack, 0, &[]).is_ok(),
                _ => false,
            };
            if fresh {
                return Decision::Join(group);
            }
        }
        Decision::Forward(Some(Box::new(CacheUse::Store(keyed))))
    }

    /// What the cache makes of an upstream answer to a request that used it. Gives the
    /// answer the client gets instead, encoded, when it is not `msg`: the refreshed stored
    /// response after a 2.03 for the proxy's own ETag.
    pub(super) fn answer(
        &mut self,
        now: Timestamp,
        cache: CacheUse,
        msg: &Message,
    ) -> Option<Vec<u8>> {
        match cache {
            CacheUse::Store(Keyed { key, block2 }) => {
                let _ = self.cache.store(now, &key, block2, msg);
                None
            }
            CacheUse::Revalidate {
                keyed: Keyed { key, block2 },
                etag,
                client_has_it,
                mut stale,
            } => {
                if !carries_etag(msg, etag) || msg.code() != Code::VALID {
                    // Any other answer, a 2.03 for one of the client's own ETags included,
                    // replaces the entry: it is the newer (§5.6.2).
                    let _ = self.cache.store(now, &key, block2, msg);
                    return None;
                }
                let refreshed = self.cache.revalidated(now, &key, block2, msg);
                if client_has_it {
                    // The client asked with this ETag too: the 2.03 goes to it as is.
                    return None;
                }
                let mut out = Vec::new();
                // The entry may have gone while the request was upstream (evicted, or replaced
                // by a newer response): the 2.03 still validates the copy this request took.
                let hit = refreshed.or_else(|| stale.validated_alone(now, msg))?;
                let encoded = hit.encode(&mut out, MessageType::Ack, 0, msg.token());
                encoded.ok().map(|()| out)
            }
            CacheUse::Invalidate {
                target,
                resource,
                authority,
            } => {
                self.invalidate(&target, &resource, &authority, msg);
                None
            }
        }
    }

    /// A successful unsafe request's answer makes what the cache holds of its resource, and
    /// of a 2.01's Location, stale (RFC 7252 §5.9.1.1/2/4, §5.10.7; RFC 8132 §3).
    fn invalidate(&mut self, target: &[u8], resource: &Resource, authority: &[u8], msg: &Message) {
        if !matches!(msg.code(), Code::CREATED | Code::DELETED | Code::CHANGED) {
            return;
        }
        self.cache.invalidate_resource(resource);
        if msg.code() != Code::CREATED {
            return;
        }
        let location = Message::parse(authority)
            .ok()
            .and_then(|request| Resource::of_location(target, &request, msg));
        if let Some(location) = location {
            self.cache.invalidate_resource(&location);
        }
    }
}

/// The methods whose success changes their resource (RFC 7252 §5.8; RFC 8132 §3).
fn is_unsafe(code: Code) -> bool {
    matches!(
        code,
        Code::POST | Code::PUT | Code::DELETE | Code::PATCH | Code::IPATCH
    )
}

/// What an unsafe request's answer will invalidate.
fn invalidation(target: [u8; 2], canonical: &Message) -> CacheUse {
    let mut authority = Vec::new();
    let mut b = MessageBuilder::new(&mut authority, MessageType::Con, Code::GET, 0, &[]);
    for (number, value) in canonical.options() {
        if matches!(number, URI_HOST | URI_PORT) {
            b.option(number, value);
        }
    }
    // Options from a parsed message re-encode.
    let _ = b.finish();
    CacheUse::Invalidate {
        target,
        resource: Resource::of_request(&target, canonical),
        authority: authority.into_boxed_slice(),
    }
}
