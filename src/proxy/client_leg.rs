//! The client leg: requests in, duplicates absorbed, local answers, new exchanges started.

use std::net::SocketAddr;

use crate::coap::option::{self, encode_uint, HOP_LIMIT, OBSERVE, PROXY_SCHEME, PROXY_URI};
use crate::coap::{decode_uint, peek_header, rewrite, rst, Code, Message, MessageType};
use crate::time::Timestamp;

use super::engine::{encode_local, Destination, LocalAnswer, Proxy};
use super::exchange::{ExchangeKey, State, TimerKind, Token, UpstreamId};
use super::route::{self, RouteError, Target};

/// Where a request goes, decided before any state is created.
struct Route {
    upstream: UpstreamId,
    /// Set for a Proxy-Uri request: its decomposition replaces the Uri-* options.
    target: Option<Target>,
    hop_limit: u8,
}

impl Proxy {
    /// A datagram arrived on the client-facing socket.
    pub fn handle_client_datagram(&mut self, now: Timestamp, from: SocketAddr, bytes: &[u8]) {
        let msg = match Message::parse(bytes) {
            Ok(msg) => msg,
            Err(e) => return self.reject_malformed_client(from, bytes, e),
        };
        match (msg.msg_type(), msg.code()) {
            (MessageType::Ack | MessageType::Rst, c) if c.is_empty() => {
                self.on_client_ack_or_rst(now, from, &msg)
            }
            (MessageType::Con | MessageType::Non, c) if c.is_request() => {
                self.on_client_request(now, from, &msg)
            }
            // A CoAP ping (empty CON) or anything else confirmable we cannot process: RST
            // (RFC 7252 §4.2, §4.3).
            (MessageType::Con, _) => {
                self.counters.unmatched_client += 1;
                self.send_rst(Destination::Client(from), msg.message_id());
            }
            _ => self.counters.unmatched_client += 1,
        }
    }

    /// RFC 7252 §4.2/§4.3: a malformed CON is rejected with RST, anything else is dropped.
    fn reject_malformed_client(
        &mut self,
        from: SocketAddr,
        bytes: &[u8],
        e: crate::coap::FormatError,
    ) {
        self.counters.client_format_errors += 1;
        log::debug!("malformed datagram from client {from}: {e}");
        if let Some((MessageType::Con, mid, _)) = peek_header(bytes) {
            self.send_rst(Destination::Client(from), mid);
        }
    }

    pub(super) fn send_rst(&mut self, to: Destination, mid: u16) {
        let mut buf = Vec::with_capacity(4);
        rst(&mut buf, mid);
        self.push(to, buf);
    }

    /// The client acknowledged (or rejected) a confirmable answer or a notification.
    fn on_client_ack_or_rst(&mut self, now: Timestamp, from: SocketAddr, msg: &Message) {
        let Some(&key) = self.by_client_mid.get(&(from, msg.message_id())) else {
            self.counters.unmatched_client += 1;
            return;
        };
        self.by_client_mid.remove(&(from, msg.message_id()));
        if self
            .get(key)
            .and_then(|x| x.delivery.as_ref())
            .map(|d| d.mid)
            == Some(msg.message_id())
        {
            self.cancel_delivery(key);
        }
        // RFC 7641 §3.6: an RST in reply to a notification cancels the observation.
        if msg.msg_type() == MessageType::Rst
            && self.get(key).is_some_and(|x| x.state == State::Observing)
        {
            self.end_observation(now, key);
        }
    }

    fn on_client_request(&mut self, now: Timestamp, from: SocketAddr, msg: &Message) {
        let token = Token::new(msg.token()).expect("parse checked the token length");
        if let Some(&key) = self.by_client.get(&(from, token, msg.message_id())) {
            return self.on_duplicate(key, msg);
        }
        self.counters.requests += 1;
        self.observation_request(now, from, token, msg);
        let route = match self.route(msg) {
            Ok(route) => route,
            Err(answer) => return self.answer_locally(now, from, token, msg, &answer),
        };
        if let Some(answer) = self.over_capacity(route.upstream) {
            return self.answer_locally(now, from, token, msg, &answer);
        }
        let lifetime = self.config.upstream_exchange_lifetime;
        let upstream = &mut self.upstreams[usize::from(route.upstream)];
        let Some(mid) = upstream.mids.allocate(now, lifetime) else {
            if let Some(refused) = upstream.mids.refused(now) {
                log::warn!(
                    "upstream {}: all 65536 Message IDs used within --upstream-exchange-lifetime \
                     ({lifetime:?}); {refused} request(s) answered 5.03 since the last warning",
                    upstream.addr
                );
            }
            let answer = self.unavailable("upstream Message ID space exhausted");
            return self.answer_locally(now, from, token, msg, &answer);
        };
        self.start_exchange(now, from, token, msg, route, mid);
    }

