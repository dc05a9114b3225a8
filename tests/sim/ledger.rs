//! What every request went through, as seen by its client, by the proxy's output (tapped
//! before loss) and by the upstreams; and the invariants over it.

use std::collections::HashMap;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use backoffd::coap::params::{EXCHANGE_LIFETIME, MAX_RETRANSMIT, NON_LIFETIME};
use backoffd::coap::{Code, Message, MessageType};
use backoffd::proxy::{
    Counters, Destination, EndpointId, Peer, ProxyConfig, RetryPolicy, Transmit,
};
use backoffd::time::Timestamp;

use super::client::{Client, Tok};
use super::freshness::{not_found, resource_of, Vouched};
use super::upstream::request_id;
use super::{client_id, ClientId};

/// Whether an upstream's answer is request `id`'s own: it echoes the id, or for a GET of a
/// shared resource it names that resource.
fn is_its_own(id: ReqId, r: &Req, msg: &Message) -> bool {
    match (r.resource, r.method, msg.code()) {
        (Some(res), Code::GET, Code::CONTENT) => resource_of(msg.payload()) == Some(res),
        (Some(res), Code::GET, Code::NOT_FOUND) => msg.payload() == not_found(res).as_bytes(),
        _ => msg.payload() == format!("id={id}").as_bytes(),
    }
}

/// Index of a client request in the ledger.
pub type ReqId = u32;

/// Violations kept verbatim; the rest are only counted.
const KEPT: usize = 20;
/// Timers are exact to the nanosecond; this only absorbs float rounding in jitter products.
const SLACK: Duration = Duration::from_micros(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    /// The first answer: its code and a hash of code and payload.
    Answered(Code, u64),
    GaveUp,
}

/// One client request.
pub struct Req {
    pub client: ClientId,
    pub mid: u16,
    pub token: Tok,
    pub method: Code,
    pub con: bool,
    pub upstream: u16,
    /// The shared resource it names, if requests share them (`Scenario::resources`).
    pub resource: Option<u32>,
    pub sent_at: Timestamp,
    pub outcome: Outcome,
    /// First copy delivered to the proxy.
    pub proxy_rx: Option<Timestamp>,
    pub empty_acked: bool,
    pub piggybacked: bool,
    /// The proxy's first final answer to the client (before loss), and its hash.
    pub final_at: Option<Timestamp>,
    pub final_hash: u64,
    pub con_answers: u32,
    /// The client's ACK of a separate CON answer reached the proxy.
    pub answer_acked: bool,
    /// The request upstream: copies sent, first and last send, its endpoint, MID and token.
    pub up_sends: u32,
    pub first_up: Option<Timestamp>,
    pub last_up: Timestamp,
    pub up_endpoint: EndpointId,
    pub up_mid: u16,
    pub up_token: u64,
    /// Times a deduplicating upstream executed it.
    pub executions: u32,
}

impl Req {
    pub fn new(
        client: ClientId,
        mid: u16,
        token: Tok,
        method: Code,
        con: bool,
        upstream: u16,
        now: Timestamp,
    ) -> Req {
        Req {
            client,
            mid,
            token,
            method,
            con,
            upstream,
            resource: None,
            sent_at: now,
            outcome: Outcome::Pending,
            proxy_rx: None,
            empty_acked: false,
            piggybacked: false,
            final_at: None,
            final_hash: 0,
            con_answers: 0,
            answer_acked: false,
            up_sends: 0,
            first_up: None,
            last_up: Timestamp::ZERO,
            up_endpoint: EndpointId(u32::MAX),
            up_mid: 0,
            up_token: 0,
            executions: 0,
        }
    }
}

