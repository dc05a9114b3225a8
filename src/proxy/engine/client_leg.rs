//! The client leg: requests in, duplicates absorbed, local answers, new exchanges started.

use crate::coap::option::{self, decode_uint, ECHO, HOP_LIMIT, OBSERVE, PROXY_SCHEME, PROXY_URI};
use crate::coap::{empty_ack, peek_header, rst, Code, Message, MessageType};
use crate::time::Timestamp;

use super::answer_cache::Replay;
use super::cache_use::CacheUse;
use super::caching::Decision;
use super::clients::ClientSlot;
use super::endpoints::{EndpointId, NoEndpoint, UpstreamId};
use super::events::{ProxyEvent, Source};
use super::exchange::{CoapToken, ExchangeKey, Observer, Reply, State, RELIABLE_HEADER};
use super::fanout::GroupAt;
use super::gate::Charge;
use super::kept::Seen;
use super::limits::{self, Refusal};
use super::local_answer::{encode_local, with_observe, LocalAnswer};
use super::observation_shares::SourceKey;
use super::peer::{ClientOrigin, Peer};
use super::route::{self, RouteError, Target};
use super::upstream_request::{upstream_request, Route};
use super::validation::{ProvedBy, LIKELY_ANSWER};
use super::{Destination, Proxy};

/// A request on its way upstream: where, the Message ID it leaves with, and what the cache
/// does with its answer.
type Forward = (Route, (EndpointId, u16), Option<Box<CacheUse>>);

/// What consulting the cache did with a new request.
enum Consulted {
    /// Answered from the cache: nothing goes upstream.
    Answered,
    /// Forward it, doing this with its answer.
    Forward(Option<Box<CacheUse>>),
}

impl Proxy {
    /// A datagram arrived from a client: a UDP source address or a [`Peer`] converts into
    /// its origin; a transport that knows the address a peer connects from names it
    /// ([`Peer::connected_from`]), for the per-source shares.
    pub fn handle_client_datagram(
        &mut self,
        now: Timestamp,
        from: impl Into<ClientOrigin>,
        bytes: &[u8],
    ) {
        let origin = from.into();
        let from = origin.peer;
        self.gate.clock(now);
        self.gate.received(from, bytes.len());
        let msg = match Message::parse(bytes) {
            Ok(msg) => msg,
            Err(e) => return self.reject_malformed_client(from, bytes, e),
        };
        match (msg.msg_type(), msg.code()) {
            (MessageType::Ack | MessageType::Rst, c) if c.is_empty() => {
                self.on_client_ack_or_rst(now, from, &msg)
            }
            (MessageType::Con | MessageType::Non, c) if c.is_request() => {
                self.on_client_request(now, origin, &msg)
            }
            // A CoAP ping (empty CON) or anything else confirmable we cannot process: RST
            // (RFC 7252 §4.2, §4.3).
            (MessageType::Con, _) => {
                self.counters.strays.unmatched_client += 1;
                self.send_rst(Destination::Client(from), msg.message_id());
            }
            _ => self.counters.strays.unmatched_client += 1,
        }
    }

    /// RFC 7252 §4.2/§4.3: a malformed CON is rejected with RST, anything else is dropped.
    fn reject_malformed_client(&mut self, from: Peer, bytes: &[u8], e: crate::coap::FormatError) {
        self.counters.strays.client_format_errors += 1;
        self.events.push(ProxyEvent::Malformed {
            from: Source::Client(from),
            error: e,
        });
        if let Some((MessageType::Con, mid, _)) = peek_header(bytes) {
            self.send_rst(Destination::Client(from), mid);
        }
    }

    pub(super) fn send_rst(&mut self, to: Destination, mid: u16) {
        self.gate.send_encoded(Charge::Relayed, to, |b| rst(b, mid));
    }

