//! Observe aggregation (RFC 7641 §3.1, §5): with the response cache on, the clients observing
//! one resource share one upstream registration. Each observer is an exchange of its own, with
//! its token, Message IDs, CON/NON cadence and delivery state (`observe.rs`); a group joins
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

use crate::coap::option::{encode_uint, OBSERVE};
use crate::coap::{Message, MessageBuilder};
use crate::time::Timestamp;

use super::cache::CacheKey;
use super::clients::ClientSlot;
use super::endpoints::{EndpointId, UpstreamId};
use super::engine::Proxy;
use super::exchange::{CoapToken, ExchangeKey, Observer, State};
use super::keyed_hash::{KeyedMap, KeyedState};
use super::peer::Peer;

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

/// A group, as an exchange names the one it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct GroupId(u32);

impl Fanout {
    pub(super) fn new(hash: &KeyedState) -> Self {
        Fanout {
            groups: Slab::new(),
            by_key: hash.map(),
            by_registration: hash.map(),
        }
    }

    /// The group observing the resource with cache key `key`: its id, upstream and endpoint.
    pub(super) fn for_key(&self, key: &[u8]) -> Option<(GroupId, UpstreamId, EndpointId)> {
        let &g = self.by_key.get(key)?;
        let group = self.groups.get(g)?;
        Some((GroupId(g as u32), group.upstream, group.registration.0))
    }

    /// The group whose registration a notification with `token` on `endpoint` belongs to,
    /// with its members (a copy: relaying may end them) and its cache key.
    fn for_registration(
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

    /// Groups alive.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.groups.len()
    }
}

impl Proxy {
    /// A registration answered upstream started observing: it founds the group of its
    /// resource, unless one exists (it registered on its own, see the module docs).
    pub(super) fn found_group(&mut self, key: ExchangeKey, cache_key: CacheKey) {
        let Some(x) = self
            .get(key)
            .filter(|x| matches!(x.state, State::Observing(_)))
        else {
            return;
        };
        if self.fanout.by_key.contains_key(cache_key.as_bytes()) {
            return;
        }
        let registration = (x.endpoint, x.upstream_token);
        let group = Group {
            key: cache_key.clone(),
            registration,
            upstream: x.upstream,
            members: vec![key],
        };
        let g = self.fanout.groups.insert(group);
        self.fanout
            .by_key
            .insert(Box::from(cache_key.as_bytes()), g);
        self.fanout.by_registration.insert(registration, g);
        if let Some(observer) = self.get_mut(key).and_then(|x| x.observe.as_mut()) {
            observer.group = Some(GroupId(g as u32));
        }
    }

    /// A notification for a group's registration: kept in the cache and relayed to every
    /// member. Returns false if `token` on `endpoint` is no group's.
    pub(super) fn notify_group(
        &mut self,
        now: Timestamp,
        endpoint: EndpointId,
        msg: &Message,
    ) -> bool {
        let Some((members, key)) = self.fanout.for_registration(endpoint, msg.token()) else {
            return false;
        };
        // A notification is a response to the registration like any other (RFC 7641 §3.3):
        // the newest representation, fresh for its Max-Age. (One the cache may not keep, an
        // error say, still removes the older.)
        let _ = self.cache.store(now, &key, None, msg);
        for member in members {
            self.relay_notification(now, member, msg);
        }
        true
    }

    /// A member stops observing: it leaves its group, and the group goes with its last.
    pub(super) fn leave_group(&mut self, key: ExchangeKey) {
        let observer = self.get_mut(key).and_then(|x| x.observe.as_mut());
        let Some(GroupId(g)) = observer.and_then(|o| o.group.take()) else {
            return;
        };
        let Some(group) = self.fanout.groups.get_mut(g as usize) else {
            return;
        };
        group.members.retain(|&m| m != key);
        if group.members.is_empty() {
            let group = self.fanout.groups.remove(g as usize);
            self.fanout.by_key.remove(group.key.as_bytes());
            self.fanout.by_registration.remove(&group.registration);
        }
    }

    /// A client registers for a resource a group observes, and `representation` (a fresh
    /// hit, encoded) is current: it becomes a member, answered at once with that and the
    /// group's latest Observe value (RFC 7641 §5: aggregated, never registered twice).
    pub(super) fn join_group(
        &mut self,
        now: Timestamp,
        client: (Peer, ClientSlot),
        msg: &Message,
        (group, upstream, endpoint): (GroupId, UpstreamId, EndpointId),
        representation: &[u8],
    ) {
        let token = CoapToken::new(msg.token()).expect("parse checked the token length");
        let answered = (client, State::Answered);
        let key = self.insert_exchange(answered, token, msg, (upstream, endpoint), false);
        let seq = self.latest_seq(group);
        let Some(x) = self.get_mut(key) else { return };
        // No upstream leg: it is answered here and now.
        x.observe = Some(Observer {
            group: Some(group),
            non_mid: None,
        });
        if let Some(g) = self.fanout.groups.get_mut(group.0 as usize) {
            g.members.push(key);
        }
        self.counters.observe.observers_joined += 1;
        let mut answer = Vec::with_capacity(representation.len() + 4);
        let built = Message::parse(representation).map(|m| with_observe(&mut answer, &m, seq));
        match built
            .ok()
            .and_then(|r| r.ok())
            .map(|()| Message::parse(&answer))
        {
            Some(Ok(answer)) => {
                self.track_answer_code(answer.code());
                self.answer_client(now, key, &answer, true)
            }
            _ => self.finish(now, key),
        }
    }

    /// The latest Observe value a member of `group` was given, for a new member's first answer:
    /// later notifications are newer than it (RFC 7641 §3.4).
    fn latest_seq(&self, GroupId(g): GroupId) -> u32 {
        let members = self.fanout.groups.get(g as usize).map(|g| &g.members[..]);
        (members.unwrap_or_default().iter())
            .filter_map(|&m| Some(self.get(m)?.state.relay()?.last_notification))
            .max_by_key(|&(_, at)| at)
            .map_or(0, |(seq, _)| seq)
    }
}

/// `msg` with an Observe option of value `seq` (sorted in by the builder).
fn with_observe(
    out: &mut Vec<u8>,
    msg: &Message,
    seq: u32,
) -> Result<(), crate::coap::EncodeError> {
    let ty = msg.msg_type();
    let mut b = MessageBuilder::new(out, ty, msg.code(), msg.message_id(), msg.token());
    b.option(OBSERVE, &encode_uint(seq));
    for (number, value) in msg.options() {
        b.option(number, value);
    }
    b.payload(msg.payload());
    b.finish()
}