/// How the requests of a run ended.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub answered_2xx: u64,
    pub answered_4_04: u64,
    pub answered_5_02: u64,
    pub answered_5_03: u64,
    pub answered_5_04: u64,
    pub gave_up: u64,
    /// Answers that reached a client after it gave up.
    pub late: u64,
    /// Copies of an answer a client already had (all identical, or a violation).
    pub duplicate_answers: u64,
    /// Executions at upstreams that do not deduplicate (each copy runs again).
    pub naive_executions: u64,
    /// Most copies of one request sent upstream, for GET/PUT and for POST.
    pub max_sends_idempotent: u32,
    pub max_sends_post: u32,
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "clients: 2.xx {}, 4.04 {}, 5.02 {}, 5.03 {}, 5.04 {}, gave up {}, late {}, dup answers {}; \
             max upstream copies GET/PUT {} POST {}; naive executions {}",
            self.answered_2xx,
            self.answered_4_04,
            self.answered_5_02,
            self.answered_5_03,
            self.answered_5_04,
            self.gave_up,
            self.late,
            self.duplicate_answers,
            self.max_sends_idempotent,
            self.max_sends_post,
            self.naive_executions
        )
    }
}

pub struct Ledger {
    reqs: Vec<Req>,
    pub violations: Vec<String>,
    pub violation_count: u64,
    policy: RetryPolicy,
    non_idempotent: RetryPolicy,
    mid_lifetime: Duration,
    /// Requests by the token they went upstream with, on their endpoint.
    up_tokens: HashMap<(EndpointId, u64), ReqId>,
    /// Upstream MIDs in use: (endpoint, MID) -> (request, first send).
    up_mids: HashMap<(EndpointId, u16), (ReqId, Timestamp)>,
    /// When each endpoint last sent a request for the first time (its newest MID).
    endpoint_last_mid: HashMap<EndpointId, Timestamp>,
    /// MIDs of the proxy's CON/NON to clients: (client, MID) -> (request, sent, type).
    client_mids: HashMap<(ClientId, u16), (ReqId, Timestamp, MessageType)>,
    /// Final answers the proxy sent, by code (one per request).
    finals: HashMap<Code, u64>,
    /// What the origins promised about shared resources, for the freshness check.
    vouched: Vouched,
    tally: Tally,
}

fn hash_answer(msg: &Message) -> u64 {
    let mut h = DefaultHasher::new();
    (msg.code().0, msg.payload()).hash(&mut h);
    h.finish()
}

fn token_u64(token: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..token.len()].copy_from_slice(token);
    u64::from_be_bytes(b) ^ token.len() as u64
}

impl Ledger {
    pub fn new(config: &ProxyConfig) -> Ledger {
        Ledger {
            reqs: Vec::new(),
            violations: Vec::new(),
            violation_count: 0,
            policy: config.policy,
            non_idempotent: config.non_idempotent,
            mid_lifetime: config.upstream_exchange_lifetime,
            up_tokens: HashMap::new(),
            up_mids: HashMap::new(),
            endpoint_last_mid: HashMap::new(),
            client_mids: HashMap::new(),
            finals: HashMap::new(),
            vouched: Vouched::default(),
            tally: Tally::default(),
        }
    }

    pub fn open(&mut self, req: Req) -> ReqId {
        self.reqs.push(req);
        (self.reqs.len() - 1) as ReqId
    }

    pub fn req(&self, id: ReqId) -> &Req {
        &self.reqs[id as usize]
    }

    pub fn violation(&mut self, now: Timestamp, what: String) {
        self.violation_count += 1;
        if self.violations.len() < KEPT {
            let t = now.saturating_since(Timestamp::ZERO).as_secs_f64();
            self.violations.push(format!("t={t:.6}s {what}"));
        }
    }

    fn policy_for(&self, method: Code) -> RetryPolicy {
        match method {
            Code::POST => self.non_idempotent,
            _ => self.policy,
        }
    }

    /// A datagram of request `tag` reached the proxy: the request or the ACK of its answer.
    pub fn proxy_received(&mut self, now: Timestamp, tag: Option<ReqId>, bytes: &[u8]) {
        let Some(r) = tag.map(|id| &mut self.reqs[id as usize]) else {
            return;
        };
        match Message::parse(bytes).map(|m| m.msg_type()) {
            Ok(MessageType::Ack) => r.answer_acked = true,
            _ => _ = r.proxy_rx.get_or_insert(now),
        }
    }

    pub fn gave_up(&mut self, id: ReqId) {
        self.reqs[id as usize].outcome = Outcome::GaveUp;
    }