    fn on_client_request(&mut self, now: Timestamp, origin: ClientOrigin, msg: &Message) {
        let from = origin.peer;
        let token = CoapToken::new(msg.token()).expect("parse checked the token length");
        // A peer without a message layer never sends a request twice (RFC 8323 §2.2, §3.2),
        // and its Message IDs are placeholders: each request is new.
        let seen = (from.has_message_layer())
            .then(|| self.kept.seen(&(from, token, msg.message_id())))
            .flatten();
        if let Some(seen) = seen {
            return self.on_duplicate(from, seen, msg);
        }
        self.counters.traffic.requests += 1;
        // The client's entry, looked up once: what follows takes a reference on it or not.
        let source = SourceKey::of(origin, self.config.limits.source_prefix);
        let client = (from, self.clients.slot_from(from, source));
        // Held while the request is handled: whatever it ends on the way (a deregistration's
        // observation, whose answer a stream peer keeps nothing of, `kept.rs`) may release
        // the client's last other reference, and the slot must outlive this request.
        self.clients.take_ref(client.1);
        // A request over the limits costs no more than its parse: it is refused before any
        // other look at its options, and a (de)registration the proxy refuses changes nothing.
        let routed =
            (limits::check_request(&self.config.limits, &mut self.counters.own_answers, msg))
                .and_then(|()| self.check_source(now, from, msg))
                .and_then(|()| {
                    self.observation_request(now, from, token, msg);
                    self.route(msg)
                });
        let admitted = routed.and_then(|route| match self.consult(now, client, msg, &route) {
            Consulted::Answered => Ok(None),
            Consulted::Forward(cache) => {
                let at = self.admit(now, msg, client, &route)?;
                Ok(Some((route, at, cache)))
            }
        });
        match admitted {
            Ok(Some(forward)) => self.start_exchange(now, client, token, msg, forward),
            Ok(None) => {}
            Err(answer) => self.answer_locally(now, client, token, msg, &answer),
        }
        self.clients.release(client.1);
    }

    /// Consults the response cache with the request as it would go upstream.
    fn consult(
        &mut self,
        now: Timestamp,
        client: (Peer, ClientSlot),
        msg: &Message,
        route: &Route,
    ) -> Consulted {
        if !self.sharing.is_on() {
            return Consulted::Forward(None);
        }
        let mut canonical = Vec::with_capacity(msg.as_bytes().len() + 16);
        let token = CoapToken::default();
        let built = upstream_request(&mut canonical, msg, (0, &token), route, None).finish();
        let Some(upstream) = built.ok().and_then(|()| Message::parse(&canonical).ok()) else {
            // Cannot happen for a parsed request within the limits; forward it uncached.
            return Consulted::Forward(None);
        };
        let mut buf = std::mem::take(&mut self.scratch);
        let source = self.clients.source(client.1);
        let room = (self.usage)
            .observation_refusal(&self.config.limits, &source)
            .is_none();
        let clients = &mut self.clients;
        // A peer without a message layer gets the placeholder (`exchange::RELIABLE_HEADER`).
        let non_mid = || match client.0.has_message_layer() {
            true => clients.fresh_mid(client.1),
            false => RELIABLE_HEADER.1,
        };
        let asked = (route.upstream, &upstream);
        let consulted = match (self.sharing).consult(now, msg, asked, (&mut buf, non_mid), room) {
            Decision::Hit => {
                self.answer_from_cache(now, client, msg, &buf, route.upstream);
                Consulted::Answered
            }
            Decision::Join(group) => {
                self.join_group(now, client, msg, group, &buf);
                Consulted::Answered
            }
            Decision::Forward(cache) => Consulted::Forward(cache),
        };
        self.scratch = buf;
        consulted
    }

    /// Sends a hit and keeps it for the request's retransmissions, like any answer the proxy
    /// gives without asking upstream (`kept.rs`): the same answer again, Max-Age
    /// and all (RFC 7252 §4.5), within the store's bounds in bytes. A hit the outbox did not
    /// queue (over the client's send rate) is not kept: a retransmission is a GET or FETCH
    /// answered from the cache afresh (`Kept::keep_local`).
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
    /// the client is asked for its proof, then as usual or as a CON (`engine.rs`,
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

