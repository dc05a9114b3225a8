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

use super::answer_cache::Replay;
use super::cache::{Bypass, CacheKey, CachedResponse, Etag, Lookup, Resource};
use super::clients::ClientSlot;
use super::endpoints::{EndpointId, UpstreamId};
use super::engine::{Destination, Proxy};
use super::exchange::{CoapToken, State};
use super::gate::Charge;
use super::peer::Peer;

/// What a forwarded exchange does with the cache once answered (`Exchange::cache`, boxed:
/// most exchanges have none).
#[derive(Debug)]
pub(super) enum CacheUse {
    /// A miss: the answer is stored under `key`, if it may be (`cache/entry.rs`).
    Store(Keyed),
    /// A stale entry is revalidated: the request went with its `etag` (§5.6.2). A 2.03
    /// naming it refreshes the entry, and the client gets the stored response, or the 2.03
    /// if it sent that ETag itself (`client_has_it`, §5.10.6.2).
    Revalidate {
        keyed: Keyed,
        etag: Etag,
        client_has_it: bool,
        /// The stale response, for a 2.03 that comes back after its entry went.
        stale: CachedResponse,
    },
    /// An unsafe request: success makes `resource` stale; a 2.01 also the resource its
    /// Location options name, on the request's authority (§5.9.1.1, §5.10.7).
    Invalidate {
        target: [u8; 2],
        resource: Resource,
        /// A message with only the request's Uri-Host and Uri-Port, for the Location's.
        authority: Box<[u8]>,
    },
}

/// A request's cache key and the block it asks for.
#[derive(Debug)]
pub(super) struct Keyed {
    key: CacheKey,
    block2: Option<super::cache::BlockRef>,
}

/// What consulting the cache decided for a new request.
pub(super) enum Consulted {
    /// Answered from the cache: nothing goes upstream.
    Answered,
    /// Forward it, doing this with its answer.
    Forward(Option<Box<CacheUse>>),
}

impl CacheUse {
    /// The key a registration's answer is stored under: its group's, once it observes.
    pub(super) fn stored_key(&self) -> Option<CacheKey> {
        match self {
            CacheUse::Store(Keyed { key, block2: None }) => Some(key.clone()),
            _ => None,
        }
    }

    /// The ETag a revalidation adds to the request upstream (none if the client's has it).
    pub(super) fn etag_to_add(&self) -> Option<Etag> {
        match self {
            CacheUse::Revalidate {
                etag,
                client_has_it: false,
                ..
            } => Some(*etag),
            _ => None,
        }
    }
}

impl Proxy {
    /// Looks a new request up in the cache. `canonical` is the request as it would go to
    /// `upstream` (with any MID and token): what the key is made of.
    pub(super) fn consult_cache(
        &mut self,
        now: Timestamp,
        (from, slot): (Peer, ClientSlot),
        msg: &Message,
        (upstream, canonical): (u16, &Message),
    ) -> Consulted {
        if !self.cache.is_on() {
            return Consulted::Forward(None);
        }
        let target = upstream.to_be_bytes();
        let keyed = match CacheKey::for_request(&target, canonical) {
            Ok((key, block2)) => Keyed { key, block2 },
            Err(Bypass::Method(code)) if is_unsafe(code) => {
                return Consulted::Forward(Some(Box::new(invalidation(target, canonical))));
            }
            Err(_) => return Consulted::Forward(None),
        };
        if msg.option(OBSERVE).is_some() {
            return self.consult_for_observer(now, (from, slot), msg, keyed);
        }
        let con = msg.msg_type() == MessageType::Con;
        let mut buf = std::mem::take(&mut self.scratch);
        let answered = match self.cache.lookup(now, &keyed.key, keyed.block2) {
            // Its own ETags, none of them the entry's: the origin decides (§5.10.6.2).
            Lookup::Fresh(hit) if msg.option(ETAG).is_some() && !hit.client_etag_matches(msg) => {
                false
            }
            Lookup::Fresh(hit) => {
                let (ty, mid) = match con {
                    true => (MessageType::Ack, msg.message_id()),
                    false => (MessageType::Non, self.clients.fresh_mid(slot)),
                };
                let encoded = match hit.client_etag_matches(msg) {
                    true => hit.encode_valid(&mut buf, ty, mid, msg.token()),
                    false => hit.encode(&mut buf, ty, mid, msg.token()),
                };
                encoded.is_ok()
            }
            Lookup::Stale { etag, stale } => {
                self.scratch = buf;
                let client_has_it = carries_etag(msg, etag);
                let revalidate = CacheUse::Revalidate {
                    keyed,
                    etag,
                    client_has_it,
                    stale,
                };
                return Consulted::Forward(Some(Box::new(revalidate)));
            }
            Lookup::Miss => false,
        };
        if answered {
            self.answer_from_cache(now, (from, slot), msg, &buf, upstream);
        }
        self.scratch = buf;
        match answered {
            true => Consulted::Answered,
            false => Consulted::Forward(Some(Box::new(CacheUse::Store(keyed)))),
        }
    }