    pub fn executed(&mut self, id: ReqId, dedup: bool) {
        match dedup {
            true => self.reqs[id as usize].executions += 1,
            false => self.tally.naive_executions += 1,
        }
    }

    /// A client processed an answer to `id`: the first one is its final answer; any later one
    /// must be the same answer again.
    pub fn client_answer(&mut self, now: Timestamp, id: ReqId, msg: &Message) {
        let hash = hash_answer(msg);
        let code = msg.code();
        let r = &mut self.reqs[id as usize];
        match r.outcome {
            Outcome::Pending => r.outcome = Outcome::Answered(code, hash),
            Outcome::GaveUp => return self.tally.late += 1,
            Outcome::Answered(_, h) if h == hash => return self.tally.duplicate_answers += 1,
            Outcome::Answered(first, _) => {
                let text = format!(
                    "request {id}: client got a second, different answer {code} after {first}"
                );
                return self.violation(now, text);
            }
        }
        let from_upstream = matches!(
            code,
            Code::CONTENT | Code::CHANGED | Code::CREATED | Code::NOT_FOUND
        );
        let from_proxy = matches!(
            code,
            Code::BAD_GATEWAY | Code::SERVICE_UNAVAILABLE | Code::GATEWAY_TIMEOUT
        );
        if from_upstream && !is_its_own(id, r, msg) {
            let text = format!("request {id}: client got another request's answer: {msg:?}");
            self.violation(now, text);
        } else if !from_upstream && !from_proxy {
            self.violation(now, format!("request {id}: unexpected answer code {code}"));
        }
    }

    /// A datagram from upstream `up` reached the proxy's endpoint `ep`: an answer to a
    /// request still waiting is a promise about its resource (one for a request already
    /// answered goes unused).
    pub fn proxy_heard(&mut self, now: Timestamp, (up, ep): (u16, EndpointId), bytes: &[u8]) {
        let Ok(msg) = Message::parse(bytes) else {
            return;
        };
        let request = self.up_tokens.get(&(ep, token_u64(msg.token())));
        if request.is_some_and(|&id| self.reqs[id as usize].final_at.is_none()) {
            self.vouched.heard(now, up, &msg);
        }
    }

    /// The proxy closed endpoint `ep`: none of its Message IDs may be reserved any more, or
    /// the next socket on that port could repeat one within the upstream's window.
    pub fn endpoint_closed(&mut self, now: Timestamp, ep: EndpointId) {
        if let Some(&last) = self.endpoint_last_mid.get(&ep) {
            if now - last < self.mid_lifetime {
                let text = format!(
                    "endpoint {ep:?} closed {:?} after its last Message ID was used",
                    now - last
                );
                self.violation(now, text);
            }
        }
    }

    /// The tap on everything the proxy sends, before the network loses any of it; `server`
    /// is the upstream an upstream endpoint is connected to.
    pub fn proxy_sent(
        &mut self,
        now: Timestamp,
        t: &Transmit,
        server: Option<u16>,
        clients: &[Client],
    ) {
        let Ok(msg) = Message::parse(&t.payload) else {
            return self.violation(
                now,
                format!("proxy sent a malformed datagram to {:?}", t.to),
            );
        };
        match (t.to, server) {
            (Destination::Upstream(ep), Some(up)) => self.upstream_sent(now, ep, up, &msg),
            (Destination::Upstream(ep), None) => self.violation(
                now,
                format!("sent out of endpoint {ep:?}, which is not open"),
            ),
            (Destination::Client(Peer::Udp(addr)), _) => {
                let c = client_id(addr).expect("a simulated client");
                self.client_sent(now, c, &msg, &clients[c as usize]);
            }
            (Destination::Client(peer), _) => {
                self.violation(now, format!("sent to {peer}, not a simulated client"))
            }
        }
    }