    /// A client registers for a resource a group observes, and `representation` (a fresh
    /// hit, encoded) is current: it becomes a member, answered at once with that and the
    /// group's latest Observe value (RFC 7641 §5: aggregated, never registered twice).
    pub(super) fn join_group(
        &mut self,
        now: Timestamp,
        client: (Peer, ClientSlot),
        msg: &Message,
        (group, upstream, endpoint): GroupAt,
        representation: &[u8],
    ) {
        let token = CoapToken::new(msg.token()).expect("parse checked the token length");
        let answered = (client, State::Answered);
        let key = self.insert_exchange(answered, token, msg, (upstream, endpoint), false);
        let seq = self.sharing.fanout().latest_seq(group, &self.exchanges);
        let Some(x) = self.exchanges.get_mut(key) else {
            return;
        };
        // No upstream leg: it is answered here and now.
        x.observe = Some(Observer {
            group: Some(group),
            non_mid: None,
        });
        self.sharing.fanout_mut().join(group, key);
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

    /// The Message ID a routed request leaves with, or the answer that refuses it.
    fn admit(
        &mut self,
        now: Timestamp,
        msg: &Message,
        (from, client): (Peer, ClientSlot),
        route: &Route,
    ) -> Result<(EndpointId, u16), LocalAnswer> {
        let len = msg.as_bytes().len();
        if let Some(answer) = self.over_capacity(route.upstream, client, len) {
            return Err(answer);
        }
        if let Some(answer) = self.over_rate(now, from) {
            return Err(answer);
        }
        (self.upstreams.endpoints_mut())
            .allocate(now, route.upstream)
            .map_err(|no| self.no_endpoint(now, route.upstream, no))
    }

    /// No Message ID for this upstream: every endpoint the bound allows has its IDs reserved,
    /// or the next socket is not open. 5.03, with a Max-Age saying when to try again.
    fn no_endpoint(&mut self, now: Timestamp, up: UpstreamId, no: NoEndpoint) -> LocalAnswer {
        self.counters.refusals.refused_endpoints += 1;
        let upstream = self.upstreams.addr(up);
        let at_bound = matches!(no, NoEndpoint::Bound { .. });
        self.events
            .push(ProxyEvent::NoMessageId { upstream, at_bound });
        match no {
            NoEndpoint::Bound { until } => {
                let mut answer = self.unavailable("no upstream Message ID free (endpoint bound)");
                let wait = until.saturating_since(now).as_secs_f64().ceil() as u32;
                answer.max_age = Some(wait.max(1));
                answer
            }
            NoEndpoint::Unavailable => self.unavailable("no upstream endpoint open"),
        }
    }

    /// A client retransmission: answered from state, never forwarded again.
    fn on_duplicate(&mut self, from: Peer, seen: Seen, msg: &Message) {
        self.counters.traffic.client_duplicates += 1;
        if msg.msg_type() != MessageType::Con {
            return;
        }
        if let Seen::Live(key) = seen {
            return self.on_live_duplicate(key);
        }
        match self.kept.replay(seen) {
            Some(Replay::Answer(bytes)) => {
                self.gate
                    .send(Charge::Relayed, Destination::Client(from), &bytes);
            }
            Some(Replay::EmptyAck) => {
                let mid = msg.message_id();
                self.gate
                    .send_encoded(Charge::Relayed, Destination::Client(from), |b| {
                        empty_ack(b, mid)
                    });
            }
            Some(Replay::Nothing) | None => {}
        }
    }

    /// A retransmission of a request still being worked on.
    fn on_live_duplicate(&mut self, key: ExchangeKey) {
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        match (x.reply, x.answer.is_some()) {
            // Its answer is held until the client proves its address: it goes then.
            _ if matches!(x.state, State::AwaitingProof { .. }) => {}
            // An observation's registration, answered on the ACK.
            (Reply::Piggyback { .. }, true) => self.push_from(key, |x| {
                Some((Destination::Client(x.client), x.answer.as_deref()?))
            }),
            // Still waiting upstream and the client is impatient: acknowledge now and answer
            // separately (RFC 7252 §5.2.2).
            (Reply::Piggyback { .. }, false) => self.send_empty_ack(key),
            (Reply::Separate, _) => {
                let (client, mid) = (x.client, x.client_mid);
                self.gate
                    .send_encoded(Charge::Relayed, Destination::Client(client), |b| {
                        empty_ack(b, mid)
                    });
            }
            // The request was a NON: a CON under its token and MID is not its retransmission.
            // A peer without a message layer has no retransmissions, and is never looked up.
            (Reply::Non | Reply::Reliable, _) => {}
        }
    }

    /// RFC 7641 §3.6: a new registration or a deregistration with the token of a live
    /// observation ends that observation; the request itself is then forwarded as usual.
    fn observation_request(&mut self, now: Timestamp, from: Peer, token: CoapToken, msg: &Message) {
        if msg.option(OBSERVE).is_none() {
            return;
        }
        if let Some(&old) = self.observers.get(&(from, token)) {
            self.end_observation(now, old);
        }
    }

    /// Option checks (RFC 7252 §5.7.1: a proxy refuses unsafe options it does not recognise
    /// with 4.02, and forwards safe-to-forward ones; RFC 8768) and the upstream for this
    /// request.
    fn route(&self, msg: &Message) -> Result<Route, LocalAnswer> {
        let (mut hop_limit, mut previous) = (None, None);
        for (number, value) in msg.options() {
            // Options come in number order, so a repeat follows its first occurrence. One
            // that may not repeat counts as unrecognised (§5.4.5): unsafe, it is refused too.
            let repeated = previous == Some(number) && !option::is_repeatable(number);
            previous = Some(number);
            if repeated && option::is_unsafe(number) {
                return Err(answer(Code::BAD_OPTION, "repeated option"));
            } else if number == HOP_LIMIT {
                hop_limit = Some(value);
            } else if option::proxy_must_reject(number) {
                // Unknown safe-to-forward options, critical or not, are forwarded (§5.7.2).
                return Err(answer(Code::BAD_OPTION, "unrecognised unsafe option"));
            }
        }
        let hop_limit = match hop_limit {
            None => self.config.default_hop_limit,
            Some(v) => match decode_uint(v) {
                Ok(0) | Err(_) => return Err(bad_request("invalid Hop-Limit")),
                Ok(1) => return Err(answer(Code::HOP_LIMIT_REACHED, "hop limit reached")),
                Ok(n) if n > 255 => return Err(bad_request("invalid Hop-Limit")),
                Ok(n) => n as u8 - 1,
            },
        };
        let (upstream, target) = self.upstream_for(msg)?;
        Ok(Route {
            upstream,
            target,
            hop_limit,
        })
    }

    fn upstream_for(&self, msg: &Message) -> Result<(UpstreamId, Option<Target>), LocalAnswer> {
        let routing = &self.config.routing;
        let uri = msg.option(PROXY_URI);
        let scheme = msg.option(PROXY_SCHEME);
        if uri.is_none() && scheme.is_none() {
            return match routing.upstream {
                Some(_) => Ok((0, None)),
                None => Err(answer(Code::NOT_FOUND, "no such resource on this proxy")),
            };
        }
        if !routing.forward {
            return Err(answer(
                Code::PROXYING_NOT_SUPPORTED,
                "forward proxying is disabled",
            ));
        }
        let (host, port, target) = match uri {
            Some(uri) => {
                let target = route::parse_proxy_uri(uri).map_err(route_error)?;
                (target.host.clone(), target.port, Some(target))
            }
            None => {
                route::check_scheme(scheme.unwrap_or_default()).map_err(route_error)?;
                let host = msg
                    .option(option::URI_HOST)
                    .ok_or_else(|| bad_request("Proxy-Scheme without Uri-Host"))?;
                let host = String::from_utf8_lossy(host).to_ascii_lowercase();
                let port = match msg.option(option::URI_PORT).map(decode_uint) {
                    None => route::COAP_PORT,
                    Some(Ok(p)) if p <= 65535 => p as u16,
                    Some(_) => return Err(bad_request("invalid Uri-Port")),
                };
                (host, port, None)
            }
        };
        if self.names_this_proxy(&host, port) {
            // §5.7.2: a request whose authority is the proxy itself is served locally, which
            // for this proxy means its reverse upstream, if it has one.
            return match routing.upstream {
                Some(_) => Ok((0, target)),
                None => Err(answer(Code::NOT_FOUND, "no such resource on this proxy")),
            };
        }
        let offset = usize::from(routing.upstream.is_some());
        match route::find_allowed(&routing.allow, &host, port) {
            Some(i) => Ok(((offset + i) as UpstreamId, target)),
            None => Err(answer(
                Code::FORBIDDEN,
                "target not in the proxy's allowlist",
            )),
        }
    }

    /// Whether `host:port` is this proxy's own client-facing address (a wildcard listener
    /// answers to every local address; loopback and the bound address are recognised).
    fn names_this_proxy(&self, host: &str, port: u16) -> bool {
        let Some(local) = self.config.local_addr else {
            return false;
        };
        let Ok(ip) = host.parse::<std::net::IpAddr>() else {
            return host == "localhost" && port == local.port();
        };
        port == local.port()
            && (ip == local.ip()
                || ip.is_loopback()
                || (local.ip().is_unspecified() && ip.is_unspecified()))
    }

    /// 5.03 with Max-Age when too many exchanges are in flight (RFC 7252 §4.7, §5.9.3.4): in
    /// all, too many bytes of them, to this upstream, or from this client (so that one source
    /// cannot take what the others need). `len`: the request's size.
    fn over_capacity(
        &mut self,
        upstream: UpstreamId,
        client: ClientSlot,
        len: usize,
    ) -> Option<LocalAnswer> {
        let client_inflight = self.clients.inflight(client);
        let c = &mut self.counters;
        let why = if let Some(refusal) = self.usage.refusal(&self.config.limits, len) {
            let (counter, why) = match refusal {
                Refusal::Draining => (&mut c.refusals.refused_draining, "shutting down"),
                Refusal::Inflight => (
                    &mut c.refusals.refused_inflight,
                    "too many requests in flight",
                ),
                Refusal::InflightBytes => (
                    &mut c.refusals.refused_inflight_bytes,
                    "too many request bytes in flight",
                ),
            };
            *counter += 1;
            why
        } else if self.upstreams.inflight(upstream) >= self.config.limits.max_inflight_per_upstream
        {
            c.refusals.refused_upstream_inflight += 1;
            "too many requests in flight to this upstream"
        } else if client_inflight >= self.config.limits.max_inflight_per_client {
            c.refusals.refused_client += 1;
            "too many requests in flight from this client"
        } else {
            return None;
        };
        Some(self.unavailable(why))
    }

    /// With an opt-in send rate (`budget.rs`): 5.03 for a request whose answer the client's
    /// bucket could not take, with a Max-Age saying when it can, rather than an answer
    /// dropped on its way (a client told to wait does not time out and retransmit).
    fn over_rate(&mut self, now: Timestamp, from: Peer) -> Option<LocalAnswer> {
        let addr = from.claimed_address()?;
        let refill = (self.gate.budget()?).refill_at(now, addr, LIKELY_ANSWER)?;
        self.counters.refusals.refused_client_rate += 1;
        let mut answer = self.unavailable("over this client's send rate");
        let wait = refill.saturating_since(now).as_secs_f64().ceil() as u32;
        answer.max_age = Some(wait.max(1));
        Some(answer)
    }

    pub(super) fn unavailable(&self, why: &'static str) -> LocalAnswer {
        LocalAnswer {
            code: Code::SERVICE_UNAVAILABLE,
            max_age: Some(
                self.config
                    .overload_max_age
                    .as_secs()
                    .clamp(1, u64::from(u32::MAX)) as u32,
            ),
            size1: None,
            echo: None,
            diagnostic: why,
        }
    }

    /// Answers a request itself, without going upstream. The answer is kept (apart from real
    /// answers, and shorter: see `kept.rs`) so that a retransmission gets it again
    /// (RFC 7252 §4.5) rather than a second chance upstream once the load that caused a 5.03
    /// is gone.
    fn answer_locally(
        &mut self,
        now: Timestamp,
        (from, slot): (Peer, ClientSlot),
        token: CoapToken,
        msg: &Message,
        a: &LocalAnswer,
    ) {
        self.count_local(a.code);
        let con = msg.msg_type() == MessageType::Con;
        let (ty, mid) = match (from.has_message_layer(), con) {
            (false, _) => RELIABLE_HEADER,
            (true, true) => (MessageType::Ack, msg.message_id()),
            (true, false) => (MessageType::Non, self.clients.fresh_mid(slot)),
        };
        let mut buf = std::mem::take(&mut self.scratch);
        encode_local(&mut buf, ty, mid, token.as_bytes(), a);
        let request_len = msg.as_bytes().len();
        if !a.diagnostic.is_empty() && !self.diagnostic_fits(from, buf.len(), request_len) {
            let bare = LocalAnswer {
                diagnostic: "",
                ..*a
            };
            encode_local(&mut buf, ty, mid, token.as_bytes(), &bare);
        }
        // Kept only if it went (`Kept::keep_local`). The kept answer holds the client's
        // entry: its share, and for a NON answer (a MID of ours) its numbering.
        if self
            .gate
            .send(Charge::Local, Destination::Client(from), &buf)
        {
            self.clients.take_ref(slot);
            let replay = match con {
                true => Replay::Answer(&buf[..]),
                false => Replay::Nothing,
            };
            self.keep_local_answer(now, (from, token, msg.message_id()), replay, slot);
        }
        self.scratch = buf;
    }

    /// Whether an answer of the proxy's own with its diagnostic payload, `len` bytes, may go
    /// to `from` as it is. The diagnostic is optional (RFC 7252 §5.5.2): to a client not yet
    /// proven it goes only if the answer stays within 3x the request it answers, so errors
    /// never use up the allowance that the client's real answers need (the code alone is
    /// about as long as the request). `request_len`: the request's size.
    pub(super) fn diagnostic_fits(&self, from: Peer, len: usize, request_len: usize) -> bool {
        self.gate.fits(from, len) && (self.gate.proven(from) || len <= 3 * request_len)
    }

    fn count_local(&mut self, code: Code) {
        let c = &mut self.counters;
        match code {
            Code::SERVICE_UNAVAILABLE => c.own_answers.service_unavailable_5_03 += 1,
            Code::BAD_OPTION => c.own_answers.bad_option_4_02 += 1,
            Code::BAD_GATEWAY => c.own_answers.bad_gateway_5_02 += 1,
            Code::FORBIDDEN => c.own_answers.forbidden_4_03 += 1,
            Code::NOT_FOUND => c.own_answers.not_found_4_04 += 1,
            Code::PROXYING_NOT_SUPPORTED => c.own_answers.proxying_not_supported_5_05 += 1,
            Code::HOP_LIMIT_REACHED => c.own_answers.hop_limit_5_08 += 1,
            Code::REQUEST_ENTITY_TOO_LARGE => c.own_answers.request_too_large_4_13 += 1,
            Code::UNAUTHORIZED => {}
            _ => c.own_answers.bad_request_4_00 += 1,
        }
    }

    /// Creates the exchange, sends the request upstream and arms its timers.
    fn start_exchange(
        &mut self,
        now: Timestamp,
        from: (Peer, ClientSlot),
        token: CoapToken,
        msg: &Message,
        (route, (endpoint, mid), cache): Forward,
    ) {
        let non_idempotent = matches!(msg.code(), Code::POST | Code::PATCH | Code::IPATCH);
        let policy = self.policy(non_idempotent);
        let at = (route.upstream, endpoint);
        let waiting = State::waiting(mid, now, now + policy.total_timeout);
        let key = self.insert_exchange((from, waiting), token, msg, at, non_idempotent);
        // Our token: the slot index (for O(1) lookup) and 32 random bits (RFC 7252 §5.3.1).
        let mut token_bytes = [0u8; 8];
        token_bytes[..4].copy_from_slice(&key.index.to_be_bytes());
        token_bytes[4..].copy_from_slice(&rand::Rng::random::<u32>(&mut self.rng).to_be_bytes());
        let upstream_token = CoapToken::new(&token_bytes).expect("8 bytes");
        let mut request = std::mem::take(&mut self.scratch);
        // The input parsed and Uri-* values come from a bounded URI, so this cannot fail.
        let etag = cache.as_ref().and_then(|c| c.etag_to_add());
        let etag = etag.as_ref().map(|e| e.as_bytes());
        let ids = (mid, &upstream_token);
        let _ = upstream_request(&mut request, msg, ids, &route, etag).finish();
        let x = self.exchanges.get_mut(key).expect("just inserted");
        x.cache = cache;
        x.upstream_token = upstream_token;
        let registers = msg.option(OBSERVE).and_then(|v| decode_uint(v).ok()) == Some(0);
        x.observe = registers.then(Observer::default);
        if let Reply::Piggyback { ack_by } = &mut x.reply {
            *ack_by = Some(now + self.config.ack_delay);
        }
        (self.usage).leg_opened(&mut self.exchanges, key, &request);
        self.scratch = request;
        (self.upstreams).leg_opened((route.upstream, endpoint), mid, key);
        self.clients.count_inflight(from.1, true);
        self.counters.traffic.forwarded += 1;
        self.transmit_upstream(now, key);
    }

    /// A request repeating a fresh Echo value of ours proves its source (RFC 9175 §2.4).
    /// With `--validate-sources`, a request from a source not proven whose answer may exceed
    /// its allowance gets 4.01 with an Echo value to repeat instead (the strict mode: the
    /// proof comes before any answer, rather than with the first one that does not fit);
    /// at defaults too, when such an answer could not be held for the proof.
    pub(super) fn check_source(
        &mut self,
        now: Timestamp,
        from: Peer,
        msg: &Message,
    ) -> Result<(), LocalAnswer> {
        let Some(addr) = from.claimed_address() else {
            return Ok(());
        };
        if msg.option(ECHO).is_some() && self.gate.validation().echoes(now, addr, msg) {
            self.source_proved(now, from, ProvedBy::Echo);
        }
        // At defaults, the same challenge when an answer too big for the allowance could not
        // be held for the proof (`awaiting_proof.rs`): asked before anything goes upstream.
        let cannot_hold = self.cannot_hold_for(from);
        if !self.config.validate_sources && cannot_hold.is_none() {
            return Ok(());
        }
        match self.gate.validation_mut().challenge(now, addr) {
            None => Ok(()),
            Some(value) => {
                self.counters.proof.echo_challenges += 1;
                self.count_backlog_challenge(cannot_hold);
                Err(LocalAnswer {
                    code: Code::UNAUTHORIZED,
                    max_age: None,
                    size1: None,
                    echo: Some(value),
                    diagnostic: "",
                })
            }
        }
    }

    /// For tests of other behaviours: `from` is proven, as an ACK to a CON of ours would
    /// prove it.
    #[cfg(test)]
    pub(crate) fn prove_source(&mut self, now: Timestamp, from: impl Into<Peer>) {
        self.source_proved(now, from.into(), ProvedBy::Ack);
    }

    /// `from` proved that it receives at its address: what was withheld from it goes now.
    pub(super) fn source_proved(&mut self, now: Timestamp, from: Peer, by: ProvedBy) {
        let Some(addr) = from.claimed_address() else {
            return;
        };
        for key in self.gate.validation_mut().prove(now, addr, by) {
            self.resend_withheld(now, key);
        }
    }
}

fn route_error(e: RouteError) -> LocalAnswer {
    match e {
        RouteError::UnsupportedScheme => {
            answer(Code::PROXYING_NOT_SUPPORTED, "only coap:// is proxied")
        }
        RouteError::Malformed => bad_request("malformed Proxy-Uri"),
    }
}

fn bad_request(why: &'static str) -> LocalAnswer {
    answer(Code::BAD_REQUEST, why)
}

fn answer(code: Code, diagnostic: &'static str) -> LocalAnswer {
    LocalAnswer {
        code,
        max_age: None,
        size1: None,
        echo: None,
        diagnostic,
    }
}
