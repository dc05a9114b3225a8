//! What one request may cost the proxy: its size, its options, and the bytes of the requests in
//! flight. Size and options are checked before anything else is done for the request, so that
//! the cost of any one datagram is bounded by them (its parse, which is linear, comes first: a
//! malformed CON must still get its RST); the bytes in flight with the other in-flight limits.

use crate::coap::option::PROXY_URI;
use crate::coap::{Code, Message};

use super::clients::ClientSlot;
use super::engine::Proxy;
use super::exchange::ExchangeKey;
use super::local_answer::LocalAnswer;
use super::route;

impl Proxy {
    /// RFC 7252 §5.9.2.9: a request longer than `max_request_size` gets 4.13 Request Entity
    /// Too Large; one with more than `max_options` options gets 4.02 Bad Option.
    ///
    /// Size1 in the 4.13 says how large an entity the proxy would take (§5.10.9): the limit
    /// less this request's header, token, options and payload marker, so that a client that
    /// sends that much (in one message or in Block1 blocks, RFC 7959 §2.9.3) fits. It is 0 if
    /// the options alone are too long.
    ///
    /// A Proxy-Uri counts as the Uri-Path and Uri-Query options it decomposes into (§6.4),
    /// and the answer to one with too many is also 4.02: the request is well formed, but one
    /// of its options carries a value this proxy cannot process, and §5.4.3 asks that such an
    /// option be treated like an unrecognised one, which for a critical option (Proxy-Uri is,
    /// §5.10.2) is 4.02 (§5.4.1). 4.00 would not say which part of the request to change.
    pub(super) fn check_request_limits(&mut self, msg: &Message) -> Result<(), LocalAnswer> {
        let (len, limit) = (msg.as_bytes().len(), self.config.limits.max_request_size);
        if len > limit {
            let framing = len - msg.payload().len() + usize::from(msg.payload().is_empty());
            let room = limit.saturating_sub(framing);
            return Err(LocalAnswer {
                code: Code::REQUEST_ENTITY_TOO_LARGE,
                max_age: None,
                size1: Some(u32::try_from(room).unwrap_or(u32::MAX)),
                echo: None,
                diagnostic: "request longer than this proxy takes",
            });
        }
        let mut options = msg.options().count();
        if let Some(uri) = msg.option(PROXY_URI) {
            // A Proxy-Uri that does not split is refused later, by route.
            options = options - 1 + route::decomposed_options(uri).unwrap_or(1);
        }
        if options > self.config.limits.max_options {
            self.counters.own_answers.too_many_options += 1;
            return Err(LocalAnswer {
                code: Code::BAD_OPTION,
                max_age: None,
                size1: None,
                echo: None,
                diagnostic: "more options than this proxy takes",
            });
        }
        Ok(())
    }

    /// Whether a request of `len` bytes would take the copies of the requests in flight past
    /// `max_inflight_bytes` (its copy, made only once it is admitted, may be a little longer).
    pub(super) fn over_inflight_bytes(&self, len: usize) -> bool {
        self.inflight_bytes + len > self.config.limits.max_inflight_bytes
    }

    /// The exchange keeps its upstream request for retransmission: its bytes count in flight.
    pub(super) fn keep_request(&mut self, key: ExchangeKey, request: &[u8]) {
        if let Some(leg) = self.get_mut(key).and_then(|x| x.state.leg_mut()) {
            debug_assert!(leg.request.is_none(), "one copy per exchange");
            leg.request = Some(Box::from(request));
            self.inflight_bytes += request.len();
        }
    }

    /// No copy of the request goes upstream again: its bytes leave the in-flight budget.
    pub(super) fn drop_request(&mut self, key: ExchangeKey) {
        let leg = self.get_mut(key).and_then(|x| x.state.leg_mut());
        if let Some(request) = leg.and_then(|leg| leg.request.take()) {
            self.inflight_bytes -= request.len();
        }
    }

    /// Replaces the answer the exchange keeps (for a retransmission, a proof, a replay),
    /// counting its bytes for its client and in all; the old one is returned.
    pub(super) fn keep_answer(
        &mut self,
        key: ExchangeKey,
        answer: Option<Box<[u8]>>,
    ) -> Option<Box<[u8]>> {
        let x = self.get_mut(key)?;
        let added = answer.as_deref().map_or(0, <[u8]>::len);
        let old = std::mem::replace(&mut x.answer, answer);
        let removed = old.as_deref().map_or(0, <[u8]>::len);
        let slot = x.client_slot;
        self.count_answer_bytes(slot, added, removed);
        old
    }

    /// The exchanges of the client in `slot` keep `added` answer bytes more and `removed`
    /// fewer: counted for it and in all.
    pub(super) fn count_answer_bytes(&mut self, slot: ClientSlot, added: usize, removed: usize) {
        self.clients.count_answer_bytes(slot, added, removed);
        self.answer_bytes = self.answer_bytes + added - removed;
    }
}