    fn upstream_sent(&mut self, now: Timestamp, ep: EndpointId, up: u16, msg: &Message) {
        if !msg.code().is_request() {
            return; // ACK/RST of an upstream answer: no token, no request
        }
        let Some(id) = request_id(msg) else {
            return self.violation(
                now,
                format!("proxy sent a request upstream without its id: {msg:?}"),
            );
        };
        let (mid, token) = (msg.message_id(), token_u64(msg.token()));
        let r = &self.reqs[id as usize];
        let mut problems = Vec::new();
        if let Some(at) = r.final_at {
            problems.push(format!(
                "sent upstream {:?} after its final answer",
                now - at
            ));
        }
        if r.upstream != up || msg.code() != r.method || msg.msg_type() != MessageType::Con {
            problems.push(format!(
                "forwarded as {:?} {} to upstream {up}",
                msg.msg_type(),
                msg.code()
            ));
        }
        if r.up_sends > 0 && (ep, mid, token) != (r.up_endpoint, r.up_mid, r.up_token) {
            problems.push(
                "forwarded again as a new exchange (client retransmission re-forwarded)".into(),
            );
        }
        let policy = self.policy_for(r.method);
        if r.up_sends > 0 {
            let gap = now - r.last_up;
            let nominal = policy.nominal_delay(r.up_sends);
            let (lo, hi) = (
                nominal.mul_f64(1.0 - policy.jitter),
                nominal.mul_f64(1.0 + policy.jitter),
            );
            if gap + SLACK < lo || gap > hi + SLACK {
                problems.push(format!(
                    "retransmission {} after {gap:?}, policy says {lo:?}..{hi:?}",
                    r.up_sends
                ));
            }
        }
        if r.up_sends > policy.max_retries {
            problems.push(format!(
                "copy {} sent upstream, max_retries is {}",
                r.up_sends + 1,
                policy.max_retries
            ));
        }
        if r.up_sends == 0 {
            if let Some(&(other, first)) = self.up_mids.get(&(ep, mid)) {
                if other != id && now - first < self.mid_lifetime {
                    problems.push(format!(
                        "upstream MID {mid} on {ep:?} reused {:?} after request {other}",
                        now - first
                    ));
                }
            }
            self.up_mids.insert((ep, mid), (id, now));
            self.up_tokens.insert((ep, token), id);
            self.endpoint_last_mid.insert(ep, now);
        }
        let r = &mut self.reqs[id as usize];
        if r.up_sends == 0 {
            (r.up_endpoint, r.up_mid, r.up_token, r.first_up) = (ep, mid, token, Some(now));
        }
        r.up_sends += 1;
        r.last_up = now;
        for p in problems {
            self.violation(now, format!("request {id}: {p}"));
        }
    }

    fn client_sent(&mut self, now: Timestamp, c: ClientId, msg: &Message, client: &Client) {
        let (ty, mid) = (msg.msg_type(), msg.message_id());
        let by_mid = client.by_mid.get(&mid).copied();
        let by_token = client.by_token.get(&Tok::new(msg.token())).copied();
        let problem = match (ty, msg.code()) {
            (MessageType::Ack, code) => match by_mid {
                None => Some(format!(
                    "client {c}: ACK with a MID the client never used: {msg:?}"
                )),
                Some(id) if code.is_empty() => self.empty_ack_sent(id),
                Some(id) => self.piggyback_sent(now, id, msg),
            },
            (MessageType::Con | MessageType::Non, code) if code.is_response() => match by_token {
                None => Some(format!(
                    "client {c}: answer with a token the client never used: {msg:?}"
                )),
                Some(id) => self.separate_sent(now, id, msg),
            },
            _ => Some(format!(
                "client {c}: proxy sent an RST, a request or an empty message: {msg:?}"
            )),
        };
        if let Some(p) = problem {
            self.violation(now, p);
        }
    }

    fn empty_ack_sent(&mut self, id: ReqId) -> Option<String> {
        let r = &mut self.reqs[id as usize];
        r.empty_acked = true;
        match (r.con, r.piggybacked) {
            (false, _) => Some(format!("request {id}: empty ACK to a NON request")),
            (_, true) => Some(format!(
                "request {id}: empty ACK after the piggybacked answer"
            )),
            _ => None,
        }
    }