    /// A client retransmission: answered from state, never forwarded again.
    fn on_duplicate(&mut self, key: ExchangeKey, msg: &Message) {
        self.counters.client_duplicates += 1;
        if msg.msg_type() != MessageType::Con {
            return;
        }
        let Some(x) = self.get(key) else { return };
        let piggybacked = !x.client_acked && !x.answer.is_empty();
        if piggybacked {
            let (client, answer) = (x.client, x.answer.to_vec());
            self.push(Destination::Client(client), answer);
        } else if x.client_acked {
            let (client, mid) = (x.client, x.client_mid);
            let mut buf = Vec::with_capacity(4);
            crate::coap::empty_ack(&mut buf, mid);
            self.push(Destination::Client(client), buf);
        } else {
            // Still waiting upstream and the client is impatient: acknowledge now and answer
            // separately (RFC 7252 §5.2.2).
            self.send_empty_ack(key);
        }
    }

    /// RFC 7641 §3.6: a new registration or a deregistration with the token of a live
    /// observation ends that observation; the request itself is then forwarded as usual.
    fn observation_request(
        &mut self,
        now: Timestamp,
        from: SocketAddr,
        token: Token,
        msg: &Message,
    ) {
        if msg.option(OBSERVE).is_none() {
            return;
        }
        if let Some(&old) = self.observers.get(&(from, token)) {
            self.end_observation(now, old);
        }
    }

