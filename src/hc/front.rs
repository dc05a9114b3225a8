//! The cross-proxy's core: HTTP requests in, CoAP datagrams to the proxy engine out, the
//! engine's answers in, HTTP answers out, in each connection's request order.
//!
//! It is a CoAP client of the engine ([`crate::proxy::Peer::Local`]): each HTTP connection
//! is an in-process client of its own, so the engine's per-client limits, deduplication,
//! retry policy, cache and metrics apply to HTTP requests as to CoAP ones. Between the two
//! nothing is lost on a network, but the engine may still drop an answer (its bounds), so a
//! request is retransmitted like any CON (RFC 7252 §4.2) until acknowledged, and every
//! exchange has a deadline: no answer in time is a 504.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use slab::Slab;

use crate::coap::params::{ACK_TIMEOUT, MAX_RETRANSMIT};
use crate::coap::{empty_ack, rst, Message, MessageType};
use crate::http1::driver::ConnId;
use crate::http1::Request;
use crate::proxy::LocalClient;
use crate::time::Timestamp;

use super::answer::HttpAnswer;
use super::exchange::{Exchange, Next, Transfer};
use super::request::{self, Refusal};
use super::uri::Mapping;

/// The cross-proxy's settings.
#[derive(Clone, Debug)]
pub struct HcConfig {
    /// Where the default mapping is anchored (RFC 8075 §5.3): `/hc/`.
    pub prefix: String,
    /// Forward mode: `PREFIX/coap://host:port/...` reaches allowed targets.
    pub forward: bool,
    /// Reverse mode: any other path reaches the proxy's upstream.
    pub reverse: bool,
    /// The largest response body reassembled from Block2; larger is 502.
    pub max_body: usize,
    /// The largest CoAP request the engine takes; larger bodies go in Block1 blocks.
    pub max_request: usize,
    /// An HTTP request's whole CoAP side (every block) must be answered within this; else
    /// 504. Streams are exempt once they started.
    pub timeout: Duration,
    /// `--http-cors ORIGIN`: sent as Access-Control-Allow-Origin, and preflights answered.
    pub cors: Option<String>,
    /// Event streams open at once; more are 503.
    pub max_streams: usize,
}

/// What the cross-proxy counts, for metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HcCounters {
    /// Answers by request method and status.
    pub answers: BTreeMap<(&'static str, u16), u64>,
    /// Requests the HTTP connection refused by itself, by status: 400, 408 (late head or
    /// body, or a body behind the minimum rate), 413, 431, 503 (past the body budget), ...
    pub refused: BTreeMap<u16, u64>,
}

/// One HTTP connection's CoAP identity and its requests in order.
struct Conn {
    client: LocalClient,
    next_mid: u16,
    /// Requests in order: answers go out from the front.
    queue: VecDeque<Queued>,
    /// The HTTP client went away: only deregistrations are left.
    gone: bool,
}

/// A request waiting for its answer to be written.
enum Queued {
    /// Being served by the exchange in this slot.
    Exchange(usize),
    /// Answered here (a refusal, a preflight).
    Answer(&'static str, HttpAnswer),
}

/// An exchange with its place: connection, token, request out, deadline.
struct Slot {
    conn: ConnId,
    method: &'static str,
    token: [u8; 8],
    exchange: Exchange,
    out: Option<InFlight>,
    deadline: Option<Timestamp>,
}

/// A CON request with the engine, kept for retransmission until acknowledged.
struct InFlight {
    mid: u16,
    bytes: Vec<u8>,
    retransmits: u32,
    /// When to send it again; `None` once acknowledged.
    retransmit_at: Option<Timestamp>,
}

/// See the module docs.
pub struct HcFront {
    config: HcConfig,
    conns: BTreeMap<ConnId, Conn>,
    by_client: BTreeMap<LocalClient, ConnId>,
    slots: Slab<Slot>,
    next_client: u64,
    next_token: u32,
    to_engine: VecDeque<(LocalClient, Vec<u8>)>,
    answers: VecDeque<(ConnId, HttpAnswer)>,
    counters: HcCounters,
    /// Request-body bytes the live exchanges hold (the sum of their `request.body` lengths),
    /// kept as exchanges come and go: the HTTP server's body budget counts them.
    held_body: usize,
}

impl HcFront {
    /// A cross-proxy with no connections yet.
    pub fn new(config: HcConfig) -> Self {
        HcFront {
            config,
            conns: BTreeMap::new(),
            by_client: BTreeMap::new(),
            slots: Slab::new(),
            next_client: 1,
            next_token: 0,
            to_engine: VecDeque::new(),
            answers: VecDeque::new(),
            counters: HcCounters::default(),
            held_body: 0,
        }
    }

