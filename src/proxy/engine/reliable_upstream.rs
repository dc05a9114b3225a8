//! A reliable upstream (CoAP over TCP or TLS, RFC 8323) as the upstream leg sees it: its
//! messages have no type and no Message ID (§2.2, §3.2), so nothing from it is an ACK or an
//! RST, nothing is acknowledged, and a response is matched by its token alone: the answer
//! of an open leg, or a notification of an observation (RFC 7641 §3.2 on a reliable
//! transport, RFC 8323 §7). The header it comes with is the transport's placeholder.
//!
//! An observation the proxy no longer wants cannot be reset there (RFC 7641 §3.6's RST): it
//! is deregistered with a GET like its registration, with Observe: 1 (RFC 8323 §7.4), when
//! the upstream's next notification finds no observer, where a UDP upstream's would get an
//! RST. The registration is kept for that from its answer on (`Upstreams::keep_registration`).

use crate::coap::option::OBSERVE;
use crate::coap::{peek_header, rewrite, Code, Message, MessageType};
use crate::time::Timestamp;

use super::endpoints::EndpointId;
use super::exchange::{ExchangeKey, RELIABLE_HEADER};
use super::gate::Charge;
use super::{Destination, Proxy};

impl Proxy {
    /// The connection behind `endpoint` to a reliable upstream (RFC 8323) failed or closed:
    /// what waits there gets 5.02 at once, since nothing will be resent, and the
    /// observations it held end with it (RFC 8323 §7.4).
    pub fn handle_upstream_closed(&mut self, now: Timestamp, endpoint: EndpointId) {
        self.upstreams.forget_registrations(endpoint);
        self.fail_endpoint(now, endpoint, "upstream connection closed");
    }

    /// The upstream at `addr` is reached over a reliable transport (CoAP over TCP or TLS):
    /// its requests are sent once, and wait at most the total timeout (RFC 8323 §2.2).
    pub fn set_reliable_upstream(&mut self, addr: std::net::SocketAddr) {
        self.upstreams.set_reliable(addr);
    }

    /// A message from endpoint `up`, whose upstream is reliable: a response goes by its
    /// token, whatever its header says; anything else is not ours (an origin is not served
    /// by the proxy), and is dropped.
    pub(super) fn on_reliable_upstream(&mut self, now: Timestamp, up: EndpointId, msg: &Message) {
        if !msg.code().is_response() {
            self.counters.strays.unmatched_upstream += 1;
            return;
        }
        // A response without Observe, or an error, ends an observation (RFC 7641 §3.2).
        let ends = msg.option(OBSERVE).is_none() || msg.code().class() != 2;
        if self.sharing.fanout().has_registration(up, msg.token()) {
            self.notify_group(now, up, msg);
        } else {
            match self.match_response(up, msg.token()) {
                Some((key, true)) => self.relay_notification(now, key, msg),
                Some((key, false)) => return self.on_upstream_answer(now, key, msg),
                None => {
                    self.counters.strays.unmatched_upstream += 1;
                    return self.deregister(up, msg.token());
                }
            }
        }
        if ends {
            self.upstreams.take_registration(up, msg.token());
        }
    }

    /// A message from a reliable upstream that is not well formed (its transport checks
    /// options before, so this is rare): the leg its token names fails with 5.02 (RFC 7252
    /// §5.7.1); there is no Message ID to reset.
    pub(super) fn on_malformed_reliable(&mut self, now: Timestamp, up: EndpointId, bytes: &[u8]) {
        let Some((_, _, token)) = peek_header(bytes) else {
            return;
        };
        if let Some((key, false)) = self.match_response(up, token) {
            let why = "malformed response from upstream";
            self.give_up(now, key, Code::BAD_GATEWAY, why);
        }
    }

    /// The upstream accepted the registration of exchange `key` (its answer has Observe):
    /// on a reliable upstream, the request as it went is kept for its deregistration. Called
    /// while the leg is open, which still holds the request.
    pub(super) fn keep_registration(&mut self, key: ExchangeKey) {
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        if !self.upstreams.is_reliable(x.upstream) {
            return;
        }
        if let Some(request) = x.state.leg().and_then(|leg| leg.request.as_deref()) {
            self.upstreams.keep_registration(x.endpoint, request);
        }
    }

    /// Ends the upstream's observation with `token` on `up` with a GET deregistration (RFC
    /// 7641 §3.6, RFC 8323 §7.4): the registration's method, token and options, with
    /// Observe: 1. Nothing goes if the registration was not kept (a response for a token
    /// that never registered, or past `MAX_REGISTRATIONS`); its answer is a stray.
    fn deregister(&mut self, up: EndpointId, token: &[u8]) {
        let Some(request) = self.upstreams.take_registration(up, token) else {
            return;
        };
        let Ok(registration) = Message::parse(&request) else {
            return;
        };
        let (ty, mid) = RELIABLE_HEADER;
        let mut bytes = Vec::with_capacity(request.len());
        let built = rewrite(&mut bytes, &registration, (ty, mid, token), |b, n, v| {
            match n {
                OBSERVE => b.option(n, &[1]),
                _ => b.option(n, v),
            };
        })
        .finish();
        if built.is_ok() {
            (self.gate).send(Charge::Relayed, Destination::Upstream(up), &bytes);
        }
    }
}

/// The type of a message from upstream, as the Observe relay counts it: a reliable
/// upstream's header is a placeholder, and its notifications count as NONs (nothing of
/// theirs asks for an acknowledgement).
pub(super) fn upstream_type(reliable: bool, msg: &Message) -> MessageType {
    match reliable {
        true => MessageType::Non,
        false => msg.msg_type(),
    }
}