    /// An Observe request: a registration joins the group observing its resource if there is
    /// one and its representation is fresh (`fanout.rs`); otherwise, and for a
    /// deregistration, it goes upstream, and its answer updates the entry.
    fn consult_for_observer(
        &mut self,
        now: Timestamp,
        client: (Peer, ClientSlot),
        msg: &Message,
        keyed: Keyed,
    ) -> Consulted {
        let registers = msg.option(OBSERVE).and_then(|v| decode_uint(v).ok()) == Some(0);
        let group = self.fanout.for_key(keyed.key.as_bytes());
        let room = self.usage.room_to_observe(&self.config.limits);
        let plain = msg.option(ETAG).is_none() && keyed.block2.is_none();
        if let (true, true, true, Some(group)) = (registers, room, plain, group) {
            let mut buf = Vec::new();
            let fresh = match self.cache.lookup(now, &keyed.key, None) {
                Lookup::Fresh(hit) => hit.encode(&mut buf, MessageType::Ack, 0, &[]).is_ok(),
                _ => false,
            };
            if fresh {
                self.join_group(now, client, msg, group, &buf);
                return Consulted::Answered;
            }
        }
        Consulted::Forward(Some(Box::new(CacheUse::Store(keyed))))
    }

    /// Sends a hit and keeps it for the request's retransmissions, like any answer the proxy
    /// gives without asking upstream (`Proxy::local_answers`): the same answer again, Max-Age
    /// and all (RFC 7252 §4.5), within the store's bounds in bytes. A hit the outbox did not
    /// queue (over the client's send rate) is not kept: a retransmission is a GET or FETCH
    /// answered from the cache afresh (`Proxy::keep_local_answer`).
    fn answer_from_cache(
        &mut self,
        now: Timestamp,
        (from, slot): (Peer, ClientSlot),
        msg: &Message,
        answer: &[u8],
        upstream: UpstreamId,
    ) {
        let token = CoapToken::new(msg.token()).expect("parse checked the token length");
        if !self.gate.fits(from, answer.len()) {
            return self.answer_hit_through_exchange(
                now,
                (from, slot),
                (token, msg),
                answer,
                upstream,
            );
        }
        // The upstream's answer, relayed from the cache: counted like one relayed at once.
        self.track_answer_code(Code(answer[1]));
        if !self
            .gate
            .send(Charge::Relayed, Destination::Client(from), answer)
        {
            return;
        }
        self.clients.take_ref(slot);
        let replay = match msg.msg_type() {
            MessageType::Con => Replay::Answer(answer),
            _ => Replay::Nothing,
        };
        self.keep_local_answer(now, (from, token, msg.message_id()), replay, slot);
    }

    /// A hit past an unproven client's allowance goes as a relayed answer would: held while
    /// the client is asked for its proof, then as usual or as a CON (`delivery.rs`,
    /// `validation.rs`). So it takes an exchange, one with no upstream leg.
    fn answer_hit_through_exchange(
        &mut self,
        now: Timestamp,
        client: (Peer, ClientSlot),
        (token, msg): (CoapToken, &Message),
        answer: &[u8],
        upstream: UpstreamId,
    ) {
        let at = (upstream, EndpointId::NONE);
        let key = self.insert_exchange((client, State::Answered), token, msg, at, false);
        self.track_answer_code(Code(answer[1]));
        match Message::parse(answer) {
            Ok(hit) => self.answer_client(now, key, &hit, false),
            // Cannot happen for what the cache encodes; finish so no state is left.
            Err(_) => self.finish(now, key),
        }
    }

    /// What the cache makes of an upstream answer to a request that used it. Gives the
    /// answer the client gets instead, encoded, when it is not `msg`: the refreshed stored
    /// response after a 2.03 for the proxy's own ETag.
    pub(super) fn cache_answer(
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

/// Whether `request` carries `etag` among its ETag options.
pub(super) fn carries_etag(request: &Message, etag: Etag) -> bool {
    request
        .options()
        .any(|(n, v)| n == ETAG && v == etag.as_bytes())
}