    /// A new HTTP connection: it is a CoAP client of its own.
    pub fn open(&mut self, conn: ConnId) {
        let client = LocalClient::new(self.next_client);
        self.next_client += 1;
        let mid = (self.next_client as u16).wrapping_mul(7919);
        self.by_client.insert(client, conn);
        let c = Conn {
            client,
            next_mid: mid,
            queue: VecDeque::new(),
            gone: false,
        };
        self.conns.insert(conn, c);
    }

    /// The HTTP connection closed: streams deregister, the rest is dropped.
    pub fn close(&mut self, now: Timestamp, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.gone = true;
        let queue = std::mem::take(&mut c.queue);
        for key in queue.into_iter().filter_map(|q| match q {
            Queued::Exchange(key) => Some(key),
            Queued::Answer(..) => None,
        }) {
            let Some(s) = self.slots.get_mut(key) else {
                continue;
            };
            if !s.exchange.leave() {
                self.remove(key);
                continue;
            }
            s.deadline = Some(now + self.config.timeout);
            self.send(now, key);
            self.keep_in_queue(conn, Queued::Exchange(key));
        }
        self.forget_if_done(conn);
    }

    /// Shutting down: every event stream ends now (its HTTP answer is completed), so its
    /// connection can close within the drain time; requests in flight still get answers.
    pub fn end_streams(&mut self) {
        let conns: Vec<ConnId> = self.conns.keys().copied().collect();
        for (_, s) in self.slots.iter_mut() {
            if let Transfer::Streaming { ended, .. } = &mut s.exchange.transfer {
                *ended = true;
            }
        }
        for conn in conns {
            self.flush(conn);
        }
    }

    /// An HTTP request on `conn`, in the connection's order.
    pub fn request(&mut self, now: Timestamp, conn: ConnId, req: &Request) {
        let method = method_label(&req.method);
        let extra = self.extra_fields();
        if let Some(answer) = self.preflight(req) {
            return self.answer_now(conn, method, answer);
        }
        let translated = request::translate(req, &self.mapping());
        let request = match translated {
            Ok(r)
                if r.kind == request::Kind::Events && self.streams() >= self.config.max_streams =>
            {
                let refusal = Refusal {
                    status: 503,
                    text: "too many event streams",
                };
                return self.answer_now(conn, method, HttpAnswer::refusal(refusal, extra));
            }
            Ok(r) => r,
            Err(refusal) => {
                let answer = HttpAnswer::refusal(refusal, extra);
                return self.answer_now(conn, method, answer);
            }
        };
        let exchange = Exchange::new(request, self.config.max_request, self.config.max_body);
        let key = self.insert(now, conn, method, exchange);
        self.send(now, key);
    }

    /// A datagram the engine sent to `to`, one of our in-process clients.
    pub fn from_engine(&mut self, now: Timestamp, to: LocalClient, bytes: &[u8]) {
        let Ok(msg) = Message::parse(bytes) else {
            return;
        };
        let conn = self.by_client.get(&to).copied();
        match msg.msg_type() {
            MessageType::Ack => {
                if let Some(key) = conn.and_then(|c| self.by_mid(c, msg.message_id())) {
                    self.on_ack(now, key, &msg);
                }
            }
            MessageType::Con | MessageType::Non if msg.code().is_response() => {
                let key = self.by_token(msg.token());
                // A CON is acknowledged; one for nobody here, CON or NON, is reset, which ends
                // an observation whose HTTP client went before it was set up (RFC 7641 §3.6).
                let reply: Option<fn(&mut Vec<u8>, u16)> = match (key, msg.msg_type()) {
                    (Some(_), MessageType::Con) => Some(empty_ack),
                    (Some(_), _) => None,
                    (None, _) => Some(rst),
                };
                if let Some(reply) = reply {
                    let mut out = Vec::with_capacity(4);
                    reply(&mut out, msg.message_id());
                    self.to_engine.push_back((to, out));
                }
                if let Some(key) = key {
                    self.on_separate(now, key, &msg);
                }
            }
            _ => {}
        }
        if let Some(conn) = conn {
            self.flush(conn);
        }
    }