    fn piggyback_sent(&mut self, now: Timestamp, id: ReqId, msg: &Message) -> Option<String> {
        let r = &mut self.reqs[id as usize];
        r.piggybacked = true;
        if msg.token() != r.token.as_bytes() || msg.message_id() != r.mid {
            return Some(format!(
                "request {id}: piggybacked answer without the client's token and MID: {msg:?}"
            ));
        }
        if r.empty_acked || !r.con {
            let why = if r.con {
                "after an empty ACK (RFC 7252 §5.2.2)"
            } else {
                "to a NON request"
            };
            return Some(format!("request {id}: piggybacked answer {why}"));
        }
        self.final_sent(now, id, msg)
    }

    fn separate_sent(&mut self, now: Timestamp, id: ReqId, msg: &Message) -> Option<String> {
        let (ty, mid) = (msg.msg_type(), msg.message_id());
        let r = &mut self.reqs[id as usize];
        let c = r.client;
        if ty == MessageType::Con {
            r.con_answers += 1;
        }
        let problem = match (r.con, ty) {
            (true, MessageType::Con) if !r.empty_acked => {
                Some("separate CON answer before the empty ACK")
            }
            (true, MessageType::Non) => Some("NON answer to a CON request"),
            (false, MessageType::Con) => Some("CON answer to a NON request"),
            _ if r.con_answers > 1 + MAX_RETRANSMIT => {
                Some("CON answer sent more than 1 + MAX_RETRANSMIT times")
            }
            _ => None,
        };
        if let Some(p) = problem {
            return Some(format!("request {id}: {p}"));
        }
        // RFC 7252 §4.4: no MID reuse towards one endpoint while it may still deduplicate it.
        match self.client_mids.get(&(c, mid)) {
            Some(&(other, at, old_ty)) if other != id => {
                let window = if old_ty == MessageType::Con {
                    EXCHANGE_LIFETIME
                } else {
                    NON_LIFETIME
                };
                if now - at < window {
                    return Some(format!(
                        "request {id}: MID {mid} reused towards client {c} {:?} after request {other}'s answer",
                        now - at
                    ));
                }
                self.client_mids.insert((c, mid), (id, now, ty));
            }
            Some(_) => {}
            None => {
                self.client_mids.insert((c, mid), (id, now, ty));
            }
        }
        self.final_sent(now, id, msg)
    }

    /// The proxy sent a final answer (a copy, perhaps): all copies must be the same answer.
    fn final_sent(&mut self, now: Timestamp, id: ReqId, msg: &Message) -> Option<String> {
        let hash = hash_answer(msg);
        let r = &mut self.reqs[id as usize];
        match r.final_at {
            None => {
                (r.final_at, r.final_hash) = (Some(now), hash);
                *self.finals.entry(msg.code()).or_default() += 1;
                let resource = r.resource.map(|res| (r.upstream, res))?;
                match (r.method, msg.code()) {
                    (Code::GET, _) => self
                        .vouched
                        .check(now, resource, msg)
                        .map(|p| format!("request {id}: {p}")),
                    (_, Code::CHANGED | Code::CREATED) => {
                        self.vouched.invalidated(now, resource);
                        None
                    }
                    _ => None,
                }
            }
            Some(_) if r.final_hash == hash => None,
            Some(_) => Some(format!(
                "request {id}: proxy sent a second, different final answer {}",
                msg.code()
            )),
        }
    }