    /// Option checks (RFC 7252 §5.4.1, §5.7.1, RFC 8768) and the upstream for this request.
    fn route(&self, msg: &Message) -> Result<Route, LocalAnswer> {
        let mut hop_limit = None;
        for (number, value) in msg.options() {
            if number == HOP_LIMIT {
                hop_limit = Some(value);
            } else if !option::is_known(number)
                && (option::is_critical(number) || option::is_unsafe(number))
            {
                // Unknown elective safe-to-forward options are simply forwarded (§5.7.1).
                return Err(unknown_option_answer(number));
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

    /// 5.03 with Max-Age when too many exchanges are in flight (RFC 7252 §4.7, §5.9.3.4).
    fn over_capacity(&self, upstream: UpstreamId) -> Option<LocalAnswer> {
        if self.draining {
            return Some(self.unavailable("shutting down"));
        }
        let up = &self.upstreams[usize::from(upstream)];
        if self.inflight >= self.config.max_inflight {
            return Some(self.unavailable("too many requests in flight"));
        }
        if up.inflight >= self.config.max_inflight_per_upstream {
            return Some(self.unavailable("too many requests in flight to this upstream"));
        }
        None
    }

    fn unavailable(&self, why: &'static str) -> LocalAnswer {
        LocalAnswer {
            code: Code::SERVICE_UNAVAILABLE,
            max_age: Some(
                self.config
                    .overload_max_age
                    .as_secs()
                    .clamp(1, u64::from(u32::MAX)) as u32,
            ),
            diagnostic: why,
        }
    }

    /// Answers a request itself, through a finished exchange like any other answer: a
    /// retransmission then gets this answer again (RFC 7252 §4.5) rather than a second
    /// chance upstream once the load that caused a 5.03 is gone.
    fn answer_locally(
        &mut self,
        now: Timestamp,
        from: SocketAddr,
        token: Token,
        msg: &Message,
        a: &LocalAnswer,
    ) {
        self.count_local(a.code);
        let key = self.insert_exchange(now, from, token, msg, State::Finished, false);
        let mut buf = Vec::with_capacity(16 + a.diagnostic.len());
        encode_local(&mut buf, MessageType::Ack, 0, token.as_bytes(), a);
        self.answer_client(now, key, &buf, false);
    }

    fn count_local(&mut self, code: Code) {
        let c = &mut self.counters;
        match code {
            Code::SERVICE_UNAVAILABLE => c.service_unavailable_5_03 += 1,
            Code::BAD_OPTION => c.bad_option_4_02 += 1,
            Code::BAD_GATEWAY => c.bad_gateway_5_02 += 1,
            Code::FORBIDDEN => c.forbidden_4_03 += 1,
            Code::NOT_FOUND => c.not_found_4_04 += 1,
            Code::PROXYING_NOT_SUPPORTED => c.proxying_not_supported_5_05 += 1,
            Code::HOP_LIMIT_REACHED => c.hop_limit_5_08 += 1,
            _ => c.bad_request_4_00 += 1,
        }
    }

    /// Creates the exchange, sends the request upstream and arms its timers.
    fn start_exchange(
        &mut self,
        now: Timestamp,
        from: SocketAddr,
        token: Token,
        msg: &Message,
        route: Route,
        mid: u16,
    ) {
        let non_idempotent = matches!(msg.code(), Code::POST | Code::PATCH | Code::IPATCH);
        let policy = self.policy(non_idempotent);
        let key = self.insert_exchange(now, from, token, msg, State::Waiting, non_idempotent);
        // Our token: the slot index (for O(1) lookup) and 32 random bits (RFC 7252 §5.3.1).
        let mut token_bytes = [0u8; 8];
        token_bytes[..4].copy_from_slice(&key.index.to_be_bytes());
        token_bytes[4..].copy_from_slice(&rand::Rng::random::<u32>(&mut self.rng).to_be_bytes());
        let upstream_token = Token::new(&token_bytes).expect("8 bytes");
        let mut request = Vec::with_capacity(msg.as_bytes().len() + 16);
        encode_upstream_request(&mut request, msg, mid, &upstream_token, &route);
        let x = self.get_mut(key).expect("just inserted");
        x.upstream = route.upstream;
        x.upstream_mid = mid;
        x.upstream_mid_live = true;
        x.upstream_token = upstream_token;
        x.request = request.into_boxed_slice();
        x.wants_observe = msg.option(OBSERVE).and_then(|v| decode_uint(v).ok()) == Some(0);
        self.by_upstream_mid.insert((route.upstream, mid), key);
        self.upstreams[usize::from(route.upstream)].inflight += 1;
        self.inflight += 1;
        self.counters.forwarded += 1;
        let total = self.arm(key, TimerKind::TotalTimeout, now + policy.total_timeout);
        let ack = (msg.msg_type() == MessageType::Con)
            .then(|| self.arm(key, TimerKind::AckDelay, now + self.config.ack_delay));
        let x = self.get_mut(key).expect("just inserted");
        x.total_timer = Some(total);
        x.ack_timer = ack;
        self.transmit_upstream(now, key);
    }
}

/// The upstream copy of a client request: our MID and token, Proxy-Uri/Proxy-Scheme replaced
/// by Uri-* options, Hop-Limit decremented (RFC 7252 §5.7.2, RFC 8768 §3).
fn encode_upstream_request(
    out: &mut Vec<u8>,
    msg: &Message,
    mid: u16,
    token: &Token,
    route: &Route,
) {
    let replacing_uri = route.target.is_some();
    let mut b = rewrite(
        out,
        msg,
        (MessageType::Con, mid, token.as_bytes()),
        |b, n, v| {
            let uri_option = matches!(
                n,
                option::URI_HOST | option::URI_PORT | option::URI_PATH | option::URI_QUERY
            );
            if !(n == PROXY_URI
                || n == PROXY_SCHEME
                || n == HOP_LIMIT
                || (replacing_uri && uri_option))
            {
                b.option(n, v);
            }
        },
    );
    b.option(HOP_LIMIT, &encode_uint(u32::from(route.hop_limit)));
    if let Some(t) = &route.target {
        if !t.host_is_ip() {
            b.option(option::URI_HOST, t.host.as_bytes());
        }
        if t.port != route::COAP_PORT {
            b.option(option::URI_PORT, &encode_uint(u32::from(t.port)));
        }
        for segment in &t.path {
            b.option(option::URI_PATH, segment);
        }
        for q in &t.query {
            b.option(option::URI_QUERY, q);
        }
    }
    // The input parsed and Uri-* values come from a bounded URI, so this cannot fail.
    let _ = b.finish();
}

/// RFC 7252 §5.4.1: an unrecognised critical option gets 4.02; §5.7.1: an unrecognised
/// elective but unsafe option gets 5.02 at a proxy.
fn unknown_option_answer(number: u16) -> LocalAnswer {
    match option::is_critical(number) {
        true => answer(Code::BAD_OPTION, "unrecognised critical option"),
        false => answer(Code::BAD_GATEWAY, "unrecognised unsafe option"),
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
        diagnostic,
    }
}