    /// The next datagram for the engine, and which of our in-process clients sends it.
    pub fn poll_to_engine(&mut self) -> Option<(LocalClient, Vec<u8>)> {
        self.to_engine.pop_front()
    }

    /// Whether datagrams for the engine wait.
    pub fn has_to_engine(&self) -> bool {
        !self.to_engine.is_empty()
    }

    /// The next HTTP answer to write, for its connection.
    pub fn poll_answer(&mut self) -> Option<(ConnId, HttpAnswer)> {
        self.answers.pop_front()
    }

    /// The earliest retransmission or deadline.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        (self.slots.iter())
            .flat_map(|(_, s)| [s.deadline, s.out.as_ref().and_then(|o| o.retransmit_at)])
            .flatten()
            .min()
    }

    /// Retransmits what is due and answers 504 for exchanges past their deadline.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let due: Vec<usize> = (self.slots.iter())
            .filter(|(_, s)| s.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| k)
            .collect();
        for key in due {
            self.expire(key);
        }
        let resend: Vec<usize> = (self.slots.iter())
            .filter(|(_, s)| {
                (s.out.as_ref()).is_some_and(|o| o.retransmit_at.is_some_and(|t| t <= now))
            })
            .map(|(k, _)| k)
            .collect();
        for key in resend {
            self.retransmit(now, key);
        }
    }

    /// Requests being served (streams included) and open streams, for metrics.
    pub fn in_flight(&self) -> (usize, usize) {
        (self.slots.len(), self.streams())
    }

    /// Event streams registered, or registering, or deregistering.
    fn streams(&self) -> usize {
        (self.slots.iter())
            .filter(|(_, s)| s.exchange.request.kind == request::Kind::Events)
            .count()
    }

    /// Answers so far, by method and status.
    pub fn counters(&self) -> &HcCounters {
        &self.counters
    }

    /// Bytes of HTTP request bodies the exchanges hold until they end (each request's body
    /// is kept whole for its Block1 blocks and retransmissions).
    pub fn held_body_bytes(&self) -> usize {
        self.held_body
    }

    /// A request its HTTP connection refused by itself, counted by status.
    pub fn count_refusal(&mut self, status: u16) {
        *self.counters.refused.entry(status).or_default() += 1;
    }

    fn mapping(&self) -> Mapping<'_> {
        let prefix = self.config.prefix.as_str();
        match (self.config.forward, self.config.reverse) {
            (true, true) => Mapping::Both { prefix },
            (true, false) => Mapping::Forward { prefix },
            _ => Mapping::Reverse,
        }
    }

    /// CORS (Fetch standard, "CORS protocol"): the allowed origin on every answer.
    fn extra_fields(&self) -> Vec<(&'static str, String)> {
        match &self.config.cors {
            Some(origin) => vec![("Access-Control-Allow-Origin", origin.clone())],
            None => Vec::new(),
        }
    }

    /// A CORS preflight, answered here when CORS is on; without it OPTIONS is 501 like any
    /// method CoAP lacks (RFC 7252 §10.2.1).
    fn preflight(&self, req: &Request) -> Option<HttpAnswer> {
        let origin = self
            .config
            .cors
            .as_ref()
            .filter(|_| req.method == "OPTIONS")?;
        let fields = vec![
            ("Access-Control-Allow-Origin", origin.clone()),
            (
                "Access-Control-Allow-Methods",
                "GET, HEAD, POST, PUT, DELETE, PATCH, FETCH".into(),
            ),
            (
                "Access-Control-Allow-Headers",
                "Content-Type, Accept, If-Match, If-None-Match".into(),
            ),
            ("Access-Control-Max-Age", "600".into()),
        ];
        Some(HttpAnswer::Full {
            status: 204,
            fields,
            content_type: String::new(),
            body: Vec::new(),
        })
    }

    fn insert(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        method: &'static str,
        exchange: Exchange,
    ) -> usize {
        self.next_token = self.next_token.wrapping_add(1);
        let entry = self.slots.vacant_entry();
        let key = entry.key();
        let mut token = [0u8; 8];
        token[..4].copy_from_slice(&(key as u32).to_be_bytes());
        token[4..].copy_from_slice(&self.next_token.to_be_bytes());
        self.held_body += exchange.request.body.len();
        entry.insert(Slot {
            conn,
            method,
            token,
            exchange,
            out: None,
            deadline: Some(now + self.config.timeout),
        });
        self.keep_in_queue(conn, Queued::Exchange(key));
        key
    }

    fn keep_in_queue(&mut self, conn: ConnId, queued: Queued) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.queue.push_back(queued);
        }
    }

    /// An answer made here, queued in order behind the connection's earlier requests.
    fn answer_now(&mut self, conn: ConnId, method: &'static str, answer: HttpAnswer) {
        self.keep_in_queue(conn, Queued::Answer(method, answer));
        self.flush(conn);
    }

    /// Sends the exchange's current request with a new Message ID.
    fn send(&mut self, now: Timestamp, key: usize) {
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        let Some(c) = self.conns.get_mut(&s.conn) else {
            return;
        };
        let mid = c.next_mid;
        c.next_mid = mid.wrapping_add(1);
        let bytes = s.exchange.encode(mid, &s.token);
        self.to_engine.push_back((c.client, bytes.clone()));
        s.out = Some(InFlight {
            mid,
            bytes,
            retransmits: 0,
            retransmit_at: Some(now + ACK_TIMEOUT),
        });
    }

    fn retransmit(&mut self, now: Timestamp, key: usize) {
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        let Some(client) = self.conns.get(&s.conn).map(|c| c.client) else {
            return;
        };
        let Some(out) = s.out.as_mut() else { return };
        if out.retransmits == MAX_RETRANSMIT {
            out.retransmit_at = None;
            return;
        }
        out.retransmits += 1;
        out.retransmit_at = Some(now + ACK_TIMEOUT * (1 << out.retransmits));
        self.to_engine.push_back((client, out.bytes.clone()));
    }

    fn on_ack(&mut self, now: Timestamp, key: usize, msg: &Message<'_>) {
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        if let Some(out) = s.out.as_mut() {
            out.retransmit_at = None;
        }
        if !msg.code().is_empty() {
            self.on_answer(now, key, msg);
        }
    }

    /// A separate answer or a notification for the exchange at `key`.
    fn on_separate(&mut self, now: Timestamp, key: usize, msg: &Message<'_>) {
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        match s.exchange.is_stream() {
            true => s.exchange.on_notification(msg),
            false => self.on_answer(now, key, msg),
        }
    }

    fn on_answer(&mut self, now: Timestamp, key: usize, msg: &Message<'_>) {
        let extra = self.extra_fields();
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        s.out = None;
        let next = s.exchange.on_answer(msg, &extra);
        match (&s.exchange.transfer, next) {
            (_, Next::Send) => self.send(now, key),
            (Transfer::Leaving, Next::Wait) => self.remove(key),
            (Transfer::Streaming { .. }, Next::Wait) => s.deadline = None,
            _ => {}
        }
    }

    /// No answer in time: 504 for a request, the end for a deregistration.
    fn expire(&mut self, key: usize) {
        let extra = self.extra_fields();
        let Some(s) = self.slots.get_mut(key) else {
            return;
        };
        let conn = s.conn;
        if matches!(s.exchange.transfer, Transfer::Leaving) {
            self.remove(key);
            return self.forget_if_done(conn);
        }
        let refusal = Refusal {
            status: 504,
            text: "no CoAP answer in time",
        };
        s.exchange.transfer = Transfer::Answered(HttpAnswer::refusal(refusal, extra));
        s.out = None;
        s.deadline = None;
        self.flush(conn);
    }

    /// Writes what the connection's front exchanges have ready, in order.
    fn flush(&mut self, conn: ConnId) {
        loop {
            let front = self
                .conns
                .get_mut(&conn)
                .and_then(|c| match c.queue.front() {
                    Some(Queued::Exchange(key)) => Some(Ok(*key)),
                    Some(Queued::Answer(..)) => c.queue.pop_front().map(Err),
                    None => None,
                });
            match front {
                None => return self.forget_if_done(conn),
                Some(Ok(key)) if !self.flush_front(conn, key) => return,
                Some(Ok(_)) => {}
                Some(Err(Queued::Answer(method, answer))) => self.write(conn, method, answer),
                Some(Err(Queued::Exchange(_))) => {}
            }
        }
    }

    fn write(&mut self, conn: ConnId, method: &'static str, answer: HttpAnswer) {
        let status = status_of(&answer);
        *self.counters.answers.entry((method, status)).or_default() += 1;
        self.answers.push_back((conn, answer));
    }

    /// Writes what the front exchange has; true if it is done and the next may follow.
    fn flush_front(&mut self, conn: ConnId, key: usize) -> bool {
        let extra = self.extra_fields();
        let Some(s) = self.slots.get_mut(key) else {
            self.pop_front(conn);
            return true;
        };
        match &mut s.exchange.transfer {
            Transfer::Answered(_) => {
                let Transfer::Answered(answer) =
                    std::mem::replace(&mut s.exchange.transfer, Transfer::Leaving)
                else {
                    unreachable!("matched above");
                };
                let method = s.method;
                self.write(conn, method, answer);
                self.remove(key);
                self.pop_front(conn);
                true
            }
            Transfer::Streaming {
                head_sent,
                pending,
                ended,
            } => {
                if !*head_sent {
                    *head_sent = true;
                    *self.counters.answers.entry((s.method, 200)).or_default() += 1;
                    self.answers
                        .push_back((conn, HttpAnswer::StreamStart { fields: extra }));
                }
                if !pending.is_empty() {
                    let data = pending.drain(..).flatten().collect();
                    self.answers.push_back((conn, HttpAnswer::StreamData(data)));
                }
                if !*ended {
                    return false;
                }
                self.answers.push_back((conn, HttpAnswer::StreamEnd));
                self.remove(key);
                self.pop_front(conn);
                true
            }
            _ => false,
        }
    }

    fn pop_front(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.queue.pop_front();
        }
    }

    fn remove(&mut self, key: usize) {
        if let Some(slot) = self.slots.try_remove(key) {
            self.held_body -= slot.exchange.request.body.len();
        }
    }

    /// A closed connection whose deregistrations are all answered is forgotten.
    fn forget_if_done(&mut self, conn: ConnId) {
        let done = self.conns.get(&conn).is_some_and(|c| {
            c.gone
                && c.queue.iter().all(|q| match q {
                    Queued::Exchange(k) => !self.slots.contains(*k),
                    Queued::Answer(..) => true,
                })
        });
        if done {
            if let Some(c) = self.conns.remove(&conn) {
                self.by_client.remove(&c.client);
            }
        }
    }

    fn by_mid(&self, conn: ConnId, mid: u16) -> Option<usize> {
        let c = self.conns.get(&conn)?;
        c.queue.iter().find_map(|q| match q {
            Queued::Exchange(k) => (self.slots.get(*k))
                .and_then(|s| s.out.as_ref())
                .is_some_and(|o| o.mid == mid)
                .then_some(*k),
            Queued::Answer(..) => None,
        })
    }

    /// Our tokens start with the slot's key; the whole token must match.
    fn by_token(&self, token: &[u8]) -> Option<usize> {
        let key = u32::from_be_bytes(token.get(..4)?.try_into().ok()?) as usize;
        (self.slots.get(key)?.token == token).then_some(key)
    }
}

/// The method as a metrics label: CoAP's methods and OPTIONS by name, the rest "other".
fn method_label(method: &str) -> &'static str {
    const KNOWN: [&str; 8] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "FETCH", "OPTIONS",
    ];
    KNOWN.into_iter().find(|&m| m == method).unwrap_or("other")
}

fn status_of(answer: &HttpAnswer) -> u16 {
    match answer {
        HttpAnswer::Full { status, .. } => *status,
        _ => 200,
    }
}