    /// End-of-run checks over every request; returns the tally.
    pub fn check_end(&mut self, end: Timestamp, counters: &Counters) -> Tally {
        let mut forwarded = 0u64;
        let mut problems = Vec::new();
        for (id, r) in self.reqs.iter().enumerate() {
            let t = &mut self.tally;
            match r.outcome {
                Outcome::Pending => problems.push(format!("request {id}: client never finished")),
                Outcome::GaveUp => t.gave_up += 1,
                Outcome::Answered(code, _) => match code {
                    Code::BAD_GATEWAY => t.answered_5_02 += 1,
                    Code::SERVICE_UNAVAILABLE => t.answered_5_03 += 1,
                    Code::GATEWAY_TIMEOUT => t.answered_5_04 += 1,
                    Code::NOT_FOUND => t.answered_4_04 += 1,
                    _ => t.answered_2xx += 1,
                },
            }
            if r.proxy_rx.is_some() && r.final_at.is_none() {
                problems.push(format!(
                    "request {id}: reached the proxy but was never answered"
                ));
            }
            // A CON answer never acknowledged goes 1 + MAX_RETRANSMIT times, or fewer when the
            // proxy withheld retransmissions to a client that had not proven its address (past
            // 3x what it sent, issue 24), never more.
            let withheld = counters.proof.amplification_dropped > 0;
            let expected = match withheld {
                true => r.con_answers <= 1 + MAX_RETRANSMIT,
                false => r.con_answers == 1 + MAX_RETRANSMIT,
            };
            if r.con_answers > 0 && !r.answer_acked && !expected {
                problems.push(format!(
                    "request {id}: CON answer sent {} times, never acknowledged",
                    r.con_answers
                ));
            }
            if r.executions > 1 {
                problems.push(format!(
                    "request {id}: deduplicating upstream executed it {} times",
                    r.executions
                ));
            }
            let policy = match r.method {
                Code::POST => self.non_idempotent,
                _ => self.policy,
            };
            forwarded += u64::from(r.first_up.is_some());
            // An answer to a client that has not proven its address may wait for the proof
            // (issue 24): at most EXCHANGE_LIFETIME more, when the proxy held or withheld any.
            let proof_wait = match withheld || counters.proof.answers_held_for_proof > 0 {
                true => backoffd::coap::params::EXCHANGE_LIFETIME,
                false => Duration::ZERO,
            };
            if let (Some(first), Some(fin)) = (r.first_up, r.final_at) {
                if fin - first > policy.total_timeout + SLACK + proof_wait {
                    problems.push(format!(
                        "request {id}: answered {:?} after forwarding, total_timeout {:?}",
                        fin - first,
                        policy.total_timeout
                    ));
                }
            }
            match r.method {
                Code::POST => t.max_sends_post = t.max_sends_post.max(r.up_sends),
                _ => t.max_sends_idempotent = t.max_sends_idempotent.max(r.up_sends),
            }
        }
        if forwarded != counters.traffic.forwarded {
            problems.push(format!(
                "{forwarded} requests forwarded on the wire, counters say {}",
                counters.traffic.forwarded
            ));
        }
        problems.extend(self.check_counters(counters));
        for p in problems {
            self.violation(end, p);
        }
        self.tally.clone()
    }

    /// The answer counters match the final answers on the wire: one per request, the
    /// upstream's own codes as relayed, the proxy's own codes as made.
    fn check_counters(&self, c: &Counters) -> Vec<String> {
        let sent = |codes: &[Code]| {
            codes
                .iter()
                .map(|k| self.finals.get(k).copied().unwrap_or(0))
                .sum::<u64>()
        };
        let expected = [
            (
                "relayed_2xx",
                c.traffic.relayed_2xx,
                sent(&[Code::CONTENT, Code::CHANGED, Code::CREATED]),
            ),
            (
                "relayed_4xx",
                c.traffic.relayed_4xx,
                sent(&[Code::NOT_FOUND]),
            ),
            (
                "relayed_5xx (no upstream answers 5.xx)",
                c.traffic.relayed_5xx,
                0,
            ),
            (
                "bad_gateway_5_02",
                c.own_answers.bad_gateway_5_02,
                sent(&[Code::BAD_GATEWAY]),
            ),
            (
                "service_unavailable_5_03",
                c.own_answers.service_unavailable_5_03,
                sent(&[Code::SERVICE_UNAVAILABLE]),
            ),
            (
                "gateway_timeout_5_04",
                c.own_answers.gateway_timeout_5_04,
                sent(&[Code::GATEWAY_TIMEOUT]),
            ),
        ];
        expected
            .into_iter()
            .filter(|(_, counted, sent)| counted != sent)
            .map(|(name, counted, sent)| {
                format!("counters().{name} = {counted}, final answers sent: {sent}")
            })
            .collect()
    }
}
